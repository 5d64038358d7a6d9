/* A small strict JSON reader for the cluster file: RFC 8259 only (no
 * comments, no trailing commas, no NaN), duplicate keys rejected, depth and
 * size limited, every value remembers its line:column for later messages.
 *
 *   gr_json *root;
 *   if (gr_json_parse(text, len, "c.json", &root, &err) != GR_OK) puts(err.msg);
 *   const gr_json *jobs = gr_json_get(root, "jobs");   // NULL when absent
 *   gr_json_free(root);
 *
 * Ownership: gr_json_parse returns a tree the caller frees with gr_json_free. */
#ifndef GR_PLACER_JSON_INTERNAL_H
#define GR_PLACER_JSON_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "core/gr_status.h"

#define GR_JSON_MAX_DEPTH 64
#define GR_JSON_MAX_BYTES (16u << 20)

typedef enum gr_json_type {
  GR_JSON_NULL,
  GR_JSON_BOOL,
  GR_JSON_NUMBER,
  GR_JSON_STRING,
  GR_JSON_ARRAY,
  GR_JSON_OBJECT
} gr_json_type;

typedef struct gr_json gr_json;
struct gr_json {
  gr_json_type type;
  int line, col;
  bool b;
  double num;
  char *str;      /* STRING: NUL-terminated UTF-8 (may not contain NUL: rejected) */
  int n;          /* ARRAY / OBJECT: number of items */
  gr_json *items; /* ARRAY / OBJECT values */
  char **keys;    /* OBJECT keys */
};

gr_status gr_json_parse(const char *text, size_t len, const char *name, gr_json **out,
                        gr_error *err);
void gr_json_free(gr_json *v);
/* Member of an object, NULL when absent or v is not an object. */
const gr_json *gr_json_get(const gr_json *v, const char *key);
const char *gr_json_type_name(gr_json_type t);

#endif

/* Shared by the JSON forms of a cluster (cluster_json.c: the cluster file
 * and the form detection; cluster_tf.c: ClusterSpec and TF_CONFIG): text is
 * parsed by jansson, and a reader keeps the JSON path of the value being
 * read so that an error names the path and its line:column in the text
 * (jansson keeps no positions per value: the reader finds them again in the
 * text, which jansson has already checked).
 *
 *   gr_jreader r = {.name = "c.json", .text = text, .len = len, .err = err};
 *   json_t *root;
 *   GR_TRY(gr_jreader_load(&r, &root));                // syntax: "c.json:3:7: ..."
 *   gr_jreader_push_key(&r, "jobs");
 *   ... return gr_jreader_fail(&r, "must be %s", "x");  // "c.json:2:11: jobs: must be x"
 *   gr_jreader_pop(&r);
 *   json_decref(root);
 *
 * Ownership: the reader borrows name, text, err and the pushed keys (they
 * must outlive their push); gr_jreader_load gives a new reference. */
#ifndef GR_PLACER_CLUSTER_JSON_INTERNAL_H
#define GR_PLACER_CLUSTER_JSON_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "placer_internal.h"

#define GR_CLUSTER_JSON_MAX_BYTES (16u << 20)
#define GR_JREADER_MAX_DEPTH      16

typedef struct gr_jstep {
  const char *key; /* member of an object; NULL: element `index` of an array */
  int index;
} gr_jstep;

typedef struct gr_jreader {
  const char *name; /* file name or "TF_CONFIG": the start of every message */
  const char *text;
  size_t len;
  gr_error *err;
  gr_jstep path[GR_JREADER_MAX_DEPTH];
  int depth;
} gr_jreader;

/* Parses r->text (strict JSON, duplicate keys refused, at most
 * GR_CLUSTER_JSON_MAX_BYTES); a syntax error is "name:line:col: what". */
gr_status gr_jreader_load(gr_jreader *r, json_t **root);
void gr_jreader_push_key(gr_jreader *r, const char *key);
void gr_jreader_push_index(gr_jreader *r, int index);
void gr_jreader_pop(gr_jreader *r);
/* GR_ERR_INVALID_ARGUMENT "name:line:col: path: message" for the value at
 * the current path (its first character). */
gr_status gr_jreader_fail(const gr_jreader *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Puts the current path's location before an error a cluster builder call
 * left in r->err (its "cluster: " is dropped); returns s. */
gr_status gr_jreader_wrap(const gr_jreader *r, gr_status s);
/* The value must have JSON type t (JSON_REAL: any number, JSON_TRUE: any
 * boolean); what (may be NULL) names it in the message: "a task", ... */
gr_status gr_jreader_want(const gr_jreader *r, const json_t *v, json_type t, const char *what);
/* Every member of obj (at the current path) is one of keys[0 .. n-1]. */
gr_status gr_jreader_check_keys(gr_jreader *r, const json_t *obj, const char *const *keys, int n);
const char *gr_jreader_type_name(const json_t *v);

/* cluster_tf.c: a ClusterSpec object (the current path) into c: one task per
 * "host:port", with its address, host and one default CPU device. */
gr_status gr_cluster_read_spec(gr_jreader *r, const json_t *spec, gr_cluster *c);
/* cluster_tf.c: TF_CONFIG (root object) into c; "task" is required when
 * self is not NULL, checked when present, and written to *self. */
gr_status gr_cluster_read_tf_config(gr_jreader *r, const json_t *root, gr_cluster *c,
                                    gr_cluster_self *self);

#endif

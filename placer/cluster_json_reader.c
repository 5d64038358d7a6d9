/* The JSON reader of the cluster forms: jansson parses, this file turns its
 * syntax errors into "name:line:col: what" and finds the line:column of the
 * value at a JSON path for the errors found after parsing. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cluster_json_internal.h"

#define NOWHERE ((size_t)-1)

/* line:column of byte offset off, as jansson counts them: lines from 1,
 * columns from 1 in characters (UTF-8 continuation bytes do not count). */
static void line_col(const char *s, size_t off, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < off; i++) {
    if (s[i] == '\n') {
      (*line)++;
      *col = 1;
    } else if (((unsigned char)s[i] & 0xc0) != 0x80) {
      (*col)++;
    }
  }
}

/* Copies a jansson message, making bytes that are not printable ASCII '?'. */
static void printable(char *dst, size_t cap, const char *src) {
  size_t n = 0;
  for (; *src && n + 1 < cap; src++) {
    unsigned char c = (unsigned char)*src;
    dst[n++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
  }
  dst[n] = '\0';
}

gr_status gr_jreader_load(gr_jreader *r, json_t **root) {
  *root = NULL;
  if (r->len > GR_CLUSTER_JSON_MAX_BYTES)
    return gr_error_set(r->err, GR_ERR_INVALID_ARGUMENT, "%s: larger than %u bytes", r->name,
                        GR_CLUSTER_JSON_MAX_BYTES);
  json_error_t e;
  *root = json_loadb(r->text, r->len, JSON_REJECT_DUPLICATES, &e);
  if (*root) return GR_OK;
  if (json_error_code(&e) == json_error_out_of_memory)
    return gr_error_set(r->err, GR_ERR_RESOURCE_EXHAUSTED, "%s: out of memory", r->name);
  int line = e.line, col = e.column < 1 ? 1 : e.column;
  /* jansson points at the last character of the offending token ("near
   * 'TOKEN'"); when that token is what the text holds just before
   * e.position, name its first character instead */
  const char *near = strstr(e.text, " near '");
  if (strstr(e.text, " near end of file") && e.position >= 0 && (size_t)e.position <= r->len)
    line_col(r->text, (size_t)e.position, &line, &col); /* where the text ends */
  else if (near && e.position > 0) {
    const char *tok = near + 7;
    size_t tn = strlen(tok);
    if (tn > 1 && tok[tn - 1] == '\'') {
      tn--;
      size_t end = (size_t)e.position;
      if (end <= r->len && tn <= end && memcmp(r->text + end - tn, tok, tn) == 0)
        line_col(r->text, end - tn, &line, &col);
    }
  }
  char what[JSON_ERROR_TEXT_LENGTH];
  printable(what, sizeof what, e.text);
  if (line < 1) return gr_error_set(r->err, GR_ERR_INVALID_ARGUMENT, "%s: %s", r->name, what);
  return gr_error_set(r->err, GR_ERR_INVALID_ARGUMENT, "%s:%d:%d: %s", r->name, line, col, what);
}

void gr_jreader_push_key(gr_jreader *r, const char *key) {
  if (r->depth < GR_JREADER_MAX_DEPTH) r->path[r->depth] = (gr_jstep){key, 0};
  r->depth++;
}

void gr_jreader_push_index(gr_jreader *r, int index) {
  if (r->depth < GR_JREADER_MAX_DEPTH) r->path[r->depth] = (gr_jstep){NULL, index};
  r->depth++;
}

void gr_jreader_pop(gr_jreader *r) {
  if (r->depth > 0) r->depth--;
}

/* ---- finding a path in text that jansson has accepted ---------------------- */

static size_t skip_ws(const char *s, size_t n, size_t i) {
  while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
  return i;
}

/* i at the opening quote; returns the index after the closing one. */
static size_t skip_string(const char *s, size_t n, size_t i) {
  for (i++; i < n && s[i] != '"'; i++)
    if (s[i] == '\\') i++;
  return i + 1;
}

static size_t skip_value(const char *s, size_t n, size_t i) {
  if (s[i] == '"') return skip_string(s, n, i);
  if (s[i] != '{' && s[i] != '[') {
    while (i < n && !strchr(",}] \t\r\n", s[i])) i++;
    return i;
  }
  int depth = 0;
  while (i < n) {
    char c = s[i];
    if (c == '"') {
      i = skip_string(s, n, i);
      continue;
    }
    i++;
    if (c == '{' || c == '[') depth++;
    if ((c == '}' || c == ']') && --depth == 0) break;
  }
  return i;
}

/* Whether the string token s[i .. j) (quotes included) decodes to key. */
static bool key_is(const char *s, size_t i, size_t j, const char *key) {
  if (!memchr(s + i, '\\', j - i))
    return j - i - 2 == strlen(key) && memcmp(s + i + 1, key, j - i - 2) == 0;
  json_t *k = json_loadb(s + i, j - i, JSON_DECODE_ANY, NULL);
  bool same = json_is_string(k) && strcmp(json_string_value(k), key) == 0;
  json_decref(k);
  return same;
}

/* Byte offset of the value at r's path, NOWHERE when not found. */
static size_t locate(const gr_jreader *r) {
  const char *s = r->text;
  size_t n = r->len, i = skip_ws(s, n, 0);
  int depth = r->depth < GR_JREADER_MAX_DEPTH ? r->depth : GR_JREADER_MAX_DEPTH;
  for (int d = 0; d < depth; d++) {
    const gr_jstep *st = &r->path[d];
    if (i >= n || s[i] != (st->key ? '{' : '[')) return NOWHERE;
    i = skip_ws(s, n, i + 1);
    for (int k = 0;; k++) {
      if (i >= n || s[i] == '}' || s[i] == ']') return NOWHERE;
      bool here = !st->key && k == st->index;
      if (st->key) {
        size_t j = skip_string(s, n, i);
        here = key_is(s, i, j, st->key);
        i = skip_ws(s, n, j);
        if (i >= n || s[i] != ':') return NOWHERE;
        i = skip_ws(s, n, i + 1);
      }
      if (here) break;
      i = skip_ws(s, n, skip_value(s, n, i));
      if (i >= n || s[i] != ',') return NOWHERE;
      i = skip_ws(s, n, i + 1);
    }
  }
  return i < n ? i : NOWHERE;
}

/* "jobs.worker[1].devices[0].flops" into buf. */
static void path_text(const gr_jreader *r, char *buf, size_t cap) {
  size_t m = 0;
  buf[0] = '\0';
  int depth = r->depth < GR_JREADER_MAX_DEPTH ? r->depth : GR_JREADER_MAX_DEPTH;
  for (int d = 0; d < depth && m < cap; d++) {
    const gr_jstep *st = &r->path[d];
    int w = st->key ? snprintf(buf + m, cap - m, "%s%.64s", d ? "." : "", st->key)
                    : snprintf(buf + m, cap - m, "[%d]", st->index);
    m += w > 0 ? (size_t)w : 0;
  }
}

/* "name:line:col: path" (or without the parts that are unknown or empty). */
static void where(const gr_jreader *r, char *buf, size_t cap) {
  char path[256];
  path_text(r, path, sizeof path);
  size_t off = locate(r);
  int m;
  if (off == NOWHERE) {
    m = snprintf(buf, cap, "%s", r->name);
  } else {
    int line, col;
    line_col(r->text, off, &line, &col);
    m = snprintf(buf, cap, "%s:%d:%d", r->name, line, col);
  }
  if (path[0] && m >= 0 && (size_t)m < cap) snprintf(buf + m, cap - (size_t)m, ": %s", path);
}

gr_status gr_jreader_fail(const gr_jreader *r, const char *fmt, ...) {
  char loc[512], what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  where(r, loc, sizeof loc);
  return gr_error_set(r->err, GR_ERR_INVALID_ARGUMENT, "%s: %s", loc, what);
}

gr_status gr_jreader_wrap(const gr_jreader *r, gr_status s) {
  if (!r->err) return s;
  char loc[512], what[GR_ERROR_MSG_MAX];
  const char *m = r->err->msg;
  if (strncmp(m, "cluster: ", 9) == 0) m += 9;
  snprintf(what, sizeof what, "%s", m);
  where(r, loc, sizeof loc);
  return gr_error_set(r->err, s, "%s: %s", loc, what);
}

const char *gr_jreader_type_name(const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_OBJECT:
      return "an object";
    case JSON_ARRAY:
      return "an array";
    case JSON_STRING:
      return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
      return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
      return "a boolean";
    default:
      return "null";
  }
}

gr_status gr_jreader_want(const gr_jreader *r, const json_t *v, json_type t, const char *what) {
  bool ok = t == JSON_REAL   ? json_is_number(v)
            : t == JSON_TRUE ? json_is_boolean(v)
                             : json_typeof(v) == t;
  if (ok) return GR_OK;
  static const char *names[] = {
      [JSON_OBJECT] = "an object",   [JSON_ARRAY] = "an array", [JSON_STRING] = "a string",
      [JSON_INTEGER] = "an integer", [JSON_REAL] = "a number",  [JSON_TRUE] = "a boolean",
      [JSON_FALSE] = "a boolean",    [JSON_NULL] = "null"};
  if (!what) return gr_jreader_fail(r, "must be %s, found %s", names[t], gr_jreader_type_name(v));
  return gr_jreader_fail(r, "%s must be %s, found %s", what, names[t], gr_jreader_type_name(v));
}

gr_status gr_jreader_check_keys(gr_jreader *r, const json_t *obj, const char *const *keys, int n) {
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)obj, key, v) {
    int k = 0;
    while (k < n && strcmp(key, keys[k]) != 0) k++;
    if (k < n) continue;
    char list[256] = "";
    size_t m = 0;
    for (k = 0; k < n && m < sizeof list; k++)
      m += (size_t)snprintf(list + m, sizeof list - m, "%s%s", k ? ", " : "", keys[k]);
    gr_jreader_push_key(r, key);
    gr_status s = gr_jreader_fail(r, "unknown key \"%.64s\" (allowed here: %s)", key, list);
    gr_jreader_pop(r);
    return s;
  }
  return GR_OK;
}

/* The strict JSON reader (see json_internal.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_internal.h"

typedef struct parser {
  const char *s, *name;
  size_t len, pos;
  int line, col;
  gr_error *err;
} parser;

static gr_status fail(parser *p, const char *fmt, const char *arg) {
  char what[256];
  snprintf(what, sizeof what, fmt, arg);
  return gr_error_set(p->err, GR_ERR_INVALID_ARGUMENT, "%s:%d:%d: %s", p->name, p->line, p->col,
                      what);
}

static int peek(const parser *p) {
  return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

static void advance(parser *p) {
  if (p->s[p->pos] == '\n') {
    p->line++;
    p->col = 1;
  } else {
    p->col++;
  }
  p->pos++;
}

static void skip_ws(parser *p) {
  for (int c = peek(p); c == ' ' || c == '\t' || c == '\n' || c == '\r'; c = peek(p)) advance(p);
}

static const char *char_desc(int c, char *buf) {
  if (c < 0) return "end of input";
  if (c >= 0x20 && c < 0x7f)
    snprintf(buf, 16, "'%c'", c);
  else
    snprintf(buf, 16, "byte 0x%02x", c);
  return buf;
}

static gr_status unexpected(parser *p, const char *expected) {
  char b[16], msg[160];
  snprintf(msg, sizeof msg, "expected %s, found %s", expected, char_desc(peek(p), b));
  return fail(p, "%s", msg);
}

static bool literal(parser *p, const char *word) {
  size_t n = strlen(word);
  if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0) return false;
  for (size_t i = 0; i < n; i++) advance(p);
  return true;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static gr_status read_hex4(parser *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval(peek(p));
    if (h < 0) return unexpected(p, "4 hex digits after \\u");
    v = v * 16 + (unsigned)h;
    advance(p);
  }
  *out = v;
  return GR_OK;
}

typedef struct sbuf {
  char *d;
  size_t n, cap;
} sbuf;

static bool sb_put(sbuf *b, char c) {
  if (b->n + 1 >= b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 32;
    char *d = realloc(b->d, cap);
    if (!d) return false;
    b->d = d;
    b->cap = cap;
  }
  b->d[b->n++] = c;
  b->d[b->n] = '\0';
  return true;
}

static bool sb_utf8(sbuf *b, unsigned cp) {
  if (cp < 0x80) return sb_put(b, (char)cp);
  if (cp < 0x800) return sb_put(b, (char)(0xc0 | (cp >> 6))) && sb_put(b, (char)(0x80 | (cp & 63)));
  if (cp < 0x10000)
    return sb_put(b, (char)(0xe0 | (cp >> 12))) && sb_put(b, (char)(0x80 | ((cp >> 6) & 63))) &&
           sb_put(b, (char)(0x80 | (cp & 63)));
  return sb_put(b, (char)(0xf0 | (cp >> 18))) && sb_put(b, (char)(0x80 | ((cp >> 12) & 63))) &&
         sb_put(b, (char)(0x80 | ((cp >> 6) & 63))) && sb_put(b, (char)(0x80 | (cp & 63)));
}

/* Length of a valid UTF-8 sequence starting at s (n bytes left), 0 if invalid. */
static int utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  int len;
  unsigned cp;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf)
    len = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef)
    len = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4)
    len = 4, cp = c & 0x07;
  else
    return 0;
  if ((size_t)len > n) return 0;
  for (int i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 63);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff))) return 0;
  if (cp >= 0xd800 && cp <= 0xdfff) return 0;
  return len;
}

static gr_status parse_string(parser *p, char **out) {
  sbuf b = {0};
  advance(p); /* opening quote */
  if (!sb_put(&b, '\0')) goto oom;
  b.n = 0;
  for (;;) {
    int c = peek(p);
    if (c < 0) {
      free(b.d);
      return fail(p, "%s", "unterminated string");
    }
    if (c == '"') {
      advance(p);
      break;
    }
    if (c < 0x20) {
      free(b.d);
      return fail(p, "%s", "control character in string (escape it)");
    }
    if (c == '\\') {
      advance(p);
      int e = peek(p);
      unsigned cp = 0;
      switch (e) {
        case '"':
          cp = '"';
          break;
        case '\\':
          cp = '\\';
          break;
        case '/':
          cp = '/';
          break;
        case 'b':
          cp = '\b';
          break;
        case 'f':
          cp = '\f';
          break;
        case 'n':
          cp = '\n';
          break;
        case 'r':
          cp = '\r';
          break;
        case 't':
          cp = '\t';
          break;
        case 'u': {
          advance(p);
          if (read_hex4(p, &cp) != GR_OK) goto bad;
          if (cp >= 0xdc00 && cp <= 0xdfff) {
            free(b.d);
            return fail(p, "%s", "unpaired low surrogate in \\u escape");
          }
          if (cp >= 0xd800 && cp <= 0xdbff) {
            unsigned lo;
            if (!literal(p, "\\u")) {
              free(b.d);
              return fail(p, "%s", "high surrogate not followed by \\u low surrogate");
            }
            if (read_hex4(p, &lo) != GR_OK) goto bad;
            if (lo < 0xdc00 || lo > 0xdfff) {
              free(b.d);
              return fail(p, "%s", "high surrogate not followed by a low surrogate");
            }
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          if (cp == 0) {
            free(b.d);
            return fail(p, "%s", "\\u0000 is not allowed in strings");
          }
          if (!sb_utf8(&b, cp)) goto oom;
          continue;
        }
        default: {
          char d[16], msg[64];
          snprintf(msg, sizeof msg, "invalid escape \\%s", char_desc(e, d));
          free(b.d);
          return fail(p, "%s", msg);
        }
      }
      advance(p);
      if (!sb_put(&b, (char)cp)) goto oom;
      continue;
    }
    int n = utf8_len((const unsigned char *)p->s + p->pos, p->len - p->pos);
    if (!n) {
      free(b.d);
      return fail(p, "%s", "invalid UTF-8 in string");
    }
    for (int i = 0; i < n; i++) {
      if (!sb_put(&b, p->s[p->pos])) goto oom;
      advance(p);
    }
  }
  *out = b.d;
  return GR_OK;
bad:
  free(b.d);
  return p->err ? p->err->code : GR_ERR_INVALID_ARGUMENT;
oom:
  free(b.d);
  return gr_error_set(p->err, GR_ERR_RESOURCE_EXHAUSTED, "%s: out of memory", p->name);
}

static gr_status parse_number(parser *p, double *out) {
  size_t start = p->pos;
  if (peek(p) == '-') advance(p);
  if (peek(p) == '0') {
    advance(p);
  } else if (peek(p) >= '1' && peek(p) <= '9') {
    while (peek(p) >= '0' && peek(p) <= '9') advance(p);
  } else {
    return unexpected(p, "a digit");
  }
  if (peek(p) == '.') {
    advance(p);
    if (!(peek(p) >= '0' && peek(p) <= '9')) return unexpected(p, "a digit after '.'");
    while (peek(p) >= '0' && peek(p) <= '9') advance(p);
  }
  if (peek(p) == 'e' || peek(p) == 'E') {
    advance(p);
    if (peek(p) == '+' || peek(p) == '-') advance(p);
    if (!(peek(p) >= '0' && peek(p) <= '9')) return unexpected(p, "a digit in the exponent");
    while (peek(p) >= '0' && peek(p) <= '9') advance(p);
  }
  char buf[64];
  size_t n = p->pos - start;
  if (n >= sizeof buf) return fail(p, "%s", "number too long");
  memcpy(buf, p->s + start, n);
  buf[n] = '\0';
  double v = strtod(buf, NULL);
  if (!isfinite(v)) return fail(p, "number '%s' out of range", buf);
  *out = v;
  return GR_OK;
}

static gr_status parse_value(parser *p, gr_json *v, int depth);

static gr_status parse_container(parser *p, gr_json *v, int depth, bool object) {
  int close = object ? '}' : ']';
  int cap = 0;
  advance(p);
  skip_ws(p);
  if (peek(p) == close) {
    advance(p);
    return GR_OK;
  }
  for (;;) {
    if (v->n == cap) {
      int ncap = cap ? cap * 2 : 4;
      gr_json *items = realloc(v->items, sizeof *items * (size_t)ncap);
      if (!items) goto oom;
      v->items = items;
      if (object) {
        char **keys = realloc(v->keys, sizeof *keys * (size_t)ncap);
        if (!keys) goto oom;
        v->keys = keys;
      }
      cap = ncap;
    }
    gr_json *item = &v->items[v->n];
    memset(item, 0, sizeof *item);
    if (object) {
      skip_ws(p);
      if (peek(p) != '"') return unexpected(p, v->n ? "a key string" : "a key string or '}'");
      int kl = p->line, kc = p->col;
      char *key = NULL;
      GR_TRY(parse_string(p, &key));
      for (int i = 0; i < v->n; i++)
        if (strcmp(v->keys[i], key) == 0) {
          p->line = kl, p->col = kc;
          gr_status s = fail(p, "duplicate key \"%.100s\"", key);
          free(key);
          return s;
        }
      v->keys[v->n] = key;
      skip_ws(p);
      if (peek(p) != ':') {
        v->n++; /* so the key is freed */
        item->type = GR_JSON_NULL;
        return unexpected(p, "':' after the key");
      }
      advance(p);
    }
    v->n++;
    GR_TRY(parse_value(p, item, depth + 1));
    skip_ws(p);
    int c = peek(p);
    if (c == ',') {
      advance(p);
      skip_ws(p);
      if (peek(p) == close) return fail(p, "%s", "trailing comma");
      continue;
    }
    if (c == close) {
      advance(p);
      return GR_OK;
    }
    return unexpected(p, object ? "',' or '}'" : "',' or ']'");
  }
oom:
  return gr_error_set(p->err, GR_ERR_RESOURCE_EXHAUSTED, "%s: out of memory", p->name);
}

static gr_status parse_value(parser *p, gr_json *v, int depth) {
  if (depth > GR_JSON_MAX_DEPTH) return fail(p, "%s", "nesting too deep");
  skip_ws(p);
  v->line = p->line;
  v->col = p->col;
  int c = peek(p);
  switch (c) {
    case '{':
      v->type = GR_JSON_OBJECT;
      return parse_container(p, v, depth, true);
    case '[':
      v->type = GR_JSON_ARRAY;
      return parse_container(p, v, depth, false);
    case '"':
      v->type = GR_JSON_STRING;
      return parse_string(p, &v->str);
    case 't':
    case 'f':
    case 'n':
      if (literal(p, "true"))
        v->type = GR_JSON_BOOL, v->b = true;
      else if (literal(p, "false"))
        v->type = GR_JSON_BOOL, v->b = false;
      else if (literal(p, "null"))
        v->type = GR_JSON_NULL;
      else
        return unexpected(p, "a value");
      return GR_OK;
    default:
      if (c == '-' || (c >= '0' && c <= '9')) {
        v->type = GR_JSON_NUMBER;
        return parse_number(p, &v->num);
      }
      return unexpected(p, "a value");
  }
}

static void free_inner(gr_json *v) {
  free(v->str);
  for (int i = 0; i < v->n; i++) {
    free_inner(&v->items[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
}

void gr_json_free(gr_json *v) {
  if (!v) return;
  free_inner(v);
  free(v);
}

gr_status gr_json_parse(const char *text, size_t len, const char *name, gr_json **out,
                        gr_error *err) {
  parser p = {
      .s = text, .name = name ? name : "<json>", .len = len, .line = 1, .col = 1, .err = err};
  *out = NULL;
  if (len > GR_JSON_MAX_BYTES)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s: larger than %u bytes", p.name,
                        GR_JSON_MAX_BYTES);
  gr_json *root = calloc(1, sizeof *root);
  if (!root) return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "%s: out of memory", p.name);
  gr_status s = parse_value(&p, root, 0);
  if (s == GR_OK) {
    skip_ws(&p);
    if (p.pos < p.len) s = unexpected(&p, "end of input after the value");
  }
  if (s != GR_OK) {
    gr_json_free(root);
    return s;
  }
  *out = root;
  return GR_OK;
}

const gr_json *gr_json_get(const gr_json *v, const char *key) {
  if (!v || v->type != GR_JSON_OBJECT) return NULL;
  for (int i = 0; i < v->n; i++)
    if (strcmp(v->keys[i], key) == 0) return &v->items[i];
  return NULL;
}

const char *gr_json_type_name(gr_json_type t) {
  static const char *names[] = {"null", "boolean", "number", "string", "array", "object"};
  return (unsigned)t < 6 ? names[t] : "?";
}

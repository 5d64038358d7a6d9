/* gr_wire_check_msgpack: a walk over msgpack bytes that reads only type
 * bytes and lengths (the values are left to msgpack-c), so that counts are
 * checked against the bytes present before msgpack-c allocates for them,
 * and the keys of each map, which must differ. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/gr_distributed.h"

typedef struct walk {
  const unsigned char *p, *end;
  gr_error *err;
} walk;

/* Big-endian unsigned of n bytes at w->p (the caller checked they exist). */
static uint64_t be(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = v << 8 | p[i];
  return v;
}

static gr_status value(walk *w, int depth, const unsigned char *start);

/* Skips n bytes of payload. */
static gr_status skip(walk *w, uint64_t n, const unsigned char *start) {
  if (n > (uint64_t)(w->end - w->p))
    return gr_error_set(w->err, GR_ERR_INVALID_ARGUMENT,
                        "msgpack: a length of %llu bytes at byte %zu runs past the end (%zu left)",
                        (unsigned long long)n, (size_t)(w->p - start), (size_t)(w->end - w->p));
  w->p += n;
  return GR_OK;
}

/* n items (2n for a map), each at least one byte. */
static gr_status items(walk *w, uint64_t n, int depth, const unsigned char *start) {
  if (depth <= 0)
    return gr_error_set(w->err, GR_ERR_INVALID_ARGUMENT, "msgpack: nested too deeply at byte %zu",
                        (size_t)(w->p - start));
  if (n > (uint64_t)(w->end - w->p))
    return gr_error_set(w->err, GR_ERR_INVALID_ARGUMENT,
                        "msgpack: %llu items at byte %zu, but only %zu bytes follow",
                        (unsigned long long)n, (size_t)(w->p - start), (size_t)(w->end - w->p));
  for (uint64_t i = 0; i < n; i++) GR_TRY(value(w, depth - 1, start));
  return GR_OK;
}

/* A map's key: a string by its text, any other kind by its bytes. */
typedef struct key_ref {
  const unsigned char *p;
  size_t n;
  size_t at; /* its offset in the message */
  int str;
} key_ref;

static key_ref key_of(const unsigned char *k, const unsigned char *end,
                      const unsigned char *start) {
  unsigned t = *k;
  int head = t >= 0xa0 && t <= 0xbf ? 1 : t == 0xd9 ? 2 : t == 0xda ? 3 : t == 0xdb ? 5 : 0;
  if (!head) return (key_ref){k, (size_t)(end - k), (size_t)(k - start), 0};
  return (key_ref){k + head, (size_t)(end - k) - (size_t)head, (size_t)(k - start), 1};
}

static int key_cmp(const void *a, const void *b) {
  const key_ref *x = a, *y = b;
  if (x->str != y->str) return x->str - y->str;
  if (x->n != y->n) return x->n < y->n ? -1 : 1;
  int c = x->n ? memcmp(x->p, y->p, x->n) : 0;
  if (c) return c;
  return x->at < y->at ? -1 : x->at > y->at;
}

static bool same_key(const key_ref *x, const key_ref *y) {
  return x->str == y->str && x->n == y->n && (!x->n || !memcmp(x->p, y->p, x->n));
}

/* The error for key k given a second time (a readable copy of a string key). */
static gr_status twice(walk *w, const key_ref *k) {
  if (!k->str)
    return gr_error_set(w->err, GR_ERR_INVALID_ARGUMENT,
                        "msgpack: a map gives a key of %zu bytes twice (again at byte %zu)", k->n,
                        k->at);
  char shown[48];
  size_t n = k->n < sizeof shown - 4 ? k->n : sizeof shown - 4;
  for (size_t i = 0; i < n; i++) shown[i] = k->p[i] >= 0x20 && k->p[i] < 0x7f ? (char)k->p[i] : '?';
  snprintf(shown + n, sizeof shown - n, "%s", n < k->n ? "..." : "");
  return gr_error_set(w->err, GR_ERR_INVALID_ARGUMENT,
                      "msgpack: a map gives key '%s' twice (again at byte %zu)", shown, k->at);
}

/* The n pairs of a map: keys and values walked, and no key given twice (a
 * message whose "id" came twice would mean whichever its reader looked at
 * first). A few keys are compared pairwise, more are sorted. */
static gr_status pairs(walk *w, uint64_t n, int depth, const unsigned char *start) {
  if (depth <= 0)
    return gr_error_set(w->err, GR_ERR_INVALID_ARGUMENT, "msgpack: nested too deeply at byte %zu",
                        (size_t)(w->p - start));
  if (n > (uint64_t)(w->end - w->p) / 2)
    return gr_error_set(w->err, GR_ERR_INVALID_ARGUMENT,
                        "msgpack: %llu items at byte %zu, but only %zu bytes follow",
                        (unsigned long long)(2 * n), (size_t)(w->p - start),
                        (size_t)(w->end - w->p));
  enum { FEW = 16 };
  key_ref few[FEW], *keys = n <= FEW ? few : malloc((size_t)n * sizeof *keys);
  if (!keys) return gr_error_set_oom(w->err);
  gr_status st = GR_OK;
  for (uint64_t i = 0; i < n && st == GR_OK; i++) {
    const unsigned char *k = w->p;
    st = value(w, depth - 1, start);
    if (st != GR_OK) break;
    keys[i] = key_of(k, w->p, start);
    if (n <= FEW)
      for (uint64_t j = 0; j < i && st == GR_OK; j++)
        if (same_key(&keys[j], &keys[i])) st = twice(w, &keys[i]);
    if (st == GR_OK) st = value(w, depth - 1, start);
  }
  if (st == GR_OK && n > FEW) {
    qsort(keys, (size_t)n, sizeof *keys, key_cmp); /* equal keys in message order */
    for (uint64_t i = 1; i < n && st == GR_OK; i++)
      if (same_key(&keys[i - 1], &keys[i])) st = twice(w, &keys[i]);
  }
  if (keys != few) free(keys);
  return st;
}

static gr_status value(walk *w, int depth, const unsigned char *start) {
  if (w->p >= w->end)
    return gr_error_set(w->err, GR_ERR_INVALID_ARGUMENT, "msgpack: truncated at byte %zu",
                        (size_t)(w->p - start));
  unsigned t = *w->p++;
  size_t left = (size_t)(w->end - w->p);
  /* fixed-size heads: the bytes of the length (or value) that follow */
  static const signed char head[32] = {/* 0xc0 nil */ 0,
                                       /* 0xc1 never used */ -1,
                                       /* bools */ 0,
                                       0,
                                       /* bin 8/16/32 */ 1,
                                       2,
                                       4,
                                       /* ext 8/16/32 */ -1,
                                       -1,
                                       -1,
                                       /* float 32/64 */ 4,
                                       8,
                                       /* uint 8..64 */ 1,
                                       2,
                                       4,
                                       8,
                                       /* int 8..64 */ 1,
                                       2,
                                       4,
                                       8,
                                       /* fixext */ -1,
                                       -1,
                                       -1,
                                       -1,
                                       -1,
                                       /* str 8/16/32 */ 1,
                                       2,
                                       4,
                                       /* array 16/32 */ 2,
                                       4,
                                       /* map 16/32 */ 2,
                                       4};
  if (t <= 0x7f || t >= 0xe0) return GR_OK; /* fixints */
  if (t >= 0x80 && t <= 0x8f) return pairs(w, t & 0x0f, depth, start);
  if (t >= 0x90 && t <= 0x9f) return items(w, t & 0x0f, depth, start);
  if (t >= 0xa0 && t <= 0xbf) return skip(w, t & 0x1f, start);
  int n = head[t - 0xc0];
  if (n < 0)
    return gr_error_set(w->err, GR_ERR_INVALID_ARGUMENT,
                        "msgpack: type byte 0x%02x at byte %zu is not accepted (ext or reserved)",
                        t, (size_t)(w->p - 1 - start));
  if ((size_t)n > left)
    return gr_error_set(w->err, GR_ERR_INVALID_ARGUMENT, "msgpack: truncated at byte %zu",
                        (size_t)(w->p - start));
  uint64_t len = be(w->p, n);
  w->p += n;
  switch (t) {
    case 0xc4:
    case 0xc5:
    case 0xc6: /* bin */
    case 0xd9:
    case 0xda:
    case 0xdb: /* str */
      return skip(w, len, start);
    case 0xdc:
    case 0xdd:
      return items(w, len, depth, start);
    case 0xde:
    case 0xdf:
      return pairs(w, len, depth, start);
    default: /* numbers: the n bytes were the value */
      return GR_OK;
  }
}

gr_status gr_wire_check_msgpack(const void *data, size_t size, int max_depth, gr_error *err) {
  walk w = {data, (const unsigned char *)data + size, err};
  GR_TRY(value(&w, max_depth, data));
  if (w.p != w.end)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "msgpack: %zu bytes after the end of the message at byte %zu",
                        (size_t)(w.end - w.p), (size_t)(w.p - (const unsigned char *)data));
  return GR_OK;
}

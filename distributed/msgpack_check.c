/* gr_wire_check_msgpack: a walk over msgpack bytes that reads only type
 * bytes and lengths (the values are left to msgpack-c), so that counts are
 * checked against the bytes present before msgpack-c allocates for them. */
#include <stdint.h>
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
  if (t >= 0x80 && t <= 0x8f) return items(w, 2 * (uint64_t)(t & 0x0f), depth, start);
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
      return items(w, 2 * len, depth, start);
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

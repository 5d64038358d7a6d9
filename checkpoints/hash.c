/* XXH64 (seed 0), written from the published algorithm description: the
 * checksum of checkpointed tensors (`xxhsum -H64` gives the same digest of
 * the same bytes). Streaming, so a tensor can be hashed chunk by chunk. */
#include <string.h>

#include "checkpoints/gr_checkpoints.h"

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static inline uint64_t rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}
static inline uint64_t rd64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8); /* little-endian hosts only (as is the tensor format) */
  return v;
}
static inline uint32_t rd32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static inline uint64_t round1(uint64_t acc, uint64_t in) {
  acc += in * P2;
  acc = rotl(acc, 31);
  return acc * P1;
}
static inline uint64_t merge(uint64_t acc, uint64_t v) {
  acc ^= round1(0, v);
  return acc * P1 + P4;
}

void gr_ckpt_hash_init(gr_ckpt_hasher *h) {
  memset(h, 0, sizeof *h);
  h->v[0] = P1 + P2;
  h->v[1] = P2;
  h->v[2] = 0;
  h->v[3] = (uint64_t)0 - P1;
}

static const unsigned char *stripes(uint64_t v[4], const unsigned char *p,
                                    const unsigned char *end) {
  uint64_t a = v[0], b = v[1], c = v[2], d = v[3];
  while (end - p >= 32) {
    a = round1(a, rd64(p));
    b = round1(b, rd64(p + 8));
    c = round1(c, rd64(p + 16));
    d = round1(d, rd64(p + 24));
    p += 32;
  }
  v[0] = a, v[1] = b, v[2] = c, v[3] = d;
  return p;
}

void gr_ckpt_hash_update(gr_ckpt_hasher *h, const void *data, size_t n) {
  const unsigned char *p = data, *end = p + n;
  if (n == 0) return;
  h->total += n;
  if (h->buf_len) {
    size_t take = 32 - h->buf_len;
    if (take > n) take = n;
    memcpy(h->buf + h->buf_len, p, take);
    h->buf_len += (unsigned)take;
    p += take;
    if (h->buf_len < 32) return;
    stripes(h->v, h->buf, h->buf + 32);
    h->buf_len = 0;
  }
  p = stripes(h->v, p, end);
  if (p < end) {
    memcpy(h->buf, p, (size_t)(end - p));
    h->buf_len = (unsigned)(end - p);
  }
}

uint64_t gr_ckpt_hash_final(const gr_ckpt_hasher *h) {
  uint64_t acc;
  if (h->total >= 32) {
    acc = rotl(h->v[0], 1) + rotl(h->v[1], 7) + rotl(h->v[2], 12) + rotl(h->v[3], 18);
    for (int i = 0; i < 4; i++) acc = merge(acc, h->v[i]);
  } else {
    acc = P5;
  }
  acc += h->total;
  const unsigned char *p = h->buf, *end = h->buf + h->buf_len;
  while (end - p >= 8) {
    acc ^= round1(0, rd64(p));
    acc = rotl(acc, 27) * P1 + P4;
    p += 8;
  }
  if (end - p >= 4) {
    acc ^= (uint64_t)rd32(p) * P1;
    acc = rotl(acc, 23) * P2 + P3;
    p += 4;
  }
  while (p < end) {
    acc ^= (uint64_t)(*p++) * P5;
    acc = rotl(acc, 11) * P1;
  }
  acc ^= acc >> 33;
  acc *= P2;
  acc ^= acc >> 29;
  acc *= P3;
  acc ^= acc >> 32;
  return acc;
}

uint64_t gr_ckpt_hash64(const void *data, size_t n) {
  gr_ckpt_hasher h;
  gr_ckpt_hash_init(&h);
  gr_ckpt_hash_update(&h, data, n);
  return gr_ckpt_hash_final(&h);
}

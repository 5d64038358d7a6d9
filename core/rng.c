#include "core/gr_rng.h"

#include <math.h>

uint64_t gr_rng_hash_name(const char *name) {
  uint64_t h = 1469598103934665603ull;
  for (; *name; name++) h = (h ^ (unsigned char)*name) * 1099511628211ull;
  return h;
}

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

gr_rng gr_rng_make(uint64_t seed, uint64_t node_hash, uint64_t step) {
  uint64_t k = mix64(seed * 0x9e3779b97f4a7c15ull ^ mix64(node_hash));
  gr_rng r = {{(uint32_t)k, (uint32_t)(k >> 32)}, {(uint32_t)step, (uint32_t)(step >> 32)}};
  return r;
}

void gr_rng_block(const gr_rng *r, uint64_t block, uint32_t out[4]) {
  uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32), c2 = r->ctr_hi[0], c3 = r->ctr_hi[1];
  uint32_t k0 = r->key[0], k1 = r->key[1];
  for (int round = 0; round < 10; round++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

float gr_rng_uniform_f32(const gr_rng *r, uint64_t i) {
  uint32_t w[4];
  gr_rng_block(r, i >> 2, w);
  return (float)(w[i & 3] >> 8) * (1.0f / 16777216.0f);
}

double gr_rng_uniform_f64(const gr_rng *r, uint64_t i) {
  uint32_t w[4];
  gr_rng_block(r, i >> 1, w);
  uint64_t v = ((uint64_t)w[(i & 1) * 2] << 32 | w[(i & 1) * 2 + 1]) >> 11;
  return (double)v * (1.0 / 9007199254740992.0);
}

double gr_rng_normal(const gr_rng *r, uint64_t i) {
  /* element i uses its own block (offset into a separate half of the space) */
  uint32_t w[4];
  gr_rng_block(r, i | (1ull << 63), w);
  double u1 = ((double)(((uint64_t)w[0] << 32 | w[1]) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
  double u2 = (double)(((uint64_t)w[2] << 32 | w[3]) >> 11) * (1.0 / 9007199254740992.0);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Counter-based random numbers (Philox4x32-10): the value at a position is a
 * pure function of (key, counter), so results do not depend on thread
 * scheduling and any step can be recomputed after a restart.
 *
 *   gr_rng r = gr_rng_make(seed, gr_rng_hash_name("layer1/w"), step);
 *   float u = gr_rng_uniform_f32(&r, 0);    // element 0 of this stream
 */
#ifndef GR_RNG_H
#define GR_RNG_H

#include <stdint.h>

typedef struct gr_rng {
  uint32_t key[2];
  uint32_t ctr_hi[2]; /* step; the low 64 bits of the counter index elements */
} gr_rng;

uint64_t gr_rng_hash_name(const char *name);
/* A stream for (seed, node hash, step). */
gr_rng gr_rng_make(uint64_t seed, uint64_t node_hash, uint64_t step);
/* Four 32-bit words for block `block` of the stream. */
void gr_rng_block(const gr_rng *r, uint64_t block, uint32_t out[4]);
/* Uniform in [0, 1) for element i (24 random bits for f32, 53 for f64). */
float gr_rng_uniform_f32(const gr_rng *r, uint64_t i);
double gr_rng_uniform_f64(const gr_rng *r, uint64_t i);
/* Standard normal for element i (Box-Muller on a dedicated block). */
double gr_rng_normal(const gr_rng *r, uint64_t i);

#endif

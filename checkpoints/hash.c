/* XXH64 (seed 0) from libxxhash: the checksum of checkpointed tensors
 * (`xxhsum -H64` gives the same digest of the same bytes). Streaming, so a
 * tensor can be hashed chunk by chunk; the state lives inside the caller's
 * gr_ckpt_hasher, so hashing allocates nothing. */
#define XXH_STATIC_LINKING_ONLY /* the state's size, to embed it */
#include <xxhash.h>

#include "checkpoints/gr_checkpoints.h"

_Static_assert(sizeof(XXH64_state_t) <= sizeof(((gr_ckpt_hasher *)0)->state),
               "gr_ckpt_hasher is too small for libxxhash's XXH64 state");
_Static_assert(_Alignof(XXH64_state_t) <= _Alignof(gr_ckpt_hasher),
               "gr_ckpt_hasher is not aligned enough for libxxhash's XXH64 state");

static XXH64_state_t *state(gr_ckpt_hasher *h) {
  return (XXH64_state_t *)(void *)h->state;
}

void gr_ckpt_hash_init(gr_ckpt_hasher *h) {
  XXH64_reset(state(h), 0);
}

void gr_ckpt_hash_update(gr_ckpt_hasher *h, const void *data, size_t n) {
  if (n) XXH64_update(state(h), data, n);
}

uint64_t gr_ckpt_hash_final(const gr_ckpt_hasher *h) {
  return XXH64_digest((const XXH64_state_t *)(const void *)h->state);
}

uint64_t gr_ckpt_hash64(const void *data, size_t n) {
  return XXH64(data, n, 0);
}

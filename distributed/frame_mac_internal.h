/* Per-frame authentication on a plaintext connection across hosts
 * (docs/security.md, "Frames across hosts"): after the handshake, every
 * frame carries a 16-byte tag after its body, a MAC over its header, map
 * and body under a key of this connection and direction, with the frame's
 * sequence number in the nonce. A frame altered, dropped, replayed, moved
 * to another connection or reordered on the way fails it.
 *
 * Keys: gr_auth_frame_keys (wire_internal.h; HKDF-SHA256 of the secret
 * over both handshake nonces and both cluster ids), 64 bytes: the
 * client-to-server key, then the server-to-client one. The MAC
 * is GMAC (AES-256-GCM over the frame as associated data, no plaintext),
 * nonce = 4 zero bytes and the sequence number (u64, big-endian) of the
 * frame in its direction, counted from 0 after the handshake: a GHASH over
 * the bytes, which CPUs with carry-less multiplication (PCLMULQDQ) run
 * faster than HMAC-SHA256's compression, so that large tensors cross at
 * close to the speed of the link. The keys are fresh for every connection
 * (both handshake nonces), so a sequence number never repeats under a key.
 *
 *   uint8_t keys[GR_AUTH_FRAME_KEYS];
 *   gr_auth_frame_keys(secret, server_nonce, client_nonce, server_id, client_id, keys, &err);
 *   gr_fmac *tx = gr_fmac_new(keys), *rx = gr_fmac_new(keys + 32);  // a client
 *   gr_fmac_begin(tx); gr_fmac_update(tx, header, 16); ...; gr_fmac_end(tx, tag);
 *
 * A gr_fmac is one direction of one connection, used by one thread at a
 * time (the transport: the sender's under the connection's lock, the
 * receiver's on the loop thread). Internal to distributed/. */
#ifndef GR_FRAME_MAC_INTERNAL_H
#define GR_FRAME_MAC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "distributed/wire_internal.h"

#define GR_FMAC_TAG 16 /* bytes after each frame's body */
#define GR_FMAC_KEY 32

typedef struct gr_fmac gr_fmac;

/* One direction's MAC under key; NULL when out of memory. */
gr_fmac *gr_fmac_new(const uint8_t key[GR_FMAC_KEY]);
void gr_fmac_free(gr_fmac *m);
/* The next frame starts (its nonce is its sequence number). */
void gr_fmac_begin(gr_fmac *m);
void gr_fmac_update(gr_fmac *m, const void *p, size_t n);
/* The frame's tag; the sequence number moves on. A failure of the crypto
 * library gives a tag of zeros, which the receiver refuses. */
void gr_fmac_end(gr_fmac *m, uint8_t tag[GR_FMAC_TAG]);
/* The frame's tag against the one received (constant time); the sequence
 * number moves on. */
bool gr_fmac_check(gr_fmac *m, const uint8_t tag[GR_FMAC_TAG]);
/* Frames done in this direction (the next one's sequence number). */
uint64_t gr_fmac_seq(const gr_fmac *m);

#endif

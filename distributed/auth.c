/* Authentication primitives: random nonces and HMAC-SHA256 from OpenSSL's
 * libcrypto, compared in constant time. The handshake that uses them is in
 * handshake.c (docs/distributed.md, "Security"). */
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <string.h>

#include "distributed/wire_internal.h"

gr_status gr_auth_random(void *out, size_t n, gr_error *err) {
  if (n > (size_t)INT32_MAX || RAND_bytes(out, (int)n) != 1)
    return gr_error_set(err, GR_ERR_INTERNAL, "the crypto library gave no random bytes");
  return GR_OK;
}

/* Appends a cluster id as one length byte and its bytes (at most 255). */
static size_t put_id(uint8_t *p, const char *id) {
  size_t n = id ? strlen(id) : 0;
  if (n > 255) n = 255;
  p[0] = (uint8_t)n;
  if (n) memcpy(p + 1, id, n);
  return 1 + n;
}

void gr_auth_mac(const char *secret, const char *role, const uint8_t a[GR_AUTH_NONCE],
                 const uint8_t b[GR_AUTH_NONCE], const char *server_cluster,
                 const char *client_cluster, uint8_t out[GR_AUTH_MAC]) {
  uint8_t msg[16 + 2 * GR_AUTH_NONCE + 2 * 256];
  size_t rl = strlen(role), n = 16;
  if (rl > 16) rl = 16;
  memset(msg, 0, 16);
  memcpy(msg, role, rl);
  memcpy(msg + n, a, GR_AUTH_NONCE);
  n += GR_AUTH_NONCE;
  memcpy(msg + n, b, GR_AUTH_NONCE);
  n += GR_AUTH_NONCE;
  n += put_id(msg + n, server_cluster);
  n += put_id(msg + n, client_cluster);
  unsigned int len = GR_AUTH_MAC;
  if (!HMAC(EVP_sha256(), secret, (int)strlen(secret), msg, n, out, &len))
    memset(out, 0, GR_AUTH_MAC); /* never equal to a real MAC of the peer's */
}

bool gr_auth_equal(const uint8_t a[GR_AUTH_MAC], const uint8_t b[GR_AUTH_MAC]) {
  return CRYPTO_memcmp(a, b, GR_AUTH_MAC) == 0;
}

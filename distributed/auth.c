/* Authentication primitives: random nonces and HMAC-SHA256 from OpenSSL's
 * libcrypto, compared in constant time. The handshake that uses them is in
 * transport.c (docs/distributed.md, "Security"). */
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

void gr_auth_mac(const char *secret, const char *role, const uint8_t a[GR_AUTH_NONCE],
                 const uint8_t b[GR_AUTH_NONCE], uint8_t out[GR_AUTH_MAC]) {
  uint8_t msg[16 + 2 * GR_AUTH_NONCE];
  size_t rl = strlen(role);
  if (rl > 16) rl = 16;
  memset(msg, 0, 16);
  memcpy(msg, role, rl);
  memcpy(msg + 16, a, GR_AUTH_NONCE);
  memcpy(msg + 16 + GR_AUTH_NONCE, b, GR_AUTH_NONCE);
  unsigned int len = GR_AUTH_MAC;
  if (!HMAC(EVP_sha256(), secret, (int)strlen(secret), msg, sizeof msg, out, &len))
    memset(out, 0, GR_AUTH_MAC); /* never equal to a real MAC of the peer's */
}

bool gr_auth_equal(const uint8_t a[GR_AUTH_MAC], const uint8_t b[GR_AUTH_MAC]) {
  return CRYPTO_memcmp(a, b, GR_AUTH_MAC) == 0;
}

/* Authentication primitives: random nonces, HMAC-SHA256 and the HKDF of
 * the per-frame keys from OpenSSL's libcrypto, compared in constant time.
 * The handshake that uses them is in handshake.c (docs/distributed.md,
 * "Security"). */
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
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
                 const char *client_cluster, uint8_t mode, uint8_t out[GR_AUTH_MAC]) {
  uint8_t msg[16 + 2 * GR_AUTH_NONCE + 2 * 256 + 1];
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
  msg[n++] = mode;
  unsigned int len = GR_AUTH_MAC;
  if (!HMAC(EVP_sha256(), secret, (int)strlen(secret), msg, n, out, &len))
    memset(out, 0, GR_AUTH_MAC); /* never equal to a real MAC of the peer's */
}

bool gr_auth_equal(const uint8_t a[GR_AUTH_MAC], const uint8_t b[GR_AUTH_MAC]) {
  return CRYPTO_memcmp(a, b, GR_AUTH_MAC) == 0;
}

gr_status gr_auth_frame_keys(const char *secret, const uint8_t server_nonce[GR_AUTH_NONCE],
                             const uint8_t client_nonce[GR_AUTH_NONCE], const char *server_cluster,
                             const char *client_cluster, uint8_t out[GR_AUTH_FRAME_KEYS],
                             gr_error *err) {
  static const char label[] = "graphrun frame keys v1";
  uint8_t salt[2 * GR_AUTH_NONCE], info[sizeof label + 2 * 256];
  memcpy(salt, server_nonce, GR_AUTH_NONCE);
  memcpy(salt + GR_AUTH_NONCE, client_nonce, GR_AUTH_NONCE);
  size_t n = sizeof label - 1;
  memcpy(info, label, n);
  n += put_id(info + n, server_cluster);
  n += put_id(info + n, client_cluster);
  EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
  EVP_KDF_CTX *kctx = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
  EVP_KDF_free(kdf);
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, "SHA256", 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)secret, strlen(secret)),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, salt, sizeof salt),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, n), OSSL_PARAM_construct_end()};
  int ok = kctx && EVP_KDF_derive(kctx, out, GR_AUTH_FRAME_KEYS, params) == 1;
  EVP_KDF_CTX_free(kctx);
  ERR_clear_error();
  if (!ok)
    return gr_error_set(err, GR_ERR_INTERNAL, "the crypto library cannot derive the frame keys");
  return GR_OK;
}

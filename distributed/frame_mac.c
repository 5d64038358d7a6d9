/* Per-frame MACs (frame_mac_internal.h): GMAC tags from OpenSSL's
 * libcrypto (the keys: gr_auth_frame_keys, auth.c). */
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/frame_mac_internal.h"

struct gr_fmac {
  EVP_CIPHER_CTX *ctx;
  uint64_t seq;
  bool ok; /* every call of this frame succeeded */
};

gr_fmac *gr_fmac_new(const uint8_t key[GR_FMAC_KEY]) {
  gr_fmac *m = calloc(1, sizeof *m);
  if (!m || !(m->ctx = EVP_CIPHER_CTX_new()) ||
      EVP_EncryptInit_ex(m->ctx, EVP_aes_256_gcm(), NULL, key, NULL) != 1) {
    if (m) EVP_CIPHER_CTX_free(m->ctx);
    free(m);
    ERR_clear_error();
    return NULL;
  }
  return m;
}

void gr_fmac_free(gr_fmac *m) {
  if (!m) return;
  EVP_CIPHER_CTX_free(m->ctx);
  free(m);
}

void gr_fmac_begin(gr_fmac *m) {
  uint8_t iv[12] = {0};
  for (int i = 0; i < 8; i++) iv[4 + i] = (uint8_t)(m->seq >> (56 - 8 * i));
  m->ok = EVP_EncryptInit_ex(m->ctx, NULL, NULL, NULL, iv) == 1;
}

void gr_fmac_update(gr_fmac *m, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n > 0 && m->ok) { /* associated data only: no output */
    int part = n > (size_t)INT_MAX / 2 ? INT_MAX / 2 : (int)n, len;
    m->ok = EVP_EncryptUpdate(m->ctx, NULL, &len, b, part) == 1;
    b += part;
    n -= (size_t)part;
  }
}

void gr_fmac_end(gr_fmac *m, uint8_t tag[GR_FMAC_TAG]) {
  uint8_t none[16];
  int len;
  if (!m->ok || EVP_EncryptFinal_ex(m->ctx, none, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(m->ctx, EVP_CTRL_GCM_GET_TAG, GR_FMAC_TAG, tag) != 1) {
    memset(tag, 0, GR_FMAC_TAG);
    ERR_clear_error();
  }
  m->seq++;
}

bool gr_fmac_check(gr_fmac *m, const uint8_t tag[GR_FMAC_TAG]) {
  bool ok = m->ok;
  uint8_t want[GR_FMAC_TAG];
  gr_fmac_end(m, want);
  return ok && CRYPTO_memcmp(want, tag, GR_FMAC_TAG) == 0;
}

uint64_t gr_fmac_seq(const gr_fmac *m) {
  return m->seq;
}

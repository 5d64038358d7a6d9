/* Per-frame MACs without sockets (distributed/frame_mac_internal.h): the
 * keys a handshake derives (both sides the same; another nonce, secret or
 * cluster id another key; the two directions apart), and the tags: a frame
 * passes as sent, and fails altered in any byte, replayed, reordered,
 * dropped, or moved to the other direction. The same MACs over TCP, with
 * a proxy altering a frame: test_dist_tls. */
#include <graphrun.h>
#include <string.h>

#include "distributed/frame_mac_internal.h"
#include "gr_test.h"

#define SECRET "frame-mac-test-secret"

static const uint8_t sn[GR_AUTH_NONCE] = {1, 2, 3}, cn[GR_AUTH_NONCE] = {4, 5, 6};

static void keys(const char *secret, const uint8_t *s_nonce, const char *s_id, const char *c_id,
                 uint8_t out[GR_AUTH_FRAME_KEYS]) {
  gr_error err;
  GR_CHECK_OK(gr_auth_frame_keys(secret, s_nonce, cn, s_id, c_id, out, &err), err);
}

static void test_keys(void) {
  uint8_t a[GR_AUTH_FRAME_KEYS], b[GR_AUTH_FRAME_KEYS];
  keys(SECRET, sn, "jobA", "jobA", a);
  keys(SECRET, sn, "jobA", "jobA", b);
  GR_CHECK(!memcmp(a, b, sizeof a));                      /* the client's and the server's */
  GR_CHECK(memcmp(a, a + GR_FMAC_KEY, GR_FMAC_KEY) != 0); /* the directions */
  uint8_t other_nonce[GR_AUTH_NONCE] = {1, 2, 4};
  keys(SECRET, other_nonce, "jobA", "jobA", b);
  GR_CHECK(memcmp(a, b, sizeof a) != 0);
  keys("another-secret-of-16+", sn, "jobA", "jobA", b);
  GR_CHECK(memcmp(a, b, sizeof a) != 0);
  keys(SECRET, sn, "jobA", "jobB", b);
  GR_CHECK(memcmp(a, b, sizeof a) != 0);
  keys(SECRET, sn, "jobAj", "obA", b); /* the ids are length-prefixed */
  GR_CHECK(memcmp(a, b, sizeof a) != 0);
}

/* A frame of three pieces (header, map, body), as the transport sends it. */
static void tag_of(gr_fmac *m, const uint8_t *frame, size_t n, uint8_t tag[GR_FMAC_TAG]) {
  gr_fmac_begin(m);
  gr_fmac_update(m, frame, 16);
  gr_fmac_update(m, frame + 16, 8);
  gr_fmac_update(m, frame + 24, n - 24);
  gr_fmac_end(m, tag);
}

/* The receiver's check: the same pieces in other sizes (it reads them as
 * they arrive). */
static bool check(gr_fmac *m, const uint8_t *frame, size_t n, const uint8_t tag[GR_FMAC_TAG]) {
  gr_fmac_begin(m);
  for (size_t i = 0; i < n; i += 7) gr_fmac_update(m, frame + i, n - i < 7 ? n - i : 7);
  return gr_fmac_check(m, tag);
}

static void test_tags(void) {
  uint8_t k[GR_AUTH_FRAME_KEYS];
  keys(SECRET, sn, "jobA", "jobA", k);
  enum { N = 4, LEN = 1000 };
  uint8_t frames[N][LEN], tags[N][GR_FMAC_TAG];
  for (int f = 0; f < N; f++)
    for (int i = 0; i < LEN; i++) frames[f][i] = (uint8_t)(i * 31 + f);
  gr_fmac *tx = gr_fmac_new(k), *rx = gr_fmac_new(k);
  GR_CHECK(tx && rx);
  if (!tx || !rx) return;
  for (int f = 0; f < N; f++) tag_of(tx, frames[f], LEN, tags[f]);
  GR_CHECK_EQ_INT(gr_fmac_seq(tx), N);
  /* the same frames, in order: each passes */
  for (int f = 0; f < N; f++) GR_CHECK_MSG(check(rx, frames[f], LEN, tags[f]), "frame %d", f);
  gr_fmac_free(rx);
  /* a byte altered anywhere (header, map, body): fails */
  for (int at = 0; at < LEN; at += 97) {
    rx = gr_fmac_new(k);
    frames[0][at] ^= 0x40;
    GR_CHECK_MSG(!check(rx, frames[0], LEN, tags[0]), "byte %d altered passed", at);
    frames[0][at] ^= 0x40;
    gr_fmac_free(rx);
  }
  /* the tag altered; a frame cut short */
  rx = gr_fmac_new(k);
  tags[0][15] ^= 1;
  GR_CHECK(!check(rx, frames[0], LEN, tags[0]));
  tags[0][15] ^= 1;
  gr_fmac_free(rx);
  rx = gr_fmac_new(k);
  GR_CHECK(!check(rx, frames[0], LEN - 1, tags[0]));
  gr_fmac_free(rx);
  /* replayed: frame 0 twice */
  rx = gr_fmac_new(k);
  GR_CHECK(check(rx, frames[0], LEN, tags[0]));
  GR_CHECK(!check(rx, frames[0], LEN, tags[0]));
  gr_fmac_free(rx);
  /* reordered, or one dropped: frame 1 first */
  rx = gr_fmac_new(k);
  GR_CHECK(!check(rx, frames[1], LEN, tags[1]));
  gr_fmac_free(rx);
  /* moved to the other direction: the other key */
  rx = gr_fmac_new(k + GR_FMAC_KEY);
  GR_CHECK(!check(rx, frames[0], LEN, tags[0]));
  gr_fmac_free(rx);
  /* an empty frame body: the header alone is covered too */
  gr_fmac *a = gr_fmac_new(k), *b = gr_fmac_new(k);
  uint8_t t[GR_FMAC_TAG];
  gr_fmac_begin(a);
  gr_fmac_update(a, frames[2], 16);
  gr_fmac_end(a, t);
  gr_fmac_begin(b);
  gr_fmac_update(b, frames[2], 16);
  GR_CHECK(gr_fmac_check(b, t));
  gr_fmac_free(a), gr_fmac_free(b), gr_fmac_free(tx);
}

int main(void) {
  GR_RUN(test_keys);
  GR_RUN(test_tags);
  return gr_test_finish();
}

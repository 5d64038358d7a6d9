/* Frames for the transport's tests (wire_frames.h). */
#include "wire_frames.h"

#include <stdlib.h>

static uint8_t pattern(uint64_t seq, size_t i) {
  return (uint8_t)(seq * 131 + i * 7);
}

gr_outmsg *gt_frame(uint64_t seq, size_t n) {
  gr_outmsg *m = gr_outmsg_new(GR_MSG_TENSOR, 2);
  gr_outmsg_u64(m, "seq", seq);
  gr_outmsg_u64(m, "n", n);
  if (n) {
    uint8_t *p = malloc(n);
    for (size_t i = 0; i < n; i++) p[i] = pattern(seq, i);
    gr_outmsg_add_body(m, p, n, p);
  }
  return m;
}

bool gt_frame_intact(const gr_inmsg *m, uint64_t *seq) {
  uint64_t n = 0;
  *seq = 0;
  bool ok = gr_msg_u64(&m->msg.root, "seq", seq, NULL) == GR_OK &&
            gr_msg_u64(&m->msg.root, "n", &n, NULL) == GR_OK &&
            n <= (m->body ? m->h.body_len : 0); /* the body is padded */
  const uint8_t *b = m->body ? (const uint8_t *)m->body->data + m->body_off : NULL;
  for (size_t i = 0; ok && i < n; i++) ok = b[i] == pattern(*seq, i);
  return ok;
}

/* response: every request's answer, by the request's id: a code (0: done)
 * and, on an error, its message; the results of each kind of request
 * follow (their gr_*_resp_pack). */
#include <stdio.h>

#include "distributed/msg_internal.h"

static const gr_msg_field fields[] = {
    {"id", NULL},
    {"code", NULL},
    {"msg", "an error"},
    {"failed_at", "a multi-step run's error: the step that failed"}};
const gr_msg_spec gr_response_spec = {GR_MSG_RESPONSE, "task → client", GR_MSG_FIELDS(fields), NULL,
                                      -1};

/* failed_at < 0: none */
static gr_outmsg *envelope(uint64_t id, uint32_t results, const gr_error *e, int64_t failed_at) {
  gr_outmsg *m = gr_outmsg_new(GR_MSG_RESPONSE, 2 + (e ? 1 + (failed_at >= 0) : results));
  if (!m) return NULL;
  gr_outmsg_u64(m, "id", id);
  gr_outmsg_u64(m, "code", e ? (uint64_t)e->code : 0);
  if (e) gr_outmsg_str(m, "msg", e->msg);
  if (e && failed_at >= 0) gr_outmsg_u64(m, "failed_at", (uint64_t)failed_at);
  return m;
}

gr_outmsg *gr_response_pack(uint64_t id, const gr_error *e) {
  return envelope(id, 0, e, -1);
}

gr_outmsg *gr_response_pack_failed_at(uint64_t id, const gr_error *e, uint64_t iteration) {
  return envelope(id, 0, e, (int64_t)iteration);
}

gr_outmsg *gr_response_begin(uint64_t id, uint32_t results) {
  return envelope(id, results, NULL, -1);
}

gr_status gr_response_unpack(const gr_inmsg *in, gr_response *out, gr_error *err) {
  *out = (gr_response){.failed_at = -1};
  const msgpack_object *root = &in->msg.root;
  uint64_t code;
  GR_TRY(gr_msg_u64(root, "id", &out->id, err));
  GR_TRY(gr_msg_u64(root, "code", &code, err));
  out->code = GR_OK;
  if (code == 0) return GR_OK;
  char msg[GR_ERROR_MSG_MAX];
  if (gr_msg_str(root, "msg", msg, sizeof msg, NULL) != GR_OK) snprintf(msg, sizeof msg, "?");
  out->code = code < GR_STATUS_COUNT ? (gr_status)code : GR_ERR_INTERNAL;
  gr_error_set(&out->error, out->code, "%s", msg);
  if (gr_msg_get(root, "failed_at")) /* a bad one reads as none: the whole RUN is aborted */
    gr_msg_i64(root, "failed_at", 0, GR_RUN_MAX_STEPS - 1, &out->failed_at, NULL);
  return GR_OK;
}

/* abort: ends a step on a task, one way (no answer): the master sends it
 * to every other task of a step when one fails. */
#include "distributed/msg_internal.h"

static const gr_msg_field fields[] = {{"run", NULL}, {"code", NULL}, {"msg", NULL}};
const gr_msg_spec gr_abort_spec = {GR_MSG_ABORT, "client → task, one way", GR_MSG_FIELDS(fields),
                                   NULL, -1};

gr_outmsg *gr_abort_msg_pack(const gr_abort_msg *a) {
  gr_outmsg *m = gr_outmsg_new(GR_MSG_ABORT, 3);
  if (!m) return NULL;
  gr_outmsg_u64(m, "run", a->run);
  gr_outmsg_u64(m, "code", (uint64_t)a->code);
  gr_outmsg_str(m, "msg", a->msg);
  return m;
}

gr_status gr_abort_msg_unpack(gr_inmsg *in, gr_abort_msg *out, gr_error *err) {
  *out = (gr_abort_msg){0};
  const msgpack_object *root = &in->msg.root;
  uint64_t code;
  GR_TRY(gr_msg_u64(root, "run", &out->run, err));
  GR_TRY(gr_msg_u64(root, "code", &code, err));
  GR_TRY(gr_msg_strz(&in->msg, root, "msg", 511, &out->msg, err));
  out->code = code > 0 && code < GR_STATUS_COUNT ? (gr_status)code : GR_ERR_CANCELLED;
  return GR_OK;
}

/* tensor: a value a task's _send pushes to the task of its receiver, one
 * way (no answer), stored in that step's rendezvous under its key. */
#include "distributed/msg_internal.h"

static const gr_msg_field fields[] = {{"run", NULL}, {"key", NULL},  {"from", NULL},
                                      {"inc", NULL}, {"dead", NULL}, {"value", NULL}};
const gr_msg_spec gr_tensor_spec = {GR_MSG_TENSOR, "task → task, one way", GR_MSG_FIELDS(fields),
                                    NULL, -1};

gr_outmsg *gr_tensor_msg_pack(const gr_tensor_msg *t) {
  gr_outmsg *m = gr_outmsg_new(GR_MSG_TENSOR, 6);
  if (!m) return NULL;
  gr_outmsg_u64(m, "run", t->run);
  gr_outmsg_str(m, "key", t->key);
  gr_outmsg_str(m, "from", t->from);
  gr_outmsg_u64(m, "inc", t->inc);
  gr_outmsg_bool(m, "dead", t->dead);
  gr_outmsg_key(m, "value");
  bool none = t->dead || !t->value || gr_tensor_is_empty(t->value);
  if (gr_outmsg_pack_tensor(m, none ? NULL : t->value, false, NULL) != GR_OK) {
    gr_outmsg_free(m);
    return NULL;
  }
  return m;
}

gr_status gr_tensor_msg_unpack(gr_inmsg *in, gr_tensor_msg *out, gr_error *err) {
  *out = (gr_tensor_msg){0};
  const msgpack_object *root = &in->msg.root;
  GR_TRY(gr_msg_u64(root, "run", &out->run, err));
  GR_TRY(gr_msg_strz(&in->msg, root, "key", 1023, &out->key, err));
  GR_TRY(gr_msg_strz(&in->msg, root, "from", GR_TASK_NAME_MAX - 1, &out->from, err));
  GR_TRY(gr_msg_u64(root, "inc", &out->inc, err));
  GR_TRY(gr_msg_bool(root, "dead", &out->dead, err));
  if (!(out->value_item = gr_msg_get(root, "value")))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "field 'value' is missing");
  return GR_OK;
}

gr_status gr_tensor_msg_value(const gr_inmsg *in, const gr_tensor_msg *t, gr_tensor *out,
                              gr_error *err) {
  bool nil;
  return gr_msg_tensor_at(t->value_item, in->body, in->body_off, in->h.body_len, out, &nil, err);
}

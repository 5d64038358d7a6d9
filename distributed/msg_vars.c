/* vars: which of the named variables have values in the container the
 * request names; answered with one flag per name. */
#include "distributed/msg_internal.h"

static const gr_msg_field fields[] = {
    {"id", NULL}, {"container", NULL}, {"private", NULL}, {"names", NULL}};
static const gr_msg_field results[] = {{"init", NULL}};
const gr_msg_spec gr_vars_spec = {GR_MSG_VARS, "client → task", GR_MSG_FIELDS(fields),
                                  GR_MSG_FIELDS(results)};

gr_outmsg *gr_vars_req_pack(const gr_vars_req *q) {
  gr_outmsg *m = gr_outmsg_new(GR_MSG_VARS, 4);
  if (!m) return NULL;
  gr_outmsg_u64(m, "id", q->id);
  gr_container_ref_pack(m, &q->container);
  gr_outmsg_key(m, "names");
  msgpack_pack_array(gr_outmsg_packer(m), (size_t)q->num_names);
  for (int i = 0; i < q->num_names; i++) gr_pack_str(gr_outmsg_packer(m), q->names[i]);
  return m;
}

gr_status gr_vars_req_unpack(gr_inmsg *in, gr_vars_req *out, gr_error *err) {
  *out = (gr_vars_req){0};
  const msgpack_object_array *names;
  GR_TRY(gr_request_id(in, &out->id, err));
  GR_TRY(gr_msg_array(&in->msg.root, "names", GR_MSG_MAX_ITEMS, &names, err));
  const char **v = gr_msg_zalloc(&in->msg, names->size * sizeof *v);
  if (!v) return gr_error_set_oom(err);
  for (uint32_t i = 0; i < names->size; i++) {
    const char *p;
    size_t n;
    bool ok = gr_msg_item_str(&names->ptr[i], "name", &p, &n, NULL) == GR_OK && n < 1024;
    v[i] = NULL;
    if (ok && !(v[i] = gr_msg_zdup(&in->msg, p, n))) return gr_error_set_oom(err);
  }
  out->names = v;
  out->num_names = (int)names->size;
  return GR_OK;
}

gr_outmsg *gr_vars_resp_pack(uint64_t id, const gr_vars_resp *r) {
  gr_outmsg *m = gr_response_begin(id, 1);
  if (!m) return NULL;
  gr_outmsg_key(m, "init");
  msgpack_pack_array(gr_outmsg_packer(m), (size_t)r->num_init);
  for (int i = 0; i < r->num_init; i++)
    if (r->init[i])
      msgpack_pack_true(gr_outmsg_packer(m));
    else
      msgpack_pack_false(gr_outmsg_packer(m));
  return m;
}

gr_status gr_vars_resp_unpack(gr_inmsg *in, uint32_t max, gr_vars_resp *out, gr_error *err) {
  *out = (gr_vars_resp){0};
  const msgpack_object_array *init;
  GR_TRY(gr_msg_array(&in->msg.root, "init", max, &init, err));
  bool *v = gr_msg_zalloc(&in->msg, init->size * sizeof *v);
  if (!v) return gr_error_set_oom(err);
  for (uint32_t i = 0; i < init->size; i++)
    v[i] = init->ptr[i].type == MSGPACK_OBJECT_BOOLEAN && init->ptr[i].via.boolean;
  out->init = v;
  out->num_init = (int)init->size;
  return GR_OK;
}

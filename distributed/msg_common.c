/* What several kinds of message share: a request's id, the container a
 * register or vars names; the fields of every kind, as data (their specs
 * live with their code, in msg_*.c; the handshake's here, as handshake.c
 * packs and reads those). */
#include "distributed/server_internal.h" /* gr_container_name_ok, gr_printable_name */

gr_status gr_request_id(const gr_inmsg *in, uint64_t *id, gr_error *err) {
  return gr_msg_u64(&in->msg.root, "id", id, err);
}

void gr_container_ref_pack(gr_outmsg *m, const gr_container_ref *c) {
  gr_outmsg_str(m, "container", c->name);
  gr_outmsg_bool(m, "private", c->is_private);
}

gr_status gr_container_field(gr_inmsg *in, bool all, const char **out, gr_error *err) {
  const char *p;
  size_t n;
  GR_TRY(gr_msg_strv(&in->msg.root, "container", &p, &n, err));
  if ((n > 0 || !all) && !gr_container_name_ok(p, n, false)) {
    char shown[GR_CONTAINER_NAME_MAX + 4];
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "field 'container': '%s' is not a container name (1 to %d letters, "
                        "digits, '_', '-' or '.'%s)",
                        gr_printable_name(p, n, shown), GR_CONTAINER_NAME_MAX,
                        all ? "; \"\": every shared container" : "");
  }
  if (!(*out = gr_msg_zdup(&in->msg, p, n))) return gr_error_set_oom(err);
  return GR_OK;
}

gr_status gr_container_ref_unpack(gr_inmsg *in, gr_container_ref *out, gr_error *err) {
  *out = (gr_container_ref){0};
  GR_TRY(gr_container_field(in, false, &out->name, err));
  return gr_msg_bool(&in->msg.root, "private", &out->is_private, err);
}

/* ---- the handshake's kinds (handshake_internal.h)
 * ---------------------------- */

static const gr_msg_field hello_fields[] = {
    {"auth", NULL}, {"cluster", NULL}, {"mode", NULL}, {"nonce", "auth"}};
static const gr_msg_field auth_fields[] = {
    {"cluster", NULL}, {"mode", NULL}, {"nonce", "authenticating"}, {"mac", "authenticating"}};
static const gr_msg_field auth_ok_fields[] = {{"mac", "authenticating"}};
const gr_msg_spec gr_hello_spec = {GR_MSG_HELLO, "server → peer, at accept",
                                   GR_MSG_FIELDS(hello_fields), NULL, -1};
const gr_msg_spec gr_auth_spec = {GR_MSG_AUTH,
                                  "peer → server, always (through TLS when `mode` is 1)",
                                  GR_MSG_FIELDS(auth_fields), NULL, -1};
const gr_msg_spec gr_auth_ok_spec = {GR_MSG_AUTH_OK, "server → peer", GR_MSG_FIELDS(auth_ok_fields),
                                     NULL, -1};

static const gr_msg_spec *const specs[GR_MSG_COUNT] = {
    [GR_MSG_HELLO] = &gr_hello_spec,           /* above */
    [GR_MSG_AUTH] = &gr_auth_spec,             /* above */
    [GR_MSG_AUTH_OK] = &gr_auth_ok_spec,       /* above */
    [GR_MSG_GET_STATUS] = &gr_get_status_spec, /* msg_status.c */
    [GR_MSG_REGISTER] = &gr_register_spec,     /* msg_register.c */
    [GR_MSG_RUN] = &gr_run_spec,               /* msg_run.c */
    [GR_MSG_ABORT] = &gr_abort_spec,           /* msg_abort.c */
    [GR_MSG_VARS] = &gr_vars_spec,             /* msg_vars.c */
    [GR_MSG_DEREGISTER] = &gr_deregister_spec, /* msg_deregister.c */
    [GR_MSG_TENSOR] = &gr_tensor_spec,         /* msg_tensor.c */
    [GR_MSG_RESPONSE] = &gr_response_spec,     /* msg_response.c */
    [GR_MSG_HEARTBEAT] = &gr_heartbeat_spec,   /* msg_status.c */
    [GR_MSG_LEASE] = &gr_lease_spec,           /* msg_lease.c */
    [GR_MSG_RESET] = &gr_reset_spec,           /* msg_reset.c */
};

const gr_msg_spec *gr_msg_spec_of(int type) {
  return type > GR_MSG_NONE && type < GR_MSG_COUNT ? specs[type] : NULL;
}

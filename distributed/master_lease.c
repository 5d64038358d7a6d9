/* The master's side of leases (gr_master_lease): one LEASE request to one
 * task, answered with the lease's state (server_lease.c keeps them). */
#include <string.h>

#include "distributed/gr_distributed.h"
#include "distributed/master_internal.h"

static gr_status read_state(const gr_inmsg *resp, gr_lease_state *out, gr_error *err) {
  const msgpack_object *root = &resp->msg.root;
  uint64_t ago;
  GR_TRY(gr_msg_bool(root, "held", &out->held, err));
  GR_TRY(gr_msg_u64(root, "taken", &out->taken, err));
  GR_TRY(gr_msg_u64(root, "ago", &ago, err));
  GR_TRY(gr_msg_str(root, "holder", out->holder, sizeof out->holder, err));
  out->ended_ms_ago = ago > INT64_MAX ? INT64_MAX : (int64_t)ago;
  return GR_OK;
}

gr_status gr_master_lease(gr_master *ms, int k, const char *name, const char *holder,
                          gr_lease_state *out, gr_error *err) {
  memset(out, 0, sizeof *out);
  if (k < 0 || k >= ms->num_tasks || !name || !*name || strlen(name) > GR_LEASE_NAME_MAX ||
      (holder && strlen(holder) > GR_LEASE_HOLDER_MAX))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "lease: want a task of the master, a name of 1 to %d bytes and a holder "
                        "of at most %d",
                        GR_LEASE_NAME_MAX, GR_LEASE_HOLDER_MAX);
  gr_outmsg *m = gr_outmsg_new(GR_MSG_LEASE, 4);
  if (!m) return gr_error_set_oom(err);
  rpc r = {.id = gr_master_new_id(ms)};
  gr_outmsg_u64(m, "id", r.id);
  gr_outmsg_str(m, "name", name);
  gr_outmsg_bool(m, "take", holder != NULL);
  gr_outmsg_str(m, "holder", holder ? holder : "");
  rpc_group g;
  gr_rpc_group_init(&g);
  gr_master_start(ms, k, m, &r, &g);
  gr_master_wait_all(ms, &g, &r, 1, gr_wire_now_ms() + ms->o.connect_timeout_ms, NULL, NULL);
  gr_rpc_group_destroy(&g);
  gr_status st = r.code;
  if (st != GR_OK && err) *err = r.err;
  if (st == GR_OK && (st = read_state(r.resp, out, err)) != GR_OK)
    gr_error_prefix(err, "lease '%s' on %s", name, ms->tasks[k].name);
  gr_inmsg_free(r.resp);
  return st;
}

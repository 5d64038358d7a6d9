/* The master's side of leases (gr_master_lease): one LEASE request to one
 * task, answered with the lease's state (server_lease.c keeps them). */
#include <stdio.h>
#include <string.h>

#include "distributed/gr_distributed.h"
#include "distributed/master_internal.h"

static gr_status read_state(gr_inmsg *resp, gr_lease_state *out, gr_error *err) {
  gr_lease_resp r;
  GR_TRY(gr_lease_resp_unpack(resp, &r, err));
  out->held = r.held;
  out->taken = r.taken;
  out->ended_ms_ago = r.ago > INT64_MAX ? INT64_MAX : (int64_t)r.ago;
  snprintf(out->holder, sizeof out->holder, "%s", r.holder);
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
  rpc r = {.id = gr_master_new_id(ms)};
  gr_outmsg *m =
      gr_lease_req_pack(&(gr_lease_req){r.id, name, holder != NULL, holder ? holder : ""});
  if (!m) return gr_error_set_oom(err);
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

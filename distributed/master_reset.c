/* The master's reset, as TensorFlow's Session.reset: one RESET per task
 * drops a shared container (or all of them) on every task. */
#include <stdlib.h>
#include <string.h>

#include "distributed/master_internal.h"

#define RESET_TIMEOUT_MS 60000

gr_status gr_master_reset(gr_master *ms, const char *container, int *dropped, gr_error *err) {
  if (dropped) *dropped = 0;
  if (container && gr_container_check_name(container, err) != GR_OK) {
    gr_error_prefix(err, "reset");
    return err ? err->code : GR_ERR_INVALID_ARGUMENT;
  }
  gr_master_drain(ms);
  rpc *rs = calloc((size_t)ms->num_tasks, sizeof *rs);
  if (!rs) return gr_error_set_oom(err);
  rpc_group g;
  gr_rpc_group_init(&g);
  gr_status st = GR_OK;
  int n = 0;
  for (int k = 0; k < ms->num_tasks; k++) {
    rs[n].id = gr_master_new_id(ms);
    gr_outmsg *m = gr_reset_req_pack(&(gr_reset_req){rs[n].id, container ? container : ""});
    if (!m) {
      st = gr_error_set_oom(err);
      break;
    }
    gr_master_start(ms, k, m, &rs[n++], &g);
  }
  gr_master_wait_all(ms, &g, rs, n, gr_wire_now_ms() + RESET_TIMEOUT_MS, NULL, NULL);
  gr_rpc_group_destroy(&g);
  for (int i = 0; i < n; i++) {
    gr_error e;
    gr_reset_resp r = {0};
    if (rs[i].code == GR_OK && gr_reset_resp_unpack(rs[i].resp, &r, &e) != GR_OK)
      rs[i].code = e.code, rs[i].err = e;
    uint64_t d = r.dropped;
    if (rs[i].code == GR_OK && dropped) *dropped += (int)(d > 1000000 ? 1000000 : d);
    if (rs[i].code != GR_OK && st == GR_OK) {
      st = rs[i].code;
      if (err) {
        *err = rs[i].err;
        const char *task = ms->tasks[rs[i].task].name;
        if (!strstr(err->msg, task)) gr_error_prefix(err, "%s", task);
      }
    }
    gr_inmsg_free(rs[i].resp);
  }
  free(rs);
  return st;
}

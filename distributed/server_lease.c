/* Leases: named marks a client holds on a server for as long as its
 * connection lives (docs/distributed.md, "Leases"). A LEASE request takes
 * one (take: true, with a description of the holder) or only looks at it;
 * both are answered with its state: held or not, how often it was taken
 * since the server started, how long ago its last holder's connection
 * closed, and that holder's description. The between-graph chief holds one
 * on its own task while its process lives, so a worker waiting for the
 * chief learns within a poll that the chief's process has ended.
 *
 * Threads: every function here runs on the server's network thread (the
 * requests are answered there, like GET_STATUS, and a connection's close
 * is seen there), so the table needs no lock. */
#include <stdlib.h>
#include <string.h>

#include "distributed/server_internal.h"

struct gr_lease {
  char name[GR_LEASE_NAME_MAX + 1];
  char holder[GR_LEASE_HOLDER_MAX + 1];
  const gr_conn *conn; /* the holder's connection (identity only); NULL: not held */
  uint64_t taken;      /* times taken (by a new connection) since the server started */
  int64_t ended_ms;    /* when the last holder's connection closed (gr_wire_now_ms) */
};

/* The lease of that name; made when absent (a full table gives up the one
 * that ended longest ago); NULL when every slot is held. */
static gr_lease *find_or_add(gr_server *s, const char *name) {
  int oldest = -1;
  for (int i = 0; i < s->num_leases; i++) {
    gr_lease *l = &s->leases[i];
    if (!strcmp(l->name, name)) return l;
    if (!l->conn && (oldest < 0 || l->ended_ms < s->leases[oldest].ended_ms)) oldest = i;
  }
  gr_lease *l;
  if (s->num_leases < GR_SERVER_MAX_LEASES) {
    if (!s->leases && !(s->leases = calloc(GR_SERVER_MAX_LEASES, sizeof *s->leases))) return NULL;
    l = &s->leases[s->num_leases++];
  } else if (oldest >= 0) {
    l = &s->leases[oldest];
  } else {
    return NULL;
  }
  memset(l, 0, sizeof *l);
  snprintf(l->name, sizeof l->name, "%s", name);
  return l;
}

void gr_server_lease(gr_server *s, gr_conn *c, gr_inmsg *in, uint64_t id) {
  const msgpack_object *root = &in->msg.root;
  char name[GR_LEASE_NAME_MAX + 1], holder[GR_LEASE_HOLDER_MAX + 1];
  bool take;
  gr_error e;
  if (gr_msg_str(root, "name", name, sizeof name, &e) != GR_OK ||
      gr_msg_bool(root, "take", &take, &e) != GR_OK ||
      gr_msg_str(root, "holder", holder, sizeof holder, &e) != GR_OK) {
    gr_server_respond_error(c, id, &e);
    return;
  }
  if (!name[0]) {
    gr_error_set(&e, GR_ERR_INVALID_ARGUMENT, "field 'name': a lease needs a name");
    gr_server_respond_error(c, id, &e);
    return;
  }
  gr_lease *l = find_or_add(s, name);
  if (!l) {
    gr_error_set(&e, GR_ERR_RESOURCE_EXHAUSTED, "%d leases are held on this task already",
                 GR_SERVER_MAX_LEASES);
    gr_server_respond_error(c, id, &e);
    return;
  }
  if (take) {
    if (l->conn != c) l->taken++; /* a new holder (the one before, if any, is replaced) */
    l->conn = c;
    snprintf(l->holder, sizeof l->holder, "%s", holder);
  }
  gr_outmsg *m = gr_server_response(id, 4, NULL);
  if (m) {
    gr_outmsg_bool(m, "held", l->conn != NULL);
    gr_outmsg_u64(m, "taken", l->taken);
    gr_outmsg_u64(m, "ago", !l->conn && l->taken ? (uint64_t)(gr_wire_now_ms() - l->ended_ms) : 0);
    gr_outmsg_str(m, "holder", l->holder);
  }
  gr_server_answer(c, id, m, NULL);
}

void gr_server_leases_drop_of(gr_server *s, const gr_conn *c) {
  for (int i = 0; i < s->num_leases; i++) {
    gr_lease *l = &s->leases[i];
    if (l->conn != c) continue;
    l->conn = NULL;
    l->ended_ms = gr_wire_now_ms();
    if (!s->o.quiet)
      gr_server_log(s, "lease '%s' ended: its holder (%s) closed its connection", l->name,
                    l->holder);
  }
}

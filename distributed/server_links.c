/* The links of a registration for its multi-step RUNs' flow control: the
 * tasks its partitions push tensors to and the tasks that push to it. In a
 * multi-step RUN a task runs iteration i + 1 as soon as its own iteration i
 * ended; a task that only sends to another could run ahead of it without
 * bound, its tensors parked at the receiver. So each receiver tells each of
 * its senders when an iteration ended (a DONE: an empty tensor pushed under
 * the link's key into the step two iterations later), and a sender starts
 * iteration i only when every task it sends to ended iteration i - 2: at
 * most two iterations' tensors wait at a receiver. Collectives need no link:
 * a member ends an iteration only with every member's part of it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/server_internal.h"

/* One side's links (to or from), indexed by task so that registering a
 * graph of many transfers and peers stays linear. */
typedef struct link_set {
  step_link **v;
  int *n;
  gr_idmap by_task;
} link_set;

static bool same_task(const void *ctx, uint32_t id, const void *key) {
  const link_set *ls = ctx;
  return !strcmp((*ls->v)[id].task, key);
}

/* Keeps, per peer task, the first (send device, receive device) pair in
 * strcmp order: both ends of the transfers see the same pairs, so both
 * choose the same one. */
static gr_status add_link(link_set *ls, const char *task, const char *send_dev,
                          const char *recv_dev, gr_error *err) {
  uint64_t h = gr_map_hash_str(task);
  int64_t i = gr_idmap_find(&ls->by_task, h, task, same_task, ls);
  if (i >= 0) {
    step_link *l = &(*ls->v)[i];
    int c = strcmp(send_dev, l->send_dev);
    if (c < 0 || (c == 0 && strcmp(recv_dev, l->recv_dev) < 0)) {
      snprintf(l->send_dev, sizeof l->send_dev, "%s", send_dev);
      snprintf(l->recv_dev, sizeof l->recv_dev, "%s", recv_dev);
    }
    return GR_OK;
  }
  step_link *more = gr_realloc_array(*ls->v, (size_t)*ls->n + 1, sizeof **ls->v);
  if (!more) return gr_error_set_oom(err);
  *ls->v = more;
  if (!gr_idmap_insert(&ls->by_task, h, (uint32_t)*ls->n)) return gr_error_set_oom(err);
  step_link *l = &more[(*ls->n)++];
  snprintf(l->task, sizeof l->task, "%s", task);
  snprintf(l->send_dev, sizeof l->send_dev, "%s", send_dev);
  snprintf(l->recv_dev, sizeof l->recv_dev, "%s", recv_dev);
  return GR_OK;
}

gr_status gr_server_links_of(const gr_server *s, const gr_partitions *ps, registered *r,
                             gr_error *err) {
  link_set to = {&r->to, &r->num_to, {0}}, from = {&r->from, &r->num_from, {0}};
  gr_idmap_init(&to.by_task);
  gr_idmap_init(&from.by_task);
  gr_status st = GR_OK;
  for (int k = 0; k < ps->num_parts && st == GR_OK; k++) {
    gr_graph *g = ps->parts[k].graph;
    for (int id = 0; id < gr_graph_num_nodes(g) && st == GR_OK; id++) {
      gr_node *n = gr_graph_node(g, id);
      if (!(n->op->flags & GR_OP_TRANSFER)) continue;
      const char *sd = gr_node_attr_string(n, "send_device", ""),
                 *rd = gr_node_attr_string(n, "recv_device", "");
      if (!strcmp(sd, "client") || strlen(sd) >= GR_DEVICE_NAME_MAX ||
          strlen(rd) >= GR_DEVICE_NAME_MAX)
        continue; /* a feed (sent by the RUN), or a name no peer has */
      bool sends = n->num_outputs == 0;
      char task[GR_TASK_NAME_MAX];
      gr_task_of_device(sends ? rd : sd, task, sizeof task);
      if (!strcmp(task, s->task)) continue;
      st = add_link(sends ? &to : &from, task, sd, rd, err);
    }
  }
  gr_idmap_free(&to.by_task);
  gr_idmap_free(&from.by_task);
  return st;
}

void gr_step_link_key(const step_link *l, char *out, size_t cap) {
  /* from the receiving device to the sending one: its sender is the task
   * that tells; "!done" is no node's output */
  snprintf(out, cap, "%s;%016llx;%s;!done;:0", l->recv_dev, 0ULL, l->send_dev);
}

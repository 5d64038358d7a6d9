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

/* Keeps, per peer task, the first (send device, receive device) pair in
 * strcmp order: both ends of the transfers see the same pairs, so both
 * choose the same one. */
static gr_status add_link(step_link **v, int *n, const char *task, const char *send_dev,
                          const char *recv_dev, gr_error *err) {
  for (int i = 0; i < *n; i++) {
    step_link *l = &(*v)[i];
    if (strcmp(l->task, task) != 0) continue;
    int c = strcmp(send_dev, l->send_dev);
    if (c < 0 || (c == 0 && strcmp(recv_dev, l->recv_dev) < 0)) {
      snprintf(l->send_dev, sizeof l->send_dev, "%s", send_dev);
      snprintf(l->recv_dev, sizeof l->recv_dev, "%s", recv_dev);
    }
    return GR_OK;
  }
  step_link *more = gr_realloc_array(*v, (size_t)*n + 1, sizeof **v);
  if (!more) return gr_error_set_oom(err);
  *v = more;
  step_link *l = &more[(*n)++];
  snprintf(l->task, sizeof l->task, "%s", task);
  snprintf(l->send_dev, sizeof l->send_dev, "%s", send_dev);
  snprintf(l->recv_dev, sizeof l->recv_dev, "%s", recv_dev);
  return GR_OK;
}

gr_status gr_server_links_of(const gr_server *s, const gr_partitions *ps, registered *r,
                             gr_error *err) {
  for (int k = 0; k < ps->num_parts; k++) {
    gr_graph *g = ps->parts[k].graph;
    for (int id = 0; id < gr_graph_num_nodes(g); id++) {
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
      GR_TRY(sends ? add_link(&r->to, &r->num_to, task, sd, rd, err)
                   : add_link(&r->from, &r->num_from, task, sd, rd, err));
    }
  }
  return GR_OK;
}

void gr_step_link_key(const step_link *l, char *out, size_t cap) {
  /* from the receiving device to the sending one: its sender is the task
   * that tells; "!done" is no node's output */
  snprintf(out, cap, "%s;%016llx;%s;!done;:0", l->recv_dev, 0ULL, l->send_dev);
}

/* The hosts of a step's collectives: before a master registers the
 * partitions, every collective node (GR_OP_COLLECTIVE, ops/collective.c)
 * whose attr hosts is empty gets the host of each member's task, from the
 * address the master reaches it at ("10.0.0.7:2222": 10.0.0.7), in the
 * order of its attr devices, so that the hierarchical all-reduce groups
 * the members by the cluster's hosts. Every member's copy gets the same
 * string: the members agree on the grouping by construction. Runs on the
 * thread that prepares the step (gr_master's prepare); the strings belong
 * to the partitions' graphs. */
#include <stdlib.h>
#include <string.h>

#include "core/gr_op.h"
#include "distributed/master_internal.h"
#include "placer/gr_cluster.h"

/* "h0,h1,..." for the devices "d0,d1,..." into out (cap bytes); false when
 * a device is in no task of ms or a name does not fit (the node keeps its
 * task grouping). */
static bool hosts_of(const gr_master *ms, const char *devices, char *out, size_t cap) {
  size_t at = 0;
  out[0] = 0;
  for (const char *p = devices; *p;) {
    size_t len = strcspn(p, ",");
    char dev[GR_DEVICE_NAME_MAX], host[GR_CLUSTER_HOST_MAX];
    if (len >= sizeof dev) return false;
    memcpy(dev, p, len);
    dev[len] = 0;
    int t = gr_master_task_of(ms, dev);
    int port;
    if (t < 0 ||
        gr_cluster_split_address(ms->tasks[t].address, host, sizeof host, &port, NULL) != GR_OK)
      return false;
    size_t hl = strlen(host);
    if (at + hl + 2 > cap || strchr(host, ',')) return false;
    if (at) out[at++] = ',';
    memcpy(out + at, host, hl + 1);
    at += hl;
    p += len + (p[len] == ',');
  }
  return at > 0;
}

gr_status gr_master_collective_hosts(const gr_master *ms, gr_partitions *parts, gr_error *err) {
  for (int k = 0; k < parts->num_parts; k++) {
    gr_graph *g = parts->parts[k].graph;
    for (int id = 0; id < gr_graph_num_nodes(g); id++) {
      gr_node *nd = gr_graph_node(g, id);
      if (!(nd->op->flags & GR_OP_COLLECTIVE)) continue;
      gr_attr *a = NULL;
      for (int j = 0; j < nd->num_attrs && !a; j++)
        if (!strcmp(nd->attrs[j].name, "hosts") && nd->attrs[j].value.type == GR_ATTR_STRING)
          a = &nd->attrs[j];
      const char *devices = gr_node_attr_string(nd, "devices", "");
      if (!a || (a->value.s && a->value.s[0]) || !devices[0]) continue;
      size_t cap = GR_CLUSTER_HOST_MAX + 1; /* a host name and a comma per member */
      for (const char *p = devices; *p; p++) cap += *p == ',' ? GR_CLUSTER_HOST_MAX + 1 : 0;
      char *hosts = malloc(cap);
      if (!hosts) return gr_error_set_oom(err);
      if (hosts_of(ms, devices, hosts, cap)) {
        const char *s = gr_graph_strdup(g, hosts);
        if (!s) {
          free(hosts);
          return gr_error_set_oom(err);
        }
        a->value.s = s;
      }
      free(hosts);
    }
  }
  return GR_OK;
}

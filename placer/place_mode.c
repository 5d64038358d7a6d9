/* Placement as a step of preparing a run: the devices of the nodes no pin
 * decides, by mode (what `graphrun run --placement` chooses), for the
 * command line and for C programs alike. */
#include <stdio.h>
#include <string.h>

#include "placer/gr_placer.h"

bool gr_place_mode_parse(const char *text, gr_place_mode *out) {
  static const char *const names[] = {"pins", "cost", "round-robin"};
  for (int i = 0; i < 3; i++)
    if (text && strcmp(text, names[i]) == 0) {
      *out = (gr_place_mode)i;
      return true;
    }
  return false;
}

/* Node i on device i mod the device count, a colocation group with its
 * first member; nodes and groups a pin decides are left to the session. */
static gr_status round_robin(gr_graph *g, const gr_cluster *c, int devices, bool soft,
                             gr_error *err) {
  int nd = c ? gr_cluster_num_devices(c) : devices;
  gr_colocation col;
  GR_TRY(gr_colocation_compute(g, soft, &col, err));
  gr_status st = GR_OK;
  for (int i = 0; i < gr_graph_num_nodes(g) && st == GR_OK; i++) {
    gr_node *n = gr_graph_node(g, i);
    int r = col.group[i];
    if (col.size[i] > 1 ? col.spec_index[r] >= 0 : n->requested_device[0] != '\0') continue;
    char name[GR_DEVICE_NAME_MAX];
    gr_device_spec d = gr_device_spec_local_cpu(r % nd);
    n->assigned_device = gr_graph_strdup(g, c ? gr_cluster_device_at(c, r % nd)->name
                                              : gr_device_spec_str(&d, name));
    if (!n->assigned_device) st = gr_error_set_oom(err);
  }
  gr_colocation_free(&col);
  return st;
}

gr_status gr_placer_assign_step(gr_graph *g, const gr_cluster *c, int devices, gr_place_mode mode,
                                const gr_placer_options *o, gr_error *err) {
  gr_placer_options opts = o ? *o : gr_placer_options_default();
  if (!c && devices < 1)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "placement: %d devices", devices);
  if (mode == GR_PLACE_PINS) return GR_OK; /* the session puts them on its first device */
  if (mode == GR_PLACE_ROUND_ROBIN) return round_robin(g, c, devices, opts.soft_placement, err);
  /* the cost model on the cluster's devices, or this process's (static estimates) */
  gr_cluster *local = c ? NULL : gr_cluster_new_local(devices, 1e10, 1e10, 1e-6);
  if (!c && !local) return gr_error_set_oom(err);
  gr_status st = gr_placer_place(g, c ? c : local, &opts, NULL, err);
  gr_cluster_free(local);
  return st;
}

gr_status gr_placer_assign(gr_graph *g, const gr_cluster *c, int devices, gr_place_mode mode,
                           bool soft, gr_error *err) {
  gr_placer_options o = gr_placer_options_default();
  o.soft_placement = soft;
  return gr_placer_assign_step(g, c, devices, mode, &o, err);
}

/* The explanation of a placement: per node its device and why, then the
 * predicted step time and the bytes crossing devices. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "place_internal.h"

static const char *fmt_time(double s, char *buf) {
  if (!isfinite(s))
    snprintf(buf, 32, "-");
  else if (s < 1e-6)
    snprintf(buf, 32, "%.3g ns", s * 1e9);
  else if (s < 1e-3)
    snprintf(buf, 32, "%.3g us", s * 1e6);
  else if (s < 1)
    snprintf(buf, 32, "%.3g ms", s * 1e3);
  else
    snprintf(buf, 32, "%.3g s", s);
  return buf;
}

static const char *fmt_bytes(double b, char *buf) {
  if (b < 1e3)
    snprintf(buf, 32, "%.0f B", b);
  else if (b < 1e6)
    snprintf(buf, 32, "%.3g kB", b / 1e3);
  else if (b < 1e9)
    snprintf(buf, 32, "%.3g MB", b / 1e6);
  else
    snprintf(buf, 32, "%.3g GB", b / 1e9);
  return buf;
}

/* The group a node belongs to for the summary: the first component of its
 * name, after a leading "gradients/" (a replica's or stage's gradient
 * belongs with it): replica_0, micro_batch_2, layer1, ...; nodes outside
 * any scope form the group "(top level)". */
static size_t group_of(const char *name, const char **start) {
  if (strncmp(name, "gradients/", 10) == 0 && strchr(name + 10, '/')) name += 10;
  const char *slash = strchr(name, '/');
  *start = slash ? name : "(top level)";
  return slash ? (size_t)(slash - name) : strlen(*start);
}

/* Where the replicas, micro-batch stages, variable shards and scopes went:
 * per group (in order of first appearance) its node count per device, and
 * the devices of its variables. */
static void explain_groups(const gr_placement *p, FILE *f) {
  int D = p->cluster->num_devices, ng = 0, cap = 64;
  const char *gname[64];
  size_t glen[64];
  int *count = calloc((size_t)cap * (size_t)D, sizeof *count),
      *vars = calloc((size_t)cap, sizeof *vars);
  int *vdev = calloc((size_t)cap * (size_t)D, sizeof *vdev);
  if (!count || !vars || !vdev) goto out;
  for (int k = 0; k < p->n; k++) {
    const gr_node *v = p->node_at[k];
    const char *g;
    size_t len = group_of(v->name, &g);
    int i = 0;
    while (i < ng && !(glen[i] == len && strncmp(gname[i], g, len) == 0)) i++;
    if (i == ng) {
      if (ng == cap) continue; /* past 64 groups: the per-node lines above tell */
      gname[ng] = g, glen[ng++] = len;
    }
    int d = p->r.device[k];
    if (d < 0 || d >= D) continue;
    count[(size_t)i * (size_t)D + (size_t)d]++;
    const char *var = gr_node_attr_string(v, "var", "");
    if ((v->op->flags & GR_OP_VARIABLE) && strcmp(var, v->name) == 0) {
      vars[i]++;
      vdev[(size_t)i * (size_t)D + (size_t)d]++;
    }
  }
  fprintf(f, "# by group (replicas, micro-batches, scopes): nodes per device; variables\n");
  for (int i = 0; i < ng; i++) {
    fprintf(f, "%-24.*s", (int)glen[i], gname[i]);
    for (int d = 0; d < D; d++)
      if (count[(size_t)i * (size_t)D + (size_t)d])
        fprintf(f, " d%d:%d", d, count[(size_t)i * (size_t)D + (size_t)d]);
    if (vars[i]) {
      fprintf(f, "  variables");
      for (int d = 0; d < D; d++)
        if (vdev[(size_t)i * (size_t)D + (size_t)d])
          fprintf(f, " d%d:%d", d, vdev[(size_t)i * (size_t)D + (size_t)d]);
    }
    fprintf(f, "\n");
  }
out:
  free(count);
  free(vars);
  free(vdev);
}

void gr_placement_print_candidates(const gr_placement *p, FILE *f) {
  const gr_place_result *r = &p->r;
  char t[32];
  fprintf(f, "# candidates (predicted step):");
  for (int k = 0; k < GR_PLACE_CAND_COUNT; k++)
    if (isfinite(r->cand_time[k]))
      fprintf(f, " %s %s%s", gr_place_candidate_name((gr_place_candidate)k),
              fmt_time(r->cand_time[k], t), (int)r->chosen == k ? " (chosen)" : "");
  if (isfinite(r->search_time))
    fprintf(f, "; local search: %d simulations, %d moves kept", r->search_sims, r->search_moves);
  fprintf(f, "\n");
}

void gr_placement_explain(const gr_placement *p, FILE *f) {
  const gr_cluster *c = p->cluster;
  const gr_place_result *r = &p->r;
  int D = c->num_devices;
  char t1[32], t2[32];
  fprintf(f, "# %d nodes on %d devices", p->n, D);
  if (p->profiled) fprintf(f, " (%d nodes timed from profiles)", p->profiled);
  fprintf(f, "\n");
  for (int d = 0; d < D; d++)
    fprintf(f, "# d%d = %s (%.3g Gflop/s)\n", d, c->devices[d].name, c->devices[d].flops / 1e9);
  for (int k = 0; k < p->n; k++) {
    const gr_node *v = p->node_at[k];
    int d = r->device[k];
    fprintf(f, "%s  d%d  start %s  finish %s  ", v->name, d, fmt_time(r->start[k], t1),
            fmt_time(r->finish[k], t2));
    switch ((gr_place_reason)r->reason[k]) {
      case GR_PLACE_PINNED:
        if (p->follows[v->id])
          fprintf(f, "pinned through the resource it uses");
        else if (v->requested_device[0])
          fprintf(f, "pinned '%s'", v->requested_device);
        else
          fprintf(f, "pinned through its colocation group");
        break;
      case GR_PLACE_COLOCATED:
        fprintf(f, "colocated with %s",
                r->cause[k] >= 0 ? p->node_at[r->cause[k]]->name : "its group");
        break;
      case GR_PLACE_CONSUMER:
        fprintf(f, "free source, with its consumer %s",
                r->cause[k] >= 0 ? p->node_at[r->cause[k]]->name : "(none)");
        break;
      case GR_PLACE_FALLBACK:
        fprintf(f, "simpler placement was faster: %s %s vs %s with the rest on d%d",
                r->locality_time < r->greedy_time ? "locality" : "greedy",
                fmt_time(fmin(r->greedy_time, r->locality_time), t1),
                fmt_time(r->baseline_time, t2), r->baseline_device);
        break;
      case GR_PLACE_LOCALITY:
        fprintf(f, "with most of its inputs: the locality placement was faster (%s vs greedy %s)",
                fmt_time(r->locality_time, t1), fmt_time(r->greedy_time, t2));
        break;
      case GR_PLACE_OUTSIDE:
        fprintf(f, "not in the step: with %s",
                r->cause[k] >= 0 ? p->node_at[r->cause[k]]->name : "the session's first device");
        break;
      case GR_PLACE_SEARCH:
        fprintf(f, "moved by the local search (its layer or group): %s vs %s before",
                fmt_time(r->search_time, t1), fmt_time(fmin(r->greedy_time, r->locality_time), t2));
        break;
      case GR_PLACE_CANDIDATE:
        fprintf(f, "the '%s' placement was chosen: %s vs the cost placement's %s",
                gr_place_candidate_name(r->chosen), fmt_time(r->cand_time[r->chosen], t1),
                fmt_time(r->cand_time[GR_PLACE_CAND_COST], t2));
        break;
      case GR_PLACE_CHOSEN:
        fprintf(f, "earliest finish");
        if (r->cand_finish) {
          fprintf(f, ":");
          int shown = 0;
          for (int e = 0; e < D; e++) {
            double x = r->cand_finish[(size_t)k * (size_t)D + (size_t)e];
            if (!isfinite(x)) continue;
            if (shown++ == 8) {
              fprintf(f, " ...");
              break;
            }
            fprintf(f, " d%d=%s", e, fmt_time(x, t1));
          }
        }
        break;
    }
    if (p->pin_ignored[v->id])
      fprintf(f, " (pin '%s' ignored: soft placement)", v->requested_device);
    else if (p->follows[v->id] && v->requested_device[0])
      fprintf(f, " (pin '%s' ignored: it follows the resource it uses)", v->requested_device);
    fprintf(f, "\n");
  }
  fprintf(f,
          "predicted step time: %s (greedy %s; locality %s; best single device / pins only %s on "
          "d%d)%s\n",
          fmt_time(r->step_time, t1), fmt_time(r->greedy_time, t2),
          fmt_time(r->locality_time, (char[32]){0}), fmt_time(r->baseline_time, (char[32]){0}),
          r->baseline_device,
          r->fell_back     ? " -- fell back"
          : r->by_locality ? " -- locality"
                           : "");
  fprintf(f, "bytes crossing devices: %s per step\n", fmt_bytes(r->cross_bytes, t1));
  gr_placement_print_candidates(p, f);
  explain_groups(p, f);
}

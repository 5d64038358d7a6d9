/* Inside placer/: the state of the simulated greedy placer (sched.c),
 * which the orchestration of a placement (schedule.c: the variants, the
 * locality placement, the candidates, the search, the choice) drives. One
 * state per placement run, on one thread (a clone for a second variant). */
#ifndef GR_PLACER_SCHED_INTERNAL_H
#define GR_PLACER_SCHED_INTERNAL_H

#include "placer_internal.h"

typedef struct gin gin;
typedef struct nstate {
  double fin, sarr; /* finish; arrival at sdev */
  int dev, sdev;    /* device (-1: not yet); last device its output was sent to */
} nstate;
typedef struct sched {
  const gr_place_graph *pg;
  const gr_cluster *c;
  int n, D;
  /* per device; dev_free: when its first thread slot is free (the earliest of
   * slot_free[slot_off[d] .. slot_off[d + 1] - 1]: one slot per inter-op
   * thread of its task) */
  double *inv_flops, *inv_mbw, *ovh, *scale, *dev_free, *out_free, *in_free, *tout;
  int *task, *host, *tstamp;
  int *slot_off;
  double *slot_free;
  /* per host with a core limit: its cores' free times (core_off as slot_off)
   * and the earliest of them (host_free); has_cores: some host has a limit */
  int *core_off;
  double *core_free, *host_free;
  bool has_cores;
  /* per task: the step cost it adds when used, and whether the run uses it */
  double *task_step, step_base;
  uint8_t *tused;
  int ntasks;
  void *res;         /* the block slot_off .. sorder live in (sched_resources) */
  gr_dataflow *flow; /* not NULL: placements are rated by the dataflow simulation */
  int *pos;          /* with flow: per node its position in order */
  double lat[GR_LINK_COUNT], inv_bw[GR_LINK_COUNT];
  /* per node */
  int *order, *mark, *gdev, *gfirst, *cause;
  double *st;
  nstate *ns; /* what consumers read of a placed node, in one cache line */
  uint8_t *deferred;
  const uint8_t *active; /* per node: in the step (NULL: every node) */
  int *sorder;           /* the devices in session order (gr_cluster_session_order) */
  /* pinned successors: CSR of (edge bytes, device) per node */
  int *ps_off, *ps_dev;
  double *ps_bytes;
  /* out-edges: consumer and in-edge index per out-edge */
  int *out_off, *out_dst, *out_edge;
  double *aff; /* per device: affinity of the node being placed */
  int *aff_stamp, *touched;
  double mean_lat, mean_ibw; /* mean link between distinct devices */
  double aff_weight;         /* 0: plain earliest finish */
  int stamp, stamp2, stamp_aff;
  gin *gin; /* inputs of the node being placed */
  int ngin, maxin;
  int *wstamp, stamp_w;    /* per device: warm for the node being placed */
  double lat_min, ibw_min; /* fastest link: latency, 1 / bandwidth */
  double last_tin, last_start;
  double cross;
} sched;

/* The state for pg on c (its scratch in *block, freed by gr_sched_free);
 * false when out of memory (free it anyway). */
bool gr_sched_init(sched *s, const gr_place_graph *pg, const gr_cluster *c, void **block);
void gr_sched_free(sched *s, void *block);
/* The visiting order (upward ranks); the out-edges to pinned consumers. */
bool gr_sched_order(sched *s);
bool gr_sched_pinned_successors(sched *s);
/* A second state sharing src's read-only arrays, to run a variant on another
 * thread (free: *block, dst->gin, dst->res). */
bool gr_sched_clone(sched *dst, const sched *src, void **block);
/* Runs the schedule; device NULL: greedy (reason, cand may be NULL), else
 * fixed. Returns the makespan with the step costs of the tasks used; the
 * devices, times and causes are in s->ns, s->st, s->cause, the bytes moved
 * in s->cross. */
double gr_sched_run(sched *s, const int *device, uint8_t *reason, double *cand);
/* Per node: in the step. */
static inline bool gr_sched_active(const sched *s, int v) {
  return !s->active || s->active[v];
}

#endif

/* The dataflow simulation of a fixed placement (docs/placement.md): the
 * step as the executors run it. Each device runs any node whose inputs have
 * arrived, the one of highest upward rank first, on as many threads as its
 * task has inter-op threads, and a host runs at most as many nodes at once
 * as it has cores (when the cluster says). A node's output goes to each
 * other device that consumes it once, when the node finishes: the transfer
 * waits for the sender's out-port and the receiver's in-port, holds both
 * for bytes / bandwidth and lands a latency later. Free sources run at time
 * 0 with their first consumer (by rank); nodes outside the step are left
 * out. The makespan gets the step costs of the tasks used.
 *
 * Discrete events: a heap of devices by the time they can next start a
 * node (stale entries skipped), per device a heap of nodes waiting for
 * their inputs (by ready time) and one of nodes ready (by rank). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "placer_internal.h"

/* A binary heap of (key, id), smallest key first. */
typedef struct heap {
  double *key;
  int *id;
  int n;
} heap;

static void heap_push(heap *h, double key, int id) {
  int i = h->n++;
  while (i > 0) {
    int p = (i - 1) / 2;
    if (h->key[p] <= key) break;
    h->key[i] = h->key[p], h->id[i] = h->id[p];
    i = p;
  }
  h->key[i] = key, h->id[i] = id;
}

static int heap_pop(heap *h) {
  int top = h->id[0];
  double key = h->key[--h->n];
  int id = h->id[h->n], i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && h->key[c + 1] < h->key[c]) c++;
    if (key <= h->key[c]) break;
    h->key[i] = h->key[c], h->id[i] = h->id[c];
    i = c;
  }
  h->key[i] = key, h->id[i] = id;
  return top;
}

struct gr_dataflow {
  const gr_place_graph *pg;
  const gr_cluster *c;
  int n, D, H, T;
  const int *pos; /* per node: visiting position (priority: smaller first) */
  const uint8_t *deferred;
  int *out_off, *out_dst, *out_edge; /* consumers */
  int *slot_off, *core_off, *sorder;
  double *task_step, step_base;
  /* per run */
  double *slot_free, *core_free, *out_free, *in_free, *ready, *fin, *dkey;
  int *missing, *dev, *sent_stamp, *count, *wmark;
  double *sent_arr;
  uint8_t *tused;
  heap devs, *pending, *avail; /* pending/avail: per device, sharing one block */
  double *pkey, *akey;
  int *pid, *aid;
};

gr_dataflow *gr_dataflow_new(const gr_place_graph *pg, const gr_cluster *c, const int *pos,
                             const uint8_t *deferred, const int *sorder) {
  gr_dataflow *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  int n = f->n = pg->num_nodes, D = f->D = c->num_devices;
  f->H = c->num_hosts, f->T = c->num_tasks;
  f->pg = pg, f->c = c, f->pos = pos, f->deferred = deferred;
  size_t sn = (size_t)n + 1, sd = (size_t)D + 1, se = (size_t)pg->num_edges + 1;
  int nslots = 0, ncores = 0;
  for (int d = 0; d < D; d++) nslots += c->tasks[c->devices[d].task].threads;
  for (int h = 0; h < f->H; h++) ncores += c->host_cores[h];
  f->out_off = calloc(sn + 1, sizeof(int));
  f->out_dst = gr_alloc_array(se, sizeof(int));
  f->out_edge = gr_alloc_array(se, sizeof(int));
  f->slot_off = gr_alloc_array(sd, sizeof(int));
  f->core_off = gr_alloc_array((size_t)f->H + 1, sizeof(int));
  f->sorder = gr_alloc_array(sd, sizeof(int));
  f->task_step = gr_alloc_array((size_t)f->T + 1, sizeof(double));
  f->slot_free = gr_alloc_array((size_t)nslots + 1, sizeof(double));
  f->core_free = gr_alloc_array((size_t)ncores + 1, sizeof(double));
  f->out_free = gr_alloc_array(sd, sizeof(double));
  f->in_free = gr_alloc_array(sd, sizeof(double));
  f->dkey = gr_alloc_array(sd, sizeof(double));
  f->ready = gr_alloc_array(sn, sizeof(double));
  f->fin = gr_alloc_array(sn, sizeof(double));
  f->missing = gr_alloc_array(sn, sizeof(int));
  f->dev = gr_alloc_array(sn, sizeof(int));
  f->sent_stamp = gr_alloc_array(sd, sizeof(int));
  f->count = gr_alloc_array(sd + 1, sizeof(int));
  f->wmark = gr_alloc_array(sn, sizeof(int));
  f->sent_arr = gr_alloc_array(sd, sizeof(double));
  f->tused = calloc((size_t)f->T + 1, 1);
  f->devs.key = gr_alloc_array(sd + 2 * sn, sizeof(double));
  f->devs.id = gr_alloc_array(sd + 2 * sn, sizeof(int));
  f->pending = calloc(sd, sizeof(heap));
  f->avail = calloc(sd, sizeof(heap));
  f->pkey = gr_alloc_array(sn, sizeof(double)), f->akey = gr_alloc_array(sn, sizeof(double));
  f->pid = gr_alloc_array(sn, sizeof(int)), f->aid = gr_alloc_array(sn, sizeof(int));
  if (!f->out_off || !f->out_dst || !f->out_edge || !f->slot_off || !f->core_off || !f->sorder ||
      !f->task_step || !f->slot_free || !f->core_free || !f->out_free || !f->in_free || !f->dkey ||
      !f->ready || !f->fin || !f->missing || !f->dev || !f->sent_stamp || !f->count || !f->wmark ||
      !f->sent_arr || !f->tused || !f->devs.key || !f->devs.id || !f->pending || !f->avail ||
      !f->pkey || !f->akey || !f->pid || !f->aid) {
    gr_dataflow_free(f);
    return NULL;
  }
  for (int e = 0; e < pg->num_edges; e++) f->out_off[pg->in_src[e] + 1]++;
  for (int v = 0; v < n; v++) f->out_off[v + 1] += f->out_off[v];
  int *fill = f->missing; /* temporarily */
  memcpy(fill, f->out_off, sizeof(int) * (size_t)n);
  for (int v = 0; v < n; v++)
    for (int e = pg->in_off[v]; e < pg->in_off[v + 1]; e++) {
      int j = fill[pg->in_src[e]]++;
      f->out_dst[j] = v, f->out_edge[j] = e;
    }
  f->slot_off[0] = 0;
  for (int d = 0; d < D; d++)
    f->slot_off[d + 1] = f->slot_off[d] + c->tasks[c->devices[d].task].threads;
  f->core_off[0] = 0;
  for (int h = 0; h < f->H; h++) f->core_off[h + 1] = f->core_off[h] + c->host_cores[h];
  memcpy(f->sorder, sorder, sizeof(int) * (size_t)D);
  for (int t = 0; t < f->T; t++) f->task_step[t] = gr_cluster_task_step(c, t);
  f->step_base = c->links[GR_LINK_SAME_TASK].step;
  return f;
}

void gr_dataflow_free(gr_dataflow *f) {
  if (!f) return;
  void *p[] = {f->out_off,   f->out_dst,   f->out_edge,  f->slot_off, f->core_off,   f->sorder,
               f->task_step, f->slot_free, f->core_free, f->out_free, f->in_free,    f->dkey,
               f->ready,     f->fin,       f->missing,   f->dev,      f->sent_stamp, f->count,
               f->wmark,     f->sent_arr,  f->tused,     f->devs.key, f->devs.id,    f->pending,
               f->avail,     f->pkey,      f->akey,      f->pid,      f->aid};
  for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
  free(f);
}

static inline bool in_step(const gr_dataflow *f, int v) {
  return f->pg->active[v];
}

static double node_time(const gr_dataflow *f, int v, int d) {
  if (f->deferred[v]) return 0;
  return gr_place_node_time(f->pg, f->c, v, d);
}

/* The earliest free slot of d, and of its host's cores (0: no limit). */
static int first_slot(const double *t, int a, int b) {
  int k = a;
  for (int i = a + 1; i < b; i++)
    if (t[i] < t[k]) k = i;
  return k;
}

/* When d can start its next node (INFINITY: nothing waits for it). */
static double next_time(const gr_dataflow *f, int d) {
  const heap *p = &f->pending[d], *a = &f->avail[d];
  if (!p->n && !a->n) return INFINITY;
  double t = f->slot_free[first_slot(f->slot_free, f->slot_off[d], f->slot_off[d + 1])];
  int h = f->c->devices[d].host;
  if (f->core_off[h + 1] > f->core_off[h]) {
    double x = f->core_free[first_slot(f->core_free, f->core_off[h], f->core_off[h + 1])];
    if (x > t) t = x;
  }
  if (!a->n && p->key[0] > t) t = p->key[0];
  return t;
}

static void wake(gr_dataflow *f, int d) {
  double t = next_time(f, d);
  if (t == f->dkey[d] || !isfinite(t)) return;
  f->dkey[d] = t;
  heap_push(&f->devs, t, d);
}

/* u finished at time t on its device: its output reaches each consuming
 * device once; consumers whose inputs are all there wait to start. */
static void finish(gr_dataflow *f, int u, double t, int stamp, double *cross) {
  const gr_place_graph *pg = f->pg;
  int du = f->dev[u];
  for (int j = f->out_off[u]; j < f->out_off[u + 1]; j++) {
    int w = f->out_dst[j], dw = f->dev[w];
    if (!in_step(f, w) || f->deferred[w] || f->missing[w] <= 0) continue;
    if (f->wmark[w] == stamp) continue; /* an input twice (the same producer): it arrives once */
    f->wmark[w] = stamp;
    double arr = t;
    if (dw != du) {
      if (f->sent_stamp[dw] == stamp) {
        arr = f->sent_arr[dw];
      } else {
        gr_link_kind kind = gr_cluster_link_kind(f->c, du, dw);
        const gr_link *l = &f->c->links[kind];
        /* in a loop, once per iteration both ends run */
        double times = pg->runs[u] < pg->runs[w] ? pg->runs[u] : pg->runs[w];
        double bytes = pg->in_bytes[f->out_edge[j]], t0 = t;
        if (f->out_free[du] > t0) t0 = f->out_free[du];
        if (f->in_free[dw] > t0) t0 = f->in_free[dw];
        double end = t0 + times * bytes / l->bandwidth;
        f->out_free[du] = f->in_free[dw] = end;
        arr = end + times * l->latency;
        *cross += times * bytes;
        f->sent_stamp[dw] = stamp, f->sent_arr[dw] = arr;
      }
    }
    if (arr > f->ready[w]) f->ready[w] = arr;
    if (--f->missing[w] == 0) {
      heap_push(&f->pending[dw], f->ready[w], w);
      wake(f, dw);
    }
  }
}

double gr_dataflow_run(gr_dataflow *f, const int *device, double *cross, double *start,
                       double *finish_out) {
  const gr_place_graph *pg = f->pg;
  int n = f->n, D = f->D;
  double moved = 0;
  memset(f->slot_free, 0, sizeof(double) * (size_t)f->slot_off[D]);
  memset(f->core_free, 0, sizeof(double) * (size_t)f->core_off[f->H]);
  memset(f->tused, 0, (size_t)f->T);
  for (int d = 0; d < D; d++) {
    f->out_free[d] = f->in_free[d] = 0, f->dkey[d] = -1, f->sent_stamp[d] = -1;
    f->pending[d] = (heap){f->pkey + 0, f->pid + 0, 0};
    f->avail[d] = (heap){f->akey + 0, f->aid + 0, 0};
  }
  /* the devices: given, or for a free source its first consumer's (by rank) */
  int *count = f->count; /* per device: nodes, for carving the heaps */
  for (int v = 0; v < n; v++) {
    int d = device[v];
    if (d < 0 && f->deferred[v]) {
      int best = -1;
      for (int j = f->out_off[v]; j < f->out_off[v + 1]; j++) {
        int w = f->out_dst[j];
        if (in_step(f, w) && device[w] >= 0 && (best < 0 || f->pos[w] < f->pos[best])) best = w;
      }
      d = best >= 0 ? device[best] : f->sorder[0];
    }
    f->dev[v] = d >= 0 && d < D ? d : f->sorder[0];
  }
  memset(count, 0, sizeof(int) * (size_t)(D + 1));
  for (int v = 0; v < n; v++)
    if (in_step(f, v)) count[f->dev[v] + 1]++;
  for (int d = 0; d < D; d++) {
    count[d + 1] += count[d];
    f->pending[d].key = f->pkey + count[d], f->pending[d].id = f->pid + count[d];
    f->avail[d].key = f->akey + count[d], f->avail[d].id = f->aid + count[d];
  }
  /* inputs to wait for: distinct producers in the step */
  for (int v = 0; v < n; v++) f->wmark[v] = -1;
  for (int v = 0; v < n; v++) {
    f->ready[v] = 0, f->fin[v] = 0, f->missing[v] = 0;
    if (!in_step(f, v)) continue;
    f->tused[f->c->devices[f->dev[v]].task] = 1;
    for (int e = pg->in_off[v]; e < pg->in_off[v + 1]; e++) {
      int u = pg->in_src[e];
      if (f->wmark[u] == v || !in_step(f, u)) continue;
      f->wmark[u] = v;
      f->missing[v]++;
    }
  }
  for (int v = 0; v < n; v++) f->wmark[v] = -1;
  f->devs.n = 0;
  int stamp = 0;
  /* free sources are there at time 0; nodes without inputs wait to start
   * (marked first: a finish makes more nodes ready, which it queues itself) */
  for (int v = 0; v < n; v++)
    if (in_step(f, v) && f->missing[v] == 0) f->missing[v] = -1;
  for (int v = 0; v < n; v++) {
    if (!in_step(f, v) || f->missing[v] != -1) continue;
    if (f->deferred[v]) {
      finish(f, v, 0, stamp++, &moved);
    } else {
      heap_push(&f->pending[f->dev[v]], 0, v);
      wake(f, f->dev[v]);
    }
  }
  double makespan = 0;
  while (f->devs.n) {
    double t = f->devs.key[0];
    int d = heap_pop(&f->devs);
    if (t != f->dkey[d]) continue; /* stale */
    double now = next_time(f, d);
    if (now > t) { /* its host's cores were taken meanwhile */
      f->dkey[d] = -1;
      wake(f, d);
      continue;
    }
    f->dkey[d] = -1;
    heap *p = &f->pending[d], *a = &f->avail[d];
    while (p->n && p->key[0] <= now) {
      int w = heap_pop(p);
      heap_push(a, (double)f->pos[w], w);
    }
    int v = heap_pop(a);
    double end = now + node_time(f, v, d);
    int s = first_slot(f->slot_free, f->slot_off[d], f->slot_off[d + 1]);
    f->slot_free[s] = end;
    int h = f->c->devices[d].host;
    if (f->core_off[h + 1] > f->core_off[h])
      f->core_free[first_slot(f->core_free, f->core_off[h], f->core_off[h + 1])] = end;
    if (start) start[v] = now;
    f->fin[v] = end;
    if (end > makespan) makespan = end;
    finish(f, v, end, stamp++, &moved);
    wake(f, d);
    /* a device of the same host may have been held by the cores */
  }
  if (start || finish_out)
    for (int v = 0; v < n; v++) {
      if (!in_step(f, v) || f->deferred[v]) {
        if (start) start[v] = 0;
        if (finish_out) finish_out[v] = 0;
      } else if (finish_out) {
        finish_out[v] = f->fin[v];
      }
    }
  makespan += f->step_base;
  for (int t = 0; t < f->T; t++)
    if (f->tused[t]) makespan += f->task_step[t];
  if (cross) *cross = moved;
  return makespan;
}

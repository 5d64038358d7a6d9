/* The simulated greedy placer on the compact graph.
 *
 * Nodes are visited in critical-path order (upward rank, ties by index: a
 * topological order). Each node (a colocation group as a unit: its first
 * visited member decides) goes to the allowed device where it would finish
 * earliest, given when its inputs arrive: a cross-device transfer starts when
 * the producer has finished and both the sender's out-port and the receiver's
 * in-port are free, occupies them for bytes / bandwidth, and arrives a link
 * latency later; a tensor sent once to a device is reused by later consumers
 * there. Devices run their nodes in visiting order. Free sources (no inputs,
 * no flops: constants, placeholders) follow their first consumer. The same
 * routine with fixed devices is the simulator, so the greedy placement's
 * predicted time is exactly what gr_place_simulate says of it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>

#include "sched_internal.h"

static void *big_alloc(size_t bytes);

static inline int link_kind(const sched *s, int a, int b) {
  return s->task[a] == s->task[b]
             ? GR_LINK_SAME_TASK
             : (s->host[a] == s->host[b] ? GR_LINK_SAME_HOST : GR_LINK_CROSS_HOST);
}

/* When d can start a node: a thread slot of d free and, on a host with a
 * core limit, a core. */
static inline double dev_ready(const sched *s, int d) {
  double t = s->dev_free[d];
  if (s->has_cores && s->host_free[s->host[d]] > t) t = s->host_free[s->host[d]];
  return t;
}

/* The slot (of [off, end)) free first. */
static inline int first_free(const double *t, int off, int end) {
  int b = off;
  for (int i = off + 1; i < end; i++)
    if (t[i] < t[b]) b = i;
  return b;
}

/* d runs a node until fin: its first free slot (and its host's first free
 * core) is taken until then. */
static void occupy(sched *s, int d, double fin) {
  int a = s->slot_off[d], b = s->slot_off[d + 1];
  if (b - a == 1) {
    s->slot_free[a] = s->dev_free[d] = fin;
  } else {
    s->slot_free[first_free(s->slot_free, a, b)] = fin;
    s->dev_free[d] = s->slot_free[first_free(s->slot_free, a, b)];
  }
  int h = s->host[d];
  if (s->has_cores && s->core_off[h + 1] > s->core_off[h]) {
    a = s->core_off[h], b = s->core_off[h + 1];
    s->core_free[first_free(s->core_free, a, b)] = fin;
    s->host_free[h] = s->core_free[first_free(s->core_free, a, b)];
  }
}

static inline double node_time(const sched *s, int v, int d) {
  const gr_place_graph *pg = s->pg;
  if (s->deferred[v]) return 0;
  if (pg->seconds[v] >= 0) return pg->seconds[v] * s->scale[d];
  double a = pg->flops[v] * s->inv_flops[d], b = pg->bytes[v] * s->inv_mbw[d];
  return ((a > b ? a : b) + s->ovh[d]) * s->scale[d];
}

double gr_place_node_time(const gr_place_graph *pg, const gr_cluster *c, int v, int d) {
  const gr_cluster_device *dv = &c->devices[d];
  if (pg->seconds[v] >= 0) return pg->seconds[v] * dv->time_scale;
  double a = pg->flops[v] / dv->flops, b = pg->bytes[v] / dv->mem_bandwidth;
  return ((a > b ? a : b) + dv->overhead) * dv->time_scale;
}

/* The inputs of the node being placed, read once (distinct producers). */
struct gin {
  int u, du, sdev;
  double fin, sarr, bytes, arr;
};

static void gather(sched *s, int v) {
  const gr_place_graph *pg = s->pg;
  int stamp = ++s->stamp, k = 0;
  for (int e = pg->in_off[v]; e < pg->in_off[v + 1]; e++) {
    int u = pg->in_src[e];
    if (s->mark[u] == stamp) continue; /* the same tensor twice: arrives once */
    s->mark[u] = stamp;
    gin *g = &s->gin[k++];
    g->u = u;
    g->du = s->ns[u].dev;
    g->sdev = s->ns[u].sdev;
    g->fin = s->ns[u].fin;
    g->sarr = s->ns[u].sarr;
    g->bytes = pg->in_bytes[e];
  }
  s->ngin = k;
}

/* Finish time of the gathered node v on d given the current state. */
static double eval(sched *s, int v, int d) {
  double ready = 0, tin = s->in_free[d];
  int stamp = ++s->stamp2;
  for (int i = 0; i < s->ngin; i++) {
    gin *g = &s->gin[i];
    int du = g->du;
    double r;
    if (du < 0) continue; /* a free source not placed yet: it comes here */
    if (du == d) {
      r = g->fin;
    } else if (g->sdev == d) {
      r = g->sarr;
    } else {
      int k = link_kind(s, du, d);
      double of = s->tstamp[du] == stamp ? s->tout[du] : s->out_free[du];
      double t0 = g->fin;
      if (of > t0) t0 = of;
      if (tin > t0) t0 = tin;
      tin = t0 + g->bytes * s->inv_bw[k];
      s->tout[du] = tin;
      s->tstamp[du] = stamp;
      r = g->arr = tin + s->lat[k];
    }
    if (r > ready) ready = r;
  }
  s->last_tin = tin;
  double free = dev_ready(s, d), start = free > ready ? free : ready;
  s->last_start = start;
  return start + node_time(s, v, d);
}

/* Places the gathered node v on d: reserves ports, records transfers. */
static double commit(sched *s, int v, int d) {
  double fin = eval(s, v, d);
  int stamp = s->stamp2;
  for (int i = 0; i < s->ngin; i++) {
    gin *g = &s->gin[i];
    int u = g->u, du = g->du;
    if (du < 0) { /* a free source comes here; a node outside the step stays */
      if (!s->deferred[u]) continue;
      s->ns[u].dev = d;
      s->st[u] = s->ns[u].fin = 0;
      s->cause[u] = v;
    } else if (du != d && g->sdev != d) {
      s->ns[u].sdev = d;
      s->ns[u].sarr = g->arr;
      if (s->tstamp[du] == stamp) s->out_free[du] = s->tout[du];
      s->cross += g->bytes;
    }
  }
  s->in_free[d] = s->last_tin;
  s->st[v] = s->last_start;
  s->ns[v].fin = fin;
  s->ns[v].dev = d;
  if (!s->deferred[v]) occupy(s, d, fin);
  s->tused[s->task[d]] = 1;
  return fin;
}

/* Radix sort of node indices by rank descending, ties by index ascending.
 * Keys are the ranks rounded to float: rounding is monotone, so the order
 * stays topological (an edge's producer has the larger or equal key and the
 * smaller index). */
static bool sort_by_rank(const double *rank, int n, int *order) {
  size_t sn = (size_t)n + 1;
  uint32_t *key = big_alloc(sn * sizeof(uint32_t)), *ktmp = big_alloc(sn * sizeof(uint32_t));
  int *tmp = big_alloc(sn * sizeof(int));
  size_t *cnt = calloc((size_t)1 << 16, sizeof(size_t));
  bool ok = key && ktmp && tmp && cnt;
  for (int v = 0; v < n; v++) order[v] = v;
  if (ok) {
    for (int v = 0; v < n; v++) {
      float f = (float)rank[v];
      uint32_t b;
      memcpy(&b, &f, sizeof b); /* ranks are >= 0: bits order like values */
      key[v] = ~b;
    }
    for (int pass = 0; pass < 2; pass++) {
      int sh = pass * 16;
      memset(cnt, 0, sizeof(size_t) << 16);
      for (int i = 0; i < n; i++) cnt[(key[i] >> sh) & 0xffff]++;
      size_t sum = 0;
      for (size_t b = 0; b < ((size_t)1 << 16); b++) {
        size_t c = cnt[b];
        cnt[b] = sum;
        sum += c;
      }
      for (int i = 0; i < n; i++) {
        size_t p = cnt[(key[i] >> sh) & 0xffff]++;
        ktmp[p] = key[i];
        tmp[p] = order[i];
      }
      uint32_t *kt = key;
      key = ktmp;
      ktmp = kt;
      memcpy(order, tmp, sizeof *order * (size_t)n);
    }
  }
  free(key);
  free(ktmp);
  free(tmp);
  free(cnt);
  return ok;
}

/* Large scratch arrays on transparent huge pages where the kernel offers them
 * (fewer page faults on million-node graphs). */
static void *big_alloc(size_t bytes) {
  if (bytes < ((size_t)4 << 20)) return malloc(bytes);
  void *p = NULL;
  size_t huge = (size_t)2 << 20;
  if (posix_memalign(&p, huge, (bytes + huge - 1) & ~(huge - 1)) != 0) return NULL;
  madvise(p, (bytes + huge - 1) & ~(huge - 1), MADV_HUGEPAGE);
  return p;
}

/* Scratch is one allocation; per-node arrays come from it. */
static void *carve(char **p, size_t bytes) {
  void *r = *p;
  *p += (bytes + 63) & ~(size_t)63;
  return r;
}

/* Thread slots, host cores, task step costs, session order: one block
 * (s->res). own: only the arrays a run writes (for a clone, which shares
 * the others with its source). */
static bool sched_resources(sched *s, bool own) {
  const gr_cluster *c = s->c;
  int D = s->D, H = c->num_hosts, T = c->num_tasks, nslots = 0, ncores = 0;
  for (int d = 0; d < D; d++) nslots += c->tasks[c->devices[d].task].threads;
  for (int h = 0; h < H; h++) ncores += c->host_cores[h];
  size_t nd = (size_t)nslots + (size_t)ncores + (size_t)H + (size_t)T + 4;
  size_t ni = (size_t)D + 1 + (size_t)H + 1 + (size_t)D + 1;
  char *p = s->res = malloc(nd * sizeof(double) + ni * sizeof(int) + (size_t)T + 8);
  if (!p) return false;
  double *x = (double *)p;
  s->slot_free = x, x += nslots + 1;
  s->core_free = x, x += ncores + 1;
  s->host_free = x, x += H + 1;
  double *task_step = x;
  int *y = (int *)(p + nd * sizeof(double));
  s->tused = (uint8_t *)(y + ni);
  if (!own) return true;
  s->task_step = task_step;
  s->slot_off = y, y += D + 1;
  s->core_off = y, y += H + 1;
  s->sorder = y;
  s->ntasks = T;
  s->slot_off[0] = 0;
  for (int d = 0; d < D; d++)
    s->slot_off[d + 1] = s->slot_off[d] + c->tasks[c->devices[d].task].threads;
  s->core_off[0] = 0;
  s->has_cores = false;
  for (int h = 0; h < H; h++) {
    s->core_off[h + 1] = s->core_off[h] + c->host_cores[h];
    s->has_cores |= c->host_cores[h] > 0;
  }
  for (int t = 0; t < T; t++) s->task_step[t] = gr_cluster_task_step(c, t);
  s->step_base = c->links[GR_LINK_SAME_TASK].step;
  gr_cluster_session_order(c, s->sorder);
  return true;
}

bool gr_sched_init(sched *s, const gr_place_graph *pg, const gr_cluster *c, void **block) {
  memset(s, 0, sizeof *s);
  s->pg = pg;
  s->c = c;
  int n = s->n = pg->num_nodes, D = s->D = c->num_devices;
  size_t sn = (size_t)n + 1, sd = (size_t)D + 1, total = 0;
  total += 9 * (sd * sizeof(double) + 64) + 6 * (sd * sizeof(int) + 64);
  total += 2 * (sn * sizeof(int) + 64);
  total += 5 * (sn * sizeof(int) + 64) + (sn * sizeof(double) + 64) + (sn * sizeof(nstate) + 64) +
           sn + 64;
  char *p = *block = big_alloc(total);
  if (!p) return false;
  s->inv_flops = carve(&p, sd * sizeof(double));
  s->inv_mbw = carve(&p, sd * sizeof(double));
  s->ovh = carve(&p, sd * sizeof(double));
  s->scale = carve(&p, sd * sizeof(double));
  s->dev_free = carve(&p, sd * sizeof(double));
  s->out_free = carve(&p, sd * sizeof(double));
  s->in_free = carve(&p, sd * sizeof(double));
  s->tout = carve(&p, sd * sizeof(double));
  s->task = carve(&p, sd * sizeof(int));
  s->host = carve(&p, sd * sizeof(int));
  s->tstamp = carve(&p, sd * sizeof(int));
  s->aff = carve(&p, sd * sizeof(double));
  s->aff_stamp = carve(&p, sd * sizeof(int));
  s->touched = carve(&p, sd * sizeof(int));
  s->wstamp = carve(&p, sd * sizeof(int));
  s->out_off = carve(&p, (sn + 1) * sizeof(int));
  s->order = carve(&p, sn * sizeof(int));
  s->ns = carve(&p, sn * sizeof(nstate));
  s->mark = carve(&p, sn * sizeof(int));
  s->gdev = carve(&p, sn * sizeof(int));
  s->gfirst = carve(&p, sn * sizeof(int));
  s->cause = carve(&p, sn * sizeof(int));
  s->st = carve(&p, sn * sizeof(double));
  s->deferred = carve(&p, sn);
  for (int d = 0; d < D; d++) {
    const gr_cluster_device *dv = &c->devices[d];
    s->inv_flops[d] = 1.0 / dv->flops;
    s->inv_mbw[d] = 1.0 / dv->mem_bandwidth;
    s->ovh[d] = dv->overhead;
    s->scale[d] = dv->time_scale;
    s->task[d] = dv->task;
    s->host[d] = dv->host;
  }
  s->active = pg->active;
  if (!sched_resources(s, true)) return false;
  s->lat_min = s->ibw_min = INFINITY;
  for (int k = 0; k < GR_LINK_COUNT; k++) {
    s->lat[k] = c->links[k].latency;
    s->inv_bw[k] = 1.0 / c->links[k].bandwidth;
    if (s->lat[k] < s->lat_min) s->lat_min = s->lat[k];
    if (s->inv_bw[k] < s->ibw_min) s->ibw_min = s->inv_bw[k];
  }
  int maxin = 1;
  for (int v = 0; v < n; v++)
    if (pg->in_off[v + 1] - pg->in_off[v] > maxin) maxin = pg->in_off[v + 1] - pg->in_off[v];
  s->maxin = maxin;
  s->gin = gr_alloc_array((size_t)maxin, sizeof(gin));
  if (!s->gin) return false;
  /* Out-edges (consumers) of every node. */
  size_t se = (size_t)pg->num_edges + 1;
  s->out_dst = big_alloc(se * sizeof(int));
  s->out_edge = big_alloc(se * sizeof(int));
  if (!s->out_dst || !s->out_edge) return false;
  memset(s->out_off, 0, (sn + 1) * sizeof(int));
  for (int e = 0; e < pg->num_edges; e++) s->out_off[pg->in_src[e] + 1]++;
  for (int v = 0; v < n; v++) s->out_off[v + 1] += s->out_off[v];
  int *fill = s->order; /* temporarily */
  memcpy(fill, s->out_off, (size_t)n * sizeof(int));
  for (int v = 0; v < n; v++)
    for (int e = pg->in_off[v]; e < pg->in_off[v + 1]; e++) {
      int j = fill[pg->in_src[e]]++;
      s->out_dst[j] = v;
      s->out_edge[j] = e;
    }
  /* Free sources: no inputs, no flops, no measured time, alone and unpinned. */
  int *gsize = s->mark; /* temporarily */
  memset(gsize, 0, sn * sizeof(int));
  for (int v = 0; v < n; v++) gsize[pg->group[v]]++;
  for (int v = 0; v < n; v++)
    s->deferred[v] = pg->in_off[v] == pg->in_off[v + 1] && pg->flops[v] == 0 &&
                     pg->seconds[v] < 0 && gsize[v] == 1 && pg->group[v] == v && pg->allow[v] < 0;
  return true;
}

static void sched_reset(sched *s) {
  int n = s->n, D = s->D;
  for (int d = 0; d < D; d++) {
    s->dev_free[d] = s->out_free[d] = s->in_free[d] = 0;
    s->tstamp[d] = s->aff_stamp[d] = s->wstamp[d] = 0;
  }
  memset(s->slot_free, 0, sizeof(double) * (size_t)s->slot_off[D]);
  int H = s->c->num_hosts;
  memset(s->core_free, 0, sizeof(double) * (size_t)s->core_off[H]);
  memset(s->host_free, 0, sizeof(double) * (size_t)H);
  memset(s->tused, 0, (size_t)s->ntasks);
  s->stamp_aff = s->stamp_w = 0;
  for (int v = 0; v < n; v++) {
    s->ns[v].dev = s->ns[v].sdev = s->gdev[v] = s->gfirst[v] = s->cause[v] = -1;
    s->ns[v].fin = s->ns[v].sarr = 0;
    s->mark[v] = 0;
  }
  s->stamp = s->stamp2 = 0;
  s->cross = 0;
}

/* Upward ranks with mean compute time and mean transfer cost, then the order. */
bool gr_sched_order(sched *s) {
  const gr_place_graph *pg = s->pg;
  int n = s->n, D = s->D;
  double mf = 0, mb = 0, mo = 0, ms = 0;
  for (int d = 0; d < D; d++)
    mf += s->inv_flops[d] * s->scale[d], mb += s->inv_mbw[d] * s->scale[d],
        mo += s->ovh[d] * s->scale[d], ms += s->scale[d];
  mf /= D, mb /= D, mo /= D, ms /= D;
  /* Mean link over ordered pairs of distinct devices (sampled when many). */
  double lat = 0, ibw = 0;
  long pairs = 0;
  int lim = D < 256 ? D : 256;
  for (int a = 0; a < lim; a++)
    for (int b = 0; b < lim; b++)
      if (a != b) {
        int k = link_kind(s, a, b);
        lat += s->lat[k], ibw += s->inv_bw[k], pairs++;
      }
  double frac = D > 1 ? (double)(D - 1) / D : 0;
  if (pairs) {
    s->mean_lat = lat / (double)pairs, s->mean_ibw = ibw / (double)pairs;
    lat = frac * s->mean_lat, ibw = frac * s->mean_ibw;
  }
  size_t sn = (size_t)n + 1;
  double *rank = big_alloc(sn * sizeof(double)), *best = big_alloc(sn * sizeof(double));
  bool ok = rank && best;
  if (ok) memset(best, 0, sn * sizeof(double));
  if (ok) {
    for (int v = n - 1; v >= 0; v--) {
      double t;
      if (!gr_sched_active(s, v)) { /* outside the step: ranks nothing */
        rank[v] = 0;
        continue;
      }
      if (s->deferred[v])
        t = 0;
      else if (pg->seconds[v] >= 0)
        t = pg->seconds[v] * ms;
      else {
        double a = pg->flops[v] * mf, b = pg->bytes[v] * mb;
        t = (a > b ? a : b) + mo;
      }
      double r = rank[v] = t + best[v];
      for (int e = pg->in_off[v]; e < pg->in_off[v + 1]; e++) {
        int u = pg->in_src[e];
        double x = r + (s->deferred[u] ? 0 : lat + pg->in_bytes[e] * ibw);
        if (x > best[u]) best[u] = x;
      }
    }
    ok = sort_by_rank(rank, n, s->order);
  }
  free(rank);
  free(best);
  return ok;
}

/* Affinity of v to each device: for every consumer s of v, the transfer of
 * v's tensor that placing v away from the devices of s's other (placed)
 * inputs would cost. Subtracted from the finish time when comparing devices,
 * it keeps nodes that feed the same consumers together unless spreading
 * them gains more than the transfers cost. Returns the devices touched. */
static int affinity(sched *s, int v) {
  const gr_place_graph *pg = s->pg;
  int st = ++s->stamp_aff, nt = 0;
  for (int j = s->out_off[v]; j < s->out_off[v + 1]; j++) {
    int w = s->out_dst[j];
    double cost = s->mean_lat + pg->in_bytes[s->out_edge[j]] * s->mean_ibw;
    int seen = ++s->stamp2; /* devices counted for this consumer */
    for (int e = pg->in_off[w]; e < pg->in_off[w + 1]; e++) {
      int u = pg->in_src[e], du = s->ns[u].dev;
      if (u == v || du < 0 || s->tstamp[du] == seen) continue;
      s->tstamp[du] = seen;
      if (s->aff_stamp[du] != st) {
        s->aff_stamp[du] = st;
        s->aff[du] = 0;
        nt++;
      }
      s->aff[du] += cost;
    }
  }
  return nt;
}

/* Where a node the run did not place goes (outside the step, or a free
 * source nobody in it consumed): with its group, else with its first
 * placed input, else its first placed consumer, else the first device of
 * the session order its group allows. */
static int follow(sched *s, int v, int *cause) {
  const gr_place_graph *pg = s->pg;
  int g = pg->group[v], set = pg->allow[g];
  *cause = -1;
  if (s->gdev[g] >= 0) return *cause = s->gfirst[g], s->gdev[g];
  for (int e = pg->in_off[v]; e < pg->in_off[v + 1]; e++) {
    int u = pg->in_src[e], du = s->ns[u].dev;
    if (du >= 0 && gr_place_allowed(pg, set, du)) return *cause = u, du;
  }
  for (int j = s->out_off[v]; j < s->out_off[v + 1]; j++) {
    int w = s->out_dst[j], dw = s->ns[w].dev;
    if (dw >= 0 && gr_place_allowed(pg, set, dw)) return *cause = w, dw;
  }
  for (int k = 0; k < s->D; k++)
    if (gr_place_allowed(pg, set, s->sorder[k])) return s->sorder[k];
  return 0;
}

/* Runs the schedule; device NULL: greedy, else fixed. Returns the makespan:
 * the last finish of a node of the step, plus the step costs of the tasks
 * it used (gr_cluster_step_overhead). */
double gr_sched_run(sched *s, const int *device, uint8_t *reason, double *cand) {
  const gr_place_graph *pg = s->pg;
  int D = s->D;
  sched_reset(s);
  double makespan = 0;
  for (int i = 0; i < s->n; i++) {
    int v = s->order[i];
    int g = pg->group[v], d;
    if (!gr_sched_active(s, v)) { /* placed after the step (follow) */
      if (device && device[v] >= 0 && s->gdev[g] < 0) s->gdev[g] = device[v], s->gfirst[g] = v;
      continue;
    }
    if (device) {
      d = device[v];
      if (d >= 0 && s->gdev[g] < 0) s->gdev[g] = d, s->gfirst[g] = v;
    } else if (s->gdev[g] >= 0) {
      d = s->gdev[g];
      s->cause[v] = s->gfirst[g];
      if (reason) reason[v] = GR_PLACE_COLOCATED;
    } else if (s->deferred[v]) {
      if (reason) reason[v] = GR_PLACE_CONSUMER;
      continue;
    } else {
      gather(s, v);
      int set = pg->allow[g], nallowed = 0, ntouched = s->aff_weight > 0 ? affinity(s, v) : 0;
      double best = INFINITY, bestfin = INFINITY;
      d = -1;
      /* Warm devices (holding an input, or affine) first; a cold device is
       * skipped when a lower bound of its finish (every input transferred
       * over the fastest link) already exceeds the best score: the answer is
       * the same as comparing every device. */
      int wst = ++s->stamp_w;
      double rlb = 0;
      for (int i = 0; i < s->ngin; i++) {
        const gin *gi = &s->gin[i];
        if (gi->du < 0) continue;
        s->wstamp[gi->du] = wst;
        if (gi->sdev >= 0) s->wstamp[gi->sdev] = wst;
        double x = gi->fin + s->lat_min + gi->bytes * s->ibw_min;
        if (x > rlb) rlb = x;
      }
      for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < D; k++) {
          if (!gr_place_allowed(pg, set, k)) continue;
          bool warm = cand || s->wstamp[k] == wst || s->aff_stamp[k] == s->stamp_aff;
          if (warm != (pass == 0)) continue;
          nallowed++;
          if (!warm) {
            double free = dev_ready(s, k), lb = free > rlb ? free : rlb;
            if (lb + node_time(s, v, k) > best) continue;
          }
          double f = eval(s, v, k), score = f;
          /* a task the step does not use yet adds its step cost */
          if (!s->tused[s->task[k]]) score += s->task_step[s->task[k]];
          if (s->aff_stamp[k] == s->stamp_aff) score -= s->aff_weight * s->aff[k];
          /* Look ahead to pinned consumers: their transfer comes after v. */
          if (s->ps_off)
            for (int j = s->ps_off[v]; j < s->ps_off[v + 1]; j++)
              if (s->ps_dev[j] != k) {
                int kk = link_kind(s, k, s->ps_dev[j]);
                double x = f + s->lat[kk] + s->ps_bytes[j] * s->inv_bw[kk];
                if (x > score) score = x;
              }
          if (cand) cand[(size_t)v * (size_t)D + (size_t)k] = f;
          if (score < best || (score == best && (f < bestfin || (f == bestfin && k < d))))
            best = score, bestfin = f, d = k;
        }
      (void)ntouched;
      if (d < 0) d = 0; /* no allowed device: checked by the caller */
      if (reason) reason[v] = set >= 0 && nallowed == 1 ? GR_PLACE_PINNED : GR_PLACE_CHOSEN;
      s->gdev[g] = d;
      s->gfirst[g] = v;
    }
    if (device && s->deferred[v]) { /* d < 0: with its first consumer, as when greedy */
      if (d >= 0) s->ns[v].dev = d, s->st[v] = s->ns[v].fin = 0, s->tused[s->task[d]] = 1;
      continue;
    }
    if (device || d != s->gdev[g] || s->gfirst[g] != v) gather(s, v);
    double f = commit(s, v, d);
    if (f > makespan) makespan = f;
  }
  /* Nodes outside the step, free sources nobody consumed: they follow. */
  for (int v = 0; v < s->n; v++) {
    if (s->ns[v].dev >= 0) continue;
    int cause, d = device && device[v] >= 0 ? device[v] : follow(s, v, &cause);
    if (!device || device[v] < 0) {
      s->cause[v] = cause;
      if (reason && !gr_sched_active(s, v)) reason[v] = GR_PLACE_OUTSIDE;
    }
    int g = pg->group[v];
    if (s->gdev[g] < 0) s->gdev[g] = d, s->gfirst[g] = v;
    s->ns[v].dev = d;
    s->st[v] = s->ns[v].fin = 0;
  }
  makespan += s->step_base;
  for (int t = 0; t < s->ntasks; t++)
    if (s->tused[t]) makespan += s->task_step[t];
  return makespan;
}

/* Out-edges to nodes whose group is pinned to exactly one device. */
bool gr_sched_pinned_successors(sched *s) {
  const gr_place_graph *pg = s->pg;
  int n = s->n, D = s->D, count = 0;
  if (!pg->num_allow_sets) return true;
  int *single = gr_alloc_array((size_t)(pg->num_allow_sets + 1), sizeof(int));
  if (!single) return false;
  for (int a = 0; a < pg->num_allow_sets; a++) {
    single[a] = -1;
    int cnt = 0;
    for (int d = 0; d < D; d++)
      if (gr_place_allowed(pg, a, d)) cnt++, single[a] = d;
    if (cnt != 1) single[a] = -1;
  }
#define PIN_OF(v) (pg->allow[pg->group[v]] >= 0 ? single[pg->allow[pg->group[v]]] : -1)
  for (int v = 0; v < n; v++)
    if (PIN_OF(v) >= 0) count += pg->in_off[v + 1] - pg->in_off[v];
  s->ps_off = calloc((size_t)n + 2, sizeof(int));
  s->ps_dev = gr_alloc_array((size_t)count + 1, sizeof(int));
  s->ps_bytes = gr_alloc_array((size_t)count + 1, sizeof(double));
  if (!s->ps_off || !s->ps_dev || !s->ps_bytes) {
    free(single);
    return false;
  }
  for (int v = 0; v < n; v++)
    if (PIN_OF(v) >= 0)
      for (int e = pg->in_off[v]; e < pg->in_off[v + 1]; e++) s->ps_off[pg->in_src[e] + 1]++;
  for (int v = 0; v < n; v++) s->ps_off[v + 1] += s->ps_off[v];
  int *fill = gr_alloc_array((size_t)n + 1, sizeof(int));
  if (!fill) {
    free(single);
    return false;
  }
  memcpy(fill, s->ps_off, sizeof(int) * (size_t)n);
  for (int v = 0; v < n; v++) {
    int p = PIN_OF(v);
    if (p < 0) continue;
    for (int e = pg->in_off[v]; e < pg->in_off[v + 1]; e++) {
      int j = fill[pg->in_src[e]]++;
      s->ps_dev[j] = p;
      s->ps_bytes[j] = pg->in_bytes[e];
    }
  }
#undef PIN_OF
  free(fill);
  free(single);
  return true;
}

void gr_sched_free(sched *s, void *block) {
  free(block);
  free(s->res);
  free(s->out_dst);
  free(s->out_edge);
  free(s->gin);
  free(s->ps_off);
  free(s->ps_dev);
  free(s->ps_bytes);
}

/* A second schedule state sharing the read-only arrays of src (order,
 * consumers, device constants), to run a variant on another thread. */
bool gr_sched_clone(sched *dst, const sched *src, void **block) {
  *dst = *src;
  size_t sn = (size_t)src->n + 1, sd = (size_t)src->D + 1;
  size_t total = 5 * (sd * sizeof(double) + 64) + 4 * (sd * sizeof(int) + 64) +
                 4 * (sn * sizeof(int) + 64) + (sn * sizeof(double) + 64) +
                 (sn * sizeof(nstate) + 64);
  char *p = *block = big_alloc(total);
  dst->gin = gr_alloc_array((size_t)src->maxin, sizeof(gin));
  if (!p || !dst->gin || !sched_resources(dst, false)) {
    free(*block);
    free(dst->gin);
    if (p && dst->gin) free(dst->res);
    *block = NULL;
    return false;
  }
  dst->dev_free = carve(&p, sd * sizeof(double));
  dst->out_free = carve(&p, sd * sizeof(double));
  dst->in_free = carve(&p, sd * sizeof(double));
  dst->tout = carve(&p, sd * sizeof(double));
  dst->aff = carve(&p, sd * sizeof(double));
  dst->tstamp = carve(&p, sd * sizeof(int));
  dst->aff_stamp = carve(&p, sd * sizeof(int));
  dst->touched = carve(&p, sd * sizeof(int));
  dst->wstamp = carve(&p, sd * sizeof(int));
  dst->ns = carve(&p, sn * sizeof(nstate));
  dst->mark = carve(&p, sn * sizeof(int));
  dst->gdev = carve(&p, sn * sizeof(int));
  dst->gfirst = carve(&p, sn * sizeof(int));
  dst->cause = carve(&p, sn * sizeof(int));
  dst->st = carve(&p, sn * sizeof(double));
  return true;
}

double gr_place_simulate(const gr_place_graph *pg, const gr_cluster *c, const int *device,
                         double *cross_bytes) {
  sched s;
  void *block;
  if (!gr_sched_init(&s, pg, c, &block) || !gr_sched_order(&s)) {
    gr_sched_free(&s, block);
    return -1;
  }
  double m = gr_sched_run(&s, device, NULL, NULL);
  if (cross_bytes) *cross_bytes = s.cross;
  gr_sched_free(&s, block);
  return m;
}

double gr_place_simulate_dataflow(const gr_place_graph *pg, const gr_cluster *c, const int *device,
                                  double *cross_bytes) {
  sched s;
  void *block;
  double m = -1;
  int *pos = NULL;
  gr_dataflow *f = NULL;
  if (gr_sched_init(&s, pg, c, &block) && gr_sched_order(&s) &&
      (pos = gr_alloc_array((size_t)s.n + 1, sizeof(int)))) {
    for (int i = 0; i < s.n; i++) pos[s.order[i]] = i;
    if ((f = gr_dataflow_new(pg, c, pos, s.deferred, s.sorder)))
      m = gr_dataflow_run(f, device, cross_bytes, NULL, NULL);
  }
  gr_dataflow_free(f);
  free(pos);
  gr_sched_free(&s, block);
  return m;
}

double gr_place_lower_bound(const gr_place_graph *pg, const gr_cluster *c) {
  int n = pg->num_nodes, D = c->num_devices;
  double *cp = gr_alloc_array((size_t)n + 1, sizeof(double)), work = 0, crit = 0;
  if (!cp) return 0;
  for (int v = 0; v < n; v++) {
    double t = INFINITY;
    bool free_src = pg->in_off[v] == pg->in_off[v + 1] && pg->flops[v] == 0 && pg->seconds[v] < 0;
    if (free_src)
      t = 0;
    else
      for (int d = 0; d < D; d++) {
        double x = gr_place_node_time(pg, c, v, d);
        if (x < t) t = x;
      }
    double r = 0;
    for (int e = pg->in_off[v]; e < pg->in_off[v + 1]; e++)
      if (cp[pg->in_src[e]] > r) r = cp[pg->in_src[e]];
    cp[v] = r + t;
    if (cp[v] > crit) crit = cp[v];
    work += t;
  }
  free(cp);
  return crit > work / D ? crit : work / D;
}

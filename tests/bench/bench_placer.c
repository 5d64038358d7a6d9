/* bench_placer: the simulated greedy placer on synthetic graphs (chains,
 * layered widths 4/16/64, inception-like modules, RNN grids, random DAGs)
 * of 10^3..10^6 nodes, transfer/compute ratios 0.1, 1 and 10, on 2..64
 * devices. Per case: makespan / lower bound for graphrun's placer, for a HEFT
 * baseline (Topcuoglu et al. 2002, insertion-based) and for the best single
 * device, all rated by the same simulator; cross-device bytes; placement time.
 *
 * On the 10^3-node cases also the gap to a local search (gr_place_options.
 * search_budget) started from the placer's result, and its geometric mean
 * and worst on the line before the last.
 *
 * Last line: placer: seconds_1m=S ratio_cheap=R ratio_vs_heft=H
 *   S: worst placement seconds over the 1M-node cases on 8 devices
 *   R: worst makespan / lower bound over cases with ratio <= 1 and width >= 2 x devices
 *   H: geometric mean of graphrun makespan / HEFT makespan over all cases */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include <graphrun.h>

#include "placer/gr_placer.h"

#define BASE_SECONDS 100e-6 /* mean compute time of a node */
#define RATE         1e10   /* flop/s of every device */
#define LINK_BW      1e9    /* bytes/s between devices */
#define LINK_LAT     1e-6

static uint64_t rng_state;
static uint64_t rnd(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double unif(void) {
  return (double)(rnd() >> 11) * 0x1.0p-53;
}

/* ---- generators: fill in-edges of node v; sizes are exact ------------------ */

typedef struct gen {
  const char *name;
  int width; /* nominal parallelism (0: measured as work / critical path) */
} gen;

enum { G_CHAIN, G_LAYER4, G_LAYER16, G_LAYER64, G_INCEPTION, G_RNN, G_RANDOM, G_COUNT };
static const gen gens[G_COUNT] = {{"chain", 1},      {"layered4", 4},  {"layered16", 16},
                                  {"layered64", 64}, {"inception", 4}, {"rnn8", 8},
                                  {"random", 0}};

/* Max in-degree of any generator. */
#define MAX_IN 4

/* Writes v's inputs into src (count returned); all < v. */
static int inputs_of(int kind, int v, int *src) {
  int k = 0;
  switch (kind) {
    case G_CHAIN:
      if (v > 0) src[k++] = v - 1;
      break;
    case G_LAYER4:
    case G_LAYER16:
    case G_LAYER64: {
      int w = gens[kind].width, l = v / w, i = v % w;
      if (l == 0) break;
      int base = (l - 1) * w;
      src[k++] = base + i;
      src[k++] = base + (i + 1) % w;
      if (w > 2) src[k++] = base + (i + w - 1) % w;
      break;
    }
    case G_INCEPTION: {
      /* module of 10 nodes: in, branches a(1) b(2) c(3) d(2) -> in is 0,
       * a=1, b=2,3, c=4,5,6, d=7,8, concat=9; the next module's in is its concat. */
      int m = v / 10, i = v % 10, b0 = m * 10;
      switch (i) {
        case 0:
          if (m > 0) src[k++] = b0 - 1;
          break;
        case 1:
        case 2:
        case 4:
        case 7:
          src[k++] = b0;
          break;
        case 3:
        case 5:
        case 6:
        case 8:
          src[k++] = v - 1;
          break;
        case 9:
          src[k++] = b0 + 1, src[k++] = b0 + 3, src[k++] = b0 + 6, src[k++] = b0 + 8;
          break;
      }
      break;
    }
    case G_RNN: { /* 8 layers x T steps, node (t, l) = t * 8 + l */
      int t = v / 8, l = v % 8;
      if (t > 0) src[k++] = v - 8;
      if (l > 0) src[k++] = v - 1;
      break;
    }
    case G_RANDOM: { /* 1..3 inputs among the previous 64 nodes */
      if (v == 0) break;
      int want = 1 + (int)(rnd() % 3);
      for (int j = 0; j < want; j++) {
        int w = v < 64 ? v : 64;
        int u = v - 1 - (int)(rnd() % (uint64_t)w);
        bool dup = false;
        for (int q = 0; q < k; q++) dup |= src[q] == u;
        if (!dup) src[k++] = u;
      }
      break;
    }
  }
  return k;
}

static gr_status make_graph(int kind, int n, double ratio, gr_place_graph *pg) {
  gr_error err;
  GR_TRY(gr_place_graph_init(pg, n, n * MAX_IN, &err));
  int e = 0, src[MAX_IN];
  for (int v = 0; v < n; v++) {
    double t = BASE_SECONDS * (0.5 + unif());
    pg->flops[v] = t * RATE;
    pg->in_off[v] = e;
    int k = inputs_of(kind, v, src);
    for (int j = 0; j < k; j++) {
      pg->in_src[e] = src[j];
      /* transfer time = ratio x the producer's compute time */
      double tu = pg->flops[src[j]] / RATE;
      pg->in_bytes[e++] = fmax(0, ratio * tu - LINK_LAT) * LINK_BW;
    }
  }
  pg->in_off[n] = e;
  pg->num_edges = e;
  return GR_OK;
}

/* ---- HEFT baseline ------------------------------------------------------------ */

typedef struct slot {
  double s, f;
} slot;

/* Per device busy intervals sorted by start (insertion policy). */
typedef struct timeline {
  slot *v;
  int n, cap;
} timeline;

static double tl_find(const timeline *t, double ready, double dur, int *at) {
  int lo = 0, hi = t->n; /* first slot with f > ready */
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (t->v[mid].f <= ready)
      lo = mid + 1;
    else
      hi = mid;
  }
  double start = ready;
  int scanned = 0;
  for (int i = lo; i < t->n; i++) {
    if (start + dur <= t->v[i].s) {
      *at = i;
      return start;
    }
    if (t->v[i].f > start) start = t->v[i].f;
    if (++scanned == 64) { /* bound the gap search: append after the last slot */
      start = fmax(start, t->v[t->n - 1].f);
      break;
    }
  }
  *at = t->n;
  return start;
}

static void tl_insert(timeline *t, int at, double s, double f) {
  if (t->n == t->cap) {
    t->cap = t->cap ? t->cap * 2 : 64;
    t->v = realloc(t->v, sizeof(slot) * (size_t)t->cap);
  }
  memmove(t->v + at + 1, t->v + at, sizeof(slot) * (size_t)(t->n - at));
  t->v[at] = (slot){s, f};
  t->n++;
}

static void heft(const gr_place_graph *pg, const gr_cluster *c, int *device) {
  int n = pg->num_nodes, D = gr_cluster_num_devices(c);
  double *rank = calloc((size_t)n, sizeof(double)), *best = calloc((size_t)n, sizeof(double));
  double *fin = malloc(sizeof(double) * (size_t)n);
  int *order = malloc(sizeof(int) * (size_t)n);
  timeline *tl = calloc((size_t)D, sizeof(timeline));
  /* mean communication over distinct device pairs */
  double cl = 0, cb = 0;
  int pairs = 0;
  for (int a = 0; a < D && a < 64; a++)
    for (int b = 0; b < D && b < 64; b++)
      if (a != b) {
        gr_link l = gr_cluster_get_link(c, gr_cluster_link_kind(c, a, b));
        cl += l.latency, cb += 1 / l.bandwidth, pairs++;
      }
  if (pairs) cl /= pairs, cb /= pairs;
  for (int v = n - 1; v >= 0; v--) {
    double w = 0;
    for (int d = 0; d < D; d++) w += gr_place_node_time(pg, c, v, d);
    rank[v] = w / D + best[v];
    for (int e = pg->in_off[v]; e < pg->in_off[v + 1]; e++) {
      int u = pg->in_src[e];
      double x = rank[v] + cl + pg->in_bytes[e] * cb;
      if (x > best[u]) best[u] = x;
    }
  }
  for (int v = 0; v < n; v++) order[v] = v;
  /* sort by rank descending (stable on index): ranks strictly decrease along edges */
  int *tmp = malloc(sizeof(int) * (size_t)n);
  for (int w = 1; w < n; w *= 2)
    for (int i = 0; i < n; i += 2 * w) {
      int a = i, m = i + w < n ? i + w : n, b = m, z = i + 2 * w < n ? i + 2 * w : n, o = i;
      while (a < m && b < z) tmp[o++] = rank[order[b]] > rank[order[a]] ? order[b++] : order[a++];
      while (a < m) tmp[o++] = order[a++];
      while (b < z) tmp[o++] = order[b++];
      for (int q = i; q < z; q++) order[q] = tmp[q];
    }
  for (int i = 0; i < n; i++) {
    int v = order[i], bd = 0, bat = 0;
    double bf = INFINITY, bs = 0;
    for (int d = 0; d < D; d++) {
      double ready = 0;
      for (int e = pg->in_off[v]; e < pg->in_off[v + 1]; e++) {
        int u = pg->in_src[e];
        double r = fin[u] + gr_cluster_transfer_time(c, device[u], d, pg->in_bytes[e]);
        if (r > ready) ready = r;
      }
      double t = gr_place_node_time(pg, c, v, d);
      int at;
      double s = tl_find(&tl[d], ready, t, &at);
      if (s + t < bf) bf = s + t, bd = d, bs = s, bat = at;
    }
    device[v] = bd;
    fin[v] = bf;
    tl_insert(&tl[bd], bat, bs, bf);
  }
  for (int d = 0; d < D; d++) free(tl[d].v);
  free(tl);
  free(rank);
  free(best);
  free(fin);
  free(order);
  free(tmp);
}

/* ---- the cases ---------------------------------------------------------------- */

typedef struct totals {
  double seconds_1m, ratio_cheap, log_heft, ratio_01;
  int cases, worse_than_heft;
  double log_gap, worst_gap, search_seconds; /* the local search's gain on the 10^3 cases */
  int searched, search_budget;
  char worst[96], worst_01[96];
} totals;

static void run_case(int kind, int n, double ratio, int D, totals *tot) {
  rng_state = (uint64_t)kind * 1000003u + (uint64_t)n * 31u + (uint64_t)(ratio * 10);
  gr_place_graph pg;
  if (make_graph(kind, n, ratio, &pg) != GR_OK) {
    printf("out of memory\n");
    exit(1);
  }
  gr_cluster *c = gr_cluster_new_local(D, RATE, 1e15, 0);
  for (int k = 0; k < GR_LINK_COUNT; k++)
    gr_cluster_set_link(c, k, (gr_link){.latency = LINK_LAT, .bandwidth = LINK_BW});
  gr_place_result r;
  gr_error err;
  struct timespec c0, c1;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
  double t0 = bench_now();
  if (gr_place_schedule(&pg, c, NULL, &r, &err) != GR_OK) {
    printf("placer failed: %s\n", err.msg);
    exit(1);
  }
  double secs = bench_now() - t0;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
  double cpu = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
  double lb = gr_place_lower_bound(&pg, c);
  int *hd = malloc(sizeof(int) * (size_t)n);
  heft(&pg, c, hd);
  double heft_cross, heft_t = gr_place_simulate(&pg, c, hd, &heft_cross);
  int width = gens[kind].width;
  if (!width) { /* measured parallelism: total work / critical path */
    double work = 0;
    for (int v = 0; v < n; v++) work += pg.flops[v] / RATE;
    double *cp = malloc(sizeof(double) * (size_t)n), crit = 0;
    for (int v = 0; v < n; v++) {
      double m = 0;
      for (int e = pg.in_off[v]; e < pg.in_off[v + 1]; e++) m = fmax(m, cp[pg.in_src[e]]);
      cp[v] = m + pg.flops[v] / RATE;
      crit = fmax(crit, cp[v]);
    }
    width = (int)(work / crit);
    free(cp);
  }
  printf("%-10s n=%-7d ratio=%-4g dev=%-2d width=%-3d  placer=%6.3f heft=%6.3f single=%7.3f  "
         "cross_MB=%9.2f heft_cross_MB=%9.2f  place_ms=%8.1f cpu_ms=%8.1f%s\n",
         gens[kind].name, n, ratio, D, width, r.step_time / lb, heft_t / lb, r.baseline_time / lb,
         r.cross_bytes / 1e6, heft_cross / 1e6, secs * 1e3, cpu * 1e3,
         r.fell_back ? " (fell back)" : "");
  fflush(stdout);
  if (n >= 1000000 && D == 8 && secs > tot->seconds_1m) tot->seconds_1m = secs;
  if (ratio <= 1 && width >= 2 * D && r.step_time / lb > tot->ratio_cheap) {
    tot->ratio_cheap = r.step_time / lb;
    snprintf(tot->worst, sizeof tot->worst, "%s n=%d ratio=%g dev=%d", gens[kind].name, n, ratio,
             D);
  }
  if (ratio < 0.5 && width >= 2 * D && r.step_time / lb > tot->ratio_01) {
    tot->ratio_01 = r.step_time / lb;
    snprintf(tot->worst_01, sizeof tot->worst_01, "%s n=%d dev=%d", gens[kind].name, n, D);
  }
  tot->worse_than_heft += r.step_time > heft_t * (1 + 1e-9);
  if (n <= 1000 && tot->search_budget > 0) { /* the gap to the local search from its result */
    gr_place_options so = {.search_budget = tot->search_budget};
    gr_place_result rs;
    double s0 = bench_now();
    if (gr_place_schedule(&pg, c, &so, &rs, &err) != GR_OK) {
      printf("search failed: %s\n", err.msg);
      exit(1);
    }
    tot->search_seconds += bench_now() - s0;
    double gap = r.step_time / rs.step_time;
    printf("%-10s n=%-7d ratio=%-4g dev=%-2d  local search: %.4f x better (%d simulations, %d "
           "moves)\n",
           gens[kind].name, n, ratio, D, gap, rs.search_sims, rs.search_moves);
    tot->log_gap += log(gap);
    if (gap > tot->worst_gap) tot->worst_gap = gap;
    tot->searched++;
    gr_place_result_free(&rs);
  }
  tot->log_heft += log(r.step_time / heft_t);
  tot->cases++;
  free(hd);
  gr_place_result_free(&r);
  gr_place_graph_free(&pg);
  gr_cluster_free(c);
}

/* A floor no placement beats on the inception graph on 2 devices: every node
 * of a module waits for the module's input and the module's concat waits for
 * every node of it, so modules run one after another and the makespan is at
 * least the sum over modules of the best, over the 2^9 assignments of the
 * module's nodes to 2 equal devices (the input on device 0 by symmetry), of
 * max(critical path with the transfers that assignment implies, the input's
 * and the concat's time plus the busier device's share of the branches,
 * which run between the two). Returned as a ratio to the transfer-blind
 * lower bound. */
static double inception_floor(int n, double ratio) {
  rng_state = (uint64_t)G_INCEPTION * 1000003u + (uint64_t)n * 31u + (uint64_t)(ratio * 10);
  gr_place_graph pg;
  if (make_graph(G_INCEPTION, n, ratio, &pg) != GR_OK) return 0;
  gr_cluster *c = gr_cluster_new_local(2, RATE, 1e15, 0);
  for (int k = 0; k < GR_LINK_COUNT; k++)
    gr_cluster_set_link(c, k, (gr_link){.latency = LINK_LAT, .bandwidth = LINK_BW});
  double total = 0;
  for (int b0 = 0; b0 + 10 <= n; b0 += 10) {
    double best = INFINITY;
    for (int mask = 0; mask < 1024; mask += 2) {
      double load[2] = {0, 0}, cp[10];
      for (int i = 0; i < 10; i++) {
        int v = b0 + i, dv = mask >> i & 1;
        double ready = 0;
        for (int e = pg.in_off[v]; e < pg.in_off[v + 1]; e++) {
          int u = pg.in_src[e] - b0;
          if (u < 0) continue; /* the previous module: before this one starts */
          double x = cp[u] + ((mask >> u & 1) != dv ? LINK_LAT + pg.in_bytes[e] / LINK_BW : 0);
          if (x > ready) ready = x;
        }
        cp[i] = ready + pg.flops[v] / RATE;
        load[dv] += pg.flops[v] / RATE;
      }
      /* the branches run between the input's finish and the concat's start */
      double ends = (pg.flops[b0] + pg.flops[b0 + 9]) / RATE, bload[2] = {load[0], load[1]};
      bload[0] -= pg.flops[b0] / RATE; /* the input is on device 0 */
      bload[mask >> 9 & 1] -= pg.flops[b0 + 9] / RATE;
      best = fmin(best, fmax(cp[9], ends + fmax(bload[0], bload[1])));
    }
    total += best;
  }
  double lb = gr_place_lower_bound(&pg, c);
  gr_cluster_free(c);
  gr_place_graph_free(&pg);
  return total / lb;
}

/* End to end on a gr_graph: layered width 16 of adds on [32, 64] tensors,
 * placed on 8
 * devices: topological order, constraints, costs, placement, names written. */
static void run_graph(int n) {
  gr_graph *g = gr_graph_new();
  double t0 = bench_now();
  gr_output prev[16], cur[16];
  for (int i = 0; i < 16; i++) prev[i] = gr_placeholder(g, NULL, GR_F32, (gr_shape){2, {32, 64}});
  int nodes = 16;
  while (nodes < n) {
    for (int i = 0; i < 16; i++) cur[i] = gr_add(g, prev[i], prev[(i + 1) % 16]);
    memcpy(prev, cur, sizeof prev);
    nodes += 16;
  }
  if (gr_graph_error(g)) {
    printf("graph build failed: %s\n", gr_graph_error(g)->msg);
    exit(1);
  }
  double build = bench_now() - t0;
  gr_cluster *c = gr_cluster_new_local(8, 1e10, 1e10, 1e-6);
  gr_error err;
  gr_placement *p = NULL;
  t0 = bench_now();
  if (gr_placer_place(g, c, NULL, &p, &err) != GR_OK) {
    printf("placement failed: %s\n", err.msg);
    exit(1);
  }
  double place = bench_now() - t0;
  printf("gr_graph   n=%-7d dev=8  build_s=%.3f place_s=%.3f (order, constraints, costs, "
         "placement, names) step_ms=%.3f\n",
         gr_graph_num_nodes(g), build, place, gr_placement_step_time(p) * 1e3);
  gr_placement_free(p);
  gr_cluster_free(c);
  gr_graph_free(g);
}

int main(int argc, char **argv) {
  bool smoke = bench_is_smoke(argc, argv);
  /* --large [GENERATOR]: only the 1M-node cases (of one generator) */
  bool large = argc > 1 && strcmp(argv[1], "--large") == 0;
  static const double ratios[] = {0.1, 1, 10};
  static const int devs[] = {2, 4, 8, 16, 64};
  totals tot = {.search_budget = smoke ? 200 : GR_PLACE_SEARCH_BUDGET};
  printf("# ratios are makespan / lower bound (max(critical path, work / devices)); "
         "every placement rated by the placer's simulator\n");
  int sizes[] = {1000, 10000, 100000};
  int nsizes = smoke ? 1 : large ? 0 : 3;
  for (int si = 0; si < nsizes; si++)
    for (int kind = 0; kind < G_COUNT; kind++)
      for (int ri = 0; ri < 3; ri++)
        for (int di = 0; di < 5; di++) {
          if (smoke && devs[di] > 8) continue;
          if (sizes[si] >= 100000 && devs[di] != 8 && devs[di] != 64) continue;
          run_case(kind, sizes[si], ratios[ri], devs[di], &tot);
        }
  if (!smoke)
    for (int kind = 0; kind < G_COUNT; kind++)
      if (!large || argc < 3 || strcmp(argv[2], gens[kind].name) == 0)
        run_case(kind, 1000000, 1, 8, &tot);
  run_graph(smoke ? 10000 : 1000000);
  printf("# %d cases; worst cheap case: %s; at ratio 0.1 alone: %.3f (%s); slower than HEFT in "
         "%d cases\n",
         tot.cases, tot.worst, tot.ratio_01, tot.worst_01, tot.worse_than_heft);
  printf("# no placement of inception on 2 devices can beat %.3f x the lower bound at ratio 1 "
         "(%.3f at ratio 0.1): modules run one after another (see inception_floor)\n",
         inception_floor(smoke ? 1000 : 100000, 1), inception_floor(smoke ? 1000 : 100000, 0.1));
  if (tot.searched)
    printf("# local search (moves of colocation groups, %d simulations at most) from the placer's "
           "result on the %d cases of 10^3 nodes: %.4f x better on average (geometric), %.4f at "
           "most; %.1f s\n",
           tot.search_budget, tot.searched, exp(tot.log_gap / tot.searched), tot.worst_gap,
           tot.search_seconds);
  printf("placer: seconds_1m=%.3f ratio_cheap=%.3f ratio_vs_heft=%.3f\n", tot.seconds_1m,
         tot.ratio_cheap, exp(tot.log_heft / tot.cases));
  return 0;
}

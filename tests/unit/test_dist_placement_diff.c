/* Differential test of placements (issue 28): a graph spread over tasks
 * must give the one-process values bit for bit, whatever the placement.
 *
 * Random training programs (random_program.h: variables, optimizers, while
 * loops nested two deep, conds in loops, gradients through loops, batch
 * norm, queues, an accumulator, counters updated with assign...) run for 3
 * steps (their fetches, and their train op) and once more fetching every
 * variable, in one process and over a cluster of `graphrun server`
 * processes (1 ps, 3 workers, worker 0 with two devices; started once and
 * shared by every program),
 * placed one of these ways (by seed):
 *
 *   pins                     only the program's own device blocks; the rest on the first device
 *   round-robin              gr_master_place_graph(GR_PLACE_ROUND_ROBIN)
 *   cost                     gr_master_place_graph(GR_PLACE_COST)
 *   random-pins              every node pinned at build time (a device function) to a random
 *                            device spec of the cluster, a partial one, or one the cluster
 *                            lacks; soft placement
 *   random-pins+round-robin  half the nodes pinned so, the rest round-robin; soft
 *   random-pins+cost         half the nodes pinned so, the rest by the cost model; soft
 *
 * A third of the programs (by seed; GR_DIFF_MULTI=0/1 forces it) run
 * their steps on the cluster as one multi-step run (gr_session_run_steps:
 * each task loops over its partitions, told by its receivers when to go
 * on); only the last step's fetches and the variables are compared.
 *
 * The one-process run builds the same graph (the same pins) and runs it on
 * one device with soft placement. Every fetched tensor at every step and
 * every variable at the end must have the same dtype, shape and bytes.
 * A placement the engine refuses is a failure too: with soft placement
 * and pins the cluster can satisfy, no refusal is legitimate (the test
 * lists the refusals it saw by family).
 *
 * Every program names its variables, queues and accumulators alike (the
 * scope s0_<placement>): the programs run one after another on the shared
 * cluster, and only the tasks' per-run containers keep one program's state
 * from the next (a program that found another's variables would differ
 * from its one-process run).
 *
 * test_examples runs every .gr file of examples/ and tests/data/ with
 * fetches or targets the same way (2 steps; round-robin, random pins, and
 * half random pins with round-robin or the cost model), each on a fresh
 * cluster of 2 ps and 2 workers (the files name their variables alike;
 * recovery_mlp.gr spreads its variables over 2 ps) with soft placement
 * (scopes.gr pins /job:localhost).
 *
 * Reproduce (docs/placement.md#how-placements-are-tested):
 *   GR_DIFF_SEED=<seed> build/tests/unit/test_dist_placement_diff
 *       runs that program with its placement, prints the program, its nodes
 *       with their devices, and what differs (GR_DIFF_PLACEMENT=<name>: another)
 *   GR_DIFF_REDUCE=<seed>: leaves out statements while it fails the same way
 *   GR_DIFF_FILE=<file.gr> with GR_DIFF_SEED: that program, the seed's placement
 *   GR_DIFF_N=<n> GR_DIFF_BASE=<first seed>: another series
 *   GR_DIFF_DUMP=<dir>: the first 5 failing programs of each family as
 *       <dir>/seed<S>_<placement>.gr (with the commands that reproduce it)
 *       and their nodes as .nodes
 *   make soak-placement SEEDS=<first>:<count> (default 0:100000): the soak,
 *       progress every 1000 programs, failures dumped into build/placement_failures
 */
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster_harness.h"
#include "example_runner.h"
#include "gr_dsl.h"
#include "gr_test.h"
#include "random_program.h"
#include "test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define STEPS            3
#define MAX_OUT          256
#define PS               1
#define WORKERS          3
#define FILE_PS          2 /* the files' cluster: recovery_mlp.gr's ps_variables(2) */
#define FILE_WORKERS     2
#define MAX_FAMILIES     128
#define SHOW_FAILED      3 /* programs printed in full per run */
#define DUMPS_PER_FAMILY 5

typedef enum {
  PL_PINS,
  PL_ROUND_ROBIN,
  PL_COST,
  PL_RANDOM_PINS,
  PL_SOME_PINS_RR,
  PL_SOME_PINS_COST,
  PL_KINDS
} placement;

static const char *const pl_names[PL_KINDS] = {
    "pins", "round-robin", "cost", "random-pins", "random-pins+round-robin", "random-pins+cost"};

static int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static int step_timeout_ms(void) {
  /* steps take milliseconds; a loaded machine, a sanitizer and a loop spread
   * over every task (a transfer per iteration) make that seconds */
  return env_int("GR_DIFF_TIMEOUT_MS", 60000);
}

/* ---- the cluster: graphrun server processes and a master ------------------------------ */

typedef struct cluster {
  gt_cluster c;
  gr_master *m; /* the current run's client (NULL with GR_DIFF_LOCAL) */
  gr_master_options mo;
  const char *addrs[GT_MAX_TASKS];
  char secret[256];
  bool up;
} cluster;

/* A new client for the next program: each program is a run of its own, in
 * a container of its own on the tasks (as every `graphrun run`). */
static bool cluster_new_run(cluster *k) {
  gr_master_free(k->m);
  k->m = NULL;
  gr_error err;
  if (gr_master_new(&k->mo, &k->m, &err) == GR_OK) return true;
  fprintf(stderr, "placement diff: master: %s\n", err.msg);
  return false;
}

/* Reads what the servers printed so far (their pipes must not fill up). */
static void cluster_drain(cluster *k) {
  for (int i = 0; i < k->c.n; i++) {
    gt_proc *p = &k->c.srv[i];
    for (struct pollfd pf = {.fd = p->out, .events = POLLIN}; p->out >= 0 && poll(&pf, 1, 0) > 0;)
      gt_proc_wait(p, "\x01", 0.001); /* reads what is there (a closed pipe: the end) */
  }
}

/* Stops the servers; a sanitizer's report in their output fails the test. */
static void cluster_down(cluster *k) {
  gr_master_free(k->m);
  k->m = NULL;
  if (k->up) cluster_drain(k);
  for (int i = 0; k->up && i < k->c.n; i++) {
    const char *buf = k->c.srv[i].buf, *bad = strstr(buf, "runtime error:");
    if (!bad) bad = strstr(buf, "Sanitizer");
    GR_CHECK_MSG(!bad, "%s printed: %.2000s", k->c.task[i], bad);
  }
  if (k->up || k->c.n) gt_cluster_stop(&k->c);
  k->up = false;
}

/* ps and workers: the random programs' cluster is PS and WORKERS; the
 * files' has a second ps (ps_variables(2)). */
static bool cluster_up(cluster *k, int ps, int workers) {
  memset(k, 0, sizeof *k);
  /* worker 0 has two devices: partitions inside a task as well as across */
  gt_cluster_options o = {.ps = ps, .workers = workers, .threads = 2, .quiet = true};
  o.devices[ps] = 2;
  if (!gt_cluster_start(&k->c, &o)) {
    cluster_down(k);
    return false;
  }
  k->up = true;
  FILE *f = fopen(k->c.secret, "r");
  size_t n = f ? fread(k->secret, 1, sizeof k->secret - 1, f) : 0;
  if (f) fclose(f);
  while (n > 0 && k->secret[n - 1] == '\n') n--;
  k->secret[n] = '\0';
  for (int i = 0; i < k->c.n; i++) k->addrs[i] = k->c.given[i];
  /* results are checked, not failure detection: a loaded machine (or ASan)
   * may starve a task for a while */
  k->mo = (gr_master_options){.num_tasks = k->c.n,
                              .cluster_id = k->c.cluster_id,
                              .addresses = k->addrs,
                              .secret = k->secret,
                              .step_timeout_ms = step_timeout_ms(),
                              .heartbeat_ms = 500,
                              .heartbeat_missed = 20};
  if (!cluster_new_run(k)) {
    cluster_down(k);
    return false;
  }
  return true;
}

/* The task whose server process has ended, or NULL. */
static const char *cluster_dead(cluster *k) {
  for (int i = 0; i < k->c.n; i++) {
    gt_proc *p = &k->c.srv[i];
    if (!p->done && waitpid(p->pid, &p->status, WNOHANG) == p->pid) p->done = true;
    if (p->done) return k->c.task[i];
  }
  return NULL;
}

/* ---- pins: a device function giving nodes random device specs ---------------------------- */

typedef struct pins {
  uint64_t seed;
  int percent; /* of the nodes pinned */
  int n;
  char spec[40][96];
} pins;

/* Specs of the cluster's devices: full names, partial ones, and a few it
 * lacks (soft placement puts those on a device it has). */
static void pins_init(pins *p, uint64_t seed, int percent, int ps, int workers) {
  memset(p, 0, sizeof *p);
  p->seed = mix(seed ^ 0x5eed);
  p->percent = percent;
  for (int t = 0; t < ps; t++)
    snprintf(p->spec[p->n++], sizeof p->spec[0], "/job:ps/replica:0/task:%d/device:CPU:0", t);
  for (int t = 0; t < workers; t++) {
    snprintf(p->spec[p->n++], sizeof p->spec[0], "/job:worker/replica:0/task:%d/device:CPU:0", t);
    snprintf(p->spec[p->n++], sizeof p->spec[0], "/job:worker/task:%d", t);
  }
  snprintf(p->spec[p->n++], sizeof p->spec[0], "/job:worker/replica:0/task:0/device:CPU:1");
  static const char *const more[] = {"/job:ps/task:0",     "/job:ps",           "/job:worker",
                                     "/job:worker/task:7", "/job:chief/task:0", "/device:CPU:1"};
  for (size_t i = 0; i < sizeof more / sizeof *more; i++)
    snprintf(p->spec[p->n++], sizeof p->spec[0], "%s", more[i]);
}

/* Is name[0..) a program's scope, "s<digits>_<digits>/"? Its length, else 0. */
static size_t scope_len(const char *name) {
  const char *c = name;
  if (*c++ != 's' || *c < '0' || *c > '9') return 0;
  while (*c >= '0' && *c <= '9') c++;
  if (*c++ != '_' || *c < '0' || *c > '9') return 0;
  while (*c >= '0' && *c <= '9') c++;
  return *c == '/' ? (size_t)(c + 1 - name) : 0;
}

/* Pins by the node's name without the program's scope, so that a program
 * reduced under another scope (GR_DIFF_REDUCE) keeps them. */
static const char *pin_fn(gr_graph *g, const gr_node *n, const char *spec, void *arg) {
  (void)g;
  const pins *p = arg;
  uint64_t h = p->seed;
  for (const char *c = n->name; *c; c++) {
    if (c == n->name || c[-1] == '/') c += scope_len(c);
    if (!*c) break;
    h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
  }
  h = mix(h);
  if ((int)(h % 100) >= p->percent) return spec;
  return p->spec[(h >> 16) % (uint64_t)p->n];
}

/* ---- one run of a program: load, place, 2 or 3 steps, every variable ------------------- */

typedef struct run {
  gr_graph *g;
  gr_dsl_program *prog;
  int steps;
  int nx, nt, nf, nv;
  gr_output x[MAX_OUT], t[MAX_OUT], vars[MAX_OUT];
  gr_feed feeds[16];
  gr_tensor feed_vals[16];
  int nout[STEPS + 1];
  gr_tensor out[STEPS + 1][MAX_OUT];
  /* on failure */
  const char *stage; /* "load", "place", "session", "step", "variables" */
  int step;
  gr_status st;
  char msg[1024];
} run;

static void run_free(run *r) {
  for (int s = 0; s <= STEPS; s++)
    for (int k = 0; k < r->nout[s]; k++) gr_tensor_release(&r->out[s][k]);
  for (int i = 0; i < r->nf; i++) gr_tensor_release(&r->feed_vals[i]);
  gr_dsl_program_free(r->prog);
  gr_graph_free(r->g);
  memset(r, 0, sizeof *r);
}

static bool fail(run *r, const char *stage, int step, gr_status st, const char *msg) {
  r->stage = stage;
  r->step = step;
  r->st = st;
  snprintf(r->msg, sizeof r->msg, "%s", msg);
  return false;
}

static void quiet_log(void *arg, const char *msg) {
  (void)arg, (void)msg;
}

/* Loads a program (text, or the file `path` when text is NULL) into a fresh
 * graph, with pn's device function around it (pn may be NULL), and finds
 * its fetches, targets, placeholders (fed deterministic values) and
 * variables. */
static bool load(run *r, const char *path, const char *text, const pins *pn, int steps) {
  memset(r, 0, sizeof *r);
  r->steps = steps;
  r->g = gr_graph_new();
  gr_error err;
  if (pn) gr_graph_push_device_fn(r->g, pin_fn, (void *)pn);
  gr_status st = text ? gr_dsl_load_string(path, text, r->g, NULL, &r->prog, &err)
                      : gr_dsl_load_file(path, r->g, NULL, &r->prog, &err);
  if (pn) gr_graph_pop_device_scope(r->g);
  if (st != GR_OK) return fail(r, "load", -1, st, err.msg);
  const gr_dsl_program *p = r->prog;
  for (int i = 0; i < gr_dsl_num_fetches(p) && r->nx < MAX_OUT; i++)
    if (gr_dsl_lookup(p, gr_dsl_fetch_name(p, i), &r->x[r->nx]) && r->x[r->nx].index >= 0) r->nx++;
  for (int i = 0; i < gr_dsl_num_targets(p) && r->nt < MAX_OUT; i++)
    if (gr_dsl_lookup(p, gr_dsl_target_name(p, i), &r->t[r->nt])) r->nt++;
  gt_rng rng = {7};
  for (int i = 0; i < gr_graph_num_nodes(r->g); i++) {
    gr_node *n = gr_graph_node(r->g, i);
    if (!strcmp(n->op->name, "variable") && r->nv < MAX_OUT) r->vars[r->nv++] = (gr_output){n, 0};
    if ((n->op->flags & GR_OP_PLACEHOLDER) && r->nf < 16) {
      r->feed_vals[r->nf] = gt_placeholder_value(n, &rng);
      r->feeds[r->nf] = (gr_feed){{n, 0}, &r->feed_vals[r->nf]};
      r->nf++;
    }
  }
  return true;
}

/* Places (on a cluster) and runs the loaded program: its steps, then every
 * variable. m NULL: one process, one device. */
static bool execute(run *r, gr_master *m, placement pl, bool soft, bool recvs, int threads,
                    bool multi) {
  gr_error err;
  soft = soft || !m;
  if (m) {
    gr_place_mode mode = pl == PL_ROUND_ROBIN || pl == PL_SOME_PINS_RR ? GR_PLACE_ROUND_ROBIN
                         : pl == PL_COST || pl == PL_SOME_PINS_COST    ? GR_PLACE_COST
                                                                       : GR_PLACE_PINS;
    if (gr_master_place_graph(m, r->g, mode, soft, &err) != GR_OK)
      return fail(r, "place", -1, err.code, err.msg);
  }
  gr_session_options o = {.inter_op_threads = threads,
                          .soft_placement = soft,
                          .schedule_recvs = recvs,
                          .step_timeout_ms = step_timeout_ms(),
                          .log_fn = quiet_log};
  gr_session *s = m ? gr_master_session_new(m, r->g, &o, &err) : gr_session_new(r->g, &o, &err);
  if (!s) return fail(r, "session", -1, err.code, err.msg);
  bool ok = true;
  if (multi) { /* one multi-step run: the tasks loop; the last step's fetches */
    gr_status st = gr_session_run_steps(s, r->feeds, r->nf, r->x, r->nx, r->out[r->steps - 1], r->t,
                                        r->nt, r->steps, NULL, &err);
    if (st != GR_OK)
      ok = fail(r, "step", r->steps - 1, st, err.msg); /* one of its steps */
    else
      r->nout[r->steps - 1] = r->nx;
  }
  for (int step = 0; ok && !multi && step < r->steps; step++) {
    gr_status st = gr_session_run(s, r->feeds, r->nf, r->x, r->nx, r->out[step], r->t, r->nt, &err);
    if (st != GR_OK)
      ok = fail(r, "step", step, st, err.msg);
    else
      r->nout[step] = r->nx;
  }
  if (ok && r->nv) {
    gr_status st = gr_session_run(s, r->feeds, r->nf, r->vars, r->nv, r->out[STEPS], NULL, 0, &err);
    if (st != GR_OK)
      ok = fail(r, "variables", r->steps, st, err.msg);
    else
      r->nout[STEPS] = r->nv;
  }
  gr_session_free(s);
  return ok;
}

static const char *out_name(const run *r, int step, int k) {
  return step == STEPS ? r->vars[k].node->name : r->x[k].node->name;
}

/* What differs between x and y, output k of step s (STEPS: the variables). */
static void describe_difference(const run *a, int s, int k, const gr_tensor *x, const gr_tensor *y,
                                char *why, size_t cap) {
  char sx[GR_SHAPE_STR_MAX], sy[GR_SHAPE_STR_MAX];
  int64_t n = gr_tensor_num_elements(x), at = 0;
  if (x->dtype == y->dtype && gr_shape_equal(&x->shape, &y->shape))
    while (at < n && gr_tensor_get_f64(x, at) == gr_tensor_get_f64(y, at)) at++;
  snprintf(
      why, cap, "values differ: %s '%s' (%s %s): one process %.9g, cluster %.9g at element %lld",
      s == STEPS ? "the variable" : "step fetch", out_name(a, s, k), gr_dtype_name(x->dtype),
      gr_shape_str(&x->shape, sx), at < n ? gr_tensor_get_f64(x, at) : 0.0,
      at < n && at < gr_tensor_num_elements(y) ? gr_tensor_get_f64(y, at) : 0.0, (long long)at);
  if (s < STEPS) {
    size_t len = strlen(why);
    snprintf(why + len, cap - len, " at step %d (%s)", s, gr_shape_str(&y->shape, sy));
  }
}

/* The first difference between two runs of the same program, into why;
 * false when they agree. all: print every difference on stdout too. */
static bool differs(const run *a, const run *b, char *why, size_t cap, bool all) {
  bool found = false;
  char line[600];
  for (int s = 0; s <= STEPS; s++)
    for (int k = 0; k < a->nout[s] && k < b->nout[s]; k++) {
      const gr_tensor *x = &a->out[s][k], *y = &b->out[s][k];
      if (gt_same_bits(x, y)) continue;
      if (found) { /* only listing */
        describe_difference(a, s, k, x, y, line, sizeof line);
        printf("  also: %s\n", line);
        continue;
      }
      found = true;
      describe_difference(a, s, k, x, y, why, cap);
      if (!all) return true;
      printf("  first: %s\n", why);
    }
  return found;
}

/* ---- failures: families, dumps ----------------------------------------------------------- */

typedef struct family {
  char key[200];
  int count;
  uint64_t first_seed;
  placement first_pl;
  char example[400];
} family;

typedef struct stats {
  int programs, agreed, failed, oracle_failed, refused, crashed, timed_out;
  int by_pl[PL_KINDS][2];         /* run, failed */
  int by_feature[GT_PF_COUNT][2]; /* programs with it, failed */
  family fam[MAX_FAMILIES];
  int nfam;
  int shown;
  int max_lines; /* FAIL lines printed (0: every one) */
  const char *dump_dir;
} stats;

/* A message with the numbers (seeds, steps, values, ports), the names in
 * quotes (nodes, variables, queues: 'gradients/...' is kept apart) and
 * the source positions left out: failures of one kind share it. */
static void family_key(const char *what, char *key, size_t cap) {
  size_t n = 0;
  for (const char *c = what; *c && n + 16 < cap; c++) {
    if (*c == '\'' && strchr(c + 1, '\'')) {
      const char *end = strchr(c + 1, '\'');
      bool grad = !strncmp(c + 1, "gradients/", 10);
      n += (size_t)snprintf(key + n, cap - n, "%s", grad ? "'gradients/*'" : "'*'");
      c = end;
      continue;
    }
    if ((*c >= '0' && *c <= '9') || (*c == '-' && c[1] >= '0' && c[1] <= '9') ||
        ((*c == '.' || *c == 'e') && n && key[n - 1] == '#')) {
      if (n == 0 || key[n - 1] != '#') key[n++] = '#';
      continue;
    }
    if (*c == '\n') break;
    key[n++] = *c;
  }
  key[n] = '\0';
  /* the source position ("s12.gr:3:4: ") and the task ("/job:ps/replica:0/task:0: ") */
  static const char *const drop[][2] = {{".gr:#:#: ", " "}, {"/job:", ": "}};
  for (size_t d = 0; d < sizeof drop / sizeof *drop; d++)
    for (char *at; (at = strstr(key, drop[d][0]));) {
      char *start = at, *end = strstr(at, drop[d][1]);
      if (!end) break;
      while (d == 0 && start > key && start[-1] != ' ') start--;
      end += strlen(drop[d][1]);
      memmove(start, end, strlen(end) + 1);
    }
  if (strlen(key) > 160) key[160] = '\0';
}

/* Counts a failure in its family; returns how many the family has now. */
static int add_family(stats *st, const char *what, uint64_t seed, placement pl) {
  char key[200];
  family_key(what, key, sizeof key);
  for (int i = 0; i < st->nfam; i++)
    if (!strcmp(st->fam[i].key, key)) return ++st->fam[i].count;
  if (st->nfam == MAX_FAMILIES) return 1;
  family *f = &st->fam[st->nfam++];
  snprintf(f->key, sizeof f->key, "%s", key);
  snprintf(f->example, sizeof f->example, "%s", what);
  f->count = 1;
  f->first_seed = seed;
  f->first_pl = pl;
  return 1;
}

/* Node name, op, the device asked for and the device assigned, one a line. */
static void print_nodes(FILE *f, const gr_graph *g) {
  for (int i = 0; i < gr_graph_num_nodes(g); i++) {
    const gr_node *n = gr_graph_node(g, i);
    fprintf(f, "%-40s %-24s requested '%s'  assigned '%s'%s%s\n", n->name, n->op->name,
            n->requested_device, n->assigned_device ? n->assigned_device : "",
            n->colocate_with ? "  colocated with " : "", n->colocate_with ? n->colocate_with : "");
  }
}

static void dump_failure(const stats *st, uint64_t seed, placement pl, bool recvs,
                         const gt_program *p, const run *cl, const char *what) {
  if (!st->dump_dir) return;
  mkdir(st->dump_dir, 0755);
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/seed%llu_%s.gr", st->dump_dir, (unsigned long long)seed,
           pl_names[pl]);
  FILE *f = fopen(path, "w");
  if (!f) return;
  fprintf(f, "# placement differential test failure: seed %llu, placement %s%s\n",
          (unsigned long long)seed, pl_names[pl], recvs ? ", schedule_recvs" : "");
  fprintf(f, "# %s\n", what);
  fprintf(f, "# reproduce: GR_DIFF_SEED=%llu build/tests/unit/test_dist_placement_diff\n",
          (unsigned long long)seed);
  if (pl <= PL_COST)
    fprintf(f,
            "# or: graphrun launch --ps %d --workers %d THIS.gr --steps %d --placement %s --json\n"
            "#  vs graphrun run THIS.gr --steps %d --soft-placement --json\n",
            PS, WORKERS, STEPS, pl_names[pl], STEPS);
  else
    fprintf(f, "# (the random pins are made by the test's device function: see the .nodes file)\n");
  fputs(p->text, f);
  fclose(f);
  if (!cl->g) return;
  snprintf(path, sizeof path, "%s/seed%llu_%s.nodes", st->dump_dir, (unsigned long long)seed,
           pl_names[pl]);
  if ((f = fopen(path, "w"))) {
    print_nodes(f, cl->g);
    fclose(f);
  }
}

/* ---- one random program ---------------------------------------------------------------- */

static placement placement_of(uint64_t seed) {
  const char *want = getenv("GR_DIFF_PLACEMENT");
  for (int i = 0; want && *want && i < PL_KINDS; i++)
    if (!strcmp(want, pl_names[i])) return (placement)i;
  return (placement)(mix(seed) % PL_KINDS);
}

/* The outcome of one program on one placement. */
typedef struct verdict {
  bool ok;
  bool oracle_failed; /* the one-process run failed */
  bool refused;       /* the cluster would not place, prepare or partition it */
  const char *dead;   /* a server that ended (crashed), or NULL */
  bool lost;          /* the master lost a task (GR_ERR_UNAVAILABLE): start the cluster anew */
  bool timed_out;     /* a step passed its deadline (GR_ERR_DEADLINE_EXCEEDED) */
  char what[1600];    /* why not ok: one line */
} verdict;

/* Runs text (named file in messages) in one process and on the cluster
 * (with GR_DIFF_LOCAL, k->m NULL: in one process with 1 thread instead) and
 * compares; got keeps the cluster's run (its graph, for the nodes). */
static void run_pair(cluster *k, const char *file, const char *text, const pins *use, placement pl,
                     bool recvs, bool multi, bool verbose, verdict *v, run *got) {
  memset(v, 0, sizeof *v);
  memset(got, 0, sizeof *got);
  char what[1400] = "";
  run want;
  int steps = env_int("GR_DIFF_STEPS", STEPS); /* fewer, to see when a difference starts */
  steps = steps < 1 || steps > STEPS ? STEPS : steps;
  if (!load(&want, file, text, use, steps) ||
      !execute(&want, NULL, PL_PINS, true, false, 0, false)) {
    v->oracle_failed = true;
    snprintf(what, sizeof what, "one process: %s: %s", want.stage, want.msg);
  } else if (!load(got, file, text, use, steps)) {
    snprintf(what, sizeof what, "load: %s", got->msg);
  } else if (!k->m) {
    v->ok = execute(got, NULL, PL_PINS, true, false, 1, multi) &&
            !differs(&want, got, what, sizeof what, verbose);
    if (!v->ok && !what[0])
      snprintf(what, sizeof what, "one process, 1 thread: %s: %s", got->stage, got->msg);
    v->oracle_failed = !v->ok;
  } else if (!cluster_new_run(k) ||
             !execute(got, k->m, pl, pl >= PL_RANDOM_PINS, recvs, 0, multi)) {
    v->refused = strcmp(got->stage, "step") != 0 && strcmp(got->stage, "variables") != 0;
    v->lost = got->st == GR_ERR_UNAVAILABLE;
    v->timed_out = got->st == GR_ERR_DEADLINE_EXCEEDED;
    if (got->step >= 0)
      snprintf(what, sizeof what, "%s %d: %s", got->stage, got->step, got->msg);
    else
      snprintf(what, sizeof what, "%s: %s", got->stage, got->msg);
  } else {
    v->ok = !differs(&want, got, what, sizeof what, verbose);
  }
  run_free(&want);
  v->dead = v->ok || !k->m ? NULL : cluster_dead(k);
  snprintf(v->what, sizeof v->what, "%s%s%s%s", v->dead ? "server crashed (" : "",
           v->dead ? v->dead : "", v->dead ? "): " : "", what);
  for (char *c = v->what; *c; c++) /* one line: a DSL error shows its source line and a caret */
    if (*c == '\n') *c = ' ';
}

/* The program of seed, its placement, and the pins it gets. */
typedef struct case_ {
  uint64_t seed;
  placement pl;
  bool recvs;
  bool multi; /* the cluster runs the steps as one multi-step run */
  char scope[32], file[48];
  gt_program p;
  pins pn;
  const pins *use;
} case_;

static void case_make(case_ *c, uint64_t seed) {
  memset(c, 0, sizeof *c);
  c->seed = seed;
  c->pl = placement_of(seed);
  c->recvs = (mix(seed) >> 20) % 3 == 0;
  c->multi =
      getenv("GR_DIFF_MULTI") ? env_int("GR_DIFF_MULTI", 0) != 0 : (mix(seed) >> 30) % 3 == 0;
  snprintf(c->scope, sizeof c->scope, "s0_%d", (int)c->pl); /* the same names in every program */
  snprintf(c->file, sizeof c->file, "s%llu.gr", (unsigned long long)seed);
  gt_program_make(seed, c->scope, WORKERS, &c->p);
  pins_init(&c->pn, seed, c->pl == PL_RANDOM_PINS ? 100 : 50, PS, WORKERS);
  c->use = c->pl >= PL_RANDOM_PINS ? &c->pn : NULL;
}

static void print_program(const case_ *c, const char *text, const run *got, const verdict *v) {
  printf("---- program (seed %llu, placement %s%s%s) ----\n%s", (unsigned long long)c->seed,
         pl_names[c->pl], c->recvs ? ", schedule_recvs" : "", c->multi ? ", multi-step" : "", text);
  if (got->g) {
    printf("---- its nodes on the cluster ----\n");
    print_nodes(stdout, got->g);
  }
  printf("---- %s\n", v->ok ? "the cluster agrees with one process" : v->what);
}

/* Runs program `seed` in one process and on the cluster; true when they
 * agree. verbose: print the program and its nodes whatever the outcome. */
static bool check_program(cluster *k, stats *st, uint64_t seed, bool verbose, bool *restart) {
  case_ c;
  case_make(&c, seed);
  const char *own = getenv("GR_DIFF_FILE"); /* a program of one's own, seed's placement and pins */
  if (own && *own) {
    FILE *f = fopen(own, "r");
    char *text = calloc(1, 1 << 20);
    if (!f || !text || !fread(text, 1, (1 << 20) - 1, f)) {
      GR_CHECK_MSG(false, "cannot read GR_DIFF_FILE %s", own);
      if (f) fclose(f);
      free(text);
      gt_program_free(&c.p);
      return false;
    }
    fclose(f);
    free(c.p.text);
    c.p.text = text;
    c.p.features = 0;
    snprintf(c.file, sizeof c.file, "%s", strrchr(own, '/') ? strrchr(own, '/') + 1 : own);
  }
  verdict v;
  run got;
  run_pair(k, c.file, c.p.text, c.use, c.pl, c.recvs, c.multi, verbose, &v, &got);
  st->programs++;
  st->by_pl[c.pl][0]++;
  for (int i = 0; i < GT_PF_COUNT; i++)
    if (c.p.features & (1u << i)) st->by_feature[i][0]++;
  if (v.ok) {
    st->agreed++;
  } else {
    st->failed++;
    st->oracle_failed += v.oracle_failed;
    st->refused += v.refused;
    st->crashed += v.dead != NULL;
    st->timed_out += v.timed_out;
    st->by_pl[c.pl][1]++;
    for (int i = 0; i < GT_PF_COUNT; i++)
      if (c.p.features & (1u << i)) st->by_feature[i][1]++;
    int in_family = add_family(st, v.what, seed, c.pl);
    if (!st->max_lines || st->failed <= st->max_lines)
      fprintf(stderr, "FAIL seed %llu placement %s%s%s: %s\n", (unsigned long long)seed,
              pl_names[c.pl], c.recvs ? " (schedule_recvs)" : "", c.multi ? " (multi-step)" : "",
              v.what);
    if (st->max_lines && st->failed == st->max_lines + 1)
      fprintf(stderr, "(more failures are counted by family below; GR_DIFF_ALL=1 prints each)\n");
    for (int i = 0; v.dead && i < k->c.n; i++)
      if (!strcmp(k->c.task[i], v.dead)) { /* what it said before it ended */
        gt_proc_wait(&k->c.srv[i], NULL, 2);
        size_t len = k->c.srv[i].len;
        fprintf(stderr, "---- the output of %s (exit %d) ----\n%s\n----\n", v.dead,
                gt_proc_exit_code(&k->c.srv[i]), k->c.srv[i].buf + (len > 3000 ? len - 3000 : 0));
      }
    if (in_family <= DUMPS_PER_FAMILY) dump_failure(st, seed, c.pl, c.recvs, &c.p, &got, v.what);
    if (st->shown < SHOW_FAILED && !verbose) {
      st->shown++;
      fprintf(stderr, "---- program (seed %llu) ----\n%s----\n", (unsigned long long)seed,
              c.p.text);
    }
  }
  if (verbose) print_program(&c, c.p.text, &got, &v);
  if (restart) *restart = v.dead || v.lost;
  run_free(&got);
  gt_program_free(&c.p);
  return v.ok;
}

/* ---- reducing a failing program -------------------------------------------------------- */

/* Line i and, when it opens a block, the lines to its close: [i, *end). */
static int block_end(char **lines, int n, int i) {
  int depth = 0, j = i;
  do {
    for (const char *c = lines[j]; *c; c++) depth += *c == '{' ? 1 : *c == '}' ? -1 : 0;
    j++;
  } while (j < n && depth > 0);
  return j;
}

/* lines[0..n) without [from, to), joined, with its scope renamed (the
 * tasks keep the variables of earlier attempts) and, when drop_fetch >= 0,
 * without that name of the fetch line. */
static char *join_without(char **lines, int n, int from, int to, int attempt, const case_ *c) {
  size_t cap = 64;
  for (int i = 0; i < n; i++) cap += strlen(lines[i]) + 1;
  char *text = malloc(cap), *o = text;
  if (!text) abort();
  for (int i = 0; i < n; i++) {
    if (i >= from && i < to) continue;
    if (!strncmp(lines[i], "scope \"", 7))
      o += sprintf(o, "scope \"s%d_%d\" {\n", attempt, (int)c->pl);
    else
      o += sprintf(o, "%s\n", lines[i]);
  }
  return text;
}

/* Runs cand (malloc'd; taken): when it fails with family key, it replaces
 * *text and true. */
static bool try_candidate(cluster *k, const case_ *c, char *cand, const char *key, char **text) {
  verdict v;
  run got;
  char key2[200];
  run_pair(k, c->file, cand, c->use, c->pl, c->recvs, c->multi, false, &v, &got);
  run_free(&got);
  family_key(v.what, key2, sizeof key2);
  bool same = !v.ok && !v.oracle_failed && !strcmp(key, key2);
  if (same) {
    free(*text);
    *text = cand;
  } else {
    free(cand);
  }
  if (v.dead || v.lost) { /* go on with a fresh cluster */
    cluster_down(k);
    if (!cluster_up(k, PS, WORKERS)) abort();
  }
  return same;
}

/* GR_DIFF_REDUCE=<seed>: leaves out statements (and fetched names) of a
 * failing program while it still fails the same way (the same family),
 * then prints what is left with its nodes. Pins follow node names, so a
 * reduced program keeps most of its pins. */
static void reduce_program(cluster *k, uint64_t seed) {
  case_ c;
  case_make(&c, seed);
  verdict v;
  run got;
  run_pair(k, c.file, c.p.text, c.use, c.pl, c.recvs, c.multi, false, &v, &got);
  run_free(&got);
  if (v.ok) {
    printf("seed %llu: the cluster agrees with one process; nothing to reduce\n",
           (unsigned long long)seed);
    return;
  }
  char key[200];
  family_key(v.what, key, sizeof key);
  printf("reducing seed %llu (%s): %s\n", (unsigned long long)seed, pl_names[c.pl], v.what);
  char *text = strdup(c.p.text);
  int attempt = 1000000;
  for (bool changed = true; changed;) {
    changed = false;
    char *lines[4096];
    int n = 0;
    char *copy = strdup(text);
    for (char *line = strtok(copy, "\n"); line && n < 4096; line = strtok(NULL, "\n"))
      lines[n++] = line;
    for (int i = 0; i < n && !changed; i++) {
      const char *t = lines[i];
      while (*t == ' ') t++;
      if (*t == '}' || *t == '#' || !strncmp(t, "scope ", 6) || !strncmp(t, "target ", 7)) continue;
      char counter[32];
      if (sscanf(t, "li%31[0-9] = li", counter) == 1) continue; /* the loop would never end */
      if (!strncmp(t, "fetch ", 6)) {                           /* one fetched name less */
        char *names[GT_PROG_MAX_FETCH + 8];
        int nn = 0;
        char *fl = strdup(t + 6);
        for (char *nm = strtok(fl, ", "); nm && nn < GT_PROG_MAX_FETCH + 8; nm = strtok(NULL, ", "))
          names[nn++] = nm;
        for (int d = 0; d < nn && nn > 1 && !changed; d++) {
          char line[4096] = "fetch ";
          for (int j = 0; j < nn; j++)
            if (j != d)
              snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s",
                       strlen(line) > 6 ? ", " : "", names[j]);
          char *saved = lines[i];
          lines[i] = line;
          changed = try_candidate(k, &c, join_without(lines, n, -1, -1, ++attempt, &c), key, &text);
          lines[i] = saved;
        }
        free(fl);
        continue;
      }
      changed = try_candidate(
          k, &c, join_without(lines, n, i, block_end(lines, n, i), ++attempt, &c), key, &text);
    }
    free(copy);
  }
  /* once more, under a scope of its own (the last attempt's variables are trained already) */
  char *lines[4096];
  int n = 0;
  for (char *line = strtok(text, "\n"); line && n < 4096; line = strtok(NULL, "\n"))
    lines[n++] = line;
  char *last = join_without(lines, n, -1, -1, ++attempt, &c);
  run_pair(k, c.file, last, c.use, c.pl, c.recvs, c.multi, true, &v, &got);
  print_program(&c, last, &got, &v);
  run_free(&got);
  free(last);
  free(text);
  gt_program_free(&c.p);
}

static void print_stats(const stats *st, double seconds) {
  printf("placement diff: %d programs, %d agree, %d fail (%d in one process: the generator's "
         "or the engine's, %d refused, %d server crashes, %d past the step deadline); %.1f s\n",
         st->programs, st->agreed, st->failed, st->oracle_failed, st->refused, st->crashed,
         st->timed_out, seconds);
  printf("  by placement (run / failed):");
  for (int i = 0; i < PL_KINDS; i++)
    printf(" %s %d/%d", pl_names[i], st->by_pl[i][0], st->by_pl[i][1]);
  printf("\n  by feature (programs with it / failed):");
  for (int i = 0; i < GT_PF_COUNT; i++)
    printf("%s %s %d/%d", i ? "," : "", gt_program_feature_name(i), st->by_feature[i][0],
           st->by_feature[i][1]);
  printf("\n");
  if (st->nfam) printf("  failure families (count, first seed and placement, message):\n");
  for (int i = 0; i < st->nfam; i++)
    printf("  %5d  seed %llu %s: %s\n", st->fam[i].count, (unsigned long long)st->fam[i].first_seed,
           pl_names[st->fam[i].first_pl], st->fam[i].example);
}

/* Programs first .. first + n - 1 on one cluster (restarted when a server
 * died, and every `restart` programs); progress every `progress`; stops
 * after max_timeouts steps passed their deadline (0: never), each of which
 * costs a whole deadline. */
static void run_series(stats *st, uint64_t first, int n, int restart, int progress,
                       int max_timeouts) {
  cluster k;
  bool local = env_int("GR_DIFF_LOCAL", 0); /* the generator's check: no cluster */
  if (local) {
    memset(&k, 0, sizeof k);
  } else if (!cluster_up(&k, PS, WORKERS)) {
    GR_CHECK_MSG(false, "the cluster did not start");
    return;
  }
  double t0 = gt_now();
  bool fresh = false; /* a server died or the master lost one */
  for (int i = 0; i < n; i++) {
    if (!local && ((restart && i && i % restart == 0) || fresh)) {
      cluster_down(&k);
      if (!cluster_up(&k, PS, WORKERS)) {
        GR_CHECK_MSG(false, "the cluster did not restart after program %d", i);
        return;
      }
    }
    check_program(&k, st, first + (uint64_t)i, false, &fresh);
    if (max_timeouts && st->timed_out >= max_timeouts) {
      printf("placement diff: stopped after %d programs: %d steps passed their deadline\n", i + 1,
             st->timed_out);
      GR_CHECK_MSG(false, "%d programs hung until the step deadline", st->timed_out);
      break;
    }
    if (!local && i % 200 == 199) cluster_drain(&k);
    if (progress && (i + 1) % progress == 0) {
      printf("placement diff: %d/%d programs, %d failed, %.0f s\n", i + 1, n, st->failed,
             gt_now() - t0);
      fflush(stdout);
    }
  }
  cluster_down(&k);
  print_stats(st, gt_now() - t0);
}

/* 1,000 random programs (500 under the sanitizers), each on the placement
 * its seed picks. */
static void test_random_programs(void) {
  static stats st;
  memset(&st, 0, sizeof st);
  st.dump_dir = getenv("GR_DIFF_DUMP");
  st.max_lines = env_int("GR_DIFF_ALL", 0) ? 0 : 40;
  const char *red = getenv("GR_DIFF_REDUCE");
  if (red && *red) {
    cluster k;
    bool local = env_int("GR_DIFF_LOCAL", 0);
    if (local)
      memset(&k, 0, sizeof k);
    else if (!cluster_up(&k, PS, WORKERS)) {
      GR_CHECK_MSG(false, "the cluster did not start");
      return;
    }
    reduce_program(&k, strtoull(red, NULL, 10));
    cluster_down(&k);
    return;
  }
  const char *one = getenv("GR_DIFF_SEED");
  if (one && *one) {
    cluster k;
    if (!cluster_up(&k, PS, WORKERS)) {
      GR_CHECK_MSG(false, "the cluster did not start");
      return;
    }
    GR_CHECK(check_program(&k, &st, strtoull(one, NULL, 10), true, NULL));
    cluster_down(&k);
    return;
  }
  int n = env_int("GR_DIFF_N", SANITIZED ? 500 : 1000);
  uint64_t base = (uint64_t)env_int("GR_DIFF_BASE", 0);
  if (SANITIZED) printf("placement diff: sanitizer build: %d programs (1000 without)\n", n);
  run_series(&st, base, n, 0, 250, env_int("GR_DIFF_MAX_TIMEOUTS", 3));
  GR_CHECK_MSG(st.failed == 0, "%d of %d programs differ or fail on the cluster", st.failed,
               st.programs);
}

/* Seeds that once failed, each for a reason the suite's series might not
 * meet again: 5991 hung (a received loop invariant scheduled after a node
 * that waited for the loop: partition_sched.c's frame bounds), 7387 and
 * 6927 were refused (a gradient's or a read's pin against its group's),
 * 1013 read an uninitialised variable in a cond branch, 1086 took from an
 * accumulator on a task where nothing was applied. */
static void test_regression_seeds(void) {
  if ((getenv("GR_DIFF_SEED") && *getenv("GR_DIFF_SEED")) ||
      (getenv("GR_DIFF_REDUCE") && *getenv("GR_DIFF_REDUCE")))
    return; /* one program */
  static const uint64_t seeds[] = {5991, 7387, 6927, 1013, 1086, 147, 800, 2406};
  stats st = {0};
  cluster k;
  if (!cluster_up(&k, PS, WORKERS)) {
    GR_CHECK_MSG(false, "the cluster did not start");
    return;
  }
  for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++)
    GR_CHECK_MSG(check_program(&k, &st, seeds[i], false, NULL), "seed %llu",
                 (unsigned long long)seeds[i]);
  cluster_down(&k);
}

/* ---- the examples and the suite's .gr files ---------------------------------------------- */

/* Files left out, and why. */
static const char *excluded(const char *name) {
  static const char *const why[][2] = {
      {"mapreduce_mean.gr",
       "draws 100 million numbers: seconds per run, checked by test_dist_parallel"},
      {"ps_async.gr", "asynchronous between-graph training: each worker is its own client"},
  };
  for (size_t i = 0; i < sizeof why / sizeof *why; i++)
    if (!strcmp(name, why[i][0])) return why[i][1];
  return NULL;
}

/* One file on one placement, as a run of its own on the files' cluster
 * (the files name their variables alike, and some use global_step: the
 * tasks' per-run containers keep the runs apart). A crashed server brings
 * the cluster up again for the next file. */
static void check_file(cluster *k, const char *path, const char *name, placement pl,
                       uint64_t seed) {
  double t0 = gt_now();
  if (!k->up || cluster_dead(k)) {
    cluster_down(k);
    if (!cluster_up(k, FILE_PS, FILE_WORKERS)) {
      GR_CHECK_MSG(false, "%s: the cluster did not start", name);
      return;
    }
  }
  pins pn;
  pins_init(&pn, seed, pl == PL_RANDOM_PINS ? 100 : 50, FILE_PS, FILE_WORKERS);
  const pins *use = pl >= PL_RANDOM_PINS ? &pn : NULL;
  run want, got;
  memset(&got, 0, sizeof got);
  char what[1400] = "";
  bool ok = false;
  if (!load(&want, path, NULL, use, 2)) {
    snprintf(what, sizeof what, "load: %s", want.msg);
  } else if (!want.nx && !want.nt) {
    ok = true; /* a library of defs */
  } else if (!execute(&want, NULL, PL_PINS, true, false, 0, false)) {
    snprintf(what, sizeof what, "one process: %s: %s", want.stage, want.msg);
  } else if (!load(&got, path, NULL, use, 2) || !cluster_new_run(k) ||
             !execute(&got, k->m, pl, true, false, 0, false)) {
    snprintf(what, sizeof what, "%s: %s", got.stage, got.msg);
  } else {
    ok = !differs(&want, &got, what, sizeof what, false);
  }
  printf("  %-26s %-24s %5.1f s  %s\n", name, pl_names[pl], gt_now() - t0, ok ? "agrees" : what);
  GR_CHECK_MSG(ok, "%s on %s: %s", name, pl_names[pl], what);
  run_free(&want);
  run_free(&got);
}

static void check_dir(cluster *k, const char *dir, int *files) {
  char cmd[PATH_MAX + 64];
  snprintf(cmd, sizeof cmd, "ls %s/*.gr 2>/dev/null", dir);
  FILE *ls = popen(cmd, "r");
  if (!ls) return;
  char path[PATH_MAX];
  while (fgets(path, sizeof path, ls)) {
    path[strcspn(path, "\n")] = '\0';
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    const char *why = excluded(name);
    if (why) {
      printf("  %-26s left out: %s\n", name, why);
      continue;
    }
    uint64_t seed = mix((uint64_t)(*files)++);
    check_file(k, path, name, PL_ROUND_ROBIN, seed);
    check_file(k, path, name, PL_RANDOM_PINS, seed);
    check_file(k, path, name, seed % 2 ? PL_SOME_PINS_RR : PL_SOME_PINS_COST, seed);
  }
  pclose(ls);
}

static void test_examples(void) {
  if ((getenv("GR_DIFF_SEED") && *getenv("GR_DIFF_SEED")) ||
      (getenv("GR_DIFF_REDUCE") && *getenv("GR_DIFF_REDUCE")))
    return; /* one program */
  int files = 0;
  double t0 = gt_now();
  cluster k = {0};
  check_dir(&k, GR_SOURCE_DIR "/examples", &files);
  check_dir(&k, GR_SOURCE_DIR "/tests/data", &files);
  cluster_down(&k);
  printf("examples on placements: %d files, %.1f s\n", files, gt_now() - t0);
  GR_CHECK(files >= 20);
}

int main(int argc, char **argv) {
  gt_proc_isolate();
  gr_init();
  if (argc > 1 && !strcmp(argv[1], "soak")) { /* make soak-placement SEEDS=first:count */
    uint64_t first = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
    int n = argc > 3 ? atoi(argv[3]) : 100000;
    static stats st;
    st.dump_dir = getenv("GR_DIFF_DUMP") ? getenv("GR_DIFF_DUMP") : "placement_failures";
    printf("placement soak: seeds %llu to %llu; failures dumped into %s/\n",
           (unsigned long long)first, (unsigned long long)(first + (uint64_t)n - 1), st.dump_dir);
    run_series(&st, first, n, 5000, 1000, 0);
    return st.failed ? 1 : 0;
  }
  GR_RUN(test_random_programs);
  GR_RUN(test_regression_seeds);
  GR_RUN(test_examples);
  return gr_test_finish();
}

/* Mirrored variables saved once (checkpoints/mirrors.c).
 *
 * In one process, a linear model (one variable) in 2 mirrored replicas (momentum: the
 * copies have slots too): gr_ckpt_mirror_source maps each copy and its
 * slot to the variable it mirrors; the `checksums` op gives XXH64 of each
 * variable's bytes; gr_ckpt_check_mirrors passes equal copies and fails a
 * copy made to differ, naming the variable, the copy and both tasks; a
 * checkpoint without the copies restores them from the variables they
 * mirror, and one that holds them (written before) by name; a save in one
 * process (gr_ckpt_save_session) holds no copy, fails for a copy made to
 * differ, and its restore sets the copies.
 *
 * graphrun run examples/thesis_mirrored.gr in one process (3 replicas on
 * local devices): the checkpoint holds no copy, and a resumed run ends bit
 * for bit where an uninterrupted one does.
 *
 * On a launched local cluster, examples/allreduce.gr on 3 workers: the
 * checkpoint holds one copy of each weight (one shard, worker 0's, no
 * VAR/replica_K), and a run resumed from it, or recovering from a worker
 * killed mid-run, ends bit for bit where an uninterrupted run does, its
 * copies equal to the weights. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints/gr_checkpoints.h"
#include "cluster_harness.h"
#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

static char tmp[] = "/tmp/gr_ckpt_mirrored_XXXXXX";

/* ---- in one process ------------------------------------------------------------------------- */

/* The mean squared error of x @ w against y, w the only variable. */
static gr_status mse(gr_graph *g, void *arg, int replica, const gr_output *in, gr_output *out) {
  (void)replica;
  gr_output err = gr_sub(g, gr_matmul(g, in[0], *(gr_output *)arg, false, false), in[1]);
  out[0] = gr_reduce_mean(g, gr_square(g, err), NULL, 0, false);
  return GR_OK;
}

static const char *const tasks[] = {"/job:worker/task:0", "/job:worker/task:1"};
static const char *const devices[] = {"/job:worker/replica:0/task:0/device:CPU:0",
                                      "/job:worker/replica:0/task:1/device:CPU:0"};
/* every variable of the model; the copies (task 1) last */
static const char *const var_names[] = {"w", "w/momentum", "w/replica_1", "w/replica_1/momentum"};
enum { NVARS = 4, NORIG = 2 };

typedef struct model {
  gr_graph *g;
  gr_session *s;
  gr_output train, sums[2], bump, vars[NVARS];
} model;

static bool build(model *m, gr_error *err) {
  gr_graph *g = m->g = gr_graph_new();
  gt_rng r = {7};
  gr_tensor xv = gt_random(&r, GR_F64, gr_shape_make(2, (int64_t[]){12, 3}), -1, 1);
  gr_tensor yv = gt_random(&r, GR_F64, gr_shape_make(2, (int64_t[]){12, 1}), -1, 1);
  gr_output x = gr_const(g, &xv), y = gr_const(g, &yv);
  gr_tensor_release(&xv), gr_tensor_release(&yv);
  gr_graph_push_device_scope(g, tasks[0]);
  gr_output w = gr_variable(
      g, "w", gr_random_uniform(g, GR_F64, gr_shape_make(2, (int64_t[]){3, 1}), -1, 1, 3));
  gr_graph_pop_device_scope(g);
  gr_replicate_options o = {.num_replicas = 2, .devices = tasks, .mirror_variables = true};
  gr_output loss;
  gr_replicate(g, &o, (gr_output[]){x, y}, 2, mse, &w, 1, &loss);
  gr_optimizer opt = {.kind = GR_OPT_MOMENTUM, .learning_rate = 0.05, .momentum = 0.9};
  m->train = gr_minimize(g, &opt, loss, NULL, 0);
  for (int i = 0; i < NVARS; i++) {
    gr_node *v = gr_graph_find_node(g, var_names[i]);
    if (!v) return gr_error_set(err, GR_ERR_NOT_FOUND, "no variable %s", var_names[i]), false;
    m->vars[i] = (gr_output){v, 0};
  }
  for (int t = 0; t < 2; t++) { /* each task's checksums, as graphrun run places them */
    m->sums[t] = gr_ckpt_checksums(g, m->vars + t * NORIG, NORIG);
    if (m->sums[t].node) m->sums[t].node->requested_device = tasks[t];
  }
  /* a deliberately diverged copy: w/replica_1 += 1 */
  m->bump = gr_assign_add(g, m->vars[2], gr_ones(g, GR_F64, gr_shape_make(2, (int64_t[]){3, 1})));
  if (gr_graph_error(g))
    return gr_error_set(err, GR_ERR_INTERNAL, "%s", gr_graph_error(g)->msg), false;
  gr_session_options so = {.num_devices = 2, .device_names = devices, .inter_op_threads = 2};
  m->s = gr_session_new(g, &so, err);
  return m->s != NULL;
}

/* Runs the checksums and compares them: gr_ckpt_check_mirrors's status. */
static gr_status check(model *m, gr_error *err) {
  gr_tensor t[2];
  gr_error rerr;
  if (gr_session_run(m->s, NULL, 0, m->sums, 2, t, NULL, 0, &rerr) != GR_OK) {
    GR_CHECK_MSG(false, "%s", rerr.msg);
    return GR_ERR_INTERNAL;
  }
  uint64_t sums[NVARS];
  const char *where[NVARS];
  for (int i = 0; i < NVARS; i++) {
    sums[i] = (uint64_t)((const int64_t *)gr_tensor_data(&t[i / NORIG]))[i % NORIG];
    where[i] = tasks[i / NORIG];
  }
  /* the op's checksum is the checkpoint's: XXH64 of the bytes */
  gr_tensor w;
  if (gr_session_run(m->s, NULL, 0, &m->vars[0], 1, &w, NULL, 0, &rerr) == GR_OK) {
    GR_CHECK(sums[0] == gr_ckpt_hash64(gr_tensor_data(&w), gr_tensor_num_bytes(&w)));
    gr_tensor_release(&w);
  }
  gr_tensor_release(&t[0]), gr_tensor_release(&t[1]);
  return gr_ckpt_check_mirrors(m->g, var_names, where, sums, NVARS, err);
}

static void test_sources(void) {
  model m = {0};
  gr_error err;
  GR_CHECK_MSG(build(&m, &err), "%s", err.msg);
  for (int i = 0; i < NVARS; i++) {
    const char *src = gr_ckpt_mirror_source(m.g, var_names[i]);
    if (i < NORIG)
      GR_CHECK_MSG(src == NULL, "%s mirrors %s", var_names[i], src);
    else
      GR_CHECK_MSG(src && strcmp(src, var_names[i - NORIG]) == 0, "%s mirrors %s", var_names[i],
                   src ? src : "nothing");
  }
  GR_CHECK(gr_ckpt_mirror_source(m.g, "no/such") == NULL);
  gr_session_free(m.s);
  gr_graph_free(m.g);
}

static void test_diverged_copy_fails(void) {
  model m = {0};
  gr_error err;
  GR_CHECK_MSG(build(&m, &err), "%s", err.msg);
  if (!m.s) {
    gr_graph_free(m.g);
    return;
  }
  for (int k = 0; k < 3; k++)
    GR_CHECK_OK(gr_session_run(m.s, NULL, 0, NULL, 0, NULL, &m.train, 1, &err), err);
  GR_CHECK_OK(check(&m, &err), err); /* trained copies are equal */
  GR_CHECK_OK(gr_session_run(m.s, NULL, 0, NULL, 0, NULL, &m.bump, 1, &err), err);
  GR_CHECK(check(&m, &err) == GR_ERR_FAILED_PRECONDITION);
  GR_CHECK_STR_CONTAINS(err.msg, "mirrored variable 'w': the copy 'w/replica_1' on "
                                 "/job:worker/task:1 differs from 'w' on /job:worker/task:0");
  GR_CHECK_STR_CONTAINS(err.msg, "nothing saved");
  printf("diverged copy: %s\n", err.msg);
  gr_session_free(m.s);
  gr_graph_free(m.g);
}

/* The model built and trained 2 steps; vals: its variables' values then.
 * false (the graph freed) when there is no session. */
static bool trained(model *m, gr_tensor *vals, gr_error *err) {
  GR_CHECK_MSG(build(m, err), "%s", err->msg);
  if (!m->s) {
    gr_graph_free(m->g);
    return false;
  }
  for (int k = 0; k < 2; k++)
    GR_CHECK_OK(gr_session_run(m->s, NULL, 0, NULL, 0, NULL, &m->train, 1, err), *err);
  GR_CHECK_OK(gr_session_run(m->s, NULL, 0, m->vars, NVARS, vals, NULL, 0, err), *err);
  return true;
}

/* Saved without the copies (as graphrun run on a cluster does), a diverged
 * copy is restored from the variable it mirrors; saved with them (every
 * variable, as before), by name. */
static void test_restore_copies(void) {
  model m = {0};
  gr_error err;
  gr_tensor vals[NVARS];
  if (!trained(&m, vals, &err)) return;
  char once[PATH_MAX], all[PATH_MAX];
  snprintf(once, sizeof once, "%s/once.ckpt", tmp);
  snprintf(all, sizeof all, "%s/all.ckpt", tmp);
  gr_ckpt *ck;
  GR_CHECK_OK(gr_ckpt_open(once, NULL, &ck, &err), err);
  gr_ckpt_tensor ts[NORIG];
  for (int i = 0; i < NORIG; i++) ts[i] = (gr_ckpt_tensor){var_names[i], &vals[i]};
  GR_CHECK_OK(gr_ckpt_save_tensors(ck, 2, ts, NORIG, NULL, &err), err);
  gr_ckpt_close(ck);
  GR_CHECK_OK(gr_ckpt_open(all, NULL, &ck, &err), err);
  gr_ckpt_tensor every[NVARS]; /* a checkpoint written before copies were saved once */
  for (int i = 0; i < NVARS; i++) every[i] = (gr_ckpt_tensor){var_names[i], &vals[i]};
  GR_CHECK_OK(gr_ckpt_save_tensors(ck, 2, every, NVARS, NULL, &err), err);
  gr_ckpt_close(ck);
  for (int f = 0; f < 2; f++) {
    GR_CHECK_OK(gr_session_run(m.s, NULL, 0, NULL, 0, NULL, &m.bump, 1, &err), err);
    GR_CHECK(check(&m, &err) == GR_ERR_FAILED_PRECONDITION);
    GR_CHECK_OK(gr_ckpt_open(f ? all : once, NULL, &ck, &err), err);
    gr_ckpt_restore_report rep = {0};
    GR_CHECK_OK(gr_ckpt_restore(ck, m.s, m.g, NULL, &rep, &err), err);
    gr_ckpt_close(ck);
    GR_CHECK_EQ_INT(rep.unused, 0);
    GR_CHECK_OK(check(&m, &err), err);
    gr_tensor now[NVARS];
    GR_CHECK_OK(gr_session_run(m.s, NULL, 0, m.vars, NVARS, now, NULL, 0, &err), err);
    for (int i = 0; i < NVARS; i++) {
      GR_CHECK_MSG(gt_bit_equal(&now[i], &vals[i]), "%s: %s not restored", f ? all : once,
                   var_names[i]);
      gr_tensor_release(&now[i]);
    }
  }
  /* the restore from the checkpoint without copies read their variables' */
  gr_ckpt_tensor_info *infos;
  int n;
  GR_CHECK_OK(gr_ckpt_open(once, &(gr_ckpt_options){.read_only = true}, &ck, &err), err);
  GR_CHECK_OK(gr_ckpt_list_tensors(ck, -1, &infos, &n, &err), err);
  GR_CHECK_EQ_INT(n, NORIG);
  gr_ckpt_tensor_infos_free(infos, n);
  gr_ckpt_close(ck);
  for (int i = 0; i < NVARS; i++) gr_tensor_release(&vals[i]);
  gr_session_free(m.s);
  gr_graph_free(m.g);
}

/* The names of the tensors of the newest checkpoint at path, comma-separated. */
static void tensor_names(const char *path, char *buf, size_t cap) {
  gr_ckpt *ck;
  gr_error err;
  buf[0] = '\0';
  GR_CHECK_OK(gr_ckpt_open(path, &(gr_ckpt_options){.read_only = true}, &ck, &err), err);
  gr_ckpt_tensor_info *infos;
  int n = 0;
  GR_CHECK_OK(gr_ckpt_list_tensors(ck, -1, &infos, &n, &err), err);
  for (int i = 0; i < n; i++)
    snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i ? "," : "", infos[i].name);
  if (n) gr_ckpt_tensor_infos_free(infos, n);
  gr_ckpt_close(ck);
}

/* A save in one process (gr_ckpt_save_session, what graphrun run without
 * a cluster calls) holds the variables once, not the copies; a copy that
 * differs fails it (nothing saved); the restore sets the copies from it. */
static void test_session_saves_once(void) {
  model m = {0};
  gr_error err;
  gr_tensor vals[NVARS];
  if (!trained(&m, vals, &err)) return;
  char path[PATH_MAX], names[256];
  snprintf(path, sizeof path, "%s/session.ckpt", tmp);
  gr_ckpt *ck;
  GR_CHECK_OK(gr_ckpt_open(path, NULL, &ck, &err), err);
  GR_CHECK_OK(gr_ckpt_save_session(ck, m.s, m.g, NULL, &err), err);
  tensor_names(path, names, sizeof names);
  GR_CHECK_MSG(strcmp(names, "global_step,w,w/momentum") == 0 || strcmp(names, "w,w/momentum") == 0,
               "the checkpoint holds %s", names);
  /* a diverged copy: no checkpoint at the next step */
  GR_CHECK_OK(gr_session_run(m.s, NULL, 0, NULL, 0, NULL, &m.bump, 1, &err), err);
  GR_CHECK_OK(gr_session_run(m.s, NULL, 0, NULL, 0, NULL, &m.train, 1, &err), err);
  GR_CHECK(gr_ckpt_save_session(ck, m.s, m.g, NULL, &err) == GR_ERR_FAILED_PRECONDITION);
  GR_CHECK_STR_CONTAINS(err.msg, "mirrored variable 'w': the copy 'w/replica_1' on "
                                 "/job:worker/replica:0/task:1/device:CPU:0 differs from 'w' on "
                                 "/job:worker/replica:0/task:0/device:CPU:0");
  GR_CHECK_STR_CONTAINS(err.msg, "nothing saved");
  gr_ckpt_info *infos;
  int n = 0;
  GR_CHECK_OK(gr_ckpt_list(ck, &infos, &n, &err), err);
  GR_CHECK_EQ_INT(n, 1);
  if (n) gr_ckpt_infos_free(infos, n);
  /* the restore: every copy from its variable, as saved */
  GR_CHECK_OK(gr_ckpt_restore(ck, m.s, m.g, NULL, NULL, &err), err);
  gr_ckpt_close(ck);
  GR_CHECK_OK(check(&m, &err), err);
  gr_tensor now[NVARS];
  GR_CHECK_OK(gr_session_run(m.s, NULL, 0, m.vars, NVARS, now, NULL, 0, &err), err);
  for (int i = 0; i < NVARS; i++) {
    GR_CHECK_MSG(gt_bit_equal(&now[i], &vals[i]), "%s not restored", var_names[i]);
    gr_tensor_release(&now[i]), gr_tensor_release(&vals[i]);
  }
  gr_session_free(m.s);
  gr_graph_free(m.g);
}

/* ---- examples/allreduce.gr on 3 launched workers --------------------------------------------- */

#define WEIGHTS "layer1/w1,layer1/b1,layer2/w2,layer2/b2,layer3/w3,layer3/b3"
static const char *const weights[] = {"layer1/w1", "layer1/b1", "layer2/w2",
                                      "layer2/b2", "layer3/w3", "layer3/b3"};

/* Starts graphrun launch --workers 3 allreduce.gr --steps STEPS [--ckpt
 * tmp/CKPT --save-every EVERY] --fetch WEIGHTS,copies --out tmp/OUT. */
static void start(gt_proc *p, int steps, const char *ckpt, int every, const char *out) {
  char file[PATH_MAX], st[16], ev[16], dir[PATH_MAX + 16], ck[PATH_MAX + 16];
  snprintf(file, sizeof file, "%s/examples/allreduce.gr", GR_SOURCE_DIR);
  snprintf(st, sizeof st, "%d", steps);
  snprintf(ev, sizeof ev, "%d", every);
  snprintf(dir, sizeof dir, "%s/%s", tmp, out);
  snprintf(ck, sizeof ck, "%s/%s", tmp, ckpt ? ckpt : "");
  char *argv[32];
  int n = 0;
  char *const head[] = {
      "graphrun", "launch",      "--workers",
      "3",        file,          "--steps",
      st,         "--fetch",     WEIGHTS ",layer1/w1/replica_2,layer3/b3/replica_1",
      "--out",    dir,           "--timeout",
      "60",       "--heartbeat", "250:12"};
  for (size_t i = 0; i < sizeof head / sizeof *head; i++) argv[n++] = head[i];
  if (ckpt) argv[n++] = "--ckpt", argv[n++] = ck;
  if (ckpt && every) argv[n++] = "--save-every", argv[n++] = ev;
  argv[n] = NULL;
  gt_proc_start(p, argv);
}

/* Waits for the run's end (exit 0 checked): its exit code. */
static int finish(gt_proc *p, const char *out) {
  bool ended = gt_proc_wait(p, NULL, 300);
  gt_proc_finish(p);
  int code = gt_proc_exit_code(p);
  GR_CHECK_MSG(ended && code == 0, "launch %s: exit %d:\n%s", out, code, p->buf);
  return ended ? code : -1;
}

static int launch(int steps, const char *ckpt, const char *out) {
  gt_proc p;
  start(&p, steps, ckpt, 0, out);
  return finish(&p, out);
}

static bool load(const char *out, const char *name, gr_tensor *t) {
  char path[PATH_MAX + 64];
  gr_error err;
  snprintf(path, sizeof path, "%s/%s/%s.npy", tmp, out, name);
  bool ok = gr_data_load_npy(path, t, &err) == GR_OK;
  GR_CHECK_MSG(ok, "%s", err.msg);
  return ok;
}

static bool same(const char *a, const char *an, const char *b, const char *bn) {
  gr_tensor ta, tb;
  if (!load(a, an, &ta)) return false;
  if (!load(b, bn, &tb)) return gr_tensor_release(&ta), false;
  bool eq = gt_bit_equal(&ta, &tb) && gr_tensor_num_elements(&ta) > 0;
  gr_tensor_release(&ta), gr_tensor_release(&tb);
  return eq;
}

static void test_allreduce_saved_once(void) {
  if (launch(4, NULL, "full") || launch(2, "ck", "half") || launch(4, "ck", "resumed")) return;
  for (int i = 0; i < 6; i++)
    GR_CHECK_MSG(same("full", weights[i], "resumed", weights[i]), "%s: the resumed run differs",
                 weights[i]);
  /* the copies restored from worker 0's weights, trained on equal */
  GR_CHECK(same("resumed", "layer1/w1", "resumed", "layer1/w1/replica_2"));
  GR_CHECK(same("resumed", "layer3/b3", "resumed", "layer3/b3/replica_1"));
  char dir[PATH_MAX + 16];
  snprintf(dir, sizeof dir, "%s/ck", tmp);
  gr_ckpt *ck;
  gr_error err;
  GR_CHECK_OK(gr_ckpt_open(dir, &(gr_ckpt_options){.read_only = true}, &ck, &err), err);
  gr_ckpt_shard_info *sh;
  int ns = 0;
  GR_CHECK_OK(gr_ckpt_list_shards(ck, -1, &sh, &ns, &err), err);
  GR_CHECK_EQ_INT(ns, 1);
  if (ns == 1) GR_CHECK_STR_CONTAINS(sh[0].task, "/job:worker/task:0");
  gr_ckpt_tensor_info *infos;
  int n = 0, copies = 0;
  int64_t bytes = 0;
  GR_CHECK_OK(gr_ckpt_list_tensors(ck, -1, &infos, &n, &err), err);
  for (int i = 0; i < 6; i++) {
    int found = 0;
    for (int k = 0; k < n; k++) found += strcmp(infos[k].name, weights[i]) == 0;
    GR_CHECK_MSG(found == 1, "%s saved %d times", weights[i], found);
  }
  for (int k = 0; k < n; k++) {
    copies += strstr(infos[k].name, "replica_") != NULL;
    bytes += infos[k].nbytes;
  }
  GR_CHECK_MSG(copies == 0, "%d copies saved", copies);
  printf("allreduce.gr, 3 workers: the checkpoint holds %d tensors, %lld bytes, in %d shard\n", n,
         (long long)bytes, ns);
  gr_ckpt_tensor_infos_free(infos, n);
  gr_ckpt_shard_infos_free(sh, ns);
  gr_ckpt_close(ck);
}

/* A worker killed after a checkpoint: the run restores the newest one
 * (worker 0's shard, every copy set from it) and ends bit for bit where
 * the uninterrupted run does. */
static void test_allreduce_recovers(void) {
  enum { STEPS = 300 };
  if (launch(STEPS, NULL, "long")) return;
  gt_proc p;
  start(&p, STEPS, "rec", 20, "rec");
  bool saw = gt_wait_line_after(&p, 0, "saved a checkpoint after step 40 ", 0, 120) >= 0;
  const char *at = strstr(p.buf, " worker:2=127.0.0.1:"), *q = at ? strstr(at, "(pid ") : NULL;
  pid_t pid = q ? (pid_t)atoi(q + 5) : 0;
  GR_CHECK_MSG(saw && pid > 0 && kill(pid, SIGKILL) == 0, "no worker 2 to kill:\n%s", p.buf);
  if (finish(&p, "rec")) return;
  GR_CHECK_MSG(strstr(p.buf, "recovered in") != NULL, "no recovery:\n%s", p.buf);
  for (int i = 0; i < 6; i++)
    GR_CHECK_MSG(same("long", weights[i], "rec", weights[i]), "%s: the recovered run differs",
                 weights[i]);
  GR_CHECK(same("rec", "layer1/w1", "rec", "layer1/w1/replica_2"));
}

/* ---- examples/thesis_mirrored.gr in one process (3 replicas, Adam, batch norm) ------------- */

/* graphrun run FILE --soft-placement --steps STEPS [--ckpt tmp/CKPT] --out tmp/OUT: exit code. */
static int run_local(int steps, const char *ckpt, const char *out) {
  char args[3 * PATH_MAX], buf[8192], ck[PATH_MAX + 32] = "";
  if (ckpt) snprintf(ck, sizeof ck, "--ckpt %s/%s", tmp, ckpt);
  snprintf(args, sizeof args,
           "run %s/examples/thesis_mirrored.gr --soft-placement --steps %d %s "
           "--fetch loss,c1w,d1w,d2w --out %s/%s --quiet",
           GR_SOURCE_DIR, steps, ck, tmp, out);
  int rc = gt_cli_run(tmp, args, buf, sizeof buf);
  GR_CHECK_MSG(rc == 0, "%s: exit %d:\n%s", args, rc, buf);
  return rc;
}

/* graphrun run in one process saves each mirrored variable once (no
 * VAR/replica_K, nor its slots) and a run resumed from it ends bit for bit
 * where an uninterrupted one does: every copy restored. */
static void test_run_saves_once(void) {
  if (run_local(4, NULL, "tm_full") || run_local(2, "tm.ckpt", "tm_half") ||
      run_local(4, "tm.ckpt", "tm_resumed"))
    return;
  char path[PATH_MAX], names[16384];
  snprintf(path, sizeof path, "%s/tm.ckpt", tmp);
  tensor_names(path, names, sizeof names);
  GR_CHECK_MSG(strstr(names, "/replica_") == NULL, "the checkpoint holds copies: %s", names);
  int n = 1;
  for (const char *c = names; *c; c++) n += *c == ',';
  printf("thesis_mirrored.gr in one process: the checkpoint holds %d tensors\n", n);
  GR_CHECK_MSG(n < 60, "%d tensors", n); /* 45; with every copy and its slots 133 */
  const char *fetched[] = {"loss", "c1w", "d1w", "d2w"};
  for (int i = 0; i < 4; i++)
    GR_CHECK_MSG(same("tm_full", fetched[i], "tm_resumed", fetched[i]),
                 "%s: the resumed run differs", fetched[i]);
}

int main(void) {
  if (!mkdtemp(tmp)) return 1;
  gt_proc_isolate();
  GR_RUN(test_sources);
  GR_RUN(test_diverged_copy_fails);
  GR_RUN(test_restore_copies);
  GR_RUN(test_session_saves_once);
  GR_RUN(test_run_saves_once);
  GR_RUN(test_allreduce_saved_once);
  GR_RUN(test_allreduce_recovers);
  gt_remove_tree(tmp);
  return gr_test_finish();
}

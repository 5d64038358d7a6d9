/* Run state on servers started by hand (`graphrun server` processes that
 * outlive their clients, tests/unit/cluster_harness.h), as a user meets it:
 *
 * - a second `graphrun run` of a training file trains from initial values,
 *   not from the first run's variables (each run has a private container on
 *   the tasks), with or without a fresh --ckpt and --no-restore: the same
 *   loss as a one-process run, and the same first checkpoint;
 * - two clients training at once on the same servers each get their own
 *   correct result;
 * - a named container (--container) is shared between clients and kept
 *   until `graphrun reset` (one, or all), and --no-restore resets it;
 * - a checkpoint file or directory has one writer at a time: a second is
 *   refused naming the first's host and pid, and the lock of a writer
 *   killed with SIGKILL does not block the next. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <graphrun.h>

#include "cluster_harness.h"
#include "gr_test.h"

static char mlp[PATH_MAX]; /* tests/data/recovery_mlp.gr: 2 ps, 2 workers */
static gt_cluster cl;      /* servers started once, shared by every case */
static bool cl_up;

/* Runs argv (NULL-terminated) to its end, at most 180 s; its exit code. */
static int run_to_end(gt_proc *p, const char *const *argv) {
  gt_proc_start(p, (char *const *)argv);
  bool ended = gt_proc_wait(p, NULL, 180);
  GR_CHECK_MSG(ended, "no end: %s", p->buf);
  gt_proc_finish(p);
  return gt_proc_exit_code(p);
}

/* `graphrun run recovery_mlp.gr --steps STEPS --json` on the servers
 * (--quiet unless progress: its "step N/STEPS" lines), then `more`
 * (NULL-terminated, may be NULL). */
static void start_mlp(gt_proc *p, const char *steps, bool progress, const char *const *more) {
  const char *argv[32] = {"graphrun",    "run",           mlp,       "--cluster",
                          cl.spec,       "--secret-file", cl.secret, "--cluster-id",
                          cl.cluster_id, "--steps",       steps,     "--json"};
  int n = 12;
  if (!progress) argv[n++] = "--quiet";
  for (int i = 0; more && more[i] && n < 31; i++) argv[n++] = more[i];
  argv[n] = NULL;
  gt_proc_start(p, (char *const *)argv);
}

/* Its loss after it ended with 0 (into loss), checked. */
static void finish_mlp(gt_proc *p, char *loss, size_t cap) {
  GR_CHECK_MSG(gt_proc_wait(p, NULL, 180), "no end: %s", p->buf);
  gt_proc_finish(p);
  GR_CHECK_MSG(gt_proc_exit_code(p) == 0, "exit %d: %s", gt_proc_exit_code(p), p->buf);
  loss[0] = '\0';
  GR_CHECK_MSG(gt_json_loss(p->buf, loss, cap), "no loss: %s", p->buf);
}

/* The loss of recovery_mlp.gr after `steps` steps in one process. */
static void local_loss(const char *steps, char *loss, size_t cap) {
  gt_proc p;
  int rc = run_to_end(&p, (const char *[]){"graphrun", "run", mlp, "--soft-placement", "--steps",
                                           steps, "--json", "--quiet", NULL});
  GR_CHECK_MSG(rc == 0 && gt_json_loss(p.buf, loss, cap), "exit %d: %s", rc, p.buf);
}

/* The oldest checkpoints of two checkpoint directories hold the same
 * tensors, byte for byte. */
static void same_first_checkpoint(const char *a, const char *b) {
  gr_ckpt *ck[2] = {NULL, NULL};
  gr_ckpt_info *infos[2] = {NULL, NULL};
  int ni[2] = {0, 0};
  gr_error err;
  gr_ckpt_options ro = {.read_only = true};
  const char *dirs[2] = {a, b};
  for (int k = 0; k < 2; k++) {
    GR_CHECK_OK(gr_ckpt_open(dirs[k], &ro, &ck[k], &err), err);
    if (ck[k]) GR_CHECK_OK(gr_ckpt_list(ck[k], &infos[k], &ni[k], &err), err);
  }
  if (ni[0] > 0 && ni[1] > 0) {
    gr_ckpt_tensor_info *t;
    int nt = 0;
    GR_CHECK_OK(gr_ckpt_list_tensors(ck[0], infos[0][0].step, &t, &nt, &err), err);
    GR_CHECK_MSG(nt >= 7, "%d tensors", nt);
    for (int i = 0; i < nt; i++) {
      gr_tensor x, y;
      GR_CHECK_OK(gr_ckpt_read_tensor(ck[0], infos[0][0].step, t[i].name, &x, &err), err);
      GR_CHECK_OK(gr_ckpt_read_tensor(ck[1], infos[1][0].step, t[i].name, &y, &err), err);
      size_t n = gr_tensor_num_bytes(&x);
      GR_CHECK_MSG(n == gr_tensor_num_bytes(&y) &&
                       !memcmp(gr_tensor_data(&x), gr_tensor_data(&y), n),
                   "'%s' differs between the first checkpoints of %s and %s", t[i].name, a, b);
      gr_tensor_release(&x);
      gr_tensor_release(&y);
    }
    gr_ckpt_tensor_infos_free(t, nt);
  } else {
    GR_CHECK_MSG(false, "no checkpoints: %d in %s, %d in %s", ni[0], a, ni[1], b);
  }
  for (int k = 0; k < 2; k++) {
    gr_ckpt_infos_free(infos[k], ni[k]);
    gr_ckpt_close(ck[k]);
  }
}

/* The user's report: on the same servers, a second run (plain, or with a
 * fresh --ckpt and --no-restore) trained from the first one's weights. */
static void test_second_run_starts_fresh(void) {
  char want[256], got[256], ck1[PATH_MAX], ck2[PATH_MAX];
  local_loss("60", want, sizeof want);
  gt_cluster_path(&cl, "fresh1", ck1, sizeof ck1);
  gt_cluster_path(&cl, "fresh2", ck2, sizeof ck2);
  const char *const runs[3][4] = {
      {"--ckpt", ck1, NULL}, {NULL}, {"--ckpt", ck2, "--no-restore", NULL}};
  for (int i = 0; i < 3; i++) {
    gt_proc p;
    start_mlp(&p, "60", false, runs[i]);
    finish_mlp(&p, got, sizeof got);
    GR_CHECK_MSG(!strcmp(got, want), "run %d on the same servers: %s, one process: %s", i + 1, got,
                 want);
  }
  /* the checkpoint saved before the first step holds the initial weights */
  same_first_checkpoint(ck1, ck2);
}

/* Two clients training at once on the same servers: each its own result. */
static void test_two_clients_at_once(void) {
  char want[256], got[2][256];
  local_loss("1000", want, sizeof want);
  gt_proc p[2];
  start_mlp(&p[0], "1000", true, NULL);
  /* its first progress line ("step N/1000  ..."): it has trained */
  GR_CHECK_MSG(gt_proc_wait_line(&p[0], "/1000  ", 120), "%s", p[0].buf);
  start_mlp(&p[1], "1000", true, NULL);
  GR_CHECK_MSG(gt_proc_wait_line(&p[1], "/1000  ", 120), "%s", p[1].buf);
  /* both trained at once: the first had not finished when the second had
   * trained too */
  gt_proc_wait(&p[0], "\x01", 0);
  GR_CHECK_MSG(!strstr(p[0].buf, "1000 steps in "), "the first ended first:\n%s", p[0].buf);
  for (int k = 0; k < 2; k++) {
    finish_mlp(&p[k], got[k], sizeof got[k]);
    GR_CHECK_MSG(!strcmp(got[k], want), "client %d: %s, one process: %s", k, got[k], want);
  }
}

/* `graphrun run counter.gr --steps STEPS` on the servers (more: flags); the
 * value of bump it prints (-1 when it failed). */
static double count(const char *file, const char *steps, const char *const *more) {
  const char *argv[24] = {"graphrun",    "run",           file,      "--cluster",
                          cl.spec,       "--secret-file", cl.secret, "--cluster-id",
                          cl.cluster_id, "--steps",       steps,     "--quiet"};
  int n = 12;
  for (int i = 0; more && more[i] && n < 23; i++) argv[n++] = more[i];
  argv[n] = NULL;
  gt_proc p;
  int rc = run_to_end(&p, argv);
  const char *at = strstr(p.buf, "bump = ");
  GR_CHECK_MSG(rc == 0 && at, "exit %d: %s", rc, p.buf);
  return rc == 0 && at ? atof(at + 7) : -1;
}

/* `graphrun reset --cluster ... ARGS`: its exit code; p keeps the output. */
static int reset(gt_proc *p, const char *const *args) {
  const char *argv[16] = {"graphrun",      "reset",   "--cluster",    cl.spec,
                          "--secret-file", cl.secret, "--cluster-id", cl.cluster_id};
  int n = 8;
  for (int i = 0; args && args[i] && n < 15; i++) argv[n++] = args[i];
  argv[n] = NULL;
  return run_to_end(p, argv);
}

/* A named container is shared by the clients that name it and stays on the
 * tasks until reset; a run without one has its own; --no-restore resets
 * it. */
static void test_named_container(void) {
  gt_write_file(cl.dir, "counter.gr",
                "device \"/job:ps/task:0\" { v = variable(zeros([])) }\n"
                "bump = assign_add(v, 1)\nfetch bump\n");
  char file[PATH_MAX], ck[PATH_MAX];
  gt_cluster_path(&cl, "counter.gr", file, sizeof file);
  gt_cluster_path(&cl, "counter_ckpt", ck, sizeof ck);
  const char *team[] = {"--container", "team", NULL}, *other[] = {"--container", "other.2", NULL};
  GR_CHECK_NEAR(count(file, "3", team), 3, 0);
  GR_CHECK_NEAR(count(file, "3", team), 6, 0); /* shared: goes on from the first client */
  GR_CHECK_NEAR(count(file, "3", NULL), 3, 0); /* a run of its own */
  GR_CHECK_NEAR(count(file, "1", other), 1, 0);
  gt_proc p;
  GR_CHECK_EQ_INT(reset(&p, team), 0);
  GR_CHECK_STR_CONTAINS(p.buf, "graphrun reset: container 'team': dropped on ");
  GR_CHECK_NEAR(count(file, "3", team), 3, 0);  /* from its initial value again */
  GR_CHECK_NEAR(count(file, "1", other), 2, 0); /* another container is kept */
  GR_CHECK_EQ_INT(reset(&p, NULL), 0);
  GR_CHECK_STR_CONTAINS(p.buf, "graphrun reset: every shared container: ");
  GR_CHECK_NEAR(count(file, "1", other), 1, 0);
  /* --no-restore with a fresh checkpoint: the container is reset first */
  GR_CHECK_NEAR(count(file, "2", team), 2, 0); /* reset with the others */
  GR_CHECK_NEAR(count(file, "2", team), 4, 0);
  const char *fresh[] = {"--container", "team", "--ckpt", ck, "--no-restore", NULL};
  GR_CHECK_NEAR(count(file, "2", fresh), 2, 0);
}

/* Usage errors exit 2 naming what is wrong. */
static void test_container_flags(void) {
  struct {
    const char *argv[12];
    const char *want;
  } cases[] = {
      {{"graphrun", "run", mlp, "--cluster", cl.spec, "--container", "a b", NULL},
       "--container wants a container name"},
      {{"graphrun", "run", mlp, "--cluster", cl.spec, "--container", "_run.1", NULL},
       "starting with a letter or a digit"},
      {{"graphrun", "run", mlp, "--container", "team", NULL}, "--container names a container"},
      {{"graphrun", "run", mlp, "--cluster", cl.spec, "--job", "worker", "--task", "1", NULL},
       "give every client the same --container NAME"},
      {{"graphrun", "reset", NULL}, "which cluster? give --cluster C"},
      {{"graphrun", "reset", "--cluster", cl.spec, "--container", "", NULL},
       "--container wants a container name"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gt_proc p;
    int rc = run_to_end(&p, cases[i].argv);
    GR_CHECK_MSG(rc == 2, "case %zu: exit %d: %s", i, rc, p.buf);
    GR_CHECK_STR_CONTAINS(p.buf, cases[i].want);
  }
}

/* Waits (at most 60 s) until the lock file at path names a holder. */
static bool lock_named(const char *path) {
  for (double end = gt_now() + 60; gt_now() < end; usleep(20000)) {
    FILE *f = fopen(path, "r");
    char buf[256] = "";
    if (f) {
      size_t n = fread(buf, 1, sizeof buf - 1, f);
      buf[n] = '\0';
      fclose(f);
    }
    if (strstr(buf, " pid ")) return true;
  }
  return false;
}

/* A writer holds the checkpoint at ckpt (lock file lock); a second is
 * refused naming its host and pid; after a SIGKILL of the first, its stale
 * lock file does not block a third, which removes the file when it ends. */
static void one_writer(const char *const *writer, const char *const *second, const char *lock) {
  gt_proc a;
  gt_proc_start(&a, (char *const *)writer);
  bool held = lock_named(lock);
  GR_CHECK_MSG(held, "no lock file %s: %s", lock, a.buf);
  char host[256] = "", want[512];
  gethostname(host, sizeof host - 1);
  snprintf(want, sizeof want, "has another writer: host %s pid %d holds its lock (%s)", host,
           (int)a.pid, lock);
  gt_proc p;
  int rc = run_to_end(&p, second);
  GR_CHECK_MSG(rc == 1, "the second writer: exit %d: %s", rc, p.buf);
  GR_CHECK_STR_CONTAINS(p.buf, want);
  kill(a.pid, SIGKILL);
  gt_proc_finish(&a);
  GR_CHECK_MSG(held && access(lock, F_OK) == 0, "the killed writer's lock file is gone");
  rc = run_to_end(&p, second);
  GR_CHECK_MSG(rc == 0, "after the first was killed: exit %d: %s", rc, p.buf);
  GR_CHECK_MSG(access(lock, F_OK) != 0, "%s is left after the run", lock);
}

static void test_one_checkpoint_writer(void) {
  char file[PATH_MAX], lock[PATH_MAX + 16], dir[PATH_MAX];
  gt_cluster_path(&cl, "one.ckpt", file, sizeof file);
  snprintf(lock, sizeof lock, "%s.lock", file);
  const char *local[] = {"graphrun", "run",     mlp,         "--soft-placement",
                         "--quiet",  "--steps", "100000000", "--ckpt",
                         file,       NULL};
  const char *second[] = {"graphrun", "run", mlp, "--soft-placement", "--quiet", "--steps", "5",
                          "--ckpt",   file,  NULL};
  one_writer(local, second, lock);
  /* a cluster's checkpoint directory, written by the chief and the tasks */
  gt_cluster_path(&cl, "one_dir", dir, sizeof dir);
  snprintf(lock, sizeof lock, "%s/writer.lock", dir);
  const char *chief[] = {"graphrun",    "run",
                         mlp,           "--cluster",
                         cl.spec,       "--secret-file",
                         cl.secret,     "--cluster-id",
                         cl.cluster_id, "--quiet",
                         "--steps",     "100000000",
                         "--ckpt",      dir,
                         NULL};
  const char *again[] = {"graphrun",    "run",
                         mlp,           "--cluster",
                         cl.spec,       "--secret-file",
                         cl.secret,     "--cluster-id",
                         cl.cluster_id, "--quiet",
                         "--steps",     "5",
                         "--ckpt",      dir,
                         NULL};
  one_writer(chief, again, lock);
}

int main(void) {
  gt_proc_isolate();
  snprintf(mlp, sizeof mlp, "%s/tests/data/recovery_mlp.gr", GR_SOURCE_DIR);
  cl_up = gt_cluster_start(&cl, &(gt_cluster_options){.ps = 2, .workers = 2});
  GR_CHECK(cl_up);
  if (cl_up) {
    GR_RUN(test_second_run_starts_fresh);
    GR_RUN(test_two_clients_at_once);
    GR_RUN(test_named_container);
    GR_RUN(test_container_flags);
    GR_RUN(test_one_checkpoint_writer);
  }
  gt_cluster_stop(&cl);
  return gr_test_finish();
}

/* Between-graph asynchronous training: one client per worker (graphrun run
 * --job worker --task I, or graphrun launch --between-graph) on
 * tests/data/async_mlp.gr, whose variables and an update counter live on
 * the ps and are shared. Every update of every worker lands; a worker that
 * is not the chief waits for the chief to initialise the shared variables;
 * after a ps is killed the chief restores the newest checkpoint and the
 * other worker waits for it and goes on; bad flags are refused; and
 * examples/ps_async.gr reaches its accuracy. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

static char file[PATH_MAX];

static double max_of(const double *v, int n) {
  double m = -1;
  for (int i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
  return m;
}

/* Two workers, 50 steps each: all 100 updates reach the shared counter
 * (the client that ends last reads it after both are done). */
static void test_every_update_lands(void) {
  gt_proc p;
  gt_proc_start(&p,
                (char *[]){"graphrun", "launch", "--quiet", "--ps", "1", "--workers", "2",
                           "--between-graph", file, "--steps", "50", "--eval", "updates", NULL});
  GR_CHECK_MSG(gt_proc_wait(&p, NULL, 120), "no end:\n%s", p.buf);
  gt_proc_finish(&p);
  GR_CHECK_MSG(gt_proc_exit_code(&p) == 0, "exit %d:\n%s", gt_proc_exit_code(&p), p.buf);
  double u[4], loss[4];
  int n = gt_output_values(p.buf, "updates", u, 4);
  GR_CHECK_MSG(n == 2, "%d clients printed updates:\n%s", n, p.buf);
  GR_CHECK_MSG(max_of(u, n) == 100, "the last client saw %g updates, not 100:\n%s", max_of(u, n),
               p.buf);
  GR_CHECK_MSG(gt_output_values(p.buf, "loss", loss, 4) == 2, "%s", p.buf);
}

/* Worker 1's client starts first and waits for the chief to give the shared
 * variables their values; then both train (sharing them through one named
 * container). */
static void test_worker_waits_for_chief(void) {
  char script[3 * PATH_MAX + 512];
  snprintf(script, sizeof script,
           "%s run %s --job worker --task 1 --container async --steps 20 --eval updates & "
           "sleep 1; "
           "%s run %s --job worker --task 0 --container async --steps 20 --eval updates --quiet; "
           "wait",
           gt_graphrun_exe(), file, gt_graphrun_exe(), file);
  gt_proc p;
  gt_proc_start(&p, (char *[]){"graphrun", "launch", "--quiet", "--ps", "1", "--workers", "2", "--",
                               "sh", "-c", script, NULL});
  GR_CHECK_MSG(gt_proc_wait(&p, NULL, 120), "no end:\n%s", p.buf);
  gt_proc_finish(&p);
  GR_CHECK_MSG(gt_proc_exit_code(&p) == 0, "exit %d:\n%s", gt_proc_exit_code(&p), p.buf);
  GR_CHECK_STR_CONTAINS(p.buf, "/job:worker/task:1 waits for the chief to initialise or restore");
  double u[4];
  int n = gt_output_values(p.buf, "updates", u, 4);
  GR_CHECK_MSG(n == 2 && max_of(u, n) == 40, "%s", p.buf);
}

/* The step S and the shared update count U of the chief's last progress
 * line "step S/1000 ... updates=U" in out (--fetch updates,loss); false
 * when it has printed none. */
static bool chief_progress(const char *out, long *step, double *updates) {
  bool any = false;
  for (const char *at = strstr(out, "step "); at; at = strstr(at + 1, "step ")) {
    const char *nl = strchr(at, '\n'), *u = strstr(at, "updates=");
    long st, total;
    if (nl && u && u < nl && sscanf(at, "step %ld/%ld", &st, &total) == 2 && total == 1000) {
      *step = st;
      *updates = atof(u + strlen("updates="));
      any = true;
    }
  }
  return any;
}

/* Whether the file at path holds `want` (after its first `after`, if
 * given) within seconds; *text: what it holds. */
static bool file_shows(const char *path, const char *after, const char *want, double seconds,
                       char *text, size_t cap) {
  double end = gt_now() + seconds;
  for (;;) {
    text[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f) {
      text[fread(text, 1, cap - 1, f)] = '\0';
      fclose(f);
    }
    const char *from = after ? strstr(text, after) : text;
    if (from && strstr(from, want)) return true;
    if (gt_now() >= end) return false;
    usleep(50000);
  }
}

/* The ps killed mid-training: the chief restores its newest checkpoint,
 * worker 1 waits for that and goes on, and the chief finishes. Worker 1's
 * client is given more steps than it could ever run and is ended by the
 * test once it has trained past the recovery, and the ps is killed only
 * once the chief's progress lines show worker 1's updates in the shared
 * count: the kill finds both clients training however the machine's load
 * spreads their speeds (with equal step counts, worker 1, which saves no
 * checkpoints, could finish first on a busy machine, and never see the
 * kill). */
static void test_recovery(void) {
  char dir[] = "/tmp/gr_async_XXXXXX";
  GR_CHECK(mkdtemp(dir) != NULL);
  char ckpt[PATH_MAX], w1log[PATH_MAX], script[4 * PATH_MAX + 1024];
  snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
  snprintf(w1log, sizeof w1log, "%s/worker1.log", dir);
  snprintf(script, sizeof script,
           "%s run %s --job worker --task 1 --container async --steps 1000000000 --timeout 30 "
           "--recovery-timeout 30 >%s 2>&1 & "
           "echo \"worker 1 client: pid $!\"; "
           "%s run %s --job worker --task 0 --container async --steps 1000 --ckpt %s "
           "--save-every 50 --fetch updates,loss --timeout 30 --recovery-timeout 30; "
           "rc=$?; wait; exit $rc",
           gt_graphrun_exe(), file, w1log, gt_graphrun_exe(), file, ckpt);
  gt_proc p;
  gt_proc_start(&p, (char *[]){"graphrun", "launch", "--ps", "1", "--workers", "2", "--", "sh",
                               "-c", script, NULL});
  bool ok = gt_proc_wait_line(&p, "worker 1 client: pid ", 60);
  const char *at = ok ? strstr(p.buf, "worker 1 client: pid ") : NULL;
  pid_t w1 = at ? (pid_t)atoi(at + strlen("worker 1 client: pid ")) : 0;
  GR_CHECK_MSG(w1 > 0, "no worker 1 client:\n%s", p.buf);
  /* both train: past step 100 (checkpoints after steps 0 and 50 saved),
   * the shared count has more updates than the chief's own */
  long step = 0;
  double updates = 0;
  double end = gt_now() + 120;
  while (w1 > 0 && gt_now() < end &&
         !(chief_progress(p.buf, &step, &updates) && step >= 100 && updates > step + 1))
    if (!gt_proc_wait(&p, "\x01", 0.05) && p.done) break;
  ok = w1 > 0 && step >= 100 && updates > step + 1;
  GR_CHECK_MSG(ok,
               "no progress line of the chief with worker 1's updates (step %ld, updates %g):\n%s",
               step, updates, p.buf);
  at = ok ? strstr(p.buf, " ps:0=127.0.0.1:") : NULL;
  const char *q = at ? strstr(at, "(pid ") : NULL;
  pid_t ps = q ? (pid_t)atoi(q + 5) : 0;
  GR_CHECK(!ok || (ps > 0 && kill(ps, SIGKILL) == 0));
  printf("ps:0 killed at the chief's step %ld, %g updates\n", step, updates);
  /* worker 1 waits for the chief's restore, then trains on (a progress line
   * of its own after the recovery) */
  static char w1out[65536];
  bool waited = ok && file_shows(w1log, NULL, "for the chief to restore the shared variables", 60,
                                 w1out, sizeof w1out);
  bool went_on = waited && file_shows(w1log, "graphrun run: recovered in ", "\nstep ", 60, w1out,
                                      sizeof w1out);
  GR_CHECK_MSG(waited && went_on, "worker 1 did not wait for the restore and go on:\n%s", w1out);
  if (w1 > 0) kill(w1, SIGTERM); /* its steps would take hours */
  GR_CHECK_MSG(gt_proc_wait(&p, NULL, 120), "no end:\n%s", p.buf);
  gt_proc_finish(&p);
  GR_CHECK_MSG(gt_proc_exit_code(&p) == 0, "exit %d:\n%s", gt_proc_exit_code(&p), p.buf);
  GR_CHECK_STR_CONTAINS(p.buf, "then restoring "); /* the chief */
  GR_CHECK_STR_CONTAINS(p.buf, "graphrun run: recovered in ");
  double u[4];
  GR_CHECK_MSG(gt_output_values(p.buf, "updates", u, 4) == 1, "%s", p.buf);
  gt_remove_tree(dir);
}

/* The example: Fashion-MNIST, 1 ps + 2 workers, asynchronous, 1000 steps
 * per worker; the model the last client evaluates reaches >= 85% on the
 * test set (0.861-0.865 measured). */
static void test_example(void) {
  char ex[PATH_MAX];
  snprintf(ex, sizeof ex, "%s/examples/ps_async.gr", GR_SOURCE_DIR);
  gt_proc p;
  gt_proc_start(&p, (char *[]){"graphrun", "launch", "--quiet", "--ps", "1", "--workers", "2",
                               "--between-graph", ex, "--steps", "1000", "--eval", "accuracy",
                               /* lenient: this test is about training, not detection, and a
                                  loaded machine under ASan starves processes */
                               "--heartbeat", "250:12", NULL});
  GR_CHECK_MSG(gt_proc_wait(&p, NULL, 300), "no end:\n%s", p.buf);
  gt_proc_finish(&p);
  GR_CHECK_MSG(gt_proc_exit_code(&p) == 0, "exit %d:\n%s", gt_proc_exit_code(&p), p.buf);
  double acc[4];
  int n = gt_output_values(p.buf, "accuracy", acc, 4);
  GR_CHECK_MSG(n == 2 && max_of(acc, n) >= 0.85, "accuracy %g:\n%s", n ? max_of(acc, n) : -1,
               p.buf);
}

static void expect_usage(char *const *argv, const char *want) {
  gt_proc p;
  gt_proc_start(&p, argv);
  GR_CHECK(gt_proc_wait(&p, NULL, 30));
  gt_proc_finish(&p);
  GR_CHECK_MSG(gt_proc_exit_code(&p) == 2, "exit %d:\n%s", gt_proc_exit_code(&p), p.buf);
  GR_CHECK_STR_CONTAINS(p.buf, want);
}

static void test_bad_flags(void) {
  char spec[] = "{\"ps\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:2\", \"127.0.0.1:3\"]}";
  expect_usage((char *[]){"graphrun", "run", file, "--cluster", spec, "--job", "worker", NULL},
               "--job and --task go together");
  expect_usage((char *[]){"graphrun", "run", file, "--cluster", spec, "--job", "worker", "--task",
                          "2", NULL},
               "the cluster has no task /job:worker/task:2");
  expect_usage((char *[]){"graphrun", "run", file, "--job", "worker", "--task", "0", NULL},
               "--job and --task need a cluster");
  expect_usage((char *[]){"graphrun", "run", file, "--cluster", spec, "--job", "worker", "--task",
                          "x", NULL},
               "--task wants a task index");
  expect_usage((char *[]){"graphrun", "run", file, "--heartbeat", "5:5", NULL},
               "--heartbeat wants MS:N");
  expect_usage((char *[]){"graphrun", "run", file, "--heartbeat", "100", NULL},
               "--heartbeat wants MS:N");
}

int main(void) {
  gt_proc_isolate();
  snprintf(file, sizeof file, "%s/tests/data/async_mlp.gr", GR_SOURCE_DIR);
  GR_RUN(test_bad_flags);
  GR_RUN(test_every_update_lands);
  GR_RUN(test_worker_waits_for_chief);
  GR_RUN(test_recovery);
  GR_RUN(test_example);
  return gr_test_finish();
}

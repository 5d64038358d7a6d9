/* The chief in between-graph training (tests/data/async_mlp.gr, shared
 * variables and an update counter on the ps): with a TF_CONFIG-style
 * cluster of a chief, 2 workers and a ps, `graphrun launch --between-graph`
 * runs a client for the chief too, which initialises, saves and restores
 * the variables and trains its share; a chief client that ends before the
 * shared variables have values (a bad flag only it uses, or killed before
 * a restore) makes the workers started by hand fail within seconds, naming
 * it, instead of waiting out --recovery-timeout; launch reports a failed
 * chief as its exit code; without a chief job worker 0 is the chief.
 * Every process is bounded in time and reaped. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <graphrun.h>

#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

static char file[PATH_MAX];

/* TF_CONFIG as a thesis writes it: a chief, 2 workers and a ps on free
 * loopback ports, this process as worker 0 (launch --cluster env reads the
 * cluster and ignores the task). */
static void set_tf_config(void) {
  int p[4];
  GR_CHECK(gt_free_ports(p, 4));
  char tf[512];
  snprintf(tf, sizeof tf,
           "{\"cluster\": {\"chief\": [\"localhost:%d\"], \"worker\": [\"localhost:%d\", "
           "\"localhost:%d\"], \"ps\": [\"localhost:%d\"]}, \"task\": {\"type\": \"worker\", "
           "\"index\": 0}}",
           p[0], p[1], p[2], p[3]);
  setenv("TF_CONFIG", tf, 1);
}

/* Starts argv (a launch) on a fresh TF_CONFIG and waits until its tasks
 * listen; a task that could not bind its port (another process took it
 * since free_ports) makes it try again, once, on new ports. */
static void start_launch(gt_proc *p, char *const *argv) {
  for (int attempt = 0; attempt < 2; attempt++) {
    set_tf_config();
    gt_proc_start(p, argv);
    gt_proc_wait(p, "tasks ready", 30);
    if (!strstr(p->buf, "exited while starting")) return;
    gt_proc_finish(p);
  }
}

/* The same, then to its end (at most `seconds`). */
static void run_launch(gt_proc *p, char *const *argv, double seconds) {
  start_launch(p, argv);
  GR_CHECK_MSG(gt_proc_wait(p, NULL, seconds), "no end within %.0f s:\n%s", seconds, p->buf);
  gt_proc_finish(p);
}

/* The pid printed after `key` (as in "chief:0(pid 123)"), 0 when absent. */
static pid_t pid_after(const char *out, const char *key) {
  const char *at = strstr(out, key), *q = at ? strstr(at, "pid ") : NULL;
  return q ? (pid_t)atoi(q + 4) : 0;
}

/* Chief + 2 workers + ps: three clients train (every update lands on the
 * shared counter: 3 x 40), the chief saves the checkpoint (its own shard
 * and the ps'), and a second launch restores it in the chief. */
static void test_chief_trains_and_saves(void) {
  char dir[] = "/tmp/gr_chief_XXXXXX";
  GR_CHECK(mkdtemp(dir) != NULL);
  char ckpt[PATH_MAX];
  snprintf(ckpt, sizeof ckpt, "%s/ck", dir);
  gt_proc p;
  char *argv[] = {"graphrun", "launch", "--cluster", "env",    "--between-graph", file, "--steps",
                  "40",       "--ckpt", ckpt,        "--eval", "updates",         NULL};
  run_launch(&p, argv, 120);
  GR_CHECK_MSG(gt_proc_exit_code(&p) == 0, "exit %d:\n%s", gt_proc_exit_code(&p), p.buf);
  GR_CHECK_STR_CONTAINS(p.buf, "graphrun launch: 3 clients: chief:0(pid ");
  GR_CHECK_STR_CONTAINS(p.buf, ")(chief) worker:0(pid ");
  double u[4], last = 0;
  int n = gt_output_values(p.buf, "updates", u, 4);
  for (int i = 0; i < n; i++) last = u[i] > last ? u[i] : last;
  GR_CHECK_MSG(n == 3 && last == 120, "%d clients, %g updates (want 3, 120):\n%s", n, last, p.buf);
  gr_ckpt *ck;
  gr_error err;
  gr_ckpt_options ro = {.read_only = true};
  GR_CHECK_OK(gr_ckpt_open(ckpt, &ro, &ck, &err), err);
  gr_ckpt_shard_info *sh;
  int ns = 0;
  if (ck) GR_CHECK_OK(gr_ckpt_list_shards(ck, -1, &sh, &ns, &err), err);
  GR_CHECK_MSG(ns == 2 && !strcmp(sh[0].file, "chief-0.ckpt") && !strcmp(sh[1].file, "ps-0.ckpt"),
               "%d shards: %s %s", ns, ns ? sh[0].file : "-", ns > 1 ? sh[1].file : "-");
  if (ck) gr_ckpt_shard_infos_free(sh, ns);
  gr_ckpt_close(ck);
  /* again on the same directory: the chief restores, every client ends */
  char *again[] = {"graphrun", "launch", "--cluster", "env",    "--between-graph", file, "--steps",
                   "60",       "--ckpt", ckpt,        "--eval", "updates",         NULL};
  run_launch(&p, again, 120);
  GR_CHECK_MSG(gt_proc_exit_code(&p) == 0, "exit %d:\n%s", gt_proc_exit_code(&p), p.buf);
  GR_CHECK_STR_CONTAINS(p.buf, "(40 steps done)");
  GR_CHECK_MSG(gt_output_values(p.buf, "updates", u, 4) == 3, "%s", p.buf);
  gt_remove_tree(dir);
}

/* Each client's TF_CONFIG names its own task; --job/--task are added. */
static void test_client_environment(void) {
  gt_proc p;
  char *argv[] = {"graphrun", "launch",
                  "--quiet",  "--cluster",
                  "env",      "--between-graph",
                  "--",       "/bin/sh",
                  "-c",       "echo \"$* T=$TF_CONFIG\"",
                  "sh",       NULL};
  run_launch(&p, argv, 60);
  GR_CHECK_MSG(gt_proc_exit_code(&p) == 0, "exit %d:\n%s", gt_proc_exit_code(&p), p.buf);
  GR_CHECK_STR_CONTAINS(p.buf, "--job chief --task 0 T={\"cluster\": {\"chief\": [\"127.0.0.1:");
  GR_CHECK_STR_CONTAINS(p.buf, "\"task\": {\"type\": \"chief\", \"index\": 0}}");
  GR_CHECK_STR_CONTAINS(p.buf, "--job worker --task 1 --quiet T=");
  GR_CHECK_STR_CONTAINS(p.buf, "\"task\": {\"type\": \"worker\", \"index\": 1}}");
}

/* Under launch, a chief whose flag is bad (only the chief opens --ckpt)
 * ends launch with the chief's exit code, naming it. */
static void test_launch_reports_the_chief(void) {
  gt_proc p;
  char *argv[] = {"graphrun",          "launch", "--quiet", "--cluster", "env",
                  "--between-graph",   file,     "--steps", "100000",    "--ckpt",
                  "/proc/no/such/dir", NULL};
  run_launch(&p, argv, 60);
  GR_CHECK_MSG(gt_proc_exit_code(&p) == 2, "exit %d:\n%s", gt_proc_exit_code(&p), p.buf);
  GR_CHECK_STR_CONTAINS(p.buf, "graphrun launch: the client of chief:0 (pid ");
  GR_CHECK_STR_CONTAINS(p.buf, ", the chief) exited with code 2; stopping the others");
}

/* Workers started by hand (a shell under launch, which only serves the
 * tasks) with --recovery-timeout 300 wait for the chief; the chief then
 * fails on a bad --ckpt after it connected. Both workers fail within
 * seconds, naming the chief's pid, long before the 300 s. */
static void chief_crash_by_hand(const char *const *cluster, const char *chief_job) {
  char dir[] = "/tmp/gr_chief_XXXXXX";
  GR_CHECK(mkdtemp(dir) != NULL);
  const char *exe = gt_graphrun_exe();
  char script[4 * PATH_MAX + 2048];
  snprintf(script, sizeof script,
           "D=%s\n"
           "for k in 1 2; do\n"
           "  w=$((k - 1)); [ %s = worker ] && w=$k\n"
           "  ('%s' run '%s' --job worker --task $w --container hand --steps 20 "
           "--recovery-timeout 300 "
           "> $D/w$k.log 2>&1; echo \"worker $w exited with $?\" >> $D/w$k.log) &\n"
           "done\n"
           "i=0; until grep -q 'waits for the chief' $D/w1.log 2>/dev/null && "
           "grep -q 'waits for the chief' $D/w2.log 2>/dev/null; do\n"
           "  i=$((i + 1)); [ $i -gt 1200 ] && break; sleep 0.1; done\n"
           "'%s' run '%s' --job %s --task 0 --container hand --steps 20 "
           "--ckpt /proc/no/such/dir &\n"
           "echo \"chief pid $!\"; wait $!; echo \"chief exited with $?\"\n"
           "wait; cat $D/w1.log $D/w2.log\n",
           dir, chief_job, exe, file, exe, file, chief_job);
  char *argv[16];
  int n = 0;
  argv[n++] = "graphrun";
  argv[n++] = "launch";
  argv[n++] = "--quiet";
  for (int i = 0; cluster[i]; i++) argv[n++] = (char *)cluster[i];
  argv[n++] = "--";
  argv[n++] = "/bin/sh";
  argv[n++] = "-c";
  argv[n++] = script;
  argv[n] = NULL;
  gt_proc p;
  double t0 = gt_now();
  run_launch(&p, argv, 120);
  GR_CHECK_MSG(gt_now() - t0 < 100, "took %.0f s:\n%s", gt_now() - t0, p.buf);
  GR_CHECK_STR_CONTAINS(p.buf, "chief exited with 2");
  pid_t chief = pid_after(p.buf, "chief pid");
  char want[128];
  snprintf(want, sizeof want, "graphrun run: the chief client (/job:%s/task:0, pid %d on ",
           chief_job, (int)chief);
  const char *first = strstr(p.buf, want);
  GR_CHECK_MSG(chief > 0 && first && strstr(first + 1, want), "no worker named the chief:\n%s",
               p.buf);
  GR_CHECK_STR_CONTAINS(p.buf, "before initialising or restoring the shared variables");
  bool chief_job_exists = strcmp(chief_job, "chief") == 0;
  GR_CHECK_STR_CONTAINS(p.buf,
                        chief_job_exists ? "worker 0 exited with 1" : "worker 2 exited with 1");
  GR_CHECK_STR_CONTAINS(p.buf, "worker 1 exited with 1");
  gt_remove_tree(dir);
}

static void test_chief_crash_seen_by_workers(void) {
  chief_crash_by_hand((const char *const[]){"--cluster", "env", NULL}, "chief");
}

/* No chief job: worker 0 is the chief and holds the lease; worker 1 (and
 * a worker 2) started by hand see it end. */
static void test_worker0_crash_seen_by_workers(void) {
  chief_crash_by_hand((const char *const[]){"--ps", "1", "--workers", "3", NULL}, "worker");
}

/* By hand with launch serving (and restarting) the tasks: the chief is
 * killed mid-training after a checkpoint, then the ps; the workers lose
 * the ps, reconnect and would wait for the chief to restore the variables:
 * they see at once that it has ended, and fail naming it. */
static void test_chief_killed_before_a_restore(void) {
  char dir[] = "/tmp/gr_chief_XXXXXX";
  GR_CHECK(mkdtemp(dir) != NULL);
  const char *exe = gt_graphrun_exe();
  char script[4 * PATH_MAX + 1024];
  snprintf(script, sizeof script,
           "'%s' run '%s' --job chief --task 0 --container hand --steps 1000000 --ckpt %s/ck "
           "--save-every 100 "
           "--timeout 60 &\n"
           "echo \"chief pid $!\"\n"
           "for w in 0 1; do ('%s' run '%s' --job worker --task $w --container hand "
           "--steps 1000000 --quiet "
           "--timeout 60 --recovery-timeout 300; echo \"worker $w exited with $?\") & done\n"
           "wait\n",
           exe, file, dir, exe, file);
  gt_proc p;
  start_launch(&p, (char *[]){"graphrun", "launch", "--cluster", "env", "--", "/bin/sh", "-c",
                              script, NULL});
  bool ok = gt_proc_wait_line(&p, "saved a checkpoint after step 200 ", 60);
  GR_CHECK_MSG(ok, "no checkpoint:\n%s", p.buf);
  pid_t chief = pid_after(p.buf, "chief pid"), ps = pid_after(p.buf, " ps:0=127.0.0.1:");
  GR_CHECK(ok && chief > 0 && ps > 0 && kill(chief, SIGKILL) == 0);
  usleep(200 * 1000);
  GR_CHECK(ok && kill(ps, SIGKILL) == 0);
  double t0 = gt_now();
  GR_CHECK_MSG(gt_proc_wait(&p, "worker 0 exited", 120) && gt_proc_wait(&p, "worker 1 exited", 60),
               "the workers did not end:\n%s", p.buf);
  GR_CHECK_MSG(gt_now() - t0 < 100, "took %.0f s:\n%s", gt_now() - t0, p.buf);
  gt_proc_finish(&p);
  char want[128];
  snprintf(want, sizeof want, "the chief client (/job:chief/task:0, pid %d on ", (int)chief);
  GR_CHECK_STR_CONTAINS(p.buf, want);
  GR_CHECK_STR_CONTAINS(p.buf, "worker 0 exited with 1");
  GR_CHECK_STR_CONTAINS(p.buf, "worker 1 exited with 1");
  gt_remove_tree(dir);
}

int main(void) {
  gt_proc_isolate();
  snprintf(file, sizeof file, "%s/tests/data/async_mlp.gr", GR_SOURCE_DIR);
  GR_RUN(test_chief_trains_and_saves);
  GR_RUN(test_client_environment);
  GR_RUN(test_launch_reports_the_chief);
  GR_RUN(test_chief_crash_seen_by_workers);
  GR_RUN(test_worker0_crash_seen_by_workers);
  GR_RUN(test_chief_killed_before_a_restore);
  return gr_test_finish();
}

/* The recovery test of issue 15: `graphrun launch --ps 2 --workers 2` trains
 * tests/data/recovery_mlp.gr (300 synchronous steps, a checkpoint every 20)
 * while this test kills a random task (ps or worker) with SIGKILL at a
 * random moment, 20 times per suite run (`make soak-recovery`: 100; under
 * AddressSanitizer 8, slower as it is), a few kills per run; also two tasks
 * at once, and a task again while launch restarts it. Every run must
 * complete, and its final weights must equal those of an uninterrupted run
 * bit for bit.
 *
 * The moment of a kill: after a random checkpoint line, a random delay of
 * up to the time between the last two checkpoint lines (at most that of
 * the uninterrupted run), so that it lands in training steps or in the
 * next checkpoint save (a task writing its shard, the chief its manifest).
 *
 *   test_dist_kills [KILLS] [SEED]     (default 20, seeded from the time) */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cluster_harness.h"
#include "gr_test.h"

#define STEPS      300
#define SAVE_EVERY 20
#define NTASKS     4
#define PER_RUN    4 /* kills per run */

static const char *const tasks[NTASKS] = {"ps:0", "ps:1", "worker:0", "worker:1"};
static char dir[PATH_MAX], ref_dir[PATH_MAX];
static double interval_s; /* the steps between two checkpoints, uninterrupted */
static unsigned long long rng;
static double detect_ms[1000], recover_ms[1000];
static int nkills;

static void start_run(gt_proc *p, const char *name) {
  gt_launch_run_mlp(
      p, dir, name, STEPS, SAVE_EVERY,
      (const char *const[]){"--ps", "2", "--workers", "2", "--restarts", "1000", NULL},
      (const char *const[]){"--max-failures", "1000", NULL});
}

/* The task's current pid: launch names it when ready and at each restart. */
static pid_t pid_of(const gt_proc *p, const char *task) {
  char ready[64], restarted[64];
  snprintf(ready, sizeof ready, " %s=127.0.0.1:", task);
  snprintf(restarted, sizeof restarted, "%s restarted (pid ", task);
  const char *at = strstr(p->buf, ready), *q = at ? strstr(at, "(pid ") : NULL;
  pid_t pid = q ? (pid_t)atoi(q + 5) : 0;
  for (const char *r = strstr(p->buf, restarted); r; r = strstr(r + 1, restarted))
    pid = (pid_t)atoi(r + strlen(restarted));
  return pid;
}

/* Until a whole line holding want arrives after offset from; its time, or -1. */
static double wait_after(gt_proc *p, size_t from, const char *want, double seconds) {
  double t = gt_wait_line_after(p, from, want, 0, seconds);
  return t < 0 ? -1 : t;
}

/* The step of the newest checkpoint line, -1 when none. */
static int last_checkpoint(const gt_proc *p) {
  const char *key = "saved a checkpoint after step ", *last = NULL;
  for (const char *at = strstr(p->buf, key); at; at = strstr(at + 1, key)) last = at;
  return last ? atoi(last + strlen(key)) : -1;
}

/* The run ended well: exit 0, the weights of the uninterrupted run. */
static void check_end(gt_proc *p, const char *name, const char *what) {
  GR_CHECK_MSG(gt_proc_wait(p, NULL, 120), "%s: no end:\n%s", what, p->buf);
  gt_proc_finish(p);
  GR_CHECK_MSG(gt_proc_exit_code(p) == 0, "%s: exit %d:\n%s", what, gt_proc_exit_code(p), p->buf);
  char out[PATH_MAX];
  snprintf(out, sizeof out, "%s/%s", dir, name);
  GR_CHECK_MSG(gt_same_weights(ref_dir, out), "%s: the final weights differ", what);
}

static void test_uninterrupted(void) {
  gt_proc p;
  snprintf(ref_dir, sizeof ref_dir, "%s/ref", dir);
  start_run(&p, "ref");
  double t0 = wait_after(&p, 0, "tasks ready", 30);
  double t10 = wait_after(&p, 0, "saved a checkpoint after step 20 ", 60);
  double t_end = wait_after(&p, 0, "the last step sent", 120);
  GR_CHECK_MSG(t0 > 0 && t10 > 0 && t_end > 0, "%s", p.buf);
  interval_s = (t_end - t10) / (STEPS - SAVE_EVERY) * SAVE_EVERY;
  check_end(&p, "ref", "the uninterrupted run");
  printf("uninterrupted: %.0f ms between checkpoints\n", interval_s * 1000);
}

/* Kills `victim` (a task name) once; false when it could not. */
static bool kill_task(gt_proc *p, const char *victim, int *killed_pid) {
  pid_t pid = pid_of(p, victim);
  *killed_pid = pid;
  return pid > 0 && kill(pid, SIGKILL) == 0;
}

/* One run with up to `kills` kills of random tasks at random moments. */
static void run_with_kills(int run, int kills) {
  char name[32], what[64];
  snprintf(name, sizeof name, "kills%d", run);
  snprintf(what, sizeof what, "run %d", run);
  gt_proc p;
  start_run(&p, name);
  bool ok = wait_after(&p, 0, "tasks ready", 30) > 0;
  GR_CHECK_MSG(ok, "%s: no cluster:\n%s", what, p.buf);
  for (int k = 0; ok && k < kills; k++) {
    /* after 1-3 more checkpoint lines, up to the time between the last
     * two (or the uninterrupted run's, if shorter: a loaded machine slows
     * down and speeds up): in the steps or in the next save */
    int more = gt_rand_between(&rng, 1, 3);
    double t_prev = -1, t_line = -1;
    for (int s = 0; s < more && ok; s++) {
      t_prev = t_line;
      t_line = wait_after(&p, p.len, "saved a checkpoint after step ", 60);
      ok = t_line > 0;
    }
    GR_CHECK_MSG(ok, "%s: no checkpoint:\n%s", what, p.buf);
    if (!ok || last_checkpoint(&p) > STEPS - SAVE_EVERY) break; /* too close to the end */
    double gap = t_prev > 0 && t_line - t_prev < interval_s ? t_line - t_prev : interval_s;
    usleep((useconds_t)gt_rand_between(&rng, 0, (int)(gap * 1e6)));
    const char *victim = tasks[gt_rand_between(&rng, 0, NTASKS - 1)];
    size_t mark = p.len;
    int pid;
    double t_kill = gt_now();
    ok = kill_task(&p, victim, &pid);
    GR_CHECK_MSG(ok, "%s: cannot kill %s (pid %d)", what, victim, pid);
    double t_fail = ok ? wait_after(&p, mark, " failed: ", 30) : -1;
    double t_rec = t_fail > 0 ? wait_after(&p, mark, "graphrun run: recovered in ", 60) : -1;
    GR_CHECK_MSG(t_fail > 0 && t_rec > 0, "%s: kill of %s (pid %d) not recovered:\n%s", what,
                 victim, pid, p.buf + mark);
    ok = t_rec > 0;
    if (ok && nkills < 1000) {
      detect_ms[nkills] = (t_fail - t_kill) * 1000;
      recover_ms[nkills++] = (t_rec - t_fail) * 1000;
      printf("%s: killed %-8s detected %5.1f ms, recovered %4.0f ms later\n", what, victim,
             (t_fail - t_kill) * 1000, (t_rec - t_fail) * 1000);
    }
  }
  check_end(&p, name, what);
}

static int kills_wanted = 20;

static void test_random_kills(void) {
  int run = 0, before = nkills;
  while (nkills - before < kills_wanted && run < kills_wanted) {
    int left = kills_wanted - (nkills - before);
    run_with_kills(++run, left < PER_RUN ? left : PER_RUN);
    if (gr_test_checks_failed_) break;
  }
  GR_CHECK_MSG(nkills - before == kills_wanted, "%d kills of %d done", nkills - before,
               kills_wanted);
}

/* Two tasks at once; then one task killed again while launch restarts it. */
static void test_two_at_once_and_during_restart(void) {
  gt_proc p;
  start_run(&p, "special");
  bool ok = wait_after(&p, 0, "tasks ready", 30) > 0 &&
            wait_after(&p, 0, "saved a checkpoint after step 60 ", 60) > 0;
  GR_CHECK_MSG(ok, "no training:\n%s", p.buf);
  int pa = 0, pb = 0;
  size_t mark = p.len;
  if (ok) {
    usleep((useconds_t)gt_rand_between(&rng, 0, (int)(interval_s * 0.5e6)));
    ok = kill_task(&p, "ps:1", &pa) && kill_task(&p, "worker:0", &pb);
    GR_CHECK_MSG(ok, "cannot kill ps:1 (pid %d) and worker:0 (pid %d)", pa, pb);
  }
  ok = ok && wait_after(&p, mark, "graphrun run: recovered in ", 60) > 0;
  GR_CHECK_MSG(ok, "two kills at once not recovered:\n%s", p.buf + mark);
  if (ok) {
    GR_CHECK_STR_CONTAINS(p.buf + mark, "ps:1 killed by signal 9; restarting");
    GR_CHECK_STR_CONTAINS(p.buf + mark, "worker:0 killed by signal 9; restarting");
  }
  /* worker:1, and its restarted process before the run has recovered */
  ok = ok && wait_after(&p, p.len, "saved a checkpoint after step ", 60) > 0;
  mark = p.len;
  ok = ok && kill_task(&p, "worker:1", &pa);
  ok = ok && wait_after(&p, mark, "worker:1 restarted (pid ", 30) > 0;
  GR_CHECK_MSG(ok, "worker:1 not restarted:\n%s", p.buf + mark);
  if (ok) {
    bool recovered = gt_find_after(&p, mark, "recovered in ") != NULL;
    ok = kill_task(&p, "worker:1", &pb) && pb != pa;
    GR_CHECK_MSG(ok && !recovered, "not killed while restarting (pid %d, then %d)%s", pa, pb,
                 recovered ? ": the run had recovered already" : "");
  }
  ok = ok && wait_after(&p, mark, "graphrun run: recovered in ", 60) > 0;
  GR_CHECK_MSG(ok, "a kill during a restart not recovered:\n%s", p.buf + mark);
  if (ok) {
    const char *first = gt_find_after(&p, mark, "worker:1 killed by signal 9");
    GR_CHECK(first && strstr(first + 1, "worker:1 killed by signal 9")); /* twice */
  }
  check_end(&p, "special", "two at once, during a restart");
}

/* Waits (at most 60 s, reading p's output meanwhile) until one of the
 * files dir/names[i] exists, i.e. a SQLite transaction on that checkpoint
 * file is under way; its index, or -1. */
static int wait_for_file(gt_proc *p, const char *dir, const char *const *names, int n) {
  double end = gt_now() + 60;
  for (long k = 0; gt_now() < end && !p->done; k++) {
    for (int i = 0; i < n; i++) {
      char path[PATH_MAX];
      struct stat sb;
      snprintf(path, sizeof path, "%s/%s", dir, names[i]);
      if (stat(path, &sb) == 0) return i;
    }
    if (k % 256 == 0) gt_proc_wait(p, "\x01", 0); /* keep its output pipe from filling */
    usleep(20);
  }
  return -1;
}

/* A parameter server killed while it writes its shard of a checkpoint
 * (its rollback journal exists): the save fails, the run recovers from the
 * previous complete checkpoint, and ends with the uninterrupted weights. */
static void test_kill_during_shard_save(void) {
  gt_proc p;
  start_run(&p, "inshard");
  bool ok = wait_after(&p, 0, "saved a checkpoint after step 40 ", 60) > 0;
  GR_CHECK_MSG(ok, "no training:\n%s", p.buf);
  char ckdir[PATH_MAX];
  snprintf(ckdir, sizeof ckdir, "%s/ckpt_inshard", dir);
  static const char *const journals[] = {"ps-0.ckpt-journal", "ps-1.ckpt-journal"};
  size_t mark = p.len;
  int which = ok ? wait_for_file(&p, ckdir, journals, 2) : -1;
  int pid = 0;
  ok = which >= 0 && kill_task(&p, which ? "ps:1" : "ps:0", &pid);
  GR_CHECK_MSG(ok, "no shard save seen, or no kill (pid %d):\n%s", pid, p.buf + mark);
  ok = ok && wait_after(&p, mark, "graphrun run: recovered in ", 60) > 0;
  GR_CHECK_MSG(ok, "a kill during a shard save not recovered:\n%s", p.buf + mark);
  if (ok) GR_CHECK_STR_CONTAINS(p.buf + mark, "saving the checkpoint after step ");
  check_end(&p, "inshard", "a kill during a shard save");
}

/* The pid of launch's child running `graphrun run` (the chief), or 0. */
static pid_t chief_pid(pid_t launch) {
  char cmd[64];
  snprintf(cmd, sizeof cmd, "pgrep -P %d -f 'graphrun run'", (int)launch);
  FILE *f = popen(cmd, "r");
  int pid = 0;
  if (f) {
    if (fscanf(f, "%d", &pid) != 1) pid = 0;
    pclose(f);
  }
  return (pid_t)pid;
}

/* The chief killed while it commits a manifest row (the shards of that
 * step are written, the manifest's journal exists): a new launch on the
 * same directory resumes from the newest complete checkpoint and ends with
 * the uninterrupted weights. */
static void test_kill_chief_before_manifest(void) {
  gt_proc p;
  start_run(&p, "chief");
  bool ok = wait_after(&p, 0, "saved a checkpoint after step 40 ", 60) > 0;
  GR_CHECK_MSG(ok, "no training:\n%s", p.buf);
  pid_t chief = ok ? chief_pid(p.pid) : 0;
  GR_CHECK_MSG(chief > 0, "no graphrun run process under launch %d", (int)p.pid);
  char ckdir[PATH_MAX];
  snprintf(ckdir, sizeof ckdir, "%s/ckpt_chief", dir);
  static const char *const journal[] = {"manifest.ckpt-journal"};
  ok = chief > 0 && wait_for_file(&p, ckdir, journal, 1) == 0 && kill(chief, SIGKILL) == 0;
  GR_CHECK_MSG(ok, "the chief was not killed in a manifest commit:\n%s", p.buf);
  gt_proc_wait(&p, NULL, 30);
  gt_proc_finish(&p);
  GR_CHECK(gt_proc_exit_code(&p) != 0);
  int done_before = last_checkpoint(&p);
  /* again, on the same checkpoint directory */
  start_run(&p, "chief");
  ok = wait_after(&p, 0, "graphrun run: restored ", 60) > 0;
  GR_CHECK_MSG(ok, "the second run restored nothing:\n%s", p.buf);
  const char *r = strstr(p.buf, "steps done)");
  int resumed = -1;
  if (r) {
    while (r > p.buf && r[-1] != '(') r--;
    resumed = atoi(r);
  }
  GR_CHECK_MSG(resumed >= done_before, "resumed after step %d, the killed run had saved %d",
               resumed, done_before);
  check_end(&p, "chief", "the chief killed in a manifest commit");
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
#if defined(__SANITIZE_ADDRESS__)
  kills_wanted = 8; /* AddressSanitizer makes every run several times slower */
#endif
  if (argc > 1) kills_wanted = atoi(argv[1]);
  rng = argc > 2 ? strtoull(argv[2], NULL, 10) : (unsigned long long)time(NULL);
  if (kills_wanted < 1 || kills_wanted > 1000) return 2;
  printf("%d kills, seed %llu (test_dist_kills %d %llu repeats this run)\n", kills_wanted, rng,
         kills_wanted, rng);
  gt_proc_isolate();
  snprintf(dir, sizeof dir, "/tmp/gr_kills_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  double t0 = gt_now();
  GR_RUN(test_uninterrupted);
  if (interval_s > 0) {
    GR_RUN(test_random_kills);
    GR_RUN(test_two_at_once_and_during_restart);
    GR_RUN(test_kill_during_shard_save);
    GR_RUN(test_kill_chief_before_manifest);
  }
  gt_remove_tree(dir);
  if (nkills > 0) {
    qsort(detect_ms, (size_t)nkills, sizeof *detect_ms, cmp);
    qsort(recover_ms, (size_t)nkills, sizeof *recover_ms, cmp);
    printf("kills: %d, detected in %.1f ms (median), %.1f ms (max); recovered %.0f ms "
           "(median) after\n",
           nkills, detect_ms[nkills / 2], detect_ms[nkills - 1], recover_ms[nkills / 2]);
  }
  printf("recovery tests: %.1f s\n", gt_now() - t0);
  return gr_test_finish();
}

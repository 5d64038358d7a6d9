/* The distributed runtime as separate processes: `graphrun launch` starting
 * `graphrun server` tasks on ephemeral loopback ports, running graphs and
 * commands against them, restarting a task killed with SIGKILL, leaving no
 * process behind after Ctrl-C. What servers and clients refuse (secrets,
 * cluster ids): test_dist_auth. Every process this test starts is bounded
 * in time and reaped. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <graphrun.h>

#include "cluster_harness.h" /* gt_json_loss */
#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"
#include "tls_certs.h"

static char exe[PATH_MAX];

/* The pid launch reports for task "job:index". */
static pid_t task_pid(const gt_proc *p, const char *task) {
  const char *at = strstr(p->buf, task);
  const char *pid = at ? strstr(at, "(pid ") : NULL;
  return pid ? (pid_t)atoi(pid + 5) : 0;
}

static bool gone(pid_t pid) {
  return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

static void test_launch_runs_a_graph(void) {
  gt_proc p;
  char file[PATH_MAX];
  snprintf(file, sizeof file, "%s/examples/cluster_basics.gr", GR_SOURCE_DIR);
  char trace[] = "/tmp/gr_trace_XXXXXX";
  int tfd = mkstemp(trace);
  GR_CHECK(tfd >= 0);
  close(tfd);
  gt_proc_start(&p, (char *[]){"graphrun", "launch", "--ps", "1", "--workers", "2", file, "--trace",
                               trace, NULL});
  GR_CHECK_MSG(gt_proc_wait(&p, NULL, 60), "launch did not finish: %s", p.buf);
  gt_proc_finish(&p);
  GR_CHECK_EQ_INT(gt_proc_exit_code(&p), 0);
  GR_CHECK_STR_CONTAINS(p.buf, "y = 238.0");
  /* the trace's bytes per link: x from the ps to each worker, y2 from worker 1
   * to worker 0, 4 bytes each: as many as the step says it sent */
  GR_CHECK_STR_CONTAINS(p.buf, "the last step sent 3 values between devices (12 bytes)");
  GR_CHECK_STR_CONTAINS(p.buf, "/job:ps/replica:0/task:0/device:CPU:0 -> "
                               "/job:worker/replica:0/task:1/device:CPU:0: 1 values, 4 bytes");
  GR_CHECK_STR_CONTAINS(p.buf, "/job:worker/replica:0/task:1/device:CPU:0 -> "
                               "/job:worker/replica:0/task:0/device:CPU:0: 1 values, 4 bytes");
  FILE *tf = fopen(trace, "r");
  char json[65536] = "";
  size_t got = tf ? fread(json, 1, sizeof json - 1, tf) : 0;
  json[got] = '\0';
  if (tf) fclose(tf);
  GR_CHECK_STR_CONTAINS(json, "\"bytes_per_link\": [");
  GR_CHECK_STR_CONTAINS(json, "\"values\": 1, \"bytes\": 4}");
  unlink(trace);
  GR_CHECK_STR_CONTAINS(p.buf, "[ps:0] graphrun server: /job:ps/replica:0/task:0 listening on");
  GR_CHECK_STR_CONTAINS(p.buf, "authenticated");
  /* every task's server is gone */
  const char *tasks[] = {"ps:0=", "worker:0=", "worker:1="};
  for (int k = 0; k < 3; k++) GR_CHECK_MSG(gone(task_pid(&p, tasks[k])), "%s still runs", tasks[k]);
}

/* --steps-per-run: 7 steps as runs of 3, 3 and 1, or as one run of 7
 * traced (--trace: the run's last step, inside the tasks' loop), print the
 * fetches of 7 single steps, bit for bit (JSON floats are exact); the
 * trace holds both workers' nodes; 0 is a usage error. */
static void test_steps_per_run(void) {
  char file[PATH_MAX], out[3][256] = {"", "", ""}, trace[64], dir[] = "/tmp/gr_spr_XXXXXX";
  snprintf(file, sizeof file, "%s/examples/allreduce.gr", GR_SOURCE_DIR);
  GR_CHECK(mkdtemp(dir) != NULL);
  snprintf(trace, sizeof trace, "%s/trace.json", dir);
  for (int k = 0; k < 3; k++) {
    gt_proc p;
    char *argv[] = {"graphrun",
                    "launch",
                    "--ps",
                    "0",
                    "--workers",
                    "2",
                    file,
                    "--steps",
                    "7",
                    "--json",
                    k ? "--steps-per-run" : NULL,
                    k == 1 ? "3" : "7",
                    "--trace",
                    trace,
                    NULL};
    if (k < 2) argv[12] = NULL; /* no --trace */
    gt_proc_start(&p, argv);
    GR_CHECK_MSG(gt_proc_wait(&p, NULL, 120), "launch did not finish: %s", p.buf);
    gt_proc_finish(&p);
    GR_CHECK_EQ_INT(gt_proc_exit_code(&p), 0);
    const char *j = strstr(p.buf, "{\"loss\"");
    GR_CHECK_MSG(j != NULL, "no JSON: %s", p.buf);
    if (j) snprintf(out[k], sizeof out[k], "%.*s", (int)strcspn(j, "\n"), j);
  }
  GR_CHECK_MSG(out[0][0] && !strcmp(out[0], out[1]), "one at a time %s, by 3 %s", out[0], out[1]);
  GR_CHECK_MSG(!strcmp(out[0], out[2]), "one at a time %s, 7 traced %s", out[0], out[2]);
  char *json = gt_read_file(trace);
  GR_CHECK_MSG(json != NULL, "no trace file %s", trace);
  if (json) {
    GR_CHECK_STR_CONTAINS(json, "/job:worker/replica:0/task:0/device:CPU:0");
    GR_CHECK_STR_CONTAINS(json, "/job:worker/replica:0/task:1/device:CPU:0");
  }
  free(json);
  gt_remove_tree(dir);
  gt_proc p;
  gt_proc_start(&p, (char *[]){"graphrun", "run", file, "--steps-per-run", "0", NULL});
  GR_CHECK(gt_proc_wait(&p, NULL, 60));
  gt_proc_finish(&p);
  GR_CHECK_EQ_INT(gt_proc_exit_code(&p), 2);
  GR_CHECK_STR_CONTAINS(p.buf, "--steps-per-run");
}

static void test_launch_environment(void) {
  gt_proc p;
  gt_proc_start(&p, (char *[]){"graphrun", "launch", "--workers", "1", "--ps", "0", "--", "/bin/sh",
                               "-c",
                               "echo \"C=$GRAPHRUN_CLUSTER\"; echo \"T=$TF_CONFIG\"; "
                               "echo \"I=$GRAPHRUN_CLUSTER_ID\"; "
                               "test -s \"$GRAPHRUN_SECRET_FILE\" && echo secret-ok; exit 7",
                               NULL});
  GR_CHECK(gt_proc_wait(&p, NULL, 60));
  gt_proc_finish(&p);
  GR_CHECK_EQ_INT(gt_proc_exit_code(&p), 7); /* the command's exit code */
  GR_CHECK_STR_CONTAINS(p.buf, "C={\"worker\": [\"127.0.0.1:");
  GR_CHECK_STR_CONTAINS(p.buf, "\"task\": {\"type\": \"worker\", \"index\": 0}");
  GR_CHECK_STR_CONTAINS(p.buf, "secret-ok");
  /* the cluster id launch gave its servers, for its command's clients */
  const char *id = strstr(p.buf, "I=launch-");
  GR_CHECK(id != NULL);
  char want[64];
  if (id) snprintf(want, sizeof want, "cluster %.23s, authenticated", id + 2);
  GR_CHECK_STR_CONTAINS(p.buf, want);
}

/* launch's --tls-* reach its servers and its command: good files start
 * the cluster and the command sees them; a missing certificate stops the
 * servers with an error naming it. */
static void test_launch_tls_files(void) {
  gt_certs k;
  if (!gt_certs_make(&k)) {
    GR_CHECK_MSG(false, "openssl could not make the test's certificates");
    return;
  }
  gt_proc p;
  gt_proc_start(
      &p, (char *[]){"graphrun", "launch", "--workers", "1", "--ps", "0", "--restarts", "0",
                     "--tls-cert", k.cert, "--tls-key", k.key, "--tls-ca", k.ca, "--", "/bin/sh",
                     "-c", "echo \"TC=$GRAPHRUN_TLS_CERT TK=$GRAPHRUN_TLS_KEY\"; exit 5", NULL});
  GR_CHECK(gt_proc_wait(&p, NULL, 60));
  gt_proc_finish(&p);
  GR_CHECK_EQ_INT(gt_proc_exit_code(&p), 5);
  char want[2 * PATH_MAX + 16];
  snprintf(want, sizeof want, "TC=%s TK=%s", k.cert, k.key);
  GR_CHECK_STR_CONTAINS(p.buf, want);
  gt_proc_start(&p, (char *[]){"graphrun", "launch", "--workers", "1", "--ps", "0", "--restarts",
                               "0", "--tls-cert", "/nonexistent/node.crt", "--tls-key", k.key,
                               "--tls-ca", k.ca, "--", "/bin/sh", "-c", "echo ran; exit 5", NULL});
  GR_CHECK(gt_proc_wait(&p, NULL, 60));
  gt_proc_finish(&p);
  GR_CHECK(gt_proc_exit_code(&p) != 5 && gt_proc_exit_code(&p) != 0);
  GR_CHECK_STR_CONTAINS(p.buf, "TLS certificate file /nonexistent/node.crt");
  GR_CHECK(strstr(p.buf, "ran\n") == NULL);
  gt_certs_remove(&k);
}

/* Ctrl-C (SIGINT) to launch stops every task and the command. */
static void test_no_orphans(void) {
  gt_proc p;
  gt_proc_start(&p, (char *[]){"graphrun", "launch", "--ps", "1", "--workers", "2", "--",
                               "/bin/sleep", "60", NULL});
  GR_CHECK_MSG(gt_proc_wait_line(&p, "tasks ready", 30), "%s", p.buf);
  pid_t pids[3] = {task_pid(&p, "ps:0="), task_pid(&p, "worker:0="), task_pid(&p, "worker:1=")};
  for (int k = 0; k < 3; k++) GR_CHECK(pids[k] > 0 && !gone(pids[k]));
  kill(p.pid, SIGINT);
  GR_CHECK(gt_proc_wait(&p, NULL, 15));
  gt_proc_finish(&p);
  GR_CHECK_EQ_INT(gt_proc_exit_code(&p), 128 + SIGINT);
  GR_CHECK_STR_CONTAINS(p.buf, "stopping the cluster");
  for (int k = 0; k < 3; k++) GR_CHECK_MSG(gone(pids[k]), "task pid %d survived", (int)pids[k]);
}

/* The CPUs a process may run on, as /proc lists them ("0-1"); "" if gone. */
static void allowed_cpus(pid_t pid, char *out, size_t cap) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  out[0] = '\0';
  FILE *f = fopen(path, "r");
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "Cpus_allowed_list:", 18)) {
      const char *v = line + 18 + strspn(line + 18, " \t");
      snprintf(out, cap, "%.*s", (int)strcspn(v, "\n"), v);
      break;
    }
  if (f) fclose(f);
}

/* launch --cpu-bind: each task on its own share of the CPUs, told in the
 * ready line and true of the process; a bad --cpus is a usage error. */
static void test_launch_cpu_bind(void) {
  cpu_set_t mine;
  GR_CHECK(sched_getaffinity(0, sizeof mine, &mine) == 0);
  int cpu[CPU_SETSIZE], count = 0;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &mine)) cpu[count++] = c;
  gt_proc p;
  gt_proc_start(&p, (char *[]){"graphrun", "launch", "--cpu-bind", "--ps", "1", "--workers", "2",
                               "--", "/bin/sleep", "60", NULL});
  GR_CHECK_MSG(gt_proc_wait_line(&p, "tasks ready", 30), "%s", p.buf);
  const char *tasks[] = {"ps:0=", "worker:0=", "worker:1="};
  int per = count / 3 > 0 ? count / 3 : 1;
  for (int k = 0; k < 3; k++) {
    /* share k: `per` CPUs from the k * per-th (fewer CPUs than tasks: k mod count) */
    int first = count >= 3 ? k * per : k % count, last = first + per - 1;
    char want[64], said[96], got[256];
    if (per > 1)
      snprintf(want, sizeof want, "%d-%d", cpu[first], cpu[last]);
    else
      snprintf(want, sizeof want, "%d", cpu[first]);
    if (per > 1 && cpu[last] - cpu[first] != last - first) continue; /* gaps: listed otherwise */
    snprintf(said, sizeof said, ", CPUs %s)", want);
    const char *at = strstr(p.buf, tasks[k]);
    GR_CHECK_MSG(at && strstr(at, said) && strstr(at, said) < strstr(at, ")") + 1,
                 "%s: want '%s' in: %s", tasks[k], said, p.buf);
    pid_t pid = task_pid(&p, tasks[k]);
    allowed_cpus(pid, got, sizeof got);
    GR_CHECK_MSG(!strcmp(got, want), "%s (pid %d) may run on CPUs '%s', want '%s'", tasks[k],
                 (int)pid, got, want);
  }
  kill(p.pid, SIGINT);
  GR_CHECK(gt_proc_wait(&p, NULL, 15));
  gt_proc_finish(&p);
  /* a CPU this process may not use, lists that are not lists, and Slurm */
  char bad[16];
  snprintf(bad, sizeof bad, "%d", CPU_SETSIZE - 1);
  struct {
    const char *list, *says;
  } refused[] = {{bad, "is not one this process may use"},
                 {"0,,1", "want CPU numbers and ranges such as 0-3,6 (at ',1')"},
                 {"0,3-2", "CPU list '0,3-2': 3-2 is not a range of CPUs"}};
  for (size_t k = 0; k < sizeof refused / sizeof *refused; k++) {
    char *argv[] = {
        "graphrun", "server", "--job", "worker", "--insecure", "--cpus", (char *)refused[k].list,
        NULL};
    GR_CHECK_EQ_INT(gt_run(&p, argv, 30), 2);
    GR_CHECK_STR_CONTAINS(p.buf, refused[k].says);
  }
  char *slurm[] = {"graphrun", "launch", "--cpu-bind", "--slurm", "--", "/bin/true", NULL};
  GR_CHECK_EQ_INT(gt_run(&p, slurm, 30), 2);
  GR_CHECK_STR_CONTAINS(p.buf, "srun binds them");
}

/* A task killed with SIGKILL is restarted on its port; the graph runs. */
/* Reaps every child this process has that ended (orphans it adopted as a
 * subreaper, and p's launch once p is finished). */
static void reap_ended(void) {
  while (waitpid(-1, NULL, WNOHANG) > 0) {}
}

/* gone(), reaping pid first when it is this process's child (a subreaper's). */
static bool ended(pid_t pid) {
  reap_ended();
  return gone(pid);
}

/* launch killed with SIGKILL (it can run no code) leaves nothing behind:
 * its task, its command, what the command started (a shell's background
 * sleep), and no secret in a file (TMPDIR stays empty; the secret's name
 * stops resolving). The test adopts orphans (PR_SET_CHILD_SUBREAPER), so
 * that a process left behind is seen, killed and reaped here. */
static void test_launch_killed_leaves_nothing(void) {
  char tmp[] = "/tmp/gr_launch_kill_XXXXXX";
  GR_CHECK(mkdtemp(tmp));
  const char *old_tmpdir = getenv("TMPDIR");
  char saved[PATH_MAX] = "";
  if (old_tmpdir) snprintf(saved, sizeof saved, "%s", old_tmpdir);
  setenv("TMPDIR", tmp, 1);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  gt_proc p;
  gt_proc_start(
      &p, (char *[]){"graphrun", "launch", "--ps", "0", "--workers", "1", "--", "/bin/sh", "-c",
                     "echo \"S=$GRAPHRUN_SECRET_FILE.\"; sleep 300 & echo \"C=$!.\"; wait", NULL});
  if (old_tmpdir)
    setenv("TMPDIR", saved, 1);
  else
    unsetenv("TMPDIR");
  GR_CHECK_MSG(gt_proc_wait_line(&p, "C=", 30), "%s", p.buf);
  char secret[PATH_MAX] = "";
  const char *s = strstr(p.buf, "S="), *c = strstr(p.buf, "C=");
  if (s) sscanf(s + 2, "%4095[^.\n]", secret);
  pid_t child = c ? (pid_t)atoi(c + 2) : 0, worker = task_pid(&p, "worker:0=");
  struct stat sb;
  GR_CHECK_MSG(secret[0] && stat(secret, &sb) == 0, "the secret '%s' is not there", secret);
  GR_CHECK(child > 0 && !gone(child) && worker > 0 && !gone(worker));
  kill(p.pid, SIGKILL); /* launch alone: not its group, which gt_proc_finish would kill */
  waitpid(p.pid, &p.status, 0);
  p.done = true;
  gt_proc_finish(&p);
  double until = gt_now() + 20;
  while (gt_now() < until && !(ended(child) && ended(worker) && stat(secret, &sb) != 0))
    usleep(20000);
  GR_CHECK_MSG(ended(child), "the command's child %d outlived launch", (int)child);
  GR_CHECK_MSG(ended(worker), "the task %d outlived launch", (int)worker);
  GR_CHECK_MSG(secret[0] && stat(secret, &sb) != 0, "the secret %s outlived launch", secret);
  char leftover[PATH_MAX + 32];
  snprintf(leftover, sizeof leftover, "rmdir %s 2>/dev/null", tmp);
  GR_CHECK_MSG(system(leftover) == 0, "launch left files in its TMPDIR %s", tmp);
  if (child > 0 && !gone(child)) kill(child, SIGKILL); /* what the failure left */
  until = gt_now() + 10;                               /* the guardian and the orphans it killed */
  while (gt_now() < until && (waitpid(-1, NULL, WNOHANG) >= 0 || errno != ECHILD)) usleep(20000);
  prctl(PR_SET_CHILD_SUBREAPER, 0);
  gt_remove_tree(tmp);
}

static void test_restart_after_kill(void) {
  gt_proc p;
  char script[PATH_MAX * 2 + 64];
  snprintf(script, sizeof script,
           "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.5; "
           "'%s' run '%s/examples/cluster_basics.gr' --quiet --timeout 20 && exit 0; done; exit 1",
           exe, GR_SOURCE_DIR);
  gt_proc_start(&p, (char *[]){"graphrun", "launch", "--ps", "1", "--workers", "2", "--", "/bin/sh",
                               "-c", script, NULL});
  GR_CHECK_MSG(gt_proc_wait_line(&p, "tasks ready", 30), "%s", p.buf);
  pid_t w1 = task_pid(&p, "worker:1=");
  GR_CHECK(w1 > 0);
  if (w1 > 0) kill(w1, SIGKILL);
  GR_CHECK(gt_proc_wait(&p, NULL, 60));
  gt_proc_finish(&p);
  GR_CHECK_STR_CONTAINS(p.buf, "worker:1 killed by signal 9; restarting it on port");
  GR_CHECK_STR_CONTAINS(p.buf, "y = 238.0");
  GR_CHECK_EQ_INT(gt_proc_exit_code(&p), 0);
}

/* The checkpoint directory of a cluster run that ended at step `last`:
 * the ps wrote its shard of the layers' variables and worker 0 its shard
 * (the global step lives with the chief), the manifest committed them, and
 * it verifies. */
static void check_sharded(const char *dir, int64_t last) {
  gr_ckpt *ck;
  gr_error err;
  gr_ckpt_options ro = {.read_only = true};
  GR_CHECK_OK(gr_ckpt_open(dir, &ro, &ck, &err), err);
  if (!ck) return;
  int64_t latest = -1;
  GR_CHECK_OK(gr_ckpt_latest_step(ck, &latest, &err), err);
  GR_CHECK_EQ_INT(latest, last);
  gr_ckpt_shard_info *sh;
  int n = 0;
  GR_CHECK_OK(gr_ckpt_list_shards(ck, -1, &sh, &n, &err), err);
  GR_CHECK_MSG(n == 2 && !strcmp(sh[0].file, "ps-0.ckpt") &&
                   !strcmp(sh[0].task, "/job:ps/task:0") && !strcmp(sh[1].file, "worker-0.ckpt"),
               "%d shards: %s %s", n, n ? sh[0].file : "-", n > 1 ? sh[1].file : "-");
  gr_ckpt_shard_infos_free(sh, n);
  GR_CHECK_OK(gr_ckpt_verify(ck, NULL, NULL, NULL, &err), err);
  gr_ckpt_close(ck);
}

/* Fashion-MNIST on ps + 2 workers with a checkpoint every 25 steps; the
 * task `victim` is killed with SIGKILL once training has checkpointed
 * (launch restarts it), or stopped with SIGSTOP until the client's
 * heartbeats find it silent and then continued; the run recovers from the
 * newest checkpoint and ends with the loss of an uninterrupted one-process
 * run, bit for bit. */
static void recover_after_killing(const char *victim, const char *want, bool stop) {
  char file[PATH_MAX], ckpt[] = "/tmp/gr_recover_XXXXXX";
  snprintf(file, sizeof file, "%s/examples/fashion_mlp_cluster.gr", GR_SOURCE_DIR);
  GR_CHECK(mkdtemp(ckpt) != NULL); /* a sharded checkpoint directory */
  gt_proc p;
  /* run's progress and checkpoint lines on (no --quiet): the kill waits for one */
  gt_proc_start(&p, (char *[]){"graphrun", "launch", "--ps", "1", "--workers", "2", file, "--steps",
                               "800", "--ckpt", ckpt, "--save-every", "25", "--json", "--timeout",
                               "30", "--recovery-timeout", "30", NULL});
  GR_CHECK_MSG(gt_proc_wait_line(&p, "tasks ready", 30), "%s", p.buf);
  pid_t pid = task_pid(&p, victim);
  /* after the second checkpoint: the kill lands mid-training */
  GR_CHECK_MSG(gt_proc_wait(&p, "saved a checkpoint after step 50 ", 60), "%s", p.buf);
  GR_CHECK_MSG(!strstr(p.buf, "{\"loss\""), "the run ended before the kill: %s", p.buf);
  if (stop) { /* a silent task: stopped, its connections open; found by heartbeats */
    GR_CHECK(pid > 0 && kill(pid, SIGSTOP) == 0);
    GR_CHECK_MSG(gt_proc_wait(&p, "heartbeats every 100 ms", 20), "not detected: %s", p.buf);
    kill(pid, SIGCONT);
  } else {
    GR_CHECK(pid > 0 && kill(pid, SIGKILL) == 0);
  }
  GR_CHECK_MSG(gt_proc_wait(&p, NULL, 120), "no end: %s", p.buf);
  gt_proc_finish(&p);
  GR_CHECK_EQ_INT(gt_proc_exit_code(&p), 0);
  GR_CHECK_STR_CONTAINS(p.buf, stop ? "): no answer for " : "killed by signal 9; restarting it");
  GR_CHECK_STR_CONTAINS(p.buf, "graphrun run: recovered in ");
  char got[256];
  GR_CHECK_MSG(gt_json_loss(p.buf, got, sizeof got) && !strcmp(got, want), "%s vs %s\n%s", got,
               want, p.buf);
  check_sharded(ckpt, 800);
  gt_remove_tree(ckpt);
}

static void test_recovery_bit_identical(void) {
  char file[PATH_MAX], want[256];
  snprintf(file, sizeof file, "%s/examples/fashion_mlp_cluster.gr", GR_SOURCE_DIR);
  gt_proc ref;
  gt_proc_start(&ref, (char *[]){"graphrun", "run", file, "--soft-placement", "--steps", "800",
                                 "--json", "--quiet", NULL});
  GR_CHECK(gt_proc_wait(&ref, NULL, 120));
  gt_proc_finish(&ref);
  GR_CHECK(gt_json_loss(ref.buf, want, sizeof want));
  recover_after_killing("worker:1=", want, false);
  recover_after_killing("ps:0=", want,
                        false); /* the variables' task: restored from the checkpoint */
  recover_after_killing("worker:0=", want, true); /* SIGSTOP, then SIGCONT */
}

/* `graphrun HEAD... FILE --steps STEPS --json --quiet [--ckpt CKPT
 * --save-every 10]` (head: "run ..." or "launch ..."); its loss line into
 * loss, and its output holds `restored` (not NULL). */
static void run_partitioned(const char *const *head, int nhead, const char *file, const char *steps,
                            const char *ckpt, const char *restored, char *loss, size_t cap) {
  char *argv[24];
  int n = 0;
  argv[n++] = "graphrun";
  for (int i = 0; i < nhead; i++) argv[n++] = (char *)head[i];
  char *tail[] = {(char *)file, "--steps", (char *)steps, "--json", "--quiet"};
  for (size_t i = 0; i < sizeof tail / sizeof *tail; i++) argv[n++] = tail[i];
  if (ckpt)
    argv[n++] = "--ckpt", argv[n++] = (char *)ckpt, argv[n++] = "--save-every", argv[n++] = "10";
  argv[n] = NULL;
  gt_proc p;
  gt_proc_start(&p, argv);
  GR_CHECK_MSG(gt_proc_wait(&p, NULL, 120), "no end: %s", p.buf);
  gt_proc_finish(&p);
  GR_CHECK_MSG(gt_proc_exit_code(&p) == 0, "%s", p.buf);
  GR_CHECK_MSG(gt_json_loss(p.buf, loss, cap), "%s", p.buf);
  if (restored) GR_CHECK_STR_CONTAINS(p.buf, restored);
}

/* dir/name: src with its line "  w1 = ..." replaced by w1_line. */
static void write_variant(const char *dir, const char *name, const char *src, const char *w1_line) {
  const char *at = strstr(src, "  w1 = "), *end = at ? strchr(at, '\n') : NULL;
  GR_CHECK(end != NULL);
  char text[4096];
  if (end) snprintf(text, sizeof text, "%.*s%s%s", (int)(at - src), src, w1_line, end);
  gt_write_file(dir, name, end ? text : "");
}

/* A variable in 3 parts over 2 ps tasks, checkpointed by the cluster: each
 * ps's shard holds its parts as slices and the directory holds w1 whole;
 * training resumed from it with w1 in 2 parts on the cluster, then as a
 * plain variable in one process, ends bit for bit where an uninterrupted
 * one-process run does. */
static void test_partitioned_checkpoint(void) {
  char three[PATH_MAX], two[PATH_MAX + 32], plain[PATH_MAX + 32],
      dir[] = "/tmp/gr_part_ckpt_XXXXXX";
  snprintf(three, sizeof three, "%s/tests/data/partitioned_mlp.gr", GR_SOURCE_DIR);
  GR_CHECK(mkdtemp(dir) != NULL);
  FILE *f = fopen(three, "r");
  char src[4096];
  size_t len = f ? fread(src, 1, sizeof src - 1, f) : 0;
  if (f) fclose(f);
  src[len] = '\0';
  write_variant(dir, "two.gr", src,
                "  w1 = partitioned_variable(glorot_uniform([8, 16], seed=0), parts=2)");
  write_variant(dir, "plain.gr", src, "  w1 = variable(glorot_uniform([8, 16], seed=0))");
  snprintf(two, sizeof two, "%s/two.gr", dir);
  snprintf(plain, sizeof plain, "%s/plain.gr", dir);
  char want[256], got[256], ckpt[PATH_MAX + 32];
  const char *local[] = {"run", "--soft-placement"};
  const char *cluster[] = {"launch", "--ps", "2", "--workers", "1"};
  run_partitioned(local, 2, three, "40", NULL, NULL, want, sizeof want);
  snprintf(ckpt, sizeof ckpt, "%s/ck", dir);
  run_partitioned(cluster, 5, three, "20", ckpt, NULL, got, sizeof got);
  gr_ckpt *ck;
  gr_error err;
  gr_ckpt_options ro = {.read_only = true};
  GR_CHECK_OK(gr_ckpt_open(ckpt, &ro, &ck, &err), err);
  gr_ckpt_tensor_info *t;
  int n = 0;
  GR_CHECK_OK(gr_ckpt_list_tensors(ck, 20, &t, &n, &err), err);
  GR_CHECK(n == 3 && !strcmp(t[1].name, "w1") && t[1].shape.dims[0] == 8 &&
           t[1].shape.dims[1] == 16);
  gr_ckpt_tensor_infos_free(t, n);
  gr_ckpt_shard_info *sh;
  GR_CHECK_OK(gr_ckpt_list_shards(ck, 20, &sh, &n, &err), err);
  GR_CHECK(n == 2 && sh[0].num_tensors == 3 && sh[1].num_tensors == 2); /* parts 0, 2; part 1 */
  gr_ckpt_shard_infos_free(sh, n);
  GR_CHECK_OK(gr_ckpt_verify(ck, NULL, NULL, NULL, &err), err);
  gr_ckpt_close(ck);
  run_partitioned(cluster, 5, two, "30", ckpt, "(20 steps done)", got, sizeof got);
  run_partitioned(local, 2, plain, "40", ckpt, "(30 steps done)", got, sizeof got);
  GR_CHECK_MSG(!strcmp(got, want), "%s vs %s", got, want);
  gt_remove_tree(dir);
}

int main(void) {
  snprintf(exe, sizeof exe, "%s", gt_graphrun_exe());
  gt_proc_isolate();
  GR_RUN(test_launch_runs_a_graph);
  GR_RUN(test_steps_per_run);
  GR_RUN(test_launch_environment);
  GR_RUN(test_launch_tls_files);
  GR_RUN(test_no_orphans);
  GR_RUN(test_launch_cpu_bind);
  GR_RUN(test_launch_killed_leaves_nothing);
  GR_RUN(test_restart_after_kill);
  GR_RUN(test_recovery_bit_identical);
  GR_RUN(test_partitioned_checkpoint);
  return gr_test_finish();
}

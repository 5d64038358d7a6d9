/* graphrun under a real Slurm (make test-slurm; in the suite): the test
 * starts munged, slurmctld and slurmd of Debian's slurm-wlm on this machine
 * in a throwaway configuration of its own (its directory, free ports, a
 * private munge socket and key, no cgroups), as root, and submits:
 *
 * - examples/slurm/train.sbatch twice at once on the one node: 238 from
 *   cluster_basics.gr, then 300 Fashion-MNIST steps with a sharded
 *   checkpoint every 50. Job A's servers take Slurm's reserved ports, job
 *   B's free ones (SLURM_RESV_PORTS=0): each job on its own servers, its
 *   own cluster id. In job B a worker is killed (SIGKILL) after the
 *   checkpoint of step 100: its server restarts in place and the run
 *   recovers; the two final checkpoints are identical, bit for bit.
 * - examples/slurm/servers.sbatch in an sbatch -n4 job: the servers as an
 *   srun -n3 step, the client in the batch script (no SLURM_PROCID), the
 *   servers ending with their client (the script's `wait` returns).
 * - launch --slurm with --tls-* flags: the servers get them (a missing
 *   certificate: their error names it).
 *
 * Then it stops every daemon it started, by pid, also when a check fails.
 * Without root or the packages it says why and exits 77 (skipped). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"
#include "tls_certs.h"

#define JOB_SECONDS 600 /* a job's bound; about 15 s here, longer under ASan */

static char dir[PATH_MAX], conf[PATH_MAX + 32], examples[PATH_MAX];
static int resv_base; /* the reserved ports: resv_base .. resv_base + 99 */
static gt_proc munged, ctld, slurmd;
static bool started[3];

static const char *const tools[] = {"/usr/sbin/munged",  "/usr/sbin/slurmctld",
                                    "/usr/sbin/slurmd",  "/usr/bin/sbatch",
                                    "/usr/bin/srun",     "/usr/bin/squeue",
                                    "/usr/bin/scontrol", "/usr/bin/scancel",
                                    "/usr/bin/sinfo",    NULL};

/* Runs argv to its end (at most seconds): its exit code, its output in out. */
static int run(char *out, size_t cap, double seconds, char *const argv[]) {
  gt_proc p;
  gt_proc_start(&p, argv);
  bool ended = gt_proc_wait(&p, NULL, seconds);
  gt_proc_finish(&p);
  if (out) snprintf(out, cap, "%s", p.buf);
  return ended ? gt_proc_exit_code(&p) : -1;
}

static void write_text(const char *path, const char *text, mode_t mode) {
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
    exit(1);
  }
  chmod(path, mode);
}

/* The file's text (at most 1 MiB), until the next call; "" when missing. */
static char *read_text(const char *path) {
  static char none[1], *buf;
  FILE *f = fopen(path, "r");
  if (!f) return none;
  free(buf);
  buf = calloc(1, 1 << 20);
  size_t n = fread(buf, 1, (1 << 20) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* 100 consecutive ports below the ephemeral range that nothing holds now. */
static int free_port_range(void) {
  for (int base = 20000 + (getpid() % 80) * 100; base < 32000; base += 100) {
    bool free = true;
    for (int p = base; p < base + 100 && free; p++) {
      struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p)};
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      free = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
      if (fd >= 0) close(fd);
    }
    if (free) return base;
  }
  return 0;
}

/* munged, slurmctld and slurmd of a configuration in dir; false when one
 * does not come up (their output printed). */
static bool start_slurm(void) {
  char path[PATH_MAX + 64], sock[PATH_MAX + 64], text[4096], key[1024];
  int ports[2];
  resv_base = free_port_range();
  if (!gt_free_ports(ports, 2) || !resv_base) return false;
  snprintf(path, sizeof path, "%s/munge.key", dir);
  for (size_t i = 0; i < sizeof key - 1; i++) key[i] = (char)('a' + rand() % 26);
  key[sizeof key - 1] = '\0';
  write_text(path, key, 0600);
  snprintf(sock, sizeof sock, "%s/munge.sock", dir);
  char a_key[PATH_MAX + 80], a_sock[PATH_MAX + 80], a_pid[PATH_MAX + 80], a_log[PATH_MAX + 80],
      a_seed[PATH_MAX + 80];
  snprintf(a_key, sizeof a_key, "--key-file=%s", path);
  snprintf(a_sock, sizeof a_sock, "--socket=%s", sock);
  snprintf(a_pid, sizeof a_pid, "--pid-file=%s/munged.pid", dir);
  snprintf(a_log, sizeof a_log, "--log-file=%s/munged.log", dir);
  snprintf(a_seed, sizeof a_seed, "--seed-file=%s/munged.seed", dir);
  gt_proc_start(&munged, (char *[]){"/usr/sbin/munged", "--force", "--foreground", a_key, a_sock,
                                    a_pid, a_log, a_seed, NULL});
  started[0] = true;
  for (int i = 0; i < 100 && access(sock, F_OK) != 0; i++) usleep(100000);
  snprintf(
      text, sizeof text,
      "ClusterName=grtest%d\nSlurmctldHost=localhost\nSlurmctldPort=%d\nSlurmdPort=%d\n"
      "AuthType=auth/munge\nAuthInfo=socket=%s\nCredType=cred/munge\nSlurmUser=root\n"
      "SlurmdUser=root\nNodeName=localhost NodeAddr=127.0.0.1 CPUs=16 State=UNKNOWN\n"
      "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n"
      "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n"
      "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nMpiDefault=none\n"
      "MpiParams=ports=%d-%d\nSlurmdParameters=config_overrides\nReturnToService=2\n"
      "FirstJobId=%d\nSlurmctldPidFile=%s/slurmctld.pid\nSlurmdPidFile=%s/slurmd.pid\n"
      "SlurmdSpoolDir=%s/spool\nStateSaveLocation=%s/state\nSlurmctldLogFile=%s/slurmctld.log\n"
      "SlurmdLogFile=%s/slurmd.log\nJobCompType=jobcomp/none\n"
      "AccountingStorageType=accounting_storage/none\nJobAcctGatherType=jobacct_gather/none\n"
      "MinJobAge=600\n",
      (int)getpid(), ports[0], ports[1], sock, resv_base, resv_base + 99,
      1000000 + (int)(getpid() % 60000000), dir, dir, dir, dir, dir, dir);
  write_text(conf, text, 0644);
  setenv("SLURM_CONF", conf, 1);
  gt_proc_start(&ctld, (char *[]){"/usr/sbin/slurmctld", "-D", "-i", "-f", conf, NULL});
  started[1] = true;
  gt_proc_start(&slurmd, (char *[]){"/usr/sbin/slurmd", "-D", "-N", "localhost", "-f", conf, NULL});
  started[2] = true;
  char out[4096] = "";
  for (int i = 0; i < 300; i++) { /* 30 s: the node idle */
    if (run(out, sizeof out, 10, (char *[]){"/usr/bin/sinfo", "-h", "-o", "%T", NULL}) == 0 &&
        strstr(out, "idle"))
      return true;
    usleep(100000);
  }
  gt_proc_wait(&ctld, "\x01", 0.1), gt_proc_wait(&slurmd, "\x01", 0.1);
  fprintf(stderr, "slurm did not come up (sinfo: %s)\nslurmctld:\n%s\n", out, ctld.buf);
  snprintf(path, sizeof path, "%s/slurmctld.log", dir);
  fprintf(stderr, "%s\nslurmd:\n%s\n", read_text(path), slurmd.buf);
  snprintf(path, sizeof path, "%s/slurmd.log", dir);
  fprintf(stderr, "%s\n", read_text(path));
  return false;
}

/* Cancels what runs (bounded), then stops the daemons: SIGTERM by pid,
 * SIGKILL after 10 s; each reaped. */
static void stop_slurm(void) {
  char out[8192] = "";
  if (started[1] && !ctld.done) {
    run(out, sizeof out, 10, (char *[]){"/usr/bin/squeue", "-h", "-o", "%i", NULL});
    for (char *id = strtok(out, "\n"); id; id = strtok(NULL, "\n"))
      run(NULL, 0, 10, (char *[]){"/usr/bin/scancel", id, NULL});
    for (int i = 0; i < 100; i++) {
      if (run(out, sizeof out, 10, (char *[]){"/usr/bin/squeue", "-h", NULL}) != 0 || !out[0])
        break;
      usleep(100000);
    }
  }
  gt_proc *ds[] = {&slurmd, &ctld, &munged};
  for (int k = 0; k < 3; k++) {
    if (!started[2 - k]) continue;
    if (!ds[k]->done) kill(ds[k]->pid, SIGTERM);
    gt_proc_wait(ds[k], NULL, 10);
    gt_proc_finish(ds[k]);
    started[2 - k] = false;
  }
}

static void on_signal(int sig) {
  stop_slurm();
  signal(sig, SIG_DFL);
  raise(sig);
}

/* sbatch ARGS...: the job id (0 on failure, printed). */
static long submit(char *const args[]) {
  char *argv[24] = {"/usr/bin/sbatch", "--parsable"}, out[4096];
  int n = 2;
  for (int i = 0; args[i] && n < 23; i++) argv[n++] = args[i];
  argv[n] = NULL;
  int rc = run(out, sizeof out, 30, argv);
  long id = rc == 0 ? atol(out) : 0;
  if (!id) fprintf(stderr, "sbatch failed (%d): %s\n", rc, out);
  return id;
}

/* Waits until the job ended: its ExitCode field ("0:0"), "" on timeout. */
static const char *wait_job(long id, double seconds) {
  static char code[32];
  char ids[32], out[8192];
  snprintf(ids, sizeof ids, "%ld", id);
  double end = gt_now() + seconds;
  code[0] = '\0';
  while (gt_now() < end) {
    if (run(out, sizeof out, 10, (char *[]){"/usr/bin/scontrol", "show", "job", "-o", ids, NULL}) ==
            0 &&
        !strstr(out, "JobState=RUNNING") && !strstr(out, "JobState=PENDING") &&
        !strstr(out, "JobState=COMPLETING") && strstr(out, "ExitCode=")) {
      sscanf(strstr(out, "ExitCode=") + 9, "%31s", code);
      return code;
    }
    usleep(200000);
  }
  return code;
}

/* The pid of task job-index of the launch of Slurm job id (its rendezvous
 * under dir/.graphrun), or 0. */
static long task_pid(long id, const char *task) {
  char base[PATH_MAX + 16], prefix[64];
  snprintf(base, sizeof base, "%s/.graphrun", dir);
  snprintf(prefix, sizeof prefix, "launch-%ld-", id);
  DIR *d = opendir(base);
  struct dirent *e;
  long pid = 0;
  while (d && !pid && (e = readdir(d))) {
    if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
    char path[2 * PATH_MAX];
    snprintf(path, sizeof path, "%s/%s/%s.task", base, e->d_name, task);
    const char *at = strstr(read_text(path), "\npid ");
    if (at) pid = atol(at + 5);
  }
  if (d) closedir(d);
  return pid;
}

/* "ps:0=localhost:23013 worker:0=..." of a launch's ready line: its ports. */
static int ready_ports(const char *log, int *ports, int cap) {
  int n = 0;
  for (const char *at = strstr(log, "tasks ready"); at; at = strstr(at + 1, "tasks ready")) {
    const char *eol = strchr(at, '\n');
    for (const char *p = strstr(at, "=localhost:"); p && (!eol || p < eol) && n < cap;
         p = strstr(p + 1, "=localhost:"))
      ports[n++] = atoi(p + 11);
  }
  return n;
}

static void check_training(const char *name, const char *log) {
  GR_CHECK_MSG(strstr(log, "\ny = 238.0\n"), "job %s: no 238:\n%s", name, log);
  GR_CHECK_MSG(strstr(log, "300 steps in ") && strstr(log, "\naccuracy = "),
               "job %s: no training:\n%s", name, log);
  GR_CHECK_MSG(strstr(log, "saved a checkpoint after step 250"), "job %s: no checkpoints", name);
}

static void test_train_sbatch(void) {
  char sbatch[PATH_MAX + 64], a_log[PATH_MAX + 16], b_log[PATH_MAX + 16], c_log[PATH_MAX + 16],
      a_env[3 * PATH_MAX], b_env[3 * PATH_MAX + 32], c_env[3 * PATH_MAX], servers[PATH_MAX + 64];
  snprintf(sbatch, sizeof sbatch, "%s/slurm/train.sbatch", examples);
  snprintf(servers, sizeof servers, "%s/slurm/servers.sbatch", examples);
  snprintf(a_log, sizeof a_log, "%s/a.log", dir);
  snprintf(b_log, sizeof b_log, "%s/b.log", dir);
  snprintf(c_log, sizeof c_log, "%s/c.log", dir);
  snprintf(a_env, sizeof a_env, "ALL,GRAPHRUN=%s,EXAMPLES=%s,CKPT=%s/a_ckpt", gt_graphrun_exe(),
           examples, dir);
  snprintf(b_env, sizeof b_env, "ALL,GRAPHRUN=%s,EXAMPLES=%s,CKPT=%s/b_ckpt,SLURM_RESV_PORTS=0",
           gt_graphrun_exe(), examples, dir);
  snprintf(c_env, sizeof c_env, "ALL,GRAPHRUN=%s,EXAMPLES=%s", gt_graphrun_exe(), examples);
  double t0 = gt_now();
  long a = submit((char *[]){"-o", a_log, "--export", a_env, sbatch, NULL});
  long b = submit((char *[]){"-o", b_log, "--export", b_env, sbatch, NULL});
  long c = submit((char *[]){"-n", "4", "-o", c_log, "--export", c_env, servers, NULL});
  GR_CHECK(a && b && c);
  if (!a || !b || !c) return;
  /* job B: a worker killed once the checkpoint of step 100 is saved */
  long victim = 0;
  for (double end = gt_now() + JOB_SECONDS; gt_now() < end && !victim; usleep(20000))
    if (strstr(read_text(b_log), "saved a checkpoint after step 100 ")) {
      victim = task_pid(b, "worker-1");
      if (victim) kill((pid_t)victim, SIGKILL);
    }
  GR_CHECK_MSG(victim > 0,
               "job %ld: no checkpoint of step 100, or no worker-1 in its rendezvous:\n%s", b,
               read_text(b_log));
  const char *codes[3];
  long ids[3] = {a, b, c};
  char saved[3][32];
  for (int k = 0; k < 3; k++) {
    codes[k] = wait_job(ids[k], JOB_SECONDS);
    snprintf(saved[k], sizeof saved[k], "%s", codes[k]);
  }
  double took = gt_now() - t0;
  char *la = strdup(read_text(a_log)), *lb = strdup(read_text(b_log)),
       *lc = strdup(read_text(c_log));
  GR_CHECK_MSG(!strcmp(saved[0], "0:0"), "job A ended with %s:\n%s", saved[0], la);
  GR_CHECK_MSG(!strcmp(saved[1], "0:0"), "job B ended with %s:\n%s", saved[1], lb);
  GR_CHECK_MSG(!strcmp(saved[2], "0:0"), "job C ended with %s:\n%s", saved[2], lc);
  check_training("A", la);
  check_training("B", lb);
  /* the kill, the restart in place and the recovery */
  GR_CHECK_MSG(strstr(lb, "was killed by signal 9; restarting it on port") &&
                   strstr(lb, "recovered in ") && strstr(lb, "resuming after step 100"),
               "job B did not recover:\n%s", lb);
  /* bit for bit like the uninterrupted run */
  char ca[PATH_MAX + 16], cb[PATH_MAX + 16], out[8192];
  snprintf(ca, sizeof ca, "%s/a_ckpt", dir);
  snprintf(cb, sizeof cb, "%s/b_ckpt", dir);
  int rc =
      run(out, sizeof out, 60, (char *[]){"graphrun", "ckpt", "diff", ca, "--other", cb, NULL});
  GR_CHECK_MSG(rc == 0 && strstr(out, " 0 differ"), "the checkpoints differ (%d):\n%s", rc, out);
  double la_loss[2], lb_loss[2];
  GR_CHECK(gt_output_values(la, "loss", la_loss, 2) == 1 &&
           gt_output_values(lb, "loss", lb_loss, 2) == 1 && la_loss[0] == lb_loss[0]);
  /* each job on its own servers: A's on Slurm's reserved ports, B's elsewhere */
  int pa[16], pb[16];
  int na = ready_ports(la, pa, 16), nb = ready_ports(lb, pb, 16);
  GR_CHECK_EQ_INT(na, 6);
  GR_CHECK_EQ_INT(nb, 6);
  for (int i = 0; i < na; i++) {
    GR_CHECK_MSG(pa[i] >= resv_base && pa[i] < resv_base + 100, "job A's port %d is not reserved",
                 pa[i]);
    for (int j = 0; j < nb; j++) GR_CHECK_MSG(pa[i] != pb[j], "both jobs used port %d", pa[i]);
  }
  for (int j = 0; j < nb; j++)
    GR_CHECK_MSG(pb[j] < resv_base || pb[j] >= resv_base + 100, "job B's port %d is reserved",
                 pb[j]);
  char id_a[80] = "", id_b[80] = "";
  const char *at = strstr(la, "(cluster slurm-"), *bt = strstr(lb, "(cluster slurm-");
  if (at) sscanf(at + 9, "%79[^)]", id_a);
  if (bt) sscanf(bt + 9, "%79[^)]", id_b);
  GR_CHECK_MSG(id_a[0] && id_b[0] && strcmp(id_a, id_b) != 0, "cluster ids '%s' and '%s'", id_a,
               id_b);
  /* job C: srun -n3 in an sbatch -n4 job, the client in the script */
  GR_CHECK_MSG(strstr(lc, "\ny = 238.0\n") && strstr(lc, "(the rendezvous "), "job C:\n%s", lc);
  int stops = 0;
  for (const char *s = strstr(lc, "(--exit-with-client)"); s;
       s = strstr(s + 1, "(--exit-with-client)"))
    stops++;
  GR_CHECK_MSG(stops == 3, "job C: %d of 3 servers ended with their client:\n%s", stops, lc);
  printf("3 Slurm jobs at once in %.1f s (job B recovered from a kill)\n", took);
  free(la), free(lb), free(lc);
}

/* launch --slurm hands its --tls-* files to the servers of the step: a
 * certificate that does not exist stops them with their error naming it. */
static void test_launch_tls(void) {
  gt_certs k;
  if (!gt_certs_make(&k)) {
    GR_CHECK_MSG(false, "openssl could not make the test's certificates");
    return;
  }
  char log[PATH_MAX + 16], wrap[4 * PATH_MAX];
  snprintf(log, sizeof log, "%s/tls.log", dir);
  snprintf(wrap, sizeof wrap,
           "%s launch --slurm --ps 0 --workers 1 --restarts 0 --tls-cert /nonexistent/node.crt "
           "--tls-key %s --tls-ca %s -- true",
           gt_graphrun_exe(), k.key, k.ca);
  long id = submit((char *[]){"-n", "1", "-o", log, "--wrap", wrap, NULL});
  GR_CHECK(id != 0);
  if (id) {
    const char *code = wait_job(id, JOB_SECONDS);
    const char *text = read_text(log);
    GR_CHECK_MSG(code[0] && strcmp(code, "0:0") != 0, "job %ld ended with '%s':\n%s", id, code,
                 text);
    GR_CHECK_MSG(strstr(text, "TLS certificate file /nonexistent/node.crt") != NULL,
                 "job %ld: no server error naming the certificate:\n%s", id, text);
  }
  gt_certs_remove(&k);
}

int main(void) {
  gt_proc_isolate();
  for (int i = 0; tools[i]; i++)
    if (access(tools[i], X_OK) != 0) {
      printf("SKIP: %s is missing (make test-slurm installs Debian's slurm-wlm and munge)\n",
             tools[i]);
      return 77;
    }
  if (geteuid() != 0) {
    printf("SKIP: starting slurmctld, slurmd and munged needs root\n");
    return 77;
  }
  srand((unsigned)getpid());
  snprintf(dir, sizeof dir, "/tmp/gr_slurm_%d", (int)getpid());
  gt_remove_tree(dir);
  if (mkdir(dir, 0755) != 0 || chdir(dir) != 0) { /* sbatch's submit directory */
    fprintf(stderr, "cannot make %s: %s\n", dir, strerror(errno));
    return 1;
  }
  snprintf(conf, sizeof conf, "%s/slurm.conf", dir);
  snprintf(examples, sizeof examples, "%s/examples", GR_SOURCE_DIR);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  double t0 = gt_now();
  bool up = start_slurm();
  GR_CHECK_MSG(up, "slurm did not start");
  if (up) GR_RUN(test_train_sbatch);
  if (up) GR_RUN(test_launch_tls);
  stop_slurm();
  if (chdir("/") == 0) gt_remove_tree(dir);
  printf("slurm test: %.1f s\n", gt_now() - t0);
  return gr_test_finish();
}

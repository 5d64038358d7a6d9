/* graphrun servers started by an MPI launcher (make test-mpi; in the
 * suite): Debian's Open MPI `mpirun -n 3 graphrun server --cluster
 * mpi:ps:1,worker` with a rendezvous directory, and a client started
 * beside it: 238 from cluster_basics.gr, then 100 Fashion-MNIST steps whose
 * loss equals a one-process run's, bit for bit; the servers end with their
 * client, and so does mpirun (exit 0). The ranks of MPICH (PMI_RANK,
 * PMI_SIZE, MPI_LOCALRANKID) are read as well: three servers given those
 * variables by hand make the same cluster. Without mpirun it says why and
 * exits 77 (skipped). Every process is reaped, also after a failed check. */
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

#define MPIRUN "/usr/bin/mpirun"

static char dir[PATH_MAX], basics[PATH_MAX], fashion[PATH_MAX];

/* A fresh rendezvous directory (0700) named name in dir. */
static void rendezvous(const char *name, char *out, size_t cap) {
  snprintf(out, cap, "%s/%s", dir, name);
  mkdir(out, 0700);
}

/* Kills what the rendezvous's entries name (servers left by a failed check). */
static void kill_entries(const char *rdv) {
  DIR *d = opendir(rdv);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char path[2 * PATH_MAX], line[256];
    if (!strstr(e->d_name, ".task")) continue;
    snprintf(path, sizeof path, "%s/%s", rdv, e->d_name);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
      if (!strncmp(line, "pid ", 4) && atol(line + 4) > 1) kill((pid_t)atol(line + 4), SIGKILL);
    if (f) fclose(f);
  }
  if (d) closedir(d);
}

/* graphrun run ARGS... on the rendezvous's cluster, to its end. */
static int client(gt_proc *p, const char *rdv, const char *file, const char *steps) {
  char *argv[16] = {"graphrun",        "run",          (char *)file, "--cluster",
                    "mpi:ps:1,worker", "--rendezvous", (char *)rdv,  "--quiet"};
  int n = 8;
  if (steps) argv[n++] = "--steps", argv[n++] = (char *)steps;
  argv[n] = NULL;
  gt_proc_start(p, argv);
  bool ended = gt_proc_wait(p, NULL, 300);
  gt_proc_finish(p);
  return ended ? gt_proc_exit_code(p) : -1;
}

/* mpirun -n 3 graphrun server --cluster mpi:ps:1,worker, a client of file,
 * and the servers' end; the client's output in out. */
static bool under_mpirun(const char *name, const char *file, const char *steps, char *out,
                         size_t cap) {
  char rdv[PATH_MAX + 32];
  rendezvous(name, rdv, sizeof rdv);
  gt_proc mpi, cl;
  gt_proc_start(&mpi,
                (char *[]){MPIRUN, "--allow-run-as-root", "--oversubscribe", "-n", "3",
                           (char *)gt_graphrun_exe(), "server", "--cluster", "mpi:ps:1,worker",
                           "--rendezvous", rdv, "--exit-with-client=1", "--quiet", NULL});
  int rc = client(&cl, rdv, file, steps);
  snprintf(out, cap, "\n%s", cl.buf); /* "\nNAME = " finds the first line too */
  GR_CHECK_MSG(rc == 0, "the client exited %d:\n%s", rc, cl.buf);
  bool ended = gt_proc_wait(&mpi, NULL, 60); /* the servers end 1 s after their client */
  if (!ended) kill_entries(rdv);
  gt_proc_finish(&mpi);
  GR_CHECK_MSG(ended && gt_proc_exit_code(&mpi) == 0, "mpirun %s (exit %d):\n%s",
               ended ? "failed" : "did not end with the client", gt_proc_exit_code(&mpi), mpi.buf);
  int stops = 0;
  for (const char *s = strstr(mpi.buf, "(--exit-with-client)"); s;
       s = strstr(s + 1, "(--exit-with-client)"))
    stops++;
  GR_CHECK_MSG(stops == 3, "%d of 3 ranks ended with their client:\n%s", stops, mpi.buf);
  GR_CHECK_MSG(strstr(mpi.buf, "/job:ps/replica:0/task:0 listening on 0.0.0.0:") &&
                   strstr(mpi.buf, "/job:worker/replica:0/task:1 listening on"),
               "the ranks' tasks:\n%s", mpi.buf);
  return rc == 0;
}

static void test_openmpi_basics(void) {
  char out[65536];
  if (under_mpirun("basics", basics, NULL, out, sizeof out))
    GR_CHECK_MSG(strstr(out, "y = 238.0\n"), "no 238:\n%s", out);
}

static void test_openmpi_training(void) {
  char out[65536];
  if (!under_mpirun("train", fashion, "100", out, sizeof out)) return;
  gt_proc one;
  gt_proc_start(&one, (char *[]){"graphrun", "run", fashion, "--soft-placement", "--steps", "100",
                                 "--quiet", NULL});
  bool ended = gt_proc_wait(&one, NULL, 300);
  gt_proc_finish(&one);
  double a[2], b[2];
  GR_CHECK_MSG(ended && gt_output_values(out, "loss", a, 2) == 1 &&
                   gt_output_values(one.buf, "loss", b, 2) == 1 && a[0] == b[0],
               "the loss under mpirun:\n%s\none process:\n%s", out, one.buf);
}

/* MPICH's (Hydra's) variables, given by hand: the same cluster. */
static void test_mpich_variables(void) {
  char rdv[PATH_MAX + 32], out[65536];
  rendezvous("mpich", rdv, sizeof rdv);
  gt_proc srv[3], cl;
  for (int r = 0; r < 3; r++) {
    char rank[32], size[32], local[32];
    snprintf(rank, sizeof rank, "PMI_RANK=%d", r);
    snprintf(size, sizeof size, "PMI_SIZE=3");
    snprintf(local, sizeof local, "MPI_LOCALRANKID=%d", r);
    gt_proc_start(&srv[r],
                  (char *[]){"/usr/bin/env", rank, size, local, "MPI_LOCALNRANKS=3",
                             (char *)gt_graphrun_exe(), "server", "--cluster", "mpi:ps:1,worker",
                             "--rendezvous", rdv, "--exit-with-client=1", "--quiet", NULL});
  }
  int rc = client(&cl, rdv, basics, NULL);
  snprintf(out, sizeof out, "%s", cl.buf);
  GR_CHECK_MSG(rc == 0 && strstr(out, "y = 238.0\n"), "exit %d:\n%s", rc, out);
  for (int r = 0; r < 3; r++) {
    bool ended = gt_proc_wait(&srv[r], NULL, 30);
    gt_proc_finish(&srv[r]);
    GR_CHECK_MSG(ended && gt_proc_exit_code(&srv[r]) == 0, "rank %d:\n%s", r, srv[r].buf);
  }
  kill_entries(rdv);
  /* no rank, no size, no rendezvous: each said */
  char msg[4096];
  GR_CHECK(gt_cli_expect(dir, "server --cluster mpi:ps:1,worker --rendezvous r", 2,
                         "mpi: no rank: none of OMPI_COMM_WORLD_RANK (Open MPI), PMI_RANK", msg,
                         sizeof msg));
  setenv("PMIX_RANK", "0", 1);
  GR_CHECK(gt_cli_expect(dir, "server --cluster mpi --rendezvous r", 2,
                         "mpi: PMIX_RANK is set, but no number of ranks (OMPI_COMM_WORLD_SIZE or "
                         "PMI_SIZE)",
                         msg, sizeof msg));
  unsetenv("PMIX_RANK");
  GR_CHECK(gt_cli_expect(dir, "run x.gr --cluster mpi:ps:1,worker", 2,
                         "mpi: where do the servers and the clients meet? give --rendezvous DIR",
                         msg, sizeof msg));
}

int main(void) {
  gt_proc_isolate();
  if (access(MPIRUN, X_OK) != 0) {
    printf("SKIP: %s is missing (make test-mpi installs Debian's openmpi-bin)\n", MPIRUN);
    return 77;
  }
  snprintf(dir, sizeof dir, "/tmp/gr_mpi_%d", (int)getpid());
  gt_remove_tree(dir);
  mkdir(dir, 0700);
  snprintf(basics, sizeof basics, "%s/examples/cluster_basics.gr", GR_SOURCE_DIR);
  snprintf(fashion, sizeof fashion, "%s/examples/fashion_mlp_cluster.gr", GR_SOURCE_DIR);
  double t0 = gt_now();
  GR_RUN(test_openmpi_basics);
  GR_RUN(test_openmpi_training);
  GR_RUN(test_mpich_variables);
  gt_remove_tree(dir);
  printf("mpi test: %.1f s\n", gt_now() - t0);
  return gr_test_finish();
}

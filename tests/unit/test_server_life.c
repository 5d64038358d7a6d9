/* A server's life without a launcher around it (frontend/cli/cmd_server.c,
 * cli_supervise.c): --restarts restarts a killed task in place, on the
 * port it listened on, and SIGTERM stops it cleanly (exit 0) with its
 * supervisor; --exit-with-client stops it once its client's run is over,
 * not before (a connection that only probes the port counts for nothing,
 * and is not logged); a rendezvous that others may write is refused, and
 * one where no task says where it listens is given up on, bounded. */
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

static char dir[PATH_MAX], secret[PATH_MAX + 16], basics[PATH_MAX];

/* The port of the last "listening on 127.0.0.1:PORT" line after offset from. */
static int port_after(const gt_proc *p, size_t from) {
  int port = 0;
  for (const char *at = strstr(p->buf + from, "listening on 127.0.0.1:"); at;
       at = strstr(at + 1, "listening on 127.0.0.1:"))
    port = atoi(at + strlen("listening on 127.0.0.1:"));
  return port;
}

/* The one child of pid (the serving process of a supervisor), or 0. */
static pid_t child_of(pid_t pid) {
  char path[64], buf[256] = "";
  snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
  FILE *f = fopen(path, "r");
  if (f) {
    if (!fgets(buf, sizeof buf, f)) buf[0] = '\0';
    fclose(f);
  }
  return (pid_t)atoi(buf);
}

static void test_restarts_in_place(void) {
  gt_proc srv;
  gt_proc_start(&srv, (char *[]){"graphrun", "server", "--job", "worker", "--secret-file", secret,
                                 "--cluster-id", "life", "--restarts", "2", NULL});
  GR_CHECK(gt_proc_wait_line(&srv, "listening on 127.0.0.1:", 30));
  int port = port_after(&srv, 0);
  pid_t serving = child_of(srv.pid);
  GR_CHECK_MSG(port > 0 && serving > 0, "port %d, serving pid %d:\n%s", port, (int)serving,
               srv.buf);
  if (serving > 0) {
    size_t mark = srv.len;
    kill(serving, SIGKILL);
    char want[160];
    snprintf(want, sizeof want,
             "(pid %d) was killed by signal 9; restarting it on port %d in 0.1 s "
             "(1 of 2)",
             (int)serving, port);
    GR_CHECK_MSG(gt_proc_wait_line(&srv, want, 30), "no restart:\n%s", srv.buf);
    for (double end = gt_now() + 30; gt_now() < end && port_after(&srv, mark) != port;)
      gt_proc_wait(&srv, "\x01", 0.05); /* reads what it printed */
    GR_CHECK_MSG(port_after(&srv, mark) == port, "not on port %d again:\n%s", port, srv.buf + mark);
    GR_CHECK(child_of(srv.pid) != serving);
  }
  kill(srv.pid, SIGTERM); /* the supervisor passes it on: a clean stop */
  bool ended = gt_proc_wait(&srv, NULL, 30);
  gt_proc_finish(&srv);
  GR_CHECK_MSG(ended && gt_proc_exit_code(&srv) == 0, "exit %d:\n%s", gt_proc_exit_code(&srv),
               srv.buf);
  GR_CHECK_STR_CONTAINS(srv.buf, "stopping (signal 15)");
}

static void test_exit_with_client(void) {
  gt_proc srv;
  gt_proc_start(&srv, (char *[]){"graphrun", "server", "--job", "worker", "--secret-file", secret,
                                 "--cluster-id", "life", "--exit-with-client=0.5", NULL});
  GR_CHECK(gt_proc_wait_line(&srv, "listening on 127.0.0.1:", 30));
  int port = port_after(&srv, 0);
  /* a port probe (a readiness check): no client, and no line in the log */
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  GR_CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
  if (fd >= 0) close(fd);
  GR_CHECK_MSG(!gt_proc_wait(&srv, NULL, 1.5), "it ended without a client:\n%s", srv.buf);
  GR_CHECK_MSG(!strstr(srv.buf, "ended"), "the probe was logged:\n%s", srv.buf);
  char spec[128];
  snprintf(spec, sizeof spec, "{\"worker\": [\"127.0.0.1:%d\"]}", port);
  gt_proc cl;
  gt_proc_start(&cl, (char *[]){"graphrun", "run", basics, "--cluster", spec, "--secret-file",
                                secret, "--cluster-id", "life", "--soft-placement", NULL});
  bool ran = gt_proc_wait(&cl, NULL, 60);
  gt_proc_finish(&cl);
  GR_CHECK_MSG(ran && gt_proc_exit_code(&cl) == 0 && strstr(cl.buf, "y = 238.0"), "the client:\n%s",
               cl.buf);
  bool ended = gt_proc_wait(&srv, NULL, 30); /* half a second after its client */
  gt_proc_finish(&srv);
  GR_CHECK_MSG(ended && gt_proc_exit_code(&srv) == 0, "exit %d:\n%s", gt_proc_exit_code(&srv),
               srv.buf);
  GR_CHECK_STR_CONTAINS(srv.buf, "stopping: no client for ");
}

static void test_rendezvous_private(void) {
  char rdv[PATH_MAX + 16], out[4096], args[2 * PATH_MAX];
  snprintf(rdv, sizeof rdv, "%s/open", dir);
  mkdir(rdv, 0777);
  chmod(rdv, 0777);
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
  snprintf(args, sizeof args, "server --cluster mpi --rendezvous %s", rdv);
  GR_CHECK(gt_cli_expect(dir, args, 2,
                         "has mode 0777: other users could change the addresses and "
                         "read the secret in it; run chmod 700",
                         out, sizeof out));
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
}

/* A client that finds no task at the rendezvous says so, bounded, and names
 * what it could not read there. */
static void test_rendezvous_empty(void) {
  char rdv[PATH_MAX + 16], out[8192], args[2 * PATH_MAX];
  snprintf(rdv, sizeof rdv, "%s/empty", dir);
  mkdir(rdv, 0700);
  gt_write_file(rdv, "junk.task", "not an entry\n");
  snprintf(args, sizeof args, "run %s --cluster mpi --rendezvous %s --connect-timeout 0.5", basics,
           rdv);
  GR_CHECK(gt_cli_expect(dir, args, 2,
                         "no task has said where it listens: are the servers running, "
                         "with the same rendezvous?; junk.task: line 1: not a graphrun "
                         "rendezvous entry (not read)",
                         out, sizeof out));
  GR_CHECK_STR_CONTAINS(out, "after 0.5 s no task");
}

int main(void) {
  gt_proc_isolate();
  snprintf(dir, sizeof dir, "/tmp/gr_life_%d", (int)getpid());
  gt_remove_tree(dir);
  mkdir(dir, 0700);
  gt_write_file(dir, "secret", "0123456789abcdef0123456789abcdef\n");
  snprintf(secret, sizeof secret, "%s/secret", dir);
  chmod(secret, 0600);
  snprintf(basics, sizeof basics, "%s/examples/cluster_basics.gr", GR_SOURCE_DIR);
  GR_RUN(test_restarts_in_place);
  GR_RUN(test_exit_with_client);
  GR_RUN(test_rendezvous_private);
  GR_RUN(test_rendezvous_empty);
  gt_remove_tree(dir);
  return gr_test_finish();
}

/* Authenticated by default, and cluster identity, as graphrun processes
 * (docs/security.md, docs/distributed.md#security): a server refuses to
 * start without a secret unless --insecure (and --insecure only on
 * loopback), a secret shorter than 16 bytes or a secret file other users
 * can read; a client needs the secret too; a client of another cluster is
 * refused, naming both cluster ids and the server's address, whether the
 * ids come from --cluster-id, GRAPHRUN_CLUSTER_ID or the cluster spec; and
 * two `graphrun launch` jobs on the same ports: the second cannot start
 * its servers, and a client of the second sent to the first's servers is
 * refused (the first's servers log no session). The handshake's other
 * direction (a server refusing a client of another cluster) and tampered
 * ids: test_dist_bad_input and test_handshake. Every process is reaped. */
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

static char dir[] = "/tmp/gr_dist_auth_XXXXXX";
static char basics[PATH_MAX];

/* dir/name holding text, with mode. */
static const char *file_of(const char *name, const char *text, mode_t mode) {
  static char paths[8][PATH_MAX];
  static int next;
  char *p = paths[next++ % 8];
  gt_write_file(dir, name, text);
  snprintf(p, PATH_MAX, "%s/%s", dir, name);
  chmod(p, mode);
  return p;
}

/* Runs argv to its end (at most 60 s): its exit code; p keeps the output. */
static int run(gt_proc *p, char *const *argv) {
  gt_proc_start(p, argv);
  GR_CHECK_MSG(gt_proc_wait(p, NULL, 60), "no end: %s", p->buf);
  gt_proc_finish(p);
  return gt_proc_exit_code(p);
}

/* Starts a server (argv) and waits until it listens on 127.0.0.1: its
 * port, or 0 (the process is still to be finished). */
static int start_server(gt_proc *p, char *const *argv) {
  gt_proc_start(p, argv);
  const char *want = "listening on 127.0.0.1:";
  GR_CHECK_MSG(gt_proc_wait_line(p, want, 30), "did not start: %s", p->buf);
  const char *at = strstr(p->buf, want);
  return at ? atoi(at + strlen(want)) : 0;
}

/* Stops a server with SIGTERM: it exits 0. */
static void stop_server(gt_proc *p) {
  kill(p->pid, SIGTERM);
  GR_CHECK(gt_proc_wait(p, NULL, 15));
  gt_proc_finish(p);
  GR_CHECK_EQ_INT(gt_proc_exit_code(p), 0);
}

static int count(const char *s, const char *sub) {
  int n = 0;
  for (const char *at = s; (at = strstr(at, sub)); at += strlen(sub)) n++;
  return n;
}

/* A server does not start without a secret, unless --insecure, which
 * works on loopback only and says at every start what it means; a secret
 * must be 16 bytes or more, in a file only its owner can read (else
 * --insecure); and it must know its cluster. Exit code 2, a message
 * naming the fix. */
static void test_server_needs_a_secret(void) {
  gt_proc p;
  GR_CHECK_EQ_INT(run(&p, (char *[]){"graphrun", "server", "--job", "worker", NULL}), 2);
  GR_CHECK_STR_CONTAINS(p.buf, "graphrun server: no secret: a cluster's servers and clients share "
                               "a secret file (--secret-file FILE, or GRAPHRUN_SECRET_FILE");
  GR_CHECK_STR_CONTAINS(p.buf, "chmod 600 FILE); --insecure goes without, on loopback only");
  GR_CHECK(!strstr(p.buf, "listening"));
  const char *binds[] = {"0.0.0.0:0", "[::]:0"};
  for (int i = 0; i < 2; i++) {
    GR_CHECK_EQ_INT(run(&p, (char *[]){"graphrun", "server", "--job", "worker", "--insecure",
                                       "--cluster-id", "x", "--bind", (char *)binds[i], NULL}),
                    2);
    char want[128];
    snprintf(want, sizeof want,
             "graphrun server: server: refusing to listen on %s insecure: an "
             "insecure server listens on loopback only",
             binds[i]);
    GR_CHECK_STR_CONTAINS(p.buf, want);
  }
  const char *shrt = file_of("short.secret", "fifteen bytes!!\n", 0600);
  GR_CHECK_EQ_INT(run(&p, (char *[]){"graphrun", "server", "--job", "worker", "--cluster-id", "x",
                                     "--secret-file", (char *)shrt, NULL}),
                  2);
  char want[PATH_MAX + 128];
  snprintf(want, sizeof want, "secret file %s: too short; want 16 to 256 bytes", shrt);
  GR_CHECK_STR_CONTAINS(p.buf, want);
  const char *open_to_group = file_of("group.secret", "a-secret-the-group-can-read\n", 0640);
  char *with_group[] = {"graphrun",
                        "server",
                        "--job",
                        "worker",
                        "--cluster-id",
                        "x",
                        "--quiet",
                        "--secret-file",
                        (char *)open_to_group,
                        NULL,
                        NULL};
  GR_CHECK_EQ_INT(run(&p, with_group), 2);
  snprintf(want, sizeof want,
           "graphrun server: secret file %s has mode 0640: other users can read or change it; run "
           "chmod 600 %s (or give --insecure to use it anyway)",
           open_to_group, open_to_group);
  GR_CHECK_STR_CONTAINS(p.buf, want);
  with_group[9] = "--insecure"; /* used anyway, with a warning; it still authenticates */
  GR_CHECK(start_server(&p, with_group) > 0);
  GR_CHECK_STR_CONTAINS(p.buf, "has mode 0640: other users can read it");
  GR_CHECK_STR_CONTAINS(p.buf, "(incarnation ");
  GR_CHECK_STR_CONTAINS(p.buf, ", cluster x, authenticated)");
  stop_server(&p);
  /* --insecure without a secret: a warning line at every start */
  for (int start = 0; start < 2; start++) {
    GR_CHECK(start_server(&p, (char *[]){"graphrun", "server", "--job", "worker", "--insecure",
                                         "--cluster-id", "x", "--quiet", NULL}) > 0);
    GR_CHECK_STR_CONTAINS(p.buf, "/job:worker/replica:0/task:0: warning: insecure: no secret, no "
                                 "authentication: any local user can connect, run any graph");
    GR_CHECK_STR_CONTAINS(p.buf, ", cluster x, INSECURE: no authentication)");
    stop_server(&p);
  }
  /* no cluster: which one? */
  const char *good = file_of("good.secret", "0123456789abcdef0123456789abcdef\n", 0600);
  GR_CHECK_EQ_INT(run(&p, (char *[]){"graphrun", "server", "--job", "worker", "--secret-file",
                                     (char *)good, NULL}),
                  2);
  GR_CHECK_STR_CONTAINS(p.buf, "graphrun server: which cluster? give --cluster SPEC (the cluster "
                               "id is derived from its tasks) or --cluster-id ID");
  GR_CHECK_EQ_INT(run(&p, (char *[]){"graphrun", "server", "--job", "worker", "--secret-file",
                                     (char *)good, "--cluster-id", "a b", NULL}),
                  2);
  GR_CHECK_STR_CONTAINS(p.buf, "--cluster-id wants a cluster id: 1 to 64 letters, digits");
}

/* `graphrun run cluster_basics.gr` of cluster c1 on the cluster spec, with
 * flag (and value, may be NULL). */
static char *const *client(const char *spec, const char *flag, const char *value) {
  static char *argv[16];
  char *head[] = {"graphrun",   "run",          basics,       "--cluster",
                  (char *)spec, "--cluster-id", "c1",         "--soft-placement",
                  "--timeout",  "10",           (char *)flag, (char *)value,
                  NULL};
  memcpy(argv, head, sizeof head);
  return argv;
}

/* A server /job:worker/task:0 of cluster id with the secret file on a free
 * port: its port, and a ClusterSpec of it into spec. */
static int start_worker(gt_proc *srv, const char *id, const char *secret, char spec[128]) {
  int port = start_server(srv, (char *[]){"graphrun", "server", "--job", "worker", "--cluster-id",
                                          (char *)id, "--secret-file", (char *)secret, NULL});
  snprintf(spec, 128, "{\"worker\": [\"127.0.0.1:%d\"]}", port);
  return port;
}

/* A client needs the secret too: another one is refused by the server,
 * none by the client itself (or, with --insecure, by the server); a
 * secret file others can read is refused as the server's is. */
static void test_client_needs_the_secret(void) {
  const char *a = file_of("a.secret", "alpha-alpha-alpha-alpha\n", 0600);
  const char *b = file_of("b.secret", "beta-beta-beta-beta-beta\n", 0600);
  const char *shared = file_of("shared.secret", "alpha-alpha-alpha-alpha\n", 0644);
  gt_proc srv, cl;
  char spec[128], addr[64];
  int port = start_worker(&srv, "c1", a, spec);
  snprintf(addr, sizeof addr, "127.0.0.1:%d refused this process's secret", port);
  GR_CHECK_EQ_INT(run(&cl, client(spec, "--secret-file", b)), 1);
  GR_CHECK_STR_CONTAINS(cl.buf, addr); /* names the server */
  GR_CHECK_EQ_INT(run(&cl, client(spec, "--quiet", NULL)), 2);
  GR_CHECK_STR_CONTAINS(cl.buf, "graphrun run: no secret: a cluster's servers and clients share");
  GR_CHECK_EQ_INT(run(&cl, client(spec, "--insecure", NULL)), 1);
  GR_CHECK_STR_CONTAINS(cl.buf, "requires a secret");
  GR_CHECK_EQ_INT(run(&cl, client(spec, "--secret-file", shared)), 2);
  GR_CHECK_STR_CONTAINS(cl.buf, "has mode 0644: other users can read or change it; run chmod 600");
  GR_CHECK_EQ_INT(run(&cl, client(spec, "--secret-file", a)), 0);
  GR_CHECK_MSG(strstr(cl.buf, "y = 238.0") != NULL, "%s", cl.buf);
  stop_server(&srv);
  GR_CHECK_STR_CONTAINS(srv.buf, "wrong secret (authentication failed");
  GR_CHECK_EQ_INT(count(srv.buf, "session from"), 1);
}

/* A client of another cluster is refused before it authenticates, naming
 * the address and both ids, whichever way its id was given; the server
 * sees no session from it. */
static void test_client_of_another_cluster(void) {
  const char *s = file_of("c.secret", "gamma-gamma-gamma-gamma\n", 0600);
  gt_proc srv, cl;
  char spec[128], want[256];
  int port = start_worker(&srv, "job-a", s, spec);
  snprintf(want, sizeof want,
           "graphrun run: /job:worker/task:0: 127.0.0.1:%d belongs to cluster 'job-a', this "
           "client's is 'job-b': another job's server on this port?",
           port);
  char *flag[] = {
      "graphrun", "run",           basics,    "--cluster",        spec,           "--timeout",
      "10",       "--secret-file", (char *)s, "--soft-placement", "--cluster-id", "job-b",
      NULL};
  GR_CHECK_EQ_INT(run(&cl, flag), 1);
  GR_CHECK_STR_CONTAINS(cl.buf, want);
  flag[10] = NULL; /* the id from the environment */
  setenv("GRAPHRUN_CLUSTER_ID", "job-b", 1);
  GR_CHECK_EQ_INT(run(&cl, flag), 1);
  unsetenv("GRAPHRUN_CLUSTER_ID");
  GR_CHECK_STR_CONTAINS(cl.buf, want);
  GR_CHECK_EQ_INT(run(&cl, flag), 1); /* the id derived from the client's spec */
  snprintf(want, sizeof want, "127.0.0.1:%d belongs to cluster 'job-a', this client's is 'spec-",
           port);
  GR_CHECK_STR_CONTAINS(cl.buf, want);
  /* graphrun reset: the same */
  GR_CHECK_EQ_INT(run(&cl, (char *[]){"graphrun", "reset", "--cluster", spec, "--secret-file",
                                      (char *)s, "--cluster-id", "job-b", NULL}),
                  1);
  GR_CHECK_STR_CONTAINS(cl.buf, "belongs to cluster 'job-a', this client's is 'job-b'");
  flag[10] = "--cluster-id", flag[11] = "job-a";
  GR_CHECK_EQ_INT(run(&cl, flag), 0);
  GR_CHECK_MSG(strstr(cl.buf, "y = 238.0") != NULL, "%s", cl.buf);
  stop_server(&srv);
  GR_CHECK_EQ_INT(count(srv.buf, "session from"), 1); /* the last client's */
}

/* Without --cluster-id the id is derived from the cluster spec: servers and
 * clients of one spec (any form of it) agree without a flag; a client of
 * another spec is refused. */
static void test_ids_from_the_spec(void) {
  const char *s = file_of("d.secret", "delta-delta-delta-delta\n", 0600);
  int ports[2];
  GR_CHECK(gt_free_ports(ports, 2));
  char text[256], other[256], tf[512];
  snprintf(text, sizeof text, "{\"worker\": [\"127.0.0.1:%d\"]}", ports[0]);
  snprintf(other, sizeof other, "{\"worker\": [\"127.0.0.1:%d\"], \"ps\": [\"127.0.0.1:%d\"]}",
           ports[0], ports[1]);
  snprintf(tf, sizeof tf, "{\"cluster\": %s, \"task\": {\"type\": \"worker\", \"index\": 0}}",
           text);
  const char *spec = file_of("one.json", text, 0644);
  gt_proc srv, cl;
  GR_CHECK(start_server(&srv, (char *[]){"graphrun", "server", "--cluster", (char *)spec, "--job",
                                         "worker", "--secret-file", (char *)s, NULL}) == ports[0]);
  GR_CHECK_STR_CONTAINS(srv.buf, ", cluster spec-");
  char *client[] = {
      "graphrun",         "run",       basics, "--cluster", text, "--secret-file", (char *)s,
      "--soft-placement", "--timeout", "10",   NULL};
  GR_CHECK_EQ_INT(run(&cl, client), 0);
  GR_CHECK_MSG(strstr(cl.buf, "y = 238.0") != NULL, "%s", cl.buf);
  setenv("TF_CONFIG", tf, 1);
  client[4] = "env"; /* TF_CONFIG of the same cluster */
  GR_CHECK_EQ_INT(run(&cl, client), 0);
  unsetenv("TF_CONFIG");
  client[4] = other; /* one more task: another cluster */
  GR_CHECK_EQ_INT(run(&cl, client), 1);
  char want[128];
  snprintf(want, sizeof want, "127.0.0.1:%d belongs to cluster 'spec-", ports[0]);
  GR_CHECK_STR_CONTAINS(cl.buf, want);
  GR_CHECK_STR_CONTAINS(cl.buf, "', this client's is 'spec-");
  stop_server(&srv);
  GR_CHECK_EQ_INT(count(srv.buf, "session from"), 2);
}

/* Two jobs on one host with the same ports: `graphrun launch --cluster
 * spec.json` twice. The second's servers cannot listen, and it stops; and
 * a client of a second launch sent to those ports (the jobs' script names
 * them) meets the first's servers, which belong to another cluster: it
 * fails, naming the address and both launch ids, and trains nothing there. */
static void test_two_launches_on_the_same_ports(void) {
  int ports[3];
  GR_CHECK(gt_free_ports(ports, 3));
  char text[256];
  snprintf(text, sizeof text,
           "{\"ps\": [\"127.0.0.1:%d\"], \"worker\": [\"127.0.0.1:%d\", \"127.0.0.1:%d\"]}",
           ports[0], ports[1], ports[2]);
  const char *spec = file_of("jobs.json", text, 0644);
  gt_proc first, second;
  gt_proc_start(&first, (char *[]){"graphrun", "launch", "--cluster", (char *)spec, "--",
                                   "/bin/sleep", "60", NULL});
  GR_CHECK_MSG(gt_proc_wait_line(&first, "tasks ready", 30), "%s", first.buf);
  const char *id = strstr(first.buf, "tasks ready (cluster launch-");
  char first_id[64] = "";
  if (id) sscanf(id + strlen("tasks ready (cluster "), "%32[a-z0-9-]", first_id);
  GR_CHECK_EQ_INT((int)strlen(first_id), 23); /* launch- and 16 hex digits */
  /* the same spec: its servers cannot listen */
  GR_CHECK_EQ_INT(
      run(&second, (char *[]){"graphrun", "launch", "--cluster", (char *)spec, basics, NULL}), 1);
  GR_CHECK_STR_CONTAINS(second.buf, "Address already in use");
  GR_CHECK_STR_CONTAINS(second.buf, "exited while starting");
  GR_CHECK(!strstr(second.buf, "y = "));
  /* a second launch whose client is sent to the first's ports */
  GR_CHECK_EQ_INT(
      run(&second, (char *[]){"graphrun", "launch", "--ps", "1", "--workers", "2", "--", "graphrun",
                              "run", basics, "--cluster", (char *)spec, "--timeout", "10", NULL}),
      1);
  char want[256];
  snprintf(want, sizeof want,
           ": 127.0.0.1:%d belongs to cluster '%s', this client's "
           "is 'launch-",
           ports[0], first_id);
  GR_CHECK_STR_CONTAINS(second.buf, want);
  GR_CHECK_STR_CONTAINS(second.buf, "another job's server on this port?");
  GR_CHECK(!strstr(second.buf, "y = "));
  /* the first job's servers saw no client */
  kill(first.pid, SIGINT);
  GR_CHECK(gt_proc_wait(&first, NULL, 15));
  gt_proc_finish(&first);
  GR_CHECK_MSG(!strstr(first.buf, "session from"), "%s", first.buf);
}

int main(void) {
  gt_proc_isolate();
  snprintf(basics, sizeof basics, "%s/examples/cluster_basics.gr", GR_SOURCE_DIR);
  GR_CHECK(mkdtemp(dir) != NULL);
  GR_RUN(test_server_needs_a_secret);
  GR_RUN(test_client_needs_the_secret);
  GR_RUN(test_client_of_another_cluster);
  GR_RUN(test_ids_from_the_spec);
  GR_RUN(test_two_launches_on_the_same_ports);
  gt_remove_tree(dir);
  return gr_test_finish();
}

/* Connections between processes of one host over Unix sockets
 * (distributed/transport_local.c): a listener on a loopback address also
 * listens on the abstract socket named after it, a dialer of that address
 * connects there (the server names the peer "local process PID"), frames
 * of every size arrive intact, and the name is gone with the listener.
 * GRAPHRUN_LOCAL_SOCKETS=0 keeps to TCP. A name another user took first
 * is not used: the dialer reaches the real server over TCP (as root, with
 * a child that drops to nobody). A cluster's graphs over TCP: the
 * test_collective_dist_tcp run of test_collective_dist. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "distributed/transport_internal.h"
#include "gr_test.h"
#include "wire_frames.h"

#define SECRET  "local-test-secret-of-16+"
#define CLUSTER "local-test"
#define WAIT_MS 30000 /* generous: a busy machine */

/* One end: its loop, the frames it got (intact or not), the last peer. */
typedef struct end {
  gr_loop *loop;
  gr_listener *ls;
  int port;
  bool echo;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int got, bad;
  char peer[96], log[4096];
} end;

static void on_message(void *arg, gr_conn *c, gr_inmsg *in) {
  end *e = arg;
  uint64_t seq = 0, n = 0;
  if (in->h.type != GR_MSG_TENSOR) return gr_inmsg_free(in);
  bool ok = gt_frame_intact(in, &seq);
  gr_msg_u64(&in->msg.root, "n", &n, NULL);
  gr_inmsg_free(in);
  pthread_mutex_lock(&e->mu);
  e->got++;
  e->bad += !ok;
  snprintf(e->peer, sizeof e->peer, "%s", gr_conn_peer(c));
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  if (e->echo) gr_conn_send(c, gt_frame(seq, n), NULL);
}

static void on_close(void *arg, gr_conn *c, const gr_error *why) {}

static void on_log(void *arg, const char *line) {
  end *e = arg;
  pthread_mutex_lock(&e->mu);
  size_t at = strlen(e->log);
  snprintf(e->log + at, sizeof e->log - at, "%s\n", line);
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

static bool end_start(end *e, bool server) {
  memset(e, 0, sizeof *e);
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  e->echo = server;
  gr_error err;
  gr_conn_handler h = {on_message, on_close, e, on_log, NULL, NULL};
  gr_conn_auth auth = {SECRET, CLUSTER, NULL};
  bool ok = gr_loop_new(&e->loop, &err) == GR_OK &&
            (!server ||
             gr_listener_new(e->loop, "127.0.0.1", 0, &auth, &h, &e->ls, &e->port, &err) == GR_OK);
  GR_CHECK_MSG(ok, "%s", err.msg);
  return ok;
}

static void end_stop(end *e) {
  if (e->ls) gr_listener_free(e->ls);
  gr_loop_free(e->loop);
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
}

/* Waits (at most WAIT_MS) until e has n frames, or its log says want. */
static bool wait_for(end *e, int n, const char *want) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += WAIT_MS / 1000;
  pthread_mutex_lock(&e->mu);
  bool ok;
  while (!(ok = want ? strstr(e->log, want) != NULL : e->got >= n) &&
         pthread_cond_timedwait(&e->cv, &e->mu, &until) != ETIMEDOUT) {}
  pthread_mutex_unlock(&e->mu);
  return ok;
}

static gr_status dial(end *cl, int port, const char *secret, gr_conn **c, gr_error *err) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  gr_conn_handler h = {on_message, on_close, cl, on_log, NULL, NULL};
  gr_conn_auth auth = {secret, CLUSTER, NULL};
  return gr_conn_dial(cl->loop, addr, &auth, WAIT_MS, &h, c, err);
}

/* The abstract socket named after 127.0.0.1:port is listed by the kernel. */
static bool listed(int port) {
  char want[64], line[512];
  snprintf(want, sizeof want, "@graphrun-tcp:127.0.0.1:%d\n", port);
  FILE *f = fopen("/proc/net/unix", "r");
  bool found = false;
  while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, want) != NULL;
  if (f) fclose(f);
  return found;
}

/* Frames of every size to the server and back over one connection, and
 * who the server says its peer is. */
static void round_trip(const char *want_peer_prefix, bool local) {
  end srv, cl;
  if (!end_start(&srv, true)) return;
  if (!end_start(&cl, false)) return end_stop(&srv);
  GR_CHECK_EQ_INT(listed(srv.port), local);
  gr_conn *c = NULL;
  gr_error err;
  GR_CHECK_OK(dial(&cl, srv.port, SECRET, &c, &err), err);
  static const size_t sizes[] = {0, 100, 70000, (5u << 20) + 3};
  for (int i = 0; c && i < 12; i++) gr_conn_send(c, gt_frame((uint64_t)i, sizes[i % 4]), NULL);
  GR_CHECK_MSG(wait_for(&cl, 12, NULL), "%d of 12 echoes", cl.got);
  GR_CHECK_EQ_INT(srv.bad + cl.bad, 0);
  GR_CHECK_MSG(!strncmp(srv.peer, want_peer_prefix, strlen(want_peer_prefix)),
               "the server's peer is '%s', want '%s...'", srv.peer, want_peer_prefix);
  if (c) gr_conn_close(c), gr_conn_unref(c);
  /* a wrong secret is refused, the log naming the peer as above */
  GR_CHECK(dial(&cl, srv.port, "another-secret-of-16+", &c, &err) != GR_OK);
  char says[96];
  snprintf(says, sizeof says, "refused %s", want_peer_prefix);
  GR_CHECK_MSG(wait_for(&srv, 0, says), "want '%s' in the server's log:\n%s", says, srv.log);
  int port = srv.port;
  end_stop(&cl);
  end_stop(&srv);
  GR_CHECK_MSG(!listed(port), "the name outlived its listener");
}

static void test_local_socket(void) {
  char me[64];
  snprintf(me, sizeof me, "local process %d", (int)getpid());
  round_trip(me, true);
}

static void test_tcp_when_off(void) {
  setenv("GRAPHRUN_LOCAL_SOCKETS", "0", 1);
  round_trip("127.0.0.1:", false);
  unsetenv("GRAPHRUN_LOCAL_SOCKETS");
}

/* Another user holds the name of the server's address (taken before the
 * server listened): the dialer goes past it to the server over TCP. */
static void test_name_of_another_user(void) {
  if (geteuid() != 0) {
    printf("test_name_of_another_user: not root, no other user to take the name\n");
    return;
  }
  setenv("GRAPHRUN_LOCAL_SOCKETS", "0", 1); /* the server on TCP alone */
  end srv, cl;
  bool up = end_start(&srv, true);
  unsetenv("GRAPHRUN_LOCAL_SOCKETS");
  if (!up) return;
  int ready[2];
  GR_CHECK(pipe(ready) == 0);
  pid_t pid = fork();
  if (pid == 0) { /* nobody takes the name and holds it */
    close(ready[0]);
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    int n =
        snprintf(un.sun_path + 1, sizeof un.sun_path - 1, "graphrun-tcp:127.0.0.1:%d", srv.port);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    bool ok = setgid(65534) == 0 && setuid(65534) == 0 && fd >= 0 &&
              bind(fd, (struct sockaddr *)&un,
                   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)) == 0 &&
              listen(fd, 8) == 0;
    char c = ok ? 'y' : 'n';
    if (write(ready[1], &c, 1) != 1) _exit(1);
    sleep(60);
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  GR_CHECK(read(ready[0], &c, 1) == 1 && c == 'y');
  close(ready[0]);
  GR_CHECK(listed(srv.port));
  if (end_start(&cl, false)) {
    gr_conn *conn = NULL;
    gr_error err;
    GR_CHECK_OK(dial(&cl, srv.port, SECRET, &conn, &err), err);
    if (conn) gr_conn_send(conn, gt_frame(1, 1000), NULL);
    GR_CHECK(wait_for(&cl, 1, NULL));
    GR_CHECK_MSG(!strncmp(srv.peer, "127.0.0.1:", 10), "the server's peer is '%s'", srv.peer);
    if (conn) gr_conn_close(conn), gr_conn_unref(conn);
    end_stop(&cl);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  end_stop(&srv);
}

int main(void) {
  GR_RUN(test_local_socket);
  GR_RUN(test_tcp_when_off);
  GR_RUN(test_name_of_another_user);
  return gr_test_finish();
}

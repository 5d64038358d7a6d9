/* Leases (gr_master_lease, distributed/server_lease.c) in one process: a
 * server and masters over loopback TCP. A lease lives while the connection
 * that took it lives, and ends when it closes; another connection sees
 * that, with the holder and how long ago; taking it again from a new
 * connection replaces the holder, and the old connection's close then
 * ends nothing; bad requests are refused naming the field. The processes'
 * view (a chief client that dies): test_dist_chief.c. */
#include <graphrun.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gr_test.h"

#define SECRET "dist-lease-test-secret"

static gr_server *srv;
static char addr[64];

static gr_master *connect_one(void) {
  const char *a = addr;
  gr_master_options mo = {.num_tasks = 1, .addresses = &a, .secret = SECRET, .heartbeat_ms = -1};
  gr_master *m = NULL;
  gr_error err;
  GR_CHECK_OK(gr_master_new(&mo, &m, &err), err);
  return m;
}

/* Looks at the lease through m until its `held` is want (the server sees a
 * closed connection soon, not at once), at most 10 s. */
static bool look_until(gr_master *m, const char *name, bool want, gr_lease_state *ls) {
  gr_error err;
  for (int i = 0; i < 1000; i++) {
    if (gr_master_lease(m, 0, name, NULL, ls, &err) != GR_OK) {
      fprintf(stderr, "look: %s\n", err.msg);
      return false;
    }
    if (ls->held == want) return true;
    struct timespec ts = {0, 10 * 1000000L};
    nanosleep(&ts, NULL);
  }
  return false;
}

static void test_held_while_the_connection_lives(void) {
  gr_master *holder = connect_one(), *watcher = connect_one();
  if (!holder || !watcher) return;
  gr_lease_state ls;
  gr_error err;
  /* never taken: nothing to say yet */
  GR_CHECK_OK(gr_master_lease(watcher, 0, "chief", NULL, &ls, &err), err);
  GR_CHECK(!ls.held && ls.taken == 0 && ls.holder[0] == '\0');
  GR_CHECK_OK(gr_master_lease(holder, 0, "chief", "/job:chief/task:0, pid 1", &ls, &err), err);
  GR_CHECK(ls.held && ls.taken == 1);
  /* taken again through the same connection: the same holding */
  GR_CHECK_OK(gr_master_lease(holder, 0, "chief", "/job:chief/task:0, pid 1", &ls, &err), err);
  GR_CHECK(ls.held && ls.taken == 1);
  GR_CHECK_OK(gr_master_lease(watcher, 0, "chief", NULL, &ls, &err), err);
  GR_CHECK(ls.held && ls.taken == 1);
  GR_CHECK_STR_CONTAINS(ls.holder, "/job:chief/task:0, pid 1");
  /* another name is another lease */
  GR_CHECK_OK(gr_master_lease(watcher, 0, "other", NULL, &ls, &err), err);
  GR_CHECK(!ls.held && ls.taken == 0);
  gr_master_free(holder); /* its connection closes: the lease ends */
  GR_CHECK(look_until(watcher, "chief", false, &ls));
  GR_CHECK(ls.taken == 1 && ls.ended_ms_ago >= 0 && ls.ended_ms_ago < 10000);
  GR_CHECK_STR_CONTAINS(ls.holder, "pid 1"); /* the last holder */
  gr_master_free(watcher);
}

static void test_a_new_holder_replaces_the_old(void) {
  gr_master *a = connect_one(), *b = connect_one();
  if (!a || !b) return;
  gr_lease_state ls;
  gr_error err;
  GR_CHECK_OK(gr_master_lease(a, 0, "swap", "a", &ls, &err), err);
  GR_CHECK_OK(gr_master_lease(b, 0, "swap", "b", &ls, &err), err);
  GR_CHECK(ls.held && ls.taken == 2 && !strcmp(ls.holder, "b"));
  gr_master_free(a); /* the replaced holder's close ends nothing */
  usleep(200 * 1000);
  GR_CHECK_OK(gr_master_lease(b, 0, "swap", NULL, &ls, &err), err);
  GR_CHECK(ls.held && !strcmp(ls.holder, "b"));
  gr_master *c = connect_one();
  gr_master_free(b);
  GR_CHECK(c && look_until(c, "swap", false, &ls) && !strcmp(ls.holder, "b"));
  gr_master_free(c);
}

static void test_bad_arguments(void) {
  gr_master *m = connect_one();
  if (!m) return;
  gr_lease_state ls;
  gr_error err;
  char long_name[200];
  memset(long_name, 'x', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  GR_CHECK(gr_master_lease(m, 0, "", NULL, &ls, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK(gr_master_lease(m, 0, long_name, NULL, &ls, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK(gr_master_lease(m, 1, "chief", NULL, &ls, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "lease: want a task of the master");
  gr_master_free(m);
}

int main(void) {
  gr_server_options o = {.job = "chief", .task = 0, .secret = SECRET, .quiet = true};
  gr_error err;
  GR_CHECK_OK(gr_server_new(&o, &srv, &err), err);
  if (!srv) return gr_test_finish();
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gr_server_port(srv));
  GR_RUN(test_held_while_the_connection_lives);
  GR_RUN(test_a_new_holder_replaces_the_old);
  GR_RUN(test_bad_arguments);
  gr_server_free(srv);
  return gr_test_finish();
}

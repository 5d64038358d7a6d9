/* The master: a client's view of a cluster, and the session's remote runner.
 *
 * It connects to every task at once (master_dial.c), learns its name, devices and incarnation, and
 * serves a session whose devices are the cluster's: for each prepared
 * signature it registers every task's partitions (one REGISTER per task,
 * a handle back), and for each step sends one RUN per task in parallel with
 * a random run id and the feeds that task uses, then collects the fetches.
 * The first error (not a cancellation) aborts the step on every other task
 * and is the one reported; the cancellations it caused are not. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "distributed/gr_distributed.h"
#include "distributed/master_internal.h"

/* ---- requests -------------------------------------------------------------------- */

/* Completes r. The waiter is woken by the last request of its group, or by
 * a failure (which may end the wait at once): a step over many tasks wakes
 * it once, not once per task. */
static void finish(rpc *r, gr_status code, const gr_error *e, gr_inmsg *resp, int64_t failed_at) {
  pthread_mutex_lock(&r->g->mu);
  r->done = true;
  r->code = code;
  r->failed_at = failed_at;
  if (e) r->err = *e;
  r->resp = resp;
  if (--r->g->outstanding == 0 || code != GR_OK) pthread_cond_broadcast(&r->g->cv);
  pthread_mutex_unlock(&r->g->mu);
}

static void on_message(void *arg, gr_conn *c, gr_inmsg *m) {
  gr_master *ms = arg;
  task *t = gr_conn_user(c);
  gr_response a;
  gr_error e;
  if (!t) { /* before gr_master_new attached it: nothing was asked yet */
    gr_inmsg_free(m);
    return;
  }
  if (m->h.type != GR_MSG_RESPONSE || gr_response_unpack(m, &a, &e) != GR_OK) {
    char line[GR_TASK_NAME_MAX + 64];
    snprintf(line, sizeof line, "master: a bad %s frame from %s", gr_msg_type_name(m->h.type),
             t->name);
    gr_conn_log_peer(c, "master: bad frame", line);
    gr_inmsg_free(m);
    return;
  }
  if (a.code != GR_OK) {
    gr_inmsg_free(m);
    m = NULL;
  }
  /* a request is completed under ms->mu: a waiter past its deadline takes
   * what is still pending under the same lock, so no completion can reach
   * a request whose waiter has returned */
  pthread_mutex_lock(&ms->mu);
  rpc *r = gr_map_get_u64(&t->pending, a.id);
  if (r) {
    gr_map_remove_u64(&t->pending, a.id);
    finish(r, a.code, a.code != GR_OK ? &a.error : NULL, m, a.failed_at);
  } else if (gr_map_get_u64(&t->abandoned, a.id)) { /* a step's late answer: its step ended */
    gr_map_remove_u64(&t->abandoned, a.id);
    if (--ms->abandoned == 0) pthread_cond_broadcast(&ms->abandoned_cv);
  }
  pthread_mutex_unlock(&ms->mu);
  if (!r) gr_inmsg_free(m); /* a response after its deadline */
}

static void on_close(void *arg, gr_conn *c, const gr_error *why) {
  gr_master *ms = arg;
  task *t = gr_conn_user(c);
  gr_error e;
  if (!t) return;
  gr_error_set(&e, GR_ERR_UNAVAILABLE, "lost %s (%s): %s", t->name[0] ? t->name : "task",
               t->address, why->msg);
  pthread_mutex_lock(&ms->mu);
  t->lost = true;
  snprintf(t->lost_why, sizeof t->lost_why, "%s", e.msg);
  rpc *fail[256];
  int n = 0;
  void *v;
  for (;;) { /* fail every request waiting on this task (under ms->mu, as on_message) */
    n = 0;
    for (size_t pos = 0; n < 256 && gr_map_next(&t->pending, &pos, NULL, &v);) fail[n++] = v;
    for (int i = 0; i < n; i++) {
      gr_map_remove_u64(&t->pending, fail[i]->id);
      fail[i]->lost = true;
      finish(fail[i], e.code, &e, NULL, -1);
    }
    if (n == 0) break;
  }
  for (rpc_group *g = ms->waiting; g; g = g->wnext) { /* steps that used it must end too */
    pthread_mutex_lock(&g->mu);
    g->losses++;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
  }
  size_t gone = gr_map_count(&t->abandoned); /* no answer comes now */
  gr_map_free(&t->abandoned);
  gr_map_init(&t->abandoned, GR_MAP_U64);
  ms->abandoned -= (int)gone;
  if (gone && ms->abandoned == 0) pthread_cond_broadcast(&ms->abandoned_cv);
  pthread_mutex_unlock(&ms->mu);
}

/* Sends msg (taken) to task k as request r (its id is set here). */
void gr_master_start(gr_master *ms, int k, gr_outmsg *msg, rpc *r, rpc_group *g) {
  task *t = &ms->tasks[k];
  gr_error e;
  r->g = g;
  r->task = k;
  r->done = false;
  r->lost = false;
  r->resp = NULL;
  pthread_mutex_lock(&g->mu);
  g->outstanding++;
  pthread_mutex_unlock(&g->mu);
  pthread_mutex_lock(&ms->mu);
  bool ok = !t->lost && gr_map_put_u64(&t->pending, r->id, r);
  if (!ok) gr_error_set(&e, GR_ERR_UNAVAILABLE, "%s", t->lost ? t->lost_why : "out of memory");
  r->lost = t->lost; /* failed because the task is lost already */
  pthread_mutex_unlock(&ms->mu);
  if (!ok) {
    gr_outmsg_free(msg);
    finish(r, e.code, &e, NULL, -1);
    return;
  }
  if (gr_conn_send(t->conn, msg, &e) != GR_OK) {
    pthread_mutex_lock(&ms->mu);
    if (gr_map_get_u64(&t->pending, r->id) == r) {
      gr_map_remove_u64(&t->pending, r->id);
      finish(r, e.code, &e, NULL, -1);
    }
    pthread_mutex_unlock(&ms->mu);
  }
}

uint64_t gr_master_new_id(gr_master *ms) {
  return __atomic_add_fetch(&ms->next_id, 1, __ATOMIC_RELAXED);
}

/* Gives up waiting for the requests of rs not done yet (g's lock not held):
 * they fail with GR_ERR_CANCELLED, and their answers are awaited by
 * gr_master_drain until deadline_ms (0: 60 s from now). */
static void abandon(gr_master *ms, rpc *rs, int n, int64_t deadline_ms) {
  if (deadline_ms <= 0) deadline_ms = gr_wire_now_ms() + 60000;
  for (int i = 0; i < n; i++) {
    task *t = &ms->tasks[rs[i].task];
    gr_error e;
    gr_error_set(&e, GR_ERR_CANCELLED, "%s: not waited for (the step failed elsewhere)", t->name);
    pthread_mutex_lock(&ms->mu);
    if (gr_map_get_u64(&t->pending, rs[i].id) == &rs[i]) {
      gr_map_remove_u64(&t->pending, rs[i].id);
      if (!t->lost && gr_map_put_u64(&t->abandoned, rs[i].id, ms)) {
        ms->abandoned++;
        if (deadline_ms > ms->abandoned_deadline_ms) ms->abandoned_deadline_ms = deadline_ms;
      }
      finish(&rs[i], e.code, &e, NULL, -1);
    }
    pthread_mutex_unlock(&ms->mu);
  }
}

void gr_master_drain(gr_master *ms) {
  pthread_mutex_lock(&ms->mu);
  while (ms->abandoned > 0) {
    int64_t left = ms->abandoned_deadline_ms - gr_wire_now_ms();
    if (left <= 0) { /* past the deadline: late answers are dropped */
      for (int k = 0; k < ms->num_tasks; k++) {
        gr_map_free(&ms->tasks[k].abandoned);
        gr_map_init(&ms->tasks[k].abandoned, GR_MAP_U64);
      }
      ms->abandoned = 0;
      break;
    }
    gr_master_cond_wait_until(&ms->abandoned_cv, &ms->mu, ms->abandoned_deadline_ms);
  }
  pthread_mutex_unlock(&ms->mu);
}

void gr_master_cond_init(pthread_cond_t *cv) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &ca);
  pthread_condattr_destroy(&ca);
}

void gr_master_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline_ms) {
  /* gr_wire_now_ms is CLOCK_MONOTONIC in ms: the same clock as cv's */
  struct timespec ts = {.tv_sec = deadline_ms / 1000, .tv_nsec = (deadline_ms % 1000) * 1000000};
  pthread_cond_timedwait(cv, mu, &ts);
}

/* Waits for every request of g, until deadline_ms (0: none). on_done(arg,
 * r) runs (without g's lock) once per request as it completes; when it
 * returns true, the rest are abandoned. Requests not done at the deadline
 * fail with GR_ERR_DEADLINE_EXCEEDED. */
void gr_master_wait_all(gr_master *ms, rpc_group *g, rpc *rs, int n, int64_t deadline_ms,
                        bool (*on_done)(void *, rpc *), void *arg) {
  char *seen = calloc((size_t)n + 1, 1);
  bool stop = false;
  pthread_mutex_lock(&ms->mu); /* listed, however many wait: a lost task wakes every one */
  g->wprev = NULL;
  g->wnext = ms->waiting;
  if (ms->waiting) ms->waiting->wprev = g;
  ms->waiting = g;
  pthread_mutex_unlock(&ms->mu);
  int losses = 0;
  pthread_mutex_lock(&g->mu);
  for (;;) {
    for (int i = 0; i < n && !stop; i++)
      if (rs[i].done && seen && !seen[i]) {
        seen[i] = 1;
        pthread_mutex_unlock(&g->mu);
        if (on_done) stop = on_done(arg, &rs[i]);
        pthread_mutex_lock(&g->mu);
      }
    if (!stop && g->losses != losses && g->outstanding > 0) { /* a task was lost */
      losses = g->losses;
      pthread_mutex_unlock(&g->mu);
      if (on_done) stop = on_done(arg, NULL);
      pthread_mutex_lock(&g->mu);
    }
    if (g->outstanding == 0) break;
    if (stop) {
      pthread_mutex_unlock(&g->mu);
      abandon(ms, rs, n, deadline_ms);
      pthread_mutex_lock(&g->mu);
      break;
    }
    if (deadline_ms > 0) {
      if (deadline_ms - gr_wire_now_ms() <= 0) break;
      gr_master_cond_wait_until(&g->cv, &g->mu, deadline_ms);
    } else {
      pthread_cond_wait(&g->cv, &g->mu);
    }
  }
  pthread_mutex_unlock(&g->mu);
  pthread_mutex_lock(&ms->mu);
  if (g->wprev)
    g->wprev->wnext = g->wnext;
  else
    ms->waiting = g->wnext;
  if (g->wnext) g->wnext->wprev = g->wprev;
  pthread_mutex_unlock(&ms->mu);
  for (int i = 0; i < n; i++) { /* past the deadline: late answers are dropped */
    gr_error e;
    gr_error_set(&e, GR_ERR_DEADLINE_EXCEEDED,
                 "%s did not answer before the deadline (%d ms for a step)",
                 ms->tasks[rs[i].task].name, ms->o.step_timeout_ms);
    pthread_mutex_lock(&ms->mu);
    bool mine = gr_map_get_u64(&ms->tasks[rs[i].task].pending, rs[i].id) == &rs[i];
    if (mine) {
      gr_map_remove_u64(&ms->tasks[rs[i].task].pending, rs[i].id);
      finish(&rs[i], e.code, &e, NULL, -1);
    }
    pthread_mutex_unlock(&ms->mu);
    if (mine && on_done) on_done(arg, &rs[i]);
  }
  free(seen);
}

void gr_rpc_group_init(rpc_group *g) {
  pthread_mutex_init(&g->mu, NULL);
  gr_master_cond_init(&g->cv);
  g->outstanding = 0;
  g->losses = 0;
  g->wprev = g->wnext = NULL;
}
void gr_rpc_group_destroy(rpc_group *g) {
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
}

/* ---- connecting -------------------------------------------------------------------- */

static gr_status status_of(gr_master *ms, task *t, gr_inmsg *m, gr_error *err) {
  gr_get_status_resp r;
  GR_TRY(gr_get_status_resp_unpack(m, &r, err));
  snprintf(t->name, sizeof t->name, "%s", r.task);
  t->incarnation = r.inc;
  t->threads = r.threads;
  t->cores = r.cores;
  t->devices = calloc((size_t)r.num_devices, sizeof *t->devices);
  if (!t->devices) return gr_error_set_oom(err);
  for (int i = 0; i < r.num_devices; i++) {
    char task_of[GR_TASK_NAME_MAX];
    if (!(t->devices[i] = strdup(r.devices[i]))) return gr_error_set_oom(err);
    t->num_devices++;
    gr_task_of_device(t->devices[i], task_of, sizeof task_of);
    gr_device_spec spec;
    if (gr_device_spec_parse(t->devices[i], &spec, err) != GR_OK ||
        !gr_device_spec_is_full(&spec) || strcmp(task_of, t->name) != 0)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "device '%s' is not a device of %s",
                          t->devices[i], t->name);
  }
  return GR_OK;
}

/* Every heartbeat period (network thread): a task silent for `missed`
 * periods is lost (a stopped process keeps its connection open: only
 * silence shows it); one silent for a period is pinged. Silence counts
 * only against pings this thread sent: when the client itself is starved
 * of CPU (a loaded machine), its ticks and pings are late, and a task
 * that was never asked, or whose answer waits unread in the socket, is not
 * silent. */
static void heartbeat_tick(void *arg) {
  gr_master *ms = arg;
  int64_t limit = (int64_t)ms->o.heartbeat_ms * ms->o.heartbeat_missed;
  for (int k = 0; k < ms->num_tasks; k++) {
    task *t = &ms->tasks[k];
    if (t->lost || !t->conn) continue;
    int64_t rx = gr_conn_last_rx_ms(t->conn);
    if (rx != t->rx_ms) t->rx_ms = rx, t->pings = 0;
    int64_t idle = gr_conn_idle_ms(t->conn);
    /* the first silent period comes before the first ping */
    if (idle > limit && t->pings >= ms->o.heartbeat_missed - 1 && !gr_conn_has_unread(t->conn)) {
      char why[256];
      snprintf(why, sizeof why, "no answer for %lld ms (heartbeats every %d ms)", (long long)idle,
               ms->o.heartbeat_ms);
      gr_conn_fail(t->conn, GR_ERR_UNAVAILABLE, why);
    } else if (idle >= ms->o.heartbeat_ms) {
      gr_outmsg *m = gr_heartbeat_req_pack(&(gr_heartbeat_req){0});
      if (!m) continue;
      gr_conn_send(t->conn, m, NULL);
      t->pings++;
    }
  }
}

/* The container the master's graphs use: the one named, else a private
 * one of a random name ("_run." and 16 hex digits). */
static gr_status container_of(gr_master *ms, const char *name, gr_error *err) {
  if (name) {
    if (gr_container_check_name(name, err) != GR_OK) {
      gr_error_prefix(err, "master");
      return err ? err->code : GR_ERR_INVALID_ARGUMENT;
    }
    snprintf(ms->container, sizeof ms->container, "%s", name);
    return GR_OK;
  }
  uint64_t r;
  GR_TRY(gr_auth_random(&r, sizeof r, err));
  snprintf(ms->container, sizeof ms->container, "_run.%016llx", (unsigned long long)r);
  ms->private_container = true;
  return GR_OK;
}

gr_container_ref gr_master_container_ref(const gr_master *ms) {
  return (gr_container_ref){ms->container, ms->private_container};
}

gr_status gr_master_new(const gr_master_options *o, gr_master **out, gr_error *err) {
  *out = NULL;
  if (!o || o->num_tasks <= 0 || o->num_tasks > 4096 || !o->addresses)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "master: 1 to 4096 task addresses needed");
  size_t n = o->secret ? strlen(o->secret) : 0;
  if (o->secret && (n < GR_SECRET_MIN || n > GR_SECRET_MAX))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "master: the secret is %zu bytes, want %d to %d", n, GR_SECRET_MIN,
                        GR_SECRET_MAX);
  if (!o->secret && !o->insecure)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "master: no secret: servers require the cluster's shared secret "
                        "(gr_master_options.secret; insecure talks to servers without one)");
  if (o->cluster_id && *o->cluster_id && gr_cluster_id_check(o->cluster_id, err) != GR_OK) {
    gr_error_prefix(err, "master");
    return err ? err->code : GR_ERR_INVALID_ARGUMENT;
  }
  gr_tls *tls;
  GR_TRY(gr_tls_from_options(o->tls_cert, o->tls_key, o->tls_ca, "master", &tls, err));
  gr_master *ms = calloc(1, sizeof *ms);
  if (!ms) {
    gr_tls_unref(tls);
    return gr_error_set_oom(err);
  }
  ms->o = *o;
  ms->tls = tls;
  ms->o.tls_cert = ms->o.tls_key = ms->o.tls_ca = NULL;
  snprintf(ms->cluster, sizeof ms->cluster, "%s", o->cluster_id ? o->cluster_id : "");
  ms->o.cluster_id = ms->cluster;
  if (!ms->o.connect_timeout_ms) ms->o.connect_timeout_ms = 10000;
  if (!ms->o.heartbeat_ms) ms->o.heartbeat_ms = 100;
  if (ms->o.heartbeat_missed <= 0) ms->o.heartbeat_missed = 5;
  pthread_mutex_init(&ms->mu, NULL);
  gr_master_cond_init(&ms->abandoned_cv);
  ms->secret = o->secret ? strdup(o->secret) : NULL;
  ms->o.secret = ms->secret;
  ms->o.addresses = NULL;
  ms->o.task_names = NULL;
  ms->o.container = NULL;
  ms->tasks = calloc((size_t)o->num_tasks, sizeof *ms->tasks);
  gr_status st = ms->tasks && (!o->secret || ms->secret) ? container_of(ms, o->container, err)
                                                         : gr_error_set_oom(err);
  if (st == GR_OK) st = gr_loop_new(&ms->loop, err);
  gr_conn_handler h = {on_message, on_close, ms, NULL, NULL, NULL};
  for (int k = 0; k < o->num_tasks && st == GR_OK; k++) {
    task *t = &ms->tasks[k];
    ms->num_tasks++;
    gr_map_init(&t->pending, GR_MAP_U64);
    gr_map_init(&t->abandoned, GR_MAP_U64);
    snprintf(t->address, sizeof t->address, "%s", o->addresses[k] ? o->addresses[k] : "");
  }
  if (st == GR_OK) st = gr_master_dial_all(ms, o->task_names, &h, err);
  rpc_group g;
  gr_rpc_group_init(&g);
  rpc *rs = st == GR_OK ? calloc((size_t)ms->num_tasks, sizeof *rs) : NULL;
  if (st == GR_OK && !rs) st = gr_error_set_oom(err);
  for (int k = 0; k < ms->num_tasks && st == GR_OK; k++) {
    rs[k].id = gr_master_new_id(ms);
    gr_outmsg *m = gr_get_status_req_pack(&(gr_get_status_req){rs[k].id});
    if (!m) {
      st = gr_error_set_oom(err);
      break;
    }
    gr_master_start(ms, k, m, &rs[k], &g);
  }
  if (st == GR_OK)
    gr_master_wait_all(ms, &g, rs, ms->num_tasks, gr_wire_now_ms() + ms->o.connect_timeout_ms, NULL,
                       NULL);
  for (int k = 0; k < ms->num_tasks && st == GR_OK; k++) {
    if (rs[k].code == GR_OK)
      st = status_of(ms, &ms->tasks[k], rs[k].resp, err);
    else if (err)
      *err = rs[k].err, st = rs[k].code;
    if (st != GR_OK) gr_error_prefix(err, "task at %s", ms->tasks[k].address);
  }
  for (int k = 0; rs && k < ms->num_tasks; k++) gr_inmsg_free(rs[k].resp);
  free(rs);
  gr_rpc_group_destroy(&g);
  for (int k = 0; k < ms->num_tasks && st == GR_OK; k++) {
    for (int j = 0; j < k; j++)
      if (!strcmp(ms->tasks[j].name, ms->tasks[k].name))
        st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s and %s are both %s",
                          ms->tasks[j].address, ms->tasks[k].address, ms->tasks[k].name);
    ms->num_devices += ms->tasks[k].num_devices;
  }
  if (st == GR_OK && !(ms->device_names = calloc((size_t)ms->num_devices, sizeof(char *))))
    st = gr_error_set_oom(err);
  /* devices in job order: the chief's, the workers', the others', the ps'
   * last, so that unpinned nodes run where TensorFlow runs them (the first
   * device: the chief's, else worker 0's) */
  static const char *const order[] = {"/job:chief/", "/job:worker/", NULL, "/job:ps/"};
  for (int r = 0, d = 0; r < 4 && st == GR_OK; r++)
    for (int k = 0; k < ms->num_tasks; k++) {
      int rank = 2;
      for (int j = 0; j < 4; j++)
        if (order[j] && !strncmp(ms->tasks[k].name, order[j], strlen(order[j]))) rank = j;
      if (rank != r) continue;
      for (int i = 0; i < ms->tasks[k].num_devices; i++)
        ms->device_names[d++] = ms->tasks[k].devices[i];
    }
  if (st == GR_OK && ms->o.heartbeat_ms > 0)
    st = gr_loop_every(ms->loop, ms->o.heartbeat_ms, heartbeat_tick, ms, err);
  if (st != GR_OK) {
    gr_master_free(ms);
    return st;
  }
  *out = ms;
  return GR_OK;
}

void gr_master_free(gr_master *ms) {
  if (!ms) return;
  gr_master_drain(ms);    /* a step abandoned after a lost task ends on the others first */
  gr_loop_free(ms->loop); /* closes the connections: on_close fails what waits */
  for (int k = 0; k < ms->num_tasks; k++) {
    task *t = &ms->tasks[k];
    gr_conn_unref(t->conn);
    gr_map_free(&t->pending);
    gr_map_free(&t->abandoned);
    for (int i = 0; i < t->num_devices; i++) free(t->devices[i]);
    free(t->devices);
  }
  free(ms->tasks);
  free(ms->device_names);
  free(ms->secret);
  gr_tls_unref(ms->tls);
  pthread_mutex_destroy(&ms->mu);
  pthread_cond_destroy(&ms->abandoned_cv);
  free(ms);
}

int gr_master_task_threads(const gr_master *ms, int task) {
  return task >= 0 && task < ms->num_tasks ? ms->tasks[task].threads : 0;
}

int gr_master_task_cores(const gr_master *ms, int task) {
  return task >= 0 && task < ms->num_tasks ? ms->tasks[task].cores : 0;
}

int gr_master_num_tasks(const gr_master *ms) {
  return ms->num_tasks;
}

const char *gr_master_task_address(const gr_master *ms, int task) {
  return task >= 0 && task < ms->num_tasks ? ms->tasks[task].address : NULL;
}

const char *const *gr_master_devices(const gr_master *ms, int *n) {
  *n = ms->num_devices;
  return ms->device_names;
}
const char *gr_master_task_name(const gr_master *ms, int k) {
  return k >= 0 && k < ms->num_tasks ? ms->tasks[k].name : NULL;
}
uint64_t gr_master_task_incarnation(const gr_master *ms, int k) {
  return k >= 0 && k < ms->num_tasks ? ms->tasks[k].incarnation : 0;
}
const char *gr_master_container(const gr_master *ms) {
  return ms->container;
}

int gr_master_task_of(const gr_master *ms, const char *device) {
  char t[GR_TASK_NAME_MAX];
  gr_task_of_device(device, t, sizeof t);
  for (int k = 0; k < ms->num_tasks; k++)
    if (!strcmp(ms->tasks[k].name, t)) return k;
  return -1;
}

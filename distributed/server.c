/* The server: one task of a cluster. Setting it up and stopping it, and
 * the dispatch of every frame that arrives (on_message): GET_STATUS, LEASE
 * and heartbeats are answered, and pushed tensors delivered, where they
 * arrive; registrations go to the register threads, the other requests to
 * the work threads (run_job). Which thread runs what, and the locks:
 * docs/internals.md, "Threads and locks". */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/server_internal.h"
#include "ops/gr_ops.h"

void gr_task_of_device(const char *device, char *out, size_t cap) {
  const char *d = strstr(device, "/device:");
  size_t n = d ? (size_t)(d - device) : strlen(device);
  if (n >= cap) n = cap - 1;
  memcpy(out, device, n);
  out[n] = '\0';
}

/* Writes "TASK: line". */
static void emit(void *arg, const char *line) {
  const gr_server *s = arg;
  char full[2 * GR_ERROR_MSG_MAX];
  snprintf(full, sizeof full, "%s: %s", s->task, line);
  if (s->o.log_fn)
    s->o.log_fn(s->o.log_arg, full);
  else
    fprintf(stderr, "graphrun: %s\n", full);
}

void gr_server_log(const gr_server *s, const char *fmt, ...) {
  char line[2 * GR_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  gr_loglimit_emit(s->logs, fmt, line, emit, (void *)s);
}

/* The transport's lines (a bad frame from a peer; rate-limited there). */
static void transport_log(void *arg, const char *line) {
  emit(arg, line);
}

/* Every second: the summaries of the log lines left out. */
static void flush_logs(void *arg) {
  gr_server *s = arg;
  gr_loglimit_flush(s->logs, emit, s);
}

void gr_server_respond_error(gr_conn *c, uint64_t id, const gr_error *e) {
  gr_server_answer(c, id, NULL, e);
}

void gr_server_answer(gr_conn *c, uint64_t id, gr_outmsg *resp, const gr_error *e) {
  gr_error why;
  if (resp) {
    gr_status st = gr_conn_send(c, resp, &why);
    /* GR_ERR_UNAVAILABLE: the connection is closed or failing, which the peer sees */
    if (st == GR_OK || st == GR_ERR_UNAVAILABLE) return;
    gr_error_prefix(&why, "the answer could not be sent"); /* over the wire's limits, or oom */
    e = &why;
  } else if (!e) {
    gr_error_set(&why, GR_ERR_RESOURCE_EXHAUSTED, "out of memory building the answer");
    e = &why;
  }
  gr_outmsg *m = gr_response_pack(id, e);
  gr_status st = m ? gr_conn_send(c, m, NULL) : GR_ERR_RESOURCE_EXHAUSTED;
  if (st == GR_OK || st == GR_ERR_UNAVAILABLE) return;
  /* not even an error fits: the peer's requests on c fail with the connection */
  gr_conn_fail(c, GR_ERR_RESOURCE_EXHAUSTED, "out of memory answering a request");
}

peer *gr_server_find_peer(gr_server *s, const char *task) {
  for (int i = 0; i < s->num_peers; i++)
    if (!strcmp(s->peers[i].name, task)) return &s->peers[i];
  return NULL;
}

/* ---- requests ----------------------------------------------------------------- */

static void get_status(gr_server *s, gr_conn *c, uint64_t id) {
  gr_get_status_resp r = {s->task,        s->incarnation,  (const char *const *)s->devices,
                          s->num_devices, s->exec_threads, gr_num_cores()};
  gr_server_answer(c, id, gr_get_status_resp_pack(id, &r), NULL);
}

/* Which of the named variables have values in the container the request
 * names (none when the task has no such container yet). */
static void vars(gr_server *s, gr_conn *c, gr_inmsg *in) {
  gr_vars_req q;
  gr_error e;
  container *k = NULL;
  if (gr_vars_req_unpack(in, &q, &e) != GR_OK ||
      gr_server_container_get(s, c, in, false, &k, &e) != GR_OK) {
    gr_server_respond_error(c, q.id, &e);
    return;
  }
  bool *init = calloc((size_t)q.num_names + 1, sizeof *init);
  for (int i = 0; init && i < q.num_names; i++) {
    gr_var *v = k && q.names[i] ? gr_resource_mgr_find_var(k->rm, q.names[i]) : NULL;
    init[i] = v && gr_var_is_initialized(v);
  }
  gr_server_container_unref(k);
  gr_vars_resp r = {init, q.num_names};
  gr_server_answer(c, q.id, init ? gr_vars_resp_pack(q.id, &r) : NULL, NULL);
  free(init);
}

typedef struct job {
  gr_server *s;
  gr_conn *c;
  gr_inmsg *m;
} job;

static void run_job(void *arg) {
  job *j = arg;
  gr_server *s = j->s;
  switch (j->m->h.type) {
    case GR_MSG_RUN:
      gr_server_run(s, j->c, j->m);
      break;
    case GR_MSG_ABORT:
      gr_server_abort(s, j->c, j->m);
      break;
    case GR_MSG_REGISTER:
      gr_server_register(s, j->c, j->m);
      break;
    case GR_MSG_VARS:
      vars(s, j->c, j->m);
      gr_inmsg_free(j->m);
      break;
    case GR_MSG_DEREGISTER:
      gr_server_deregister(s, j->c, j->m);
      break;
    case GR_MSG_RESET:
      gr_server_reset(s, j->c, j->m);
      break;
    default:
      gr_inmsg_free(j->m);
      break;
  }
  gr_conn_unref(j->c);
  free(j);
}

/* What the server keeps per connection (loop thread only): the request ids
 * it has seen, a window of GR_SERVER_ID_WINDOW ids below the highest. */
typedef struct conn_state {
  bool logged;  /* its session line was printed */
  bool closing; /* a bad request: the rest of the connection is ignored */
  bool ran;     /* a RUN came over it: its steps are aborted when it closes */
  bool pushed;  /* a peer task's: TENSOR frames came over it */
  bool failed;  /* the step of the frame refused on it was failed (on_refused) */
  bool client;  /* a request came over it: a client (a master), not a peer task */
  bool any;
  uint64_t top;
  uint64_t seen[GR_SERVER_ID_WINDOW / 64]; /* id x: bit x % GR_SERVER_ID_WINDOW */
} conn_state;

static bool is_request(int type) {
  return type == GR_MSG_GET_STATUS || type == GR_MSG_REGISTER || type == GR_MSG_RUN ||
         type == GR_MSG_VARS || type == GR_MSG_DEREGISTER || type == GR_MSG_LEASE ||
         type == GR_MSG_RESET;
}

/* Records request id on the connection; an error when it was seen already
 * (a duplicated or replayed request) or is older than the window. */
static gr_status note_id(conn_state *cs, uint64_t id, gr_error *err) {
  const uint64_t w = GR_SERVER_ID_WINDOW;
  if (cs->any && id <= cs->top) {
    if (cs->top - id >= w)
      return gr_error_set(err, GR_ERR_FAILED_PRECONDITION,
                          "request id %llu is older than the last %llu ids of this connection "
                          "(a replayed request?)",
                          (unsigned long long)id, (unsigned long long)w);
    uint64_t bit = (uint64_t)1 << (id % 64);
    if (cs->seen[id % w / 64] & bit)
      return gr_error_set(err, GR_ERR_ALREADY_EXISTS,
                          "request id %llu was used already on this connection (a duplicated "
                          "request)",
                          (unsigned long long)id);
    cs->seen[id % w / 64] |= bit;
    return GR_OK;
  }
  if (!cs->any || id - cs->top >= w) {
    memset(cs->seen, 0, sizeof cs->seen);
  } else {
    for (uint64_t k = 1, n = id - cs->top; k <= n; k++) { /* ids newly inside the window */
      uint64_t x = cs->top + k;
      cs->seen[x % w / 64] &= ~((uint64_t)1 << (x % 64));
    }
  }
  cs->any = true;
  cs->top = id;
  cs->seen[id % w / 64] |= (uint64_t)1 << (id % 64);
  return GR_OK;
}

/* Checks a request's id before anything else: a frame without a usable id
 * closes the connection (there is nothing to answer to), a duplicate is
 * answered with an error. False when m was consumed. */
static bool check_request(gr_server *s, gr_conn *c, gr_inmsg *m, uint64_t *id) {
  gr_error e;
  conn_state *cs = gr_conn_user(c);
  if (!cs) {
    if (!(cs = calloc(1, sizeof *cs))) {
      gr_inmsg_free(m);
      gr_conn_close(c);
      return false;
    }
    gr_conn_set_user(c, cs);
  }
  if (cs->closing) {
    gr_inmsg_free(m);
    return false;
  }
  if (gr_request_id(m, id, &e) != GR_OK) {
    gr_server_log(s, "bad request from %s: %s frame: %s; closing that connection", gr_conn_peer(c),
                  gr_msg_type_name(m->h.type), e.msg);
    cs->closing = true;
    gr_inmsg_free(m);
    gr_conn_close(c);
    return false;
  }
  if (note_id(cs, *id, &e) != GR_OK) {
    gr_server_log(s, "refused a %s request from %s: %s", gr_msg_type_name(m->h.type),
                  gr_conn_peer(c), e.msg);
    gr_inmsg_free(m);
    gr_server_respond_error(c, *id, &e);
    return false;
  }
  return true;
}

/* A connection's first request makes it a client's, until it closes. */
static void note_client(gr_server *s, conn_state *cs) {
  cs->client = true;
  pthread_mutex_lock(&s->mu);
  s->clients_open++;
  pthread_mutex_unlock(&s->mu);
}

static void note_client_gone(gr_server *s) {
  pthread_mutex_lock(&s->mu);
  s->clients_open--;
  s->clients_gone_at = gr_wire_now_ms();
  pthread_mutex_unlock(&s->mu);
}

void gr_server_client_state(gr_server *s, gr_server_clients *out) {
  pthread_mutex_lock(&s->mu);
  out->open = s->clients_open;
  out->served = s->served;
  out->idle_ms =
      s->clients_open > 0 || !s->clients_gone_at ? 0 : gr_wire_now_ms() - s->clients_gone_at;
  pthread_mutex_unlock(&s->mu);
}

static void on_message(void *arg, gr_conn *c, gr_inmsg *m) {
  gr_server *s = arg;
  uint64_t id = 0;
  conn_state *cs = gr_conn_user(c);
  if (!cs && (cs = calloc(1, sizeof *cs))) gr_conn_set_user(c, cs);
  if (cs && !cs->logged && m->h.type != GR_MSG_TENSOR && m->h.type != GR_MSG_HEARTBEAT) {
    cs->logged = true; /* the connection's first request: one line per session */
    if (!s->o.quiet) gr_server_log(s, "session from %s", gr_conn_peer(c));
  }
  if (cs && cs->closing) {
    gr_inmsg_free(m);
    return;
  }
  if (cs && !cs->client && is_request(m->h.type)) note_client(s, cs);
  if (is_request(m->h.type) && !check_request(s, c, m, &id)) return;
  if (m->h.type == GR_MSG_RUN) ((conn_state *)gr_conn_user(c))->ran = true;
  if (m->h.type == GR_MSG_REGISTER) { /* a run of graphs has begun */
    pthread_mutex_lock(&s->mu);
    s->served = true;
    pthread_mutex_unlock(&s->mu);
  }
  if (m->h.type == GR_MSG_RUN &&
      (size_t)m->h.header_len + m->h.body_len <= GR_SERVER_INLINE_RUN_BYTES) {
    /* a small RUN starts here, without a hop to the work pool (a wake-up
     * and a context switch per task per step): checking it and starting
     * its step blocks nowhere and runs light nodes only; larger feeds are
     * copied on a work thread (docs/internals.md, "Threads and locks") */
    gr_server_run(s, c, m);
    return;
  }
  switch (m->h.type) {
    case GR_MSG_HEARTBEAT: { /* answered at once, here: the master sees that we live */
      gr_heartbeat_req q;
      gr_outmsg *r =
          gr_heartbeat_req_unpack(m, &q, NULL) == GR_OK ? gr_response_pack(q.id, NULL) : NULL;
      if (r) gr_conn_send(c, r, NULL);
      gr_inmsg_free(m);
      return;
    }
    case GR_MSG_GET_STATUS:
      get_status(s, c, id);
      gr_inmsg_free(m);
      return;
    case GR_MSG_LEASE: /* a table lookup: answered here, in order with the connection's close */
      gr_server_lease(s, c, m, id);
      gr_inmsg_free(m);
      return;
    case GR_MSG_TENSOR:
      if (cs) cs->pushed = true;
      /* delivered here, without a hop to the work pool: it blocks nowhere
       * (what it makes ready: docs/internals.md, "Threads and locks") */
      gr_server_push(s, c, m);
      return;
    case GR_MSG_RUN:
    case GR_MSG_REGISTER:
    case GR_MSG_VARS:
    case GR_MSG_DEREGISTER:
    case GR_MSG_RESET:
    case GR_MSG_ABORT: {
      job *j = malloc(sizeof *j);
      if (!j) { /* a request is answered (an abort is not one) */
        gr_error e;
        gr_error_set(&e, GR_ERR_RESOURCE_EXHAUSTED, "%s: out of memory taking a %s request",
                     s->task, gr_msg_type_name(m->h.type));
        if (m->h.type != GR_MSG_ABORT) gr_server_answer(c, id, NULL, &e);
        break;
      }
      gr_conn_ref(c);
      *j = (job){s, c, m};
      /* a step does not hold a thread while it runs (its completion answers);
       * a registration decodes and builds executors (long, not blocking: its
       * peers are dialed by threads of their own) */
      bool long_job = m->h.type == GR_MSG_REGISTER;
      gr_threadpool_schedule(long_job ? s->register_pool : s->work_pool, run_job, j);
      return;
    }
    default:
      gr_server_log(s, "a %s frame from %s, which servers do not take; closing",
                    gr_msg_type_name(m->h.type), gr_conn_peer(c));
      gr_inmsg_free(m);
      if (!cs && (cs = calloc(1, sizeof *cs))) gr_conn_set_user(c, cs);
      if (cs) cs->closing = true;
      gr_conn_close(c);
      return;
  }
  gr_inmsg_free(m);
}

typedef struct closed { /* a connection that ran steps closed */
  gr_server *s;
  gr_conn *c; /* a reference: no other connection gets its address meanwhile */
  gr_error why;
} closed;

static void abort_steps_of(void *arg) {
  closed *x = arg;
  gr_server_steps_abort_of(x->s, x->c, &x->why);
  gr_conn_unref(x->c);
  free(x);
}

/* A frame that failed its MAC: a tensor pushed for step `run` (as the frame
 * claims) may be the one altered; that step fails at once, open here or
 * not yet, rather than wait for it (its master recovers). Only a step can
 * be failed this way, which whoever can alter frames can do anyway. */
/* A pushed tensor whose receiver said where its bytes go (a collective's
 * all-gather): read straight there (server_step.c). */
static bool body_into(void *arg, gr_conn *c, const gr_inmsg *m, gr_buffer **buf, size_t *off) {
  (void)c;
  return m->h.type == GR_MSG_TENSOR && gr_server_push_into(arg, m, buf, off);
}

static void on_refused(void *arg, gr_conn *c, const gr_inmsg *m) {
  gr_server *s = arg;
  uint64_t run_id;
  conn_state *cs = gr_conn_user(c);
  if (m->h.type != GR_MSG_TENSOR || gr_msg_u64(&m->msg.root, "run", &run_id, NULL) != GR_OK) return;
  if (cs) cs->failed = true;
  char msg[GR_ERROR_MSG_MAX];
  snprintf(msg, sizeof msg,
           "%s: a tensor for this step from %s failed its MAC (altered on the way) and was "
           "refused",
           s->task, gr_conn_peer(c));
  gr_server_step_abort_id(s, run_id, GR_ERR_ABORTED, msg);
}

typedef struct refused { /* a peer task's frame was refused */
  gr_server *s;
  char msg[GR_ERROR_MSG_MAX];
} refused;

static void abort_open_steps(void *arg) {
  refused *x = arg;
  gr_server_steps_abort_open(x->s, GR_ERR_ABORTED, x->msg);
  free(x);
}

/* A peer task pushes tensors over c, which closed after something it sent
 * was refused without saying for which step (a TLS record altered on the
 * way, bytes that are not a frame): a tensor a step open here waits for
 * may be the one refused, and no other copy comes. Every open step fails
 * (ABORTED: its master recovers) rather than wait for it until the
 * master's deadline. (A step whose RUN comes only later still waits.) */
static void abort_for_refused(gr_server *s, gr_conn *c, const gr_error *why) {
  refused *x = malloc(sizeof *x);
  if (!x) return;
  x->s = s;
  snprintf(x->msg, sizeof x->msg,
           "%s: a tensor for this step may be lost: %s's connection was closed (%s)", s->task,
           gr_conn_peer(c), why->msg);
  gr_threadpool_schedule(s->work_pool, abort_open_steps, x); /* aborts run off the loop */
}

static void on_close(void *arg, gr_conn *c, const gr_error *why) {
  gr_server *s = arg;
  gr_server_drop_graphs_of(s, c);     /* the client is gone: so are its graphs */
  gr_server_leases_drop_of(s, c);     /* and its leases */
  gr_server_containers_drop_of(s, c); /* and its private containers */
  conn_state *cs = gr_conn_user(c);
  if (cs && cs->client) note_client_gone(s);
  if (cs && cs->ran) { /* its running steps would wait for a master that is gone */
    closed *x = malloc(sizeof *x);
    if (x) {
      gr_conn_ref(c);
      *x = (closed){s, c, *why};
      gr_threadpool_schedule(s->work_pool, abort_steps_of, x); /* aborts run off the loop */
    } else {
      gr_server_steps_abort_of(s, c, why);
    }
  }
  if (cs && cs->pushed && !cs->failed &&
      (why->code == GR_ERR_UNAUTHENTICATED || why->code == GR_ERR_INVALID_ARGUMENT))
    abort_for_refused(s, c, why);
  /* a peer that closes between frames is done, one that went away having
   * sent nothing was a probe (a readiness check of the port); anything else
   * (one the handshake deadline closed, too) is worth a line */
  bool probe = gr_conn_sent_nothing(c) && why->code != GR_ERR_DEADLINE_EXCEEDED;
  if (!s->o.quiet && why->code != GR_ERR_CANCELLED && why->code != GR_OK && !probe)
    gr_server_log(s, "connection from %s ended: %s", gr_conn_peer(c), why->msg);
  free(cs);
  gr_conn_set_user(c, NULL);
}

/* ---- life ------------------------------------------------------------------------ */

static bool is_loopback(const char *host) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  if (getaddrinfo(host, NULL, &hints, &ai) != 0) return false;
  bool lo = true;
  for (struct addrinfo *p = ai; p; p = p->ai_next) {
    if (p->ai_family == AF_INET) {
      uint32_t a = ntohl(((struct sockaddr_in *)p->ai_addr)->sin_addr.s_addr);
      lo = lo && (a >> 24) == 127;
    } else if (p->ai_family == AF_INET6) {
      lo = lo && IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)p->ai_addr)->sin6_addr);
    } else {
      lo = false;
    }
  }
  freeaddrinfo(ai);
  return lo;
}

static bool valid_job(const char *job) {
  if (!job || !*job || strlen(job) > 32) return false;
  for (const char *p = job; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '_' || *p == '-'))
      return false;
  return true;
}

/* The options' secret, insecure and cluster id. */
static gr_status check_identity(const gr_server_options *o, const char *bind, const char *host,
                                gr_error *err) {
  size_t n = o->secret ? strlen(o->secret) : 0;
  if (o->secret && (n < GR_SECRET_MIN || n > GR_SECRET_MAX))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "server: the secret is %zu bytes, want %d to %d (head -c 32 /dev/urandom "
                        "| xxd -p makes one)",
                        n, GR_SECRET_MIN, GR_SECRET_MAX);
  if (!o->secret && !o->insecure)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "server: no secret: every server requires the cluster's shared secret "
                        "(give --secret-file FILE; a loopback server without authentication "
                        "needs --insecure)");
  if (o->insecure && !is_loopback(host))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "server: refusing to listen on %s insecure: an insecure server listens on "
                        "loopback only (bind 127.0.0.1 or [::1]); anyone who reaches it could "
                        "run code in this process (give --secret-file FILE instead)",
                        bind);
  if (o->cluster_id && *o->cluster_id && gr_cluster_id_check(o->cluster_id, err) != GR_OK) {
    gr_error_prefix(err, "server");
    return err ? err->code : GR_ERR_INVALID_ARGUMENT;
  }
  return GR_OK;
}

gr_status gr_server_new(const gr_server_options *o, gr_server **out, gr_error *err) {
  *out = NULL;
  if (!o || !valid_job(o->job))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "server: the job name must be 1 to 32 letters, digits, '_' or '-'");
  if (o->task < 0 || o->task > 65535 || o->num_devices < 0 || o->num_devices > 64 ||
      o->inter_op_threads < 0 || o->inter_op_threads > 1024)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "server: task must be 0 to 65535, devices 0 to 64, threads 0 to 1024");
  if (o->max_connections < 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "server: max_connections must be 0 (from the descriptor limit) or more");
  const char *bind = o->bind ? o->bind : "127.0.0.1:0";
  char host[256];
  int port;
  GR_TRY(gr_parse_address(bind, host, sizeof host, &port, err));
  GR_TRY(check_identity(o, bind, host, err));
  gr_tls *tls;
  GR_TRY(gr_tls_from_options(o->tls_cert, o->tls_key, o->tls_ca, "server", &tls, err));
  gr_server *s = calloc(1, sizeof *s);
  if (!s) {
    gr_tls_unref(tls);
    return gr_error_set_oom(err);
  }
  s->o = *o;
  s->tls = tls;
  s->o.tls_cert = s->o.tls_key = s->o.tls_ca = NULL;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->stopped, NULL);
  gr_map_init(&s->containers, GR_MAP_STR);
  gr_map_init(&s->graphs, GR_MAP_U64);
  gr_map_init(&s->steps, GR_MAP_U64);
  gr_map_init(&s->runs, GR_MAP_U64);
  s->parked_max = (size_t)1 << 30;
  snprintf(s->task, sizeof s->task, "/job:%s/replica:0/task:%d", o->job, o->task);
  s->num_devices = o->num_devices ? o->num_devices : 1;
  s->devices = calloc((size_t)s->num_devices, sizeof *s->devices);
  s->secret = o->secret ? strdup(o->secret) : NULL;
  s->o.secret = s->secret;
  snprintf(s->cluster, sizeof s->cluster, "%s", o->cluster_id ? o->cluster_id : "");
  s->o.cluster_id = s->cluster;
  if ((s->logs = malloc(sizeof *s->logs))) gr_loglimit_init(s->logs);
  s->o.bind = NULL;
  s->o.job = NULL;
  int threads = o->inter_op_threads ? o->inter_op_threads : gr_num_cores();
  gr_ops_set_intra_op_threads(o->intra_op_threads > 0 ? o->intra_op_threads : 1);
  s->register_pool = gr_threadpool_new(4);
  s->work_pool = gr_threadpool_new(2);
  /* the steps' kernels: light nodes may also run where a value arrives
   * (docs/internals.md, "Threads and locks") */
  s->exec_pool = gr_threadpool_new(threads);
  s->exec_threads = threads;
  gr_threadpool_set_name(s->register_pool, "gr-register");
  gr_threadpool_set_name(s->work_pool, "gr-work");
  gr_threadpool_set_name(s->exec_pool, "gr-exec");
  gr_status st = GR_OK;
  if (!s->devices || (o->secret && !s->secret) || !s->logs || !s->register_pool || !s->work_pool ||
      !s->exec_pool)
    st = gr_error_set_oom(err);
  for (int k = 0; k < s->num_devices && st == GR_OK; k++) {
    char name[GR_TASK_NAME_MAX + 32];
    snprintf(name, sizeof name, "%s/device:CPU:%d", s->task, k);
    if (!(s->devices[k] = strdup(name))) st = gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "oom");
  }
  while (st == GR_OK && s->incarnation == 0)
    st = gr_auth_random(&s->incarnation, sizeof s->incarnation, err);
  if (st == GR_OK) st = gr_loop_new(&s->loop, err);
  gr_conn_handler h = {on_message, on_close, s, transport_log, on_refused, body_into};
  gr_conn_auth auth = {s->secret, s->cluster, s->tls};
  if (st == GR_OK)
    st = gr_listener_new(s->loop, host, port, &auth, &h, &s->listener, &s->port, err);
  if (st == GR_OK) gr_listener_set_max_conns(s->listener, o->max_connections);
  if (st == GR_OK) st = gr_loop_every(s->loop, 1000, flush_logs, s, err);
  if (st != GR_OK) {
    gr_error_prefix(err, "server %s", s->task);
    gr_server_free(s);
    return st;
  }
  if (!s->secret)
    gr_server_log(s, "warning: insecure: no secret, no authentication: any local user can "
                     "connect, run any graph in this process (so read any file it can read) "
                     "and use its clients' shared containers");
  else if (!s->tls && !is_loopback(host))
    gr_server_log(s,
                  "warning: no TLS on %s (not loopback): peers on other hosts must know the "
                  "secret and every frame carries a MAC, but the traffic is not encrypted "
                  "(anyone on the path can read tensors and graphs); give --tls-cert, "
                  "--tls-key and --tls-ca to encrypt it",
                  host);
  *out = s;
  return GR_OK;
}

void gr_server_free(gr_server *s) {
  if (!s) return;
  gr_listener_free(s->listener);
  gr_threadpool_free(s->register_pool); /* no registration starts a dial after this */
  gr_server_dials_wait(s);              /* the dials use the loop: they end first (bounded) */
  gr_loop_free(s->loop);                /* closes connections: running steps' pushes fail */
  gr_server_steps_abort_all(s);
  pthread_mutex_lock(&s->mu);
  s->work_closed = true; /* a multi-step RUN starts no more iterations */
  pthread_mutex_unlock(&s->mu);
  gr_threadpool_free(s->work_pool); /* a RUN queued here starts and sees its connection closed */
  pthread_mutex_lock(&s->mu);       /* the aborted steps finish on the executors' threads */
  while (s->steps_running > 0) pthread_cond_wait(&s->stopped, &s->mu);
  pthread_mutex_unlock(&s->mu);
  void *v;
  for (size_t pos = 0; gr_map_next(&s->graphs, &pos, NULL, &v);) gr_server_registered_unref(v);
  gr_map_free(&s->graphs);
  gr_server_steps_free(s);
  gr_map_free(&s->steps);
  gr_map_free(&s->runs);
  for (int i = 0; i < s->num_peers; i++)
    gr_conn_unref(s->peers[i].conn), gr_conn_unref(s->peers[i].in_conn), free(s->peers[i].waiters);
  free(s->peers);
  gr_threadpool_free(s->exec_pool);
  gr_server_containers_free(s); /* after the graphs, which hold theirs */
  free(s->leases);
  for (int k = 0; s->devices && k < s->num_devices; k++) free(s->devices[k]);
  free(s->devices);
  free(s->secret);
  gr_tls_unref(s->tls);
  if (s->logs) {
    gr_loglimit_flush(s->logs, emit, s);
    gr_loglimit_destroy(s->logs);
    free(s->logs);
  }
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->stopped);
  free(s);
}

void gr_server_step_began(gr_server *s) {
  pthread_mutex_lock(&s->mu);
  s->steps_running++;
  pthread_mutex_unlock(&s->mu);
}

void gr_server_step_ended(gr_server *s) {
  pthread_mutex_lock(&s->mu);
  if (--s->steps_running == 0) pthread_cond_broadcast(&s->stopped);
  pthread_mutex_unlock(&s->mu);
}

int gr_server_port(const gr_server *s) {
  return s->port;
}
const char *gr_server_task_name(const gr_server *s) {
  return s->task;
}
uint64_t gr_server_incarnation(const gr_server *s) {
  return s->incarnation;
}

/* Bad input against a real server (distributed/, docs/distributed.md "Wire",
 * "Security", "Errors"): servers started in this process on ephemeral
 * loopback ports, raw sockets that send arbitrary bytes, and after every
 * case a well-behaved client (a raw GET_STATUS round trip and a gr_master
 * session running a small graph on the server's task) that must still be
 * served. Each case asserts the specific error: in a response, or in the
 * server's log (gr_server_options.log_fn), which names the peer.
 *
 * Every wait is bounded (poll with deadlines). The transport's limits
 * (gr_transport_set_limits) are lowered only inside the cases that need
 * it and restored after. Two servers of the cluster CLUSTER:
 * /job:worker/task:0 started insecure (no secret: the wire is what these
 * cases are about) and /job:ps/task:0 with a secret, which the cases on the
 * handshake use (a peer of another cluster, a tampered cluster id). Every
 * case asserts its own log line, so the log's rate limit is off here, and
 * so is the idle deadline (the registering connection stays open, silent,
 * through the whole run); both are tested in test_dist_hostile.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <graphrun.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "distributed/loglimit_internal.h"
#include "distributed/server_internal.h" /* a server's finished-step list (one case) */
#include "distributed/transport_internal.h"
#include "distributed/wire_internal.h"
#include "gr_test.h"

#define TIMEOUT_MS 10000
#define SECRET     "bad-input-secret"
#define CLUSTER    "bad-input"
#define TASK0      "/job:worker/replica:0/task:0"
#define DEV0       TASK0 "/device:CPU:0"
#define TASK1      "/job:worker/replica:0/task:1" /* a peer that is not running */
#define DEV1       TASK1 "/device:CPU:0"
#define PEER_INC   0x1111222233334444ull /* task 1's incarnation, as registered */
#define KEY_INC    0x0123456789abcdefull /* the session incarnation in keys */

static gr_server *srv, *srv_secret;
static int port, port_secret;
static uint64_t inc0;     /* srv's incarnation */
static uint64_t handle_a; /* x (float32 [3]) fed, x * x fetched */
static uint64_t handle_b; /* (1 + 2) received from task 1, + 10 fetched */
static char key_b[512];   /* the rendezvous key graph b's _recv waits on */
static uint64_t next_run = 1000;

/* ---- the servers' log ---------------------------------------------------- */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char *log_buf;
static size_t log_len, log_cap;
static int64_t log_lines;

static void log_hook(void *arg, const char *line) {
  (void)arg;
  size_t n = strlen(line);
  pthread_mutex_lock(&log_mu);
  log_lines++;
  if (log_len + n + 2 > log_cap) {
    size_t cap = log_cap ? 2 * log_cap : 1 << 16;
    while (cap < log_len + n + 2) cap *= 2;
    char *more = cap <= (1u << 26) ? realloc(log_buf, cap) : NULL;
    if (!more) { /* keep the newest lines: forget the old ones */
      log_len = 0;
    } else {
      log_buf = more;
      log_cap = cap;
    }
  }
  if (log_len + n + 2 <= log_cap) {
    memcpy(log_buf + log_len, line, n);
    log_len += n;
    log_buf[log_len++] = '\n';
    log_buf[log_len] = '\0';
  }
  pthread_mutex_unlock(&log_mu);
}

static void log_reset(void) {
  pthread_mutex_lock(&log_mu);
  log_len = 0;
  if (log_buf) log_buf[0] = '\0';
  pthread_mutex_unlock(&log_mu);
}

static int64_t log_count(void) {
  pthread_mutex_lock(&log_mu);
  int64_t n = log_lines;
  pthread_mutex_unlock(&log_mu);
  return n;
}

static bool log_has(const char *sub) {
  pthread_mutex_lock(&log_mu);
  bool has = log_buf && strstr(log_buf, sub);
  pthread_mutex_unlock(&log_mu);
  return has;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Waits until the log holds sub (the server logs from its threads). */
static bool log_wait(const char *sub, int ms) {
  int64_t deadline = gr_wire_now_ms() + ms;
  while (!log_has(sub)) {
    if (gr_wire_now_ms() > deadline) return false;
    sleep_ms(1);
  }
  return true;
}

static void log_dump(void) {
  pthread_mutex_lock(&log_mu);
  const char *tail = log_buf ? log_buf : "";
  if (log_len > 4000) tail = log_buf + log_len - 4000;
  fprintf(stderr, "---- the server's log (last lines) ----\n%s----\n", tail);
  pthread_mutex_unlock(&log_mu);
}

#define CHECK_LOG(sub)                                                                             \
  do {                                                                                             \
    const char *want_ = (sub);                                                                     \
    bool found_ = log_wait(want_, TIMEOUT_MS);                                                     \
    GR_CHECK_MSG(found_, "the server did not log '%s'", want_);                                    \
    if (!found_) log_dump();                                                                       \
  } while (0)

/* ---- bytes and msgpack --------------------------------------------------- */

typedef struct bytes {
  uint8_t *p;
  size_t n, cap;
} bytes;

static void b_add(bytes *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 256;
    while (cap < b->n + n) cap *= 2;
    uint8_t *more = realloc(b->p, cap);
    if (!more) abort();
    b->p = more;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->n, p, n);
  b->n += n;
}

static void b_zeros(bytes *b, size_t n) {
  uint8_t z[64] = {0};
  while (n > 0) {
    size_t k = n < sizeof z ? n : sizeof z;
    b_add(b, z, k);
    n -= k;
  }
}

static void b_free(bytes *b) {
  free(b->p);
  *b = (bytes){0};
}

typedef struct mp { /* a message's map being built */
  msgpack_sbuffer sb;
  msgpack_packer pk;
} mp;

static void mp_init(mp *m) {
  msgpack_sbuffer_init(&m->sb);
  msgpack_packer_init(&m->pk, &m->sb, msgpack_sbuffer_write);
}
static void mp_free(mp *m) {
  msgpack_sbuffer_destroy(&m->sb);
}
static void mp_str(mp *m, const char *s) {
  gr_pack_str(&m->pk, s);
}
static void mp_u64(mp *m, const char *key, uint64_t v) {
  mp_str(m, key);
  msgpack_pack_uint64(&m->pk, v);
}
static void mp_kstr(mp *m, const char *key, const char *v) {
  mp_str(m, key);
  mp_str(m, v);
}

/* A tensor descriptor [dtype, dims, offset, bytes]. */
static void pk_tensor(msgpack_packer *pk, const char *dtype, int rank, const int64_t *dims,
                      int64_t off, int64_t nbytes) {
  msgpack_pack_array(pk, 4);
  gr_pack_str(pk, dtype);
  msgpack_pack_array(pk, (size_t)rank);
  for (int d = 0; d < rank; d++) msgpack_pack_int64(pk, dims[d]);
  msgpack_pack_int64(pk, off);
  msgpack_pack_int64(pk, nbytes);
}

static void frame_header(bytes *out, uint8_t version, uint8_t type, uint16_t flags, uint32_t hl,
                         uint32_t bl) {
  gr_frame_header h = {
      .version = version, .type = type, .flags = flags, .header_len = hl, .body_len = bl};
  uint8_t hb[GR_WIRE_HEADER_SIZE];
  gr_wire_put_frame_header(hb, &h);
  b_add(out, hb, sizeof hb);
}

/* A frame of type with the map m and a body of bl bytes. */
static void frame(bytes *out, int type, const mp *m, const void *body, size_t bl) {
  frame_header(out, GR_WIRE_VERSION, (uint8_t)type, 0, (uint32_t)m->sb.size, (uint32_t)bl);
  b_add(out, m->sb.data, m->sb.size);
  if (bl) b_add(out, body, bl);
}

/* A frame whose map is the raw bytes map (any bytes at all). */
static void frame_raw_map(bytes *out, int type, const void *map, size_t mn) {
  frame_header(out, GR_WIRE_VERSION, (uint8_t)type, 0, (uint32_t)mn, 0);
  b_add(out, map, mn);
}

/* GET_STATUS {id}. */
static void status_frame(bytes *out, uint64_t id) {
  mp m;
  mp_init(&m);
  msgpack_pack_map(&m.pk, 1);
  mp_u64(&m, "id", id);
  frame(out, GR_MSG_GET_STATUS, &m, NULL, 0);
  mp_free(&m);
}

/* ---- raw connections ----------------------------------------------------- */

typedef struct rc {
  int fd;
  char me[64]; /* this end as the server names it: "127.0.0.1:PORT" */
} rc;

static bool rc_connect(rc *c, int p, int rcvbuf) {
  c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->fd < 0) return false;
  if (rcvbuf > 0) setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(c->fd, (struct sockaddr *)&a, sizeof a) != 0) { /* loopback: at once */
    close(c->fd);
    c->fd = -1;
    return false;
  }
  struct sockaddr_in me;
  socklen_t sl = sizeof me;
  getsockname(c->fd, (struct sockaddr *)&me, &sl);
  snprintf(c->me, sizeof c->me, "127.0.0.1:%d", ntohs(me.sin_port));
  fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
  return true;
}

static void rc_close(rc *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
}

static bool rc_poll(rc *c, short ev, int64_t deadline) {
  for (;;) {
    int64_t left = deadline - gr_wire_now_ms();
    if (left <= 0) return false;
    struct pollfd p = {.fd = c->fd, .events = ev};
    int r = poll(&p, 1, (int)left);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

static bool rc_read_exact(rc *c, void *buf, size_t n, int64_t deadline) {
  size_t got = 0;
  while (got < n) {
    if (!rc_poll(c, POLLIN, deadline)) return false;
    ssize_t r = read(c->fd, (char *)buf + got, n - got);
    if (r == 0) return false;
    if (r < 0 && errno != EINTR && errno != EAGAIN) return false;
    if (r > 0) got += (size_t)r;
  }
  return true;
}

/* Sends all of p; false when the server closed (or nothing moved for
 * TIMEOUT_MS). */
static bool rc_send(rc *c, const void *p, size_t n) {
  size_t done = 0;
  int64_t deadline = gr_wire_now_ms() + TIMEOUT_MS;
  while (done < n) {
    if (!rc_poll(c, POLLOUT, deadline)) return false;
    ssize_t w = send(c->fd, (const char *)p + done, n - done, MSG_NOSIGNAL);
    if (w < 0 && errno != EINTR && errno != EAGAIN) return false;
    if (w > 0) done += (size_t)w, deadline = gr_wire_now_ms() + TIMEOUT_MS;
  }
  return true;
}

/* Reads and drops what arrives until the server closes the connection (end
 * of file or reset): true; false when it is still open after TIMEOUT_MS. */
static bool rc_closed(rc *c) {
  int64_t deadline = gr_wire_now_ms() + TIMEOUT_MS;
  char buf[4096];
  for (;;) {
    if (!rc_poll(c, POLLIN, deadline)) return false;
    ssize_t r = read(c->fd, buf, sizeof buf);
    if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) return true;
  }
}

/* As rc_closed; *got: the bytes that arrived before the end. */
static bool rc_closed_n(rc *c, size_t *got) {
  int64_t deadline = gr_wire_now_ms() + TIMEOUT_MS;
  char buf[4096];
  *got = 0;
  for (;;) {
    if (!rc_poll(c, POLLIN, deadline)) return false;
    ssize_t r = read(c->fd, buf, sizeof buf);
    if (r > 0) *got += (size_t)r;
    if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) return true;
  }
}

/* One frame: its header, map (parsed) and body (malloc'd, or NULL). */
typedef struct inframe {
  gr_frame_header h;
  gr_msg m;
  uint8_t *body;
} inframe;

static void inframe_free(inframe *f) {
  gr_msg_free(&f->m);
  free(f->body);
  f->body = NULL;
}

static bool rc_read_frame(rc *c, inframe *f) {
  int64_t deadline = gr_wire_now_ms() + TIMEOUT_MS;
  uint8_t hb[GR_WIRE_HEADER_SIZE];
  gr_error err;
  memset(f, 0, sizeof *f);
  if (!rc_read_exact(c, hb, sizeof hb, deadline)) return false;
  if (gr_wire_parse_frame_header(hb, (size_t)1 << 28, &f->h, &err) != GR_OK) {
    fprintf(stderr, "a bad frame from the server: %s\n", err.msg);
    return false;
  }
  uint8_t *map = malloc(f->h.header_len);
  f->body = f->h.body_len ? malloc(f->h.body_len) : NULL;
  bool ok = map && (!f->h.body_len || f->body) &&
            rc_read_exact(c, map, f->h.header_len, deadline) &&
            gr_msg_parse(&f->m, map, f->h.header_len, &err) == GR_OK;
  free(map);
  if (ok && f->h.body_len && !rc_read_exact(c, f->body, f->h.body_len, deadline)) {
    gr_msg_free(&f->m);
    ok = false;
  }
  if (!ok) {
    free(f->body);
    f->body = NULL;
  }
  return ok;
}

/* Connects and reads the server's HELLO. */
static bool rc_hello(rc *c, bool *auth, uint8_t nonce[GR_AUTH_NONCE]) {
  inframe f;
  gr_error err;
  if (!rc_read_frame(c, &f)) return rc_close(c), false;
  bool ok = f.h.type == GR_MSG_HELLO && gr_msg_bool(&f.m.root, "auth", auth, &err) == GR_OK;
  const void *n;
  if (ok && *auth) ok = gr_msg_bin(&f.m.root, "nonce", GR_AUTH_NONCE, &n, &err) == GR_OK;
  if (ok && *auth) memcpy(nonce, n, GR_AUTH_NONCE);
  inframe_free(&f);
  if (!ok) rc_close(c);
  return ok;
}

static bool rc_open_ex(rc *c, int p, bool *auth, uint8_t nonce[GR_AUTH_NONCE]) {
  return rc_connect(c, p, 0) && rc_hello(c, auth, nonce);
}

/* An AUTH frame of the fields given: cluster (NULL: left out), a nonce of
 * nonce_len bytes (0: left out), mac (NULL: left out). */
static void auth_fields(bytes *out, const char *cluster, const uint8_t *nonce, size_t nonce_len,
                        const uint8_t *mac) {
  mp m;
  mp_init(&m);
  msgpack_pack_map(&m.pk, (cluster != NULL) + (nonce_len > 0) + (mac != NULL));
  if (cluster) {
    mp_str(&m, "cluster");
    mp_str(&m, cluster);
  }
  if (nonce_len) {
    mp_str(&m, "nonce");
    msgpack_pack_bin(&m.pk, nonce_len);
    msgpack_pack_bin_body(&m.pk, nonce, nonce_len);
  }
  if (mac) {
    mp_str(&m, "mac");
    msgpack_pack_bin(&m.pk, GR_AUTH_MAC);
    msgpack_pack_bin_body(&m.pk, mac, GR_AUTH_MAC);
  }
  frame(out, GR_MSG_AUTH, &m, NULL, 0);
  mp_free(&m);
}

/* An AUTH frame answering a HELLO that said cluster `seen` (and snonce)
 * as a client of cluster `claimed`: with a secret, its MAC over both ids;
 * without, the cluster alone (to an insecure server). */
static void auth_frame_ex(bytes *out, const char *secret, const uint8_t snonce[GR_AUTH_NONCE],
                          const char *seen, const char *claimed) {
  uint8_t cnonce[GR_AUTH_NONCE], mac[GR_AUTH_MAC];
  for (int i = 0; i < GR_AUTH_NONCE; i++) cnonce[i] = (uint8_t)(i * 7 + 1);
  if (secret) gr_auth_mac(secret, "client", snonce, cnonce, seen, claimed, 0, mac);
  auth_fields(out, claimed, cnonce, secret ? GR_AUTH_NONCE : 0, secret ? mac : NULL);
}

/* An AUTH frame answering the server's nonce with secret, of CLUSTER. */
static void auth_frame(bytes *out, const char *secret, const uint8_t snonce[GR_AUTH_NONCE]) {
  auth_frame_ex(out, secret, snonce, CLUSTER, CLUSTER);
}

/* The handshake on a connection to the server on port p: srv's without a
 * secret, srv_secret's authenticated. */
static bool rc_handshake(rc *c, int p) {
  bool auth = p == port;
  uint8_t nonce[GR_AUTH_NONCE];
  if (!rc_hello(c, &auth, nonce)) return false;
  bytes a = {0};
  auth_frame(&a, p == port ? NULL : SECRET, nonce);
  inframe f;
  bool ok = auth == (p != port) && rc_send(c, a.p, a.n) && rc_read_frame(c, &f);
  b_free(&a);
  if (ok) {
    ok = f.h.type == GR_MSG_AUTH_OK;
    inframe_free(&f);
  }
  if (!ok) rc_close(c);
  return ok;
}

/* A connection to the server on port p, past the handshake. */
static bool rc_open_on(rc *c, int p) {
  return rc_connect(c, p, 0) && rc_handshake(c, p);
}

/* A connection to srv, past the handshake (no authentication). */
static bool rc_open(rc *c) {
  return rc_open_on(c, port);
}

/* A RESPONSE: its id, code and message (code 0: msg ""); f keeps the rest. */
typedef struct resp {
  uint64_t id, code;
  char msg[GR_ERROR_MSG_MAX];
  inframe f;
} resp;

static bool rc_response(rc *c, resp *r) {
  gr_error err;
  memset(r, 0, sizeof *r);
  if (!rc_read_frame(c, &r->f)) return false;
  if (r->f.h.type != GR_MSG_RESPONSE || gr_msg_u64(&r->f.m.root, "id", &r->id, &err) != GR_OK ||
      gr_msg_u64(&r->f.m.root, "code", &r->code, &err) != GR_OK) {
    inframe_free(&r->f);
    return false;
  }
  if (r->code != 0 && gr_msg_str(&r->f.m.root, "msg", r->msg, sizeof r->msg, &err) != GR_OK)
    snprintf(r->msg, sizeof r->msg, "(no message)");
  return true;
}

/* ---- the well-behaved clients -------------------------------------------- */

/* A raw GET_STATUS round trip on a new connection. */
static bool serving_raw(int p) {
  rc c;
  if (!rc_open_on(&c, p)) {
    fprintf(stderr, "serving_raw: cannot connect\n");
    return false;
  }
  bytes b = {0};
  status_frame(&b, 42);
  resp r;
  bool ok = rc_send(&c, b.p, b.n) && rc_response(&c, &r);
  b_free(&b);
  if (ok) {
    char task[128] = "";
    gr_error err;
    ok = r.id == 42 && r.code == 0 &&
         gr_msg_str(&r.f.m.root, "task", task, sizeof task, &err) == GR_OK &&
         !strcmp(task, p == port ? TASK0 : "/job:ps/replica:0/task:0");
    inframe_free(&r.f);
  }
  rc_close(&c);
  if (!ok) fprintf(stderr, "serving_raw: no good GET_STATUS response\n");
  return ok;
}

/* A master and a session on the server's task: (x * x + 1) for a fed x. */
static bool serving_master(int p) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", p);
  const char *addrs[] = {addr};
  gr_master_options mo = {.num_tasks = 1,
                          .addresses = addrs,
                          .secret = p == port ? NULL : SECRET,
                          .insecure = p == port,
                          .cluster_id = CLUSTER,
                          .connect_timeout_ms = TIMEOUT_MS,
                          .step_timeout_ms = TIMEOUT_MS};
  gr_master *m;
  gr_error err;
  if (gr_master_new(&mo, &m, &err) != GR_OK) {
    fprintf(stderr, "serving_master: %s\n", err.msg);
    return false;
  }
  gr_graph *g = gr_graph_new();
  gr_graph_push_device_scope(g, p == port ? "/job:worker/task:0" : "/job:ps/task:0");
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_make(1, (int64_t[]){3}));
  gr_output y = gr_add(g, gr_mul(g, x, x), gr_const_f32(g, 1));
  gr_graph_pop_device_scope(g);
  bool ok = false;
  gr_session *s = gr_master_session_new(m, g, NULL, &err);
  gr_tensor xv, out;
  if (s &&
      gr_tensor_from_data(&xv, GR_F32, &(gr_shape){1, {3}}, (float[]){1, 2, 3}, &err) == GR_OK) {
    gr_feed f = {x, &xv};
    if (gr_session_run(s, &f, 1, &y, 1, &out, NULL, 0, &err) == GR_OK) {
      ok = gr_tensor_get_f64(&out, 0) == 2 && gr_tensor_get_f64(&out, 1) == 5 &&
           gr_tensor_get_f64(&out, 2) == 10;
      gr_tensor_release(&out);
    }
    gr_tensor_release(&xv);
  }
  if (!ok) fprintf(stderr, "serving_master: %s\n", err.msg);
  gr_session_free(s);
  gr_graph_free(g);
  gr_master_free(m);
  return ok;
}

#define CHECK_SERVING()                                                                            \
  do {                                                                                             \
    GR_CHECK(serving_raw(port));                                                                   \
    GR_CHECK(serving_master(port));                                                                \
  } while (0)

#define CHECK_SERVING_SECRET()                                                                     \
  do {                                                                                             \
    GR_CHECK(serving_raw(port_secret));                                                            \
    GR_CHECK(serving_master(port_secret));                                                         \
  } while (0)

/* ---- cases' helpers ------------------------------------------------------ */

/* Sends bytes on c (open, past HELLO); the server must log "WHAT from ME:
 * want" and close the connection, which is closed here too. */
static void expect_logged_close(rc *c, const void *p, size_t n, const char *what,
                                const char *want) {
  rc_send(c, p, n); /* may fail once the server closed */
  char line[1024];
  snprintf(line, sizeof line, "%s from %s: %s", what, c->me, want);
  CHECK_LOG(line);
  GR_CHECK(rc_closed(c));
  rc_close(c);
}

/* Sends bytes on a new connection; the server must log "bad frame from
 * ME: want" and close the connection. */
static void expect_bad_frame(const void *p, size_t n, const char *want) {
  rc c;
  GR_CHECK(rc_open(&c));
  if (c.fd >= 0) expect_logged_close(&c, p, n, "bad frame", want);
}

/* Sends a request on a new connection; its response must carry code and a
 * message containing want (code 0: a success, *out keeps it when not NULL). */
static void expect_response(const bytes *req, uint64_t id, gr_status code, const char *want,
                            resp *out) {
  if (out) memset(out, 0, sizeof *out), out->code = UINT64_MAX;
  rc c;
  GR_CHECK(rc_open(&c));
  if (c.fd < 0) return;
  resp r;
  bool ok = rc_send(&c, req->p, req->n) && rc_response(&c, &r);
  GR_CHECK_MSG(ok, "no response to a %s request", gr_msg_type_name(req->p[5]));
  if (ok) {
    GR_CHECK_EQ_INT(r.id, id);
    GR_CHECK_MSG(r.code == (uint64_t)code, "code %s, want %s: %s",
                 gr_status_name((gr_status)r.code), gr_status_name(code), r.msg);
    if (want) GR_CHECK_STR_CONTAINS(r.msg, want);
    if (out)
      *out = r;
    else
      inframe_free(&r.f);
  }
  rc_close(&c);
}

/* A RUN map's first entries: id, handle, inc, step, run, seed (6 of entries). */
/* Frames the map m (and body) as a message of type, expects the response
 * (id, code, want) and frees m. */
static void expect_map_response(mp *m, int type, const void *body, size_t bl, uint64_t id,
                                gr_status code, const char *want) {
  bytes f = {0};
  frame(&f, type, m, body, bl);
  expect_response(&f, id, code, want, NULL);
  b_free(&f);
  mp_free(m);
}

static void run_map(mp *m, uint32_t entries, uint64_t id, uint64_t handle, uint64_t inc,
                    uint64_t run) {
  msgpack_pack_map(&m->pk, entries);
  mp_u64(m, "id", id);
  mp_u64(m, "handle", handle);
  mp_u64(m, "inc", inc);
  mp_u64(m, "step", 1);
  mp_u64(m, "run", run);
  mp_u64(m, "seed", 7);
}

/* Starts m as a RUN map of graph a registered as handle (id, run) whose
 * feeds are one [0, ...] pair: the caller packs the tensor descriptor. */
static void feed0_run(mp *m, uint64_t id, uint64_t run, uint64_t handle) {
  mp_init(m);
  run_map(m, 7, id, handle, inc0, run);
  mp_str(m, "feeds");
  msgpack_pack_array(&m->pk, 1);
  msgpack_pack_array(&m->pk, 2);
  msgpack_pack_int(&m->pk, 0);
}

static void feed0_run_a(mp *m, uint64_t id, uint64_t run) {
  feed0_run(m, id, run, handle_a);
}

/* A RUN of graph a (as handle) whose one feed is [0, tensor descriptor]
 * with a body of body_len bytes holding the floats 1, 2, 3 at offset 0
 * (bool: 1, 1, 0). */
static void run_frame(bytes *out, uint64_t handle, uint64_t id, uint64_t run, const char *dtype,
                      int rank, const int64_t *dims, int64_t off, int64_t nbytes, size_t body_len) {
  mp m;
  feed0_run(&m, id, run, handle);
  pk_tensor(&m.pk, dtype, rank, dims, off, nbytes);
  bytes body = {0};
  float v[3] = {1, 2, 3};
  b_add(&body, v, body_len < sizeof v ? body_len : sizeof v);
  if (body_len > sizeof v) b_zeros(&body, body_len - sizeof v);
  frame(out, GR_MSG_RUN, &m, body.p, body_len);
  b_free(&body);
  mp_free(&m);
}

static void run_a_frame(bytes *out, uint64_t id, uint64_t run, const char *dtype, int rank,
                        const int64_t *dims, int64_t off, int64_t nbytes, size_t body_len) {
  run_frame(out, handle_a, id, run, dtype, rank, dims, off, nbytes, body_len);
}

/* A well-formed RUN of graph a: x = {1, 2, 3}. */
static void good_run_a(bytes *out, uint64_t id, uint64_t run) {
  run_a_frame(out, id, run, "float32", 1, (int64_t[]){3}, 0, 12, 64);
}

/* Checks a RUN response of graph a: fetch 0 = {1, 4, 9}. */
static bool fetch_a_ok(const resp *r) {
  const msgpack_object_array *fx;
  gr_error err;
  if (r->code != 0 || gr_msg_array(&r->f.m.root, "fetches", 4, &fx, &err) != GR_OK || fx->size != 1)
    return false;
  const msgpack_object *t = &fx->ptr[0];
  if (t->type != MSGPACK_OBJECT_ARRAY || t->via.array.size != 2) return false;
  const msgpack_object *d = &t->via.array.ptr[1];
  if (d->type != MSGPACK_OBJECT_ARRAY || d->via.array.size != 4) return false;
  uint64_t off = d->via.array.ptr[2].via.u64, n = d->via.array.ptr[3].via.u64;
  float v[3];
  if (n != sizeof v || off + n > r->f.h.body_len) return false;
  memcpy(v, r->f.body + off, sizeof v);
  return v[0] == 1 && v[1] == 4 && v[2] == 9;
}

/* The one float fetched by a RUN response (graph b). */
static float fetch_float(const resp *r) {
  const msgpack_object_array *fx;
  gr_error err;
  if (r->code != 0 || gr_msg_array(&r->f.m.root, "fetches", 4, &fx, &err) != GR_OK ||
      fx->size != 1 || fx->ptr[0].type != MSGPACK_OBJECT_ARRAY)
    return -1;
  const msgpack_object *d = &fx->ptr[0].via.array.ptr[1];
  if (d->type != MSGPACK_OBJECT_ARRAY || d->via.array.size != 4) return -1;
  uint64_t off = d->via.array.ptr[2].via.u64;
  float v;
  if (off + sizeof v > r->f.h.body_len) return -1;
  memcpy(&v, r->f.body + off, sizeof v);
  return v;
}

/* A RUN of graph b (no feeds): it waits for task 1's push. */
static void run_b_frame(bytes *out, uint64_t id, uint64_t run) {
  mp m;
  mp_init(&m);
  run_map(&m, 7, id, handle_b, inc0, run);
  mp_str(&m, "feeds");
  msgpack_pack_array(&m.pk, 0);
  frame(out, GR_MSG_RUN, &m, NULL, 0);
  mp_free(&m);
}

/* Starts m as the map of a live TENSOR push for run under key, as from
 * at incarnation inc, of a float32 scalar said to have nbytes bytes. */
static void push_map(mp *m, uint64_t run, const char *key, const char *from, uint64_t inc,
                     int64_t nbytes) {
  mp_init(m);
  msgpack_pack_map(&m->pk, 6);
  mp_u64(m, "run", run);
  mp_kstr(m, "key", key);
  mp_kstr(m, "from", from);
  mp_u64(m, "inc", inc);
  mp_str(m, "dead");
  msgpack_pack_false(&m->pk);
  mp_str(m, "value");
  pk_tensor(&m->pk, "float32", 0, NULL, 0, nbytes);
}

/* A TENSOR push of the float v for run under key, as from at incarnation inc. */
static void push_frame(bytes *out, uint64_t run, const char *key, const char *from, uint64_t inc,
                       float v) {
  mp m;
  push_map(&m, run, key, from, inc, 4);
  uint8_t body[64] = {0};
  memcpy(body, &v, sizeof v);
  frame(out, GR_MSG_TENSOR, &m, body, sizeof body);
  mp_free(&m);
}

/* The serialized graph of one partition and its endpoints, for REGISTER. */
typedef struct part {
  void *graph;
  size_t size;
  char feed[128], fetch[128]; /* node names ("" when none) */
} part;

/* Packs [device, offset, bytes, feeds, fetches] of p at body offset off. */
static void pk_part(msgpack_packer *pk, const char *device, const part *p, size_t off) {
  msgpack_pack_array(pk, 5);
  gr_pack_str(pk, device);
  msgpack_pack_uint64(pk, off);
  msgpack_pack_uint64(pk, p->size);
  msgpack_pack_array(pk, p->feed[0] ? 1 : 0);
  if (p->feed[0]) {
    msgpack_pack_array(pk, 3);
    gr_pack_str(pk, p->feed);
    msgpack_pack_int(pk, 0);
    msgpack_pack_int(pk, 0);
  }
  msgpack_pack_array(pk, 1);
  msgpack_pack_array(pk, 3);
  gr_pack_str(pk, p->fetch);
  msgpack_pack_int(pk, 0);
  msgpack_pack_int(pk, 0);
}

/* REGISTER {id, inc, container, private, peers: [task 1], parts: [p on
 * device]} with p's graph as the body. */
static void register_frame_in(bytes *out, uint64_t id, uint64_t inc, const char *device,
                              const part *p, const char *container, bool priv) {
  mp m;
  mp_init(&m);
  msgpack_pack_map(&m.pk, 6);
  mp_u64(&m, "id", id);
  mp_u64(&m, "inc", inc);
  mp_kstr(&m, "container", container);
  mp_str(&m, "private");
  if (priv)
    msgpack_pack_true(&m.pk);
  else
    msgpack_pack_false(&m.pk);
  mp_str(&m, "peers");
  msgpack_pack_array(&m.pk, 1);
  msgpack_pack_array(&m.pk, 3);
  gr_pack_str(&m.pk, TASK1);
  gr_pack_str(&m.pk, "127.0.0.1:1");
  msgpack_pack_uint64(&m.pk, PEER_INC);
  mp_str(&m, "parts");
  msgpack_pack_array(&m.pk, 1);
  pk_part(&m.pk, device, p, 0);
  frame(out, GR_MSG_REGISTER, &m, p->graph, p->size);
  mp_free(&m);
}

/* The same into the shared container "bad-input" that the cases use. */
static void register_frame(bytes *out, uint64_t id, uint64_t inc, const char *device,
                           const part *p) {
  register_frame_in(out, id, inc, device, p, "bad-input", false);
}

static part part_a, part_b;

/* Graph a: x (float32 [3], fed) and y = x * x, all on DEV0. */
static bool make_part_a(part *p) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_make(1, (int64_t[]){3}));
  gr_output y = gr_mul(g, x, x);
  gr_error err;
  snprintf(p->feed, sizeof p->feed, "%s", x.node->name);
  snprintf(p->fetch, sizeof p->fetch, "%s", y.node->name);
  bool ok = gr_wire_encode_graph(g, NULL, &p->graph, &p->size, &err) == GR_OK;
  if (!ok) fprintf(stderr, "graph a: %s\n", err.msg);
  gr_graph_free(g);
  return ok;
}

/* a = 1 + 2 on dev_a and b = a + 10 on dev_b, partitioned with fetches b
 * (and a first, when fetch_a); p: DEV0's partition, serialized, with its
 * first fetch; on_part (may be NULL) sees that partition first. */
static bool make_two_device_part(part *p, const char *dev_a, const char *dev_b, bool fetch_a,
                                 void (*on_part)(const gr_partition *pt)) {
  gr_graph *g = gr_graph_new();
  gr_output a = gr_add(g, gr_const_f32(g, 1), gr_const_f32(g, 2));
  gr_output b = gr_add(g, a, gr_const_f32(g, 10));
  int n = gr_graph_num_nodes(g);
  gr_node **nodes = calloc((size_t)n, sizeof *nodes);
  for (int i = 0; i < n; i++) {
    nodes[i] = gr_graph_node(g, i);
    nodes[i]->assigned_device = i <= a.node->id ? dev_a : dev_b;
  }
  gr_partition_options po = {.incarnation = KEY_INC};
  gr_partitions *ps = NULL;
  gr_error err;
  gr_output fetches[2] = {a, b};
  bool ok = gr_partition_graph(nodes, n, NULL, 0, fetch_a ? fetches : fetches + 1, fetch_a ? 2 : 1,
                               &po, &ps, &err) == GR_OK;
  if (!ok) fprintf(stderr, "two-device graph: %s\n", err.msg);
  for (int k = 0; ok && k < ps->num_parts; k++) {
    gr_partition *pt = &ps->parts[k];
    if (strcmp(pt->device, DEV0) != 0) continue;
    if (on_part) on_part(pt);
    p->feed[0] = '\0';
    snprintf(p->fetch, sizeof p->fetch, "%s", pt->fetches[0].node->name);
    ok = gr_wire_encode_graph(pt->graph, NULL, &p->graph, &p->size, &err) == GR_OK;
  }
  gr_partitions_free(ps);
  free(nodes);
  gr_graph_free(g);
  return ok && p->graph;
}

/* key_b: the key of the _recv of DEV0's partition pt. */
static void note_recv_key(const gr_partition *pt) {
  for (int id = 0; id < gr_graph_num_nodes(pt->graph); id++) {
    gr_node *nd = gr_graph_node(pt->graph, id);
    if (!strcmp(nd->op->name, "_recv"))
      snprintf(
          key_b, sizeof key_b, "%s;%016llx;%s;%s;:0", gr_node_attr_string(nd, "send_device", ""),
          (unsigned long long)gr_node_attr_int(nd, "incarnation", 0),
          gr_node_attr_string(nd, "recv_device", ""), gr_node_attr_string(nd, "tensor_name", ""));
  }
}

/* Graph b: a = 1 + 2 on task 1 (not running: the test pushes its value),
 * b = a + 10 on DEV0. DEV0's partition receives a. */
static bool make_part_b(part *p) {
  return make_two_device_part(p, DEV1, DEV0, false, note_recv_key) && key_b[0];
}

/* Graph c: a = 1 + 2 on DEV0, sent to b = a + 10 on task 1 (not running:
 * its address in the registrations refuses connections). DEV0's partition
 * pushes a to task 1, so registering it dials task 1. */
static bool make_part_c(part *p) {
  return make_two_device_part(p, DEV0, DEV1, true, NULL);
}

/* The connection the graphs were registered over: a server drops the
 * graphs of a client whose connection closes, so it stays open. */
static rc reg_conn = {.fd = -1};

/* Registers p on srv over reg_conn (request id: id); its handle (0 on failure). */
static uint64_t register_part_in(const part *p, uint64_t id, const char *container) {
  if (reg_conn.fd < 0 && !rc_open(&reg_conn)) return 0;
  bytes b = {0};
  register_frame_in(&b, id, inc0, DEV0, p, container, false);
  resp r;
  uint64_t handle = 0;
  gr_error err;
  if (rc_send(&reg_conn, b.p, b.n) && rc_response(&reg_conn, &r)) {
    if (r.code != 0 || gr_msg_u64(&r.f.m.root, "handle", &handle, &err) != GR_OK) handle = 0;
    inframe_free(&r.f);
  }
  b_free(&b);
  return handle;
}

static uint64_t register_part(const part *p, uint64_t id) {
  return register_part_in(p, id, "bad-input");
}

/* ---- registrations that wait for their peers ----------------------------- */

/* Five registrations whose sends push to a task that refuses connections
 * (more than the server's four register threads): each waits for its dial
 * (retried for 10 s), without a thread. Meanwhile another client registers
 * a graph and runs a step, answered while all five still wait (when a
 * registration dialed on a register thread, the fifth and this one queued
 * behind four dials); then each of the five is answered with the dial's
 * error. */
static void test_registrations_do_not_wait_for_dials(void) {
  enum { SLOW = 5 };
  part pc = {0};
  GR_CHECK(make_part_c(&pc));
  rc slow[SLOW];
  for (int i = 0; i < SLOW; i++) {
    slow[i].fd = -1;
    bytes b = {0};
    register_frame_in(&b, 600 + (uint64_t)i, inc0, DEV0, &pc, "bad-input", false);
    GR_CHECK(pc.graph && rc_open(&slow[i]) && rc_send(&slow[i], b.p, b.n));
    b_free(&b);
  }
  rc fast;
  GR_CHECK(rc_open(&fast));
  bytes b = {0};
  register_frame(&b, 700, inc0, DEV0, &part_a);
  resp r;
  uint64_t handle = 0;
  gr_error err;
  GR_CHECK(rc_send(&fast, b.p, b.n) && rc_response(&fast, &r));
  b_free(&b);
  if (r.f.m.has_zone) {
    GR_CHECK_MSG(r.code == 0 && gr_msg_u64(&r.f.m.root, "handle", &handle, &err) == GR_OK, "%s",
                 r.msg);
    inframe_free(&r.f);
  }
  run_frame(&b, handle, 701, next_run++, "float32", 1, (int64_t[]){3}, 0, 12, 64);
  GR_CHECK(rc_send(&fast, b.p, b.n) && rc_response(&fast, &r));
  b_free(&b);
  if (r.f.m.has_zone) {
    GR_CHECK_MSG(fetch_a_ok(&r), "the step of graph a: %s", r.msg);
    inframe_free(&r.f);
  }
  for (int i = 0; i < SLOW; i++) /* none answered yet: their dials go on */
    GR_CHECK_MSG(!rc_poll(&slow[i], POLLIN, gr_wire_now_ms() + 1),
                 "registration %d was answered before the step of another client", i);
  for (int i = 0; i < SLOW; i++) {
    GR_CHECK(rc_poll(&slow[i], POLLIN, gr_wire_now_ms() + 60000));
    GR_CHECK(rc_response(&slow[i], &r));
    if (!r.f.m.has_zone) continue;
    GR_CHECK_EQ_INT(r.id, 600 + i);
    GR_CHECK_EQ_INT(r.code, GR_ERR_UNAVAILABLE);
    GR_CHECK_STR_CONTAINS(r.msg, TASK0 ": registering a graph: dialing " TASK1
                                       ": cannot connect to 127.0.0.1:1 within 10000 ms");
    inframe_free(&r.f);
    rc_close(&slow[i]);
  }
  rc_close(&fast);
  free(pc.graph);
  CHECK_SERVING();
}

/* ---- frames cut short ---------------------------------------------------- */

/* A valid frame cut after every length, then the peer disconnects: the
 * server logs that the connection ended in the middle of a frame (before
 * any byte: that it ended) and serves the next client. check_every: how
 * often the raw well-behaved client runs between cuts. */
static void truncated_at_every_byte(const bytes *f, size_t check_every) {
  for (size_t cut = 0; cut < f->n; cut++) {
    rc c;
    GR_CHECK(rc_open(&c));
    if (c.fd < 0) return;
    GR_CHECK(rc_send(&c, f->p, cut));
    char line[256];
    snprintf(line, sizeof line, "connection from %s ended: %s closed the connection%s", c.me, c.me,
             cut ? " in the middle of a frame" : "\n");
    rc_close(&c);
    if (cut) CHECK_LOG(line); /* a clean close between frames is not logged */
    if (cut % check_every == 0 || cut + 1 == f->n) GR_CHECK(serving_raw(port));
  }
}

static void test_truncated_get_status(void) {
  bytes f = {0};
  status_frame(&f, 5);
  truncated_at_every_byte(&f, 1);
  b_free(&f);
  CHECK_SERVING();
}

/* Header, map and body (a tensor) of a RUN, cut at every byte. */
static void test_truncated_run(void) {
  bytes f = {0};
  good_run_a(&f, 5, next_run++);
  truncated_at_every_byte(&f, 1);
  b_free(&f);
  CHECK_SERVING();
}

/* A REGISTER with its serialized graph, cut at every byte. */
static void test_truncated_register(void) {
  bytes f = {0};
  register_frame(&f, 5, inc0, DEV0, &part_a);
  truncated_at_every_byte(&f, 8);
  b_free(&f);
  CHECK_SERVING();
}

/* A TENSOR push (one way) cut at every byte. */
static void test_truncated_push(void) {
  bytes f = {0};
  push_frame(&f, 77, key_b, TASK1, PEER_INC, 3);
  truncated_at_every_byte(&f, 8);
  b_free(&f);
  CHECK_SERVING();
}

/* The header says 1 MiB of body; 1000 bytes come, then the peer leaves. */
static void test_body_cut_short(void) {
  bytes f = {0};
  run_a_frame(&f, 5, next_run++, "float32", 1, (int64_t[]){3}, 0, 12, 1 << 20);
  rc c;
  GR_CHECK(rc_open(&c));
  size_t head = f.n - (1 << 20);
  GR_CHECK(rc_send(&c, f.p, head + 1000));
  char line[256];
  snprintf(line, sizeof line, "%s closed the connection in the middle of a frame", c.me);
  rc_close(&c);
  CHECK_LOG(line);
  b_free(&f);
  CHECK_SERVING();
}

/* ---- frame headers ------------------------------------------------------- */

static void test_bad_magic(void) {
  bytes f = {0};
  status_frame(&f, 1);
  memcpy(f.p, "XRWF", 4);
  expect_bad_frame(f.p, f.n, "not a graphrun frame (bytes 58 52 57 46, want 'GRWF')");
  b_free(&f);
  CHECK_SERVING();
}

static void test_http_request(void) { /* someone points a browser at the port */
  const char *get = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
  expect_bad_frame(get, strlen(get), "not a graphrun frame (bytes 47 45 54 20");
  CHECK_SERVING();
}

/* 0 and 255; 1: before containers, 2: before cluster ids */
static void test_unknown_version(void) {
  const int versions[] = {0, 255, 1, 2};
  for (int i = 0; i < 4; i++) {
    bytes f = {0};
    status_frame(&f, 1);
    f.p[4] = (uint8_t)versions[i];
    char want[128];
    snprintf(want, sizeof want, "wire version %d, this build speaks version %d", versions[i],
             GR_WIRE_VERSION);
    expect_bad_frame(f.p, f.n, want);
    b_free(&f);
  }
  CHECK_SERVING();
}

static void test_unknown_type(void) {
  int types[] = {0, GR_MSG_COUNT, 200, 255};
  for (int i = 0; i < 4; i++) {
    bytes f = {0};
    status_frame(&f, 1);
    f.p[5] = (uint8_t)types[i];
    char want[64];
    snprintf(want, sizeof want, "unknown message type %d", types[i]);
    expect_bad_frame(f.p, f.n, want);
    b_free(&f);
  }
  CHECK_SERVING();
}

static void test_nonzero_flags(void) {
  bytes f = {0};
  status_frame(&f, 1);
  f.p[7] = 0x80;
  expect_bad_frame(f.p, f.n, "get_status frame: unknown flags 0x8000");
  b_free(&f);
  CHECK_SERVING();
}

/* Frames of a header alone: it announces hl map bytes (`zeros` of them
 * sent) and bl body bytes; each is refused from the 16 bytes of the header,
 * before the server allocates or waits for what it announces. secret: to
 * the server with a secret, before authenticating. */
static const struct header_case {
  bool secret;
  int type;
  uint32_t hl, bl, zeros;
  const char *want;
} header_cases[] = {
    {false, GR_MSG_GET_STATUS, 0, 0, 0, "get_status frame: header of 0 bytes (must be 1 to 256)"},
    {false, GR_MSG_GET_STATUS, 257, 0, 257,
     "get_status frame: header of 257 bytes (must be 1 to 256)"},
    {false, GR_MSG_REGISTER, (1u << 24) + 1, 0, 0,
     "register frame: header of 16777217 bytes (must be 1 to 16777216)"},
    {false, GR_MSG_TENSOR, 0xffffffffu, 0, 0,
     "tensor frame: header of 4294967295 bytes (must be 1 to 65536)"},
    /* a body where the type has none */
    {false, GR_MSG_GET_STATUS, 3, 1, 0, "get_status frame: body of 1 bytes is over the limit of 0"},
    {false, GR_MSG_ABORT, 3, 0x80000000u, 0,
     "abort frame: body of 2147483648 bytes is over the limit of 0"},
    {true, GR_MSG_AUTH, 241, 0, 241, "auth frame: header of 241 bytes (must be 1 to 240)"},
    {true, GR_MSG_AUTH, 100, 1 << 20, 0,
     "auth frame: body of 1048576 bytes is over the limit of 0"},
    /* a RUN (16 MiB header allowed once authenticated) */
    {true, GR_MSG_RUN, 1 << 24, 0, 0, "a run frame before authentication"},
};

static void expect_refused_unauthenticated(const void *p, size_t n, const char *want);

static void test_header_limits(void) {
  for (size_t i = 0; i < sizeof header_cases / sizeof header_cases[0]; i++) {
    const struct header_case *k = &header_cases[i];
    bytes f = {0};
    frame_header(&f, GR_WIRE_VERSION, (uint8_t)k->type, 0, k->hl, k->bl);
    b_zeros(&f, k->zeros);
    if (k->secret)
      expect_refused_unauthenticated(f.p, f.n, k->want);
    else
      expect_bad_frame(f.p, f.n, k->want);
    b_free(&f);
  }
  CHECK_SERVING();
  CHECK_SERVING_SECRET();
}

/* A body over the receiver's limit. */
static void test_body_over_max(void) {
  bytes f = {0};
  gr_transport_set_limits((size_t)1 << 30, 4096);
  run_a_frame(&f, 5, next_run++, "float32", 1, (int64_t[]){3}, 0, 12, 8192);
  expect_bad_frame(f.p, f.n, "run frame: body of 8192 bytes is over the limit of 4096");
  gr_transport_set_limits((size_t)1 << 30, 0xffffffffu);
  b_free(&f);
  CHECK_SERVING();
}

/* ---- the map ------------------------------------------------------------- */

#define BYTES(...) (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})

/* Messages (a frame's map) that are not a map or not msgpack the server
 * takes; counts and lengths over the bytes present are refused before
 * msgpack-c allocates for them. */
static const struct map_case {
  int type;
  const uint8_t *map;
  size_t n;
  const char *want;
} map_cases[] = {
    {GR_MSG_GET_STATUS, BYTES(0x92, 0x01, 0x02), /* [1, 2] */
     "get_status frame: the message is not a msgpack map"},
    {GR_MSG_RUN, BYTES(0xa2, 'i', 'd'), /* "id" */ "run frame: the message is not a msgpack map"},
    {GR_MSG_GET_STATUS, BYTES(0x81, 0xa2, 'i', 'd', 0xc1),
     "get_status frame: msgpack: type byte 0xc1 at byte 4 is not accepted (ext or reserved)"},
    {GR_MSG_GET_STATUS, BYTES(0x81, 0xa2, 'i', 'd', 0xd4, 0x01, 0x00), /* fixext 1 */
     "get_status frame: msgpack: type byte 0xd4 at byte 4 is not accepted"},
    {GR_MSG_GET_STATUS, BYTES(0x81, 0xa2, 'i', 'd', 0x01, 0x01, 0x02),
     "get_status frame: msgpack: 2 bytes after the end of the message at byte 5"},
    {GR_MSG_RUN, BYTES(0xdf, 0xff, 0xff, 0xff, 0xff, 0xc0),
     "run frame: msgpack: 8589934590 items at byte 5, but only 1 bytes follow"},
    {GR_MSG_VARS, BYTES(0x81, 0xa2, 'i', 'd', 0xdd, 0x7f, 0xff, 0xff, 0xff),
     "vars frame: msgpack: 2147483647 items at byte 9, but only 0 bytes follow"},
    {GR_MSG_GET_STATUS, BYTES(0x81, 0xdb, 0x10, 0x00, 0x00, 0x00, 'i', 'd'),
     "get_status frame: msgpack: a length of 268435456 bytes at byte 6 runs past the end (2 "
     "left)"},
    /* a key given twice: the reader would take whichever it looked at first */
    {GR_MSG_GET_STATUS, BYTES(0x82, 0xa2, 'i', 'd', 0x01, 0xa2, 'i', 'd', 0x02),
     "get_status frame: msgpack: a map gives key 'id' twice (again at byte 5)"},
    {GR_MSG_GET_STATUS, BYTES(0x82, 0xa2, 'i', 'd', 0x01, 0xd9, 0x02, 'i', 'd', 0x02), /* str 8 */
     "get_status frame: msgpack: a map gives key 'id' twice (again at byte 5)"},
    {GR_MSG_RUN,
     BYTES(0x82, 0xa2, 'i', 'd', 0x01, 0xa1, 'f', 0x82, 0xa1, 'k', 0xc0, 0xa1, 'k', 0xc0),
     "run frame: msgpack: a map gives key 'k' twice (again at byte 11)"},
};

static void test_bad_maps(void) {
  for (size_t i = 0; i < sizeof map_cases / sizeof map_cases[0]; i++) {
    bytes f = {0};
    frame_raw_map(&f, map_cases[i].type, map_cases[i].map, map_cases[i].n);
    expect_bad_frame(f.p, f.n, map_cases[i].want);
    b_free(&f);
  }
  CHECK_SERVING();
}

/* A map of 40 keys (sorted, not compared pairwise) that gives "k17" twice. */
static void test_duplicate_key_in_a_big_map(void) {
  mp m;
  mp_init(&m);
  msgpack_pack_map(&m.pk, 41);
  mp_u64(&m, "id", 5);
  for (int i = 0; i < 40; i++) {
    char k[8];
    snprintf(k, sizeof k, "k%d", i == 39 ? 17 : i);
    mp_u64(&m, k, (uint64_t)i);
  }
  bytes f = {0};
  frame(&f, GR_MSG_VARS, &m, NULL, 0);
  expect_bad_frame(f.p, f.n, "vars frame: msgpack: a map gives key 'k17' twice (again at byte");
  b_free(&f);
  mp_free(&m);
  CHECK_SERVING();
}

static void test_msgpack_too_deep(void) {
  bytes m = {0};
  const uint8_t head[] = {0x81, 0xa1, 'x'};
  b_add(&m, head, sizeof head);
  for (int i = 0; i < 10; i++) b_add(&m, (uint8_t[]){0x91}, 1);
  b_add(&m, (uint8_t[]){0x01}, 1);
  bytes f = {0};
  frame_raw_map(&f, GR_MSG_RUN, m.p, m.n);
  expect_bad_frame(f.p, f.n, "run frame: msgpack: nested too deeply at byte 9");
  b_free(&f);
  b_free(&m);
  CHECK_SERVING();
}

/* ---- request fields ------------------------------------------------------ */

/* A request without a usable id: nothing to answer to, the connection closes. */
static void expect_bad_request(const bytes *f, const char *want) {
  rc c;
  GR_CHECK(rc_open(&c));
  if (c.fd >= 0) expect_logged_close(&c, f->p, f->n, "bad request", want);
}

static void test_id_wrong_type(void) {
  mp m;
  mp_init(&m);
  msgpack_pack_map(&m.pk, 1);
  mp_kstr(&m, "id", "7");
  bytes f = {0};
  frame(&f, GR_MSG_GET_STATUS, &m, NULL, 0);
  expect_bad_request(&f, "get_status frame: field 'id' must be an unsigned integer, not a string; "
                         "closing that connection");
  b_free(&f);
  mp_free(&m);
  CHECK_SERVING();
}

static void test_id_negative(void) {
  mp m;
  mp_init(&m);
  msgpack_pack_map(&m.pk, 1);
  mp_str(&m, "id");
  msgpack_pack_int64(&m.pk, -5);
  bytes f = {0};
  frame(&f, GR_MSG_VARS, &m, NULL, 0);
  expect_bad_request(&f, "vars frame: field 'id' must be an unsigned integer, not a negative "
                         "integer");
  b_free(&f);
  mp_free(&m);
  CHECK_SERVING();
}

static void test_id_missing(void) {
  mp m;
  mp_init(&m);
  msgpack_pack_map(&m.pk, 1);
  mp_u64(&m, "di", 1);
  bytes f = {0};
  frame(&f, GR_MSG_REGISTER, &m, NULL, 0);
  expect_bad_request(&f, "register frame: field 'id' is missing");
  b_free(&f);
  mp_free(&m);
  mp_init(&m);
  msgpack_pack_map(&m.pk, 0);
  frame(&f, GR_MSG_RUN, &m, NULL, 0);
  expect_bad_request(&f, "run frame: field 'id' is missing");
  b_free(&f);
  mp_free(&m);
  CHECK_SERVING();
}

static void test_run_field_wrong_type(void) {
  mp m;
  mp_init(&m);
  msgpack_pack_map(&m.pk, 7);
  mp_u64(&m, "id", 3);
  mp_kstr(&m, "handle", "1");
  mp_u64(&m, "inc", inc0);
  mp_u64(&m, "step", 1);
  mp_u64(&m, "run", next_run++);
  mp_u64(&m, "seed", 1);
  mp_str(&m, "feeds");
  msgpack_pack_array(&m.pk, 0);
  expect_map_response(&m, GR_MSG_RUN, NULL, 0, 3, GR_ERR_INVALID_ARGUMENT,
                      "field 'handle' must be an unsigned integer, not a string");
  /* a float for the step, a bool for the run */
  mp_init(&m);
  msgpack_pack_map(&m.pk, 7);
  mp_u64(&m, "id", 4);
  mp_u64(&m, "handle", handle_a);
  mp_u64(&m, "inc", inc0);
  mp_str(&m, "step");
  msgpack_pack_double(&m.pk, 1.5);
  mp_str(&m, "run");
  msgpack_pack_true(&m.pk);
  mp_u64(&m, "seed", 1);
  mp_str(&m, "feeds");
  msgpack_pack_array(&m.pk, 0);
  expect_map_response(&m, GR_MSG_RUN, NULL, 0, 4, GR_ERR_INVALID_ARGUMENT,
                      "field 'step' must be an unsigned integer, not a float");
  CHECK_SERVING();
}

static void test_run_missing_field(void) {
  mp m;
  mp_init(&m);
  msgpack_pack_map(&m.pk, 6);
  mp_u64(&m, "id", 3);
  mp_u64(&m, "handle", handle_a);
  mp_u64(&m, "inc", inc0);
  mp_u64(&m, "step", 1);
  mp_u64(&m, "run", next_run++);
  mp_str(&m, "feeds");
  msgpack_pack_array(&m.pk, 0);
  expect_map_response(&m, GR_MSG_RUN, NULL, 0, 3, GR_ERR_INVALID_ARGUMENT,
                      "field 'seed' is missing");
  CHECK_SERVING();
}

static void test_run_feeds_not_an_array(void) {
  mp m;
  mp_init(&m);
  run_map(&m, 7, 3, handle_a, inc0, next_run++);
  mp_str(&m, "feeds");
  msgpack_pack_map(&m.pk, 0);
  bytes f = {0};
  frame(&f, GR_MSG_RUN, &m, NULL, 0);
  expect_response(&f, 3, GR_ERR_INVALID_ARGUMENT, "field 'feeds' must be an array, not a map",
                  NULL);
  b_free(&f);
  mp_free(&m);
  CHECK_SERVING();
}

/* Arrays longer than the field's maximum. */
static void test_arrays_too_long(void) {
  mp m;
  mp_init(&m);
  msgpack_pack_map(&m.pk, 2);
  mp_u64(&m, "id", 3);
  mp_str(&m, "names");
  msgpack_pack_array(&m.pk, (1u << 20) + 1);
  for (uint32_t i = 0; i < (1u << 20) + 1; i++) msgpack_pack_nil(&m.pk);
  expect_map_response(&m, GR_MSG_VARS, NULL, 0, 3, GR_ERR_INVALID_ARGUMENT,
                      "field 'names' has 1048577 items (at most 1048576)");
  mp_init(&m);
  msgpack_pack_map(&m.pk, 4);
  mp_u64(&m, "id", 4);
  mp_u64(&m, "inc", inc0);
  mp_str(&m, "peers");
  msgpack_pack_array(&m.pk, 0);
  mp_str(&m, "parts");
  msgpack_pack_array(&m.pk, 65);
  for (int i = 0; i < 65; i++) msgpack_pack_nil(&m.pk);
  expect_map_response(&m, GR_MSG_REGISTER, NULL, 0, 4, GR_ERR_INVALID_ARGUMENT,
                      "field 'parts' has 65 items (at most 64)");
  CHECK_SERVING();
}

/* A LEASE map: id, name, take, holder. */
static void lease_map(mp *m, uint64_t id, const char *name, bool take, const char *holder) {
  mp_init(m);
  msgpack_pack_map(&m->pk, 4);
  mp_u64(m, "id", id);
  mp_kstr(m, "name", name);
  mp_str(m, "take");
  if (take)
    msgpack_pack_true(&m->pk);
  else
    msgpack_pack_false(&m->pk);
  mp_kstr(m, "holder", holder);
}

/* A LEASE request with a field missing, of the wrong type or too long:
 * answered with an error naming the field. */
static void test_lease_bad_fields(void) {
  mp m;
  mp_init(&m);
  msgpack_pack_map(&m.pk, 3);
  mp_u64(&m, "id", 3);
  mp_kstr(&m, "name", "chief");
  mp_kstr(&m, "holder", "me");
  expect_map_response(&m, GR_MSG_LEASE, NULL, 0, 3, GR_ERR_INVALID_ARGUMENT,
                      "field 'take' is missing");
  mp_init(&m);
  msgpack_pack_map(&m.pk, 3);
  mp_u64(&m, "id", 4);
  mp_u64(&m, "name", 7);
  mp_kstr(&m, "holder", "me");
  expect_map_response(&m, GR_MSG_LEASE, NULL, 0, 4, GR_ERR_INVALID_ARGUMENT,
                      "field 'name' must be a string");
  char name[200];
  memset(name, 'n', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  lease_map(&m, 5, name, false, "");
  expect_map_response(&m, GR_MSG_LEASE, NULL, 0, 5, GR_ERR_INVALID_ARGUMENT,
                      "field 'name' is longer than");
  lease_map(&m, 6, "", true, "me");
  expect_map_response(&m, GR_MSG_LEASE, NULL, 0, 6, GR_ERR_INVALID_ARGUMENT,
                      "a lease needs a name");
  CHECK_SERVING();
}

/* ---- tensors ------------------------------------------------------------- */

static void expect_run_a_refused(const char *dtype, int rank, const int64_t *dims, int64_t off,
                                 int64_t nbytes, size_t body_len, gr_status code,
                                 const char *want) {
  bytes f = {0};
  run_a_frame(&f, 9, next_run++, dtype, rank, dims, off, nbytes, body_len);
  expect_response(&f, 9, code, want, NULL);
  b_free(&f);
}

/* A good RUN of graph a (request id, run id) on a new connection is
 * answered with its fetch. */
static void expect_good_run_a(uint64_t id, uint64_t run) {
  bytes f = {0};
  good_run_a(&f, id, run);
  resp r;
  expect_response(&f, id, GR_OK, NULL, &r);
  GR_CHECK(fetch_a_ok(&r));
  inframe_free(&r.f);
  b_free(&f);
}

/* The positive case first: the same frame with good values runs. */
static void test_run_good(void) {
  expect_good_run_a(9, next_run++);
  CHECK_SERVING();
}

static void test_tensor_bytes_do_not_match_shape(void) {
  expect_run_a_refused("float32", 1, (int64_t[]){3}, 0, 8, 64, GR_ERR_INVALID_ARGUMENT,
                       "tensor of float32 [3] needs 12 bytes, the message gives 8");
  expect_run_a_refused("float32", 2, (int64_t[]){3, 2}, 0, 12, 64, GR_ERR_INVALID_ARGUMENT,
                       "tensor of float32 [3, 2] needs 24 bytes, the message gives 12");
  CHECK_SERVING();
}

static void test_tensor_offset_not_aligned(void) {
  expect_run_a_refused("float32", 1, (int64_t[]){3}, 4, 12, 128, GR_ERR_INVALID_ARGUMENT,
                       "tensor bytes [4, 16) are not an aligned range of the 128-byte body");
  CHECK_SERVING();
}

static void test_tensor_outside_body(void) {
  expect_run_a_refused("float32", 1, (int64_t[]){3}, 64, 12, 64, GR_ERR_INVALID_ARGUMENT,
                       "tensor bytes [64, 76) are not an aligned range of the 64-byte body");
  expect_run_a_refused("float32", 1, (int64_t[]){3}, 128, 12, 64, GR_ERR_OUT_OF_RANGE,
                       "tensor offset is 128, not in [0, 64]");
  expect_run_a_refused("float32", 1, (int64_t[]){3}, 0, 12, 0, GR_ERR_OUT_OF_RANGE,
                       "tensor bytes is 12, not in [0, 0]");
  CHECK_SERVING();
}

static void test_tensor_unknown_dtype(void) {
  expect_run_a_refused("float128", 1, (int64_t[]){3}, 0, 12, 64, GR_ERR_INVALID_ARGUMENT,
                       "tensor dtype 'float128' is unknown");
  CHECK_SERVING();
}

static void test_tensor_rank_over_8(void) {
  int64_t dims[9] = {1, 1, 1, 1, 1, 1, 1, 1, 3};
  expect_run_a_refused("float32", 9, dims, 0, 12, 64, GR_ERR_INVALID_ARGUMENT,
                       "tensor dims must be an array of at most 8");
  CHECK_SERVING();
}

static void test_tensor_bad_dims(void) {
  expect_run_a_refused("float32", 1, (int64_t[]){-3}, 0, 12, 64, GR_ERR_OUT_OF_RANGE,
                       "tensor dim is -3, not in [0, 4611686018427387903]");
  expect_run_a_refused("float32", 3, (int64_t[]){1ll << 40, 1ll << 40, 1ll << 40}, 0, 12, 64,
                       GR_ERR_INVALID_ARGUMENT, "tensor dims are too large");
  CHECK_SERVING();
}

/* Empty strings where names are expected: errors quote them. */
static void test_empty_strings(void) {
  expect_run_a_refused("", 1, (int64_t[]){3}, 0, 12, 64, GR_ERR_INVALID_ARGUMENT,
                       "tensor dtype '' is unknown");
  bytes f = {0};
  register_frame(&f, 2, inc0, "", &part_a);
  expect_response(&f, 2, GR_ERR_INVALID_ARGUMENT, "device '' is not a device of " TASK0, NULL);
  b_free(&f);
  CHECK_SERVING();
}

static void test_tensor_bool_byte_2(void) {
  mp m;
  feed0_run_a(&m, 9, next_run++);
  pk_tensor(&m.pk, "bool", 1, (int64_t[]){3}, 0, 3);
  uint8_t body[64] = {1, 0, 2};
  expect_map_response(&m, GR_MSG_RUN, body, sizeof body, 9, GR_ERR_INVALID_ARGUMENT,
                      "bool tensor holds byte 2");
  CHECK_SERVING();
}

static void test_feed_not_a_tensor(void) {
  mp m;
  feed0_run_a(&m, 9, next_run++);
  gr_pack_str(&m.pk, "float32");
  expect_map_response(&m, GR_MSG_RUN, NULL, 0, 9, GR_ERR_INVALID_ARGUMENT,
                      "a tensor must be [dtype, dims, offset, bytes] or nil");
  CHECK_SERVING();
}

/* Feeds: dead, an index out of range, the same index twice, not a pair. */
static void test_feeds_malformed(void) {
  struct {
    int what;
    gr_status code;
    const char *want;
  } cases[] = {{0, GR_ERR_INVALID_ARGUMENT, "feed 0 has no value"},
               {1, GR_ERR_OUT_OF_RANGE, "feed index is 3, not in [0, 0]"},
               {2, GR_ERR_INVALID_ARGUMENT, "feed 0 is given twice"},
               {3, GR_ERR_INVALID_ARGUMENT, "feed 0 must be [index, tensor]"}};
  for (int i = 0; i < 4; i++) {
    mp m;
    mp_init(&m);
    run_map(&m, 7, 9, handle_a, inc0, next_run++);
    mp_str(&m, "feeds");
    msgpack_packer *pk = &m.pk;
    int w = cases[i].what;
    msgpack_pack_array(pk, w == 2 ? 2 : 1);
    for (int k = 0; k < (w == 2 ? 2 : 1); k++) {
      msgpack_pack_array(pk, w == 3 ? 3 : 2);
      msgpack_pack_int(pk, w == 1 ? 3 : 0);
      if (w == 0)
        msgpack_pack_nil(pk);
      else
        pk_tensor(pk, "float32", 1, (int64_t[]){3}, 0, 12);
      if (w == 3) msgpack_pack_nil(pk);
    }
    expect_map_response(&m, GR_MSG_RUN, (uint8_t[64]){0}, 64, 9, cases[i].code, cases[i].want);
  }
  CHECK_SERVING();
}

/* ---- requests that name the wrong things --------------------------------- */

static void test_run_unknown_handle(void) {
  mp m;
  mp_init(&m);
  run_map(&m, 7, 9, 987654321, inc0, next_run++);
  mp_str(&m, "feeds");
  msgpack_pack_array(&m.pk, 0);
  expect_map_response(&m, GR_MSG_RUN, NULL, 0, 9, GR_ERR_NOT_FOUND,
                      TASK0 " has no graph 987654321");
  CHECK_SERVING();
}

/* A DEREGISTER is answered like any request: an unknown handle, and one
 * another client registered (which it may not drop), with an error. */
static void test_deregister_unknown_handle(void) {
  const uint64_t handles[2] = {987654321, handle_a};
  for (int i = 0; i < 2; i++) {
    mp m;
    mp_init(&m);
    msgpack_pack_map(&m.pk, 2);
    mp_u64(&m, "id", 11);
    mp_u64(&m, "handle", handles[i]);
    char want[128];
    snprintf(want, sizeof want, TASK0 " has no graph %llu of this client",
             (unsigned long long)handles[i]);
    expect_map_response(&m, GR_MSG_DEREGISTER, NULL, 0, 11, GR_ERR_NOT_FOUND, want);
  }
  expect_good_run_a(12, next_run++); /* graph a is still there */
  CHECK_SERVING();
}

static void test_run_stale_incarnation(void) {
  bytes f = {0};
  mp m;
  mp_init(&m);
  run_map(&m, 7, 9, handle_a, inc0 ^ 1, next_run++);
  mp_str(&m, "feeds");
  msgpack_pack_array(&m.pk, 0);
  frame(&f, GR_MSG_RUN, &m, NULL, 0);
  char want[256];
  snprintf(want, sizeof want, TASK0 " restarted (incarnation %016llx, the master knew %016llx)",
           (unsigned long long)inc0, (unsigned long long)(inc0 ^ 1));
  expect_response(&f, 9, GR_ERR_ABORTED, want, NULL);
  b_free(&f);
  mp_free(&m);
  CHECK_SERVING();
}

static void test_register_malformed_graph(void) {
  part bad = part_a;
  uint8_t junk[200];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)(i * 37 + 11);
  bad.graph = junk;
  bad.size = sizeof junk;
  bytes f = {0};
  register_frame(&f, 2, inc0, DEV0, &bad);
  expect_response(&f, 2, GR_ERR_INVALID_ARGUMENT,
                  TASK0 ": registering a graph: partition 0: msgpack:", NULL);
  b_free(&f);
  /* a valid graph with one byte flipped in its map: a field of a wrong type */
  uint8_t *copy = malloc(part_a.size);
  memcpy(copy, part_a.graph, part_a.size);
  bad = part_a;
  bad.graph = copy;
  const char *needle = "format";
  for (size_t i = 0; i + 6 < part_a.size; i++)
    if (!memcmp(copy + i, needle, 6)) copy[i + 6] = 0xc3; /* its value's first byte: true */
  register_frame(&f, 3, inc0, DEV0, &bad);
  expect_response(&f, 3, GR_ERR_INVALID_ARGUMENT, "registering a graph: partition 0:", NULL);
  b_free(&f);
  free(copy);
  CHECK_SERVING();
}

/* A partition whose graph bytes lie outside the body, or with no body. */
static void test_register_graph_outside_body(void) {
  mp m;
  mp_init(&m);
  msgpack_pack_map(&m.pk, 4);
  mp_u64(&m, "id", 2);
  mp_u64(&m, "inc", inc0);
  mp_str(&m, "peers");
  msgpack_pack_array(&m.pk, 0);
  mp_str(&m, "parts");
  msgpack_pack_array(&m.pk, 1);
  part p = part_a;
  p.size = 100;
  pk_part(&m.pk, DEV0, &p, 0);
  bytes f = {0};
  frame(&f, GR_MSG_REGISTER, &m, (uint8_t[64]){0}, 64);
  expect_response(&f, 2, GR_ERR_OUT_OF_RANGE, "graph bytes is 100, not in [0, 64]", NULL);
  b_free(&f);
  /* no body at all: the partition's graph is empty */
  mp_free(&m);
  mp_init(&m);
  msgpack_pack_map(&m.pk, 4);
  mp_u64(&m, "id", 3);
  mp_u64(&m, "inc", inc0);
  mp_str(&m, "peers");
  msgpack_pack_array(&m.pk, 0);
  mp_str(&m, "parts");
  msgpack_pack_array(&m.pk, 1);
  p.size = 0;
  pk_part(&m.pk, DEV0, &p, 0);
  frame(&f, GR_MSG_REGISTER, &m, NULL, 0);
  expect_response(&f, 3, GR_ERR_INVALID_ARGUMENT, "partition 0: msgpack: truncated at byte 0",
                  NULL);
  b_free(&f);
  mp_free(&m);
  CHECK_SERVING();
}

static void test_register_device_of_another_task(void) {
  bytes f = {0};
  register_frame(&f, 2, inc0, "/job:worker/replica:0/task:7/device:CPU:0", &part_a);
  expect_response(&f, 2, GR_ERR_INVALID_ARGUMENT,
                  "device '/job:worker/replica:0/task:7/device:CPU:0' is not a device of " TASK0,
                  NULL);
  b_free(&f);
  register_frame(&f, 3, inc0, TASK0 "/device:CPU:1", &part_a); /* it has one device */
  expect_response(&f, 3, GR_ERR_INVALID_ARGUMENT,
                  "device '" TASK0 "/device:CPU:1' is not a device of " TASK0, NULL);
  b_free(&f);
  CHECK_SERVING();
}

static void test_register_stale_incarnation(void) {
  bytes f = {0};
  register_frame(&f, 2, inc0 + 1, DEV0, &part_a);
  char want[256];
  snprintf(want, sizeof want,
           TASK0 " restarted: the master registers for incarnation %016llx, this is %016llx",
           (unsigned long long)(inc0 + 1), (unsigned long long)inc0);
  expect_response(&f, 2, GR_ERR_ABORTED, want, NULL);
  b_free(&f);
  CHECK_SERVING();
}

static void test_register_bad_endpoints(void) {
  part p = part_a;
  snprintf(p.fetch, sizeof p.fetch, "no_such_node");
  bytes f = {0};
  register_frame(&f, 2, inc0, DEV0, &p);
  expect_response(&f, 2, GR_ERR_NOT_FOUND, "endpoint 'no_such_node:0' is not in the graph", NULL);
  b_free(&f);
  CHECK_SERVING();
}

/* ---- duplicates ---------------------------------------------------------- */

/* ---- containers ------------------------------------------------------------ */

/* Starts m as a VARS map {id, names: ["v"], ...} of 4 entries: the caller
 * packs the container's two. */
static void vars_map(mp *m, uint64_t id) {
  mp_init(m);
  msgpack_pack_map(&m->pk, 4);
  mp_u64(m, "id", id);
  mp_str(m, "names");
  msgpack_pack_array(&m->pk, 1);
  gr_pack_str(&m->pk, "v");
}

/* A REGISTER with a container name that is not one, not a string or
 * without its `private` field is refused naming the field, and makes no
 * container; so are a VARS and a RESET with a bad name. */
static void test_bad_container_names(void) {
  char long_name[80];
  memset(long_name, 'x', 65);
  long_name[65] = '\0';
  const char *bad[] = {"", "a b", "ctl\x01", long_name, "caf\xc3\xa9", "a/b"};
  const char *shown[] = {"''",
                         "'a b'",
                         "'ctl?'",
                         "'xxxx",
                         "'caf?"
                         "?'",
                         "'a/b'"};
  for (int i = 0; i < 6; i++) {
    bytes f = {0};
    register_frame_in(&f, 2, inc0, DEV0, &part_a, bad[i], false);
    char want[160];
    snprintf(want, sizeof want, "registering a graph: field 'container': %s", shown[i]);
    expect_response(&f, 2, GR_ERR_INVALID_ARGUMENT, want, NULL);
    b_free(&f);
  }
  GR_CHECK(gr_server_container(srv, "a/b") == NULL);
  CHECK_LOG("refused a request from 127.0.0.1:"); /* the server names the peer */
  CHECK_LOG(": field 'container': 'a b' is not a container name");
  mp m;
  mp_init(&m);
  msgpack_pack_map(&m.pk, 5);
  mp_u64(&m, "id", 4);
  mp_u64(&m, "inc", inc0);
  mp_kstr(&m, "container", "no-private-field");
  mp_str(&m, "peers");
  msgpack_pack_array(&m.pk, 0);
  mp_str(&m, "parts");
  msgpack_pack_array(&m.pk, 1);
  pk_part(&m.pk, DEV0, &part_a, 0);
  expect_map_response(&m, GR_MSG_REGISTER, part_a.graph, part_a.size, 4, GR_ERR_INVALID_ARGUMENT,
                      "field 'private' is missing");
  GR_CHECK(gr_server_container(srv, "no-private-field") == NULL);
  vars_map(&m, 5);
  mp_u64(&m, "container", 7);
  mp_str(&m, "private");
  msgpack_pack_false(&m.pk);
  expect_map_response(&m, GR_MSG_VARS, NULL, 0, 5, GR_ERR_INVALID_ARGUMENT,
                      "field 'container' must be a string, not an integer");
  mp_init(&m);
  msgpack_pack_map(&m.pk, 2);
  mp_u64(&m, "id", 6);
  mp_kstr(&m, "container", "a b");
  expect_map_response(&m, GR_MSG_RESET, NULL, 0, 6, GR_ERR_INVALID_ARGUMENT,
                      TASK0 ": reset: field 'container': 'a b' is not a container name");
  CHECK_SERVING();
}

/* Waits (at most 10 s) until srv has a container of that name or none. */
static bool container_is(const char *name, bool there) {
  for (int64_t end = gr_wire_now_ms() + TIMEOUT_MS;;) {
    gr_resource_mgr *rm = gr_server_container(srv, name);
    gr_resource_mgr_free(rm);
    if ((rm != NULL) == there) return true;
    if (gr_wire_now_ms() > end) return false;
    usleep(10000);
  }
}

/* A private container is its client's alone (another connection may not
 * register with it, ask its variables or take its name for a shared one),
 * and goes when its client's connection closes. */
static void test_private_container(void) {
  const char *name = "_run.0123456789abcdef";
  rc a;
  GR_CHECK(rc_open(&a));
  if (a.fd < 0) return;
  bytes f = {0};
  register_frame_in(&f, 1, inc0, DEV0, &part_a, name, true);
  resp r;
  GR_CHECK(rc_send(&a, f.p, f.n) && rc_response(&a, &r));
  GR_CHECK_MSG(r.code == 0, "%s", r.msg);
  inframe_free(&r.f);
  b_free(&f);
  GR_CHECK(container_is(name, true));
  register_frame_in(&f, 2, inc0, DEV0, &part_a, name, true);
  expect_response(&f, 2, GR_ERR_FAILED_PRECONDITION,
                  "container '_run.0123456789abcdef' is private to another client", NULL);
  b_free(&f);
  register_frame_in(&f, 3, inc0, DEV0, &part_a, name, false);
  expect_response(&f, 3, GR_ERR_FAILED_PRECONDITION,
                  "container '_run.0123456789abcdef' is another client's private container", NULL);
  b_free(&f);
  register_frame_in(&f, 4, inc0, DEV0, &part_a, "bad-input", true);
  expect_response(&f, 4, GR_ERR_FAILED_PRECONDITION, "container 'bad-input' is shared, not private",
                  NULL);
  b_free(&f);
  mp m;
  vars_map(&m, 5);
  mp_kstr(&m, "container", name);
  mp_str(&m, "private");
  msgpack_pack_true(&m.pk);
  expect_map_response(&m, GR_MSG_VARS, NULL, 0, 5, GR_ERR_FAILED_PRECONDITION,
                      "is private to another client");
  CHECK_LOG(": container '_run.0123456789abcdef' is private to another client");
  rc_close(&a);
  GR_CHECK_MSG(container_is(name, false), "the private container outlived its client");
  CHECK_SERVING();
}

/* RESET: a shared container dropped (the graphs registered with it refuse
 * their RUNs, naming it), one that does not exist (none dropped), then
 * every shared container (the cases' own is registered again). */
static void test_reset(void) {
  uint64_t h = register_part_in(&part_a, 101, "to-reset");
  GR_CHECK(h != 0);
  bytes f = {0};
  resp r;
  run_frame(&f, h, 9, next_run++, "float32", 1, (int64_t[]){3}, 0, 12, 64);
  expect_response(&f, 9, GR_OK, NULL, &r);
  GR_CHECK(fetch_a_ok(&r));
  inframe_free(&r.f);
  b_free(&f);
  const char *names[] = {"to-reset", "no-such", ""};
  uint64_t want[] = {1, 0, 1};
  for (int i = 0; i < 3; i++) {
    mp m;
    mp_init(&m);
    msgpack_pack_map(&m.pk, 2);
    mp_u64(&m, "id", 6);
    mp_kstr(&m, "container", names[i]);
    frame(&f, GR_MSG_RESET, &m, NULL, 0);
    mp_free(&m);
    expect_response(&f, 6, GR_OK, NULL, &r);
    uint64_t dropped = 99;
    gr_error err;
    GR_CHECK_OK(gr_msg_u64(&r.f.m.root, "dropped", &dropped, &err), err);
    GR_CHECK_MSG(dropped == want[i], "reset '%s': %llu dropped", names[i],
                 (unsigned long long)dropped);
    inframe_free(&r.f);
    b_free(&f);
    char line[128];
    snprintf(line, sizeof line, "%s%s%s: %llu dropped", i < 2 ? "reset container '" : "",
             i < 2 ? names[i] : "reset every shared container", i < 2 ? "'" : "",
             (unsigned long long)want[i]);
    CHECK_LOG(line);
    if (i == 0) {
      run_frame(&f, h, 9, next_run++, "float32", 1, (int64_t[]){3}, 0, 12, 64);
      expect_response(&f, 9, GR_ERR_ABORTED, TASK0 ": container 'to-reset' was reset", NULL);
      b_free(&f);
    }
  }
  GR_CHECK(container_is("bad-input", false));
  handle_a = register_part(&part_a, 102);
  handle_b = register_part(&part_b, 103);
  GR_CHECK(handle_a && handle_b);
  CHECK_SERVING();
}

/* The same request id twice on a connection: the second is refused. */
static void test_duplicate_request_id(void) {
  rc c;
  GR_CHECK(rc_open(&c));
  bytes f = {0};
  status_frame(&f, 7);
  status_frame(&f, 7);
  resp a, b;
  GR_CHECK(rc_send(&c, f.p, f.n));
  GR_CHECK(rc_response(&c, &a) && rc_response(&c, &b));
  GR_CHECK_EQ_INT(a.id, 7);
  GR_CHECK_EQ_INT(a.code, 0);
  GR_CHECK_EQ_INT(b.id, 7);
  GR_CHECK_EQ_INT(b.code, GR_ERR_ALREADY_EXISTS);
  GR_CHECK_STR_CONTAINS(b.msg, "request id 7 was used already on this connection");
  inframe_free(&a.f);
  inframe_free(&b.f);
  /* two RUNs with one request id (and different run ids): one runs */
  b_free(&f);
  good_run_a(&f, 8, next_run++);
  good_run_a(&f, 8, next_run++);
  GR_CHECK(rc_send(&c, f.p, f.n));
  int ran = 0, refused = 0;
  for (int i = 0; i < 2; i++) {
    resp r;
    if (!rc_response(&c, &r)) {
      GR_CHECK_MSG(false, "no response to RUN %d", i);
      break;
    }
    GR_CHECK_EQ_INT(r.id, 8);
    ran += r.code == 0 && fetch_a_ok(&r);
    refused += r.code == GR_ERR_ALREADY_EXISTS && strstr(r.msg, "request id 8 was used already");
    inframe_free(&r.f);
  }
  GR_CHECK_EQ_INT(ran, 1);
  GR_CHECK_EQ_INT(refused, 1);
  /* an id far below the newest is refused as a possible replay */
  b_free(&f);
  status_frame(&f, 1000000);
  status_frame(&f, 9);
  GR_CHECK(rc_send(&c, f.p, f.n));
  GR_CHECK(rc_response(&c, &a) && rc_response(&c, &b));
  GR_CHECK_EQ_INT(a.code, 0);
  GR_CHECK_EQ_INT(b.code, GR_ERR_FAILED_PRECONDITION);
  GR_CHECK_STR_CONTAINS(b.msg, "request id 9 is older than the last 65536 ids");
  inframe_free(&a.f);
  inframe_free(&b.f);
  CHECK_LOG("refused a get_status request from");
  b_free(&f);
  rc_close(&c);
  CHECK_SERVING();
}

/* A RUN repeated with the run id of a step that finished: refused at once. */
static void test_repeated_run_after_it_finished(void) {
  uint64_t run = next_run++;
  bytes f = {0};
  good_run_a(&f, 1, run);
  resp r;
  expect_response(&f, 1, GR_OK, NULL, &r);
  GR_CHECK(fetch_a_ok(&r));
  inframe_free(&r.f);
  b_free(&f);
  good_run_a(&f, 2, run);
  char want[128];
  snprintf(want, sizeof want, "step %016llx ran here already (a repeated RUN)",
           (unsigned long long)run);
  expect_response(&f, 2, GR_ERR_ALREADY_EXISTS, want, NULL);
  b_free(&f);
  CHECK_SERVING();
}

/* The same after 2^31 steps: the server's position in its list of finished
 * steps (set here, as no test runs 2^31 steps) goes past INT32_MAX. As a
 * signed int it overflowed there (undefined behaviour; in practice a
 * negative index that wrote outside the list, and the step was not
 * remembered: its RUN was taken again). */
static void test_repeated_run_after_2_31_steps(void) {
  pthread_mutex_lock(&srv->mu);
  uint32_t saved = srv->finished_pos;
  srv->finished_pos = INT32_MAX - 1;
  pthread_mutex_unlock(&srv->mu);
  uint64_t run = 0;
  for (int i = 0; i < 4; i++) /* past INT32_MAX, to a slot that was negative */
    expect_good_run_a(1, run = next_run++);
  bytes f = {0};
  good_run_a(&f, 2, run);
  char want[128];
  snprintf(want, sizeof want, "step %016llx ran here already (a repeated RUN)",
           (unsigned long long)run);
  expect_response(&f, 2, GR_ERR_ALREADY_EXISTS, want, NULL);
  b_free(&f);
  pthread_mutex_lock(&srv->mu);
  srv->finished_pos = saved;
  pthread_mutex_unlock(&srv->mu);
  CHECK_SERVING();
}

/* Two RUNs of one step at once: one waits for task 1's push, the other is
 * refused at once; the push then completes the first (the positive push). */
static void test_repeated_run_while_running(void) {
  uint64_t run = next_run++;
  rc c;
  GR_CHECK(rc_open(&c));
  bytes f = {0};
  run_b_frame(&f, 1, run);
  run_b_frame(&f, 2, run);
  GR_CHECK(rc_send(&c, f.p, f.n));
  resp r;
  GR_CHECK(rc_response(&c, &r));
  GR_CHECK(r.id == 1 || r.id == 2);
  uint64_t refused_id = r.id;
  GR_CHECK_EQ_INT(r.code, GR_ERR_ALREADY_EXISTS);
  char want[128];
  snprintf(want, sizeof want, "step %016llx is running here already", (unsigned long long)run);
  GR_CHECK_STR_CONTAINS(r.msg, want);
  inframe_free(&r.f);
  b_free(&f);
  push_frame(&f, run, key_b, TASK1, PEER_INC, 3);
  rc p;
  GR_CHECK(rc_open(&p));
  GR_CHECK(rc_send(&p, f.p, f.n));
  GR_CHECK(rc_response(&c, &r));
  GR_CHECK_EQ_INT(r.id, refused_id == 1 ? 2 : 1);
  GR_CHECK_MSG(r.code == 0, "%s", r.msg);
  GR_CHECK_NEAR(fetch_float(&r), 13, 0);
  inframe_free(&r.f);
  rc_close(&p);
  rc_close(&c);
  b_free(&f);
  CHECK_SERVING();
}

/* Opens c and p, starts step run of graph b on c and sends on p the push
 * of the float v for it (push_frame: key, from, inc). */
static void start_b_with_push(rc *c, rc *p, uint64_t run, const char *key, const char *from,
                              uint64_t inc, float v) {
  GR_CHECK(rc_open(c));
  GR_CHECK(rc_open(p));
  bytes f = {0};
  run_b_frame(&f, 1, run);
  GR_CHECK(rc_send(c, f.p, f.n));
  b_free(&f);
  push_frame(&f, run, key, from, inc, v);
  GR_CHECK(rc_send(p, f.p, f.n));
  b_free(&f);
}

/* ---- pushed tensors ------------------------------------------------------ */

/* A step of graph b runs; a bad push for it must be refused (logged, naming
 * both tasks) and fail the step with that error instead of leaving it
 * waiting. */
static void push_refused(const char *key, const char *from, uint64_t inc, const char *want_log,
                         const char *want_run) {
  uint64_t run = next_run++;
  rc c, p;
  start_b_with_push(&c, &p, run, key, from, inc, 3);
  char line[1024];
  snprintf(line, sizeof line, want_log, p.me);
  CHECK_LOG(line);
  resp r;
  GR_CHECK(rc_response(&c, &r));
  GR_CHECK(r.code != 0);
  GR_CHECK_STR_CONTAINS(r.msg, want_run);
  inframe_free(&r.f);
  rc_close(&c);
  rc_close(&p);
}

static void test_push_key_for_other_tasks(void) {
  char key[600];
  /* the destination is a device of task 5, not of this task */
  snprintf(key, sizeof key, "%s;%016llx;/job:worker/replica:0/task:5/device:CPU:0;x:0;:0", DEV1,
           (unsigned long long)KEY_INC);
  push_refused(key, TASK1, PEER_INC,
               TASK0 " refuses a tensor from " TASK1 " (%s) for key '" DEV1
                     ";0123456789abcdef;/job:worker/replica:0/task:5/device:CPU:0;x:0;:0': the "
                     "key names devices of other tasks",
               "the key names devices of other tasks");
  /* the source is a device of task 2, but the push says it is from task 1 */
  snprintf(key, sizeof key, "/job:worker/replica:0/task:2/device:CPU:0;%016llx;%s;x:0;:0",
           (unsigned long long)KEY_INC, DEV0);
  push_refused(key, TASK1, PEER_INC, TASK0 " refuses a tensor from " TASK1 " (%s) for key",
               "the key names devices of other tasks");
  CHECK_SERVING();
}

static void test_push_stale_incarnation(void) {
  push_refused(key_b, TASK1, PEER_INC + 1,
               TASK0
               " refuses a tensor from " TASK1
               ": stale incarnation 1111222233334445 (the live one is 1111222233334444: " TASK1
               " restarted)",
               "stale incarnation 1111222233334445");
  CHECK_SERVING();
}

static void test_push_from_unknown_task(void) {
  char key[600];
  snprintf(key, sizeof key, "/job:worker/replica:0/task:3/device:CPU:0;%016llx;%s;x:0;:0",
           (unsigned long long)KEY_INC, DEV0);
  push_refused(key, "/job:worker/replica:0/task:3", PEER_INC,
               TASK0 " refuses a tensor from /job:worker/replica:0/task:3 (%s): no registered "
                     "graph names that task",
               "no registered graph names that task");
  CHECK_SERVING();
}

static void test_push_malformed_key(void) {
  push_refused("not;a;key", TASK1, PEER_INC, "not;a;key", "not;a;key");
  CHECK_SERVING();
}

/* A push whose tensor does not match its bytes: refused, the step fails. */
static void test_push_bad_tensor(void) {
  uint64_t run = next_run++;
  rc c, p;
  GR_CHECK(rc_open(&c));
  GR_CHECK(rc_open(&p));
  bytes f = {0};
  run_b_frame(&f, 1, run);
  GR_CHECK(rc_send(&c, f.p, f.n));
  b_free(&f);
  mp m;
  push_map(&m, run, key_b, TASK1, PEER_INC, 8);
  frame(&f, GR_MSG_TENSOR, &m, (uint8_t[64]){0}, 64);
  mp_free(&m);
  GR_CHECK(rc_send(&p, f.p, f.n));
  b_free(&f);
  CHECK_LOG("tensor of float32 [] needs 4 bytes, the message gives 8");
  resp r;
  GR_CHECK(rc_response(&c, &r));
  GR_CHECK_STR_CONTAINS(r.msg, "needs 4 bytes, the message gives 8");
  inframe_free(&r.f);
  rc_close(&c);
  rc_close(&p);
  CHECK_SERVING();
}

/* Refused pushes for steps that never run here leave no state behind for
 * good: 5,000 of them (more than the server's GR_SERVER_MAX_STEPS) and the
 * next client's steps still run. */
static void test_many_orphan_pushes(void) {
  rc p;
  GR_CHECK(rc_open(&p));
  int64_t before = log_count();
  enum { N = 5000 };
  bytes f = {0};
  for (int i = 0; i < N; i++)
    push_frame(&f, 0x5000000 + (uint64_t)i, key_b, TASK1, PEER_INC + 1, 1);
  GR_CHECK(rc_send(&p, f.p, f.n));
  b_free(&f);
  int64_t deadline = gr_wire_now_ms() + 4 * TIMEOUT_MS;
  while (log_count() < before + N && gr_wire_now_ms() < deadline) sleep_ms(5);
  GR_CHECK_MSG(log_count() >= before + N, "%lld refusals logged of %d",
               (long long)(log_count() - before), N);
  rc_close(&p);
  CHECK_SERVING();
  bytes g = {0};
  good_run_a(&g, 1, next_run++);
  resp r;
  expect_response(&g, 1, GR_OK, NULL, &r);
  GR_CHECK(fetch_a_ok(&r));
  inframe_free(&r.f);
  b_free(&g);
}

/* ---- peers that leave, stop reading, or send what servers do not take ---- */

/* A client starts steps that wait for pushes and disconnects: its steps are
 * aborted, not left holding the server's threads (it has 16 for steps). */
static void test_disconnect_during_steps(void) {
  for (int i = 0; i < 24; i++) {
    rc c;
    GR_CHECK(rc_open(&c));
    bytes f = {0};
    run_b_frame(&f, 1, next_run++);
    GR_CHECK(rc_send(&c, f.p, f.n));
    b_free(&f);
    if (i % 2) sleep_ms(2); /* the step started (or not yet) */
    rc_close(&c);
  }
  CHECK_SERVING();
  /* a step of graph b still runs to the end with its push */
  uint64_t run = next_run++;
  rc c, p;
  start_b_with_push(&c, &p, run, key_b, TASK1, PEER_INC, 5);
  resp r;
  GR_CHECK(rc_response(&c, &r));
  GR_CHECK_MSG(r.code == 0, "%s", r.msg);
  GR_CHECK_NEAR(fetch_float(&r), 15, 0);
  inframe_free(&r.f);
  rc_close(&c);
  rc_close(&p);
}

/* A client that sends requests and never reads the responses: once more
 * than the queue's limit waits for it, the server disconnects it. */
static void test_client_stops_reading(void) {
  gr_transport_set_limits(64 * 1024, 0xffffffffu);
  rc c;
  /* a small receive buffer: the server's queue fills */
  GR_CHECK(rc_connect(&c, port, 4096) && rc_handshake(&c, port));
  bool closed = false;
  uint64_t id = 1;
  for (int round = 0; round < 100 && !closed; round++) { /* at most 2,000,000 requests */
    bytes f = {0};
    for (int i = 0; i < 20000; i++) status_frame(&f, id++);
    if (!rc_send(&c, f.p, f.n)) closed = true;
    b_free(&f);
  }
  char line[256];
  snprintf(line, sizeof line, "connection from %s ended: %s does not read: ", c.me, c.me);
  CHECK_LOG(line);
  GR_CHECK(closed || rc_closed(&c));
  rc_close(&c);
  gr_transport_set_limits((size_t)1 << 30, 0xffffffffu);
  CHECK_SERVING();
}

/* Frames only a server sends, or a one-way message's: not taken. */
static void test_frames_servers_do_not_take(void) {
  int types[] = {GR_MSG_RESPONSE, GR_MSG_HELLO, GR_MSG_AUTH_OK, GR_MSG_AUTH};
  for (int i = 0; i < 4; i++) {
    rc c;
    GR_CHECK(rc_open(&c));
    mp m;
    mp_init(&m);
    msgpack_pack_map(&m.pk, 1);
    mp_u64(&m, "id", 1);
    bytes f = {0};
    frame(&f, types[i], &m, NULL, 0);
    status_frame(&f, 2); /* in the same write: not answered either */
    rc_send(&c, f.p, f.n);
    char line[256];
    snprintf(line, sizeof line, "a %s frame from %s, which servers do not take; closing",
             gr_msg_type_name(types[i]), c.me);
    CHECK_LOG(line);
    size_t got = 0;
    GR_CHECK(rc_closed_n(&c, &got));
    GR_CHECK_EQ_INT(got, 0); /* no response to the GET_STATUS */
    rc_close(&c);
    b_free(&f);
    mp_free(&m);
  }
  CHECK_SERVING();
}

static void test_bad_abort(void) {
  rc c;
  GR_CHECK(rc_open(&c));
  mp m;
  mp_init(&m);
  msgpack_pack_map(&m.pk, 2);
  mp_u64(&m, "run", 5);
  mp_u64(&m, "code", 1);
  bytes f = {0};
  frame(&f, GR_MSG_ABORT, &m, NULL, 0);
  GR_CHECK(rc_send(&c, f.p, f.n));
  char line[256];
  snprintf(line, sizeof line, "a bad abort from %s: field 'msg' is missing", c.me);
  CHECK_LOG(line);
  rc_close(&c);
  b_free(&f);
  mp_free(&m);
  CHECK_SERVING();
}

/* ---- the handshake ------------------------------------------------------- */

/* Sends bytes to the server on port p after its HELLO, before the handshake
 * ends: it must log "WHAT ME: want" ("bad frame from" for a frame it cannot
 * read, "refused" for an AUTH it does not accept) and close. */
static void expect_refused_on(int p, const void *b, size_t n, const char *what, const char *want) {
  rc c;
  bool auth = false;
  uint8_t nonce[GR_AUTH_NONCE];
  GR_CHECK(rc_open_ex(&c, p, &auth, nonce));
  if (c.fd < 0) return;
  GR_CHECK(auth == (p == port_secret));
  rc_send(&c, b, n); /* may fail once the server closed */
  char line[1024];
  snprintf(line, sizeof line, "%s %s: %s", what, c.me, want);
  CHECK_LOG(line);
  GR_CHECK(rc_closed(&c));
  rc_close(&c);
}

/* The same to the server with a secret, for a frame it cannot read. */
static void expect_refused_unauthenticated(const void *p, size_t n, const char *want) {
  expect_refused_on(port_secret, p, n, "bad frame from", want);
}

/* Every peer answers HELLO with AUTH, also to a server without a secret:
 * a request first is refused. */
static void test_request_before_auth(void) {
  bytes f = {0};
  status_frame(&f, 1);
  expect_refused_unauthenticated(f.p, f.n, "a get_status frame before authentication");
  expect_refused_on(port, f.p, f.n, "bad frame from", "a get_status frame before authentication");
  b_free(&f);
  CHECK_SERVING();
  CHECK_SERVING_SECRET();
}

/* Garbage before authentication: refused at the first header, and the
 * server reads no more: 64 MiB cannot all be sent to it. */
static void test_garbage_before_auth(void) {
  rc c;
  bool auth = false;
  uint8_t nonce[GR_AUTH_NONCE];
  GR_CHECK(rc_open_ex(&c, port_secret, &auth, nonce));
  size_t n = (size_t)64 << 20;
  uint8_t *junk = malloc(n);
  for (size_t i = 0; i < n; i++) junk[i] = (uint8_t)(i * 131 + 7);
  bool all = rc_send(&c, junk, n);
  GR_CHECK_MSG(!all, "the server took 64 MiB from an unauthenticated peer");
  char line[256];
  snprintf(line, sizeof line, "bad frame from %s: not a graphrun frame (bytes 07 8a 0d 90", c.me);
  CHECK_LOG(line);
  free(junk);
  rc_close(&c);
  CHECK_SERVING_SECRET();
}

/* An AUTH of the entries given, zeros for their bytes. */
static void auth_map(bytes *f, const char *cluster, size_t nonce_len, bool mac) {
  uint8_t zeros[GR_AUTH_NONCE] = {0};
  auth_fields(f, cluster, zeros, nonce_len, mac ? zeros : NULL);
}

static void test_auth_malformed(void) {
  static const struct {
    const char *cluster;
    size_t nonce;
    bool mac, secret;
    const char *want;
  } cases[] = {
      {NULL, 32, true, true, "field 'cluster' is missing"},
      {NULL, 0, false, false, "field 'cluster' is missing"},
      {CLUSTER, 0, true, true, "field 'nonce' is missing"},
      {CLUSTER, 31, true, true, "field 'nonce' must be 32 bytes of binary"},
      {CLUSTER, 32, false, true, "field 'mac' is missing"},
      {"a b", 32, true, true, "field 'cluster': 'a b' is not a cluster id"},
      {"\x01x", 0, false, false, "field 'cluster': '?x' is not a cluster id"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    bytes f = {0};
    auth_map(&f, cases[i].cluster, cases[i].nonce, cases[i].mac);
    expect_refused_on(cases[i].secret ? port_secret : port, f.p, f.n, "refused", cases[i].want);
    b_free(&f);
  }
  CHECK_SERVING();
  CHECK_SERVING_SECRET();
}

/* An AUTH answering a fresh HELLO of the server on port p, made by
 * auth_frame_ex(secret, its nonce, seen, claimed): the server must log
 * "refused ME: want" and close. */
static void expect_auth_refused_ex(int p, const char *secret, const char *seen, const char *claimed,
                                   bool alter_id, const char *want) {
  rc c;
  bool auth = false;
  uint8_t nonce[GR_AUTH_NONCE];
  GR_CHECK(rc_open_ex(&c, p, &auth, nonce));
  if (c.fd < 0) return;
  bytes f = {0};
  auth_frame_ex(&f, secret, nonce, seen, claimed);
  const char *at = memmem(f.p, f.n, claimed, strlen(claimed));
  if (alter_id) GR_CHECK(at != NULL && strlen(claimed) > 0);
  if (alter_id && at) f.p[at - (const char *)f.p] ^= 0x20; /* changed on the way: "Bad-input" */
  GR_CHECK(rc_send(&c, f.p, f.n));
  char line[512];
  snprintf(line, sizeof line, "refused %s: %s; closing that connection", c.me, want);
  CHECK_LOG(line);
  GR_CHECK(rc_closed(&c));
  rc_close(&c);
  b_free(&f);
}

static void expect_auth_refused(int p, const char *secret, const char *seen, const char *claimed,
                                const char *want) {
  expect_auth_refused_ex(p, secret, seen, claimed, false, want);
}

/* An AUTH frame with a MAC made with another secret. */
static void test_auth_wrong_mac(void) {
  expect_auth_refused(port_secret, "another secret!!", CLUSTER, CLUSTER,
                      "wrong secret (authentication failed: another secret, or the handshake was "
                      "altered on the way)");
  CHECK_SERVING_SECRET();
}

/* A client of another cluster that knows the secret (one that does not
 * check the HELLO's cluster itself): the server refuses it, naming both
 * ids; so does a server without a secret. */
static void test_auth_other_cluster(void) {
  const char *want = "a client of cluster 'job-b', this server's is '" CLUSTER "': another job's "
                     "client?";
  expect_auth_refused(port_secret, SECRET, CLUSTER, "job-b", want);
  expect_auth_refused(port, NULL, CLUSTER, "job-b", want);
  expect_auth_refused(port, NULL, CLUSTER, "",
                      "a client of cluster none, this server's is '" CLUSTER "': another job's "
                      "client?");
  CHECK_SERVING();
  CHECK_SERVING_SECRET();
}

/* The cluster ids are covered by the MACs: a HELLO whose id was changed on
 * the way (the client saw job-b, its own, and answered as a client of
 * job-b), or an AUTH whose id was changed after the client made its MAC,
 * fails the server's check of the MAC. */
static void test_auth_tampered_cluster(void) {
  const char *want = "wrong secret (authentication failed: another secret, or the handshake was "
                     "altered on the way)";
  expect_auth_refused(port_secret, SECRET, "job-b", "job-b", want);          /* the HELLO's id */
  expect_auth_refused_ex(port_secret, SECRET, CLUSTER, CLUSTER, true, want); /* the AUTH's */
  CHECK_SERVING_SECRET();
}

static gr_status master_with(int p, const char *secret, bool insecure, const char *cluster,
                             gr_error *err) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", p);
  const char *addrs[] = {addr};
  gr_master_options mo = {.num_tasks = 1,
                          .addresses = addrs,
                          .secret = secret,
                          .insecure = insecure,
                          .cluster_id = cluster,
                          .connect_timeout_ms = TIMEOUT_MS};
  gr_master *m = NULL;
  gr_status st = gr_master_new(&mo, &m, err);
  gr_master_free(m);
  return st;
}

static void test_master_wrong_secret(void) {
  gr_error err;
  gr_status st = master_with(port_secret, "not the secret!!", false, CLUSTER, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_UNAUTHENTICATED);
  char want[128];
  snprintf(want, sizeof want, "127.0.0.1:%d refused this process's secret (a different secret?)",
           port_secret);
  GR_CHECK_STR_CONTAINS(err.msg, want);
  CHECK_LOG(": wrong secret (authentication failed: another secret, or the handshake was altered "
            "on the way); closing that connection");
  CHECK_SERVING_SECRET();
}

static void test_master_without_secret(void) {
  gr_error err;
  /* a master without a secret must say it means it */
  GR_CHECK_EQ_INT(master_with(port_secret, NULL, false, CLUSTER, &err), GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "master: no secret: servers require the cluster's shared secret");
  GR_CHECK_EQ_INT(master_with(port_secret, "short secret", false, CLUSTER, &err),
                  GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "master: the secret is 12 bytes, want 16 to 256");
  /* then the server asks for one */
  gr_status st = master_with(port_secret, NULL, true, CLUSTER, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_UNAUTHENTICATED);
  char want[128];
  snprintf(want, sizeof want, "127.0.0.1:%d requires a secret", port_secret);
  GR_CHECK_STR_CONTAINS(err.msg, want);
  CHECK_SERVING_SECRET();
}

static void test_master_secret_server_without(void) {
  gr_error err;
  gr_status st = master_with(port, SECRET, false, CLUSTER, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_UNAUTHENTICATED);
  char want[160];
  snprintf(want, sizeof want,
           "127.0.0.1:%d does not authenticate (an insecure server), but this "
           "process has a secret",
           port);
  GR_CHECK_STR_CONTAINS(err.msg, want);
  CHECK_SERVING();
}

/* A master of another cluster refuses the server when it reads its HELLO,
 * naming both ids and the address, and sends it nothing: the server logs
 * no session. */
static void test_master_other_cluster(void) {
  int ports[] = {port_secret, port};
  for (int i = 0; i < 2; i++) {
    gr_error err;
    gr_status st = master_with(ports[i], i ? NULL : SECRET, i == 1, "job-b", &err);
    GR_CHECK_EQ_INT(st, GR_ERR_UNAUTHENTICATED);
    char want[256];
    snprintf(want, sizeof want,
             "127.0.0.1:%d belongs to cluster '" CLUSTER "', this client's is 'job-b': another "
             "job's server on this port?",
             ports[i]);
    GR_CHECK_STR_CONTAINS(err.msg, want);
    GR_CHECK_EQ_INT(master_with(ports[i], i ? NULL : SECRET, i == 1, NULL, &err),
                    GR_ERR_UNAUTHENTICATED);
    GR_CHECK_STR_CONTAINS(err.msg, "this client's is none");
  }
  GR_CHECK(!log_has("session from"));
  CHECK_SERVING();
  CHECK_SERVING_SECRET();
}

/* A server of another version of graphrun (a thread of this test that
 * answers with a HELLO of wire version 2): the client names it and both
 * versions. */
static void *old_server(void *arg) {
  int ls = *(int *)arg, fd = accept(ls, NULL, NULL);
  if (fd < 0) return NULL;
  bytes f = {0};
  mp m;
  mp_init(&m);
  msgpack_pack_map(&m.pk, 1);
  mp_str(&m, "auth");
  msgpack_pack_false(&m.pk);
  frame(&f, GR_MSG_HELLO, &m, NULL, 0);
  f.p[4] = 2;
  if (write(fd, f.p, f.n) < 0) perror("old_server");
  char buf[64];
  while (read(fd, buf, sizeof buf) > 0) { /* until the client closes */
  }
  close(fd);
  b_free(&f);
  mp_free(&m);
  return NULL;
}

static void test_server_of_another_version(void) {
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  GR_CHECK(ls >= 0 && bind(ls, (struct sockaddr *)&a, sizeof a) == 0 && listen(ls, 1) == 0 &&
           getsockname(ls, (struct sockaddr *)&a, &al) == 0);
  pthread_t th;
  GR_CHECK(pthread_create(&th, NULL, old_server, &ls) == 0);
  gr_error err;
  int p = ntohs(a.sin_port);
  GR_CHECK_EQ_INT(master_with(p, SECRET, false, CLUSTER, &err), GR_ERR_UNIMPLEMENTED);
  char want[160];
  snprintf(want, sizeof want, "127.0.0.1:%d speaks wire version 2, this graphrun speaks version %d",
           p, GR_WIRE_VERSION);
  GR_CHECK_STR_CONTAINS(err.msg, want);
  pthread_join(th, NULL);
  close(ls);
}

/* ---- server options ------------------------------------------------------ */

static void expect_server_refused(const gr_server_options *o, const char *want) {
  gr_server *s = NULL;
  gr_error err;
  GR_CHECK_EQ_INT(gr_server_new(o, &s, &err), GR_ERR_INVALID_ARGUMENT);
  GR_CHECK(s == NULL);
  GR_CHECK_STR_CONTAINS(err.msg, want);
  gr_server_free(s);
}

static void test_server_identity_options(void) {
  gr_server_options o = {.job = "worker", .task = 9, .quiet = true, .log_fn = log_hook};
  expect_server_refused(&o, "server: no secret: every server requires the cluster's shared secret");
  const char *binds[] = {"0.0.0.0:0", "[::]:0"};
  for (int i = 0; i < 2; i++)
    for (int with_secret = 0; with_secret < 2; with_secret++) {
      o.bind = binds[i];
      o.insecure = true;
      o.secret = with_secret ? SECRET : NULL;
      char want[128];
      snprintf(want, sizeof want, "server: refusing to listen on %s insecure", binds[i]);
      expect_server_refused(&o, want);
    }
  o = (gr_server_options){.job = "worker", .task = 9, .secret = "fifteen bytes!!", .quiet = true};
  expect_server_refused(&o, "server: the secret is 15 bytes, want 16 to 256");
  o.secret = SECRET;
  o.cluster_id = "a b";
  expect_server_refused(&o, "server: cluster id 'a b': want 1 to 64 letters, digits");
  /* an insecure server on loopback starts, and says what that means */
  o = (gr_server_options){
      .job = "worker", .task = 9, .insecure = true, .quiet = true, .log_fn = log_hook};
  gr_server *s = NULL;
  gr_error err;
  GR_CHECK_OK(gr_server_new(&o, &s, &err), err);
  GR_CHECK(log_has("/job:worker/replica:0/task:9: warning: insecure: no secret, no "
                   "authentication: any local user can connect, run any graph"));
  gr_server_free(s);
  CHECK_SERVING();
}

/* ---- main ---------------------------------------------------------------- */

/* The two servers of CLUSTER: srv insecure, srv_secret with SECRET. */
static bool setup(void) {
  for (int with_secret = 0; with_secret < 2; with_secret++) {
    gr_server_options o = {.job = with_secret ? "ps" : "worker",
                           .task = 0,
                           .secret = with_secret ? SECRET : NULL,
                           .insecure = !with_secret,
                           .cluster_id = CLUSTER,
                           .inter_op_threads = 2,
                           .log_fn = log_hook};
    gr_error err;
    if (gr_server_new(&o, with_secret ? &srv_secret : &srv, &err) != GR_OK) {
      fprintf(stderr, "server: %s\n", err.msg);
      return false;
    }
  }
  port = gr_server_port(srv);
  port_secret = gr_server_port(srv_secret);
  inc0 = gr_server_incarnation(srv);
  if (!make_part_a(&part_a) || !make_part_b(&part_b)) return false;
  handle_a = register_part(&part_a, 1);
  handle_b = register_part(&part_b, 2);
  return handle_a && handle_b;
}

#define CASE(fn)                                                                                   \
  do {                                                                                             \
    log_reset();                                                                                   \
    GR_RUN(fn);                                                                                    \
    num_cases++;                                                                                   \
  } while (0)

int main(void) {
  int64_t start = gr_wire_now_ms();
  gr_loglimit_set_rate(-1, 0);          /* every line: the cases look for theirs */
  gr_transport_set_deadlines(0, -1, 0); /* no idle deadline: reg_conn waits silent */
  bool ok = setup();
  GR_CHECK(ok);
  int num_cases = 0;
  if (ok) {
    CASE(test_truncated_get_status);
    CASE(test_truncated_run);
    CASE(test_truncated_register);
    CASE(test_truncated_push);
    CASE(test_body_cut_short);
    CASE(test_bad_magic);
    CASE(test_http_request);
    CASE(test_unknown_version);
    CASE(test_unknown_type);
    CASE(test_nonzero_flags);
    CASE(test_header_limits);
    CASE(test_body_over_max);
    CASE(test_bad_maps);
    CASE(test_duplicate_key_in_a_big_map);
    CASE(test_msgpack_too_deep);
    CASE(test_id_wrong_type);
    CASE(test_id_negative);
    CASE(test_id_missing);
    CASE(test_run_field_wrong_type);
    CASE(test_run_missing_field);
    CASE(test_run_feeds_not_an_array);
    CASE(test_arrays_too_long);
    CASE(test_lease_bad_fields);
    CASE(test_run_good);
    CASE(test_tensor_bytes_do_not_match_shape);
    CASE(test_tensor_offset_not_aligned);
    CASE(test_tensor_outside_body);
    CASE(test_tensor_unknown_dtype);
    CASE(test_tensor_rank_over_8);
    CASE(test_tensor_bad_dims);
    CASE(test_empty_strings);
    CASE(test_tensor_bool_byte_2);
    CASE(test_feed_not_a_tensor);
    CASE(test_feeds_malformed);
    CASE(test_run_unknown_handle);
    CASE(test_run_stale_incarnation);
    CASE(test_deregister_unknown_handle);
    CASE(test_registrations_do_not_wait_for_dials);
    CASE(test_register_malformed_graph);
    CASE(test_register_graph_outside_body);
    CASE(test_register_device_of_another_task);
    CASE(test_register_stale_incarnation);
    CASE(test_register_bad_endpoints);
    CASE(test_bad_container_names);
    CASE(test_private_container);
    CASE(test_reset);
    CASE(test_duplicate_request_id);
    CASE(test_repeated_run_after_it_finished);
    CASE(test_repeated_run_after_2_31_steps);
    CASE(test_repeated_run_while_running);
    CASE(test_push_key_for_other_tasks);
    CASE(test_push_stale_incarnation);
    CASE(test_push_from_unknown_task);
    CASE(test_push_malformed_key);
    CASE(test_push_bad_tensor);
    CASE(test_many_orphan_pushes);
    CASE(test_disconnect_during_steps);
    CASE(test_client_stops_reading);
    CASE(test_frames_servers_do_not_take);
    CASE(test_bad_abort);
    CASE(test_request_before_auth);
    CASE(test_garbage_before_auth);
    CASE(test_auth_malformed);
    CASE(test_auth_wrong_mac);
    CASE(test_auth_other_cluster);
    CASE(test_auth_tampered_cluster);
    CASE(test_master_wrong_secret);
    CASE(test_master_without_secret);
    CASE(test_master_secret_server_without);
    CASE(test_master_other_cluster);
    CASE(test_server_of_another_version);
    CASE(test_server_identity_options);
  }
  if (reg_conn.fd >= 0) rc_close(&reg_conn);
  gr_server_free(srv);
  gr_server_free(srv_secret);
  free(part_a.graph);
  free(part_b.graph);
  free(log_buf);
  printf("bad input: %d cases in %lld ms\n", num_cases, (long long)(gr_wire_now_ms() - start));
  return gr_test_finish();
}

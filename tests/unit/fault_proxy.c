/* gt_proxy: a fault-injecting TCP proxy for tests (fault_proxy.h). One
 * thread polls the listener, a wake-up pipe and both sockets of every
 * connection; each direction of a connection is a queue of chunks stamped
 * with the time they may be forwarded (DELAY), bounded so a slow reader
 * slows the writer as TCP would. */
#include "fault_proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS    64
#define QUEUE_MAX    (4u << 20) /* bytes held per direction before reading stops */
#define CHUNK        65536
#define CUT_LINGER   2000 /* ms a cut connection waits for its ends to close */
#define MAX_EVENTS   64
#define LOG_CAP      8192
#define FRAME_HEADER 16

typedef struct chunk {
  struct chunk *next;
  size_t len, off;
  int64_t ready_ms;
  char data[];
} chunk;

typedef struct flow { /* one direction: src -> dst */
  chunk *head, *tail;
  size_t queued;
  uint64_t in, out; /* bytes read from src, written to dst */
  bool eof;         /* src ended: FIN to dst once the queue is empty */
  bool shut;        /* FIN sent to dst */
  /* wire frames seen in the bytes read: the cut point of a TRUNCATE */
  unsigned char hdr[FRAME_HEADER];
  int hdr_have;
  uint64_t frame_left; /* bytes of the current frame still to come */
  bool unframed;       /* not graphrun frames: TRUNCATE cuts at once */
  bool armed;          /* TRUNCATE: cut in the next frame */
  long arm_bytes;
  int64_t cut_at;  /* -1, or the byte offset (of `out`) where the connection is cut */
  int64_t flip_at; /* -1, or the byte offset (of `in`) that TAMPER alters */
} flow;

typedef struct conn {
  bool used;
  int fd[2]; /* 0: the client's end, 1: the target's */
  flow f[2]; /* f[GT_DIR_TO_CLIENT]: fd[1] -> fd[0]; f[GT_DIR_TO_TARGET]: fd[0] -> fd[1] */
  bool cut;  /* DROP/TRUNCATE done: FIN sent both ways, input discarded */
  int64_t cut_ms;
  long seq; /* accepted as the seq-th connection (from 1) */
} conn;

struct gt_proxy {
  int listen_fd, port, wake[2];
  struct sockaddr_in target;
  pthread_t thread;
  pthread_mutex_t mu;
  bool stop;
  /* under mu: what the control functions asked for */
  bool have_request;
  gt_fault request;
  gt_proxy_event events[MAX_EVENTS];
  int num_events, next_event;
  int64_t sched_base;
  bool random_on;
  gt_proxy_random rnd;
  uint64_t rng;
  int64_t random_next_ms; /* when the next random step happens */
  bool random_holding;    /* a random DELAY/BLACKHOLE is on until random_next_ms */
  gt_proxy_stats stats;
  char log[LOG_CAP];
  size_t log_len;
  int64_t t0;
  /* the thread's own */
  gt_fault mode; /* DELAY or BLACKHOLE or NONE: what lasts */
  conn conns[MAX_CONNS];
};

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *gt_fault_name(gt_fault_kind k) {
  static const char *const names[] = {"heal",  "delay",    "drop",  "blackhole",
                                      "reset", "truncate", "tamper"};
  return k >= 0 && k < GT_FAULT_KINDS ? names[k] : "?";
}

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int between(uint64_t *s, int lo, int hi) {
  return hi > lo ? lo + (int)(splitmix(s) % (uint64_t)(hi - lo + 1)) : lo;
}

static void logf_locked(gt_proxy *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_locked(gt_proxy *p, const char *fmt, ...) {
  if (p->log_len + 1 >= LOG_CAP) return;
  int n = snprintf(p->log + p->log_len, LOG_CAP - p->log_len, "+%lld ms ",
                   (long long)(now_ms() - p->t0));
  if (n > 0) p->log_len += (size_t)n < LOG_CAP - p->log_len ? (size_t)n : LOG_CAP - 1 - p->log_len;
  va_list ap;
  va_start(ap, fmt);
  n = vsnprintf(p->log + p->log_len, LOG_CAP - p->log_len, fmt, ap);
  va_end(ap);
  if (n > 0) p->log_len += (size_t)n < LOG_CAP - p->log_len ? (size_t)n : LOG_CAP - 1 - p->log_len;
  if (p->log_len + 1 < LOG_CAP) p->log[p->log_len++] = '\n';
  p->log[p->log_len] = '\0';
}

static void wake(gt_proxy *p) {
  char b = 1;
  if (write(p->wake[1], &b, 1) < 0) { /* full: a wake-up is pending anyway */
  }
}

/* ---- connections ---------------------------------------------------------------- */

static void flow_clear(flow *f) {
  for (chunk *c = f->head, *n; c; c = n) n = c->next, free(c);
  memset(f, 0, sizeof *f);
  f->cut_at = -1;
  f->flip_at = -1;
}

static void conn_close(gt_proxy *p, conn *c, bool rst) {
  for (int i = 0; i < 2; i++) {
    if (c->fd[i] < 0) continue;
    if (rst) {
      struct linger l = {1, 0};
      setsockopt(c->fd[i], SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    close(c->fd[i]);
    c->fd[i] = -1;
  }
  flow_clear(&c->f[0]);
  flow_clear(&c->f[1]);
  c->used = false;
  (void)p;
}

/* FIN to both ends; whatever they still send is discarded until they close. */
static void conn_cut(conn *c) {
  for (int i = 0; i < 2; i++)
    if (c->fd[i] >= 0) shutdown(c->fd[i], SHUT_WR);
  flow_clear(&c->f[0]);
  flow_clear(&c->f[1]);
  c->cut = true;
  c->cut_ms = now_ms();
}

static void accept_one(gt_proxy *p) {
  int cfd = accept4(p->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (cfd < 0) return;
  conn *c = NULL;
  for (int i = 0; i < MAX_CONNS && !c; i++)
    if (!p->conns[i].used) c = &p->conns[i];
  int tfd = c ? socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0) : -1;
  /* a blocking connect: the target is on loopback, it answers or refuses at once */
  if (tfd < 0 || connect(tfd, (struct sockaddr *)&p->target, sizeof p->target) != 0) {
    struct linger l = {1, 0}; /* as a dead target would: refused */
    setsockopt(cfd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(cfd);
    if (tfd >= 0) close(tfd);
    return;
  }
  fcntl(tfd, F_SETFL, fcntl(tfd, F_GETFL) | O_NONBLOCK);
  int one = 1;
  setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(tfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  memset(c, 0, sizeof *c);
  c->used = true;
  c->fd[0] = cfd;
  c->fd[1] = tfd;
  flow_clear(&c->f[0]);
  flow_clear(&c->f[1]);
  pthread_mutex_lock(&p->mu);
  c->seq = ++p->stats.accepted;
  pthread_mutex_unlock(&p->mu);
}

/* Follows the frames in bytes just read into f; sets the cut point of an
 * armed TRUNCATE at the next frame's middle. */
static void track_frames(flow *f, const unsigned char *b, size_t n, uint64_t at) {
  size_t i = 0;
  while (i < n && !f->unframed) {
    if (f->frame_left > 0) {
      size_t take = n - i < f->frame_left ? n - i : (size_t)f->frame_left;
      f->frame_left -= take;
      i += take;
      continue;
    }
    f->hdr[f->hdr_have++] = b[i++];
    if (f->hdr_have < FRAME_HEADER) continue;
    f->hdr_have = 0;
    if (memcmp(f->hdr, "GRWF", 4) != 0) {
      f->unframed = true;
      break;
    }
    uint32_t hl = (uint32_t)f->hdr[8] | (uint32_t)f->hdr[9] << 8 | (uint32_t)f->hdr[10] << 16 |
                  (uint32_t)f->hdr[11] << 24;
    uint32_t bl = (uint32_t)f->hdr[12] | (uint32_t)f->hdr[13] << 8 | (uint32_t)f->hdr[14] << 16 |
                  (uint32_t)f->hdr[15] << 24;
    uint64_t len = FRAME_HEADER + (uint64_t)hl + bl;
    f->frame_left = len - FRAME_HEADER;
    if (f->armed && len > FRAME_HEADER + 1) {
      uint64_t start = at + i - FRAME_HEADER;
      uint64_t keep = f->arm_bytes > 0 ? (uint64_t)f->arm_bytes : len / 2;
      if (keep < FRAME_HEADER + 1) keep = FRAME_HEADER + 1;
      if (keep > len - 1) keep = len - 1;
      f->cut_at = (int64_t)(start + keep);
      f->armed = false;
    }
  }
  if (f->unframed && f->armed) { /* not our frames: cut where it is */
    f->cut_at = (int64_t)(f->out + (f->arm_bytes > 0 ? (uint64_t)f->arm_bytes : 1));
    f->armed = false;
  }
}

/* Reads what src has into f (bounded); false when the connection must end. */
static bool flow_read(gt_proxy *p, conn *c, int d, int64_t now) {
  flow *f = &c->f[d];
  int src = c->fd[d == GT_DIR_TO_CLIENT ? 1 : 0];
  while (f->queued < QUEUE_MAX && !f->eof) {
    chunk *k = malloc(sizeof *k + CHUNK);
    if (!k) return false;
    ssize_t r = recv(src, k->data, CHUNK, 0);
    if (r <= 0) {
      free(k);
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) return true;
      if (r < 0) return false; /* reset: passed on as a reset */
      f->eof = true;
      return true;
    }
    k->len = (size_t)r;
    k->off = 0;
    k->next = NULL;
    k->ready_ms = now + (p->mode.kind == GT_FAULT_DELAY ? p->mode.delay_ms : 0);
    track_frames(f, (unsigned char *)k->data, k->len, f->in);
    if (f->flip_at >= 0 && (uint64_t)f->flip_at < f->in + k->len) {
      k->data[(uint64_t)f->flip_at - f->in] ^= 0x01;
      f->flip_at = -1;
      pthread_mutex_lock(&p->mu);
      p->stats.tampered++;
      pthread_mutex_unlock(&p->mu);
    }
    f->in += k->len;
    f->queued += k->len;
    if (f->tail)
      f->tail->next = k;
    else
      f->head = k;
    f->tail = k;
    if ((size_t)r < CHUNK) return true;
  }
  return true;
}

/* Writes the ready part of f; false when the connection must end (an end
 * reset, or the TRUNCATE cut point reached: *truncated). */
static bool flow_write(gt_proxy *p, conn *c, int d, int64_t now, bool *truncated) {
  flow *f = &c->f[d];
  int dst = c->fd[d == GT_DIR_TO_CLIENT ? 0 : 1];
  while (f->head && f->head->ready_ms <= now) {
    chunk *k = f->head;
    size_t n = k->len - k->off;
    if (f->cut_at >= 0 && f->out + n > (uint64_t)f->cut_at)
      n = (size_t)((uint64_t)f->cut_at - f->out);
    if (n > 0) {
      ssize_t w = send(dst, k->data + k->off, n, MSG_NOSIGNAL);
      if (w < 0) return errno == EAGAIN || errno == EINTR;
      k->off += (size_t)w;
      f->out += (uint64_t)w;
      f->queued -= (size_t)w;
      pthread_mutex_lock(&p->mu);
      if (d == GT_DIR_TO_CLIENT)
        p->stats.to_client += (uint64_t)w;
      else
        p->stats.to_target += (uint64_t)w;
      pthread_mutex_unlock(&p->mu);
    }
    if (f->cut_at >= 0 && f->out >= (uint64_t)f->cut_at) {
      *truncated = true;
      return false;
    }
    if (k->off < k->len) return true; /* the socket is full */
    f->head = k->next;
    if (!f->head) f->tail = NULL;
    free(k);
  }
  if (!f->head && f->eof && !f->shut) {
    shutdown(dst, SHUT_WR);
    f->shut = true;
  }
  return true;
}

/* ---- faults ---------------------------------------------------------------------- */

static void apply(gt_proxy *p, gt_fault f) {
  int n = 0;
  for (int i = 0; i < MAX_CONNS; i++) {
    conn *c = &p->conns[i];
    if (!c->used || c->cut) continue;
    n++;
    if (f.kind == GT_FAULT_RESET) {
      conn_close(p, c, true);
    } else if (f.kind == GT_FAULT_DROP) {
      conn_cut(c);
    } else if (f.kind == GT_FAULT_TRUNCATE) {
      c->f[f.dir].armed = true;
      c->f[f.dir].arm_bytes = f.bytes;
    } else if (f.kind == GT_FAULT_TAMPER && (!f.conn || f.conn == c->seq)) {
      c->f[f.dir].flip_at = (int64_t)c->f[f.dir].in + (f.bytes > 0 ? f.bytes : 0);
    }
  }
  if (f.kind == GT_FAULT_NONE || f.kind == GT_FAULT_DELAY || f.kind == GT_FAULT_BLACKHOLE) {
    p->mode = f;
    if (f.kind != GT_FAULT_BLACKHOLE) /* a heal disarms pending truncations too */
      for (int i = 0; i < MAX_CONNS && f.kind == GT_FAULT_NONE; i++)
        p->conns[i].f[0].armed = p->conns[i].f[1].armed = false;
  }
  pthread_mutex_lock(&p->mu);
  if (f.kind != GT_FAULT_NONE) p->stats.faults++;
  if (f.kind == GT_FAULT_RESET) p->stats.resets += n;
  if (f.kind == GT_FAULT_DROP) p->stats.drops += n;
  if (f.kind == GT_FAULT_DELAY)
    logf_locked(p, "delay %d ms", f.delay_ms);
  else if (f.kind == GT_FAULT_TRUNCATE || f.kind == GT_FAULT_TAMPER)
    logf_locked(p, "%s (%s, %d connections)", gt_fault_name(f.kind),
                f.dir == GT_DIR_TO_CLIENT ? "to the client" : "to the target", n);
  else
    logf_locked(p, "%s (%d connections)", gt_fault_name(f.kind), n);
  pthread_mutex_unlock(&p->mu);
}

/* What the control side asked for and what the schedule or the random mode
 * says now; returns the ms until the next timed event (-1: none). */
static int64_t control(gt_proxy *p, int64_t now) {
  gt_fault todo[MAX_EVENTS + 2];
  int n = 0;
  int64_t next = -1;
  pthread_mutex_lock(&p->mu);
  if (p->have_request) todo[n++] = p->request, p->have_request = false;
  while (p->next_event < p->num_events && p->sched_base + p->events[p->next_event].at_ms <= now &&
         n < MAX_EVENTS)
    todo[n++] = p->events[p->next_event++].fault;
  if (p->next_event < p->num_events) next = p->sched_base + p->events[p->next_event].at_ms - now;
  if (p->random_on && p->random_next_ms <= now) {
    gt_proxy_random *r = &p->rnd;
    if (p->random_holding) {
      todo[n++] = (gt_fault){.kind = GT_FAULT_NONE};
      p->random_holding = false;
      p->random_next_ms = now + between(&p->rng, r->gap_min_ms, r->gap_max_ms);
    } else {
      int kinds[GT_FAULT_KINDS], nk = 0;
      for (int k = 1; k < GT_FAULT_KINDS; k++)
        if (r->kinds & (1u << k)) kinds[nk++] = k;
      gt_fault f = {.kind =
                        nk ? (gt_fault_kind)kinds[splitmix(&p->rng) % (uint64_t)nk] : GT_FAULT_NONE,
                    .delay_ms = r->delay_ms,
                    .dir = (gt_dir)(splitmix(&p->rng) % 2)};
      todo[n++] = f;
      p->random_holding = f.kind == GT_FAULT_DELAY || f.kind == GT_FAULT_BLACKHOLE;
      p->random_next_ms =
          now + (p->random_holding ? between(&p->rng, r->hold_min_ms, r->hold_max_ms)
                                   : between(&p->rng, r->gap_min_ms, r->gap_max_ms));
    }
  }
  if (p->random_on) {
    int64_t left = p->random_next_ms - now;
    if (next < 0 || left < next) next = left;
  }
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < n; i++) apply(p, todo[i]);
  return next;
}

/* ---- the thread ------------------------------------------------------------------ */

static void *run(void *arg) {
  gt_proxy *p = arg;
  struct pollfd pf[2 + 2 * MAX_CONNS];
  int who[2 + 2 * MAX_CONNS];
  for (;;) {
    pthread_mutex_lock(&p->mu);
    bool stop = p->stop;
    pthread_mutex_unlock(&p->mu);
    if (stop) break;
    int64_t now = now_ms();
    int64_t timeout = control(p, now);
    bool hole = p->mode.kind == GT_FAULT_BLACKHOLE;
    int np = 0;
    pf[np++] = (struct pollfd){.fd = p->wake[0], .events = POLLIN};
    who[0] = -1;
    pf[np++] = (struct pollfd){.fd = p->listen_fd, .events = POLLIN};
    who[1] = -1;
    for (int i = 0; i < MAX_CONNS; i++) {
      conn *c = &p->conns[i];
      if (!c->used) continue;
      if (c->cut && now - c->cut_ms > CUT_LINGER) {
        conn_close(p, c, false);
        continue;
      }
      for (int e = 0; e < 2; e++) { /* e: the end; flow e reads... see below */
        if (c->fd[e] < 0) continue;
        /* end 0 (client) is read into TO_TARGET and written from TO_CLIENT */
        flow *in = &c->f[e == 0 ? GT_DIR_TO_TARGET : GT_DIR_TO_CLIENT];
        flow *out = &c->f[e == 0 ? GT_DIR_TO_CLIENT : GT_DIR_TO_TARGET];
        short ev = 0;
        if (c->cut || (!hole && in->queued < QUEUE_MAX && !in->eof)) ev |= POLLIN;
        if (!c->cut && !hole && out->head) {
          if (out->head->ready_ms <= now)
            ev |= POLLOUT;
          else if (timeout < 0 || out->head->ready_ms - now < timeout)
            timeout = out->head->ready_ms - now;
        }
        pf[np] = (struct pollfd){.fd = c->fd[e], .events = ev};
        who[np++] = i * 2 + e;
      }
      if (c->cut && (timeout < 0 || timeout > 100)) timeout = 100;
    }
    int r = poll(pf, (nfds_t)np, timeout < 0 ? 1000 : (int)(timeout > 1000 ? 1000 : timeout));
    if (r < 0 && errno != EINTR) break;
    if (pf[0].revents) {
      char b[64];
      while (read(p->wake[0], b, sizeof b) > 0) {}
    }
    if (pf[1].revents & POLLIN) accept_one(p);
    now = now_ms();
    for (int k = 2; k < np; k++) {
      conn *c = &p->conns[who[k] / 2];
      int e = who[k] % 2;
      if (!c->used || !pf[k].revents) continue;
      if (c->cut) { /* discard until the end closes */
        char sink[4096];
        ssize_t n = recv(c->fd[e], sink, sizeof sink, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          close(c->fd[e]);
          c->fd[e] = -1;
          if (c->fd[0] < 0 && c->fd[1] < 0) conn_close(p, c, false);
        }
        continue;
      }
      int din = e == 0 ? GT_DIR_TO_TARGET : GT_DIR_TO_CLIENT;
      if ((pf[k].revents & (POLLIN | POLLHUP | POLLERR)) && !flow_read(p, c, din, now)) {
        conn_close(p, c, true); /* an end reset: so does the other */
        continue;
      }
    }
    /* forward what is ready, in both directions of every connection */
    for (int i = 0; i < MAX_CONNS && p->mode.kind != GT_FAULT_BLACKHOLE; i++) {
      conn *c = &p->conns[i];
      if (!c->used || c->cut) continue;
      bool ok = true;
      for (int d = 0; d < 2 && ok; d++) {
        bool truncated = false;
        ok = flow_write(p, c, d, now, &truncated);
        if (truncated) {
          conn_cut(c);
          pthread_mutex_lock(&p->mu);
          p->stats.truncations++;
          logf_locked(p, "cut a connection in the middle of a frame (%s)",
                      d == GT_DIR_TO_CLIENT ? "to the client" : "to the target");
          pthread_mutex_unlock(&p->mu);
        } else if (!ok) {
          conn_close(p, c, true);
        }
      }
      if (ok && c->used && !c->cut && c->f[0].shut && c->f[1].shut) conn_close(p, c, false);
    }
  }
  for (int i = 0; i < MAX_CONNS; i++)
    if (p->conns[i].used) conn_close(p, &p->conns[i], false);
  return NULL;
}

/* ---- control --------------------------------------------------------------------- */

static gt_proxy *start(const char *listen_host, const char *target, bool loopback_only) {
  char host[64];
  const char *colon = target ? strrchr(target, ':') : NULL;
  gt_proxy *p = calloc(1, sizeof *p);
  if (!p || !colon || (size_t)(colon - target) >= sizeof host) {
    fprintf(stderr, "gt_proxy: bad target '%s'\n", target ? target : "(null)");
    free(p);
    return NULL;
  }
  memcpy(host, target, (size_t)(colon - target));
  host[colon - target] = '\0';
  p->target.sin_family = AF_INET;
  p->target.sin_port = htons((uint16_t)atoi(colon + 1));
  if (inet_pton(AF_INET, host, &p->target.sin_addr) != 1 ||
      (loopback_only && (ntohl(p->target.sin_addr.s_addr) >> 24) != 127)) {
    fprintf(stderr, "gt_proxy: the target must be a loopback address, got '%s'\n", target);
    free(p);
    return NULL;
  }
  p->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (listen_host && inet_pton(AF_INET, listen_host, &a.sin_addr) != 1) {
    fprintf(stderr, "gt_proxy: bad listen address '%s'\n", listen_host);
    close(p->listen_fd);
    free(p);
    return NULL;
  }
  if (p->listen_fd < 0 || bind(p->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      listen(p->listen_fd, 64) != 0 || getsockname(p->listen_fd, (struct sockaddr *)&a, &al) != 0 ||
      pipe2(p->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
    fprintf(stderr, "gt_proxy: cannot listen: %s\n", strerror(errno));
    if (p->listen_fd >= 0) close(p->listen_fd);
    free(p);
    return NULL;
  }
  p->port = ntohs(a.sin_port);
  p->t0 = now_ms();
  pthread_mutex_init(&p->mu, NULL);
  if (pthread_create(&p->thread, NULL, run, p) != 0) {
    fprintf(stderr, "gt_proxy: cannot start its thread\n");
    close(p->listen_fd), close(p->wake[0]), close(p->wake[1]);
    pthread_mutex_destroy(&p->mu);
    free(p);
    return NULL;
  }
  return p;
}

gt_proxy *gt_proxy_start(const char *target) {
  return start(NULL, target, true);
}

gt_proxy *gt_proxy_start_on(const char *listen_host, const char *target) {
  return start(listen_host, target, false);
}

int gt_proxy_port(const gt_proxy *p) {
  return p->port;
}

void gt_proxy_fault(gt_proxy *p, gt_fault f) {
  pthread_mutex_lock(&p->mu);
  p->request = f;
  p->have_request = true;
  p->num_events = p->next_event = 0;
  p->random_on = false;
  pthread_mutex_unlock(&p->mu);
  wake(p);
}

void gt_proxy_heal(gt_proxy *p) {
  gt_proxy_fault(p, (gt_fault){.kind = GT_FAULT_NONE});
}

void gt_proxy_schedule(gt_proxy *p, const gt_proxy_event *events, int n) {
  pthread_mutex_lock(&p->mu);
  p->num_events = n < MAX_EVENTS ? n : MAX_EVENTS;
  memcpy(p->events, events, (size_t)p->num_events * sizeof *events);
  p->next_event = 0;
  p->sched_base = now_ms();
  p->random_on = false;
  pthread_mutex_unlock(&p->mu);
  wake(p);
}

void gt_proxy_random_faults(gt_proxy *p, const gt_proxy_random *r) {
  pthread_mutex_lock(&p->mu);
  p->rnd = *r;
  p->rng = r->seed;
  p->random_on = true;
  p->random_holding = false;
  p->random_next_ms = now_ms() + between(&p->rng, r->gap_min_ms, r->gap_max_ms);
  p->num_events = p->next_event = 0;
  pthread_mutex_unlock(&p->mu);
  wake(p);
}

gt_proxy_stats gt_proxy_get_stats(gt_proxy *p) {
  pthread_mutex_lock(&p->mu);
  gt_proxy_stats s = p->stats;
  pthread_mutex_unlock(&p->mu);
  return s;
}

void gt_proxy_log(gt_proxy *p, char *buf, size_t cap) {
  pthread_mutex_lock(&p->mu);
  snprintf(buf, cap, "%s", p->log);
  pthread_mutex_unlock(&p->mu);
}

void gt_proxy_stop(gt_proxy *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_mutex_unlock(&p->mu);
  wake(p);
  pthread_join(p->thread, NULL);
  close(p->listen_fd);
  close(p->wake[0]);
  close(p->wake[1]);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

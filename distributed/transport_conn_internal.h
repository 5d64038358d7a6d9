/* What transport.c and transport_dial.c share about loops and connections.
 * Internal to the transport. */
#ifndef GR_TRANSPORT_CONN_INTERNAL_H
#define GR_TRANSPORT_CONN_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "core/core_engine.h" /* GR_ASSERT_ON_LOOP, GR_ASSERT_HELD */
#include "distributed/frame_mac_internal.h"
#include "distributed/handshake_internal.h"
#include "distributed/loglimit_internal.h"
#include "distributed/tls_internal.h"
#include "distributed/transport_internal.h"

#define GR_AUTH_READ_MAX 256 /* bytes read from a peer before it authenticates */

/* Receive memory (transport_body.c, transport_limits.c). */
#define GR_RXBODY_FIRST     ((size_t)4096)      /* a body's first piece of memory */
#define GR_RXBODY_SMALL     ((size_t)1 << 20)   /* larger bodies live in a mapping (mremap) */
#define GR_STAGE_MIN        ((size_t)4096)      /* a connection's staging buffer at first */
#define GR_STAGE_MAX        ((size_t)65536)     /* ... grown for traffic (a large map: more) */
#define GR_RXMAP_KEEP_BYTES ((size_t)256 << 20) /* freed bodies' mappings kept for reuse */
#define GR_RXMAP_KEEP_N     32                  /* ... at most this many */

struct event_base;
struct event;
struct ssl_st;

#define GR_TLS_GATHER 16384 /* small pieces of frames go into TLS records of up to this */

/* A frame body being received: grows as bytes arrive (transport_body.c). */
typedef struct gr_rxbody {
  gr_buffer *buf; /* pooled, while at most GR_RXBODY_SMALL */
  uint8_t *map;   /* an anonymous mapping (page-aligned), once larger */
  size_t mapped;  /* its bytes */
  size_t cap;     /* bytes usable */
} gr_rxbody;

/* The capacity to grow a body of len bytes to, from cap, when need bytes
 * must fit: doubling (at first GR_RXBODY_FIRST), at least need, at most
 * len. */
size_t gr_rxbody_next_cap(size_t cap, size_t need, size_t len);
/* Grows b to cap bytes, keeping its first used bytes; len is the body's
 * announced length, for choosing a kept mapping that holds it. */
gr_status gr_rxbody_grow(gr_rxbody *b, size_t cap, size_t used, size_t len, gr_error *err);
uint8_t *gr_rxbody_data(const gr_rxbody *b);
/* The body of len bytes as a 64-byte-aligned buffer (one reference; NULL
 * when out of memory, b untouched); b is empty after. */
gr_buffer *gr_rxbody_finish(gr_rxbody *b, size_t len);
void gr_rxbody_free(gr_rxbody *b);
/* The mappings of large bodies kept for reuse (transport_body.c): at most
 * this many bytes (tests: gr_rxbody_set_keep; 0 keeps none), and how many
 * are kept now. */
void gr_rxbody_set_keep(size_t bytes);
size_t gr_rxbody_kept_bytes(void);

struct gr_loop {
  struct event_base *base;
  struct event *stop_ev; /* activated to stop the loop thread */
  atomic_int stop;
  pthread_t thread;
  pthread_mutex_t mu; /* conns, listeners */
  gr_conn *conns;     /* open connections (a list through prev/next) */
  gr_listener *listeners;
  struct timer *timers;
  /* bounds (transport_limits.c) */
  int accepted;           /* accepted connections open (under mu) */
  size_t rx_held;         /* receive memory its connections hold (loop thread) */
  size_t rx_budget;       /* ... at most this, but for rx_over */
  gr_conn *rx_over;       /* the one connection allowed past the budget */
  gr_conn *rx_wait;       /* connections paused for the budget, first come first */
  gr_loglimit logs;       /* the transport's lines a peer can cause */
  gr_conn_handler log_to; /* where they go: a listener's handler (log, arg) */
  struct event *tick;     /* flushes the logs' summaries */
  int slice_us;           /* the loop thread's scheduler slice (gr_net_slice_us) */
};

/* The calling thread is l's loop thread, or l has been told to stop
 * (gr_loop_free's thread then does what the loop thread did). Checked in
 * debug and sanitizer builds (core/invariants.h). */
#define GR_ASSERT_ON_LOOP(l) GR_ASSERT_ON_THREAD_OR((l)->thread, atomic_load(&(l)->stop))

typedef struct wq_item { /* a message being written */
  gr_outmsg *msg;
  struct iovec *iov; /* into msg, or own */
  int n, i;          /* iovecs, the first not fully written */
  size_t off;        /* bytes of iov[i] written */
  struct wq_item *next;
  /* on a connection with MACs: the tag (the last iovec) is computed as the
   * frame's bytes are written, and written after them */
  bool macs, mac_begun, mac_done;
  uint8_t tag[GR_FMAC_TAG];
  struct iovec own[]; /* with MACs: msg's iovecs, then the tag */
} wq_item;

enum { READ_HEADER, READ_MAP, READ_BODY, READ_TAG /* the frame's MAC */ };

enum { TLS_OFF, TLS_ACCEPTING /* a server's, until its TLS handshake is done */, TLS_ON };

struct gr_conn {
  gr_loop *loop;
  int fd;
  char peer[80];
  gr_conn_handler h;
  atomic_int refs;
  void *user;
  gr_conn *prev, *next; /* in loop->conns */
  struct event *rev, *wev, *timer;
  pthread_mutex_t mu; /* closed and the write queue */
  bool closed, wev_armed;
  wq_item *qhead, *qtail;
  size_t queued;
  /* reading (loop thread only) */
  int rstate;
  uint8_t *stage;
  size_t stage_cap, stage_len, stage_pos;
  bool stage_hot; /* the last read filled it: it may grow */
  gr_inmsg *in;
  gr_rxbody body;
  size_t body_got;
  gr_buffer *into; /* the body is read into into->data + into_off (body_into), not body */
  size_t into_off;
  size_t rx_held;        /* stage_cap + body.cap, counted in the loop's rx_held */
  bool rx_paused;        /* waiting for the receive budget: not reading */
  gr_conn *rx_wait_next; /* in loop->rx_wait */
  int64_t last_rx_ms;    /* when bytes last arrived (atomic) */
  int64_t last_tx_ms;    /* when a message was last sent (atomic; 0: none yet) */
  int64_t born_ms;       /* when it was made */
  /* an accepted connection's handshake is done: authenticated (with a
   * secret), else its first frame's map has arrived; until then its
   * deadline is the handshake's, and it may make room for a new one at the
   * connection limit */
  bool ready;
  /* the errno of the first failed write (under mu; 0: none): a reset that
   * a send met first consumed the socket's error, and the read then sees
   * only the end of the stream */
  int write_errno;
  /* the server side of the handshake (handshake_internal.h): until the
   * peer's AUTH is accepted a server's connection is not authed */
  bool is_server, authed;
  char *secret;                        /* NULL: an insecure server */
  char cluster[GR_CLUSTER_ID_MAX + 1]; /* the server's cluster id ("": none) */
  uint8_t nonce[GR_AUTH_NONCE];        /* its HELLO's */
  uint8_t mode;                        /* what its HELLO required (GR_AUTH_MODE_*) */
  size_t pre_auth;
  /* protection after the handshake (docs/security.md) */
  struct ssl_st *ssl;  /* TLS (NULL: none); every call on it under mu */
  int tls_state;       /* TLS_*: written under mu on the loop thread */
  gr_tls *tls;         /* a server's, until its TLS handshake starts (a reference) */
  bool tls_heard;      /* a server's: the client's TLS handshake sent bytes (loop thread) */
  bool tls_want_write; /* a TLS read (or handshake) waits for the socket to be writable (mu) */
  uint8_t *gather;     /* GR_TLS_GATHER bytes: small pieces of frames, one TLS record */
  char tls_why[400];   /* why the last TLS call failed (mu) */
  gr_fmac *tx_mac;     /* per-frame MACs (NULL: none): the sender's, under mu */
  gr_fmac *rx_mac;     /* the receiver's, loop thread */
};

/* A connection over a connected socket fd (taken), registered with the loop.
 * The loop holds a reference; a client connection (!is_server) comes with a
 * second one for the caller, and with its protection from the handshake:
 * ssl (taken; NULL: none) and the frame keys (NULL: no MACs). */
gr_status gr_conn_attach(gr_loop *l, int fd, const char *peer, bool is_server, const char *secret,
                         struct ssl_st *ssl, const uint8_t *keys, const gr_conn_handler *h,
                         gr_conn **out, gr_error *err);
/* Starts per-frame MACs on c with the handshake's keys (its role's halves).
 * Before anything else is sent or received under them. */
gr_status gr_conn_start_macs(gr_conn *c, const uint8_t keys[GR_AUTH_FRAME_KEYS], gr_error *err);
/* Closes c refusing its peer in the handshake: logs "refused PEER: why;
 * closing that connection" (rate-limited). Loop thread. */
void gr_conn_refuse(gr_conn *c, gr_status code, const char *why);

/* "IP:PORT" ("[IP6]:PORT") of an IPv4 or IPv6 address, else "?"
 * (transport_dial.c). */
struct sockaddr;
void gr_sockaddr_name(const struct sockaddr *sa, char *out, size_t cap);

/* ---- same-host connections over Unix sockets (transport_local.c) ---- */

/* A listening Unix socket for the loopback TCP address `bound` (its
 * abstract name); -1 when it is not loopback, local sockets are off, or
 * the kernel refused (TCP alone then). */
int gr_local_listen(const struct sockaddr *bound);
/* A connected Unix socket to the server listening at TCP address `to`, or
 * -1 (not loopback, local sockets off, nothing listening: dial TCP). */
int gr_local_connect(const struct sockaddr *to);
/* "local process PID" for an accepted Unix connection. */
void gr_local_peer_name(int fd, char *out, size_t cap);

/* ---- TLS (transport_tls.c) ---- */

struct sockaddr;
struct iovec;
/* A peer at sa needs TLS or per-frame MACs: it is not on loopback (or
 * gr_transport_set_loopback_remote says loopback counts). */
bool gr_peer_is_remote(const struct sockaddr *sa);
/* The server's TLS handshake on c goes on as the socket allows: true once
 * done (reading goes on through TLS), false while it waits or when it
 * failed (c refused, logged naming the peer, and closed). Loop thread. */
bool gr_conn_tls_accept(gr_conn *c);
/* Reads like read(): from the socket, or through TLS once c has it (-1
 * with errno EPROTO: a TLS error, c->tls_why says which). Loop thread. */
ssize_t gr_conn_read(gr_conn *c, void *buf, size_t n);
/* Writes through TLS what the pieces v[0..n) start with: small pieces
 * gathered into one record, a large one straight from its memory. Bytes
 * written (one record's), or -1 with errno (EAGAIN: the socket is full;
 * EPROTO: c->tls_why). A write that must be retried is retried with the
 * same bytes (the queue has not moved). Under c->mu. */
ssize_t gr_conn_tls_write(gr_conn *c, const struct iovec *v, int n);
/* Bytes TLS holds that c has not read (at least 1 for a record it has not
 * decrypted); 0 without TLS. Takes c->mu. */
size_t gr_conn_tls_pending(gr_conn *c);
/* A TLS read or handshake waits until the socket takes bytes: the write
 * event wakes the read event then (under c->mu). */
void gr_conn_want_write_locked(gr_conn *c);
/* A log line of the transport through h->log (stderr when NULL). */
void gr_conn_log(const gr_conn_handler *h, const char *line);
/* Closes now (loop thread, or any thread once the loop has stopped). */
void gr_conn_close_now(gr_conn *c, gr_status code, const char *why);
/* The server's side of the handshake: checks the peer's AUTH frame (takes
 * m), then sends AUTH_OK and marks c authed and ready, or logs the refusal
 * naming the peer ("refused 127.0.0.1:40522: a client of cluster ...",
 * rate-limited) and closes c. */
void gr_conn_server_auth(gr_conn *c, gr_inmsg *m);
/* Frees every listener of a stopped loop. */
void gr_listeners_free_all(gr_loop *l);

/* ---- bounds (transport_limits.c) ---- */

/* The transport's line a peer caused, of a kind (a static string), through
 * the loop's rate limit to log_to (stderr when it has none). */
void gr_loop_log(gr_loop *l, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Starts and stops the loop's share of the bounds (its log tick). */
gr_status gr_loop_limits_init(gr_loop *l, gr_error *err);
void gr_loop_limits_free(gr_loop *l);
/* The accepted connections' limit from RLIMIT_NOFILE: the descriptors less
 * a quarter (at least 64) for the process's own files, at least 16, at
 * most 16384. */
int gr_default_max_conns(void);
/* May a new connection from peer be accepted under the limit max? At the
 * limit, room is made (gr_make_room); false (with a line in the log) when
 * there is none: the caller closes it. Loop thread. */
bool gr_conn_admit(gr_loop *l, int max, const char *peer);
/* Closes the oldest accepted connection that has not finished its
 * handshake in a second (logged: closed to make room because ...); false
 * when there is none. Loop thread. */
bool gr_make_room(gr_loop *l, const char *because);
/* Arms c's timer: an accepted connection's handshake deadline, a dialed
 * one's keepalive. */
void gr_conn_limits_start(gr_conn *c);
/* c's handshake is done: its idle deadline starts. Loop thread. */
void gr_conn_set_ready(gr_conn *c);
/* c's timer fired (loop thread). */
void gr_conn_on_timer(gr_conn *c);
/* Receive memory for c (loop thread): gr_rx_charge counts n bytes without
 * asking; gr_rx_reserve counts them within the loop's budget (or as its one
 * connection past it) and else pauses c's reading (false) until another
 * connection frees some; gr_rx_release gives n back and wakes the paused. */
void gr_rx_charge(gr_conn *c, size_t n);
bool gr_rx_reserve(gr_conn *c, size_t n);
void gr_rx_release(gr_conn *c, size_t n);
/* c closes: everything it held is released, it waits no more. */
void gr_rx_drop(gr_conn *c);
/* Counts a pause of accepting (out of descriptors) in the statistics. */
void gr_transport_note_fd_pause(void);
/* Current deadlines (gr_transport_set_deadlines). */
int gr_handshake_ms(void);
int gr_idle_ms(void);
int gr_keepalive_ms(void);

#endif

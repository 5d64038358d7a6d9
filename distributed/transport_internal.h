/* The transport: connections carrying frames (wire_internal.h) over TCP,
 * driven by one libevent loop thread per gr_loop.
 *
 *   gr_loop *loop;  gr_loop_new(&loop, &err);
 *   gr_listener *l; int port;
 *   gr_conn_auth auth = {secret, "exp1", tls};   // tls: NULL, or gr_tls_new's
 *   gr_listener_new(loop, "127.0.0.1", 0, &auth, &handler, &l, &port, &err);  // a server
 *   gr_conn *c;
 *   gr_conn_dial(loop, "127.0.0.1:4000", &auth, 5000, &handler, &c, &err);   // a client
 *   gr_conn_send(c, msg, &err);         // any thread; takes msg
 *   ... handler.on_message(arg, c, in) runs on the loop thread per frame ...
 *   gr_conn_close(c); gr_conn_unref(c);
 *   gr_listener_free(l); gr_loop_free(loop);
 *
 * Reading: a frame's header and map are read through a staging buffer; its
 * body goes straight into a pooled 64-byte-aligned gr_buffer with read(),
 * never through libevent's evbuffers. Writing: gr_conn_send writes with
 * writev() from the caller's thread when nothing is queued (no hop through
 * the loop for a small message); what the socket does not take is queued
 * and written by the loop when the socket is writable. Queued bytes are
 * bounded: a peer that stops reading is disconnected.
 *
 * The handshake (handshake_internal.h): at accept the server sends HELLO
 * (whether it authenticates, its cluster id, a nonce); the client checks
 * the cluster id and answers AUTH (its cluster id; with a secret its nonce
 * and HMAC(secret, "client" | server nonce | client nonce | both ids));
 * the server checks it and answers AUTH_OK (with a secret its HMAC(secret,
 * "server" | client nonce | server nonce | both ids)), which the client
 * checks. Until then a server reads at most 256 bytes from the peer and
 * only an AUTH frame, for at most 10 s. A peer on another host (not
 * loopback) is protected after HELLO: with TLS configured the rest runs
 * over TLS 1.3 (transport_tls.c, both sides presenting a certificate of
 * the cluster's CA), else every frame after AUTH_OK carries a MAC under a
 * key of the handshake (frame_mac_internal.h), checked before the frame
 * is delivered. A peer of another cluster, with
 * another secret, or with none when one is needed, is refused (a server
 * logs it, naming the peer; a client's error names the server's address).
 *
 * Bounds (transport_limits.c; docs/distributed.md, "Limits"), so that no
 * peer can exhaust the server:
 * - Connections: a listener keeps at most max_conns accepted connections
 *   (default from RLIMIT_NOFILE). At the limit a new one takes the place of
 *   the oldest that has not finished its handshake in a second, else it is
 *   closed. When
 *   accept() fails for want of descriptors (EMFILE, ENFILE), the pending
 *   connection is accepted and closed with a spare descriptor kept for that
 *   and the listener pauses 250 ms: no busy loop.
 * - Deadlines: an accepted connection has 10 s for its handshake (its
 *   AUTH, with or without a secret), then is closed after 60 s without a
 *   byte. A dialed connection
 *   keeps itself alive: silent for 15 s, it sends a HEARTBEAT (which the
 *   server answers; nothing waits for the answer), and one at once when it
 *   is made, so a quiet connection (a lease, a peer between steps) lives.
 * - Receive memory: a frame body grows as its bytes arrive (doubling), not
 *   to the size its header announces; the bytes the loop's connections
 *   hold for frames in progress stay within a budget (1 GiB): a connection
 *   that wants more waits, not reading, until another frees some, except
 *   one at a time, which may go past it (a frame larger than the budget
 *   still arrives).
 * - Log lines a peer causes are rate-limited per kind (loglimit_internal.h).
 *
 * Internal to distributed/. */
#ifndef GR_TRANSPORT_INTERNAL_H
#define GR_TRANSPORT_INTERNAL_H

#include "distributed/wire_internal.h"

typedef struct gr_loop gr_loop;
typedef struct gr_conn gr_conn;
typedef struct gr_listener gr_listener;
typedef struct gr_tls gr_tls;

/* Who this end is in the handshake. */
typedef struct gr_conn_auth {
  const char *secret;  /* the cluster's secret (NULL: none, an insecure end) */
  const char *cluster; /* this end's cluster id (NULL: none) */
  gr_tls *tls;         /* TLS for connections across hosts (NULL: none); referenced by
                          whoever keeps it (a listener) */
} gr_conn_auth;

/* A received frame: its header, parsed map and body (one reference, NULL
 * when the body is empty). */
typedef struct gr_inmsg {
  gr_frame_header h;
  gr_msg msg;
  gr_buffer *body;
  size_t body_off; /* the body's first byte in body->data (0 but when read into a buffer) */
} gr_inmsg;
void gr_inmsg_free(gr_inmsg *m); /* frees the map, the body reference and m */

typedef struct gr_conn_handler {
  /* A frame arrived (loop thread; must not block). Takes m. */
  void (*on_message)(void *arg, gr_conn *c, gr_inmsg *m);
  /* The connection closed (loop thread, once; why: the cause; why->code is
   * GR_OK when the peer closed it cleanly between frames). */
  void (*on_close)(void *arg, gr_conn *c, const gr_error *why);
  void *arg;
  /* The transport's log lines about an accepted connection (a bad frame
   * from the peer, a failed accept): log(arg, line), one line without a
   * newline, on the loop thread. NULL: "graphrun: LINE\n" on stderr. A
   * listener's handler is copied into every connection it accepts. */
  void (*log)(void *arg, const char *line);
  /* A frame failed its MAC (frame MACs across hosts; loop thread, just
   * before on_close): m's header and map as they arrived, NOT authentic
   * (someone on the path may have written them), for failing what waited
   * for that frame (a step's pushed tensor) and nothing else. NULL: none. */
  void (*on_refused)(void *arg, gr_conn *c, const gr_inmsg *m);
  /* A frame's header and map have arrived, its body (h.body_len > 0 bytes)
   * not yet (loop thread; must not block; NULL: none): true to have the
   * body read straight into *buf's data at *off (h.body_len bytes that
   * must be there), a reference to *buf moving to the transport; the
   * message then carries that buffer as its body (body_off = *off). The
   * map is not authentic yet with frame MACs (checked after the body). */
  bool (*body_into)(void *arg, gr_conn *c, const gr_inmsg *m, gr_buffer **buf, size_t *off);
} gr_conn_handler;

/* Starts the loop thread. */
gr_status gr_loop_new(gr_loop **out, gr_error *err);
/* Closes every connection and listener of the loop, stops and joins its
 * thread. on_close runs for each connection still open. */
void gr_loop_free(gr_loop *l);
/* Runs fn(arg) on the loop thread soon (thread-safe). */
gr_status gr_loop_call(gr_loop *l, void (*fn)(void *arg), void *arg, gr_error *err);

/* Listens on host:port (port 0: a free one, *port_out gets it). Accepted
 * connections use handler once their peer passed the handshake against
 * auth (copied; its tls referenced): with a peer that is not on loopback,
 * TLS when auth has it, else per-frame MACs (when it has a secret). */
gr_status gr_listener_new(gr_loop *l, const char *host, int port, const gr_conn_auth *auth,
                          const gr_conn_handler *handler, gr_listener **out, int *port_out,
                          gr_error *err);
void gr_listener_free(gr_listener *ls);

/* Connects to "host:port" with retries (backoff 10 ms doubling to 500 ms)
 * until timeout_ms, passes the handshake as auth says (a secret NULL: the
 * server must not ask for one; with a server not on loopback, TLS when
 * auth has it, else per-frame MACs) and hands the connection to the loop.
 * *out holds one reference for the caller. Errors name the address; a
 * refusal in the handshake (TLS's included) is GR_ERR_UNAUTHENTICATED. */
gr_status gr_conn_dial(gr_loop *l, const char *address, const gr_conn_auth *auth, int timeout_ms,
                       const gr_conn_handler *handler, gr_conn **out, gr_error *err);

/* Sends a message (any thread). Takes msg, also on failure
 * (GR_ERR_UNAVAILABLE once the connection is closed). */
gr_status gr_conn_send(gr_conn *c, gr_outmsg *msg, gr_error *err);
/* Closes the connection (any thread; idempotent): its on_close runs on the
 * loop thread with why = "closed". */
void gr_conn_close(gr_conn *c);
/* Closes it as failed: on_close gets code and why (any thread). */
void gr_conn_fail(gr_conn *c, gr_status code, const char *why);
/* Milliseconds since bytes last arrived on the connection (or since it
 * was made). */
int64_t gr_conn_idle_ms(const gr_conn *c);
/* The peer sent not a byte (a port probe's connection; loop thread). */
bool gr_conn_sent_nothing(const gr_conn *c);
/* When bytes last arrived (gr_wire_now_ms clock; when it was made before
 * any did). */
int64_t gr_conn_last_rx_ms(const gr_conn *c);
/* Bytes have arrived that the loop has not read yet (the loop thread was
 * busy or starved): the peer is not silent. Loop thread only (the
 * connection is not closed under it). */
bool gr_conn_has_unread(gr_conn *c);
/* Runs fn(arg) on the loop thread every period_ms until the loop is freed. */
gr_status gr_loop_every(gr_loop *l, int period_ms, void (*fn)(void *arg), void *arg, gr_error *err);
void gr_conn_ref(gr_conn *c);
void gr_conn_unref(gr_conn *c);
bool gr_conn_is_open(gr_conn *c);
/* "127.0.0.1:40123": the peer's address. */
const char *gr_conn_peer(const gr_conn *c);
/* User data attached to the connection (e.g. the server's session). */
void gr_conn_set_user(gr_conn *c, void *user);
void *gr_conn_user(const gr_conn *c);

/* Limits (settable for tests): bytes queued for writing before a peer that
 * does not read is disconnected; a body's maximum on receive. */
void gr_transport_set_limits(size_t max_queued, size_t max_body);
/* read() calls per readable event before the loop moves on (for tests;
 * 0: the default, 64). */
void gr_transport_set_read_rounds(int rounds);

/* Larger socket buffers for a connection over a Unix socket between
 * processes of one host (fewer wake-ups per frame; transport_local.c). */
void gr_local_tune(int fd);

/* Loopback peers count as on another host (for tests and benchmarks; set
 * before connections are made): TLS or per-frame MACs on them too. */
void gr_transport_set_loopback_remote(bool on);
/* Frame bodies this process has read straight into a receiver's buffer
 * (gr_conn_handler.body_into) so far: tests see that it happens. */
uint64_t gr_transport_bodies_into(void);
/* How a connection is protected now: GR_AUTH_MODE_TLS, _MACS or 0. */
int gr_conn_mode(const gr_conn *c);

/* Deadlines (for tests; 0: the default): an accepted connection's handshake
 * (10000 ms) and idle deadline (60000 ms; < 0: none), a dialed one's
 * keepalive (15000 ms). */
void gr_transport_set_deadlines(int handshake_ms, int idle_ms, int keepalive_ms);
/* The receive memory a loop's connections may hold for frames in progress
 * (for tests; 0: the default, 1 GiB); loops made after the call. */
void gr_transport_set_budget(size_t bytes);
/* At most max accepted connections (0: gr_default_max_conns()). */
void gr_listener_set_max_conns(gr_listener *ls, int max);
/* A line about something c's peer did wrong, rate-limited per kind (a
 * static string) with the loop's other such lines; to the handler's log of
 * the loop's listener, or stderr. Loop thread. */
void gr_conn_log_peer(gr_conn *c, const char *kind, const char *line);
/* What the bounds did, summed over every loop of the process (tests). */
typedef struct gr_transport_stats {
  int64_t rx_held;    /* receive memory held now */
  int64_t rx_paused;  /* connections waiting for the budget now */
  int64_t refused;    /* connections closed at the limit */
  int64_t evicted;    /* connections closed to make room */
  int64_t fd_pauses;  /* accept() out of descriptors: paused */
  int64_t deadlines;  /* connections closed at a handshake or idle deadline */
  int64_t keepalives; /* keepalives sent */
} gr_transport_stats;
void gr_transport_get_stats(gr_transport_stats *out);

/* Splits "host:port" ("[::1]:5000" for IPv6) into host and port. */
gr_status gr_parse_address(const char *address, char *host, size_t host_cap, int *port,
                           gr_error *err);

#endif

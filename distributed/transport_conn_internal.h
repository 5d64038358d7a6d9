/* What transport.c and transport_dial.c share about loops and connections.
 * Internal to the transport. */
#ifndef GR_TRANSPORT_CONN_INTERNAL_H
#define GR_TRANSPORT_CONN_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "distributed/handshake_internal.h"
#include "distributed/transport_internal.h"

#define GR_AUTH_READ_MAX   256   /* bytes read from a peer before it authenticates */
#define GR_AUTH_TIMEOUT_MS 10000 /* time a peer has to authenticate */

struct event_base;
struct event;

struct gr_loop {
  struct event_base *base;
  struct event *stop_ev; /* activated to stop the loop thread */
  atomic_int stop;
  pthread_t thread;
  pthread_mutex_t mu; /* conns, listeners */
  gr_conn *conns;     /* open connections (a list through prev/next) */
  gr_listener *listeners;
  struct timer *timers;
};

typedef struct wq_item { /* a message being written */
  gr_outmsg *msg;
  struct iovec *iov; /* into msg */
  int n, i;          /* iovecs, the first not fully written */
  size_t off;        /* bytes of iov[i] written */
  struct wq_item *next;
} wq_item;

enum { READ_HEADER, READ_MAP, READ_BODY };

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
  gr_inmsg *in;
  gr_buffer *body;
  size_t body_got;
  int64_t last_rx_ms; /* when bytes last arrived (atomic) */
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
  size_t pre_auth;
};

/* A connection over a connected socket fd (taken), registered with the loop.
 * The loop holds a reference; a client connection (!is_server) comes with a
 * second one for the caller. */
gr_status gr_conn_attach(gr_loop *l, int fd, const char *peer, bool is_server, const char *secret,
                         const gr_conn_handler *h, gr_conn **out, gr_error *err);
/* A log line of the transport through h->log (stderr when NULL). */
void gr_conn_log(const gr_conn_handler *h, const char *line);
/* Closes now (loop thread, or any thread once the loop has stopped). */
void gr_conn_close_now(gr_conn *c, gr_status code, const char *why);
/* The server's side of the handshake: checks the peer's AUTH frame (takes
 * m), then sends AUTH_OK and marks c authed, or logs the refusal naming the
 * peer ("refused 127.0.0.1:40522: a client of cluster ...") and closes c. */
void gr_conn_server_auth(gr_conn *c, gr_inmsg *m);
void gr_conn_arm_handshake_timer(gr_conn *c);
/* Frees every listener of a stopped loop. */
void gr_listeners_free_all(gr_loop *l);

#endif

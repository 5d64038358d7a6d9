/* The rendezvous: where a Send and its Recv meet within one step.
 *
 * A key names one transfer of one step:
 *   "src_device;incarnation;dst_device;edge_name;frame:iter"
 * (built by the _send/_recv kernels, core/transfer_ops.c). Each key is sent once and received once
 * per step. Send never blocks: it stores the value (one reference, no copy) until the Recv asks, or
 * hands it straight to a Recv that is already waiting. Recv never blocks a thread: its callback
 * runs when the value arrives (on the sender's thread) or at once when it is there already.
 *
 *   gr_rendezvous *r = gr_rendezvous_new();
 *   gr_rendezvous_send(r, key, &t, false, &err);          // takes a reference
 *   gr_rendezvous_recv(r, key, on_value, arg);              // on_value gets it
 *   gr_rendezvous_abort(r, GR_ERR_CANCELLED, "step cancelled"); // fails waiters
 *   gr_rendezvous_free(r);                                  // drops what is left
 *
 * Dead values (the untaken side of a cond) travel as dead: no tensor, the flag
 * set. After an abort every waiting and later Recv fails with the abort's
 * error and later Sends drop their value.
 *
 * The local rendezvous serves the devices of one process; the distributed
 * runtime provides a remote one with the same keys. Thread-safe. */
#ifndef GR_RENDEZVOUS_H
#define GR_RENDEZVOUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/gr_device.h"
#include "core/gr_status.h"
#include "core/gr_tensor.h"

typedef struct gr_rendezvous gr_rendezvous;

/* Called once per Recv. status GR_OK: *value holds one reference for the
 * callee (empty when dead). Otherwise err says why. */
typedef void (*gr_rendezvous_done_fn)(void *arg, gr_status status, const gr_error *err,
                                      gr_tensor *value, bool dead);

/* What crossed devices through a rendezvous in one step: every send (data,
 * dead or control token) and the bytes of the live tensors among them. */
typedef struct gr_transfer_stats {
  int64_t sends, bytes;
} gr_transfer_stats;

/* A rendezvous implementation: the local one, or the distributed runtime's
 * remote one (same keys). Each function gets the self pointer given to
 * gr_rendezvous_new_with and keeps the contract of the gr_rendezvous_*
 * function of the same name below; free releases self. */
typedef struct gr_rendezvous_ops {
  gr_status (*send)(void *self, const char *key, const gr_tensor *value, bool dead, gr_error *err);
  void (*recv)(void *self, const char *key, gr_rendezvous_done_fn done, void *arg);
  void (*abort)(void *self, gr_status code, const char *msg);
  int (*num_pending)(void *self);
  gr_transfer_stats (*stats)(void *self);
  void (*free)(void *self);
  /* NULL where there is no transport to read into (the local one) */
  void (*expect_into)(void *self, const char *key, const gr_tensor *into);
} gr_rendezvous_ops;

/* A rendezvous over an implementation (ops must outlive it; self is owned:
 * ops->free(self) runs at gr_rendezvous_free). NULL when out of memory (self
 * is then not freed). */
gr_rendezvous *gr_rendezvous_new_with(const gr_rendezvous_ops *ops, void *self);

/* A key taken apart (gr_rendezvous_parse_key). edge and frame point into the
 * key (not NUL-terminated: use their lengths). */
typedef struct gr_rendezvous_key {
  gr_device_spec src, dst; /* full device names */
  uint64_t incarnation;    /* the sending task's */
  const char *edge;        /* "node:output" or a control edge's name */
  size_t edge_len;
  const char *frame; /* loop frame instance path ("" at top level) */
  size_t frame_len;
  int64_t iteration;
} gr_rendezvous_key;

/* Checks and splits "src_device;incarnation;dst_device;edge_name;frame:iter":
 * five parts, the devices full names, the incarnation 16 hex digits, the
 * edge not empty, the iteration a decimal number. Errors
 * (GR_ERR_INVALID_ARGUMENT) quote the key and name the part. Keys come
 * from peers in a cluster: nothing is trusted. */
gr_status gr_rendezvous_parse_key(const char *key, gr_rendezvous_key *out, gr_error *err);

/* The local rendezvous (one process); NULL when out of memory. */
gr_rendezvous *gr_rendezvous_new(void);
void gr_rendezvous_free(gr_rendezvous *r);

/* Stores (or delivers) a new reference to value (NULL: an empty token, for a
 * control edge); value is ignored when dead.
 * GR_ERR_ALREADY_EXISTS when the key was sent already this step. */
gr_status gr_rendezvous_send(gr_rendezvous *r, const char *key, const gr_tensor *value, bool dead,
                             gr_error *err);
/* done(arg, ...) runs exactly once: now, when the value arrives, or on abort. */
void gr_rendezvous_recv(gr_rendezvous *r, const char *key, gr_rendezvous_done_fn done, void *arg);
/* Fails every waiting Recv (and later ones) with code and msg. The first
 * abort's error is kept. */
void gr_rendezvous_abort(gr_rendezvous *r, gr_status code, const char *msg);
/* A hint before the Recv of key: its value, when it comes from another
 * process, may be read off the network straight into `into` (a view of
 * the receiver's buffer, same dtype and number of elements as the value
 * sent), so the receiver need not copy it there; the Recv's value then
 * views into's bytes. Where it is not, nothing changes: the Recv gets its
 * value as always. The bytes are written as the value arrives, no sooner:
 * by then the caller must have no other use for them (what it sent from
 * there has gone). into's buffer is referenced until then, or until the
 * step ends. Once per key. */
void gr_rendezvous_expect_into(gr_rendezvous *r, const char *key, const gr_tensor *into);
/* Number of values sent but not yet received (tests: nothing is left over). */
int gr_rendezvous_num_pending(gr_rendezvous *r);

gr_transfer_stats gr_rendezvous_stats(gr_rendezvous *r);

#endif

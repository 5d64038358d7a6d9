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

#include "core/gr_status.h"
#include "core/gr_tensor.h"

typedef struct gr_rendezvous gr_rendezvous;

/* Called once per Recv. status GR_OK: *value holds one reference for the
 * callee (empty when dead). Otherwise err says why. */
typedef void (*gr_rendezvous_done_fn)(void *arg, gr_status status, const gr_error *err,
                                      gr_tensor *value, bool dead);

gr_rendezvous *gr_rendezvous_new(void); /* NULL when out of memory */
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
/* Number of values sent but not yet received (tests: nothing is left over). */
int gr_rendezvous_num_pending(gr_rendezvous *r);

/* What crossed devices through a rendezvous in one step: every send (data,
 * dead or control token) and the bytes of the live tensors among them. */
typedef struct gr_transfer_stats {
  int64_t sends, bytes;
} gr_transfer_stats;
gr_transfer_stats gr_rendezvous_stats(gr_rendezvous *r);

#endif

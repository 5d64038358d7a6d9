/* collective_all_reduce: one node per device of a group (attrs group_key,
 * group_size, rank; the partitioner fills "devices", core/gr_op.h
 * GR_OP_COLLECTIVE) sums its inputs with those of the other members and
 * gives every member the same bits. Its kernel is asynchronous and runs a
 * schedule of sends and receives over the step's rendezvous, the same path
 * as _send/_recv (so on a cluster the TENSOR frames of the push
 * rendezvous). The inputs are flattened and concatenated into one buffer,
 * which the outputs view (no copy out: an update reads its gradient where
 * the schedule left it); they are not copied in first where the schedule
 * allows (ops/collective_inputs.c): the step that first touches a part
 * reads it from the inputs (a send sends it from there, an add writes
 * inputs + received into the buffer), and what is sent goes as a view,
 * not a copy (send_part). Two schedules
 * (attr algorithm):
 *
 * - ring: the buffer is cut into group_size chunks (s / n elements, one
 *   more for the first s % n); in round r of the reduce-scatter rank d
 *   sends chunk d - r to rank d + 1, which adds it to its own, so chunk c
 *   is added in a fixed order starting at rank c and its total ends on
 *   rank c - 1; the all-gather passes the totals around once more, copied
 *   (the graph ring's order, parallel.c). Each rank sends 2(n - 1)/n of
 *   the buffer: for large buckets. A chunk travels in pieces of at most
 *   attr piece_bytes (0: GR_COLLECTIVE_PIECE_BYTES, and a chunk of at most
 *   GR_COLLECTIVE_WHOLE_PIECES of those whole; set when the graph is
 *   built, so every member agrees), one message each: a rank adds
 *   (or copies) a piece as soon as it arrives and sends it on at once, so
 *   the next piece is on the wire while this one is being added. Every
 *   element is still added in the same order: the same bits.
 * - tree: a binomial reduce of the whole buffer to rank 0 (rank d adds the
 *   sums of its children d + 1, d + 2, d + 4, ... in that order), then a
 *   broadcast down the same tree: 2 ceil(log2 n) steps instead of
 *   2(n - 1), for small buckets.
 *
 *
 * And across hosts (attr hierarchy: "hosts", or "auto", the default, when
 * the members span more than one host and some host has several): each
 * member's host is attr hosts' name for it (the master fills in its
 * tasks' hosts, distributed/master_collective.c), else its task (the
 * devices of one process are one host). Hosts are numbered in the order
 * of their first members; a host's first member is its leader. Inside
 * each host a binomial tree over its members in rank order reduces to the
 * leader; the leaders, in host order, run the ring (with pieces) or the
 * tree (attr algorithm) among themselves; each leader's total goes back
 * down its host's tree, copied. Only the leaders cross hosts: 2(L - 1)/L
 * of the buffer each for L hosts, instead of every member.
 *
 * Same bits: whichever schedule, each element's total is computed once,
 * by one member, in an order fixed by the attrs alone (the ring: chunk c
 * starting at rank c; the tree: children d + 1, d + 2, d + 4, ...; across
 * hosts: each host's tree sum, then those sums in the leaders' ring or
 * tree order), a mean divided once by the group's size, and the result
 * copied to every other member: the same bits on every member and every
 * rerun. Every member reads the same attrs, so they agree on the schedule.
 *
 * collective_all_reduce_sgd (built by gr_minimize for mirrored variables
 * trained by SGD, parallel_collective.c) is the same kernel with update
 * steps in its schedule: after the step that leaves a part holding its
 * total for good, that part of each input's variable (attr apply_vars)
 * takes SGD's step (update_part), so the update runs while the member
 * waits for the next piece, not after the whole bucket.
 *
 * Keys: "DEV;0000000000000000;PEER_DEV;GROUP_KEY#TN.FROM.TO.P;frame:iter",
 * T the phase (s reduce-scatter, g all-gather, r reduce, b broadcast; h
 * reduce and i broadcast inside a host), N
 * the round or the tree's mask, FROM and TO the ranks (members may share a
 * device: soft placement), P the piece of the chunk (0 in the tree): one
 * message per key.
 *
 * Threads: the kernel starts on an executor thread; every later step runs
 * on the thread that delivers the value it waits for (a peer kernel's, or
 * the server's pool for a pushed tensor). A thread-local trampoline keeps
 * the steps of kernels that wake each other from nesting: a wake-up
 * arriving while the thread already advances a collective is queued and
 * run after it returns. A kernel has at most one receive outstanding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_engine.h"
#include "ops/collective_internal.h"
#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

typedef gr_coll_action action; /* ops/collective_internal.h */

typedef struct coll coll;
struct coll {
  gr_kernel_ctx *ctx;
  gr_rendezvous *rv;
  int n, rank;
  bool mean, tree; /* tree: the tree, else the ring (among leaders: hier) */
  gr_dtype dt;
  size_t es;
  int64_t total, piece; /* elements; piece: the ring's most per message */
  action *acts;
  int num_acts, pos;
  char *buf;         /* the flat values: output 0's buffer, which every output views */
  gr_tensor flat;    /* a reference to it: the parts sent are views of it */
  int64_t *seg;      /* seg[i]: input i's first element in the buffer (i <= inputs) */
  bool copied_in;    /* the buffer holds the inputs (else the marked actions read them) */
  char *devs;        /* copy of attr "devices", cut at the commas */
  const char **dev;  /* dev[k]: rank k's device */
  const char *gkey;  /* attr group_key */
  const char *frame; /* ctx->frame_name */
  int64_t iteration;
  gr_tensor got; /* a received part, not yet used */
  bool have;
  gr_var **vars; /* collective_all_reduce_sgd: input i's variable (NULL: none) */
  double lr;
  gr_status st;
  gr_error err;
  coll *next; /* the trampoline's queue */
};

static int mod(int a, int n) {
  return ((a % n) + n) % n;
}

static void act(coll *x, char kind, int peer, char tag, int tag_n, int64_t off, int64_t len) {
  x->acts[x->num_acts++] = (action){kind, tag, peer, tag_n, 0, off, len, false};
}

/* A chunk of len elements goes in pieces of at most x->piece elements (an
 * empty chunk: one empty piece); act_piece plans piece p of the chunk at
 * off. */
static int64_t num_pieces(const coll *x, int64_t len) {
  return len > 0 ? (len + x->piece - 1) / x->piece : 1;
}

static void act_piece(coll *x, char kind, int peer, char tag, int tag_n, int64_t off, int64_t len,
                      int64_t p) {
  int64_t at = p * x->piece, n = len - at < x->piece ? len - at : x->piece;
  act(x, kind, peer, tag, tag_n, off + at, n > 0 ? n : 0);
  x->acts[x->num_acts - 1].piece = p;
}

/* A view of the group: its members map[0..n) (ranks of the whole group), in
 * this order; this member is map[d]. The whole group is the identity. */
typedef struct view {
  int n, d;
  const int *map;
} view;

/* The ring over the view's members: chunk c is s / n elements (one more
 * for the first s % n); in round r of the reduce-scatter member d sends
 * chunk d - r to d + 1 and adds chunk d - 1 - r from d - 1; it then owns
 * chunk d + 1's total; in the all-gather it passes chunk d + 1 - r on and
 * takes chunk d - r. What a round receives is what the next one sends, so
 * it goes piece by piece: receive piece p of round r, add (or copy) it,
 * send it as round r + 1's piece p, then the next piece. The last
 * reduce-scatter round's pieces are chunk d + 1's totals: divided (a mean,
 * by the whole group's size) and sent as the all-gather's first round. */
static void plan_ring(coll *x, view v) {
  int n = v.n, d = v.d, right = v.map[mod(d + 1, n)], left = v.map[mod(d - 1, n)];
  int64_t q = x->total / n, r = x->total % n;
#define OFF(c) ((int64_t)(c)*q + ((c) < r ? (c) : r))
#define LEN(c) (q + ((c) < r))
  for (int64_t p = 0; p < num_pieces(x, LEN(d)); p++)
    act_piece(x, 's', right, 's', 0, OFF(d), LEN(d), p);
  for (int k = 0; k < n - 1; k++) { /* receive round k, send round k + 1 (or g0) */
    int cr = mod(d - 1 - k, n);
    for (int64_t p = 0; p < num_pieces(x, LEN(cr)); p++) {
      act_piece(x, 'a', left, 's', k, OFF(cr), LEN(cr), p);
      if (k == n - 2 && x->mean) act_piece(x, 'd', x->rank, 0, 0, OFF(cr), LEN(cr), p);
      act_piece(x, 's', right, k < n - 2 ? 's' : 'g', k < n - 2 ? k + 1 : 0, OFF(cr), LEN(cr), p);
    }
  }
  for (int k = 0; k < n - 1; k++) {
    int cr = mod(d - k, n);
    for (int64_t p = 0; p < num_pieces(x, LEN(cr)); p++) {
      act_piece(x, 'c', left, 'g', k, OFF(cr), LEN(cr), p);
      if (k < n - 2) act_piece(x, 's', right, 'g', k + 1, OFF(cr), LEN(cr), p);
    }
  }
#undef OFF
#undef LEN
}

/* The tree's two halves over the view's members (the whole buffer per
 * message): a binomial reduce to member 0, each member adding its
 * children's sums to its own in a fixed order (the child at d + 1 first,
 * then d + 2, d + 4, ...), tagged tag; and a broadcast of member 0's
 * total back down the same tree, copied. */
static void plan_tree_reduce(coll *x, view v, char tag) {
  int n = v.n, d = v.d;
  for (int mask = 1; mask < n; mask <<= 1) {
    if (d & mask) {
      act(x, 's', v.map[d - mask], tag, mask, 0, x->total);
      break;
    }
    if (d + mask < n) act(x, 'a', v.map[d + mask], tag, mask, 0, x->total);
  }
}

static void plan_tree_broadcast(coll *x, view v, char tag) {
  int n = v.n, d = v.d, low = d ? d & -d : 1;
  while (!d && low < n) low <<= 1; /* member 0: above its largest child */
  if (d) act(x, 'c', v.map[d - low], tag, low, 0, x->total);
  for (int m = low >> 1; m >= 1; m >>= 1)
    if (d + m < n) act(x, 's', v.map[d + m], tag, m, 0, x->total);
}

/* The tree (small buckets: 2 log n messages of the whole buffer instead of
 * 2(n - 1) rounds): reduce (tag r), a mean divided at member 0, broadcast
 * (tag b). */
static void plan_tree(coll *x, view v) {
  plan_tree_reduce(x, v, 'r');
  if (v.d == 0 && x->mean) act(x, 'd', x->rank, 0, 0, 0, x->total);
  plan_tree_broadcast(x, v, 'b');
}

/* The hierarchical all-reduce: host[k] is member k's host (0, 1, ...
 * numbered in the order of their first members). Inside each host a tree
 * reduces to its first member, the leader (tag h); the leaders, in the
 * order of their hosts, run the ring or the tree (x->tree); each leader's
 * total goes back down its host's tree (tag i). One host: its leader
 * divides a mean. */
static void plan_hier(coll *x, const int *host, int num_hosts, int *mine, int *leaders) {
  int k = 0, i = 0, me = host[x->rank];
  for (int r = 0; r < x->n; r++) {
    if (host[r] == me) {
      if (r == x->rank) i = k;
      mine[k++] = r;
    }
  }
  for (int h = 0, r = 0; h < num_hosts; h++) { /* host h's first member */
    while (host[r] != h) r++;
    leaders[h] = r;
  }
  view in = {k, i, mine};
  plan_tree_reduce(x, in, 'h');
  if (i == 0 && num_hosts > 1) {
    view across = {num_hosts, me, leaders};
    if (x->tree)
      plan_tree(x, across);
    else
      plan_ring(x, across);
  } else if (i == 0 && x->mean) {
    act(x, 'd', x->rank, 0, 0, 0, x->total);
  }
  plan_tree_broadcast(x, in, 'i');
}

static char *make_key(const coll *x, int from, int to, const action *a, char *buf, size_t cap) {
  char *k = buf;
  for (int pass = 0; pass < 2; pass++) {
    int len = snprintf(k, cap, "%s;0000000000000000;%s;%s#%c%d.%d.%d.%lld;%s:%lld", x->dev[from],
                       x->dev[to], x->gkey, a->tag, a->tag_n, from, to, (long long)a->piece,
                       x->frame, (long long)(x->iteration < 0 ? 0 : x->iteration));
    if (len >= 0 && (size_t)len < cap) return k;
    if (pass || len < 0 || !(k = malloc((size_t)len + 1))) return NULL;
    cap = (size_t)len + 1;
  }
  return NULL;
}

static void coll_free(coll *x) {
  if (x->have) gr_tensor_release(&x->got);
  free(x->vars);
  gr_tensor_release(&x->flat);
  free(x->seg);
  free(x->devs), free(x->dev), free(x->acts);
  free(x);
}

/* Ends the kernel: the outputs, views of x->buf, hold the totals (or the
 * error is set); x freed. */
static void finish(coll *x) {
  gr_kernel_ctx *ctx = x->ctx;
  gr_status st = x->st;
  if (st != GR_OK && ctx->err) *ctx->err = x->err;
  coll_free(x);
  gr_kernel_done(ctx, st);
}

static void fail(coll *x, gr_status code, const char *what, int peer, const char *why) {
  if (x->st != GR_OK) return;
  x->st = code;
  gr_error_set(&x->err, code,
               "collective all-reduce '%s' (rank %d of %d, on %s): %s rank %d on %s: %s", x->gkey,
               x->rank, x->n, x->dev[x->rank], what, peer, x->dev[peer], why);
}

/* dst = a + b, elementwise (dst may be a) */
static void add3(gr_dtype dt, char *dst, const char *a, const char *b, int64_t n) {
  switch (dt) {
    case GR_F32: {
      float *d = (float *)dst;
      const float *x = (const float *)a, *y = (const float *)b;
      for (int64_t i = 0; i < n; i++) d[i] = x[i] + y[i];
      break;
    }
    case GR_F64: {
      double *d = (double *)dst;
      const double *x = (const double *)a, *y = (const double *)b;
      for (int64_t i = 0; i < n; i++) d[i] = x[i] + y[i];
      break;
    }
    case GR_I32: {
      int32_t *d = (int32_t *)dst;
      const int32_t *x = (const int32_t *)a, *y = (const int32_t *)b;
      for (int64_t i = 0; i < n; i++) d[i] = (int32_t)((uint32_t)x[i] + (uint32_t)y[i]);
      break;
    }
    default: {
      int64_t *d = (int64_t *)dst;
      const int64_t *x = (const int64_t *)a, *y = (const int64_t *)b;
      for (int64_t i = 0; i < n; i++) d[i] = (int64_t)((uint64_t)x[i] + (uint64_t)y[i]);
      break;
    }
  }
}

/* The inputs' values of elements [off, off + len) of the buffer, in
 * order: into dst (b NULL), or added to b's into dst (dst = inputs + b,
 * the member's own value first, as an add into the buffer would). */
static void from_inputs(const coll *x, char *dst, const char *b, int64_t off, int64_t len) {
  const gr_kernel_ctx *ctx = x->ctx;
  for (int i = 0; i < ctx->num_inputs && len > 0; i++) {
    int64_t lo = x->seg[i], hi = x->seg[i + 1];
    if (off >= hi) continue;
    int64_t m = hi - off < len ? hi - off : len;
    const char *src = (const char *)gr_tensor_data(&ctx->inputs[i]) + (size_t)(off - lo) * x->es;
    if (b) {
      add3(x->dt, dst, src, b, m);
      b += (size_t)m * x->es;
    } else {
      memcpy(dst, src, (size_t)m * x->es);
    }
    dst += (size_t)m * x->es, off += m, len -= m;
  }
}

static void divide(gr_dtype dt, char *p, int64_t n, int by) {
  if (dt == GR_F32)
    for (int64_t i = 0; i < n; i++) ((float *)p)[i] /= (float)by;
  else
    for (int64_t i = 0; i < n; i++) ((double *)p)[i] /= (double)by;
}

static void kick(coll *x);

static void on_recv(void *arg, gr_status status, const gr_error *err, gr_tensor *value, bool dead) {
  coll *x = arg;
  const action *a = &x->acts[x->pos];
  int64_t got = value && value->buf ? gr_tensor_num_elements(value) : 0;
  if (status != GR_OK) {
    fail(x, status, "waiting for", a->peer, err ? err->msg : "failed");
  } else if (dead) {
    fail(x, GR_ERR_INTERNAL, "waiting for", a->peer, "got a dead value");
  } else if (a->len > 0 && (!value || !value->buf || value->dtype != x->dt || got != a->len)) {
    char why[160];
    snprintf(why, sizeof why, "got %lld elements of %s, want %lld of %s", (long long)got,
             value && value->buf ? gr_dtype_name(value->dtype) : "nothing", (long long)a->len,
             gr_dtype_name(x->dt));
    fail(x, GR_ERR_INVALID_ARGUMENT, "from", a->peer, why);
  }
  if (x->st == GR_OK) {
    x->got = value && value->buf ? *value : gr_tensor_empty(); /* the reference moves here */
    x->have = true;
  } else if (value && value->buf) {
    gr_tensor_release(value);
  }
  kick(x);
}

/* Uses what arrived for the receive at x->pos. */
static void take(coll *x) {
  const action *a = &x->acts[x->pos++];
  char *dst = x->buf + (size_t)a->off * x->es;
  if (a->len > 0 && x->got.buf) {
    const char *src = gr_tensor_data(&x->got);
    if (a->kind == 'a' && a->from_inputs)
      from_inputs(x, dst, src, a->off, a->len);
    else if (a->kind == 'a')
      add3(x->dt, dst, dst, src, a->len);
    else if (src != dst) /* else read off the network into its place */
      memcpy(dst, src, (size_t)a->len * x->es);
  }
  gr_tensor_release(&x->got);
  x->have = false;
}

/* A part goes as a view, not a copy: of the flat buffer, or of the input
 * that holds it when the part is still the inputs' (one copy where it
 * spans two). The transport writes it from there (distributed/wire.c
 * references a tensor's buffer), the local rendezvous hands the view over.
 * Safe because nothing writes a range while it is in flight: the inputs
 * are this kernel's until it ends, and an update of a variable copies on
 * write while they are read; in the buffer, a range is added to before it
 * is sent, never after, and is overwritten (the all-gather's copy, the
 * tree's broadcast) only by a total that the peer computed from what it
 * received, so the peer has read every byte of it by then (a frame is
 * whole before it is delivered). */
static gr_status send_part(coll *x, const action *a) {
  char buf[512], *key = make_key(x, x->rank, a->peer, a, buf, sizeof buf);
  gr_tensor t = gr_tensor_empty();
  gr_error e = {0};
  gr_status st = key ? GR_OK : gr_error_set_oom(&e);
  int in = -1; /* the one input the part lies in, when sent from the inputs */
  for (int i = 0; a->from_inputs && i < x->ctx->num_inputs && in < 0; i++)
    if (x->seg[i] <= a->off && a->off + a->len <= x->seg[i + 1]) in = i;
  const gr_tensor *from = in >= 0 ? &x->ctx->inputs[in] : &x->flat;
  int64_t at = in >= 0 ? a->off - x->seg[in] : a->off;
  if (st == GR_OK && a->len > 0 && from->buf && (in >= 0 || !a->from_inputs)) {
    t = *from;
    t.shape = (gr_shape){1, {a->len}};
    t.offset += (size_t)at * x->es;
    gr_buffer_retain(t.buf);
  } else if (st == GR_OK) { /* an empty piece, or one over two inputs */
    st = gr_tensor_alloc(&t, x->dt, &(gr_shape){1, {a->len > 0 ? a->len : 0}}, &e);
    if (st == GR_OK && a->len > 0) from_inputs(x, gr_tensor_data(&t), NULL, a->off, a->len);
  }
  if (st == GR_OK) st = gr_rendezvous_send(x->rv, key, &t, false, &e);
  gr_tensor_release(&t);
  if (key != buf) free(key);
  if (st != GR_OK) fail(x, st, "sending to", a->peer, e.msg);
  return st;
}

/* An update step (collective_all_reduce_sgd): the part [off, off + len)
 * holds its totals for good, so each input's variable takes SGD's step
 * there, var -= learning_rate * total, under the variable's lock, copied
 * first when another holder still reads the old value (copy on write: a
 * reader's value never changes under it). The same arithmetic as apply_sgd:
 * the same bits on every member, and as the unfused update. A read of the
 * variable that the graph does not order with the update may see some
 * parts updated (as TensorFlow's apply ops without use_locking). */
static void update_part(coll *x, int64_t off, int64_t len) {
  const gr_kernel_ctx *ctx = x->ctx;
  for (int i = 0; i < ctx->num_inputs && x->st == GR_OK; i++) {
    int64_t lo = off > x->seg[i] ? off : x->seg[i];
    int64_t hi = off + len < x->seg[i + 1] ? off + len : x->seg[i + 1];
    if (!x->vars[i] || hi <= lo) continue;
    gr_var_lock(x->vars[i]);
    gr_tensor *t = gr_var_value(x->vars[i]);
    if (!t->buf || t->dtype != x->dt ||
        gr_tensor_num_elements(t) != x->seg[i + 1] - x->seg[i]) { /* assigned meanwhile */
      x->st = gr_error_set(&x->err, GR_ERR_FAILED_PRECONDITION,
                           "collective '%s': a variable it updates (input %d) changed its dtype "
                           "or shape during the step",
                           x->gkey, i);
    } else if (!gr_tensor_is_unique(t)) {
      gr_tensor fresh;
      if ((x->st = gr_tensor_copy(t, &fresh, &x->err)) == GR_OK) {
        gr_tensor_release(t);
        *t = fresh;
      }
    }
    if (x->st == GR_OK)
      gr_ops_sgd_range(t, lo - x->seg[i], x->buf + (size_t)lo * x->es, hi - lo, x->lr);
    gr_var_unlock(x->vars[i]);
  }
}

/* Runs the schedule from x->pos: sends and divisions at once, up to the
 * next receive, whose arrival continues it (on_recv); or finishes. */
static void advance(coll *x) {
  if (x->st == GR_OK && x->have) take(x);
  while (x->st == GR_OK && x->pos < x->num_acts) {
    const action *a = &x->acts[x->pos];
    if (a->kind == 's') {
      send_part(x, a);
    } else if (a->kind == 'd') {
      if (a->from_inputs) from_inputs(x, x->buf + (size_t)a->off * x->es, NULL, a->off, a->len);
      divide(x->dt, x->buf + (size_t)a->off * x->es, a->len, x->n);
    } else if (a->kind == 'u') {
      update_part(x, a->off, a->len);
    } else {
      char buf[512], *key = make_key(x, a->peer, x->rank, a, buf, sizeof buf);
      if (!key) {
        x->st = gr_error_set_oom(&x->err);
        break;
      }
      gr_rendezvous_recv(x->rv, key, on_recv, x); /* may call on_recv now: kick queues it */
      if (key != buf) free(key);
      return;
    }
    x->pos++;
  }
  finish(x);
}

static _Thread_local coll *queue_head, *queue_tail;
static _Thread_local bool advancing;

static void kick(coll *x) {
  x->next = NULL;
  if (queue_tail)
    queue_tail->next = x;
  else
    queue_head = x;
  queue_tail = x;
  if (advancing) return; /* the loop below, further up this thread's stack, runs it */
  advancing = true;
  while ((x = queue_head)) {
    queue_head = x->next;
    if (!queue_head) queue_tail = NULL;
    advance(x);
  }
  advancing = false;
}

static void on_cancel(void *arg) {
  gr_rendezvous_abort(arg, GR_ERR_CANCELLED, "the step was cancelled on another device");
}

/* The member devices of attr "devices" into x; checks this rank's. No
 * devices (a step on one device, not partitioned: soft placement put the
 * members together): every member is on this node's device. */
static gr_status read_devices(gr_kernel_ctx *ctx, coll *x) {
  const char *all = gr_node_attr_string(ctx->node, "devices", "");
  const char *mine = ctx->node->assigned_device ? ctx->node->assigned_device : "";
  x->devs = strdup(all);
  x->dev = calloc((size_t)x->n, sizeof *x->dev);
  if (!x->devs || !x->dev) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  int k = 0;
  for (char *p = x->devs, *save = NULL, *tok; (tok = strtok_r(p, ",", &save)); p = NULL)
    if (k < x->n)
      x->dev[k++] = tok;
    else
      k++;
  if (!all[0])
    for (k = 0; k < x->n; k++) x->dev[k] = mine;
  if (k != x->n || strcmp(x->dev[x->rank], mine) != 0)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT,
                           "collective group '%s': attr devices names %d devices for %d members, "
                           "rank %d's not being this node's device %s",
                           x->gkey, k, x->n, x->rank, mine);
  return GR_OK;
}

/* The length of member k's host label: attr hosts' k-th name, else the
 * task part of its device (up to "/device:"); *at its start. */
static size_t host_label(const coll *x, const char *hosts, int k, const char **at) {
  if (hosts[0]) {
    const char *p = hosts;
    for (int i = 0; i < k; i++) p = strchr(p, ',') + 1;
    *at = p;
    return strcspn(p, ",");
  }
  const char *dv = strstr(x->dev[k], "/device:");
  *at = x->dev[k];
  return dv ? (size_t)(dv - x->dev[k]) : strlen(x->dev[k]);
}

/* host[k]: member k's host, numbered 0, 1, ... in the order of their
 * first members; *num_hosts. Attr hosts, when set, names one host per
 * member (checked); else a task is a host. */
static gr_status read_hosts(gr_kernel_ctx *ctx, coll *x, int *host, int *num_hosts) {
  const char *hosts = gr_node_attr_string(ctx->node, "hosts", "");
  int names = 1;
  for (const char *p = hosts; *p; p++) names += *p == ',';
  if (hosts[0] && names != x->n)
    return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT,
                           "collective group '%s': attr hosts names %d hosts for %d members ('%s')",
                           x->gkey, names, x->n, hosts);
  *num_hosts = 0;
  for (int k = 0; k < x->n; k++) {
    const char *a, *b;
    size_t la = host_label(x, hosts, k, &a);
    host[k] = -1;
    for (int j = 0; j < k && host[k] < 0; j++)
      if (host_label(x, hosts, j, &b) == la && !memcmp(a, b, la)) host[k] = host[j];
    if (host[k] < 0) host[k] = (*num_hosts)++;
  }
  return GR_OK;
}

/* Plans x's schedule: attr hierarchy "flat" (the ring or the tree over the
 * whole group), "hosts" (the hierarchical one), or "auto" (hierarchical
 * when the members span more than one host and some host has several). */
static gr_status plan(gr_kernel_ctx *ctx, coll *x) {
  const char *hier = gr_node_attr_string(ctx->node, "hierarchy", "auto");
  int *host = calloc((size_t)x->n * 3, sizeof *host), *map = host + x->n, num_hosts = 1;
  if (!host) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  gr_status st = strcmp(hier, "flat") ? read_hosts(ctx, x, host, &num_hosts) : GR_OK;
  bool by_hosts =
      !strcmp(hier, "hosts") || (!strcmp(hier, "auto") && num_hosts > 1 && num_hosts < x->n);
  for (int k = 0; k < x->n; k++) map[k] = k;
  /* the ring over m members: 5m + 8 actions per piece of a chunk; the
   * trees, 2 log2 n + 2 each */
  int m = by_hosts ? num_hosts : x->n;
  int64_t most = num_pieces(x, x->total / m + 1);
  if (st == GR_OK && !(x->acts = calloc((size_t)(5 * m + 8) * (size_t)most + 128, sizeof *x->acts)))
    st = gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  if (st == GR_OK && by_hosts)
    plan_hier(x, host, num_hosts, map + x->n, map);
  else if (st == GR_OK && x->tree)
    plan_tree(x, (view){x->n, x->rank, map});
  else if (st == GR_OK)
    plan_ring(x, (view){x->n, x->rank, map});
  free(host);
  return st;
}

/* The flat buffer x->buf holds the inputs one after the other, and the
 * outputs are views of it (output i: input i's shape at its offset), so
 * the totals need no copying out: the consumers (the updates) read them
 * where the schedule left them. One input: its own buffer when this
 * kernel holds the only reference to it (nothing to copy in), else a new
 * one; several: a new one. The inputs are not copied in here:
 * copy_inputs_in does, unless the schedule reads them itself. */
static gr_status flat_outputs(gr_kernel_ctx *ctx, coll *x) {
  gr_tensor *o, flat;
  x->seg = malloc(((size_t)ctx->num_inputs + 1) * sizeof *x->seg);
  if (!x->seg) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  x->seg[0] = 0;
  for (int i = 0; i < ctx->num_inputs; i++)
    x->seg[i + 1] = x->total += gr_tensor_num_elements(&ctx->inputs[i]);
  if (ctx->num_inputs == 1) {
    GR_TRY(gr_kernel_forward_or_alloc(ctx, 0, 0, x->dt, &ctx->inputs[0].shape, &o));
    x->buf = gr_tensor_data(o);
    x->flat = *o;
    if (x->flat.buf) gr_buffer_retain(x->flat.buf);
    x->copied_in = !x->total || x->buf == gr_tensor_data(&ctx->inputs[0]);
    return GR_OK;
  }
  GR_TRY(gr_tensor_alloc(&flat, x->dt, &(gr_shape){1, {x->total}}, ctx->err));
  x->buf = gr_tensor_data(&flat);
  for (int i = 0; i < ctx->num_inputs; i++) {
    gr_tensor v = flat;
    v.shape = ctx->inputs[i].shape;
    v.offset += (size_t)x->seg[i] * x->es;
    gr_kernel_set_output(ctx, i, &v);
  }
  x->flat = flat; /* and the outputs hold it */
  x->copied_in = !x->total;
  return GR_OK;
}

/* Once the schedule is planned: where its first step over each part reads
 * the inputs themselves (the ring, the tree: the inputs are read once, by
 * the step that sends or adds them), nothing more; else every input is
 * copied into the buffer now. */
/* The all-gather's pieces (and the tree's broadcast) are copied over the
 * buffer as they arrive: from another process they may be read off the
 * network straight into their place (gr_rendezvous_expect_into), and take
 * then has nothing to copy. By the time a total arrives the range has
 * no other use: what was sent from it has gone (the peer computed the
 * total from it). */
static void expect_copies(coll *x) {
  for (int k = 0; k < x->num_acts; k++) {
    const action *a = &x->acts[k];
    if (a->kind != 'c' || a->len <= 0 || !x->flat.buf) continue;
    char buf[512], *key = make_key(x, a->peer, x->rank, a, buf, sizeof buf);
    if (!key) return; /* out of memory: the copies are made as before */
    gr_tensor v = x->flat;
    v.shape = (gr_shape){1, {a->len}};
    v.offset += (size_t)a->off * x->es;
    gr_rendezvous_expect_into(x->rv, key, &v);
    if (key != buf) free(key);
  }
}

static void copy_inputs_in(coll *x) {
  if (x->copied_in) {
    for (int k = 0; k < x->num_acts; k++) x->acts[k].from_inputs = false;
    return;
  }
  if (!gr_coll_mark_from_inputs(x->acts, x->num_acts, x->total))
    from_inputs(x, x->buf, NULL, 0, x->total);
  x->copied_in = true;
}

/* collective_all_reduce_sgd: the variables of attr apply_vars (one name
 * per input, comma-separated; an empty name: none), each initialised and
 * of its input's dtype and shape; and the schedule with its update steps. */
static gr_status prepare_updates(gr_kernel_ctx *ctx, coll *x) {
  const char *p = gr_node_attr_string(ctx->node, "apply_vars", "");
  x->lr = gr_node_attr_float(ctx->node, "learning_rate", 0);
  x->vars = calloc((size_t)ctx->num_inputs + 1, sizeof *x->vars);
  if (!x->vars) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  if (x->dt != GR_F32 && x->dt != GR_F64) /* the shape function refuses it */
    return gr_kernel_error(ctx, GR_ERR_DTYPE, "collective '%s': SGD updates f32 or f64 only",
                           x->gkey);
  for (int i = 0; *p && i < ctx->num_inputs; i++) { /* one name each: all_reduce_sgd_shape */
    size_t len = strcspn(p, ",");
    char name[512];
    if (len >= sizeof name)
      return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT,
                             "collective '%s': a variable name of attr apply_vars is too long",
                             x->gkey);
    memcpy(name, p, len);
    name[len] = '\0';
    p += len + (p[len] == ',');
    if (!len) continue;
    gr_var *v = gr_resource_mgr_get_var(ctx->step->resources, name);
    if (!v) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
    gr_var_lock(v);
    const gr_tensor *t = gr_var_value(v);
    bool init = t->buf != NULL,
         same = init && t->dtype == x->dt && gr_shape_equal(&t->shape, &ctx->inputs[i].shape);
    gr_var_unlock(v);
    if (!init)
      return gr_kernel_error(ctx, GR_ERR_FAILED_PRECONDITION, "variable '%s' is not initialised",
                             name);
    if (!same)
      return gr_kernel_error(ctx, GR_ERR_SHAPE,
                             "collective '%s': input %d does not match the dtype and shape of "
                             "variable '%s', which it updates",
                             x->gkey, i, name);
    x->vars[i] = v;
  }
  gr_coll_action *acts;
  int n;
  if (!gr_coll_plan_updates(x->acts, x->num_acts, x->total, &acts, &n))
    return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  free(x->acts);
  x->acts = acts, x->num_acts = n;
  return GR_OK;
}

static gr_status all_reduce_kernel(gr_kernel_ctx *ctx) {
  const gr_node *nd = ctx->node;
  coll *x = calloc(1, sizeof *x);
  if (!x) return gr_kernel_error(ctx, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  *x = (coll){.ctx = ctx,
              .rv = ctx->step->rendezvous,
              .n = (int)gr_node_attr_int(nd, "group_size", 1),
              .rank = (int)gr_node_attr_int(nd, "rank", 0),
              .mean = !strcmp(gr_node_attr_string(nd, "reduction", "sum"), "mean"),
              .dt = ctx->inputs[0].dtype,
              .es = gr_dtype_size(ctx->inputs[0].dtype),
              .gkey = gr_node_attr_string(nd, "group_key", ""),
              .frame = ctx->frame_name ? ctx->frame_name : "",
              .iteration = ctx->iteration};
  gr_status st = GR_OK;
  if (x->n > 1 && !x->rv)
    st = gr_kernel_error(ctx, GR_ERR_FAILED_PRECONDITION,
                         "collective group '%s' runs only in a partitioned multi-device step (no "
                         "rendezvous)",
                         x->gkey);
  if (st == GR_OK && x->n > 1) st = read_devices(ctx, x);
  if (st == GR_OK) st = flat_outputs(ctx, x);
  if (st != GR_OK) {
    coll_free(x);
    return st;
  }
  /* alone (n = 1): no actions, the sum is the value (a mean too) */
  if (x->n > 1) {
    x->tree = !strcmp(gr_node_attr_string(nd, "algorithm", "ring"), "tree");
    int64_t piece_bytes = gr_node_attr_int(nd, "piece_bytes", 0);
    bool chosen = piece_bytes > 0;
    if (!chosen) piece_bytes = GR_COLLECTIVE_PIECE_BYTES;
    x->piece = piece_bytes / (int64_t)x->es > 0 ? piece_bytes / (int64_t)x->es : 1;
    /* by default a chunk of up to GR_COLLECTIVE_WHOLE_PIECES pieces goes
     * whole: each message costs a wakeup at the receiver, which a small
     * chunk's pipelining does not win back (ops/gr_ops.h) */
    int64_t chunk = x->total / x->n + 1;
    if (!chosen && chunk <= GR_COLLECTIVE_WHOLE_PIECES * x->piece) x->piece = chunk;
    if ((st = plan(ctx, x)) != GR_OK) {
      coll_free(x);
      return st;
    }
    gr_kernel_on_cancel(ctx, on_cancel, x->rv);
  }
  copy_inputs_in(x);
  if (nd->op == &gr_op_collective_all_reduce_sgd && (st = prepare_updates(ctx, x)) != GR_OK) {
    coll_free(x);
    return st;
  }
  if (x->n > 1) expect_copies(x);
  kick(x);
  return GR_OK;
}

static gr_status all_reduce_shape(gr_shape_ctx *ctx) {
  int64_t n = gr_node_attr_int(ctx->node, "group_size", 0),
          r = gr_node_attr_int(ctx->node, "rank", -1);
  const char *red = gr_node_attr_string(ctx->node, "reduction", "sum"),
             *alg = gr_node_attr_string(ctx->node, "algorithm", "ring");
  if (n < 1 || r < 0 || r >= n)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "rank %lld of a group of %lld members",
                          (long long)r, (long long)n);
  if (!gr_node_attr_string(ctx->node, "group_key", "")[0])
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "attr group_key is empty");
  if (strcmp(red, "sum") != 0 && strcmp(red, "mean") != 0)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "reduction '%s': sum or mean", red);
  if (strcmp(alg, "ring") != 0 && strcmp(alg, "tree") != 0)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "algorithm '%s': ring or tree", alg);
  const char *hier = gr_node_attr_string(ctx->node, "hierarchy", "auto");
  if (strcmp(hier, "auto") != 0 && strcmp(hier, "flat") != 0 && strcmp(hier, "hosts") != 0)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "hierarchy '%s': auto, flat or hosts",
                          hier);
  if (gr_node_attr_int(ctx->node, "piece_bytes", 0) < 0)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "piece_bytes %lld: 0 (the default) or more",
                          (long long)gr_node_attr_int(ctx->node, "piece_bytes", 0));
  for (int i = 0; i < ctx->num_inputs; i++) {
    GR_TRY(gr_shape_check_dtype(ctx, i,
                                strcmp(red, "mean") ? GR_DT_FLOAT | GR_DT_INDEX : GR_DT_FLOAT));
    GR_TRY(gr_shape_check_same_dtype(ctx, 0, i));
    if (!gr_shape_is_fully_known(&ctx->in_shapes[i]))
      return gr_shape_error(ctx, GR_ERR_SHAPE, "input %d: the shape must be fully known", i);
  }
  ctx->num_outputs = ctx->num_inputs;
  for (int i = 0; i < ctx->num_inputs; i++) {
    ctx->out_dtypes[i] = ctx->in_dtypes[i];
    ctx->out_shapes[i] = ctx->in_shapes[i];
  }
  return GR_OK;
}

/* Per member: each element sent and received about twice, added once. */
static void all_reduce_cost(const gr_node *nd, gr_cost *out) {
  double k = 0, b = 0;
  for (int i = 0; i < nd->num_inputs; i++) {
    const gr_output *in = &nd->inputs[i];
    double e = (double)gr_shape_num_elements(&in->node->out_shapes[in->index]);
    k += e;
    b += e * (double)gr_dtype_size(in->node->out_dtypes[in->index]);
  }
  out->flops = k;
  out->bytes = 4 * b;
}

/* y_m = sum_k x_k on every member m, so dL/dx_r = sum_m dL/dy_m: the
 * all-reduce of the incoming gradients, by a group of the gradient nodes
 * over the same members (a mean's gradient is the mean of them). Each
 * member builds its own node of the group "KEY/grad_J", J counting the
 * gradients of this member already built, so every member's J agrees
 * when each differentiation reaches all of them (one that does not fails
 * the step naming the group's missing rank). An output without a gradient
 * gives zeros. */

static gr_status all_reduce_grad(gr_grad_ctx *c) {
  const gr_node *nd = c->node;
  gr_graph *g = c->graph;
  const char *gkey = gr_node_attr_string(nd, "group_key", "");
  int64_t rank = gr_node_attr_int(nd, "rank", 0), k = nd->num_outputs;
  size_t len = strlen(gkey);
  int j = 0;
  for (int id = 0; id < gr_graph_num_nodes(g); id++) {
    const gr_node *o = gr_graph_node(g, id);
    const char *ok =
        o->op == &gr_op_collective_all_reduce ? gr_node_attr_string(o, "group_key", "") : "";
    j += !strncmp(ok, gkey, len) && !strncmp(ok + len, "/grad_", 6) &&
         gr_node_attr_int(o, "rank", -1) == rank;
  }
  char *key = gr_graph_alloc(g, len + 32);
  gr_output *gs = calloc((size_t)k + 1, sizeof *gs);
  if (!key || !gs) {
    free(gs);
    return gr_graph_set_errorf(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  snprintf(key, len + 32, "%s/grad_%d", gkey, j);
  for (int i = 0; i < k; i++)
    gs[i] = c->grads[i].node ? c->grads[i] : gr_zeros_like(g, (gr_output){(gr_node *)nd, i});
  gr_ops_collective_cfg cfg = {
      gr_node_attr_string(nd, "algorithm", "ring"), gr_node_attr_string(nd, "hierarchy", "auto"),
      gr_node_attr_int(nd, "piece_bytes", 0), gr_node_attr_string(nd, "hosts", "")};
  bool mean = !strcmp(gr_node_attr_string(nd, "reduction", "sum"), "mean");
  gr_status st = gr_ops_collective_all_reduce(
      g, gs, (int)k, key, (int)gr_node_attr_int(nd, "group_size", 1), (int)rank,
      mean ? GR_REDUCE_MEAN : GR_REDUCE_SUM, &cfg, c->dinputs);
  free(gs);
  return st;
}

static const gr_attr_spec all_reduce_attrs[] = {
    {"group_key", GR_ATTR_STRING, true, {0}},
    {"group_size", GR_ATTR_INT, true, {0}},
    {"rank", GR_ATTR_INT, true, {0}},
    {"devices", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = ""}},
    {"algorithm", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = "ring"}},
    {"reduction", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = "sum"}},
    {"hierarchy", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = "auto"}},
    {"hosts", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = ""}},
    {"piece_bytes", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}},
    /* collective_all_reduce_sgd's (the table's last two) */
    {"apply_vars", GR_ATTR_STRING, false, {.type = GR_ATTR_STRING, .s = ""}},
    {"learning_rate", GR_ATTR_FLOAT, false, {.type = GR_ATTR_FLOAT, .f = 0}}};
#define NUM_ALL_REDUCE_ATTRS (int)(sizeof all_reduce_attrs / sizeof all_reduce_attrs[0])

/* collective_all_reduce_sgd: f32 or f64 values, and attr apply_vars empty
 * (no variable) or one name per input, comma-separated (an empty name: that
 * input updates none). */
static gr_status all_reduce_sgd_shape(gr_shape_ctx *ctx) {
  GR_TRY(all_reduce_shape(ctx));
  for (int i = 0; i < ctx->num_inputs; i++) GR_TRY(gr_shape_check_dtype(ctx, i, GR_DT_FLOAT));
  const char *names = gr_node_attr_string(ctx->node, "apply_vars", "");
  int k = names[0] ? 1 : 0;
  for (const char *p = names; *p; p++) k += *p == ',';
  if (k != 0 && k != ctx->num_inputs)
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT,
                          "attr apply_vars names %d variables for %d inputs: want one per input "
                          "(comma-separated; an empty name for an input that updates none) or "
                          "none",
                          k, ctx->num_inputs);
  double lr = gr_node_attr_float(ctx->node, "learning_rate", 0);
  if (!isfinite(lr))
    return gr_shape_error(ctx, GR_ERR_INVALID_ARGUMENT, "attr learning_rate must be finite");
  return GR_OK;
}

/* What the two ops share: the inputs, outputs, attrs (the plain one
 * without the update's), cost and kernel (which tells them apart by op) */
#define ALL_REDUCE_OP                                                                              \
  .min_inputs = 1, .max_inputs = -1, .input_names = (const char *[]){"values"}, .num_outputs = -1, \
  .attrs = all_reduce_attrs, .cost_fn = all_reduce_cost, .kernel = all_reduce_kernel

const gr_op_def gr_op_collective_all_reduce = {
    .name = "collective_all_reduce",
    .doc = "one member of a group (attrs group_key, group_size, rank): its inputs summed (or "
           "averaged) with the other members' over the step's rendezvous, by a ring or a tree "
           "(attr algorithm; its pieces at most piece_bytes), or inside hosts and across them "
           "(attrs hierarchy, hosts); the same bits on every member",
    ALL_REDUCE_OP,
    .num_attrs = NUM_ALL_REDUCE_ATTRS - 2,
    .shape_fn = all_reduce_shape,
    .grad_fn = all_reduce_grad,
    .flags = GR_OP_ASYNC | GR_OP_STATEFUL | GR_OP_COLLECTIVE};

/* The all-reduce of the gradients with SGD fused into its final assembly
 * (gr_minimize, parallel_collective.c): each part's update as soon as the
 * part holds its total on this member (update_part), instead of apply_sgd
 * nodes after the whole bucket. */
const gr_op_def gr_op_collective_all_reduce_sgd = {
    .name = "collective_all_reduce_sgd",
    .doc = "collective_all_reduce whose totals also update the variables of attr apply_vars (one "
           "name per input, comma-separated, empty: none) by SGD with attr learning_rate, each "
           "part as soon as it is final on this member",
    ALL_REDUCE_OP,
    .num_attrs = NUM_ALL_REDUCE_ATTRS,
    .shape_fn = all_reduce_sgd_shape,
    .flags = GR_OP_ASYNC | GR_OP_STATEFUL | GR_OP_COLLECTIVE | GR_OP_UPDATES};

gr_status gr_ops_collective_all_reduce(gr_graph *g, const gr_output *values, int num_values,
                                       const char *group_key, int group_size, int rank,
                                       gr_reduction op, const gr_ops_collective_cfg *cfg,
                                       gr_output *out) {
  gr_attr a[] = {gr_attr_string("group_key", group_key),
                 gr_attr_int("group_size", group_size),
                 gr_attr_int("rank", rank),
                 gr_attr_string("reduction", op == GR_REDUCE_MEAN ? "mean" : "sum"),
                 gr_attr_string("algorithm", cfg->algorithm),
                 gr_attr_string("hierarchy", cfg->hierarchy),
                 gr_attr_string("hosts", cfg->hosts ? cfg->hosts : ""),
                 gr_attr_int("piece_bytes", cfg->piece_bytes)};
  gr_output r = gr_ops_build(g, "collective_all_reduce", NULL, values, num_values, a, 8);
  for (int i = 0; i < num_values; i++) out[i] = r.node ? gr_output_at(r, i) : r;
  return r.node ? GR_OK : gr_graph_error(g)->code;
}

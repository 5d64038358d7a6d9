/* Typed messages: one struct per kind of message (and per request's
 * answer), packed and unpacked side by side in one file per kind
 * (msg_run.c, msg_register.c, ...), with the kind's fields as data
 * (gr_msg_spec) that tests/unit/test_wire_docs.c checks docs/distributed.md's
 * "Wire format" tables against. Only the msg_*.c files (and handshake.c,
 * for hello, auth and auth_ok) name a message's keys.
 *
 *   // master                                   // server, on a worker thread
 *   gr_run_req q = {.id = id, .handle = h, ...};
 *   gr_outmsg *m = gr_run_req_pack(&q);
 *   gr_conn_send(conn, m, &err);                gr_run_req q;
 *                                               gr_run_req_unpack(in, &q, &err);
 *                                               gr_run_req_feeds(in, &q, values, n, &err);
 *
 * Packing: gr_<kind>_pack(&x) returns the message (taken by gr_conn_send),
 * NULL only when out of memory. x's pointers are borrowed for the call;
 * tensors go into the body by reference (retained until the message is
 * written or freed), a register's graph bytes are taken. A response is
 * packed with the request's id: gr_<kind>_resp_pack(id, &x); an error or
 * an answer without results is gr_response_pack(id, e).
 *
 * Unpacking: gr_<kind>_unpack(in, &x, err) checks every field's type and
 * range in a fixed order (the first bad one is the error) and the items of
 * its lists, then fills x (a register's or vars' container: the server's
 * gr_container_ref_unpack);
 * errors name the field ("field 'seed' is missing", "field 'name' is
 * longer than 128 bytes") or the item ("a peer must be [task, address,
 * inc]"). Ownership: numbers and flags are copied; strings and lists are
 * NUL-terminated copies and arrays in the message's zone, tensors are views
 * of its body, and a few lists stay msgpack objects of the message (a
 * run's feeds and fetches, a pushed value: read by gr_run_req_feeds,
 * gr_run_resp_fetches, gr_tensor_msg_value once the receiver knows their
 * bounds): all borrowed from in, valid until gr_inmsg_free(in). What needs
 * the receiver's state (an incarnation, a handle, a device of the task,
 * the graph a name is in) is the caller's to check.
 *
 * Threads: none kept; a message is packed or unpacked by one thread.
 * Internal to distributed/. */
#ifndef GR_MSG_INTERNAL_H
#define GR_MSG_INTERNAL_H

#include "distributed/transport_internal.h"
#include "distributed/wire_internal.h"

#define GR_TASK_NAME_MAX      96         /* a task's name, with its NUL */
#define GR_RUN_MAX_STEPS      (1 << 30)  /* a multi-step RUN's iterations */
#define GR_LEASE_NAME_MAX     128        /* bytes of a lease's name */
#define GR_LEASE_HOLDER_MAX   256        /* bytes of its holder's description */
#define GR_STATUS_MAX_DEVICES 64         /* devices a task names in get_status */
#define GR_MSG_MAX_ITEMS      (1u << 20) /* items of a feeds, fetches or names list */
#define GR_REGISTER_MAX_PARTS 64         /* partitions in one register */
#define GR_REGISTER_MAX_PEERS 4096       /* tasks a register names */

/* ---- each kind's fields, as data ------------------------------------------- */

typedef struct gr_msg_field {
  const char *name;
  const char *when; /* NULL: always there; else when it is (as the docs say) */
} gr_msg_field;

typedef struct gr_msg_spec {
  gr_msg_type type;
  const char *direction; /* who sends it to whom, as the docs' table says */
  const gr_msg_field *fields;
  int num_fields;
  /* a request's answer: the response's fields besides id and code */
  const gr_msg_field *results;
  int num_results; /* -1: not answered (one way, or the handshake) */
} gr_msg_spec;

#define GR_MSG_FIELDS(a) (a), (int)(sizeof(a) / sizeof *(a))

/* The spec of a kind of GR_MSG_LIST (every kind has one); NULL otherwise. */
const gr_msg_spec *gr_msg_spec_of(int type);

/* ---- fields several kinds share (msg_common.c) ------------------------------ */

/* The id of any request (the server checks it before anything else). */
gr_status gr_request_id(const gr_inmsg *in, uint64_t *id, gr_error *err);

/* The container a register or vars names: fields `container` and `private`. */
typedef struct gr_container_ref {
  const char *name; /* 1 to GR_CONTAINER_NAME_MAX letters, digits, '_', '-', '.' */
  bool is_private;  /* the asking connection's own */
} gr_container_ref;
void gr_container_ref_pack(gr_outmsg *m, const gr_container_ref *c); /* two fields */
/* The field `container` alone: a container's name, or "" when all (every
 * shared container, for a reset). */
gr_status gr_container_field(gr_inmsg *in, bool all, const char **out, gr_error *err);
/* Read by the server when it resolves the container (after the request's
 * other fields and lists, as before), not by gr_register_req_unpack or
 * gr_vars_req_unpack: its refusals are logged naming the peer. */
gr_status gr_container_ref_unpack(gr_inmsg *in, gr_container_ref *out, gr_error *err);

/* ---- response (msg_response.c): every request's answer ----------------------- */

typedef struct gr_response {
  uint64_t id;       /* the request's */
  gr_status code;    /* GR_OK, or the error: an unknown code is GR_ERR_INTERNAL */
  gr_error error;    /* when code is not GR_OK: its message ("?" when unreadable) */
  int64_t failed_at; /* a multi-step RUN's error: the iteration that failed (else -1) */
} gr_response;
extern const gr_msg_spec gr_response_spec;

/* The answer to request id without results: GR_OK (e NULL) or the error e. */
gr_outmsg *gr_response_pack(uint64_t id, const gr_error *e);
/* The error e of a multi-step RUN whose iteration `iteration` failed. */
gr_outmsg *gr_response_pack_failed_at(uint64_t id, const gr_error *e, uint64_t iteration);
/* A GR_OK answer whose `results` fields the caller packs next (msg_*.c). */
gr_outmsg *gr_response_begin(uint64_t id, uint32_t results);
/* Its id and code (the results are the request kind's: gr_*_resp_unpack). */
gr_status gr_response_unpack(const gr_inmsg *in, gr_response *out, gr_error *err);

/* ---- get_status and heartbeat (msg_status.c) ---------------------------------- */

typedef struct gr_get_status_req {
  uint64_t id;
} gr_get_status_req;
typedef struct gr_get_status_resp {
  const char *task;           /* "/job:worker/replica:0/task:1" (under GR_TASK_NAME_MAX) */
  uint64_t inc;               /* its incarnation */
  const char *const *devices; /* 1 to GR_STATUS_MAX_DEVICES device names */
  int num_devices;
  int threads; /* its executor's threads (1 to 1024), for the placer */
  int cores;   /* its machine's cores (1 to 65536), for the placer */
} gr_get_status_resp;
extern const gr_msg_spec gr_get_status_spec;
gr_outmsg *gr_get_status_req_pack(const gr_get_status_req *q);
gr_status gr_get_status_req_unpack(const gr_inmsg *in, gr_get_status_req *out, gr_error *err);
gr_outmsg *gr_get_status_resp_pack(uint64_t id, const gr_get_status_resp *r);
gr_status gr_get_status_resp_unpack(gr_inmsg *in, gr_get_status_resp *out, gr_error *err);

/* Answered at once on the server's network thread, without results. */
typedef struct gr_heartbeat_req {
  uint64_t id; /* 0: its answer matches no request, so nothing waits on it */
} gr_heartbeat_req;
extern const gr_msg_spec gr_heartbeat_spec;
gr_outmsg *gr_heartbeat_req_pack(const gr_heartbeat_req *q);
gr_status gr_heartbeat_req_unpack(const gr_inmsg *in, gr_heartbeat_req *out, gr_error *err);

/* ---- register (msg_register.c) -------------------------------------------- */

typedef struct gr_register_peer { /* a task of the cluster: [task, address, inc] */
  const char *task;               /* under GR_TASK_NAME_MAX bytes, not empty */
  const char *address;            /* under 128 bytes */
  uint64_t inc;                   /* the incarnation the master knows */
} gr_register_peer;

typedef struct gr_register_endpoint { /* [node, output, index] */
  const char *node;                   /* under 1024 bytes */
  int output;                         /* 0 to GR_MAX_OUTPUTS */
  int index;                          /* the caller's feed or fetch (0 to GR_MSG_MAX_ITEMS) */
} gr_register_endpoint;

typedef struct gr_register_part { /* [device, offset, bytes, feeds, fetches] */
  const char *device;
  /* the serialized graph (gr_wire_encode_graph): pack takes it (free()d
   * with the message, also when the pack fails); unpacked, it is a view
   * of the body */
  const void *graph;
  size_t graph_size;
  const gr_register_endpoint *feeds, *fetches;
  int num_feeds, num_fetches;
} gr_register_part;

typedef struct gr_register_req {
  uint64_t id;
  uint64_t inc;                  /* the incarnation of the task it registers with */
  gr_container_ref container;    /* packed; unpacked by gr_container_ref_unpack */
  const gr_register_peer *peers; /* every task (at most GR_REGISTER_MAX_PEERS) */
  int num_peers;
  const gr_register_part *parts; /* this task's (1 to GR_REGISTER_MAX_PARTS) */
  int num_parts;
} gr_register_req;
typedef struct gr_register_resp {
  uint64_t handle; /* what RUN and DEREGISTER name */
} gr_register_resp;
extern const gr_msg_spec gr_register_spec;
gr_outmsg *gr_register_req_pack(const gr_register_req *q);
/* Errors in a partition are prefixed "partition K". */
gr_status gr_register_req_unpack(gr_inmsg *in, gr_register_req *out, gr_error *err);
gr_outmsg *gr_register_resp_pack(uint64_t id, const gr_register_resp *r);
gr_status gr_register_resp_unpack(const gr_inmsg *in, gr_register_resp *out, gr_error *err);

/* ---- run (msg_run.c) ---------------------------------------------------------- */

typedef struct gr_run_req {
  uint64_t id, handle;
  uint64_t inc; /* the incarnation the graph was registered with */
  uint64_t step, run, seed;
  /* a multi-step run: the task runs the step this many times (1 to
   * GR_RUN_MAX_STEPS; sent only when more than 1), iteration i as step
   * step + i under run id run + i, the fetches the last one's */
  uint64_t steps;
  bool trace; /* the task records the step's events (sent only when true; with one step) */
  /* the feeds [[index, tensor]...]: packed from feeds[i] (the caller's
   * index) and values[feeds[i]] (by reference); unpacked as feed_items,
   * borrowed from the message, which gr_run_req_feeds reads */
  const int *feeds;
  int num_feeds;
  const gr_tensor *values;
  const msgpack_object_array *feed_items;
} gr_run_req;

typedef struct gr_run_event { /* a traced node run: [device, node, iteration, start, end, bytes] */
  const char *device;         /* under GR_DEVICE_NAME_MAX bytes */
  const char *node;           /* under 1024 bytes */
  int64_t iteration;
  int64_t start_ns, end_ns; /* since the task's t0 */
  int64_t bytes;            /* 0 or more */
} gr_run_event;

typedef struct gr_run_resp {
  /* the fetches [[index, tensor]...]: packed from the num_fetches slots
   * of fetches that hold a value (by reference); unpacked as fetch_items,
   * which gr_run_resp_fetches reads */
  const gr_tensor *fetches;
  int num_fetches;
  const msgpack_object_array *fetch_items;
  int64_t sends, bytes; /* pushed to other tasks (0 or more) */
  /* packed from trace (NULL: none; times since trace_t0); unpacked as
   * events: the well-formed ones (a bad event is skipped, as a trace is
   * only shown) */
  const gr_step_trace *trace;
  int64_t trace_t0;
  gr_run_event *events;
  int num_events;
} gr_run_resp;
extern const gr_msg_spec gr_run_spec;
gr_outmsg *gr_run_req_pack(const gr_run_req *q);
gr_status gr_run_req_unpack(const gr_inmsg *in, gr_run_req *out, gr_error *err);
/* The feeds into values[0, num): each index in range and given once, each
 * tensor alive (a view of in's body, one new reference; what was filled
 * before an error is the caller's to release). */
gr_status gr_run_req_feeds(const gr_inmsg *in, const gr_run_req *q, gr_tensor *values, int num,
                           gr_error *err);
gr_outmsg *gr_run_resp_pack(uint64_t id, const gr_run_resp *r);
/* At most max_fetches fetches (the request's). */
gr_status gr_run_resp_unpack(gr_inmsg *in, uint32_t max_fetches, gr_run_resp *out, gr_error *err);
/* The fetches into out[0, num): each index one of the mine[0, num_mine)
 * the request asked for, each given once, every one given (what was
 * filled is the caller's to release, also on an error). */
gr_status gr_run_resp_fetches(const gr_inmsg *in, const gr_run_resp *r, const int *mine,
                              int num_mine, int num, gr_tensor *out, gr_error *err);

/* ---- tensor (msg_tensor.c): a pushed value, one way --------------------------- */

typedef struct gr_tensor_msg {
  uint64_t run;     /* the step (unpack sets it first: a bad push aborts its step) */
  const char *key;  /* the rendezvous key (under 1024 bytes) */
  const char *from; /* the sending task (under GR_TASK_NAME_MAX bytes) */
  uint64_t inc;     /* the sender's incarnation */
  bool dead;
  /* packed from value (NULL or empty: none); unpacked as value_item,
   * borrowed from the message, which gr_tensor_msg_value reads */
  const gr_tensor *value;
  const msgpack_object *value_item;
} gr_tensor_msg;
extern const gr_msg_spec gr_tensor_spec;
gr_outmsg *gr_tensor_msg_pack(const gr_tensor_msg *t);
gr_status gr_tensor_msg_unpack(gr_inmsg *in, gr_tensor_msg *out, gr_error *err);
/* The value: a view of in's body (one new reference), empty when none. */
gr_status gr_tensor_msg_value(const gr_inmsg *in, const gr_tensor_msg *t, gr_tensor *out,
                              gr_error *err);

/* ---- abort (msg_abort.c): ends a step, one way ---------------------------------- */

typedef struct gr_abort_msg {
  uint64_t run;
  gr_status code;  /* unpacked: an unknown code or GR_OK is GR_ERR_CANCELLED */
  const char *msg; /* under 512 bytes */
} gr_abort_msg;
extern const gr_msg_spec gr_abort_spec;
gr_outmsg *gr_abort_msg_pack(const gr_abort_msg *a);
gr_status gr_abort_msg_unpack(gr_inmsg *in, gr_abort_msg *out, gr_error *err);

/* ---- vars (msg_vars.c) ---------------------------------------------------------- */

typedef struct gr_vars_req {
  uint64_t id;
  const char *const *names; /* at most GR_MSG_MAX_ITEMS; unpacked: NULL for an item
                               that is not a string under 1024 bytes (answered false) */
  int num_names;
  gr_container_ref container; /* packed; unpacked by gr_container_ref_unpack */
} gr_vars_req;
typedef struct gr_vars_resp {
  const bool *init; /* per name: it has a value (unpacked: an item not a bool is false) */
  int num_init;
} gr_vars_resp;
extern const gr_msg_spec gr_vars_spec;
gr_outmsg *gr_vars_req_pack(const gr_vars_req *q);
gr_status gr_vars_req_unpack(gr_inmsg *in, gr_vars_req *out, gr_error *err);
gr_outmsg *gr_vars_resp_pack(uint64_t id, const gr_vars_resp *r);
/* At most max items. */
gr_status gr_vars_resp_unpack(gr_inmsg *in, uint32_t max, gr_vars_resp *out, gr_error *err);

/* ---- deregister (msg_deregister.c): answered without results -------------------- */

typedef struct gr_deregister_req {
  uint64_t id, handle;
} gr_deregister_req;
extern const gr_msg_spec gr_deregister_spec;
gr_outmsg *gr_deregister_req_pack(const gr_deregister_req *q);
gr_status gr_deregister_req_unpack(const gr_inmsg *in, gr_deregister_req *out, gr_error *err);

/* ---- lease (msg_lease.c) ------------------------------------------------------ */

typedef struct gr_lease_req {
  uint64_t id;
  const char *name;   /* 1 to GR_LEASE_NAME_MAX bytes */
  bool take;          /* take it (else only look at it) */
  const char *holder; /* at most GR_LEASE_HOLDER_MAX bytes ("" when only looking) */
} gr_lease_req;
typedef struct gr_lease_resp {
  bool held;          /* a live connection holds it */
  uint64_t taken;     /* times taken since the server started */
  uint64_t ago;       /* ms since its last holder's connection closed (0 when held) */
  const char *holder; /* at most GR_LEASE_HOLDER_MAX bytes */
} gr_lease_resp;
extern const gr_msg_spec gr_lease_spec;
gr_outmsg *gr_lease_req_pack(const gr_lease_req *q);
gr_status gr_lease_req_unpack(gr_inmsg *in, gr_lease_req *out, gr_error *err);
gr_outmsg *gr_lease_resp_pack(uint64_t id, const gr_lease_resp *r);
gr_status gr_lease_resp_unpack(gr_inmsg *in, gr_lease_resp *out, gr_error *err);

/* ---- reset (msg_reset.c) ------------------------------------------------------ */

typedef struct gr_reset_req {
  uint64_t id;
  const char *container; /* a shared container's name; "": every shared one */
} gr_reset_req;
typedef struct gr_reset_resp {
  uint64_t dropped; /* containers dropped */
} gr_reset_resp;
extern const gr_msg_spec gr_reset_spec;
gr_outmsg *gr_reset_req_pack(const gr_reset_req *q);
gr_status gr_reset_req_unpack(gr_inmsg *in, gr_reset_req *out, gr_error *err);
gr_outmsg *gr_reset_resp_pack(uint64_t id, const gr_reset_resp *r);
gr_status gr_reset_resp_unpack(const gr_inmsg *in, gr_reset_resp *out, gr_error *err);

/* ---- hello, auth, auth_ok: packed and read in handshake.c (handshake_internal.h);
 * their fields as data in msg_common.c ------------------------------------------- */

extern const gr_msg_spec gr_hello_spec, gr_auth_spec, gr_auth_ok_spec;

#endif

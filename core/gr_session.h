/* Sessions: run a graph with feeds, fetches and targets.
 *
 *   gr_session *s = gr_session_new(g, NULL, &err);          // default options
 *   gr_tensor out;
 *   gr_feed feed = {x, &x_value};
 *   if (gr_session_run(s, &feed, 1, &y, 1, &out, NULL, 0, &err) == GR_OK) {
 *     printf("%g\n", gr_tensor_get_f64(&out, 0));
 *     gr_tensor_release(&out);
 *   }
 *   gr_session_free(s);
 *
 * A run prunes the graph to what its fetches and targets need (an unfed
 * placeholder that is not needed is fine; one that is needed is an error
 * naming it), checks every node's device against the session's devices, and
 * caches the prepared executor per (feeds, fetches, targets) signature, so a
 * training loop pays the preparation once. Variables live in the session:
 * they keep their values across runs and, unless auto-initialisation is off,
 * uninitialised variables a run needs are initialised before it.
 *
 * Ownership: the session borrows the graph, which must outlive it; nodes may
 * still be added to the graph between runs. Each fetched tensor holds one
 * reference for the caller (gr_tensor_release). */
#ifndef GR_SESSION_H
#define GR_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "core/gr_graph.h"
#include "core/gr_rendezvous.h"
#include "core/gr_trace.h"

typedef struct gr_session gr_session;

typedef struct gr_session_options {
  int inter_op_threads; /* threads running independent nodes, and the halves of a
                           large matrix product (ops: gr_ops_gemm); 0: number of
                           cores. Results are the same bits with any count */
  int intra_op_threads; /* BLAS threads of its own inside one op; 0: 1, so the two
                           never oversubscribe the cores (> 1: products are not
                           split over the inter-op threads, and their bits are
                           OpenBLAS's on that many threads: on some CPUs not
                           those of one thread) */
  int num_devices;      /* CPU devices /job:localhost/replica:0/task:0/device:CPU:K; 0: 1 */
  const char *const *device_names; /* not NULL: the num_devices devices by full name
                                      ("/job:worker/replica:0/task:1/device:CPU:0"), each
                                      run by an executor of this process, so pins to other
                                      tasks run here as they will in a cluster (read by
                                      gr_session_new only) */
  bool no_auto_init;               /* true: running with an uninitialised variable is an error */
  bool schedule_recvs;             /* several devices: start each receive as late as a critical-path
                                      estimate allows (holds received values for less time;
                                      docs/partitioning.md) */
  int step_timeout_ms;             /* > 0: a step in which no kernel runs or finishes for this long
                                      (a deadlock: a receive whose send never runs, an async
                                      kernel that never completes) fails with
                                      GR_ERR_DEADLINE_EXCEEDED naming the nodes still waiting and
                                      their devices. A long computation is progress, not a stall.
                                      0: no limit (the default). Costs a thread per session. */
  bool soft_placement;             /* a node whose device spec matches no device of this session (a
                                      pin to /job:worker/task:1 run on one process) runs on one of
                                      its devices instead of failing, as TensorFlow's
                                      allow_soft_placement: the device the placer assigned it, else
                                      the one of the spec's type and index, else device 0; each such
                                      spec is noted once through log_fn */
  void (*log_fn)(void *arg, const char *msg); /* notes (soft placement); NULL: stderr */
  void *log_arg;
  const struct gr_remote_runner
      *remote;                /* not NULL: the devices (device_names) are other
                          processes', run through this runner (borrowed; it
                          must outlive the session; the engine's, core/session_remote.h) */
  gr_resource_mgr *resources; /* the variables' container (core/gr_resource.h), shared with
                                 other sessions that name it; the session holds a
                                 reference. NULL: a container of its own */
  bool no_fusion; /* run the nodes as built: no rewrite (the graph passes' fusion of chains
                     such as conv2d + bias_add + relu into one node, which gives the same
                     bits; docs/passes.md) */
} gr_session_options;

typedef struct gr_feed {
  gr_output output;       /* the endpoint fed (usually a placeholder) */
  const gr_tensor *value; /* borrowed for the duration of the run */
} gr_feed;

/* NULL on failure (err set), e.g. if the graph has a recorded build error. */
gr_session *gr_session_new(gr_graph *g, const gr_session_options *opts, gr_error *err);
void gr_session_free(gr_session *s);

/* Runs one step. results[i] receives fetches[i]. targets are nodes to run
 * for their effects (their outputs are not returned; index ignored). */
gr_status gr_session_run(gr_session *s, const gr_feed *feeds, int num_feeds,
                         const gr_output *fetches, int num_fetches, gr_tensor *results,
                         const gr_output *targets, int num_targets, gr_error *err);

/* As gr_session_run, and adds an event per node run to trace (if not NULL):
 * see gr_trace.h. */
gr_status gr_session_run_traced(gr_session *s, const gr_feed *feeds, int num_feeds,
                                const gr_output *fetches, int num_fetches, gr_tensor *results,
                                const gr_output *targets, int num_targets, gr_step_trace *trace,
                                gr_error *err);

/* Runs num_steps steps (1 to GR_SESSION_MAX_STEPS) of the same signature
 * with the same feeds, as num_steps calls of gr_session_run would (the same
 * step ids, the same bits); results[i] receives fetches[i] of the last
 * step. On a cluster (a master's session) every task loops over its part
 * of the step without the master between steps: one request per task for
 * all of them (Keras' steps_per_execution). It stops at the first step
 * that fails (on a cluster every task ends the steps before it; the step
 * counter has then moved by num_steps, in one process by the steps run).
 * trace (if not NULL) receives the last step's events, as
 * gr_session_run_traced's: a step in the steady state of the loop. */
#define GR_SESSION_MAX_STEPS (1 << 30)
gr_status gr_session_run_steps(gr_session *s, const gr_feed *feeds, int num_feeds,
                               const gr_output *fetches, int num_fetches, gr_tensor *results,
                               const gr_output *targets, int num_targets, int64_t num_steps,
                               gr_step_trace *trace, gr_error *err);

/* Checks a step's arguments as gr_session_run does before running anything:
 * every endpoint is a node of this session's graph, every feed has a value
 * and no endpoint is fed twice, and every placeholder the fetches and
 * targets need is fed (the error names it and who needs it). Runs nothing.
 * graphrun calls it first to tell an input error (exit 2) from a failed step. */
gr_status gr_session_check_feeds(gr_session *s, const gr_feed *feeds, int num_feeds,
                                 const gr_output *fetches, int num_fetches,
                                 const gr_output *targets, int num_targets, gr_error *err);

/* Runs the initialiser of every variable of the graph that has no value yet. */
gr_status gr_session_init_variables(gr_session *s, gr_error *err);

/* The first variable node of the graph whose variable has no value yet, in
 * *name (graph-owned), or NULL when all have one; variables on a device that
 * the spec `except` matches (NULL: none) are not looked at. For a worker of
 * between-graph training that waits for the chief to initialise (or
 * restore) the shared variables on the parameter servers, but initialises
 * its own. */
gr_status gr_session_find_uninitialized(gr_session *s, const char *except, const char **name,
                                        gr_error *err);

/* The variables of this session (values, for checkpoints and tests): its
 * own container or the one its options named. */
gr_resource_mgr *gr_session_resources(gr_session *s);
/* The step counter that random ops key on: incremented by every run. */
int64_t gr_session_step(const gr_session *s);
void gr_session_set_step(gr_session *s, int64_t step);
int gr_session_num_devices(const gr_session *s);
/* Decides the device each of nodes[0..n) runs on in this session, as a run
 * would (a placed device that fits stays; else the first that the node's
 * spec matches; else soft placement or an error naming the node), and
 * records it in node->assigned_device. For callers that add nodes next to
 * others (a checkpoint's save node beside the variables it saves). */
gr_status gr_session_place_nodes(gr_session *s, gr_node *const *nodes, int n, gr_error *err);
/* What crossed devices in the session's latest step (of any thread): the
 * number of sends (tensors, dead values and control tokens) and the bytes of
 * the tensors. Zero for a step that ran on one device. */
gr_transfer_stats gr_session_last_transfers(const gr_session *s);
/* Number of prepared executors in the cache (for tests of the cache). */
int gr_session_num_cached(const gr_session *s);

/* Set by the ops layer: applies the intra-op thread count (BLAS threads). */
void gr_session_set_intra_op_hook(void (*fn)(int threads));

#endif

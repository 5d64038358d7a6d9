/* Step traces: when each node of a step ran, on which device, and what it
 * produced. A caller asks for one per run (gr_session_run_traced); the
 * executors add an event per node run (per iteration inside loops).
 *
 *   gr_step_trace *t = gr_step_trace_new();
 *   gr_session_run_traced(s, ..., t, &err);
 *   for (int i = 0; i < gr_step_trace_count(t); i++) {
 *     const gr_trace_event *e = gr_step_trace_event(t, i);
 *     printf("%s on %s: %lld ns\n", e->node->name, e->node->assigned_device,
 *            (long long)(e->end_ns - e->start_ns));
 *   }
 *   gr_step_trace_free(t);
 *
 * Ownership: events point at the nodes that ran (the session's graph, the
 * fused graph a step runs instead, or their partitions: valid while the
 * session lives). Adding is thread-safe (the
 * executors add from several threads); read the events once the run is over:
 * a pointer from gr_step_trace_event is valid until the next add or clear. */
#ifndef GR_TRACE_H
#define GR_TRACE_H

#include <stdint.h>

#include "core/gr_graph.h"

typedef struct gr_trace_event {
  const gr_node *node;      /* assigned_device: where it ran (NULL: the only device) */
  int64_t iteration;        /* in its loop frame (0 outside loops) */
  int64_t start_ns, end_ns; /* CLOCK_MONOTONIC; end is when its outputs were ready */
  int64_t out_bytes;        /* bytes of the tensors it produced (0 when dead) */
} gr_trace_event;

typedef struct gr_step_trace gr_step_trace;

gr_step_trace *gr_step_trace_new(void); /* NULL when out of memory */
void gr_step_trace_free(gr_step_trace *t);
void gr_step_trace_add(gr_step_trace *t, const gr_trace_event *e); /* dropped if out of memory */
int gr_step_trace_count(const gr_step_trace *t);
const gr_trace_event *gr_step_trace_event(const gr_step_trace *t, int i);
/* Drops every event (to reuse the trace for another step). */
void gr_step_trace_clear(gr_step_trace *t);
/* The monotonic clock the events use. */
int64_t gr_trace_now_ns(void);

#endif

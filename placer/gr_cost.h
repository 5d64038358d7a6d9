/* placer/: the cost model (static cost of a node, output bytes) and the
 * measured op profiles kept in SQLite (`graphrun calibrate`). Part of
 * placer/'s face (placer/gr_placer.h includes it).
 *
 * Ownership: gr_profile_db_open returns a database the caller closes with
 * gr_profile_db_close. */
#ifndef GR_COST_H
#define GR_COST_H

#include <stddef.h>
#include <stdint.h>

#include "core/gr_core.h"

/* Unknown dims (batch) count as this many in cost estimates. */
#define GR_COST_DEFAULT_DIM 32

/* Static cost of one execution of n: the op's cost_fn (default: flops =
 * output elements, bytes = inputs + outputs), with unknown dims taken as
 * GR_COST_DEFAULT_DIM. */
gr_cost gr_cost_of_node(const gr_node *n);
/* Bytes of output i of n (unknown dims as GR_COST_DEFAULT_DIM). */
double gr_cost_output_bytes(const gr_node *n, int i);
/* Profile key: "op(dtype[dims],...)" from the op name and the input shapes. */
void gr_cost_profile_key(const gr_node *n, char *buf, size_t cap);
/* A graph's fingerprint: a hash of every node's name, op, output dtypes and
 * shapes and inputs. The same .gr file loaded for the same cluster gives
 * the same one; any change of the graph another. */
uint64_t gr_cost_graph_fingerprint(const gr_graph *g);
/* Profile key of one node of the graph of that fingerprint:
 * "node:<16 hex digits>:<name>"; its samples are the node's time per step
 * (every run of it in a step: a loop's iterations count). With runs true:
 * "runs:<16 hex digits>:<name>", the times it runs per step (recorded when
 * not 1). */
void gr_cost_node_key(uint64_t fingerprint, const gr_node *n, bool runs, char *buf, size_t cap);

/* Measured op times, keyed by op kind + input shapes, in a SQLite database
 * (table op_profiles, see docs/placement.md) that later runs reuse. */
typedef struct gr_profile_db gr_profile_db;
/* Opens (creating if needed) the database at path (":memory:" for none). */
gr_status gr_profile_db_open(const char *path, gr_profile_db **out, gr_error *err);
void gr_profile_db_close(gr_profile_db *db);
/* Adds one measured execution time (seconds) to the running average of key. */
gr_status gr_profile_db_record(gr_profile_db *db, const char *key, double seconds, gr_error *err);
/* The average and its sample count (0 when unknown). */
gr_status gr_profile_db_lookup(gr_profile_db *db, const char *key, double *mean_seconds,
                               int64_t *samples, gr_error *err);
/* Times the kernels of one step of g in this process and records them
 * (placer/profile_step.c): the step (the nodes the fetches and targets
 * need, fed as feeds say) runs `steps` times after two untimed runs, in a
 * session of one device and one inter-op thread with soft placement (pins
 * to other tasks run here; the session assigns g's nodes its device), each
 * run traced. Per node, its time per step goes under gr_cost_node_key
 * (the sum of its runs in the step: a loop's iterations count), and each
 * run's time under its op's key (gr_cost_profile_key). Steps that took
 * more than 1.5 times the median are left out: other work on the machine.
 * In one transaction. *nodes (may be NULL): nodes recorded. */
gr_status gr_profile_db_record_step(gr_profile_db *db, gr_graph *g, const gr_feed *feeds,
                                    int num_feeds, const gr_output *fetches, int num_fetches,
                                    const gr_output *targets, int num_targets, int steps,
                                    int *nodes, gr_error *err);

#endif

/* What two cores allow for synchronous training, measured without graphrun's
 * runtime (bench_parallel's sync_floor and sync_nocomm figures).
 *
 * Two forked processes each run a one-worker training step in their own
 * process (a step function the caller gives, of the variant asked for:
 * bench_parallel's has the update fused into the weight gradient's product
 * or not) and, when asked, follow every
 * step with a ring all-reduce (sum) of a float buffer of the model's size
 * over one raw Unix socket between them (what the runtime connects two
 * tasks of one host with, buffers as large: distributed/transport_local.c;
 * it measured faster than loopback TCP): reduce-scatter, then all-gather,
 * each rank sending half the buffer in each phase, as the runtime's ring
 * does for two workers. So the pair's step time is the step's compute on
 * two shared cores plus the least the kernel's sockets cost for the same
 * bytes, with no overlap of the two.
 *
 * Spawn the pair before the calling process starts threads (it forks). */
#ifndef GR_BENCH_PARALLEL_FLOOR_H
#define GR_BENCH_PARALLEL_FLOOR_H

#include <stdbool.h>
#include <stddef.h>

typedef struct floor_pair floor_pair;

/* Forks the two processes (children of bench_util, killed with the
 * parent). setup() runs once in each child before its first steps and
 * returns the step's context; step(ctx, variant) runs one training step of
 * that variant. floats: the all-reduced buffer's length. */
floor_pair *floor_pair_spawn(int life_r, int life_w, size_t floats, void *(*setup)(void),
                             void (*step)(void *ctx, int variant));

/* Runs `steps` steps of `variant` in both processes at once (each with the
 * ring exchange after it when exchange is true) and returns the seconds
 * per step of the slower process. */
double floor_pair_run(floor_pair *fp, int steps, bool exchange, int variant);

/* Closes the command pipes (the children exit) and frees fp. */
void floor_pair_free(floor_pair *fp);

#endif

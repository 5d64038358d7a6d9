/* What the machine allows a master that drives n tasks, measured without
 * graphrun (bench_scale's raw_ms_N figures): n forked processes, each with
 * one loopback TCP connection to this process, answer a 64-byte request
 * with 64 bytes. A "step" writes a request to each of the first n and
 * reads every answer, the least a step over n tasks costs: one message and
 * one wake-up per task each way, no work. On fewer cores than tasks the
 * wake-ups share the cores, so the step grows with n here even when each
 * task's work is nothing.
 *
 * Spawn before the calling process starts threads (it forks). Not thread
 * safe: one caller. */
#ifndef GR_BENCH_FANOUT_FLOOR_H
#define GR_BENCH_FANOUT_FLOOR_H

typedef struct fanout fanout;

/* Forks n answering processes (children of bench_util, killed with the
 * parent) and connects to each. */
fanout *fanout_spawn(int n, int life_r, int life_w);

/* The median milliseconds of `steps` steps over the first n processes. */
double fanout_step_ms(fanout *f, int n, int steps);

/* Closes the connections (the children exit) and frees f. */
void fanout_free(fanout *f);

#endif

/* graphrun calibrate's measurements of this machine's devices
 * (cli_calibrate_machine.c). Internal to frontend/cli/. */
#ifndef GR_CLI_CALIBRATE_H
#define GR_CLI_CALIBRATE_H

#include <graphrun.h>
#include <stddef.h>

/* flop/s of the matmul op (n x n, f32, one thread), median of reps; -1 on failure. */
double cli_measure_flops(int n, int reps, gr_error *err);
/* Seconds per tiny op (a chain of neg on a scalar); -1 on failure. */
double cli_measure_overhead(gr_error *err);
/* Bytes per second of memcpy of `bytes` (best of reps); *small_latency: a
 * 64-byte copy's seconds. -1 when out of memory. */
double cli_measure_memcpy(size_t bytes, int reps, double *small_latency);
/* Which OpenBLAS kernels ran (stderr), and a hint when the CPU has wider
 * vectors than they use. */
void cli_blas_note(void);

#endif

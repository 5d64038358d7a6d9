/* Timing helpers for the benchmark programs. */
#ifndef GR_BENCH_UTIL_H
#define GR_BENCH_UTIL_H

#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double bench_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median of n samples (sorts in place). */
static inline double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* --smoke: run a tiny configuration (used by the test suite). */
static inline int bench_is_smoke(int argc, char **argv) {
  return argc > 1 && strcmp(argv[1], "--smoke") == 0;
}

#endif

/* Timing helpers for the benchmark programs. */
#ifndef GR_BENCH_UTIL_H
#define GR_BENCH_UTIL_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
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

/* Removes path and all below it (rm -rf); on failure says so on stderr as
 * "WHO: could not remove PATH" (bench_util.c). */
void bench_remove_tree(const char *who, const char *path);

/* --smoke: run a tiny configuration (used by the test suite). */
static inline int bench_is_smoke(int argc, char **argv) {
  return argc > 1 && strcmp(argv[1], "--smoke") == 0;
}

/* ---- child processes (bench_util.c) ------------------------------------------------------ */

/* The children this process forked (killed and reaped at exit, on SIGINT
 * and SIGTERM, and by bench_die). */
enum { BENCH_MAX_CHILDREN = 160 }; /* bench_scale: 64 tasks and 64 raw answerers */
extern pid_t bench_children[BENCH_MAX_CHILDREN];
extern int bench_num_children;
void bench_add_child(pid_t pid);
/* Drops pid from the list (it was reaped). */
void bench_forget_child(pid_t pid);
/* Kills and reaps every child. */
void bench_stop_children(void);
/* Names the program for bench_die's messages; at exit and on SIGINT/SIGTERM
 * stops the children, then calls cleanup (if not NULL); ignores SIGPIPE. */
void bench_start(const char *name, void (*cleanup)(void));
/* Prints "NAME: what: msg" (msg NULL: strerror(errno)) and exits 1. */
void bench_die(const char *what, const char *msg);
/* Forks a child (killed when this process dies) that runs fn(arg, life)
 * and exits; life reads EOF once the parent is gone. */
pid_t bench_spawn(int life_r, int life_w, void (*fn)(void *arg, int life), void *arg);
/* A forked server task /job:worker/task:N (one inter-op thread, quiet);
 * *port gets its port. It lives until EOF on life_r. */
pid_t bench_spawn_server(int task, int life_r, int life_w, int *port);
/* As bench_spawn_server, bound to share `task` of `shares` of the CPUs
 * (as graphrun launch --cpu-bind starts its tasks). */
pid_t bench_spawn_server_bound(int task, int shares, int life_r, int life_w, int *port);
/* The same for /job:JOB/task:N. */
pid_t bench_spawn_server_job(const char *job, int task, int life_r, int life_w, int *port);
/* The same, its connections protected as across hosts (its loopback peers
 * count as on another host, docs/security.md): TLS with cert, key and ca,
 * or all three NULL: frame MACs. */
typedef struct bench_tls {
  const char *cert, *key, *ca;
} bench_tls;
pid_t bench_spawn_server_remote(int task, int life_r, int life_w, int *port, const bench_tls *tls);
/* The shared secret of the benchmarks' servers and masters. */
#define BENCH_SECRET "graphrun-bench-secret"

/* ---- a child that serves slices of steps (the PyTorch sides) --------------------------- */

/* The child reads a number n per line on stdin, runs n more steps and
 * answers "ran N SECONDS"; at end of input it prints its results and
 * exits. Interleaving its slices with graphrun's makes a change of the
 * machine's speed hit both engines. */
typedef struct bench_server {
  pid_t pid;
  FILE *in, *out;
} bench_server;
/* Starts argv (argv[0] the program's path) with OMP_NUM_THREADS=threads,
 * killed when this process dies; false on failure (nothing to free). */
bool bench_serve_start(bench_server *c, char *const argv[], int threads);
/* Asks for n more steps; their seconds, or -1 when the child failed. */
double bench_serve_run(bench_server *c, long n);
/* Ends its input, passes each line it prints then to line(text, arg) and
 * reaps it; true when it exited with 0. */
bool bench_serve_finish(bench_server *c, void (*line)(const char *text, void *arg), void *arg);

#endif

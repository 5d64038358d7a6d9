/* Rate-limited log lines: every line a peer can cause (a bad frame, a
 * refused connection or request, a deadline) goes through a gr_loglimit, so
 * a hostile peer cannot flood the log. Lines are grouped by kind (a key: a
 * format string, a static label); each kind writes at most `burst` lines
 * per window (10 per 10 s by default), counts the rest, and once its window
 * has ended says how many it left out:
 *
 *   gr_loglimit ll;  gr_loglimit_init(&ll);
 *   gr_loglimit_emit(&ll, KEY, "bad frame from ...", write_line, arg);
 *   ... later (a timer, every second):
 *   gr_loglimit_flush(&ll, write_line, arg);
 *   // "12345 more lines like this were suppressed in the last 10 s: bad frame from ..."
 *   gr_loglimit_destroy(&ll);
 *
 * So one kind writes at most burst + 1 lines per window, and all kinds
 * together at most 3 * burst lines and a summary per kind. Thread-safe (a
 * mutex); write_line runs without it held. Internal to distributed/. */
#ifndef GR_LOGLIMIT_INTERNAL_H
#define GR_LOGLIMIT_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#define GR_LOGLIMIT_KINDS  48  /* kinds told apart; more share the last slot */
#define GR_LOGLIMIT_SAMPLE 160 /* bytes of a suppressed line kept for the summary */

typedef struct gr_loglimit_kind {
  const void *key;
  int64_t start_ms;                /* its window began */
  int passed;                      /* lines written in the window */
  uint64_t dropped;                /* lines suppressed in the window */
  char sample[GR_LOGLIMIT_SAMPLE]; /* the last suppressed line (its start) */
} gr_loglimit_kind;

typedef struct gr_loglimit {
  pthread_mutex_t mu;
  int64_t start_ms; /* the window of all kinds together began */
  int passed;       /* lines of all kinds written in it */
  int n;
  gr_loglimit_kind kinds[GR_LOGLIMIT_KINDS];
} gr_loglimit;

typedef void (*gr_log_writer)(void *arg, const char *line);

void gr_loglimit_init(gr_loglimit *ll);
void gr_loglimit_destroy(gr_loglimit *ll);
/* Writes line (write(arg, line)) unless its kind has used its burst in this
 * window; first the summary of the kind's previous window, if it left lines
 * out. */
void gr_loglimit_emit(gr_loglimit *ll, const void *key, const char *line, gr_log_writer write,
                      void *arg);
/* Writes the summaries of the windows that have ended with lines left out. */
void gr_loglimit_flush(gr_loglimit *ll, gr_log_writer write, void *arg);
/* Lines per kind per window, and the window in ms, for every limiter (for
 * tests; burst <= 0: no limit; 0, 0: the defaults, 10 per 10000 ms). */
void gr_loglimit_set_rate(int burst, int window_ms);

#endif

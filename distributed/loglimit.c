/* Rate-limited log lines (loglimit_internal.h): per kind, a fixed window
 * of `burst` lines, then a count of what was left out; all kinds together
 * at most TOTAL_BURSTS bursts a window. */
#include <stdio.h>
#include <string.h>

#include "distributed/loglimit_internal.h"
#include "distributed/wire_internal.h"

#define DEFAULT_BURST     10
#define DEFAULT_WINDOW_MS 10000
#define TOTAL_BURSTS      3

static int rate_burst = DEFAULT_BURST, rate_window_ms = DEFAULT_WINDOW_MS;

void gr_loglimit_set_rate(int burst, int window_ms) {
  if (burst == 0 && window_ms == 0) burst = DEFAULT_BURST, window_ms = DEFAULT_WINDOW_MS;
  __atomic_store_n(&rate_burst, burst, __ATOMIC_RELAXED);
  __atomic_store_n(&rate_window_ms, window_ms > 0 ? window_ms : DEFAULT_WINDOW_MS,
                   __ATOMIC_RELAXED);
}

void gr_loglimit_init(gr_loglimit *ll) {
  memset(ll, 0, sizeof *ll);
  pthread_mutex_init(&ll->mu, NULL);
  ll->start_ms = gr_wire_now_ms();
}

void gr_loglimit_destroy(gr_loglimit *ll) {
  pthread_mutex_destroy(&ll->mu);
}

static gr_loglimit_kind *kind_of(gr_loglimit *ll, const void *key, int64_t now) {
  for (int i = 0; i < ll->n; i++)
    if (ll->kinds[i].key == key) return &ll->kinds[i];
  if (ll->n == GR_LOGLIMIT_KINDS) return &ll->kinds[GR_LOGLIMIT_KINDS - 1]; /* shared */
  gr_loglimit_kind *k = &ll->kinds[ll->n++];
  k->key = key;
  k->start_ms = now;
  return k;
}

/* Ends k's window if it is over: its summary into out ("" when it left
 * nothing out). Under ll->mu. */
static void roll(gr_loglimit_kind *k, int64_t now, int window_ms, char *out, size_t cap) {
  out[0] = '\0';
  if (now - k->start_ms < window_ms) return;
  if (k->dropped)
    snprintf(out, cap, "%llu more lines like this were suppressed in the last %.3g s: %s",
             (unsigned long long)k->dropped, (double)(now - k->start_ms) / 1000, k->sample);
  k->start_ms = now;
  k->passed = 0;
  k->dropped = 0;
}

void gr_loglimit_emit(gr_loglimit *ll, const void *key, const char *line, gr_log_writer write,
                      void *arg) {
  int burst = __atomic_load_n(&rate_burst, __ATOMIC_RELAXED);
  int window = __atomic_load_n(&rate_window_ms, __ATOMIC_RELAXED);
  int64_t now = gr_wire_now_ms();
  char summary[GR_LOGLIMIT_SAMPLE + 96];
  pthread_mutex_lock(&ll->mu);
  gr_loglimit_kind *k = kind_of(ll, key, now);
  roll(k, now, window, summary, sizeof summary);
  if (now - ll->start_ms >= window) ll->start_ms = now, ll->passed = 0;
  bool pass = burst <= 0 || (k->passed < burst && ll->passed < TOTAL_BURSTS * burst);
  if (pass) {
    k->passed++;
    ll->passed++;
  } else {
    k->dropped++;
    snprintf(k->sample, sizeof k->sample, "%s", line);
  }
  pthread_mutex_unlock(&ll->mu);
  if (summary[0]) write(arg, summary);
  if (pass) write(arg, line);
}

void gr_loglimit_flush(gr_loglimit *ll, gr_log_writer write, void *arg) {
  int window = __atomic_load_n(&rate_window_ms, __ATOMIC_RELAXED);
  int64_t now = gr_wire_now_ms();
  for (int i = 0;; i++) {
    char summary[GR_LOGLIMIT_SAMPLE + 96] = "";
    pthread_mutex_lock(&ll->mu);
    bool more = i < ll->n;
    if (more && ll->kinds[i].dropped) roll(&ll->kinds[i], now, window, summary, sizeof summary);
    pthread_mutex_unlock(&ll->mu);
    if (!more) break;
    if (summary[0]) write(arg, summary);
  }
}

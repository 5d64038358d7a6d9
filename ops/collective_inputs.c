/* Which steps of a collective's schedule meet their part of the flat
 * buffer untouched (ops/collective_internal.h): found once per kernel by
 * walking the schedule over the parts' states, kept as sorted, disjoint
 * spans of the buffer. A schedule's parts are the same ranges from phase
 * to phase (the ring's pieces) or the whole buffer (the tree), so the
 * spans stay few; a step over a part in several states (none of the
 * schedules plans one) makes the walk give up, and the caller copies the
 * inputs in as before. */
#include <stdlib.h>
#include <string.h>

#include "ops/collective_internal.h"

enum { UNTOUCHED, SENT, WRITTEN }; /* SENT: sent from the inputs, not written */

typedef struct span {
  int64_t off;
  int state;
} span; /* up to the next span's off (the last: up to total) */

typedef struct spans {
  span *v;
  int n, cap;
  int64_t total;
} spans;

/* The index of the span holding element at (0 <= at < total). */
static int find(const spans *s, int64_t at) {
  int lo = 0, hi = s->n - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (s->v[mid].off <= at)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* A span boundary at `at` (0 < at < total): false when out of memory. */
static bool split(spans *s, int64_t at) {
  int i = find(s, at);
  if (s->v[i].off == at) return true;
  if (s->n == s->cap) {
    int cap = s->cap * 2;
    span *v = realloc(s->v, (size_t)cap * sizeof *v);
    if (!v) return false;
    s->v = v, s->cap = cap;
  }
  memmove(&s->v[i + 2], &s->v[i + 1], (size_t)(s->n - i - 1) * sizeof *s->v);
  s->v[i + 1] = (span){at, s->v[i].state};
  s->n++;
  return true;
}

/* The state of [off, off + len), -1 when its spans differ. */
static int state_of(const spans *s, int64_t off, int64_t len) {
  int i = find(s, off), st = s->v[i].state;
  for (i++; i < s->n && s->v[i].off < off + len; i++)
    if (s->v[i].state != st) return -1;
  return st;
}

static bool set_state(spans *s, int64_t off, int64_t len, int st) {
  if ((off > 0 && !split(s, off)) || (off + len < s->total && !split(s, off + len))) return false;
  for (int i = find(s, off); i < s->n && s->v[i].off < off + len; i++) s->v[i].state = st;
  return true;
}

bool gr_coll_mark_from_inputs(gr_coll_action *acts, int n, int64_t total) {
  for (int k = 0; k < n; k++) acts[k].from_inputs = false;
  if (total <= 0) return false;
  spans s = {malloc(16 * sizeof(span)), 1, 16, total};
  if (!s.v) return false;
  s.v[0] = (span){0, UNTOUCHED};
  bool ok = true;
  for (int k = 0; k < n && ok; k++) {
    gr_coll_action *a = &acts[k];
    if (a->len <= 0) continue; /* an empty piece touches nothing */
    int st = state_of(&s, a->off, a->len);
    if (st < 0) {
      ok = false;
    } else if (a->kind == 'c') { /* overwrites whatever it was */
      ok = set_state(&s, a->off, a->len, WRITTEN);
    } else if (st == SENT) { /* read from the buffer, which never got the values */
      ok = false;
    } else if (st == UNTOUCHED) {
      a->from_inputs = true;
      ok = set_state(&s, a->off, a->len, a->kind == 's' ? SENT : WRITTEN);
    }
  }
  for (int i = 0; ok && i < s.n; i++) ok = s.v[i].state == WRITTEN;
  free(s.v);
  if (!ok)
    for (int k = 0; k < n; k++) acts[k].from_inputs = false;
  return ok;
}

/* What a collective's schedule does to the parts of its flat buffer
 * (ops/collective_internal.h): which steps meet their part untouched, and
 * after which step each part holds its total (where a fused update reads
 * it). Found once per kernel by walking the schedule over the parts'
 * states, kept as sorted, disjoint spans of the buffer. A schedule's parts are the same ranges from
 * phase to phase (the ring's pieces) or the whole buffer (the tree), so the spans stay few; a step
 * over a part in several states (none of the schedules plans one) makes the walk give up, and the
 * caller copies the inputs in as before. */
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

/* An update step over [off, off + len), to go after step `after` (n:
 * after the last). */
typedef struct upd {
  int after;
  int64_t off, len;
} upd;

static int cmp_upd(const void *pa, const void *pb) {
  const upd *a = pa, *b = pb;
  if (a->after != b->after) return (a->after > b->after) - (a->after < b->after);
  return (a->off > b->off) - (a->off < b->off);
}

static bool push_upd(upd **v, int *n, int *cap, int after, int64_t off, int64_t len) {
  if (*n == *cap) {
    int c = *cap ? *cap * 2 : 16;
    upd *w = realloc(*v, (size_t)c * sizeof *w);
    if (!w) return false;
    *v = w, *cap = c;
  }
  (*v)[(*n)++] = (upd){after, off, len};
  return true;
}

bool gr_coll_plan_updates(const gr_coll_action *acts, int n, int64_t total, gr_coll_action **out,
                          int *num_out) {
  *out = NULL, *num_out = 0;
  upd *u = NULL;
  int nu = 0, cap = 0;
  spans s = {malloc(16 * sizeof(span)), 1, 16, total};
  bool ok = s.v != NULL;
  if (ok) s.v[0] = (span){0, UNTOUCHED}; /* UNTOUCHED: no later step writes it */
  /* backwards: the parts of a write that no later step writes again are
   * final after it */
  for (int k = n - 1; k >= 0 && ok && total > 0; k--) {
    const gr_coll_action *a = &acts[k];
    if (a->len <= 0 || a->kind == 's' || a->kind == 'u') continue;
    int i = find(&s, a->off);
    for (; ok && i < s.n && s.v[i].off < a->off + a->len; i++) {
      int64_t lo = s.v[i].off > a->off ? s.v[i].off : a->off;
      int64_t hi = i + 1 < s.n ? s.v[i + 1].off : total;
      if (hi > a->off + a->len) hi = a->off + a->len;
      if (s.v[i].state == UNTOUCHED && hi > lo) ok = push_upd(&u, &nu, &cap, k, lo, hi - lo);
    }
    ok = ok && set_state(&s, a->off, a->len, WRITTEN);
  }
  /* parts no step writes hold their total from the start: updated last */
  for (int i = 0; ok && total > 0 && i < s.n; i++) {
    int64_t hi = i + 1 < s.n ? s.v[i + 1].off : total;
    if (s.v[i].state == UNTOUCHED) ok = push_upd(&u, &nu, &cap, n, s.v[i].off, hi - s.v[i].off);
  }
  /* after the sends that follow the step, which read the part too: they
   * go first, the peers wait for them, an update only reads the buffer */
  for (int j = 0; ok && j < nu; j++)
    while (u[j].after + 1 < n && acts[u[j].after + 1].kind == 's') u[j].after++;
  gr_coll_action *o = ok ? malloc(((size_t)n + (size_t)nu + 1) * sizeof *o) : NULL;
  if (o) {
    if (nu > 0) qsort(u, (size_t)nu, sizeof *u, cmp_upd);
    int m = 0, j = 0;
    for (int k = 0; k <= n; k++) {
      if (k < n) o[m++] = acts[k];
      for (; j < nu && u[j].after == k; j++)
        o[m++] = (gr_coll_action){'u', 0, 0, 0, 0, u[j].off, u[j].len, false};
    }
    *out = o, *num_out = m;
  }
  free(s.v), free(u);
  return o != NULL;
}

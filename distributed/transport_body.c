/* A frame body being received (transport_conn_internal.h, gr_rxbody): its
 * memory grows as its bytes arrive, by doubling, never to the size the
 * header announces before the bytes are there. Small bodies live in a
 * pooled gr_buffer (grown by copying, at most 1 MiB); large ones in an
 * anonymous mapping grown with mremap, which moves pages without copying
 * them. Either way the finished body is a 64-byte-aligned gr_buffer that
 * the received tensors view.
 *
 * Neither takes memory the process does not have ahead of the bytes: a
 * small body starts in an idle pooled buffer of its whole size class when
 * the pool has one (then it grows without copying), and a large one in a
 * kept mapping (below).
 *
 * The mapping of a large body that was freed is kept for the next one
 * (at most GR_RXMAP_KEEP_BYTES in GR_RXMAP_KEEP_N mappings, process-wide,
 * under keep_mu; any thread, as a body is freed wherever its last tensor
 * is): its pages are there already. A fresh mapping costs a page fault per
 * 4 KiB page, each page zeroed by the kernel before the read overwrites
 * it: for a 64 MiB body 16,384 faults, about as much CPU as the copy out
 * of the socket itself (docs/benchmarks.md, bench-transfer). */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "distributed/transport_conn_internal.h"

static size_t page_size(void) {
  static size_t page;
  if (!page) {
    long p = sysconf(_SC_PAGESIZE);
    page = p > 0 ? (size_t)p : 4096;
  }
  return page;
}

static size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

size_t gr_rxbody_next_cap(size_t cap, size_t need, size_t len) {
  size_t c = cap ? 2 * cap : GR_RXBODY_FIRST;
  if (c < need) c = need;
  if (c > GR_RXBODY_SMALL) c = round_up(c, page_size());
  return c < len ? c : len;
}

uint8_t *gr_rxbody_data(const gr_rxbody *b) {
  return b->map ? b->map : b->buf ? (uint8_t *)b->buf->data : NULL;
}

/* ---- mappings kept for reuse ---- */

static pthread_mutex_t keep_mu = PTHREAD_MUTEX_INITIALIZER;
static struct kept {
  void *p;
  size_t n;
} kept[GR_RXMAP_KEEP_N]; /* oldest first */
static int num_kept;
static size_t kept_bytes;
static size_t keep_limit = GR_RXMAP_KEEP_BYTES;

static void drop_kept_locked(int i, struct kept *out) {
  *out = kept[i];
  kept_bytes -= kept[i].n;
  memmove(&kept[i], &kept[i + 1], (size_t)(num_kept - i - 1) * sizeof *kept);
  num_kept--;
}

/* A kept mapping for a body of len bytes: the smallest that holds it
 * (within twice its size: a much larger one stays for a larger body), else
 * the largest, which mremap grows; {NULL, 0} when none is kept. */
static struct kept take_kept(size_t len) {
  struct kept k = {NULL, 0};
  size_t want = round_up(len, page_size());
  pthread_mutex_lock(&keep_mu);
  int fit = -1, big = -1; /* the smallest that holds it; the largest that does not */
  for (int i = 0; i < num_kept; i++) {
    size_t n = kept[i].n;
    if (n >= want && n / 2 <= want) {
      if (fit < 0 || n < kept[fit].n) fit = i;
    } else if (n < want && (big < 0 || n > kept[big].n)) {
      big = i;
    }
  }
  int best = fit >= 0 ? fit : big;
  if (best >= 0) drop_kept_locked(best, &k);
  pthread_mutex_unlock(&keep_mu);
  return k;
}

/* Keeps the mapping p of n bytes for a later body, making room by
 * unmapping the oldest kept; unmaps it when it is larger than the limit. */
static void keep_or_unmap(void *p, size_t n) {
  struct kept out[GR_RXMAP_KEEP_N + 1];
  int num_out = 0;
  pthread_mutex_lock(&keep_mu);
  if (n > keep_limit) {
    out[num_out++] = (struct kept){p, n};
  } else {
    while (num_kept > 0 && (num_kept == GR_RXMAP_KEEP_N || kept_bytes + n > keep_limit))
      drop_kept_locked(0, &out[num_out++]);
    kept[num_kept++] = (struct kept){p, n};
    kept_bytes += n;
  }
  pthread_mutex_unlock(&keep_mu);
  for (int i = 0; i < num_out; i++) munmap(out[i].p, out[i].n);
}

void gr_rxbody_set_keep(size_t bytes) {
  pthread_mutex_lock(&keep_mu);
  keep_limit = bytes;
  struct kept out[GR_RXMAP_KEEP_N];
  int num_out = 0;
  while (num_kept > 0 && kept_bytes > keep_limit) drop_kept_locked(0, &out[num_out++]);
  pthread_mutex_unlock(&keep_mu);
  for (int i = 0; i < num_out; i++) munmap(out[i].p, out[i].n);
}

size_t gr_rxbody_kept_bytes(void) {
  pthread_mutex_lock(&keep_mu);
  size_t n = kept_bytes;
  pthread_mutex_unlock(&keep_mu);
  return n;
}

/* ---- a body ---- */

/* b's bytes move to the mapping p of mapped bytes (its first used bytes
 * copied from the pooled buffer, if any). */
static void move_to_map(gr_rxbody *b, void *p, size_t mapped, size_t used) {
  if (b->buf && used) memcpy(p, b->buf->data, used);
  gr_buffer_release(b->buf);
  b->buf = NULL;
  b->map = p;
  b->mapped = mapped;
}

gr_status gr_rxbody_grow(gr_rxbody *b, size_t cap, size_t used, size_t len, gr_error *err) {
  if (cap <= b->cap) return GR_OK;
  if (!b->map && len > GR_RXBODY_SMALL) { /* it ends in a mapping: a kept one from the start */
    struct kept k = take_kept(len);
    if (k.p) move_to_map(b, k.p, k.n, used);
  }
  if (cap <= GR_RXBODY_SMALL && !b->map) {   /* pooled */
    if (b->buf && b->buf->capacity >= cap) { /* its size class holds it */
      b->cap = cap;
      return GR_OK;
    }
    /* a new buffer, the bytes so far copied: an idle one of the whole
     * body's size class if the pool has one (no copy as the body grows),
     * else one of cap's */
    gr_buffer *nb = len <= GR_RXBODY_SMALL ? gr_buffer_alloc_idle(len) : NULL;
    if (!nb) nb = gr_buffer_alloc(cap);
    if (!nb) return gr_error_set_oom(err);
    if (used) memcpy(nb->data, b->buf->data, used);
    gr_buffer_release(b->buf);
    b->buf = nb;
    b->cap = cap;
    return GR_OK;
  }
  size_t mapped = round_up(cap, page_size());
  if (b->map && mapped > b->mapped) { /* grown: its pages move, new ones fault in as bytes come */
    void *p = mremap(b->map, b->mapped, mapped, MREMAP_MAYMOVE);
    if (p == MAP_FAILED) return gr_error_set_oom(err);
    b->map = p;
    b->mapped = mapped;
  } else if (!b->map) {
    void *p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return gr_error_set_oom(err);
    move_to_map(b, p, mapped, used);
  }
  b->cap = cap;
  return GR_OK;
}

static void unmap(void *data, void *arg) {
  keep_or_unmap(data, (size_t)(uintptr_t)arg);
}

gr_buffer *gr_rxbody_finish(gr_rxbody *b, size_t len) {
  gr_buffer *out;
  if (b->map) {
    size_t keep = round_up(len ? len : 1, page_size());
    if (keep < b->mapped && mremap(b->map, b->mapped, keep, 0) != MAP_FAILED) b->mapped = keep;
    out = gr_buffer_wrap(b->map, len, unmap, (void *)(uintptr_t)b->mapped);
    if (!out) return NULL; /* b keeps the mapping: gr_rxbody_free unmaps it */
  } else {
    out = b->buf;
  }
  *b = (gr_rxbody){0};
  return out;
}

void gr_rxbody_free(gr_rxbody *b) {
  if (b->map) keep_or_unmap(b->map, b->mapped);
  gr_buffer_release(b->buf);
  *b = (gr_rxbody){0};
}

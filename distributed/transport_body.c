/* A frame body being received (transport_conn_internal.h, gr_rxbody): its
 * memory grows as its bytes arrive, by doubling, never to the size the
 * header announces before the bytes are there. Small bodies live in a
 * pooled gr_buffer (grown by copying, at most 1 MiB); large ones in an
 * anonymous mapping grown with mremap, which moves pages without copying
 * them. Either way the finished body is a 64-byte-aligned gr_buffer that
 * the received tensors view. */
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

gr_status gr_rxbody_grow(gr_rxbody *b, size_t cap, size_t used, gr_error *err) {
  if (cap <= b->cap) return GR_OK;
  if (cap <= GR_RXBODY_SMALL) { /* pooled: a new buffer, the bytes so far copied */
    gr_buffer *nb = gr_buffer_alloc(cap);
    if (!nb) return gr_error_set_oom(err);
    if (used) memcpy(nb->data, b->buf->data, used);
    gr_buffer_release(b->buf);
    b->buf = nb;
    b->cap = cap;
    return GR_OK;
  }
  size_t mapped = round_up(cap, page_size());
  void *p;
  if (b->map) {
    p = mremap(b->map, b->mapped, mapped, MREMAP_MAYMOVE);
  } else {
    p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED && used) memcpy(p, b->buf->data, used);
  }
  if (p == MAP_FAILED) return gr_error_set_oom(err);
  gr_buffer_release(b->buf);
  b->buf = NULL;
  b->map = p;
  b->mapped = mapped;
  b->cap = cap;
  return GR_OK;
}

static void unmap(void *data, void *arg) {
  munmap(data, (size_t)(uintptr_t)arg);
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
  if (b->map) munmap(b->map, b->mapped);
  gr_buffer_release(b->buf);
  *b = (gr_rxbody){0};
}

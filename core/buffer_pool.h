/* The buffer pool's engine side (core/buffer.c), beyond core/gr_buffer.h:
 * for the transport, which receives a frame's body into a pooled buffer.
 * Any thread. */
#ifndef GR_BUFFER_POOL_H
#define GR_BUFFER_POOL_H

#include "core/gr_buffer.h"

/* An idle pooled buffer of bytes' size class (capacity at least bytes,
 * refcount 1), or NULL when none is idle: it never allocates from the
 * system, so taking one adds no memory to the process. */
gr_buffer *gr_buffer_alloc_idle(size_t bytes);

#endif

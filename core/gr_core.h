/* core/: the face header. Status, dtypes, shapes, buffers, tensors, attrs,
 * graphs, the op registry, device names, RNG, thread pool, executor, session.
 * core depends on libc and pthreads only.
 *
 *   #include "core/gr_core.h"
 *   gr_graph *g = gr_graph_new();
 *   ...
 *   gr_graph_free(g);
 */
#ifndef GR_CORE_H
#define GR_CORE_H

#include "core/gr_alloc.h"
#include "core/gr_attr.h"
#include "core/gr_buffer.h"
#include "core/gr_cancel.h"
#include "core/gr_colocation.h"
#include "core/gr_device.h"
#include "core/gr_dtype.h"
#include "core/gr_graph.h"
#include "core/gr_op.h"
#include "core/gr_rendezvous.h"
#include "core/gr_resource.h"
#include "core/gr_rng.h"
#include "core/gr_session.h"
#include "core/gr_shape.h"
#include "core/gr_status.h"
#include "core/gr_tensor.h"
#include "core/gr_trace.h"

#endif

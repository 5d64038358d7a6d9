/* core's engine face: what the engine's other folders (ops, placer, passes,
 * checkpoints, distributed, frontend) and the tests use of core beyond its
 * public API (core/gr_core.h). Not installed: idle pooled buffers, the
 * engine's hash maps, thread pool, executor, partitioner, control-flow
 * frames, device plans, the seams of sessions (the remote runner, the
 * rewrite hook), and the invariant checks of debug and sanitizer builds. */
#ifndef GR_CORE_ENGINE_H
#define GR_CORE_ENGINE_H

#include "core/buffer_pool.h"
#include "core/device_plan.h"
#include "core/executor.h"
#include "core/frames.h"
#include "core/gr_core.h"
#include "core/invariants.h"
#include "core/map.h"
#include "core/partition.h"
#include "core/session_remote.h"
#include "core/session_rewrite.h"
#include "core/threadpool.h"

#endif

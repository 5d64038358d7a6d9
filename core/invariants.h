/* Checks of the engine's own invariants, SQLite-style: compiled into debug
 * and sanitizer builds (GR_CHECK_INVARIANTS, set by CMake), nothing in a
 * release build. A failed check is an engine bug (GR_ASSERT). The threads
 * and locks they check: docs/internals.md, "Threads and locks". Part of
 * core's engine face (core/core_engine.h). */
#ifndef GR_INVARIANTS_H
#define GR_INVARIANTS_H

#include <pthread.h>

#include "core/gr_status.h"

#ifdef GR_CHECK_INVARIANTS
/* The mutex is held (by some thread: a pthread mutex does not say which;
 * the caller of a *_locked function is the one that must hold it). */
#define GR_ASSERT_HELD(mu)                                                                         \
  GR_ASSERT(pthread_mutex_trylock(mu) != 0 || (pthread_mutex_unlock(mu), 0))
/* The calling thread is `thread` (a loop thread, say). */
#define GR_ASSERT_ON_THREAD(thread) GR_ASSERT(pthread_equal(pthread_self(), (thread)))
#else
#define GR_ASSERT_HELD(mu)          ((void)0)
#define GR_ASSERT_ON_THREAD(thread) ((void)0)
#endif

#endif

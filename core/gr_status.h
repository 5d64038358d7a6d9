/* Status codes and error messages.
 *
 *   gr_error err;
 *   if (gr_do_something(..., &err) != GR_OK)
 *     fprintf(stderr, "%s: %s\n", gr_status_name(err.code), err.msg);
 *
 * A function that can fail returns a gr_status (GR_OK == 0) and, when given a
 * non-NULL gr_error *, fills it with a message naming the node, file position
 * or peer involved. gr_error is a plain value: no allocation, nothing to free.
 * GR_ASSERT is for the engine's own invariants only, never for user input. */
#ifndef GR_STATUS_H
#define GR_STATUS_H

#include <stdarg.h>

#include "core/gr_alloc.h" /* the checked allocations whose failure gr_error_set_oom reports */

/* X(enum, name) — the one table of codes. */
#define GR_STATUS_LIST(X)                                                                          \
  X(GR_OK, "ok")                                                                                   \
  X(GR_ERR_INVALID_ARGUMENT, "invalid argument")                                                   \
  X(GR_ERR_NOT_FOUND, "not found")                                                                 \
  X(GR_ERR_ALREADY_EXISTS, "already exists")                                                       \
  X(GR_ERR_SHAPE, "shape error")                                                                   \
  X(GR_ERR_DTYPE, "dtype error")                                                                   \
  X(GR_ERR_OUT_OF_RANGE, "out of range")                                                           \
  X(GR_ERR_FAILED_PRECONDITION, "failed precondition")                                             \
  X(GR_ERR_UNIMPLEMENTED, "unimplemented")                                                         \
  X(GR_ERR_RESOURCE_EXHAUSTED, "resource exhausted")                                               \
  X(GR_ERR_CANCELLED, "cancelled")                                                                 \
  X(GR_ERR_ABORTED, "aborted")                                                                     \
  X(GR_ERR_UNAVAILABLE, "unavailable")                                                             \
  X(GR_ERR_DEADLINE_EXCEEDED, "deadline exceeded")                                                 \
  X(GR_ERR_IO, "i/o error")                                                                        \
  X(GR_ERR_DATA_LOSS, "data loss")                                                                 \
  X(GR_ERR_INTERNAL, "internal error")                                                             \
  X(GR_ERR_UNAUTHENTICATED, "unauthenticated")

typedef enum gr_status {
#define GR_X_ENUM(e, s) e,
  GR_STATUS_LIST(GR_X_ENUM)
#undef GR_X_ENUM
      GR_STATUS_COUNT
} gr_status;

#define GR_ERROR_MSG_MAX 1024

typedef struct gr_error {
  gr_status code;
  char msg[GR_ERROR_MSG_MAX];
} gr_error;

/* The short name of a code ("invalid argument"); "unknown status" if out of range. */
const char *gr_status_name(gr_status code);

/* Fill err (if not NULL) with code and a printf-style message; returns code. */
gr_status gr_error_set(gr_error *err, gr_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
gr_status gr_error_setv(gr_error *err, gr_status code, const char *fmt, va_list ap);

/* gr_error_set_oom(err): the one
 * message of a failed allocation; returns GR_ERR_RESOURCE_EXHAUSTED. */
gr_status gr_error_set_oom(gr_error *err);

/* Prepend "prefix: " to an existing message (for adding context on the way up). */
void gr_error_prefix(gr_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reset to GR_OK with an empty message. */
void gr_error_clear(gr_error *err);

/* Engine invariant check: prints file:line and aborts. Never for user input. */
void gr_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define GR_ASSERT(e) ((e) ? (void)0 : gr_assert_fail(#e, __FILE__, __LINE__))

/* Propagate a failing status. */
#define GR_TRY(expr)                                                                               \
  do {                                                                                             \
    gr_status gr_try_s_ = (expr);                                                                  \
    if (gr_try_s_ != GR_OK) return gr_try_s_;                                                      \
  } while (0)

#endif

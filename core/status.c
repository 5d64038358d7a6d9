#include "core/gr_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const status_names[] = {
#define GR_X_NAME(e, s) s,
    GR_STATUS_LIST(GR_X_NAME)
#undef GR_X_NAME
};

const char *gr_status_name(gr_status code) {
  if ((unsigned)code >= GR_STATUS_COUNT) return "unknown status";
  return status_names[code];
}

gr_status gr_error_setv(gr_error *err, gr_status code, const char *fmt, va_list ap) {
  if (err) {
    err->code = code;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  }
  return code;
}

gr_status gr_error_set(gr_error *err, gr_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  gr_error_setv(err, code, fmt, ap);
  va_end(ap);
  return code;
}

gr_status gr_error_set_oom(gr_error *err) {
  return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
}

void gr_error_prefix(gr_error *err, const char *fmt, ...) {
  if (!err) return;
  char prefix[GR_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  char old[GR_ERROR_MSG_MAX];
  memcpy(old, err->msg, sizeof old);
  snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old);
}

void gr_error_clear(gr_error *err) {
  if (!err) return;
  err->code = GR_OK;
  err->msg[0] = '\0';
}

void gr_assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "graphrun internal error: %s:%d: assertion '%s' failed\n", file, line, expr);
  abort();
}

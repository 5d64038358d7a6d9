/* Device names: `/job:J/replica:R/task:T/device:TYPE:K`, the legacy short
 * forms `/cpu:0` and `/job:J/task:T/cpu:0`, partial specs (any field may be
 * left out) and `*` for "any" in the id.
 *
 *   gr_device_spec s;
 *   gr_error err;
 *   if (gr_device_spec_parse("/job:worker/task:1", &s, &err) == GR_OK) {
 *     char buf[GR_DEVICE_NAME_MAX];
 *     puts(gr_device_spec_str(&s, buf));    // "/job:worker/task:1"
 *   }
 */
#ifndef GR_DEVICE_H
#define GR_DEVICE_H

#include <stdbool.h>

#include "core/gr_status.h"

#define GR_DEVICE_NAME_MAX 160
#define GR_DEVICE_JOB_MAX  64
#define GR_DEVICE_TYPE_MAX 16
#define GR_DEVICE_ANY      (-1) /* field not given or `*` */

typedef struct gr_device_spec {
  char job[GR_DEVICE_JOB_MAX]; /* "" = any */
  int replica, task, id;       /* GR_DEVICE_ANY = any */
  char type[GR_DEVICE_TYPE_MAX];
} gr_device_spec;

/* Parses a full or partial spec. "" parses to the all-any spec. Errors
 * (GR_ERR_INVALID_ARGUMENT) quote the spec and the offending part. */
gr_status gr_device_spec_parse(const char *text, gr_device_spec *out, gr_error *err);
/* Canonical text of a spec; only the fields that are set. Returns buf. */
char *gr_device_spec_str(const gr_device_spec *s, char *buf);
/* inner overrides outer where inner sets a field (nested device scopes). */
gr_device_spec gr_device_spec_merge(const gr_device_spec *outer, const gr_device_spec *inner);
/* Does the spec accept this fully specified device? */
bool gr_device_spec_matches(const gr_device_spec *spec, const gr_device_spec *device);
bool gr_device_spec_is_full(const gr_device_spec *s);
gr_device_spec gr_device_spec_any(void);
/* Full local CPU device name /job:localhost/replica:0/task:0/device:CPU:k. */
gr_device_spec gr_device_spec_local_cpu(int k);

#endif

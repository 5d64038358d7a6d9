#include "core/gr_device.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

gr_device_spec gr_device_spec_any(void) {
  gr_device_spec s;
  memset(&s, 0, sizeof s);
  s.replica = s.task = s.id = GR_DEVICE_ANY;
  return s;
}

gr_device_spec gr_device_spec_local_cpu(int k) {
  gr_device_spec s = gr_device_spec_any();
  strcpy(s.job, "localhost");
  s.replica = 0;
  s.task = 0;
  strcpy(s.type, "CPU");
  s.id = k;
  return s;
}

static gr_status bad(gr_error *err, const char *text, const char *why, const char *part, int len) {
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                      "malformed device spec '%s': %s '%.*s' (expected "
                      "/job:NAME/replica:N/task:N/device:TYPE:N, or /cpu:N)",
                      text, why, len, part);
}

/* A non-negative decimal integer, or `*` (any) when allow_any. */
static bool parse_index(const char *p, int len, bool allow_any, int *out) {
  if (allow_any && len == 1 && p[0] == '*') {
    *out = GR_DEVICE_ANY;
    return true;
  }
  if (len < 1 || len > 9) return false;
  int v = 0;
  for (int i = 0; i < len; i++) {
    if (!isdigit((unsigned char)p[i])) return false;
    v = v * 10 + (p[i] - '0');
  }
  *out = v;
  return true;
}

static bool valid_name(const char *p, int len, int max) {
  if (len < 1 || len >= max) return false;
  if (!isalpha((unsigned char)p[0])) return false;
  for (int i = 0; i < len; i++)
    if (!isalnum((unsigned char)p[i]) && p[i] != '_' && p[i] != '-') return false;
  return true;
}

/* TYPE:ID with TYPE among the known device types (case-insensitive "cpu"). */
static bool parse_type_id(const char *p, int len, gr_device_spec *s) {
  const char *colon = memchr(p, ':', (size_t)len);
  if (!colon) return false;
  int tlen = (int)(colon - p);
  if (!valid_name(p, tlen, GR_DEVICE_TYPE_MAX)) return false;
  for (int i = 0; i < tlen; i++) s->type[i] = (char)toupper((unsigned char)p[i]);
  s->type[tlen] = '\0';
  return parse_index(colon + 1, len - tlen - 1, true, &s->id);
}

gr_status gr_device_spec_parse(const char *text, gr_device_spec *out, gr_error *err) {
  gr_device_spec s = gr_device_spec_any();
  if (!text) text = "";
  const char *p = text;
  bool seen_job = false, seen_replica = false, seen_task = false, seen_device = false;
  if (*p && *p != '/') return bad(err, text, "a spec starts with '/', not", p, 1);
  while (*p) {
    p++; /* skip '/' */
    const char *end = strchr(p, '/');
    int len = end ? (int)(end - p) : (int)strlen(p);
    if (len == 0) return bad(err, text, "empty component in", text, (int)strlen(text));
    const char *colon = memchr(p, ':', (size_t)len);
    if (!colon) return bad(err, text, "component without ':'", p, len);
    int klen = (int)(colon - p);
    const char *v = colon + 1;
    int vlen = len - klen - 1;
#define KEY(k) (klen == (int)strlen(k) && strncmp(p, k, (size_t)klen) == 0)
    if (KEY("job")) {
      if (seen_job) return bad(err, text, "repeated", p, len);
      seen_job = true;
      if (vlen == 1 && v[0] == '*') {
        s.job[0] = '\0';
      } else {
        if (!valid_name(v, vlen, GR_DEVICE_JOB_MAX)) return bad(err, text, "bad job name", v, vlen);
        memcpy(s.job, v, (size_t)vlen);
        s.job[vlen] = '\0';
      }
    } else if (KEY("replica")) {
      if (seen_replica) return bad(err, text, "repeated", p, len);
      seen_replica = true;
      if (!parse_index(v, vlen, true, &s.replica))
        return bad(err, text, "bad replica index", v, vlen);
    } else if (KEY("task")) {
      if (seen_task) return bad(err, text, "repeated", p, len);
      seen_task = true;
      if (!parse_index(v, vlen, true, &s.task)) return bad(err, text, "bad task index", v, vlen);
    } else if (KEY("device")) {
      if (seen_device) return bad(err, text, "repeated", p, len);
      seen_device = true;
      if (vlen == 1 && v[0] == '*') continue; /* any device */
      if (!parse_type_id(v, vlen, &s)) return bad(err, text, "bad device TYPE:N", v, vlen);
    } else if ((klen == 3 && (strncasecmp(p, "cpu", 3) == 0 || strncasecmp(p, "gpu", 3) == 0)) &&
               !seen_device) {
      /* legacy /cpu:0 or /gpu:1 */
      seen_device = true;
      if (!parse_type_id(p, len, &s)) return bad(err, text, "bad device TYPE:N", p, len);
    } else {
      return bad(err, text, "unknown component", p, len);
    }
#undef KEY
    p += len;
  }
  /* GPU parses (TensorFlow programs name GPUs): no device of this build
   * matches it, so a node pinned there runs only with soft placement */
  if (s.type[0] && strcmp(s.type, "CPU") != 0 && strcmp(s.type, "GPU") != 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "device spec '%s': unknown device type '%s' (this build has CPU only; "
                        "GPU pins run on a CPU with soft placement)",
                        text, s.type);
  *out = s;
  return GR_OK;
}

char *gr_device_spec_str(const gr_device_spec *s, char *buf) {
  size_t n = 0;
  buf[0] = '\0';
  if (s->job[0]) n += (size_t)snprintf(buf + n, GR_DEVICE_NAME_MAX - n, "/job:%s", s->job);
  if (s->replica != GR_DEVICE_ANY)
    n += (size_t)snprintf(buf + n, GR_DEVICE_NAME_MAX - n, "/replica:%d", s->replica);
  if (s->task != GR_DEVICE_ANY)
    n += (size_t)snprintf(buf + n, GR_DEVICE_NAME_MAX - n, "/task:%d", s->task);
  if (s->type[0]) {
    if (s->id != GR_DEVICE_ANY)
      snprintf(buf + n, GR_DEVICE_NAME_MAX - n, "/device:%s:%d", s->type, s->id);
    else
      snprintf(buf + n, GR_DEVICE_NAME_MAX - n, "/device:%s:*", s->type);
  }
  return buf;
}

gr_device_spec gr_device_spec_merge(const gr_device_spec *outer, const gr_device_spec *inner) {
  gr_device_spec m = *outer;
  if (inner->job[0]) strcpy(m.job, inner->job);
  if (inner->replica != GR_DEVICE_ANY) m.replica = inner->replica;
  if (inner->task != GR_DEVICE_ANY) m.task = inner->task;
  if (inner->type[0]) {
    strcpy(m.type, inner->type);
    m.id = inner->id;
  } else if (inner->id != GR_DEVICE_ANY) {
    m.id = inner->id;
  }
  return m;
}

bool gr_device_spec_matches(const gr_device_spec *spec, const gr_device_spec *d) {
  if (spec->job[0] && strcmp(spec->job, d->job) != 0) return false;
  if (spec->replica != GR_DEVICE_ANY && spec->replica != d->replica) return false;
  if (spec->task != GR_DEVICE_ANY && spec->task != d->task) return false;
  if (spec->type[0] && strcmp(spec->type, d->type) != 0) return false;
  if (spec->id != GR_DEVICE_ANY && spec->id != d->id) return false;
  return true;
}

bool gr_device_spec_is_full(const gr_device_spec *s) {
  return s->job[0] && s->replica != GR_DEVICE_ANY && s->task != GR_DEVICE_ANY && s->type[0] &&
         s->id != GR_DEVICE_ANY;
}

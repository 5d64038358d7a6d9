/* The rendezvous interface (gr_rendezvous.h): calls go to an
 * implementation (rendezvous_local.c, or the distributed runtime's), and
 * keys are checked part by part before anything trusts them. */
#include "core/gr_rendezvous.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gr_rendezvous {
  const gr_rendezvous_ops *ops;
  void *self;
};

gr_rendezvous *gr_rendezvous_new_with(const gr_rendezvous_ops *ops, void *self) {
  gr_rendezvous *r = malloc(sizeof *r);
  if (r) *r = (gr_rendezvous){ops, self};
  return r;
}

void gr_rendezvous_free(gr_rendezvous *r) {
  if (!r) return;
  r->ops->free(r->self);
  free(r);
}

gr_status gr_rendezvous_send(gr_rendezvous *r, const char *key, const gr_tensor *value, bool dead,
                             gr_error *err) {
  return r->ops->send(r->self, key, value, dead, err);
}

void gr_rendezvous_recv(gr_rendezvous *r, const char *key, gr_rendezvous_done_fn done, void *arg) {
  r->ops->recv(r->self, key, done, arg);
}

void gr_rendezvous_abort(gr_rendezvous *r, gr_status code, const char *msg) {
  r->ops->abort(r->self, code, msg);
}

void gr_rendezvous_expect_into(gr_rendezvous *r, const char *key, const gr_tensor *into) {
  if (r->ops->expect_into) r->ops->expect_into(r->self, key, into);
}

int gr_rendezvous_num_pending(gr_rendezvous *r) {
  return r->ops->num_pending(r->self);
}

gr_transfer_stats gr_rendezvous_stats(gr_rendezvous *r) {
  return r->ops->stats(r->self);
}

/* ---- keys ------------------------------------------------------------------------------ */

/* The key as quoted in messages: at most 120 bytes, then "...". */
static const char *quoted(const char *key, char *buf, size_t cap) {
  size_t n = strlen(key);
  if (n < cap) return key;
  memcpy(buf, key, cap - 4);
  memcpy(buf + cap - 4, "...", 4);
  return buf;
}

static gr_status bad_key(const char *key, gr_error *err, const char *what) {
  char buf[124];
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "rendezvous key '%s': %s",
                      quoted(key, buf, sizeof buf), what);
}

static gr_status device_part(const char *key, const char *p, size_t n, const char *which,
                             gr_device_spec *out, gr_error *err) {
  char name[GR_DEVICE_NAME_MAX], msg[GR_DEVICE_NAME_MAX + 64];
  gr_error e;
  if (n == 0 || n >= sizeof name) {
    snprintf(msg, sizeof msg, "the %s device is %s", which, n ? "too long" : "empty");
    return bad_key(key, err, msg);
  }
  memcpy(name, p, n);
  name[n] = '\0';
  if (gr_device_spec_parse(name, out, &e) != GR_OK || !gr_device_spec_is_full(out)) {
    snprintf(msg, sizeof msg, "the %s device '%s' is not a full device name", which, name);
    return bad_key(key, err, msg);
  }
  return GR_OK;
}

gr_status gr_rendezvous_parse_key(const char *key, gr_rendezvous_key *out, gr_error *err) {
  const char *part[5];
  size_t len[5];
  int n = 0;
  const char *p = key;
  for (; n < 5; n++) {
    const char *semi = n < 4 ? strchr(p, ';') : NULL;
    part[n] = p;
    len[n] = semi ? (size_t)(semi - p) : strlen(p);
    if (!semi) break;
    p = semi + 1;
  }
  if (n != 4)
    return bad_key(key, err, "want 5 parts, src_device;incarnation;dst_device;edge;frame:iter");
  if (memchr(part[4], ';', len[4])) return bad_key(key, err, "more than 5 parts");
  GR_TRY(device_part(key, part[0], len[0], "source", &out->src, err));
  GR_TRY(device_part(key, part[2], len[2], "destination", &out->dst, err));
  if (len[1] != 16) return bad_key(key, err, "the incarnation is not 16 hex digits");
  out->incarnation = 0;
  for (int i = 0; i < 16; i++) {
    char c = part[1][i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return bad_key(key, err, "the incarnation is not 16 hex digits");
    out->incarnation = out->incarnation << 4 | (uint64_t)d;
  }
  if (len[3] == 0) return bad_key(key, err, "the edge name is empty");
  out->edge = part[3];
  out->edge_len = len[3];
  const char *colon = NULL;
  for (const char *q = part[4]; q < part[4] + len[4]; q++)
    if (*q == ':') colon = q;
  if (!colon) return bad_key(key, err, "the last part is not frame:iteration");
  out->frame = part[4];
  out->frame_len = (size_t)(colon - part[4]);
  const char *digits = colon + 1, *end = part[4] + len[4];
  if (digits == end || end - digits > 18)
    return bad_key(key, err, "the iteration is not a number below 10^18");
  out->iteration = 0;
  for (const char *q = digits; q < end; q++) {
    if (*q < '0' || *q > '9') return bad_key(key, err, "the iteration is not a number");
    out->iteration = out->iteration * 10 + (*q - '0');
  }
  return GR_OK;
}

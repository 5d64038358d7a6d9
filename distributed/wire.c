/* Frames: the fixed header, checked reading of a message's msgpack map, and
 * building outgoing messages whose bodies go out by reference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "distributed/gr_distributed.h"
#include "distributed/wire_internal.h"

static const uint8_t magic[4] = {'G', 'R', 'W', 'F'};

static const struct {
  const char *name;
  uint32_t header_max, body_max;
} types[GR_MSG_COUNT] = {[GR_MSG_NONE] = {"none", 0, 0},
#define GR_X_MSG_TABLE(e, s, h, b) [e] = {s, (uint32_t)(h), (uint32_t)(b)},
                         GR_MSG_LIST(GR_X_MSG_TABLE)
#undef GR_X_MSG_TABLE
};

const char *gr_msg_type_name(int type) {
  return type > GR_MSG_NONE && type < GR_MSG_COUNT ? types[type].name : "unknown";
}

void gr_msg_type_limits(int type, uint32_t *header_max, uint32_t *body_max) {
  bool known = type > GR_MSG_NONE && type < GR_MSG_COUNT;
  *header_max = known ? types[type].header_max : 0;
  *body_max = known ? types[type].body_max : 0;
}

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void gr_wire_put_frame_header(uint8_t out[GR_WIRE_HEADER_SIZE], const gr_frame_header *h) {
  memcpy(out, magic, 4);
  out[4] = h->version;
  out[5] = h->type;
  out[6] = (uint8_t)h->flags;
  out[7] = (uint8_t)(h->flags >> 8);
  put32(out + 8, h->header_len);
  put32(out + 12, h->body_len);
}

gr_status gr_wire_parse_frame_header(const uint8_t in[GR_WIRE_HEADER_SIZE], size_t body_max,
                                     gr_frame_header *h, gr_error *err) {
  if (memcmp(in, magic, 4) != 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "not a graphrun frame (bytes %02x %02x %02x %02x, want 'GRWF')", in[0],
                        in[1], in[2], in[3]);
  h->version = in[4];
  h->type = in[5];
  h->flags = (uint16_t)(in[6] | in[7] << 8);
  h->header_len = get32(in + 8);
  h->body_len = get32(in + 12);
  if (h->version != GR_WIRE_VERSION)
    return gr_error_set(err, GR_ERR_UNIMPLEMENTED, "wire version %u, this build speaks version %d",
                        h->version, GR_WIRE_VERSION);
  if (h->type <= GR_MSG_NONE || h->type >= GR_MSG_COUNT)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "unknown message type %u", h->type);
  if (h->flags != 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s frame: unknown flags 0x%x",
                        types[h->type].name, h->flags);
  if (h->header_len == 0 || h->header_len > types[h->type].header_max)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "%s frame: header of %u bytes (must be 1 to %u)", types[h->type].name,
                        h->header_len, types[h->type].header_max);
  uint64_t bmax = types[h->type].body_max < body_max ? types[h->type].body_max : body_max;
  if (h->body_len > bmax)
    return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED,
                        "%s frame: body of %u bytes is over the limit of %llu", types[h->type].name,
                        h->body_len, (unsigned long long)bmax);
  return GR_OK;
}

/* ---- reading --------------------------------------------------------------- */

gr_status gr_msg_parse(gr_msg *m, const void *data, size_t len, gr_error *err) {
  m->has_zone = false;
  GR_TRY(gr_wire_check_msgpack(data, len, 6, err));
  if (!msgpack_zone_init(&m->zone, 2048)) return gr_error_set_oom(err);
  m->has_zone = true;
  /* msgpack-c's objects point into the bytes they came from: keep a copy */
  char *copy = msgpack_zone_malloc(&m->zone, len ? len : 1);
  if (!copy) {
    gr_msg_free(m);
    return gr_error_set_oom(err);
  }
  memcpy(copy, data, len);
  size_t off = 0;
  msgpack_unpack_return r = msgpack_unpack(copy, len, &off, &m->zone, &m->root);
  if (r != MSGPACK_UNPACK_SUCCESS || off != len || m->root.type != MSGPACK_OBJECT_MAP) {
    gr_msg_free(m);
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        r == MSGPACK_UNPACK_NOMEM_ERROR ? "out of memory unpacking a message"
                                                        : "the message is not a msgpack map");
  }
  return GR_OK;
}

void gr_msg_free(gr_msg *m) {
  if (m->has_zone) msgpack_zone_destroy(&m->zone);
  m->has_zone = false;
}

const msgpack_object *gr_msg_get(const msgpack_object *map, const char *key) {
  if (!map || map->type != MSGPACK_OBJECT_MAP) return NULL;
  size_t n = strlen(key);
  for (uint32_t i = 0; i < map->via.map.size; i++) {
    const msgpack_object *k = &map->via.map.ptr[i].key;
    if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
        (n == 0 || !memcmp(k->via.str.ptr, key, n))) /* "" has a NULL pointer */
      return &map->via.map.ptr[i].val;
  }
  return NULL;
}

static gr_status need(const msgpack_object *map, const char *key, const msgpack_object **o,
                      gr_error *err) {
  *o = gr_msg_get(map, key);
  if (!*o) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "field '%s' is missing", key);
  return GR_OK;
}

const char *gr_msg_kind_name(const msgpack_object *o) {
  switch (o->type) {
    case MSGPACK_OBJECT_NIL:
      return "nil";
    case MSGPACK_OBJECT_BOOLEAN:
      return "a bool";
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
      return "an integer";
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
      return "a negative integer";
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
      return "a float";
    case MSGPACK_OBJECT_STR:
      return "a string";
    case MSGPACK_OBJECT_BIN:
      return "binary";
    case MSGPACK_OBJECT_ARRAY:
      return "an array";
    case MSGPACK_OBJECT_MAP:
      return "a map";
    default:
      return "an ext";
  }
}

static gr_status wrong(const char *what, const char *want, const msgpack_object *o, gr_error *err) {
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s must be %s, not %s", what, want,
                      gr_msg_kind_name(o));
}

gr_status gr_msg_u64(const msgpack_object *map, const char *key, uint64_t *out, gr_error *err) {
  const msgpack_object *o;
  GR_TRY(need(map, key, &o, err));
  if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
    char what[96];
    snprintf(what, sizeof what, "field '%s'", key);
    return wrong(what, "an unsigned integer", o, err);
  }
  *out = o->via.u64;
  return GR_OK;
}

gr_status gr_msg_item_i64(const msgpack_object *o, const char *what, int64_t lo, int64_t hi,
                          int64_t *out, gr_error *err) {
  int64_t v;
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
    if (o->via.u64 > (uint64_t)INT64_MAX)
      return gr_error_set(err, GR_ERR_OUT_OF_RANGE, "%s is out of range", what);
    v = (int64_t)o->via.u64;
  } else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
    v = o->via.i64;
  } else {
    return wrong(what, "an integer", o, err);
  }
  if (v < lo || v > hi)
    return gr_error_set(err, GR_ERR_OUT_OF_RANGE, "%s is %lld, not in [%lld, %lld]", what,
                        (long long)v, (long long)lo, (long long)hi);
  *out = v;
  return GR_OK;
}

gr_status gr_msg_i64(const msgpack_object *map, const char *key, int64_t lo, int64_t hi,
                     int64_t *out, gr_error *err) {
  const msgpack_object *o;
  GR_TRY(need(map, key, &o, err));
  char what[96];
  snprintf(what, sizeof what, "field '%s'", key);
  return gr_msg_item_i64(o, what, lo, hi, out, err);
}

gr_status gr_msg_bool(const msgpack_object *map, const char *key, bool *out, gr_error *err) {
  const msgpack_object *o;
  GR_TRY(need(map, key, &o, err));
  if (o->type != MSGPACK_OBJECT_BOOLEAN) {
    char what[96];
    snprintf(what, sizeof what, "field '%s'", key);
    return wrong(what, "a bool", o, err);
  }
  *out = o->via.boolean;
  return GR_OK;
}

gr_status gr_msg_item_str(const msgpack_object *o, const char *what, const char **s, size_t *len,
                          gr_error *err) {
  if (o->type != MSGPACK_OBJECT_STR) return wrong(what, "a string", o, err);
  if (o->via.str.size == 0) { /* msgpack-c gives "" a NULL pointer */
    *s = "";
    *len = 0;
    return GR_OK;
  }
  if (memchr(o->via.str.ptr, '\0', o->via.str.size))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s holds a NUL byte", what);
  *s = o->via.str.ptr;
  *len = o->via.str.size;
  return GR_OK;
}

gr_status gr_msg_strv(const msgpack_object *map, const char *key, const char **s, size_t *len,
                      gr_error *err) {
  const msgpack_object *o;
  GR_TRY(need(map, key, &o, err));
  char what[96];
  snprintf(what, sizeof what, "field '%s'", key);
  return gr_msg_item_str(o, what, s, len, err);
}

gr_status gr_msg_str(const msgpack_object *map, const char *key, char *buf, size_t cap,
                     gr_error *err) {
  const char *s = NULL;
  size_t n = 0;
  GR_TRY(gr_msg_strv(map, key, &s, &n, err));
  if (n >= cap)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "field '%s' is longer than %zu bytes", key,
                        cap - 1);
  memcpy(buf, s, n);
  buf[n] = '\0';
  return GR_OK;
}

void *gr_msg_zalloc(gr_msg *m, size_t n) {
  return m->has_zone ? msgpack_zone_malloc(&m->zone, n ? n : 1) : NULL;
}

const char *gr_msg_zdup(gr_msg *m, const char *p, size_t n) {
  char *s = n + 1 > n ? gr_msg_zalloc(m, n + 1) : NULL;
  if (!s) return NULL;
  if (n) memcpy(s, p, n);
  s[n] = '\0';
  return s;
}

gr_status gr_msg_strz(gr_msg *m, const msgpack_object *map, const char *key, size_t max,
                      const char **out, gr_error *err) {
  const char *s = NULL;
  size_t n = 0;
  GR_TRY(gr_msg_strv(map, key, &s, &n, err));
  if (n > max)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "field '%s' is longer than %zu bytes", key,
                        max);
  if (!(*out = gr_msg_zdup(m, s, n))) return gr_error_set_oom(err);
  return GR_OK;
}

gr_status gr_msg_bin(const msgpack_object *map, const char *key, size_t want, const void **out,
                     gr_error *err) {
  const msgpack_object *o;
  GR_TRY(need(map, key, &o, err));
  if (o->type != MSGPACK_OBJECT_BIN || o->via.bin.size != want)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "field '%s' must be %zu bytes of binary", key,
                        want);
  *out = o->via.bin.ptr;
  return GR_OK;
}

gr_status gr_msg_array(const msgpack_object *map, const char *key, uint32_t max,
                       const msgpack_object_array **out, gr_error *err) {
  const msgpack_object *o;
  GR_TRY(need(map, key, &o, err));
  if (o->type != MSGPACK_OBJECT_ARRAY) {
    char what[96];
    snprintf(what, sizeof what, "field '%s'", key);
    return wrong(what, "an array", o, err);
  }
  if (o->via.array.size > max)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "field '%s' has %u items (at most %u)", key,
                        o->via.array.size, max);
  *out = &o->via.array;
  return GR_OK;
}

gr_status gr_msg_tensor(const msgpack_object *o, gr_buffer *body, size_t body_len, gr_tensor *out,
                        bool *dead, gr_error *err) {
  return gr_msg_tensor_at(o, body, 0, body_len, out, dead, err);
}

gr_status gr_msg_tensor_desc(const msgpack_object *o, size_t body_len, gr_msg_tensor_info *t,
                             gr_error *err) {
  *t = (gr_msg_tensor_info){0};
  if (o->type == MSGPACK_OBJECT_NIL) {
    t->dead = true;
    return GR_OK;
  }
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 4)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "a tensor must be [dtype, dims, offset, bytes] or nil");
  const msgpack_object *f = o->via.array.ptr;
  const char *dn;
  size_t dl;
  GR_TRY(gr_msg_item_str(&f[0], "tensor dtype", &dn, &dl, err));
  char name[16];
  gr_dtype dt;
  if (dl >= sizeof name) dl = sizeof name - 1;
  memcpy(name, dn, dl);
  name[dl] = '\0';
  if (!gr_dtype_from_name(name, &dt))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "tensor dtype '%s' is unknown", name);
  if (f[1].type != MSGPACK_OBJECT_ARRAY || f[1].via.array.size > GR_MAX_RANK)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "tensor dims must be an array of at most %d",
                        GR_MAX_RANK);
  gr_shape shape = {.rank = (int)f[1].via.array.size};
  unsigned __int128 elems = 1;
  for (int d = 0; d < shape.rank; d++) {
    int64_t v;
    GR_TRY(gr_msg_item_i64(&f[1].via.array.ptr[d], "tensor dim", 0, INT64_MAX >> 1, &v, err));
    shape.dims[d] = v;
    elems *= (uint64_t)v;
    if (elems > ((unsigned __int128)1 << 62))
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "tensor dims are too large");
  }
  int64_t off, bytes;
  GR_TRY(gr_msg_item_i64(&f[2], "tensor offset", 0, (int64_t)body_len, &off, err));
  GR_TRY(gr_msg_item_i64(&f[3], "tensor bytes", 0, (int64_t)body_len, &bytes, err));
  char dims[GR_SHAPE_STR_MAX];
  if ((unsigned __int128)bytes != elems * gr_dtype_size(dt))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "tensor of %s %s needs %llu bytes, the message gives %lld", name,
                        gr_shape_str(&shape, dims), (unsigned long long)(elems * gr_dtype_size(dt)),
                        (long long)bytes);
  if (off % GR_WIRE_ALIGN || (uint64_t)off + (uint64_t)bytes > body_len)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "tensor bytes [%lld, %lld) are not an aligned range of the %zu-byte body",
                        (long long)off, (long long)(off + bytes), body_len);
  *t = (gr_msg_tensor_info){dt, shape, off, bytes, false};
  return GR_OK;
}

gr_status gr_msg_tensor_at(const msgpack_object *o, gr_buffer *body, size_t body_off,
                           size_t body_len, gr_tensor *out, bool *dead, gr_error *err) {
  *out = gr_tensor_empty();
  gr_msg_tensor_info t;
  GR_TRY(gr_msg_tensor_desc(o, body_len, &t, err));
  *dead = t.dead;
  if (t.dead) return GR_OK;
  gr_dtype dt = t.dtype;
  gr_shape shape = t.shape;
  int64_t off = t.offset, bytes = t.bytes;
  if (bytes == 0 || !body) /* no bytes to view (body_len bounds bytes) */
    return gr_tensor_alloc(out, dt, &shape, err);
  out->dtype = dt;
  out->shape = shape;
  out->buf = body;
  out->offset = body_off + (size_t)off;
  gr_buffer_retain(body);
  const uint8_t *at = (const uint8_t *)body->data + out->offset;
  if (dt == GR_BOOL) /* a bool is 0 or 1: other bytes would break kernels' assumptions */
    for (int64_t i = 0; i < bytes; i++)
      if (at[i] > 1) {
        gr_tensor_release(out);
        return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "bool tensor holds byte %u", at[i]);
      }
  return GR_OK;
}

/* ---- writing --------------------------------------------------------------- */

typedef struct piece {
  const void *p;
  size_t n, pad;
  gr_buffer *ref; /* released with the message */
  void *owned;    /* freed with the message */
} piece;

struct gr_outmsg {
  gr_msg_type type;
  msgpack_sbuffer sb; /* GR_WIRE_HEADER_SIZE reserved bytes, then the map */
  msgpack_packer pk;
  piece *pieces;
  int num_pieces, cap_pieces;
  size_t body_len;
  struct iovec *iov;
  bool failed; /* out of memory while building */
};

static const uint8_t zeros[GR_WIRE_ALIGN];

gr_outmsg *gr_outmsg_new(gr_msg_type type, uint32_t entries) {
  gr_outmsg *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->type = type;
  msgpack_sbuffer_init(&m->sb);
  msgpack_packer_init(&m->pk, &m->sb, msgpack_sbuffer_write);
  uint8_t reserve[GR_WIRE_HEADER_SIZE] = {0};
  if (msgpack_sbuffer_write(&m->sb, (const char *)reserve, sizeof reserve) != 0 ||
      msgpack_pack_map(&m->pk, entries) != 0) {
    gr_outmsg_free(m);
    return NULL;
  }
  return m;
}

void gr_outmsg_free(gr_outmsg *m) {
  if (!m) return;
  for (int i = 0; i < m->num_pieces; i++) {
    gr_buffer_release(m->pieces[i].ref);
    free(m->pieces[i].owned);
  }
  free(m->pieces);
  free(m->iov);
  msgpack_sbuffer_destroy(&m->sb);
  free(m);
}

msgpack_packer *gr_outmsg_packer(gr_outmsg *m) {
  return &m->pk;
}

void gr_pack_str(msgpack_packer *pk, const char *s) {
  size_t n = s ? strlen(s) : 0;
  msgpack_pack_str(pk, n);
  msgpack_pack_str_body(pk, s ? s : "", n);
}

void gr_outmsg_key(gr_outmsg *m, const char *key) {
  gr_pack_str(&m->pk, key);
}
void gr_outmsg_u64(gr_outmsg *m, const char *key, uint64_t v) {
  gr_outmsg_key(m, key);
  msgpack_pack_uint64(&m->pk, v);
}
void gr_outmsg_i64(gr_outmsg *m, const char *key, int64_t v) {
  gr_outmsg_key(m, key);
  msgpack_pack_int64(&m->pk, v);
}
void gr_outmsg_bool(gr_outmsg *m, const char *key, bool v) {
  gr_outmsg_key(m, key);
  if (v)
    msgpack_pack_true(&m->pk);
  else
    msgpack_pack_false(&m->pk);
}
void gr_outmsg_str(gr_outmsg *m, const char *key, const char *s) {
  gr_outmsg_key(m, key);
  gr_pack_str(&m->pk, s);
}
void gr_outmsg_bin(gr_outmsg *m, const char *key, const void *p, size_t n) {
  gr_outmsg_key(m, key);
  msgpack_pack_bin(&m->pk, n);
  msgpack_pack_bin_body(&m->pk, p, n);
}

static piece *add_piece(gr_outmsg *m) {
  if (m->num_pieces == m->cap_pieces) {
    int cap = m->cap_pieces ? 2 * m->cap_pieces : 4;
    piece *more = gr_realloc_array(m->pieces, (size_t)cap, sizeof *more);
    if (!more) return NULL;
    m->pieces = more;
    m->cap_pieces = cap;
  }
  piece *p = &m->pieces[m->num_pieces++];
  *p = (piece){0};
  return p;
}

/* Each piece starts aligned: the one before is padded when this one comes,
 * so the body ends with the last piece's bytes (a lone tensor's body is
 * exactly its bytes, which a receiver can read straight into a buffer of
 * that size: gr_conn_handler.body_into). */
size_t gr_outmsg_add_body(gr_outmsg *m, const void *p, size_t n, void *owned) {
  size_t pad = (GR_WIRE_ALIGN - m->body_len % GR_WIRE_ALIGN) % GR_WIRE_ALIGN;
  piece *pc = add_piece(m);
  if (!pc) {
    free(owned);
    m->failed = true;
    return m->body_len;
  }
  if (m->num_pieces > 1) { /* body_len is only unaligned after a piece */
    m->pieces[m->num_pieces - 2].pad = pad;
    m->body_len += pad;
  }
  size_t off = m->body_len;
  pc->p = p;
  pc->n = n;
  pc->owned = owned;
  m->body_len += n;
  return off;
}

gr_status gr_outmsg_pack_tensor(gr_outmsg *m, const gr_tensor *t, bool dead, gr_error *err) {
  msgpack_packer *pk = &m->pk;
  if (dead || !t) {
    msgpack_pack_nil(pk);
    return GR_OK;
  }
  size_t bytes = gr_tensor_num_bytes(t);
  size_t off = m->body_len;
  if (bytes > 0) {
    off = gr_outmsg_add_body(m, gr_tensor_data(t), bytes, NULL);
    if (m->failed) return gr_error_set_oom(err);
    gr_buffer_retain(t->buf);
    m->pieces[m->num_pieces - 1].ref = t->buf;
  }
  msgpack_pack_array(pk, 4);
  gr_pack_str(pk, gr_dtype_name(t->dtype));
  msgpack_pack_array(pk, (size_t)t->shape.rank);
  for (int d = 0; d < t->shape.rank; d++) msgpack_pack_int64(pk, t->shape.dims[d]);
  msgpack_pack_uint64(pk, off);
  msgpack_pack_uint64(pk, bytes);
  return GR_OK;
}

gr_status gr_outmsg_finish(gr_outmsg *m, struct iovec **iov, int *n, size_t *total, gr_error *err) {
  size_t hlen = m->sb.size - GR_WIRE_HEADER_SIZE;
  if (m->failed || !m->sb.data)
    return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory building a message");
  if (hlen > types[m->type].header_max || m->body_len > types[m->type].body_max)
    return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED,
                        "%s message of %zu + %zu bytes is over the wire's limits (%u + %u)",
                        types[m->type].name, hlen, m->body_len, types[m->type].header_max,
                        types[m->type].body_max);
  gr_frame_header h = {.version = GR_WIRE_VERSION,
                       .type = (uint8_t)m->type,
                       .header_len = (uint32_t)hlen,
                       .body_len = (uint32_t)m->body_len};
  gr_wire_put_frame_header((uint8_t *)m->sb.data, &h);
  free(m->iov);
  m->iov = gr_alloc_array((size_t)(1 + 2 * m->num_pieces), sizeof *m->iov);
  if (!m->iov) return gr_error_set_oom(err);
  int k = 0;
  m->iov[k++] = (struct iovec){m->sb.data, m->sb.size};
  for (int i = 0; i < m->num_pieces; i++) {
    if (m->pieces[i].n) m->iov[k++] = (struct iovec){(void *)m->pieces[i].p, m->pieces[i].n};
    if (m->pieces[i].pad) m->iov[k++] = (struct iovec){(void *)zeros, m->pieces[i].pad};
  }
  *iov = m->iov;
  *n = k;
  *total = m->sb.size + m->body_len;
  return GR_OK;
}

int64_t gr_wire_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The wire: frames between tasks and between a master and its tasks
 * (docs/distributed.md, "Wire format").
 *
 * A frame is a fixed 16-byte header, a msgpack map (the message: ids, keys,
 * dtypes, shapes, status), then a raw body (tensor bytes, serialized
 * graphs). Header, little-endian:
 *
 *   0  magic "GRWF"    4 bytes
 *   4  version         u8  (GR_WIRE_VERSION)
 *   5  type            u8  (gr_msg_type)
 *   6  flags           u16 (0; reserved)
 *   8  header length   u32 (bytes of the msgpack map)
 *   12 body length     u32
 *
 * Every length is checked against the type's maximum before anything is
 * allocated (gr_wire_parse_frame_header), the map's counts against its bytes
 * before msgpack-c unpacks it (gr_msg_parse), and every field's type and
 * range when it is read (gr_msg_u64 ...). Tensors in a body start at
 * 64-byte offsets, so a received tensor is a view of the body's buffer.
 *
 * Each kind of message is packed and read by its own file with these
 * building blocks (msg_internal.h: msg_run.c, msg_tensor.c, ...):
 *
 *   gr_outmsg *m = gr_outmsg_new(GR_MSG_TENSOR, 6);       // a map of 6 entries
 *   gr_outmsg_str(m, "key", key); ...
 *   gr_outmsg_key(m, "value");
 *   gr_outmsg_pack_tensor(m, &t, false, &err);              // by reference
 *   gr_conn_send(conn, m, &err);                            // takes m
 *
 * Internal to distributed/. */
#ifndef GR_WIRE_INTERNAL_H
#define GR_WIRE_INTERNAL_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core/gr_core.h"

#define GR_WIRE_VERSION                                                                            \
  5 /* 2: REGISTER and VARS name a container; RESET. 3: the                                        \
       handshake names the cluster, every client sends AUTH. 4: the                                \
       handshake's mode: TLS or per-frame MACs across hosts. 5: a                                  \
       multi-step RUN (steps) and its error's failed_at */
#define GR_WIRE_HEADER_SIZE 16
#define GR_WIRE_ALIGN       64
#define GR_WIRE_MAX_TENSORS 4096 /* tensors in one message */

/* X(enum, name, max header bytes, max body bytes) */
#define GR_MSG_LIST(X)                                                                             \
  X(GR_MSG_HELLO, "hello", 240, 0)                     /* server -> peer at accept */              \
  X(GR_MSG_AUTH, "auth", 240, 0)                       /* peer -> server: cluster, nonce, mac */   \
  X(GR_MSG_AUTH_OK, "auth_ok", 240, 0)                 /* server -> peer: mac */                   \
  X(GR_MSG_GET_STATUS, "get_status", 256, 0)           /* -> task, devices, incarnation */         \
  X(GR_MSG_REGISTER, "register", 1 << 24, 0x7fffffff)  /* partitions -> handle */                  \
  X(GR_MSG_RUN, "run", 1 << 24, 0xffffffffu)           /* feeds -> fetches */                      \
  X(GR_MSG_ABORT, "abort", 4096, 0)                    /* a step, one way */                       \
  X(GR_MSG_VARS, "vars", 1 << 24, 0)                   /* which variables have values */           \
  X(GR_MSG_DEREGISTER, "deregister", 256, 0)           /* a handle */                              \
  X(GR_MSG_TENSOR, "tensor", 65536, 0xffffffffu)       /* a pushed tensor, one way */              \
  X(GR_MSG_RESPONSE, "response", 1 << 24, 0xffffffffu) /* to any request, by id */                 \
  X(GR_MSG_HEARTBEAT, "heartbeat", 64, 0)              /* peer -> server: answered at once */      \
  X(GR_MSG_LEASE, "lease", 1024, 0)                    /* take or look at a named lease */         \
  X(GR_MSG_RESET, "reset", 256, 0)                     /* drop shared containers */

typedef enum gr_msg_type {
  GR_MSG_NONE = 0,
#define GR_X_MSG_ENUM(e, s, h, b) e,
  GR_MSG_LIST(GR_X_MSG_ENUM)
#undef GR_X_MSG_ENUM
      GR_MSG_COUNT
} gr_msg_type;

const char *gr_msg_type_name(int type); /* "tensor"; "unknown" out of range */
/* The type's limits (GR_MSG_LIST): bytes of its map and of its body; 0, 0
 * out of range. */
void gr_msg_type_limits(int type, uint32_t *header_max, uint32_t *body_max);

typedef struct gr_frame_header {
  uint8_t version, type;
  uint16_t flags;
  uint32_t header_len, body_len;
} gr_frame_header;

void gr_wire_put_frame_header(uint8_t out[GR_WIRE_HEADER_SIZE], const gr_frame_header *h);
/* Checks magic, version, a known type, flags 0 and both lengths against the
 * type's maximum (body_max caps the body further: the receiver's limit). */
gr_status gr_wire_parse_frame_header(const uint8_t in[GR_WIRE_HEADER_SIZE], size_t body_max,
                                     gr_frame_header *h, gr_error *err);

/* ---- reading a message's map --------------------------------------------- */

typedef struct gr_msg {
  msgpack_zone zone;
  msgpack_object root; /* a map */
  bool has_zone;
} gr_msg;

/* Checks the bytes (gr_wire_check_msgpack, depth 6) and unpacks a map. On
 * failure nothing is left to free; on success gr_msg_free. */
gr_status gr_msg_parse(gr_msg *m, const void *data, size_t len, gr_error *err);
void gr_msg_free(gr_msg *m);

/* What a msgpack object is, for messages: "an integer", "a string", ... */
const char *gr_msg_kind_name(const msgpack_object *o);
/* The value under key in a map object; NULL when absent. */
const msgpack_object *gr_msg_get(const msgpack_object *map, const char *key);
/* Required fields of a map, type-checked; errors name the key. */
gr_status gr_msg_u64(const msgpack_object *map, const char *key, uint64_t *out, gr_error *err);
gr_status gr_msg_i64(const msgpack_object *map, const char *key, int64_t lo, int64_t hi,
                     int64_t *out, gr_error *err);
gr_status gr_msg_bool(const msgpack_object *map, const char *key, bool *out, gr_error *err);
/* A string of at most max bytes without NUL, copied into buf (cap > max). */
gr_status gr_msg_str(const msgpack_object *map, const char *key, char *buf, size_t cap,
                     gr_error *err);
/* A string as a pointer into the message (not NUL-terminated) and length. */
gr_status gr_msg_strv(const msgpack_object *map, const char *key, const char **s, size_t *len,
                      gr_error *err);
/* A string of at most max bytes without NUL, as a NUL-terminated copy in
 * m's zone (freed with m). */
gr_status gr_msg_strz(gr_msg *m, const msgpack_object *map, const char *key, size_t max,
                      const char **out, gr_error *err);
/* n bytes of m's zone (freed with m; n 0: a valid pointer), NULL when out of
 * memory; gr_msg_zdup: a NUL-terminated copy of p[0, n). */
void *gr_msg_zalloc(gr_msg *m, size_t n);
const char *gr_msg_zdup(gr_msg *m, const char *p, size_t n);
gr_status gr_msg_bin(const msgpack_object *map, const char *key, size_t want, const void **out,
                     gr_error *err);
/* An array of at most max items. */
gr_status gr_msg_array(const msgpack_object *map, const char *key, uint32_t max,
                       const msgpack_object_array **out, gr_error *err);
/* An array item checked to be an int in [lo, hi]. */
gr_status gr_msg_item_i64(const msgpack_object *o, const char *what, int64_t lo, int64_t hi,
                          int64_t *out, gr_error *err);
/* An array item checked to be a string (pointer into the message, length). */
gr_status gr_msg_item_str(const msgpack_object *o, const char *what, const char **s, size_t *len,
                          gr_error *err);

/* A tensor described in a map as [dtype, [dims], offset, bytes] (dead: nil)
 * whose bytes are body[offset, offset + bytes). Checks the dtype, rank,
 * dims, bytes = elements * size (no overflow), offset alignment and that
 * the bytes lie in the body. *out: a view of body (one new reference), or
 * empty with *dead set. */
gr_status gr_msg_tensor(const msgpack_object *o, gr_buffer *body, size_t body_len, gr_tensor *out,
                        bool *dead, gr_error *err);
/* What gr_msg_tensor checks, without viewing the bytes: the descriptor
 * of a tensor in a body of body_len bytes (dead: nil, the rest zero). */
typedef struct gr_msg_tensor_info {
  gr_dtype dtype;
  gr_shape shape;
  int64_t offset, bytes;
  bool dead;
} gr_msg_tensor_info;
gr_status gr_msg_tensor_desc(const msgpack_object *o, size_t body_len, gr_msg_tensor_info *t,
                             gr_error *err);
/* The same over a body that starts body_off bytes into body's data (a
 * body read into another buffer: gr_conn_handler.body_into). */
gr_status gr_msg_tensor_at(const msgpack_object *o, gr_buffer *body, size_t body_off,
                           size_t body_len, gr_tensor *out, bool *dead, gr_error *err);

/* ---- writing a message ---------------------------------------------------- */

typedef struct gr_outmsg gr_outmsg;

/* A message of the type whose map will hold `entries` keys (each added with
 * one of the calls below). NULL when out of memory. */
gr_outmsg *gr_outmsg_new(gr_msg_type type, uint32_t entries);
void gr_outmsg_free(gr_outmsg *m);
msgpack_packer *gr_outmsg_packer(gr_outmsg *m); /* for nested values */
void gr_outmsg_key(gr_outmsg *m, const char *key);
void gr_outmsg_u64(gr_outmsg *m, const char *key, uint64_t v);
void gr_outmsg_i64(gr_outmsg *m, const char *key, int64_t v);
void gr_outmsg_bool(gr_outmsg *m, const char *key, bool v);
void gr_outmsg_str(gr_outmsg *m, const char *key, const char *s);
void gr_outmsg_bin(gr_outmsg *m, const char *key, const void *p, size_t n);
void gr_pack_str(msgpack_packer *pk, const char *s);
/* Packs [dtype, [dims], offset, bytes] (nil when dead) and appends the
 * tensor's bytes to the body by reference (no copy; the buffer is retained
 * until the message is written or freed). */
gr_status gr_outmsg_pack_tensor(gr_outmsg *m, const gr_tensor *t, bool dead, gr_error *err);
/* Appends bytes to the body by reference: owned is freed (free()) with the
 * message; NULL: the caller keeps p alive until then. Returns the offset. */
size_t gr_outmsg_add_body(gr_outmsg *m, const void *p, size_t n, void *owned);

/* Finishes the frame: *iov points at up to *n iovecs (header + map, then
 * body pieces and padding) valid until gr_outmsg_free. Fails when the
 * message exceeds its type's limits (an engine bug or a too large tensor). */
gr_status gr_outmsg_finish(gr_outmsg *m, struct iovec **iov, int *n, size_t *total, gr_error *err);

/* Milliseconds of a monotonic clock (deadlines). */
int64_t gr_wire_now_ms(void);

/* ---- authentication (auth.c) ---------------------------------------------- */

#define GR_AUTH_NONCE 32
#define GR_AUTH_MAC   32
/* A connection's protection after the handshake (docs/security.md), the
 * `mode` of HELLO (what the server requires) and AUTH (what both use),
 * covered by both MACs: 0 plaintext (loopback), or one of */
#define GR_AUTH_MODE_TLS  1 /* TLS, started right after HELLO */
#define GR_AUTH_MODE_MACS 2 /* every frame after AUTH_OK carries a MAC (frame_mac_internal.h) */

/* Random bytes from the crypto library (never a plain PRNG). */
gr_status gr_auth_random(void *out, size_t n, gr_error *err);
/* HMAC-SHA256(secret, role (16 bytes, zero-padded) || a || b || the length
 * and bytes of the server's cluster id || of the client's || mode (one
 * byte)): a MAC over the nonces, both ids (NULL: "") and the connection's
 * mode, so that none can be swapped or downgraded. */
void gr_auth_mac(const char *secret, const char *role, const uint8_t a[GR_AUTH_NONCE],
                 const uint8_t b[GR_AUTH_NONCE], const char *server_cluster,
                 const char *client_cluster, uint8_t mode, uint8_t out[GR_AUTH_MAC]);
/* The per-frame keys of a connection (frame_mac_internal.h): HKDF-SHA256
 * with the secret as the input key, the server's then the client's nonce
 * as the salt, and "graphrun frame keys v1" with both cluster ids
 * (length-prefixed) as the info; the client-to-server key, then the
 * server-to-client one. */
#define GR_AUTH_FRAME_KEYS 64
gr_status gr_auth_frame_keys(const char *secret, const uint8_t server_nonce[GR_AUTH_NONCE],
                             const uint8_t client_nonce[GR_AUTH_NONCE], const char *server_cluster,
                             const char *client_cluster, uint8_t out[GR_AUTH_FRAME_KEYS],
                             gr_error *err);
/* Constant-time comparison of two MACs. */
bool gr_auth_equal(const uint8_t a[GR_AUTH_MAC], const uint8_t b[GR_AUTH_MAC]);

#endif

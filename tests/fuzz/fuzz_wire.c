/* libFuzzer harness for the wire (distributed/wire_internal.h) and the
 * serialized-graph decoder together, on arbitrary bytes taken as one frame:
 * the 16-byte header (gr_wire_parse_frame_header), the msgpack map
 * (gr_msg_parse: the count walk, then msgpack-c), every typed field reader
 * on the keys messages use, every array and nil in the map as a tensor
 * descriptor over the body (gr_msg_tensor), the handshake's checks on a
 * HELLO, AUTH or AUTH_OK (handshake_internal.h), and for a REGISTER frame
 * the serialized graphs of its body (gr_wire_decode_graph, also on input that is
 * not a frame but a graph). A tensor that decodes must survive a round trip
 * through a frame of its own (gr_outmsg_pack_tensor, gr_outmsg_finish and
 * back) with the same dtype, shape and bytes.
 *
 * Built and run by `make fuzz-wire` (tests/fuzz/run_fuzz.sh); seed corpus:
 * valid frames of every kind written by tests/fuzz/gen_wire_seeds.c. */
#include <stdlib.h>
#include <string.h>

#include "distributed/gr_distributed.h"
#include "distributed/handshake_internal.h"
#include "distributed/server_internal.h"
#include "distributed/wire_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void graph(const void *p, size_t n) {
  gr_graph *g = gr_graph_new();
  if (!g) return;
  gr_graph_names names;
  gr_error err;
  if (gr_wire_decode_graph(p, n, g, &names, &err) == GR_OK) gr_graph_names_free(&names);
  gr_graph_free(g);
}

/* t, written in a frame of its own and read back, is the same tensor. */
static void roundtrip(const gr_tensor *t) {
  gr_error err;
  gr_outmsg *m = gr_outmsg_new(GR_MSG_TENSOR, 1);
  if (!m) return;
  gr_outmsg_key(m, "value");
  struct iovec *iov;
  int n;
  size_t total;
  if (gr_outmsg_pack_tensor(m, t, false, &err) != GR_OK ||
      gr_outmsg_finish(m, &iov, &n, &total, &err) != GR_OK)
    abort(); /* a tensor that fits in a fuzz input fits in a frame */
  uint8_t *frame = malloc(total);
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    memcpy(frame + at, iov[i].iov_base, iov[i].iov_len);
    at += iov[i].iov_len;
  }
  gr_outmsg_free(m);
  gr_frame_header h;
  gr_msg msg;
  if (at != total || gr_wire_parse_frame_header(frame, (size_t)-1, &h, &err) != GR_OK ||
      GR_WIRE_HEADER_SIZE + (size_t)h.header_len + h.body_len != total ||
      gr_msg_parse(&msg, frame + GR_WIRE_HEADER_SIZE, h.header_len, &err) != GR_OK)
    abort();
  gr_buffer *body = h.body_len ? gr_buffer_alloc(h.body_len) : NULL;
  if (body) memcpy(body->data, frame + GR_WIRE_HEADER_SIZE + h.header_len, h.body_len);
  const msgpack_object *o = gr_msg_get(&msg.root, "value");
  gr_tensor back;
  bool dead;
  if (!o || gr_msg_tensor(o, body, h.body_len, &back, &dead, &err) != GR_OK || dead) abort();
  size_t bytes = gr_tensor_num_bytes(t);
  if (back.dtype != t->dtype || back.shape.rank != t->shape.rank ||
      gr_tensor_num_bytes(&back) != bytes ||
      (bytes && memcmp(gr_tensor_data(&back), gr_tensor_data(t), bytes) != 0))
    abort();
  for (int d = 0; d < t->shape.rank; d++)
    if (back.shape.dims[d] != t->shape.dims[d]) abort();
  gr_tensor_release(&back);
  gr_buffer_release(body);
  gr_msg_free(&msg);
  free(frame);
}

/* Every array and nil under o taken as a tensor descriptor over the body. */
static void tensors_in(const msgpack_object *o, gr_buffer *body, size_t body_len, int depth) {
  if (depth > 8) return;
  if (o->type == MSGPACK_OBJECT_NIL || o->type == MSGPACK_OBJECT_ARRAY) {
    gr_tensor t;
    bool dead;
    gr_error err;
    if (gr_msg_tensor(o, body, body_len, &t, &dead, &err) == GR_OK) {
      if (!dead) roundtrip(&t);
      gr_tensor_release(&t);
    }
  }
  if (o->type == MSGPACK_OBJECT_ARRAY)
    for (uint32_t i = 0; i < o->via.array.size; i++)
      tensors_in(&o->via.array.ptr[i], body, body_len, depth + 1);
  if (o->type == MSGPACK_OBJECT_MAP)
    for (uint32_t i = 0; i < o->via.map.size; i++)
      tensors_in(&o->via.map.ptr[i].val, body, body_len, depth + 1);
}

/* The typed readers on the keys the messages use. */
static void fields(const msgpack_object *root) {
  static const char *const keys[] = {
      "id",    "run",   "handle",  "inc",       "step",    "seed",    "code",
      "key",   "from",  "msg",     "task",      "dead",    "auth",    "nonce",
      "mac",   "feeds", "fetches", "parts",     "peers",   "names",   "devices",
      "value", "sends", "bytes",   "container", "private", "dropped", "cluster"};
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
    uint64_t u;
    int64_t i;
    bool b;
    char s[256];
    const char *sv;
    size_t sl;
    const void *bin;
    const msgpack_object_array *arr;
    gr_error err;
    gr_msg_u64(root, keys[k], &u, &err);
    gr_msg_i64(root, keys[k], -5, 1 << 20, &i, &err);
    gr_msg_bool(root, keys[k], &b, &err);
    gr_msg_str(root, keys[k], s, sizeof s, &err);
    if (gr_msg_strv(root, keys[k], &sv, &sl, &err) == GR_OK) gr_container_name_ok(sv, sl, false);
    gr_msg_bin(root, keys[k], GR_AUTH_NONCE, &bin, &err);
    if (gr_msg_array(root, keys[k], 1 << 20, &arr, &err) == GR_OK)
      for (uint32_t j = 0; j < arr->size; j++) {
        gr_msg_item_i64(&arr->ptr[j], "item", 0, 1 << 20, &i, &err);
        gr_msg_item_str(&arr->ptr[j], "item", &sv, &sl, &err);
        gr_msg_kind_name(&arr->ptr[j]);
      }
  }
}

/* A REGISTER's partitions: [device, offset, bytes, feeds, fetches], each a
 * serialized graph in the body. */
static void parts(const msgpack_object *root, const gr_buffer *body, size_t body_len) {
  const msgpack_object_array *ps;
  gr_error err;
  if (gr_msg_array(root, "parts", 64, &ps, &err) != GR_OK) return;
  for (uint32_t k = 0; k < ps->size; k++) {
    const msgpack_object *o = &ps->ptr[k];
    int64_t off, len;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 5 ||
        gr_msg_item_i64(&o->via.array.ptr[1], "offset", 0, (int64_t)body_len, &off, &err) !=
            GR_OK ||
        gr_msg_item_i64(&o->via.array.ptr[2], "bytes", 0, (int64_t)body_len - off, &len, &err) !=
            GR_OK)
      continue;
    graph(body ? (const char *)body->data + off : "", (size_t)len);
  }
}

/* A handshake message, checked as its receiver checks it (with a secret
 * and without); an AUTH may only pass with a MAC of the secret. */
static void handshake(int type, const gr_msg *m) {
  static const uint8_t nonce[GR_AUTH_NONCE] = {1, 2, 3};
  gr_error err;
  gr_outmsg *out = NULL;
  gr_hs_result res;
  for (int secure = 0; secure < 2; secure++) {
    const char *secret = secure ? "fuzz-secret-of-16+" : NULL;
    gr_hs_client hs = {
        .secret = secret, .cluster = "seed-cluster", .address = "fuzz:1", .auth = secure};
    if (type == GR_MSG_HELLO && gr_hs_client_answer(&hs, m, &out, &err) == GR_OK)
      gr_outmsg_free(out);
    if (type == GR_MSG_AUTH_OK && secure && gr_hs_client_check(&hs, m, &err) == GR_OK)
      abort(); /* a MAC of the secret, guessed */
    if (type == GR_MSG_AUTH &&
        gr_hs_server_check(secret, "seed-cluster", 0, nonce, m, &out, &res, &err) == GR_OK) {
      gr_outmsg_free(out);
      if (secure) abort(); /* a MAC of the secret, guessed */
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 16) return 0;
  gr_frame_header h;
  gr_error err;
  if (size < GR_WIRE_HEADER_SIZE ||
      gr_wire_parse_frame_header(data, (size_t)1 << 16, &h, &err) != GR_OK) {
    if (gr_wire_is_graph(data, size)) graph(data, size);
    return 0;
  }
  size_t rest = size - GR_WIRE_HEADER_SIZE;
  if (h.header_len > rest) return 0; /* cut short: the transport waits for more */
  gr_msg m;
  if (gr_msg_parse(&m, data + GR_WIRE_HEADER_SIZE, h.header_len, &err) != GR_OK) return 0;
  gr_msg_kind_name(&m.root);
  size_t body_len = rest - h.header_len;
  if (body_len > h.body_len) body_len = h.body_len;
  gr_buffer *body = body_len ? gr_buffer_alloc(body_len) : NULL;
  if (body) memcpy(body->data, data + GR_WIRE_HEADER_SIZE + h.header_len, body_len);
  if (body_len && !body) {
    gr_msg_free(&m);
    return 0;
  }
  fields(&m.root);
  handshake(h.type, &m);
  tensors_in(&m.root, body, body_len, 0);
  if (h.type == GR_MSG_REGISTER) {
    parts(&m.root, body, body_len);
    if (body) graph(body->data, body_len);
  }
  gr_msg_free(&m);
  gr_buffer_release(body);
  return 0;
}

/* Writes the seed corpus of fuzz_wire.c: valid frames of each kind, built
 * with the wire's own builder (gr_outmsg) so the seeds follow the format
 * when it changes, plus one bare serialized graph.
 *
 *   gen_wire_seeds DIR        writes DIR/NN-KIND.bin
 *
 * Built and run by tests/fuzz/run_fuzz.sh for `make fuzz-wire`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/gr_distributed.h"
#include "distributed/handshake_internal.h"
#include "distributed/wire_internal.h"
#include "ops/gr_ops.h"

static const char *dir;
static int count;

static void write_file(const char *kind, const void *p, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%02d-%s.bin", dir, count++, kind);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "gen_wire_seeds: cannot write %s\n", path);
    exit(1);
  }
}

/* Finishes m and writes its frame's bytes. */
static void emit(const char *kind, gr_outmsg *m) {
  struct iovec *iov;
  int n;
  size_t total;
  gr_error err;
  if (gr_outmsg_finish(m, &iov, &n, &total, &err) != GR_OK) {
    fprintf(stderr, "gen_wire_seeds: %s: %s\n", kind, err.msg);
    exit(1);
  }
  char *buf = malloc(total), *at = buf;
  for (int i = 0; i < n; i++) {
    memcpy(at, iov[i].iov_base, iov[i].iov_len);
    at += iov[i].iov_len;
  }
  write_file(kind, buf, total);
  free(buf);
  gr_outmsg_free(m);
}

static gr_tensor tensor(gr_dtype dt, int rank, const int64_t *dims, const void *values) {
  gr_tensor t;
  gr_shape s = gr_shape_make(rank, dims);
  gr_error err;
  if (gr_tensor_from_data(&t, dt, &s, values, &err) != GR_OK) exit(1);
  return t;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: gen_wire_seeds DIR\n");
    return 2;
  }
  dir = argv[1];
  gr_error err;
  const char *task = "/job:worker/replica:0/task:0",
             *dev = "/job:worker/replica:0/task:0/device:CPU:0";
  uint8_t nonce[GR_AUTH_NONCE] = {1, 2, 3};

  /* the handshake, with a secret and without (handshake_internal.h) */
  uint8_t hello_nonce[GR_AUTH_NONCE];
  gr_outmsg *m = gr_hello_new("seed-secret-of-16+", "seed-cluster", 0, hello_nonce, &err);
  emit("hello", m);
  emit("hello_insecure", gr_hello_new(NULL, "seed-cluster", 0, hello_nonce, &err));

  m = gr_outmsg_new(GR_MSG_AUTH, 3);
  gr_outmsg_str(m, "cluster", "seed-cluster");
  gr_outmsg_bin(m, "nonce", nonce, sizeof nonce);
  gr_outmsg_bin(m, "mac", nonce, sizeof nonce);
  emit("auth", m);
  m = gr_outmsg_new(GR_MSG_AUTH, 1);
  gr_outmsg_str(m, "cluster", "seed-cluster");
  emit("auth_insecure", m);
  m = gr_outmsg_new(GR_MSG_AUTH_OK, 1);
  gr_outmsg_bin(m, "mac", nonce, sizeof nonce);
  emit("auth_ok", m);

  m = gr_outmsg_new(GR_MSG_GET_STATUS, 1);
  gr_outmsg_u64(m, "id", 1);
  emit("get_status", m);

  m = gr_outmsg_new(GR_MSG_RESPONSE, 5);
  gr_outmsg_u64(m, "id", 1);
  gr_outmsg_u64(m, "code", 0);
  gr_outmsg_str(m, "task", task);
  gr_outmsg_u64(m, "inc", 0x1234567890abcdefull);
  gr_outmsg_key(m, "devices");
  msgpack_pack_array(gr_outmsg_packer(m), 1);
  gr_pack_str(gr_outmsg_packer(m), dev);
  emit("status_response", m);

  /* RUN with two feeds: float32 [3] and int32 [2, 2] */
  gr_tensor x = tensor(GR_F32, 1, (int64_t[]){3}, (float[]){1, 2, 3});
  gr_tensor y = tensor(GR_I32, 2, (int64_t[]){2, 2}, (int32_t[]){1, -2, 3, -4});
  m = gr_outmsg_new(GR_MSG_RUN, 7);
  gr_outmsg_u64(m, "id", 2);
  gr_outmsg_u64(m, "handle", 1);
  gr_outmsg_u64(m, "inc", 0x1234567890abcdefull);
  gr_outmsg_u64(m, "step", 3);
  gr_outmsg_u64(m, "run", 0xfeedull);
  gr_outmsg_u64(m, "seed", 7);
  gr_outmsg_key(m, "feeds");
  msgpack_pack_array(gr_outmsg_packer(m), 2);
  msgpack_pack_array(gr_outmsg_packer(m), 2);
  msgpack_pack_int(gr_outmsg_packer(m), 0);
  gr_outmsg_pack_tensor(m, &x, false, &err);
  msgpack_pack_array(gr_outmsg_packer(m), 2);
  msgpack_pack_int(gr_outmsg_packer(m), 1);
  gr_outmsg_pack_tensor(m, &y, false, &err);
  emit("run", m);

  /* a RUN response: fetches (a bool, a dead one) and transfer counts */
  gr_tensor b = tensor(GR_BOOL, 1, (int64_t[]){3}, (bool[]){true, false, true});
  m = gr_outmsg_new(GR_MSG_RESPONSE, 5);
  gr_outmsg_u64(m, "id", 2);
  gr_outmsg_u64(m, "code", 0);
  gr_outmsg_key(m, "fetches");
  msgpack_pack_array(gr_outmsg_packer(m), 2);
  msgpack_pack_array(gr_outmsg_packer(m), 2);
  msgpack_pack_int(gr_outmsg_packer(m), 0);
  gr_outmsg_pack_tensor(m, &b, false, &err);
  msgpack_pack_array(gr_outmsg_packer(m), 2);
  msgpack_pack_int(gr_outmsg_packer(m), 1);
  gr_outmsg_pack_tensor(m, &x, true, &err);
  gr_outmsg_i64(m, "sends", 2);
  gr_outmsg_i64(m, "bytes", 16);
  emit("run_response", m);

  m = gr_outmsg_new(GR_MSG_RESPONSE, 3);
  gr_outmsg_u64(m, "id", 3);
  gr_outmsg_u64(m, "code", 3);
  gr_outmsg_str(m, "msg", "/job:worker/replica:0/task:0: something failed");
  emit("error_response", m);

  /* a pushed tensor: a float64 scalar */
  gr_tensor s = tensor(GR_F64, 0, NULL, (double[]){2.5});
  m = gr_outmsg_new(GR_MSG_TENSOR, 6);
  gr_outmsg_u64(m, "run", 0xfeedull);
  gr_outmsg_str(m, "key",
                "/job:worker/replica:0/task:1/device:CPU:0;0123456789abcdef;"
                "/job:worker/replica:0/task:0/device:CPU:0;a:0;:0");
  gr_outmsg_str(m, "from", "/job:worker/replica:0/task:1");
  gr_outmsg_u64(m, "inc", 0x1111ull);
  gr_outmsg_bool(m, "dead", false);
  gr_outmsg_key(m, "value");
  gr_outmsg_pack_tensor(m, &s, false, &err);
  emit("tensor", m);

  m = gr_outmsg_new(GR_MSG_ABORT, 3);
  gr_outmsg_u64(m, "run", 0xfeedull);
  gr_outmsg_u64(m, "code", 1);
  gr_outmsg_str(m, "msg", "step aborted");
  emit("abort", m);

  m = gr_outmsg_new(GR_MSG_VARS, 4);
  gr_outmsg_u64(m, "id", 4);
  gr_outmsg_key(m, "names");
  msgpack_pack_array(gr_outmsg_packer(m), 2);
  gr_pack_str(gr_outmsg_packer(m), "w");
  gr_pack_str(gr_outmsg_packer(m), "dense/b");
  gr_outmsg_str(m, "container", "_run.0123456789abcdef");
  gr_outmsg_bool(m, "private", true);
  emit("vars", m);

  m = gr_outmsg_new(GR_MSG_RESET, 2);
  gr_outmsg_u64(m, "id", 7);
  gr_outmsg_str(m, "container", "shared");
  emit("reset", m);

  m = gr_outmsg_new(GR_MSG_DEREGISTER, 2);
  gr_outmsg_u64(m, "id", 5);
  gr_outmsg_u64(m, "handle", 1);
  emit("deregister", m);

  m = gr_outmsg_new(GR_MSG_LEASE, 4);
  gr_outmsg_u64(m, "id", 7);
  gr_outmsg_str(m, "name", "chief");
  gr_outmsg_bool(m, "take", true);
  gr_outmsg_str(m, "holder", "/job:chief/task:0, pid 4242 on node1");
  emit("lease", m);

  /* REGISTER: one partition, x (fed) * x + 1, its graph in the body */
  gr_graph *g = gr_graph_new();
  gr_output px = gr_placeholder(g, "x", GR_F32, gr_shape_make(1, (int64_t[]){3}));
  gr_output py = gr_add(g, gr_mul(g, px, px), gr_const_f32(g, 1));
  void *data;
  size_t size;
  if (gr_wire_encode_graph(g, NULL, &data, &size, &err) != GR_OK) {
    fprintf(stderr, "gen_wire_seeds: %s\n", err.msg);
    return 1;
  }
  write_file("graph", data, size);
  m = gr_outmsg_new(GR_MSG_REGISTER, 6);
  gr_outmsg_u64(m, "id", 6);
  gr_outmsg_u64(m, "inc", 0x1234567890abcdefull);
  gr_outmsg_str(m, "container", "shared");
  gr_outmsg_bool(m, "private", false);
  gr_outmsg_key(m, "peers");
  msgpack_packer *pk = gr_outmsg_packer(m);
  msgpack_pack_array(pk, 1);
  msgpack_pack_array(pk, 3);
  gr_pack_str(pk, "/job:worker/replica:0/task:1");
  gr_pack_str(pk, "127.0.0.1:2223");
  msgpack_pack_uint64(pk, 0x1111ull);
  gr_outmsg_key(m, "parts");
  msgpack_pack_array(pk, 1);
  size_t off = gr_outmsg_add_body(m, data, size, data); /* the message frees data */
  msgpack_pack_array(pk, 5);
  gr_pack_str(pk, dev);
  msgpack_pack_uint64(pk, off);
  msgpack_pack_uint64(pk, size);
  msgpack_pack_array(pk, 1);
  msgpack_pack_array(pk, 3);
  gr_pack_str(pk, px.node->name);
  msgpack_pack_int(pk, 0);
  msgpack_pack_int(pk, 0);
  msgpack_pack_array(pk, 1);
  msgpack_pack_array(pk, 3);
  gr_pack_str(pk, py.node->name);
  msgpack_pack_int(pk, 0);
  msgpack_pack_int(pk, 0);
  emit("register", m);
  gr_graph_free(g);

  gr_tensor_release(&x);
  gr_tensor_release(&y);
  gr_tensor_release(&b);
  gr_tensor_release(&s);
  printf("gen_wire_seeds: %d seeds in %s\n", count, dir);
  return 0;
}

/* Writes the seed corpus of fuzz_wire.c: valid frames of each kind, built
 * by the kinds' own packers (msg_internal.h, and handshake_internal.h for
 * the handshake's) so the seeds follow the format when it changes, plus
 * one bare serialized graph.
 *
 *   gen_wire_seeds DIR        writes DIR/NN-KIND.bin
 *
 * Built and run by tests/fuzz/run_fuzz.sh for `make fuzz-wire`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/gr_distributed.h"
#include "distributed/handshake_internal.h"
#include "distributed/msg_internal.h"
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
  gr_error err = {.msg = "out of memory"};
  if (!m || gr_outmsg_finish(m, &iov, &n, &total, &err) != GR_OK) {
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
  uint8_t nonce[GR_AUTH_NONCE];

  /* the handshake, with a secret and without (handshake_internal.h) */
  const char *secret = "seed-secret-of-16+";
  for (int secure = 1; secure >= 0; secure--) {
    const char *sec = secure ? secret : NULL;
    gr_outmsg *hello = gr_hello_new(sec, "seed-cluster", 0, nonce, &err), *auth, *ok;
    gr_msg hm, am;
    gr_hs_result res;
    gr_hs_client hs = {.secret = sec, .cluster = "seed-cluster", .address = "seed:1"};
    struct iovec *iov;
    int n;
    size_t total;
    if (!hello || gr_outmsg_finish(hello, &iov, &n, &total, &err) != GR_OK ||
        gr_msg_parse(&hm, (char *)iov[0].iov_base + GR_WIRE_HEADER_SIZE,
                     iov[0].iov_len - GR_WIRE_HEADER_SIZE, &err) != GR_OK ||
        gr_hs_client_answer(&hs, &hm, &auth, &err) != GR_OK ||
        gr_outmsg_finish(auth, &iov, &n, &total, &err) != GR_OK ||
        gr_msg_parse(&am, (char *)iov[0].iov_base + GR_WIRE_HEADER_SIZE,
                     iov[0].iov_len - GR_WIRE_HEADER_SIZE, &err) != GR_OK ||
        gr_hs_server_check(sec, "seed-cluster", 0, nonce, &am, &ok, &res, &err) != GR_OK) {
      fprintf(stderr, "gen_wire_seeds: the handshake: %s\n", err.msg);
      return 1;
    }
    emit(secure ? "hello" : "hello_insecure", hello);
    emit(secure ? "auth" : "auth_insecure", auth);
    emit(secure ? "auth_ok" : "auth_ok_insecure", ok);
    gr_msg_free(&hm);
    gr_msg_free(&am);
  }

  emit("get_status", gr_get_status_req_pack(&(gr_get_status_req){1}));
  emit("status_response",
       gr_get_status_resp_pack(1,
                               &(gr_get_status_resp){task, 0x1234567890abcdefull, &dev, 1, 2, 2}));
  emit("heartbeat", gr_heartbeat_req_pack(&(gr_heartbeat_req){0}));
  emit("heartbeat_response", gr_response_pack(0, NULL));

  /* RUN with two feeds: float32 [3] and int32 [2, 2], traced */
  gr_tensor x = tensor(GR_F32, 1, (int64_t[]){3}, (float[]){1, 2, 3});
  gr_tensor y = tensor(GR_I32, 2, (int64_t[]){2, 2}, (int32_t[]){1, -2, 3, -4});
  gr_tensor values[2] = {x, y};
  emit("run", gr_run_req_pack(&(gr_run_req){.id = 2,
                                            .handle = 1,
                                            .inc = 0x1234567890abcdefull,
                                            .step = 3,
                                            .run = 0xfeedull,
                                            .seed = 7,
                                            .trace = true,
                                            .feeds = (const int[]){0, 1},
                                            .num_feeds = 2,
                                            .values = values}));

  /* a RUN response: fetches (a bool; slot 1 empty), transfer counts, a trace */
  gr_tensor b = tensor(GR_BOOL, 1, (int64_t[]){3}, (bool[]){true, false, true});
  gr_tensor fetches[3] = {b, gr_tensor_empty(), x};
  gr_node node = {.name = "y", .assigned_device = dev};
  gr_step_trace *trace = gr_step_trace_new();
  if (!trace) return 1;
  gr_step_trace_add(trace, &(gr_trace_event){&node, 0, 100, 250, 12});
  emit("run_response", gr_run_resp_pack(2, &(gr_run_resp){.fetches = fetches,
                                                          .num_fetches = 3,
                                                          .sends = 2,
                                                          .bytes = 16,
                                                          .trace = trace,
                                                          .trace_t0 = 50}));
  gr_step_trace_free(trace);

  gr_error failed;
  gr_error_set(&failed, GR_ERR_INVALID_ARGUMENT, "%s: something failed", task);
  emit("error_response", gr_response_pack(3, &failed));

  /* a pushed tensor: a float64 scalar */
  gr_tensor s = tensor(GR_F64, 0, NULL, (double[]){2.5});
  emit("tensor", gr_tensor_msg_pack(&(gr_tensor_msg){
                     .run = 0xfeedull,
                     .key = "/job:worker/replica:0/task:1/device:CPU:0;0123456789abcdef;"
                            "/job:worker/replica:0/task:0/device:CPU:0;a:0;:0",
                     .from = "/job:worker/replica:0/task:1",
                     .inc = 0x1111ull,
                     .value = &s}));

  emit("abort", gr_abort_msg_pack(&(gr_abort_msg){0xfeedull, GR_ERR_CANCELLED, "step aborted"}));

  const char *names[] = {"w", "dense/b"};
  emit("vars", gr_vars_req_pack(&(gr_vars_req){4, names, 2, {"_run.0123456789abcdef", true}}));
  emit("vars_response", gr_vars_resp_pack(4, &(gr_vars_resp){(const bool[]){true, false}, 2}));
  emit("reset", gr_reset_req_pack(&(gr_reset_req){7, "shared"}));
  emit("reset_response", gr_reset_resp_pack(7, &(gr_reset_resp){1}));
  emit("deregister", gr_deregister_req_pack(&(gr_deregister_req){5, 1}));
  emit("lease", gr_lease_req_pack(
                    &(gr_lease_req){8, "chief", true, "/job:chief/task:0, pid 4242 on node1"}));
  emit("lease_response",
       gr_lease_resp_pack(8, &(gr_lease_resp){true, 1, 0, "/job:chief/task:0, pid 4242 on node1"}));

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
  gr_register_peer peer = {"/job:worker/replica:0/task:1", "127.0.0.1:2223", 0x1111ull};
  gr_register_endpoint feed = {px.node->name, 0, 0}, fetch = {py.node->name, 0, 0};
  gr_register_part part = {dev, data, size, &feed, &fetch, 1, 1}; /* the message takes data */
  emit("register", gr_register_req_pack(&(gr_register_req){
                       6, 0x1234567890abcdefull, {"shared", false}, &peer, 1, &part, 1}));
  emit("register_response", gr_register_resp_pack(6, &(gr_register_resp){1}));
  gr_graph_free(g);

  gr_tensor_release(&x);
  gr_tensor_release(&y);
  gr_tensor_release(&b);
  gr_tensor_release(&s);
  printf("gen_wire_seeds: %d seeds in %s\n", count, dir);
  return 0;
}

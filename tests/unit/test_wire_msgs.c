/* Typed messages (distributed/msg_internal.h), kind by kind: what is packed
 * unpacks to what went in; the map holds exactly the fields the kind's
 * spec lists (the specs are what test_wire_docs.c checks
 * docs/distributed.md against, so the docs show what goes on the wire); a
 * frame with one field left out is refused naming that field; and each
 * frame's bytes are the ones in the table at the end (wire version 5): a
 * frame that changes is a change of the wire. */
#include <graphrun.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/handshake_internal.h"
#include "distributed/msg_internal.h"
#include "gr_test.h"

typedef struct frame {
  uint8_t *p;
  size_t n;
} frame;

/* m's frame as bytes (m is freed). */
static frame bytes_of(gr_outmsg *m) {
  frame f = {0};
  struct iovec *iov;
  int n;
  size_t total;
  gr_error err;
  GR_CHECK(m != NULL);
  if (m && gr_outmsg_finish(m, &iov, &n, &total, &err) == GR_OK && (f.p = malloc(total))) {
    for (int i = 0; i < n; i++)
      memcpy(f.p + f.n, iov[i].iov_base, iov[i].iov_len), f.n += iov[i].iov_len;
  }
  gr_outmsg_free(m);
  return f;
}

/* The frame as a receiver reads it (NULL: refused, *err says why). */
static gr_inmsg *receive(const frame *f, gr_error *err) {
  gr_inmsg *in = calloc(1, sizeof *in);
  if (!in || f->n < GR_WIRE_HEADER_SIZE ||
      gr_wire_parse_frame_header(f->p, SIZE_MAX, &in->h, err) != GR_OK ||
      GR_WIRE_HEADER_SIZE + in->h.header_len + in->h.body_len != f->n ||
      gr_msg_parse(&in->msg, f->p + GR_WIRE_HEADER_SIZE, in->h.header_len, err) != GR_OK) {
    free(in);
    return NULL;
  }
  if (in->h.body_len && (in->body = gr_buffer_alloc(in->h.body_len)))
    memcpy(in->body->data, f->p + GR_WIRE_HEADER_SIZE + in->h.header_len, in->h.body_len);
  return in;
}

static const struct golden { const char *what, *hex; } goldens[];

/* f's bytes are what goldens lists for `what` (GR_WIRE_PRINT=1 prints the
 * table's lines instead, to write it anew after a deliberate wire change). */
static void hex_check(const char *what, const frame *f) {
  char *got = malloc(2 * f->n + 1);
  GR_CHECK(got != NULL);
  if (!got) return;
  got[0] = '\0';
  for (size_t i = 0; i < f->n; i++) snprintf(got + 2 * i, 3, "%02x", f->p[i]);
  const char *want = NULL;
  for (int i = 0; goldens[i].what; i++)
    if (!strcmp(goldens[i].what, what)) want = goldens[i].hex;
  if (getenv("GR_WIRE_PRINT"))
    printf("    {\"%s\",\n     \"%s\"},\n", what, got);
  else
    GR_CHECK_MSG(want && !strcmp(got, want), "%s: the frame's bytes changed:\n got  %s\n want %s",
                 what, got, want ? want : "(none)");
  free(got);
}

/* The map of in holds exactly `fields` (a response: and id, code), those
 * with a condition only when with_optional. */
static void check_fields(const char *what, const gr_inmsg *in, const gr_msg_field *fields, int n,
                         bool response, bool with_optional) {
  const char *want[32];
  int nw = 0;
  if (response) want[nw++] = "id", want[nw++] = "code";
  for (int i = 0; i < n; i++)
    if (!fields[i].when || with_optional) want[nw++] = fields[i].name;
  const msgpack_object_map *map = &in->msg.root.via.map;
  GR_CHECK_MSG((int)map->size == nw, "%s: %u fields, the spec lists %d", what, map->size, nw);
  for (int i = 0; i < nw; i++)
    GR_CHECK_MSG(gr_msg_get(&in->msg.root, want[i]) != NULL, "%s: no field '%s'", what, want[i]);
}

/* f without the field key (a copy). */
static frame drop_field(const frame *f, const char *key) {
  gr_error err;
  gr_inmsg *in = receive(f, &err);
  frame out = {0};
  if (!in) return out;
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  const msgpack_object_map *map = &in->msg.root.via.map;
  size_t n = strlen(key);
  msgpack_pack_map(&pk, map->size - 1);
  for (uint32_t i = 0; i < map->size; i++) {
    const msgpack_object *k = &map->ptr[i].key;
    if (k->via.str.size == n && !memcmp(k->via.str.ptr, key, n)) continue;
    msgpack_pack_object(&pk, *k);
    msgpack_pack_object(&pk, map->ptr[i].val);
  }
  size_t body = in->h.body_len;
  gr_frame_header h = in->h;
  h.header_len = (uint32_t)sb.size;
  out.n = GR_WIRE_HEADER_SIZE + sb.size + body;
  if ((out.p = malloc(out.n))) {
    gr_wire_put_frame_header(out.p, &h);
    memcpy(out.p + GR_WIRE_HEADER_SIZE, sb.data, sb.size);
    memcpy(out.p + GR_WIRE_HEADER_SIZE + sb.size, f->p + f->n - body, body);
  }
  msgpack_sbuffer_destroy(&sb);
  gr_inmsg_free(in);
  return out;
}

/* Reads a frame of one kind whole: its unpack and its lists' readers. */
typedef gr_status (*read_fn)(gr_inmsg *in, gr_error *err);

/* Each field of `fields` left out of f in turn: read refuses the frame
 * naming the field, except for those in `lenient` (which may be absent). */
static void check_missing(const char *what, const frame *f, read_fn read,
                          const gr_msg_field *fields, int n, const char *const *lenient) {
  for (int i = 0; i < n; i++) {
    bool may = false;
    for (int j = 0; lenient && lenient[j]; j++) may = may || !strcmp(lenient[j], fields[i].name);
    frame g = drop_field(f, fields[i].name);
    gr_error err = {0};
    gr_inmsg *in = receive(&g, &err);
    GR_CHECK(in != NULL);
    gr_status st = in ? read(in, &err) : GR_ERR_INTERNAL;
    char want[96];
    snprintf(want, sizeof want, "field '%s' is missing", fields[i].name);
    if (may)
      GR_CHECK_MSG(st == GR_OK, "%s without '%s': %s", what, fields[i].name, err.msg);
    else
      GR_CHECK_MSG(st != GR_OK && strstr(err.msg, want), "%s without '%s': '%s', want '%s'", what,
                   fields[i].name, st == GR_OK ? "read" : err.msg, want);
    gr_inmsg_free(in);
    free(g.p);
  }
}

/* Packs m; checks its bytes and its fields (a response: the results of
 * spec's requests) and, given read, that each field left out is refused
 * (check_missing); gives it back as received. */
static gr_inmsg *through(const char *what, gr_outmsg *m, const gr_msg_spec *spec, bool response,
                         bool with_optional, read_fn read, const char *const *lenient) {
  frame f = bytes_of(m);
  gr_error err = {0};
  gr_inmsg *in = receive(&f, &err);
  GR_CHECK_MSG(in != NULL, "%s: %s", what, err.msg);
  const gr_msg_field *fields = response ? spec->results : spec->fields;
  int n = response ? spec->num_results : spec->num_fields;
  if (in) GR_CHECK_EQ_INT(in->h.type, response ? GR_MSG_RESPONSE : spec->type);
  if (in) check_fields(what, in, fields, n, response, with_optional);
  hex_check(what, &f);
  if (read) check_missing(what, &f, read, fields, n, lenient);
  free(f.p);
  return in;
}

/* A reader of one kind (read_fn) that unpacks into a T and then runs
 * `then` (its lists' readers), or nothing (1). */
#define READER(name, T, unpack, then)                                                              \
  static gr_status name(gr_inmsg *in, gr_error *err) {                                             \
    T x;                                                                                           \
    GR_TRY(unpack(in, &x, err));                                                                   \
    return (then);                                                                                 \
  }

static bool same_tensor(const gr_tensor *a, const gr_tensor *b) {
  return a->dtype == b->dtype && gr_shape_equal(&a->shape, &b->shape) &&
         gr_tensor_num_bytes(a) == gr_tensor_num_bytes(b) &&
         !memcmp(gr_tensor_data(a), gr_tensor_data(b), gr_tensor_num_bytes(a));
}

static gr_tensor floats(const float *v, int n) {
  gr_tensor t = gr_tensor_empty();
  gr_error err;
  GR_CHECK_OK(gr_tensor_from_data(&t, GR_F32, &(gr_shape){1, {n}}, v, &err), err);
  return t;
}

/* ---- response ------------------------------------------------------------------ */

READER(read_response, gr_response, gr_response_unpack, GR_OK)

static void test_response(void) {
  gr_response r;
  gr_error err, e;
  gr_inmsg *in =
      through("response", gr_response_pack(16, NULL), &gr_response_spec, false, false, NULL, NULL);
  GR_CHECK_OK(gr_response_unpack(in, &r, &err), err);
  GR_CHECK(r.id == 16 && r.code == GR_OK);
  gr_inmsg_free(in);
  gr_error_set(&e, GR_ERR_NOT_FOUND, "%s", "no graph 3");
  /* without msg an error reads as "?"; without failed_at, as failed at no step */
  static const char *const lenient[] = {"msg", "failed_at", NULL};
  in = through("response error", gr_response_pack_failed_at(17, &e, 3), &gr_response_spec, false,
               true, read_response, lenient);
  GR_CHECK_OK(gr_response_unpack(in, &r, &err), err);
  GR_CHECK(r.id == 17 && r.code == GR_ERR_NOT_FOUND && !strcmp(r.error.msg, "no graph 3") &&
           r.failed_at == 3);
  gr_inmsg_free(in);
  /* a code this build does not know is an internal error */
  gr_error_set(&e, (gr_status)200, "%s", "from the future");
  in = through("response unknown code", gr_response_pack_failed_at(18, &e, 0), &gr_response_spec,
               false, true, NULL, NULL);
  GR_CHECK_OK(gr_response_unpack(in, &r, &err), err);
  GR_CHECK(r.code == GR_ERR_INTERNAL && !strcmp(r.error.msg, "from the future") &&
           r.failed_at == 0);
  gr_inmsg_free(in);
}

/* ---- get_status, heartbeat ------------------------------------------------------ */

READER(read_status_req, gr_get_status_req, gr_get_status_req_unpack, GR_OK)
READER(read_status_resp, gr_get_status_resp, gr_get_status_resp_unpack, GR_OK)
READER(read_heartbeat, gr_heartbeat_req, gr_heartbeat_req_unpack, GR_OK)

static void test_get_status(void) {
  gr_error err;
  gr_get_status_req q;
  gr_inmsg *in = through("get_status", gr_get_status_req_pack(&(gr_get_status_req){7}),
                         &gr_get_status_spec, false, true, read_status_req, NULL);
  GR_CHECK_OK(gr_get_status_req_unpack(in, &q, &err), err);
  GR_CHECK(q.id == 7);
  gr_inmsg_free(in);

  const char *devs[] = {"/job:worker/replica:0/task:1/device:CPU:0",
                        "/job:worker/replica:0/task:1/device:CPU:1"};
  gr_get_status_resp r = {"/job:worker/replica:0/task:1", 0x1234567890abcdefull, devs, 2, 4, 16},
                     back;
  in = through("get_status response", gr_get_status_resp_pack(7, &r), &gr_get_status_spec, true,
               true, read_status_resp, NULL);
  GR_CHECK_OK(gr_get_status_resp_unpack(in, &back, &err), err);
  GR_CHECK(!strcmp(back.task, r.task) && back.inc == r.inc && back.num_devices == 2 &&
           !strcmp(back.devices[0], devs[0]) && !strcmp(back.devices[1], devs[1]) &&
           back.threads == 4 && back.cores == 16);
  gr_inmsg_free(in);
}

static void test_heartbeat(void) {
  gr_error err;
  gr_heartbeat_req q;
  gr_inmsg *in = through("heartbeat", gr_heartbeat_req_pack(&(gr_heartbeat_req){0}),
                         &gr_heartbeat_spec, false, true, read_heartbeat, NULL);
  GR_CHECK_OK(gr_heartbeat_req_unpack(in, &q, &err), err);
  GR_CHECK(q.id == 0 && gr_heartbeat_spec.num_results == 0); /* answered without results */
  gr_inmsg_free(in);
}

/* ---- register ------------------------------------------------------------------ */

static gr_status container_of(gr_inmsg *in, gr_error *err) {
  gr_container_ref c;
  return gr_container_ref_unpack(in, &c, err);
}
READER(read_register, gr_register_req, gr_register_req_unpack, container_of(in, err))
READER(read_register_resp, gr_register_resp, gr_register_resp_unpack, GR_OK)

static bool same_endpoints(const gr_register_endpoint *a, const gr_register_endpoint *b, int n) {
  for (int i = 0; i < n; i++)
    if (strcmp(a[i].node, b[i].node) || a[i].output != b[i].output || a[i].index != b[i].index)
      return false;
  return true;
}

static void test_register(void) {
  const gr_register_peer peers[] = {{"/job:ps/replica:0/task:0", "127.0.0.1:2222", 5},
                                    {"/job:worker/replica:0/task:0", "127.0.0.1:2223", 6}};
  const gr_register_endpoint feeds[] = {{"x", 0, 0}};
  const gr_register_endpoint fetches[] = {{"y", 0, 0}, {"z", 1, 1}}, fetches1[] = {{"w", 0, 2}};
  const char *g0 = "graph-zero", *g1 = "graph-one!!";
  gr_register_part parts[] = {
      {"/job:worker/replica:0/task:0/device:CPU:0", strdup(g0), strlen(g0), feeds, fetches, 1, 2},
      {"/job:worker/replica:0/task:0/device:CPU:1", strdup(g1), strlen(g1), NULL, fetches1, 0, 1}};
  gr_register_req q = {9, 0xfeed, {"_run.00000000000000ab", true}, peers, 2, parts, 2}, back;
  gr_container_ref c;
  gr_error err;
  gr_inmsg *in = through("register", gr_register_req_pack(&q), &gr_register_spec, false, true,
                         read_register, NULL);
  GR_CHECK_OK(gr_register_req_unpack(in, &back, &err), err);
  GR_CHECK_OK(gr_container_ref_unpack(in, &c, &err), err);
  GR_CHECK(back.id == 9 && back.inc == 0xfeed && !strcmp(c.name, q.container.name) && c.is_private);
  GR_CHECK(back.num_peers == 2 && back.num_parts == 2);
  for (int i = 0; back.peers && i < 2; i++)
    GR_CHECK(!strcmp(back.peers[i].task, peers[i].task) &&
             !strcmp(back.peers[i].address, peers[i].address) && back.peers[i].inc == peers[i].inc);
  const char *graphs[] = {g0, g1};
  for (int k = 0; back.parts && k < 2; k++) {
    const gr_register_part *a = &back.parts[k], *b = &parts[k];
    GR_CHECK(!strcmp(a->device, b->device) && a->graph_size == strlen(graphs[k]) &&
             !memcmp(a->graph, graphs[k], a->graph_size));
    GR_CHECK(a->num_feeds == b->num_feeds && a->num_fetches == b->num_fetches &&
             same_endpoints(a->feeds, b->feeds, b->num_feeds) &&
             same_endpoints(a->fetches, b->fetches, b->num_fetches));
  }
  gr_inmsg_free(in);

  gr_register_resp r;
  in = through("register response", gr_register_resp_pack(9, &(gr_register_resp){3}),
               &gr_register_spec, true, true, read_register_resp, NULL);
  GR_CHECK_OK(gr_register_resp_unpack(in, &r, &err), err);
  GR_CHECK(r.handle == 3);
  gr_inmsg_free(in);
}

/* ---- run ------------------------------------------------------------------------- */

static void release_all(gr_tensor *v, int n) {
  for (int i = 0; i < n; i++) gr_tensor_release(&v[i]);
}

static gr_status feeds_of(gr_inmsg *in, const gr_run_req *q, gr_error *err) {
  gr_tensor v[2] = {gr_tensor_empty(), gr_tensor_empty()};
  gr_status st = gr_run_req_feeds(in, q, v, 2, err);
  release_all(v, 2);
  return st;
}
static gr_status fetches_of(gr_inmsg *in, const gr_run_resp *r, gr_error *err) {
  gr_tensor v[3] = {gr_tensor_empty(), gr_tensor_empty(), gr_tensor_empty()};
  gr_status st = gr_run_resp_fetches(in, r, (const int[]){0, 2}, 2, 3, v, err);
  release_all(v, 3);
  return st;
}
static gr_status run_resp_of(gr_inmsg *in, gr_run_resp *r, gr_error *err) {
  return gr_run_resp_unpack(in, 2, r, err);
}
READER(read_run, gr_run_req, gr_run_req_unpack, feeds_of(in, &x, err))
READER(read_run_resp, gr_run_resp, run_resp_of, fetches_of(in, &x, err))

static void test_run(void) {
  gr_tensor values[2] = {gr_tensor_empty(), floats((const float[]){1, 2, 3}, 3)};
  gr_tensor got[2] = {gr_tensor_empty(), gr_tensor_empty()};
  gr_run_req q = {.id = 11,
                  .handle = 3,
                  .inc = 0xfeed,
                  .step = 4,
                  .run = 0xabcdef0123456789ull,
                  .seed = 42,
                  .steps = 5,
                  .trace = true,
                  .feeds = (const int[]){1},
                  .num_feeds = 1,
                  .values = values},
             back;
  gr_error err;
  static const char *const lenient[] = {"trace", "steps", NULL}; /* absent: not traced, 1 */
  gr_inmsg *in = through("run", gr_run_req_pack(&q), &gr_run_spec, false, true, read_run, lenient);
  GR_CHECK_OK(gr_run_req_unpack(in, &back, &err), err);
  GR_CHECK(back.id == 11 && back.handle == 3 && back.inc == 0xfeed && back.step == 4 &&
           back.run == q.run && back.seed == 42 && back.trace && back.steps == 5);
  GR_CHECK_OK(gr_run_req_feeds(in, &back, got, 2, &err), err);
  GR_CHECK(gr_tensor_is_empty(&got[0]) && same_tensor(&got[1], &values[1]));
  gr_inmsg_free(in);
  release_all(got, 2);
  q.trace = false;
  q.steps = 1; /* not sent */
  in = through("run untraced", gr_run_req_pack(&q), &gr_run_spec, false, false, NULL, NULL);
  GR_CHECK_OK(gr_run_req_unpack(in, &back, &err), err);
  GR_CHECK(!back.trace && back.steps == 1);
  gr_inmsg_free(in);
  /* a feed given twice, and an index past the graph's feeds */
  q.feeds = (const int[]){1, 1};
  q.num_feeds = 2;
  in = through("run feed twice", gr_run_req_pack(&q), &gr_run_spec, false, false, NULL, NULL);
  GR_CHECK_OK(gr_run_req_unpack(in, &back, &err), err);
  GR_CHECK(gr_run_req_feeds(in, &back, got, 2, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "feed 1 is given twice");
  release_all(got, 2);
  GR_CHECK(gr_run_req_feeds(in, &back, got, 1, &err) == GR_ERR_OUT_OF_RANGE);
  GR_CHECK_STR_CONTAINS(err.msg, "feed index is 1, not in [0, 0]");
  gr_inmsg_free(in);
  release_all(values, 2);
}

static void test_run_response(void) {
  int32_t ints[2] = {7, 8};
  gr_tensor fetches[3] = {gr_tensor_scalar_f32(2.5f), gr_tensor_empty(), gr_tensor_empty()};
  gr_error err;
  GR_CHECK_OK(gr_tensor_from_data(&fetches[2], GR_I32, &(gr_shape){1, {2}}, ints, &err), err);
  gr_node a = {.name = "a", .assigned_device = "/job:worker/replica:0/task:0/device:CPU:0"};
  gr_node b = {.name = "loop/b"}; /* no device: the only one */
  gr_step_trace *trace = gr_step_trace_new();
  GR_CHECK(trace != NULL);
  gr_step_trace_add(trace, &(gr_trace_event){&a, 0, 1100, 1300, 4});
  gr_step_trace_add(trace, &(gr_trace_event){&b, 2, 1250, 1500, 0});
  gr_run_resp r = {.fetches = fetches,
                   .num_fetches = 3,
                   .sends = 3,
                   .bytes = 12,
                   .trace = trace,
                   .trace_t0 = 1000},
              back;
  gr_tensor got[3] = {gr_tensor_empty(), gr_tensor_empty(), gr_tensor_empty()};
  static const char *const lenient[] = {"trace", NULL}; /* absent: no events */
  gr_inmsg *in = through("run response", gr_run_resp_pack(11, &r), &gr_run_spec, true, true,
                         read_run_resp, lenient);
  GR_CHECK_OK(gr_run_resp_unpack(in, 2, &back, &err), err);
  GR_CHECK(back.sends == 3 && back.bytes == 12 && back.num_events == 2);
  if (back.num_events == 2) {
    const gr_run_event *e = back.events;
    GR_CHECK(!strcmp(e[0].device, a.assigned_device) && !strcmp(e[0].node, "a") &&
             e[0].iteration == 0 && e[0].start_ns == 100 && e[0].end_ns == 300 && e[0].bytes == 4);
    GR_CHECK(!strcmp(e[1].device, "") && !strcmp(e[1].node, "loop/b") && e[1].iteration == 2 &&
             e[1].start_ns == 250 && e[1].end_ns == 500 && e[1].bytes == 0);
  }
  GR_CHECK_OK(gr_run_resp_fetches(in, &back, (const int[]){0, 2}, 2, 3, got, &err), err);
  GR_CHECK(same_tensor(&got[0], &fetches[0]) && gr_tensor_is_empty(&got[1]) &&
           same_tensor(&got[2], &fetches[2]));
  release_all(got, 3);
  /* a fetch the request did not ask for; one it asked for and did not get */
  GR_CHECK(gr_run_resp_fetches(in, &back, (const int[]){0, 1}, 2, 3, got, &err) ==
           GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "fetch 2 is not one it was asked for");
  release_all(got, 3);
  GR_CHECK(gr_run_resp_fetches(in, &back, (const int[]){0, 1, 2}, 3, 3, got, &err) ==
           GR_ERR_INTERNAL);
  GR_CHECK_STR_CONTAINS(err.msg, "fetch 1 produced no value");
  release_all(got, 3);
  GR_CHECK(gr_run_resp_unpack(in, 1, &back, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "field 'fetches' has 2 items (at most 1)");
  gr_inmsg_free(in);
  r.trace = NULL;
  in = through("run response untraced", gr_run_resp_pack(11, &r), &gr_run_spec, true, false, NULL,
               NULL);
  GR_CHECK_OK(gr_run_resp_unpack(in, 2, &back, &err), err);
  GR_CHECK(back.num_events == 0);
  gr_inmsg_free(in);
  gr_step_trace_free(trace);
  release_all(fetches, 3);
}

/* ---- tensor, abort ----------------------------------------------------------------- */

static gr_status value_of(gr_inmsg *in, const gr_tensor_msg *t, gr_error *err) {
  gr_tensor v = gr_tensor_empty();
  gr_status st = gr_tensor_msg_value(in, t, &v, err);
  gr_tensor_release(&v);
  return st;
}
READER(read_tensor, gr_tensor_msg, gr_tensor_msg_unpack, value_of(in, &x, err))

static void test_tensor(void) {
  gr_tensor value = floats((const float[]){0.5f, -1}, 2), got = gr_tensor_empty();
  const char *key = "/job:ps/replica:0/task:0/device:CPU:0;0000000000000005;"
                    "/job:worker/replica:0/task:0/device:CPU:0;edge_3_x;0:0";
  gr_tensor_msg t = {0x55, key, "/job:ps/replica:0/task:0", 5, false, &value, NULL}, back;
  gr_error err;
  gr_inmsg *in =
      through("tensor", gr_tensor_msg_pack(&t), &gr_tensor_spec, false, true, read_tensor, NULL);
  GR_CHECK_OK(gr_tensor_msg_unpack(in, &back, &err), err);
  GR_CHECK(back.run == 0x55 && !strcmp(back.key, key) && !strcmp(back.from, t.from) &&
           back.inc == 5 && !back.dead);
  GR_CHECK_OK(gr_tensor_msg_value(in, &back, &got, &err), err);
  GR_CHECK(same_tensor(&got, &value));
  gr_tensor_release(&got);
  /* the run is read first: a push bad in a later field still names its step */
  frame f = {0};
  gr_outmsg *m = gr_tensor_msg_pack(&t);
  f = bytes_of(m);
  frame g = drop_field(&f, "from");
  gr_inmsg *bad = receive(&g, &err);
  GR_CHECK(bad && gr_tensor_msg_unpack(bad, &back, &err) != GR_OK && back.run == 0x55);
  gr_inmsg_free(bad);
  free(f.p);
  free(g.p);
  gr_inmsg_free(in);
  t.dead = true; /* a dead value goes as nil, whatever the caller passed */
  in = through("tensor dead", gr_tensor_msg_pack(&t), &gr_tensor_spec, false, true, NULL, NULL);
  GR_CHECK_OK(gr_tensor_msg_unpack(in, &back, &err), err);
  GR_CHECK_OK(gr_tensor_msg_value(in, &back, &got, &err), err);
  GR_CHECK(back.dead && gr_tensor_is_empty(&got));
  gr_inmsg_free(in);
  gr_tensor_release(&value);
}

READER(read_abort, gr_abort_msg, gr_abort_msg_unpack, GR_OK)

static void test_abort(void) {
  gr_abort_msg a = {0x55, GR_ERR_CANCELLED, "step aborted: /job:ps/replica:0/task:0 failed"}, back;
  gr_error err;
  gr_inmsg *in =
      through("abort", gr_abort_msg_pack(&a), &gr_abort_spec, false, true, read_abort, NULL);
  GR_CHECK_OK(gr_abort_msg_unpack(in, &back, &err), err);
  GR_CHECK(back.run == 0x55 && back.code == GR_ERR_CANCELLED && !strcmp(back.msg, a.msg));
  gr_inmsg_free(in);
  a.code = GR_OK; /* no error, or one this build does not know: a cancellation */
  in = through("abort code 0", gr_abort_msg_pack(&a), &gr_abort_spec, false, true, NULL, NULL);
  GR_CHECK_OK(gr_abort_msg_unpack(in, &back, &err), err);
  GR_CHECK(back.code == GR_ERR_CANCELLED);
  gr_inmsg_free(in);
}

/* ---- vars, deregister ------------------------------------------------------------ */

static gr_status vars_resp_of(gr_inmsg *in, gr_vars_resp *r, gr_error *err) {
  return gr_vars_resp_unpack(in, 4, r, err);
}
READER(read_vars, gr_vars_req, gr_vars_req_unpack, container_of(in, err))
READER(read_vars_resp, gr_vars_resp, vars_resp_of, GR_OK)

static void test_vars(void) {
  const char *names[] = {"v", "layer/w"};
  gr_vars_req q = {12, names, 2, {"shared", false}}, back;
  gr_container_ref c;
  gr_error err;
  gr_inmsg *in = through("vars", gr_vars_req_pack(&q), &gr_vars_spec, false, true, read_vars, NULL);
  GR_CHECK_OK(gr_vars_req_unpack(in, &back, &err), err);
  GR_CHECK_OK(gr_container_ref_unpack(in, &c, &err), err);
  GR_CHECK(back.id == 12 && back.num_names == 2 && !strcmp(back.names[0], "v") &&
           !strcmp(back.names[1], "layer/w") && !strcmp(c.name, "shared") && !c.is_private);
  gr_inmsg_free(in);
  gr_vars_resp r = {(const bool[]){true, false}, 2}, rb;
  in = through("vars response", gr_vars_resp_pack(12, &r), &gr_vars_spec, true, true,
               read_vars_resp, NULL);
  GR_CHECK_OK(gr_vars_resp_unpack(in, 4, &rb, &err), err);
  GR_CHECK(rb.num_init == 2 && rb.init[0] && !rb.init[1]);
  gr_inmsg_free(in);
}

READER(read_deregister, gr_deregister_req, gr_deregister_req_unpack, GR_OK)

static void test_deregister(void) {
  gr_deregister_req back;
  gr_error err;
  gr_inmsg *in = through("deregister", gr_deregister_req_pack(&(gr_deregister_req){13, 3}),
                         &gr_deregister_spec, false, true, read_deregister, NULL);
  GR_CHECK_OK(gr_deregister_req_unpack(in, &back, &err), err);
  GR_CHECK(back.id == 13 && back.handle == 3);
  GR_CHECK_EQ_INT(gr_deregister_spec.num_results, 0); /* answered without results */
  gr_inmsg_free(in);
}

/* ---- lease, reset ---------------------------------------------------------------- */

READER(read_lease, gr_lease_req, gr_lease_req_unpack, GR_OK)
READER(read_lease_resp, gr_lease_resp, gr_lease_resp_unpack, GR_OK)

static void test_lease(void) {
  gr_lease_req q = {14, "chief", true, "graphrun chief, pid 1 on host"}, back;
  gr_error err;
  gr_inmsg *in =
      through("lease", gr_lease_req_pack(&q), &gr_lease_spec, false, true, read_lease, NULL);
  GR_CHECK_OK(gr_lease_req_unpack(in, &back, &err), err);
  GR_CHECK(back.id == 14 && !strcmp(back.name, "chief") && back.take &&
           !strcmp(back.holder, q.holder));
  gr_inmsg_free(in);
  q.name = ""; /* a lease needs a name */
  in = through("lease without a name", gr_lease_req_pack(&q), &gr_lease_spec, false, true, NULL,
               NULL);
  GR_CHECK(gr_lease_req_unpack(in, &back, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "field 'name': a lease needs a name");
  gr_inmsg_free(in);

  gr_lease_resp r = {true, 2, 0, "graphrun chief, pid 1 on host"}, rb;
  in = through("lease response", gr_lease_resp_pack(14, &r), &gr_lease_spec, true, true,
               read_lease_resp, NULL);
  GR_CHECK_OK(gr_lease_resp_unpack(in, &rb, &err), err);
  GR_CHECK(rb.held && rb.taken == 2 && rb.ago == 0 && !strcmp(rb.holder, r.holder));
  gr_inmsg_free(in);
}

READER(read_reset, gr_reset_req, gr_reset_req_unpack, GR_OK)
READER(read_reset_resp, gr_reset_resp, gr_reset_resp_unpack, GR_OK)

static void test_reset(void) {
  gr_reset_req back;
  gr_error err;
  gr_inmsg *in = through("reset", gr_reset_req_pack(&(gr_reset_req){15, "team"}), &gr_reset_spec,
                         false, true, read_reset, NULL);
  GR_CHECK_OK(gr_reset_req_unpack(in, &back, &err), err);
  GR_CHECK(back.id == 15 && !strcmp(back.container, "team"));
  gr_inmsg_free(in);
  in = through("reset all", gr_reset_req_pack(&(gr_reset_req){16, ""}), &gr_reset_spec, false, true,
               NULL, NULL);
  GR_CHECK_OK(gr_reset_req_unpack(in, &back, &err), err);
  GR_CHECK(!strcmp(back.container, ""));
  gr_inmsg_free(in);

  gr_reset_resp r;
  in = through("reset response", gr_reset_resp_pack(15, &(gr_reset_resp){2}), &gr_reset_spec, true,
               true, read_reset_resp, NULL);
  GR_CHECK_OK(gr_reset_resp_unpack(in, &r, &err), err);
  GR_CHECK(r.dropped == 2);
  gr_inmsg_free(in);
}

/* ---- the handshake (packed and read in handshake.c) ------------------------------- */

static const char *const secret = "0123456789abcdef0123456789abcdef";

/* m (taken) as received; the nonces are random: no fixed bytes. */
static gr_inmsg *hs_through(const char *what, gr_outmsg *m, const gr_msg_spec *spec,
                            bool with_optional) {
  frame f = bytes_of(m);
  gr_error err = {0};
  gr_inmsg *in = receive(&f, &err);
  GR_CHECK_MSG(in != NULL, "%s: %s", what, err.msg);
  if (in) GR_CHECK_EQ_INT(in->h.type, spec->type);
  if (in) check_fields(what, in, spec->fields, spec->num_fields, false, with_optional);
  free(f.p);
  return in;
}

static void test_handshake(void) {
  /* without a secret; with one; with one and frame MACs (the mode) */
  for (int round = 0; round < 3; round++) {
    bool secure = round > 0;
    uint8_t mode = round == 2 ? GR_AUTH_MODE_MACS : 0;
    const char *s = secure ? secret : NULL;
    uint8_t nonce[GR_AUTH_NONCE];
    gr_error err;
    gr_outmsg *auth = NULL, *ok = NULL;
    gr_hs_result res;
    gr_inmsg *hello =
        hs_through("hello", gr_hello_new(s, "exp1", mode, nonce, &err), &gr_hello_spec, secure);
    gr_hs_client hs = {.secret = s, .cluster = "exp1", .address = "127.0.0.1:1"};
    GR_CHECK_OK(gr_hs_client_answer(&hs, &hello->msg, &auth, &err), err);
    gr_inmsg *a = hs_through("auth", auth, &gr_auth_spec, secure);
    GR_CHECK_OK(gr_hs_server_check(s, "exp1", mode, nonce, &a->msg, &ok, &res, &err), err);
    GR_CHECK_EQ_INT(res.mode, mode);
    gr_inmsg *o = hs_through("auth_ok", ok, &gr_auth_ok_spec, secure);
    GR_CHECK_OK(gr_hs_client_check(&hs, &o->msg, &err), err);
    GR_CHECK_EQ_INT(hs.mode, mode);
    if (mode) GR_CHECK(memcmp(hs.keys, res.keys, sizeof hs.keys) == 0);
    gr_inmsg_free(hello);
    gr_inmsg_free(a);
    gr_inmsg_free(o);
  }
}

/* ---- every kind has a spec ---------------------------------------------------------- */

static void test_every_kind_has_a_spec(void) {
  for (int t = GR_MSG_NONE + 1; t < GR_MSG_COUNT; t++) {
    const gr_msg_spec *s = gr_msg_spec_of(t);
    GR_CHECK_MSG(s && (int)s->type == t && s->num_fields > 0 && s->direction,
                 "message type %d (%s) has no spec", t, gr_msg_type_name(t));
  }
  GR_CHECK(gr_msg_spec_of(GR_MSG_NONE) == NULL && gr_msg_spec_of(GR_MSG_COUNT) == NULL);
}

int main(void) {
  GR_RUN(test_every_kind_has_a_spec);
  GR_RUN(test_response);
  GR_RUN(test_get_status);
  GR_RUN(test_heartbeat);
  GR_RUN(test_register);
  GR_RUN(test_run);
  GR_RUN(test_run_response);
  GR_RUN(test_tensor);
  GR_RUN(test_abort);
  GR_RUN(test_vars);
  GR_RUN(test_deregister);
  GR_RUN(test_lease);
  GR_RUN(test_reset);
  GR_RUN(test_handshake);
  return gr_test_finish();
}

/* What the packers write for the values above (GR_WIRE_PRINT=1
 * build/tests/unit/test_wire_msgs prints this table). When the kinds were
 * typed, every frame of a cluster run of the examples (register, run,
 * tensor, abort, vars, reset, lease, ...) was compared byte for byte with
 * the untyped packers' frames: the same. */
static const struct golden goldens[] = {
    {"response", "47525746050b00000b0000000000000082a2696410a4636f646500"},
    {"response error", "47525746050b0000250000000000000084a2696411a4636f646502a36d7367aa6e6f2067726"
                       "170682033a96661696c65645f617403"},
    {"response unknown code", "47525746050b00002b0000000000000084a2696412a4636f6465ccc8a36d7367af66"
                              "726f6d2074686520667574757265a96661696c65645f617400"},
    {"get_status", "4752574605040000050000000000000081a2696407"},
    {"get_status response",
     "47525746050b0000a90000000000000087a2696407a4636f646500a47461736bbc2f6a6f623a776f726b65722f726"
     "5706c6963613a302f7461736b3a31a3696e63cf1234567890abcdefa77468726561647304a5636f72657310a76465"
     "766963657392d9292f6a6f623a776f726b65722f7265706c6963613a302f7461736b3a312f6465766963653a43505"
     "53a30d9292f6a6f623a776f726b65722f7265706c6963613a302f7461736b3a312f6465766963653a4350553a31"},
    {"heartbeat", "47525746050c0000050000000000000081a2696400"},
    {"register",
     "47525746050500000f0100004b00000086a2696409a3696e63cdfeeda9636f6e7461696e6572b55f72756e2e30303"
     "030303030303030303030306162a770726976617465c3a570656572739293b82f6a6f623a70732f7265706c696361"
     "3a302f7461736b3a30ae3132372e302e302e313a323232320593bc2f6a6f623a776f726b65722f7265706c6963613"
     "a302f7461736b3a30ae3132372e302e302e313a3232323306a570617274739295d9292f6a6f623a776f726b65722f"
     "7265706c6963613a302f7461736b3a302f6465766963653a4350553a30000a9193a17800009293a179000093a17a0"
     "10195d9292f6a6f623a776f726b65722f7265706c6963613a302f7461736b3a302f6465766963653a4350553a3140"
     "0b909193a177000267726170682d7a65726f000000000000000000000000000000000000000000000000000000000"
     "00000000000000000000000000000000000000000000000000067726170682d6f6e652121"},
    {"register response", "47525746050b0000130000000000000083a2696409a4636f646500a668616e646c6503"},
    {"run", "47525746050600004d0000000c00000089a57472616365c3a5737465707305a269640ba668616e646c6503"
            "a3696e63cdfeeda47374657004a372756ecfabcdef0123456789a4736565642aa5666565647391920194a3"
            "6633329103000c0000803f0000004000004040"},
    {"run untraced",
     "47525746050600003f0000000c00000087a269640ba668616e646c6503a3696e63cdfeeda47374657004a372756ec"
     "fabcdef0123456789a4736565642aa5666565647391920194a36633329103000c0000803f0000004000004040"},
    {"run feed twice",
     "47525746050600004a0000004c00000087a269640ba668616e646c6503a3696e63cdfeeda47374657004a372756ec"
     "fabcdef0123456789a4736565642aa5666565647392920194a36633329103000c920194a36633329103400c000080"
     "3f0000004000004040000000000000000000000000000000000000000000000000000000000000000000000000000"
     "000000000000000000000000000000000803f0000004000004040"},
    {"run response",
     "47525746050b0000820000004800000086a269640ba4636f646500a76665746368657392920094a36633329000049"
     "20294a369333291024008a573656e647303a562797465730ca574726163659296d9292f6a6f623a776f726b65722f"
     "7265706c6963613a302f7461736b3a302f6465766963653a4350553a30a1610064cd012c0496a0a66c6f6f702f620"
     "2ccfacd01f40000002040000000000000000000000000000000000000000000000000000000000000000000000000"
     "0000000000000000000000000000000000000000000000000700000008000000"},
    {"run response untraced",
     "47525746050b0000370000004800000085a269640ba4636f646500a76665746368657392920094a36633329000049"
     "20294a369333291024008a573656e647303a562797465730c00002040000000000000000000000000000000000000"
     "000000000000000000000000000000000000000000000000000000000000000000000000000000000000070000000"
     "8000000"},
    {"tensor", "47525746050a0000b10000000800000086a372756e55a36b6579d96d2f6a6f623a70732f7265706c696"
               "3613a302f7461736b3a302f6465766963653a4350553a303b303030303030303030303030303030353b"
               "2f6a6f623a776f726b65722f7265706c6963613a302f7461736b3a302f6465766963653a4350553a303"
               "b656467655f335f783b303a30a466726f6db82f6a6f623a70732f7265706c6963613a302f7461736b3a"
               "30a3696e6305a464656164c2a576616c756594a3663332910200080000003f000080bf"},
    {"tensor dead",
     "47525746050a0000a90000000000000086a372756e55a36b6579d96d2f6a6f623a70732f7265706c6963613a302f7"
     "461736b3a302f6465766963653a4350553a303b303030303030303030303030303030353b2f6a6f623a776f726b65"
     "722f7265706c6963613a302f7461736b3a302f6465766963653a4350553a303b656467655f335f783b303a30a4667"
     "26f6db82f6a6f623a70732f7265706c6963613a302f7461736b3a30a3696e6305a464656164c3a576616c7565c0"},
    {"abort", "47525746050700003f0000000000000083a372756e55a4636f64650aa36d7367d92d737465702061626f"
              "727465643a202f6a6f623a70732f7265706c6963613a302f7461736b3a30206661696c6564"},
    {"abort code 0",
     "47525746050700003f0000000000000083a372756e55a4636f646500a36d7367d92d737465702061626f727465643"
     "a202f6a6f623a70732f7265706c6963613a302f7461736b3a30206661696c6564"},
    {"vars", "4752574605080000300000000000000084a269640ca9636f6e7461696e6572a6736861726564a77072697"
             "6617465c2a56e616d657392a176a76c617965722f77"},
    {"vars response", "47525746050b0000130000000000000083a269640ca4636f646500a4696e697492c3c2"},
    {"deregister", "47525746050900000d0000000000000082a269640da668616e646c6503"},
    {"lease", "47525746050d00003b0000000000000084a269640ea46e616d65a56368696566a474616b65c3a6686f6c"
              "646572bd677261706872756e2063686965662c207069642031206f6e20686f7374"},
    {"lease without a name",
     "47525746050d0000360000000000000084a269640ea46e616d65a0a474616b65c3a6686f6c646572bd67726170687"
     "2756e2063686965662c207069642031206f6e20686f7374"},
    {"lease response",
     "47525746050b0000420000000000000086a269640ea4636f646500a468656c64c3a574616b656e02a361676f00a66"
     "86f6c646572bd677261706872756e2063686965662c207069642031206f6e20686f7374"},
    {"reset", "47525746050e0000140000000000000082a269640fa9636f6e7461696e6572a47465616d"},
    {"reset all", "47525746050e0000100000000000000082a2696410a9636f6e7461696e6572a0"},
    {"reset response", "47525746050b0000140000000000000083a269640fa4636f646500a764726f7070656402"},
    {NULL, NULL},
};

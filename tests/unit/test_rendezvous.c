/* The local rendezvous: a value sent before or after its Recv asks arrives
 * once, by reference; dead values arrive dead; a key sent twice is refused;
 * an abort fails waiting and later receives with its error; nothing is left
 * over once every send met its receive. The interface carries another
 * implementation; keys are parsed part by part, bad ones refused by name. */
#include <graphrun.h>

#include "core/gr_rendezvous.h"
#include "gr_test.h"
#include "test_util.h"

typedef struct got {
  int calls;
  gr_status status;
  bool dead;
  gr_tensor value;
  char msg[128];
} got;

static void on_value(void *arg, gr_status status, const gr_error *err, gr_tensor *value,
                     bool dead) {
  got *g = arg;
  g->calls++;
  g->status = status;
  g->dead = dead;
  g->value = value ? *value : gr_tensor_empty();
  snprintf(g->msg, sizeof g->msg, "%s", err ? err->msg : "");
}

static void test_send_recv_orders(void) {
  gr_rendezvous *r = gr_rendezvous_new();
  gr_tensor t = gt_make(GR_F32, (gr_shape){1, {3}}, (double[]){1, 2, 3});
  gr_error err;
  /* send first: stored (one more reference), then taken */
  GR_CHECK_OK(gr_rendezvous_send(r, "a;0;b;x:0;:0", &t, false, &err), err);
  GR_CHECK_EQ_INT(gr_rendezvous_num_pending(r), 1);
  got g1 = {0};
  gr_rendezvous_recv(r, "a;0;b;x:0;:0", on_value, &g1);
  GR_CHECK(g1.calls == 1 && g1.status == GR_OK && !g1.dead);
  GR_CHECK(g1.value.buf == t.buf); /* a reference, not a copy */
  gr_tensor_release(&g1.value);
  /* receive first: waits, then the send completes it on the sender's thread */
  got g2 = {0};
  gr_rendezvous_recv(r, "a;0;b;x:0;frame:1", on_value, &g2);
  GR_CHECK_EQ_INT(g2.calls, 0);
  GR_CHECK_OK(gr_rendezvous_send(r, "a;0;b;x:0;frame:1", &t, false, &err), err);
  GR_CHECK(g2.calls == 1 && g2.status == GR_OK && gt_equal(&g2.value, &t));
  gr_tensor_release(&g2.value);
  /* dead values travel dead, without a tensor */
  got g3 = {0};
  GR_CHECK_OK(gr_rendezvous_send(r, "dead", &t, true, &err), err);
  gr_rendezvous_recv(r, "dead", on_value, &g3);
  GR_CHECK(g3.calls == 1 && g3.dead && g3.value.buf == NULL);
  /* a key sent twice in a step is refused */
  GR_CHECK_OK(gr_rendezvous_send(r, "twice", &t, false, &err), err);
  GR_CHECK(gr_rendezvous_send(r, "twice", &t, false, &err) == GR_ERR_ALREADY_EXISTS);
  GR_CHECK_STR_CONTAINS(err.msg, "twice");
  got g4 = {0};
  gr_rendezvous_recv(r, "twice", on_value, &g4);
  gr_tensor_release(&g4.value);
  GR_CHECK_EQ_INT(gr_rendezvous_num_pending(r), 0);
  /* many keys (the table grows) all meet */
  got many[500];
  char key[32];
  for (int i = 0; i < 500; i++) {
    many[i] = (got){0};
    snprintf(key, sizeof key, "k%d", i);
    if (i % 2) gr_rendezvous_recv(r, key, on_value, &many[i]);
    GR_CHECK_OK(gr_rendezvous_send(r, key, &t, false, &err), err);
    if (!(i % 2)) gr_rendezvous_recv(r, key, on_value, &many[i]);
  }
  for (int i = 0; i < 500; i++) {
    GR_CHECK(many[i].calls == 1 && many[i].value.buf == t.buf);
    gr_tensor_release(&many[i].value);
  }
  GR_CHECK_EQ_INT(gr_rendezvous_num_pending(r), 0);
  gr_rendezvous_free(r);
  gr_tensor_release(&t);
}

static void test_abort(void) {
  gr_rendezvous *r = gr_rendezvous_new();
  gr_tensor t = gt_make(GR_F32, (gr_shape){1, {1}}, (double[]){5});
  gr_error err;
  got waiting = {0}, later = {0};
  gr_rendezvous_recv(r, "w", on_value, &waiting);
  GR_CHECK_OK(gr_rendezvous_send(r, "stored", &t, false, &err), err);
  gr_rendezvous_abort(r, GR_ERR_CANCELLED, "device 2 failed");
  GR_CHECK(waiting.calls == 1 && waiting.status == GR_ERR_CANCELLED);
  GR_CHECK_STR_CONTAINS(waiting.msg, "device 2 failed");
  gr_rendezvous_recv(r, "stored", on_value, &later);
  GR_CHECK(later.calls == 1 && later.status == GR_ERR_CANCELLED);
  /* a send after the abort is dropped, not an error */
  GR_CHECK_OK(gr_rendezvous_send(r, "late", &t, false, &err), err);
  gr_rendezvous_free(r); /* releases the stored value */
  GR_CHECK(gr_tensor_is_unique(&t));
  gr_tensor_release(&t);
}

/* An implementation that counts calls and hands them to a local rendezvous. */
typedef struct counting {
  gr_rendezvous *inner;
  int sends, recvs, aborts, *freed;
} counting;
static gr_status c_send(void *self, const char *key, const gr_tensor *v, bool dead, gr_error *err) {
  counting *c = self;
  c->sends++;
  return gr_rendezvous_send(c->inner, key, v, dead, err);
}
static void c_recv(void *self, const char *key, gr_rendezvous_done_fn done, void *arg) {
  counting *c = self;
  c->recvs++;
  gr_rendezvous_recv(c->inner, key, done, arg);
}
static void c_abort(void *self, gr_status code, const char *msg) {
  counting *c = self;
  c->aborts++;
  gr_rendezvous_abort(c->inner, code, msg);
}
static int c_pending(void *self) {
  return gr_rendezvous_num_pending(((counting *)self)->inner);
}
static gr_transfer_stats c_stats(void *self) {
  return gr_rendezvous_stats(((counting *)self)->inner);
}
static void c_free(void *self) {
  counting *c = self;
  (*c->freed)++;
  gr_rendezvous_free(c->inner);
}

static void test_other_implementation(void) {
  static const gr_rendezvous_ops ops = {c_send, c_recv, c_abort, c_pending, c_stats, c_free, NULL};
  int freed = 0;
  counting c = {gr_rendezvous_new(), 0, 0, 0, &freed};
  gr_rendezvous *r = gr_rendezvous_new_with(&ops, &c);
  gr_error err;
  gr_tensor t = gt_random(&(gt_rng){1}, GR_F32, gr_shape_make(1, (int64_t[]){3}), -1, 1);
  got g = {0};
  GR_CHECK_OK(gr_rendezvous_send(r, "k", &t, false, &err), err);
  GR_CHECK_EQ_INT(gr_rendezvous_num_pending(r), 1);
  gr_rendezvous_recv(r, "k", on_value, &g);
  GR_CHECK(g.calls == 1 && g.status == GR_OK && gt_equal(&g.value, &t));
  GR_CHECK_EQ_INT(gr_rendezvous_stats(r).bytes, 12);
  gr_rendezvous_abort(r, GR_ERR_CANCELLED, "stop");
  GR_CHECK(c.sends == 1 && c.recvs == 1 && c.aborts == 1);
  gr_rendezvous_free(r);
  GR_CHECK_EQ_INT(freed, 1);
  gr_tensor_release(&g.value);
  gr_tensor_release(&t);
}

#define DEV0 "/job:localhost/replica:0/task:0/device:CPU:0"
#define DEV1 "/job:worker/replica:0/task:1/device:CPU:0"

static void test_parse_keys(void) {
  gr_rendezvous_key k;
  gr_error err;
  GR_CHECK_OK(gr_rendezvous_parse_key(
                  DEV0 ";00000000000000ab;" DEV1 ";dense/x:1;outer:3/inner:5:27", &k, &err),
              err);
  GR_CHECK(k.incarnation == 0xab && k.iteration == 27 && k.src.task == 0 && k.dst.task == 1);
  GR_CHECK(strcmp(k.dst.job, "worker") == 0);
  GR_CHECK(k.edge_len == 9 && strncmp(k.edge, "dense/x:1", 9) == 0);
  GR_CHECK(k.frame_len == 15 && strncmp(k.frame, "outer:3/inner:5", 15) == 0);
  GR_CHECK_OK(gr_rendezvous_parse_key(DEV0 ";ffffffffffffffff;" DEV0 ";x:0;:0", &k, &err), err);
  GR_CHECK(k.incarnation == UINT64_MAX && k.frame_len == 0 && k.iteration == 0);
  /* what the _send/_recv kernels build (core/transfer_ops.c) */
  char key[512];
  snprintf(key, sizeof key, "%s;%016llx;%s;%s;%s:%lld", DEV1, 0x1234ULL, DEV0, "y:0", "f:0", 7LL);
  GR_CHECK_OK(gr_rendezvous_parse_key(key, &k, &err), err);

  static const struct {
    const char *key, *want;
  } bad[] = {
      {DEV0 ";00000000000000ab;" DEV1 ";x:0", "want 5 parts"},
      {DEV0 ";00000000000000ab;" DEV1 ";x:0;:0;extra", "more than 5 parts"},
      {"/job:w;00000000000000ab;" DEV1 ";x:0;:0", "the source device '/job:w' is not a full"},
      {DEV0 ";00000000000000ab;;x:0;:0", "the destination device is empty"},
      {DEV0 ";00000000000000ab;/cpu:zz;x:0;:0", "'/cpu:zz' is not a full device name"},
      {DEV0 ";0000000000000ab;" DEV1 ";x:0;:0", "the incarnation is not 16 hex digits"},
      {DEV0 ";00000000000000aG;" DEV1 ";x:0;:0", "the incarnation is not 16 hex digits"},
      {DEV0 ";00000000000000ab;" DEV1 ";;:0", "the edge name is empty"},
      {DEV0 ";00000000000000ab;" DEV1 ";x:0;0", "not frame:iteration"},
      {DEV0 ";00000000000000ab;" DEV1 ";x:0;f:", "the iteration is not a number"},
      {DEV0 ";00000000000000ab;" DEV1 ";x:0;f:1x", "the iteration is not a number"},
      {DEV0 ";00000000000000ab;" DEV1 ";x:0;f:9999999999999999999", "below 10^18"},
      {"", "want 5 parts"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    GR_CHECK_MSG(gr_rendezvous_parse_key(bad[i].key, &k, &err) == GR_ERR_INVALID_ARGUMENT,
                 "key %zu parsed", i);
    GR_CHECK_STR_CONTAINS(err.msg, bad[i].want);
    GR_CHECK_STR_CONTAINS(err.msg, "rendezvous key '");
  }
  /* a long key is quoted shortened, never overflowing the message */
  char big[4000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  GR_CHECK(gr_rendezvous_parse_key(big, &k, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "aaa...': want 5 parts");
}

int main(void) {
  GR_RUN(test_send_recv_orders);
  GR_RUN(test_abort);
  GR_RUN(test_other_implementation);
  GR_RUN(test_parse_keys);
  return gr_test_finish();
}

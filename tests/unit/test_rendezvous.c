/* The local rendezvous: a value sent before or after its Recv asks arrives
 * once, by reference; dead values arrive dead; a key sent twice is refused;
 * an abort fails waiting and later receives with its error; nothing is left
 * over once every send met its receive. */
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

int main(void) {
  GR_RUN(test_send_recv_orders);
  GR_RUN(test_abort);
  return gr_test_finish();
}

/* Status codes, dtypes, shapes, buffers and tensors. */
#include <graphrun.h>
#include <stdlib.h>

#include "gr_test.h"

static void test_status_names(void) {
  GR_CHECK(strcmp(gr_status_name(GR_OK), "ok") == 0);
  GR_CHECK(strcmp(gr_status_name(GR_ERR_SHAPE), "shape error") == 0);
  GR_CHECK(strcmp(gr_status_name((gr_status)999), "unknown status") == 0);
  for (int c = 0; c < GR_STATUS_COUNT; c++) GR_CHECK(strlen(gr_status_name((gr_status)c)) > 0);
  gr_error e;
  GR_CHECK_EQ_INT(gr_error_set(&e, GR_ERR_NOT_FOUND, "node '%s'", "x"), GR_ERR_NOT_FOUND);
  GR_CHECK(strcmp(e.msg, "node 'x'") == 0);
  gr_error_prefix(&e, "file.gr:%d:%d", 3, 4);
  GR_CHECK(strcmp(e.msg, "file.gr:3:4: node 'x'") == 0);
  GR_CHECK_EQ_INT(gr_error_set(NULL, GR_ERR_IO, "ignored"), GR_ERR_IO);
  /* long messages are truncated, not overflowed */
  char big[4000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  gr_error_set(&e, GR_ERR_INTERNAL, "%s", big);
  GR_CHECK_EQ_INT(strlen(e.msg), GR_ERROR_MSG_MAX - 1);
}

static void test_dtypes(void) {
  GR_CHECK_EQ_INT(gr_dtype_size(GR_F32), 4);
  GR_CHECK_EQ_INT(gr_dtype_size(GR_F64), 8);
  GR_CHECK_EQ_INT(gr_dtype_size(GR_I32), 4);
  GR_CHECK_EQ_INT(gr_dtype_size(GR_I64), 8);
  GR_CHECK_EQ_INT(gr_dtype_size(GR_U8), 1);
  GR_CHECK_EQ_INT(gr_dtype_size(GR_BOOL), 1);
  gr_dtype t;
  for (int i = 0; i < GR_DTYPE_COUNT; i++) {
    GR_CHECK(gr_dtype_from_name(gr_dtype_name((gr_dtype)i), &t));
    GR_CHECK_EQ_INT(t, i);
  }
  GR_CHECK(gr_dtype_from_name("float32", &t) && t == GR_F32);
  GR_CHECK(gr_dtype_from_name("int64", &t) && t == GR_I64);
  GR_CHECK(!gr_dtype_from_name("f16", &t));
  GR_CHECK(!gr_dtype_from_name("", &t));
  GR_CHECK(!gr_dtype_from_name(NULL, &t));
  GR_CHECK(gr_dtype_is_float(GR_F64) && !gr_dtype_is_float(GR_I32));
}

static void test_shapes(void) {
  char b[GR_SHAPE_STR_MAX];
  gr_shape s = gr_shape_make(3, (int64_t[]){2, -1, 4});
  GR_CHECK(strcmp(gr_shape_str(&s, b), "[2, ?, 4]") == 0);
  GR_CHECK_EQ_INT(gr_shape_num_elements(&s), -1);
  gr_shape sc = gr_shape_scalar();
  GR_CHECK(strcmp(gr_shape_str(&sc, b), "[]") == 0);
  GR_CHECK_EQ_INT(gr_shape_num_elements(&sc), 1);
  gr_shape u = gr_shape_unknown();
  GR_CHECK(strcmp(gr_shape_str(&u, b), "<unknown>") == 0);
  GR_CHECK(gr_shape_compatible(&u, &s));
  gr_shape k = gr_shape_make(3, (int64_t[]){2, 7, 4});
  GR_CHECK(gr_shape_compatible(&s, &k));
  GR_CHECK(!gr_shape_equal(&s, &k));
  /* broadcasting */
  gr_shape a = gr_shape_make(2, (int64_t[]){5, 1}), c = gr_shape_make(1, (int64_t[]){3}), o;
  GR_CHECK(gr_shape_broadcast(&a, &c, &o));
  GR_CHECK(strcmp(gr_shape_str(&o, b), "[5, 3]") == 0);
  gr_shape d = gr_shape_make(1, (int64_t[]){4});
  GR_CHECK(!gr_shape_broadcast(&c, &d, &o));
  gr_shape z = gr_shape_make(2, (int64_t[]){0, 1});
  GR_CHECK(gr_shape_broadcast(&z, &c, &o));
  GR_CHECK(strcmp(gr_shape_str(&o, b), "[0, 3]") == 0);
  int ax;
  GR_CHECK(gr_shape_normalize_axis(3, -1, &ax) && ax == 2);
  GR_CHECK(!gr_shape_normalize_axis(3, 3, &ax));
  GR_CHECK(!gr_shape_normalize_axis(3, -4, &ax));
  GR_CHECK(!gr_shape_normalize_axis(0, 0, &ax));
}

static int deleted;
static void count_delete(void *data, void *arg) {
  (*(int *)arg)++;
  free(data);
}

static void test_buffers(void) {
  gr_buffer_pool_set_limit((size_t)1 << 30);
  gr_buffer *b = gr_buffer_alloc(100);
  GR_CHECK(b && b->capacity >= 100);
  GR_CHECK(((uintptr_t)b->data % GR_BUFFER_ALIGN) == 0);
  GR_CHECK(gr_buffer_is_unique(b));
  gr_buffer_retain(b);
  GR_CHECK(!gr_buffer_is_unique(b));
  gr_buffer_release(b);
  void *data = b->data;
  gr_buffer_release(b);
  /* the pool hands the same buffer back for the same size class */
  gr_buffer_pool_stats before, after;
  gr_buffer_pool_get_stats(&before);
  gr_buffer *c = gr_buffer_alloc(120);
  gr_buffer_pool_get_stats(&after);
  GR_CHECK(c->data == data);
  GR_CHECK_EQ_INT(after.system_allocs, before.system_allocs);
  GR_CHECK_EQ_INT(after.pool_hits, before.pool_hits + 1);
  gr_buffer_release(c);
  gr_buffer *z = gr_buffer_alloc(0);
  GR_CHECK(z != NULL);
  gr_buffer_release(z);
  gr_buffer_release(NULL);
  /* external memory with a deleter: runs on the last release only */
  int *mem = malloc(16);
  gr_buffer *w = gr_buffer_wrap(mem, 16, count_delete, &deleted);
  GR_CHECK(w && w->data == mem);
  gr_buffer_retain(w);
  gr_buffer_release(w);
  GR_CHECK_EQ_INT(deleted, 0);
  gr_buffer_release(w);
  GR_CHECK_EQ_INT(deleted, 1);
  gr_buffer_pool_trim();
  gr_buffer_pool_get_stats(&after);
  GR_CHECK_EQ_INT(after.idle_bytes, 0);
  /* with a limit of 0 nothing is kept */
  gr_buffer_pool_set_limit(0);
  gr_buffer *d = gr_buffer_alloc(100);
  gr_buffer_release(d);
  gr_buffer_pool_get_stats(&after);
  GR_CHECK_EQ_INT(after.idle_bytes, 0);
}

static void test_tensors(void) {
  gr_error err;
  gr_tensor t;
  GR_CHECK_OK(gr_tensor_alloc(&t, GR_F32, &(gr_shape){2, {2, 3}}, &err), err);
  float *p = gr_tensor_data(&t);
  for (int i = 0; i < 6; i++) p[i] = (float)i;
  GR_CHECK_EQ_INT(gr_tensor_num_bytes(&t), 24);
  GR_CHECK(gr_tensor_is_unique(&t));
  gr_tensor r;
  GR_CHECK_OK(gr_tensor_reshape(&t, &(gr_shape){1, {6}}, &r, &err), err);
  GR_CHECK(gr_tensor_data(&r) == gr_tensor_data(&t)); /* a view, not a copy */
  GR_CHECK(!gr_tensor_is_unique(&t));
  GR_CHECK_NEAR(gr_tensor_get_f64(&r, 5), 5, 0);
  gr_tensor bad;
  GR_CHECK(gr_tensor_reshape(&t, &(gr_shape){1, {7}}, &bad, &err) == GR_ERR_SHAPE);
  GR_CHECK_STR_CONTAINS(err.msg, "[2, 3]");
  gr_tensor c;
  GR_CHECK_OK(gr_tensor_copy(&t, &c, &err), err);
  GR_CHECK(gr_tensor_data(&c) != gr_tensor_data(&t));
  GR_CHECK_NEAR(gr_tensor_get_f64(&c, 4), 4, 0);
  gr_tensor_release(&r);
  gr_tensor_release(&c);
  gr_tensor_release(&t);
  GR_CHECK(gr_tensor_is_empty(&t));
  gr_tensor_release(&t); /* releasing an empty tensor is a no-op */
  /* unknown dims, negative dims, too-large tensors are errors, not crashes */
  GR_CHECK(gr_tensor_alloc(&t, GR_F32, &(gr_shape){1, {-1}}, &err) == GR_ERR_SHAPE);
  GR_CHECK(gr_tensor_alloc(&t, GR_F32, &(gr_shape){2, {1ll << 40, 1ll << 40}}, &err) ==
           GR_ERR_RESOURCE_EXHAUSTED);
  GR_CHECK(gr_tensor_alloc(&t, (gr_dtype)42, &(gr_shape){.rank = 0}, &err) == GR_ERR_DTYPE);
  GR_CHECK(gr_tensor_alloc(&t, GR_F32, &(gr_shape){.rank = 9}, &err) == GR_ERR_SHAPE);
  /* every dtype round-trips through get/set */
  for (int d = 0; d < GR_DTYPE_COUNT; d++) {
    GR_CHECK_OK(gr_tensor_alloc(&t, (gr_dtype)d, &(gr_shape){1, {3}}, &err), err);
    gr_tensor_set_f64(&t, 2, 1);
    GR_CHECK_NEAR(gr_tensor_get_f64(&t, 2), 1, 0);
    gr_tensor_release(&t);
  }
  gr_tensor *h = gr_tensor_new(GR_I32, &(gr_shape){1, {4}}, NULL, &err);
  GR_CHECK(h && gr_tensor_get_f64(h, 3) == 0);
  gr_tensor_free(h);
  gr_tensor s = gr_tensor_scalar_i64(-7);
  GR_CHECK_EQ_INT(s.shape.rank, 0);
  GR_CHECK_NEAR(gr_tensor_get_f64(&s, 0), -7, 0);
  gr_tensor_release(&s);
}

static void test_rng(void) {
  gr_rng a = gr_rng_make(1, gr_rng_hash_name("w"), 0);
  gr_rng b = gr_rng_make(1, gr_rng_hash_name("w"), 0);
  gr_rng c = gr_rng_make(1, gr_rng_hash_name("w"), 1);
  gr_rng d = gr_rng_make(2, gr_rng_hash_name("w"), 0);
  int same_c = 0, same_d = 0;
  double sum = 0, sq = 0;
  const int n = 100000;
  for (int i = 0; i < n; i++) {
    float u = gr_rng_uniform_f32(&a, (uint64_t)i);
    GR_CHECK(u >= 0 && u < 1);
    GR_CHECK(u == gr_rng_uniform_f32(&b, (uint64_t)i));
    same_c += u == gr_rng_uniform_f32(&c, (uint64_t)i);
    same_d += u == gr_rng_uniform_f32(&d, (uint64_t)i);
    double z = gr_rng_normal(&a, (uint64_t)i);
    sum += z;
    sq += z * z;
  }
  GR_CHECK(same_c < 50 && same_d < 50);
  GR_CHECK_NEAR(sum / n, 0, 0.02);
  GR_CHECK_NEAR(sq / n, 1, 0.03);
}

int main(void) {
  GR_RUN(test_status_names);
  GR_RUN(test_dtypes);
  GR_RUN(test_shapes);
  GR_RUN(test_buffers);
  GR_RUN(test_tensors);
  GR_RUN(test_rng);
  return gr_test_finish();
}

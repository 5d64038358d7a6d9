/* The one .npy codec (ops/data_files.c): the bytes it writes (NumPy's
 * format 1.0 header, padded to 64), what it reads back (every dtype, rank 0
 * to 3, random values), and the errors naming the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_util.h"

static char dir[64];

static const char *tmp_path(const char *name) {
  return gt_path_in(dir, name);
}

static void test_npy_write_format(void) {
  gr_tensor t = gt_make(GR_F64, (gr_shape){2, {2, 3}}, (double[]){1, 2, 3, 4, 5, 6});
  gr_error err;
  const char *path = tmp_path("t.npy");
  GR_CHECK_OK(gr_data_write_npy(&t, path, &err), err);
  FILE *f = fopen(path, "rb");
  unsigned char buf[256] = {0};
  size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
  if (f) fclose(f);
  GR_CHECK(n == 128 + 48); /* header padded to 128 bytes, then 6 doubles */
  GR_CHECK(memcmp(buf, "\x93NUMPY\x01\x00", 8) == 0);
  unsigned hlen = buf[8] | (unsigned)buf[9] << 8;
  GR_CHECK_EQ_INT((10 + hlen) % 64, 0);
  GR_CHECK(buf[10 + hlen - 1] == '\n');
  GR_CHECK_STR_CONTAINS((char *)buf + 10,
                        "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }");
  double v;
  memcpy(&v, buf + 10 + hlen + 5 * 8, 8);
  GR_CHECK(v == 6);
  gr_tensor_release(&t);
  gr_tensor s = gr_tensor_scalar_i32(9),
            r1 = gt_make(GR_U8, (gr_shape){1, {3}}, (double[]){1, 2, 3});
  GR_CHECK_OK(gr_data_write_npy(&s, path, &err), err);
  GR_CHECK_OK(gr_data_write_npy(&r1, tmp_path("r1.npy"), &err), err);
  f = fopen(tmp_path("r1.npy"), "rb");
  n = f ? fread(buf, 1, sizeof buf, f) : 0;
  if (f) fclose(f);
  buf[n < sizeof buf ? n : sizeof buf - 1] = 0;
  GR_CHECK_STR_CONTAINS((char *)buf + 10, "'descr': '|u1', 'fortran_order': False, 'shape': (3,)");
  GR_CHECK(gr_data_write_npy(&s, "/nonexistent-dir/x.npy", &err) == GR_ERR_IO);
  gr_tensor_release(&s);
  gr_tensor_release(&r1);
}

static void test_npy_round_trip_every_dtype(void) {
  static const gr_dtype dts[] = {GR_F32, GR_F64, GR_I32, GR_I64, GR_U8, GR_BOOL};
  gt_rng r = {42};
  for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++)
    for (int rank = 0; rank <= 3; rank++) {
      gr_tensor t = gt_random(&r, dts[k], gt_random_shape(&r, rank, 5), -100, 100), back;
      gr_error err;
      const char *path = tmp_path("rt.npy");
      GR_CHECK_OK(gr_data_write_npy(&t, path, &err), err);
      GR_CHECK_OK(gr_data_load_npy(path, &back, &err), err);
      GR_CHECK(back.dtype == t.dtype && gr_shape_equal(&back.shape, &t.shape));
      GR_CHECK(memcmp(gr_tensor_data(&back), gr_tensor_data(&t), gr_tensor_num_bytes(&t)) == 0);
      gr_tensor_release(&t);
      gr_tensor_release(&back);
    }
}

static void test_npy_refused(void) {
  gr_error err;
  gr_tensor t = gr_tensor_scalar_i32(1), back;
  const char *path = tmp_path("bad.npy");
  FILE *f = fopen(path, "wb");
  static const char hdr[] = "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }  \n";
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, sizeof hdr - 1, 0};
  fwrite(pre, 1, sizeof pre, f);
  fwrite(hdr, 1, sizeof hdr - 1, f);
  fwrite("\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 1, 16, f);
  fclose(f);
  GR_CHECK(gr_data_load_npy(path, &back, &err) == GR_ERR_UNIMPLEMENTED);
  GR_CHECK_STR_CONTAINS(err.msg, "bad.npy: dtype '<c8' is not supported");
  GR_CHECK(gr_data_write_npy(&t, "/nonexistent-dir/x.npy", &err) == GR_ERR_IO);
  GR_CHECK_STR_CONTAINS(err.msg, "/nonexistent-dir/x.npy");
  gr_tensor_release(&t);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/gr_test_npy_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  GR_RUN(test_npy_write_format);
  GR_RUN(test_npy_round_trip_every_dtype);
  GR_RUN(test_npy_refused);
  gt_remove_tree(dir);
  return gr_test_finish();
}

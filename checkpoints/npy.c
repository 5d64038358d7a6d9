/* Exporting a tensor as a NumPy .npy file (format version 1.0). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "checkpoints/gr_checkpoints.h"

static const char *npy_descr(gr_dtype t) {
  switch (t) {
    case GR_F32:
      return "<f4";
    case GR_F64:
      return "<f8";
    case GR_I32:
      return "<i4";
    case GR_I64:
      return "<i8";
    case GR_U8:
      return "|u1";
    case GR_BOOL:
      return "|b1";
    default:
      return NULL;
  }
}

gr_status gr_ckpt_write_npy(const gr_tensor *t, const char *path, gr_error *err) {
  const char *descr = npy_descr(t->dtype);
  if (!descr)
    return gr_error_set(err, GR_ERR_DTYPE, "cannot export dtype %s to .npy",
                        gr_dtype_name(t->dtype));
  char hdr[512];
  int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int i = 0; i < t->shape.rank; i++)
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%lld,%s", (long long)t->shape.dims[i],
                  i + 1 < t->shape.rank ? " " : "");
  if (t->shape.rank > 1) n--; /* NumPy writes (2, 3), but (2,) for rank 1 */
  n += snprintf(hdr + n, sizeof hdr - (size_t)n, "), }");
  /* magic(6) + version(2) + len(2) + header, padded with spaces to a multiple of 64, ending \n */
  size_t total = 10 + (size_t)n + 1;
  size_t pad = (64 - total % 64) % 64;
  memset(hdr + n, ' ', pad);
  hdr[n + (int)pad] = '\n';
  unsigned hlen = (unsigned)n + (unsigned)pad + 1;
  FILE *f = fopen(path, "wb");
  if (!f) return gr_error_set(err, GR_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
  unsigned char pre[10] = {0x93,
                           'N',
                           'U',
                           'M',
                           'P',
                           'Y',
                           1,
                           0,
                           (unsigned char)(hlen & 0xff),
                           (unsigned char)(hlen >> 8)};
  size_t nb = gr_tensor_num_bytes(t);
  bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, hlen, f) == hlen &&
            (nb == 0 || fwrite(gr_tensor_data(t), 1, nb, f) == nb);
  ok = (fclose(f) == 0) && ok;
  if (!ok) return gr_error_set(err, GR_ERR_IO, "writing '%s' failed: %s", path, strerror(errno));
  return GR_OK;
}

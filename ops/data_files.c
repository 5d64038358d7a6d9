/* Reading tensors from data files: the IDX format of MNIST and
 * Fashion-MNIST and NumPy .npy files, raw or gzip-compressed (zlib reads
 * plain files through); and writing .npy files (the one .npy codec). Used by the
 * read_idx / read_npy ops and by the command line's --feed. Every length in a
 * header is checked against a maximum and against the bytes present. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

#define MAX_FILE_ELEMENTS ((int64_t)1 << 34)

/* Reads exactly `bytes` (in chunks: gzread takes an unsigned count). */
static bool read_all(gzFile f, void *dst, size_t bytes) {
  size_t got = 0;
  while (got < bytes) {
    unsigned chunk = bytes - got > (1u << 30) ? 1u << 30 : (unsigned)(bytes - got);
    int r = gzread(f, (char *)dst + got, chunk);
    if (r <= 0) return false;
    got += (size_t)r;
  }
  return true;
}

/* ---- IDX -------------------------------------------------------------------------------- */

static gr_status idx_header(gzFile f, const char *path, gr_dtype *dt, int *src_size,
                            gr_shape *shape, gr_error *err) {
  unsigned char h[4];
  if (gzread(f, h, 4) != 4)
    return gr_error_set(err, GR_ERR_DATA_LOSS, "%s: too short for an IDX header", path);
  if (h[0] != 0 || h[1] != 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "%s: not an IDX file (magic %02x %02x, expected 00 00)", path, h[0], h[1]);
  switch (h[2]) {
    case 0x08:
      *dt = GR_U8, *src_size = 1;
      break;
    case 0x09:
      *dt = GR_I32, *src_size = 1;
      break; /* i8, widened */
    case 0x0B:
      *dt = GR_I32, *src_size = 2;
      break; /* i16, widened */
    case 0x0C:
      *dt = GR_I32, *src_size = 4;
      break;
    case 0x0D:
      *dt = GR_F32, *src_size = 4;
      break;
    case 0x0E:
      *dt = GR_F64, *src_size = 8;
      break;
    default:
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s: unknown IDX element type 0x%02x", path,
                          h[2]);
  }
  if (h[3] < 1 || h[3] > GR_MAX_RANK)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s: IDX rank %d out of range [1, %d]", path,
                        h[3], GR_MAX_RANK);
  *shape = gr_shape_make(h[3], NULL);
  int64_t n = 1;
  for (int i = 0; i < h[3]; i++) {
    unsigned char d[4];
    if (gzread(f, d, 4) != 4)
      return gr_error_set(err, GR_ERR_DATA_LOSS, "%s: IDX header truncated", path);
    shape->dims[i] = (int64_t)d[0] << 24 | (int64_t)d[1] << 16 | (int64_t)d[2] << 8 | d[3];
    n *= shape->dims[i] ? shape->dims[i] : 1;
    if (n > MAX_FILE_ELEMENTS)
      return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "%s: IDX tensor too large", path);
  }
  return GR_OK;
}

/* Converts the IDX data (big-endian, src_size bytes an element) into out. */
static gr_status idx_body(gzFile f, const char *path, int src, gr_tensor *out, gr_error *err) {
  gr_status s = GR_OK;
  gr_dtype dt = out->dtype;
  int64_t n = gr_tensor_num_elements(out);
  size_t bytes = (size_t)n * (size_t)src;
  unsigned char *raw = src == (int)gr_dtype_size(dt) ? gr_tensor_data(out) : malloc(bytes + 1);
  if (!raw) {
    s = gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "%s: out of memory", path);
  } else if (!read_all(f, raw, bytes)) {
    s = gr_error_set(err, GR_ERR_DATA_LOSS, "%s: truncated: fewer than %zu data bytes", path,
                     bytes);
  } else {
    /* big-endian source -> host order in the tensor's dtype */
    for (int64_t i = 0; i < n; i++) {
      const unsigned char *p = raw + i * src;
      switch (src) {
        case 1:
          if (dt == GR_I32) ((int32_t *)gr_tensor_data(out))[i] = (int8_t)p[0];
          break;
        case 2:
          ((int32_t *)gr_tensor_data(out))[i] = (int16_t)(p[0] << 8 | p[1]);
          break;
        case 4: {
          uint32_t u = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
          memcpy((char *)gr_tensor_data(out) + i * 4, &u, 4);
          break;
        }
        case 8: {
          uint64_t u = 0;
          for (int b = 0; b < 8; b++) u = u << 8 | p[b];
          memcpy((char *)gr_tensor_data(out) + i * 8, &u, 8);
          break;
        }
      }
    }
  }
  if (raw && raw != gr_tensor_data(out)) free(raw);
  return s;
}

/* ---- .npy -------------------------------------------------------------------------------- */

/* The format's dtypes, both ways: the first of a dtype is what is written. */
static const struct {
  const char *descr;
  gr_dtype dt;
} npy_kinds[] = {{"<f4", GR_F32}, {"<f8", GR_F64}, {"<i4", GR_I32}, {"<i8", GR_I64},
                 {"|u1", GR_U8},  {"<u1", GR_U8},  {"|b1", GR_BOOL}};

/* Finds 'key': in the header dict and returns a pointer after the colon. */
static const char *npy_field(const char *h, const char *key) {
  const char *p = strstr(h, key);
  if (!p) return NULL;
  p += strlen(key);
  while (*p == ' ' || *p == '\'' || *p == '"') p++;
  if (*p != ':') return NULL;
  p++;
  while (*p == ' ') p++;
  return p;
}

/* The quoted value a header field starts with ('<c8' -> <c8), printable
 * characters only and cut to fit, for messages. */
static void npy_quoted(const char *v, char *out, size_t cap) {
  size_t n = 0;
  char q = *v == '\'' || *v == '"' ? *v++ : '\0';
  for (; *v && *v != q && (q || (*v != ',' && *v != '}')) && n + 4 < cap; v++)
    out[n++] = *v >= 32 && *v < 127 ? *v : '?';
  if (*v && *v != q && n + 4 >= cap) out[n++] = '.', out[n++] = '.', out[n++] = '.';
  out[n] = '\0';
}

static gr_status npy_header(gzFile f, const char *path, gr_dtype *dt, int *src_size,
                            gr_shape *shape, gr_error *err) {
  unsigned char m[10];
  if (gzread(f, m, 10) != 10 || memcmp(m, "\x93NUMPY", 6) != 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s: not a .npy file (bad magic)", path);
  size_t hlen = m[8] | (size_t)m[9] << 8;
  if (m[6] >= 2) {
    unsigned char e[2];
    if (gzread(f, e, 2) != 2) return gr_error_set(err, GR_ERR_DATA_LOSS, "%s: truncated", path);
    hlen |= (size_t)e[0] << 16 | (size_t)e[1] << 24;
  }
  if (hlen > 65536) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s: header too long", path);
  char *h = calloc(hlen + 1, 1);
  if (!h) return gr_error_set_oom(err);
  gr_status s = GR_OK;
  if (gzread(f, h, (unsigned)hlen) != (int)hlen) {
    s = gr_error_set(err, GR_ERR_DATA_LOSS, "%s: header truncated", path);
    goto done;
  }
  const char *d = npy_field(h, "descr"), *fo = npy_field(h, "fortran_order"),
             *sh = npy_field(h, "shape");
  if (!d || !fo || !sh) {
    s = gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s: header lacks descr/fortran_order/shape",
                     path);
    goto done;
  }
  bool found = false;
  for (size_t k = 0; k < sizeof npy_kinds / sizeof npy_kinds[0] && !found; k++) {
    size_t n = strlen(npy_kinds[k].descr);
    if (*d == '\'' && strncmp(d + 1, npy_kinds[k].descr, n) == 0 && d[1 + n] == '\'') {
      *dt = npy_kinds[k].dt;
      found = true;
    }
  }
  if (!found) {
    char shown[24];
    npy_quoted(d, shown, sizeof shown);
    s = gr_error_set(
        err, GR_ERR_UNIMPLEMENTED,
        "%s: dtype '%s' is not supported (supported: '<f4', '<f8', '<i4', '<i8', '|u1', "
        "'|b1', that is f32, f64, i32, i64, u8, bool)",
        path, shown);
    goto done;
  }
  if (strncmp(fo, "False", 5) != 0) {
    s = gr_error_set(err, GR_ERR_UNIMPLEMENTED, "%s: Fortran-order arrays are not supported", path);
    goto done;
  }
  if (*sh != '(') {
    s = gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s: malformed shape", path);
    goto done;
  }
  *shape = gr_shape_make(0, NULL);
  const char *p = sh + 1;
  int64_t n = 1;
  while (*p && *p != ')') {
    while (*p == ' ' || *p == ',') p++;
    if (*p == ')') break;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 0 || shape->rank == GR_MAX_RANK) {
      s = gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s: malformed or too long shape", path);
      goto done;
    }
    shape->dims[shape->rank++] = v;
    n *= v ? v : 1;
    if (n > MAX_FILE_ELEMENTS) {
      s = gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "%s: tensor too large", path);
      goto done;
    }
    p = end;
  }
  *src_size = (int)gr_dtype_size(*dt);
done:
  free(h);
  return s;
}

/* Reads the .npy data (little-endian, as the tensor holds it) into out. */
static gr_status npy_body(gzFile f, const char *path, int src, gr_tensor *out, gr_error *err) {
  size_t bytes = gr_tensor_num_bytes(out);
  if (!read_all(f, gr_tensor_data(out), bytes))
    return gr_error_set(err, GR_ERR_DATA_LOSS, "%s: truncated: fewer than %zu data bytes", path,
                        bytes);
  if (out->dtype == GR_BOOL)
    for (size_t i = 0; i < bytes; i++)
      if (((unsigned char *)gr_tensor_data(out))[i] > 1)
        return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s: bool element %zu is not 0 or 1",
                            path, i);
  return GR_OK;
}

/* ---- both formats ------------------------------------------------------------------------ */

/* A format's header reader: the dtype and shape of the tensor and the bytes
 * an element takes in the file (src_size); and its data reader, into a
 * tensor of that dtype and shape. */
typedef gr_status header_fn(gzFile f, const char *path, gr_dtype *dt, int *src_size,
                            gr_shape *shape, gr_error *err);
typedef gr_status body_fn(gzFile f, const char *path, int src_size, gr_tensor *out, gr_error *err);

/* Opens path and reads its header into *dt and *shape (or, when NULL,
 * locals); with body (not NULL) also the data, into *out (allocated here;
 * empty on failure). */
static gr_status read_file(const char *path, header_fn *header, body_fn *body, gr_dtype *dt,
                           gr_shape *shape, gr_tensor *out, gr_error *err) {
  gr_dtype dt_;
  gr_shape shape_;
  if (!dt) dt = &dt_;
  if (!shape) shape = &shape_;
  if (out) *out = gr_tensor_empty();
  gzFile f = gzopen(path, "rb");
  if (!f) return gr_error_set(err, GR_ERR_NOT_FOUND, "%s: cannot open", path);
  if (body) gzbuffer(f, 1 << 17);
  int src;
  gr_status s = header(f, path, dt, &src, shape, err);
  if (s == GR_OK && body) {
    s = gr_tensor_alloc(out, *dt, shape, err);
    if (s == GR_OK) s = body(f, path, src, out, err);
    if (s != GR_OK) gr_tensor_release(out);
  }
  gzclose(f);
  return s;
}

gr_status gr_data_idx_info(const char *path, gr_dtype *dtype, gr_shape *shape, gr_error *err) {
  return read_file(path, idx_header, NULL, dtype, shape, NULL, err);
}
gr_status gr_data_load_idx(const char *path, gr_tensor *out, gr_error *err) {
  return read_file(path, idx_header, idx_body, NULL, NULL, out, err);
}
gr_status gr_data_npy_info(const char *path, gr_dtype *dtype, gr_shape *shape, gr_error *err) {
  return read_file(path, npy_header, NULL, dtype, shape, NULL, err);
}
gr_status gr_data_load_npy(const char *path, gr_tensor *out, gr_error *err) {
  return read_file(path, npy_header, npy_body, NULL, NULL, out, err);
}

gr_status gr_data_write_npy(const gr_tensor *t, const char *path, gr_error *err) {
  const char *descr = NULL;
  for (size_t k = 0; k < sizeof npy_kinds / sizeof npy_kinds[0] && !descr; k++)
    if (npy_kinds[k].dt == t->dtype) descr = npy_kinds[k].descr;
  if (!descr)
    return gr_error_set(err, GR_ERR_DTYPE, "cannot write dtype %s to .npy",
                        gr_dtype_name(t->dtype));
  char hdr[512];
  int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int i = 0; i < t->shape.rank; i++)
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%lld,%s", (long long)t->shape.dims[i],
                  i + 1 < t->shape.rank ? " " : "");
  if (t->shape.rank > 1) n--; /* NumPy writes (2, 3), but (2,) for rank 1 */
  n += snprintf(hdr + n, sizeof hdr - (size_t)n, "), }");
  /* magic(6) + version(2) + len(2) + header, padded with spaces to a multiple of 64, ending \n */
  size_t pad = (64 - (10 + (size_t)n + 1) % 64) % 64;
  memset(hdr + n, ' ', pad);
  hdr[n + (int)pad] = '\n';
  unsigned hlen = (unsigned)n + (unsigned)pad + 1;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, hlen & 0xff, hlen >> 8};
  FILE *f = fopen(path, "wb");
  if (!f) return gr_error_set(err, GR_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
  size_t nb = gr_tensor_num_bytes(t);
  bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, hlen, f) == hlen &&
            (nb == 0 || fwrite(gr_tensor_data(t), 1, nb, f) == nb);
  ok = (fclose(f) == 0) && ok;
  if (!ok) return gr_error_set(err, GR_ERR_IO, "writing '%s' failed: %s", path, strerror(errno));
  return GR_OK;
}

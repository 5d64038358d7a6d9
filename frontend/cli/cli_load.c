/* graphrun CLI: loading .gr files and feed tensors (IDX, IDX.gz, .npy, CSV). */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "cli_util.h"
#include "commands.h"

double cli_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int cli_load_graph(const char *cmd, const char *path, uint64_t seed, gr_graph **g,
                   gr_dsl_program **p) {
  *g = gr_graph_new();
  *p = NULL;
  if (!*g) {
    fprintf(stderr, "graphrun %s: out of memory\n", cmd);
    return GR_EXIT_FAILURE;
  }
  gr_graph_set_seed(*g, seed);
  gr_error err;
  if (gr_dsl_load_file(path, *g, NULL, p, &err) != GR_OK) {
    if (strstr(err.msg, ": error: "))
      fprintf(stderr, "%s\n", err.msg);
    else
      fprintf(stderr, "graphrun %s: %s\n", cmd, err.msg);
    gr_dsl_program_free(*p);
    gr_graph_free(*g);
    *p = NULL;
    *g = NULL;
    return GR_EXIT_USAGE;
  }
  return GR_EXIT_OK;
}

#define MAX_FEED_BYTES (4ull << 30)

/* The whole file, decompressed when gzip (gzread passes plain files through). */
static gr_status slurp(const char *path, unsigned char **data, size_t *len, gr_error *err) {
  gzFile f = gzopen(path, "rb");
  if (!f) return gr_error_set(err, GR_ERR_NOT_FOUND, "cannot open '%s'", path);
  size_t cap = 1 << 16, n = 0;
  unsigned char *buf = malloc(cap);
  for (;;) {
    if (!buf) break;
    if (n == cap) {
      if (cap >= MAX_FEED_BYTES) {
        free(buf);
        gzclose(f);
        return gr_error_set(err, GR_ERR_OUT_OF_RANGE, "'%s' is larger than 4 GiB", path);
      }
      unsigned char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
    int r = gzread(f, buf + n, (unsigned)(cap - n > (1u << 30) ? (1u << 30) : cap - n));
    if (r < 0) {
      int e;
      const char *m = gzerror(f, &e);
      gr_error_set(err, GR_ERR_DATA_LOSS, "'%s': %s", path, m);
      free(buf);
      gzclose(f);
      return GR_ERR_DATA_LOSS;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  gzclose(f);
  if (!buf) return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory reading '%s'", path);
  *data = buf;
  *len = n;
  return GR_OK;
}

static bool ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcmp(s + a - b, suf) == 0;
}

static uint64_t be32(const unsigned char *p) {
  return ((uint64_t)p[0] << 24) | ((uint64_t)p[1] << 16) | ((uint64_t)p[2] << 8) | p[3];
}

/* IDX: 0 0 type rank, rank big-endian u32 dims, big-endian data. */
static gr_status read_idx(const char *path, const unsigned char *d, size_t len, gr_tensor *out,
                          gr_error *err) {
  if (len < 4 || d[0] || d[1])
    return gr_error_set(err, GR_ERR_DATA_LOSS, "'%s': not an IDX file", path);
  int type = d[2], rank = d[3];
  if (rank > GR_MAX_RANK || len < 4 + 4 * (size_t)rank)
    return gr_error_set(err, GR_ERR_DATA_LOSS, "'%s': IDX header truncated or rank %d > %d", path,
                        rank, GR_MAX_RANK);
  gr_dtype dt;
  size_t es;
  switch (type) {
    case 0x08:
      dt = GR_U8, es = 1;
      break;
    case 0x09:
      dt = GR_I32, es = 1;
      break; /* i8, widened */
    case 0x0B:
      dt = GR_I32, es = 2;
      break;
    case 0x0C:
      dt = GR_I32, es = 4;
      break;
    case 0x0D:
      dt = GR_F32, es = 4;
      break;
    case 0x0E:
      dt = GR_F64, es = 8;
      break;
    default:
      return gr_error_set(err, GR_ERR_DATA_LOSS, "'%s': unknown IDX type 0x%02x", path, type);
  }
  gr_shape s = {.rank = rank};
  uint64_t count = 1;
  for (int i = 0; i < rank; i++) {
    s.dims[i] = (int64_t)be32(d + 4 + 4 * i);
    count *= (uint64_t)s.dims[i];
    if (count > (1ull << 40))
      return gr_error_set(err, GR_ERR_DATA_LOSS, "'%s': IDX dims too large", path);
  }
  size_t off = 4 + 4 * (size_t)rank;
  if ((len - off) / es < count)
    return gr_error_set(err, GR_ERR_DATA_LOSS, "'%s': IDX data truncated: %llu elements expected",
                        path, (unsigned long long)count);
  GR_TRY(gr_tensor_alloc(out, dt, &s, err));
  const unsigned char *q = d + off;
  for (uint64_t i = 0; i < count; i++, q += es) {
    double v;
    if (type == 0x08)
      v = q[0];
    else if (type == 0x09)
      v = (int8_t)q[0];
    else if (type == 0x0B)
      v = (int16_t)(((unsigned)q[0] << 8) | q[1]);
    else if (type == 0x0C)
      v = (int32_t)be32(q);
    else if (type == 0x0D) {
      uint32_t u = (uint32_t)be32(q);
      float f;
      memcpy(&f, &u, 4);
      v = f;
    } else {
      uint64_t u = (be32(q) << 32) | be32(q + 4);
      double f;
      memcpy(&f, &u, 8);
      v = f;
    }
    gr_tensor_set_f64(out, (int64_t)i, v);
  }
  return GR_OK;
}

/* .npy version 1-3: magic, header dict {'descr', 'fortran_order', 'shape'}, data. */
static gr_status read_npy(const char *path, const unsigned char *d, size_t len, gr_tensor *out,
                          gr_error *err) {
  if (len < 10 || memcmp(d, "\x93NUMPY", 6) != 0)
    return gr_error_set(err, GR_ERR_DATA_LOSS, "'%s': not a .npy file", path);
  size_t hl, off;
  if (d[6] == 1)
    hl = d[8] | ((size_t)d[9] << 8), off = 10;
  else if (len >= 12)
    hl = (size_t)d[8] | ((size_t)d[9] << 8) | ((size_t)d[10] << 16) | ((size_t)d[11] << 24),
    off = 12;
  else
    return gr_error_set(err, GR_ERR_DATA_LOSS, "'%s': .npy header truncated", path);
  if (hl > len - off)
    return gr_error_set(err, GR_ERR_DATA_LOSS, "'%s': .npy header truncated", path);
  char hdr[4096];
  size_t n = hl < sizeof hdr - 1 ? hl : sizeof hdr - 1;
  memcpy(hdr, d + off, n);
  hdr[n] = '\0';
  const char *descr = strstr(hdr, "'descr'"), *fo = strstr(hdr, "'fortran_order'"),
             *sh = strstr(hdr, "'shape'");
  if (!descr || !fo || !sh)
    return gr_error_set(err, GR_ERR_DATA_LOSS, "'%s': bad .npy header", path);
  const char *q = strchr(descr + 7, '\'');
  if (!q) return gr_error_set(err, GR_ERR_DATA_LOSS, "'%s': bad .npy descr", path);
  char ds[16] = {0};
  for (int i = 0; i < 15 && q[1 + i] && q[1 + i] != '\''; i++) ds[i] = q[1 + i];
  if (strstr(fo, "True") && strstr(fo, "True") < sh)
    return gr_error_set(err, GR_ERR_UNIMPLEMENTED, "'%s': Fortran-order .npy is not supported",
                        path);
  static const struct {
    const char *d;
    gr_dtype t;
    size_t es;
  } types[] = {{"<f4", GR_F32, 4}, {"<f8", GR_F64, 8}, {"<i4", GR_I32, 4},
               {"<i8", GR_I64, 8}, {"|u1", GR_U8, 1},  {"|b1", GR_BOOL, 1}};
  int ti = -1;
  for (int i = 0; i < 6; i++)
    if (strcmp(ds, types[i].d) == 0) ti = i;
  if (ti < 0)
    return gr_error_set(err, GR_ERR_UNIMPLEMENTED,
                        "'%s': .npy dtype '%s' is not supported (f4 f8 i4 i8 u1 b1, little-endian)",
                        path, ds);
  gr_shape s = {0};
  const char *c = strchr(sh, '(');
  if (!c) return gr_error_set(err, GR_ERR_DATA_LOSS, "'%s': bad .npy shape", path);
  c++;
  uint64_t count = 1;
  while (*c && *c != ')') {
    while (*c == ' ' || *c == ',') c++;
    if (*c == ')') break;
    if (!isdigit((unsigned char)*c) || s.rank >= GR_MAX_RANK)
      return gr_error_set(err, GR_ERR_DATA_LOSS, "'%s': bad .npy shape", path);
    char *end;
    unsigned long long v = strtoull(c, &end, 10);
    c = end;
    if (v > (1ull << 40))
      return gr_error_set(err, GR_ERR_DATA_LOSS, "'%s': .npy dim too large", path);
    s.dims[s.rank++] = (int64_t)v;
    count *= v;
    if (count > (1ull << 40))
      return gr_error_set(err, GR_ERR_DATA_LOSS, "'%s': .npy too large", path);
  }
  off += hl;
  if ((len - off) / types[ti].es < count)
    return gr_error_set(err, GR_ERR_DATA_LOSS, "'%s': .npy data truncated", path);
  GR_TRY(gr_tensor_alloc(out, types[ti].t, &s, err));
  if (types[ti].t == GR_BOOL)
    for (uint64_t i = 0; i < count; i++) gr_tensor_set_f64(out, (int64_t)i, d[off + i] != 0);
  else
    memcpy(gr_tensor_data(out), d + off, count * types[ti].es);
  return GR_OK;
}

/* CSV: rows of numbers separated by ',' (or spaces); [rows, cols], or [n] for one column. */
static gr_status read_csv(const char *path, const unsigned char *d, size_t len, gr_tensor *out,
                          gr_error *err) {
  char *text = malloc(len + 1);
  if (!text) return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  memcpy(text, d, len);
  text[len] = '\0';
  size_t cap = 1024, n = 0;
  double *vals = malloc(cap * sizeof *vals);
  long rows = 0, cols = -1, line = 0;
  char *save = NULL;
  gr_status st = GR_OK;
  for (char *ln = strtok_r(text, "\n", &save); ln && vals; ln = strtok_r(NULL, "\n", &save)) {
    line++;
    char *p = ln;
    while (*p == ' ' || *p == '\t' || *p == '\r') p++;
    if (!*p || *p == '#') continue;
    long c = 0;
    while (*p) {
      char *end;
      double v = strtod(p, &end);
      if (end == p) {
        if (rows == 0 && c == 0 && line == 1) break; /* a header line */
        st = gr_error_set(err, GR_ERR_DATA_LOSS, "'%s':%ld: not a number: '%.20s'", path, line, p);
        break;
      }
      if (n == cap) {
        double *nv = realloc(vals, cap * 2 * sizeof *vals);
        if (!nv) {
          free(vals);
          vals = NULL;
          break;
        }
        vals = nv;
        cap *= 2;
      }
      vals[n++] = v;
      c++;
      p = end;
      while (*p == ' ' || *p == '\t' || *p == '\r' || *p == ',') p++;
    }
    if (st != GR_OK || !vals) break;
    if (c == 0) continue;
    if (cols >= 0 && c != cols) {
      st = gr_error_set(err, GR_ERR_DATA_LOSS, "'%s':%ld: %ld columns, expected %ld", path, line, c,
                        cols);
      break;
    }
    cols = c;
    rows++;
  }
  free(text);
  if (!vals) return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  if (st == GR_OK && rows == 0) st = gr_error_set(err, GR_ERR_DATA_LOSS, "'%s': no numbers", path);
  if (st == GR_OK) {
    gr_shape s = cols == 1 ? (gr_shape){1, {rows}} : (gr_shape){2, {rows, cols}};
    st = gr_tensor_alloc(out, GR_F64, &s, err);
    if (st == GR_OK) memcpy(gr_tensor_data(out), vals, n * sizeof *vals);
  }
  free(vals);
  return st;
}

gr_status cli_read_tensor(const char *path, gr_dtype dtype, gr_tensor *out, gr_error *err) {
  *out = gr_tensor_empty();
  char *end;
  double v = strtod(path, &end);
  gr_tensor raw;
  if (end != path && *end == '\0' && access(path, F_OK) != 0) {
    GR_TRY(gr_tensor_alloc(&raw, GR_F64, &(gr_shape){0, {0}}, err));
    gr_tensor_set_f64(&raw, 0, v);
  } else {
    unsigned char *d = NULL;
    size_t len = 0;
    GR_TRY(slurp(path, &d, &len, err));
    gr_status st;
    if (len >= 6 && memcmp(d, "\x93NUMPY", 6) == 0)
      st = read_npy(path, d, len, &raw, err);
    else if (len >= 4 && d[0] == 0 && d[1] == 0 && !ends_with(path, ".csv"))
      st = read_idx(path, d, len, &raw, err);
    else
      st = read_csv(path, d, len, &raw, err);
    free(d);
    GR_TRY(st);
  }
  if (dtype == GR_DTYPE_INVALID || dtype == raw.dtype) {
    *out = raw;
    return GR_OK;
  }
  gr_status st = gr_tensor_alloc(out, dtype, &raw.shape, err);
  if (st == GR_OK)
    for (int64_t i = 0; i < gr_tensor_num_elements(&raw); i++)
      gr_tensor_set_f64(out, i, gr_tensor_get_f64(&raw, i));
  gr_tensor_release(&raw);
  return st;
}

/* graphrun CLI: loading .gr files and feed tensors (IDX and .npy through ops/data_files.c,
 * raw or gzip; CSV; a plain number). */
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
  return cli_load_graph_on(cmd, path, seed, NULL, NULL, NULL, 0, g, p);
}

/* What cli_load_graph, _on and _with do: DSL options o, device as for _on. */
static int load_graph(const char *cmd, const char *path, uint64_t seed, const gr_dsl_options *o,
                      const char *device, gr_graph **g, gr_dsl_program **p) {
  *g = gr_graph_new();
  *p = NULL;
  if (!*g) {
    fprintf(stderr, "graphrun %s: out of memory\n", cmd);
    return GR_EXIT_FAILURE;
  }
  gr_graph_set_seed(*g, seed);
  gr_error err;
  /* the program's default device (TensorFlow's `with tf.device(...)` around a
   * worker's model); its pins and device functions nest inside */
  gr_status st = GR_OK;
  if (device && (st = gr_graph_push_device_scope(*g, device)) != GR_OK)
    gr_error_set(&err, st, "device '%s': %s", device, gr_graph_error(*g)->msg);
  if (st == GR_OK) st = gr_dsl_load_file(path, *g, o, p, &err);
  if (device) gr_graph_pop_device_scope(*g);
  if (st != GR_OK) {
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

int cli_load_graph_on(const char *cmd, const char *path, uint64_t seed, const gr_cluster *cluster,
                      const char *device, const char *job, int task_index, gr_graph **g,
                      gr_dsl_program **p) {
  gr_dsl_options o = {.cluster = cluster, .job = job, .task_index = task_index};
  return load_graph(cmd, path, seed, &o, device, g, p);
}

int cli_load_graph_with(const char *cmd, const char *path, const gr_dsl_options *o, gr_graph **g,
                        gr_dsl_program **p) {
  return load_graph(cmd, path, 0, o, NULL, g, p);
}

int cli_split_names(char *s, const char **names, int n) {
  for (char *save = NULL, *t = strtok_r(s, ",", &save); t && n < CLI_MAX_NAMES;
       t = strtok_r(NULL, ",", &save))
    if (*t) names[n++] = t;
  return n;
}

void cli_default_names(const gr_dsl_program *p, const char **fetch, int *nfetch,
                       const char **target, int *ntarget) {
  bool default_targets = *ntarget == 0;
  for (int i = 0; default_targets && i < gr_dsl_num_targets(p) && *ntarget < CLI_MAX_NAMES; i++)
    target[(*ntarget)++] = gr_dsl_target_name(p, i);
  if (*nfetch) return;
  for (int i = 0; i < gr_dsl_num_fetches(p) && *nfetch < CLI_MAX_NAMES; i++) {
    const char *name = gr_dsl_fetch_name(p, i);
    gr_output o;
    if (!gr_dsl_lookup(p, name, &o) || o.index >= 0) {
      fetch[(*nfetch)++] = name; /* an unknown name is reported by the lookup */
      continue;
    }
    /* no outputs: a train op (`train = minimize(...)` bound last) runs instead */
    bool listed = !default_targets;
    for (int k = 0; k < *ntarget && !listed; k++) listed = strcmp(target[k], name) == 0;
    if (!listed && *ntarget < CLI_MAX_NAMES) target[(*ntarget)++] = name;
  }
}

int cli_lookup_names(const char *cmd, const gr_dsl_program *p, const char *const *names, int n,
                     bool fetch, gr_output *out) {
  for (int i = 0; i < n; i++) {
    bool found = gr_dsl_lookup(p, names[i], &out[i]);
    if (fetch && (!found || out[i].index < 0)) {
      fprintf(stderr, "graphrun %s: cannot fetch '%s': %s\n", cmd, names[i],
              found ? "it has no outputs (use --target)" : "no such name or node");
      return GR_EXIT_USAGE;
    }
    if (!found) {
      fprintf(stderr, "graphrun %s: unknown target '%s'\n", cmd, names[i]);
      return GR_EXIT_USAGE;
    }
  }
  return GR_EXIT_OK;
}

#define MAX_FEED_BYTES (4ull << 30)

/* The array p of *cap elements of `size` bytes moved to twice the
 * capacity; NULL, with p freed, when out of memory. */
static void *double_or_free(void *p, size_t *cap, size_t size) {
  void *np = gr_realloc_array(p, *cap * 2, size);
  if (!np)
    free(p);
  else
    *cap *= 2;
  return np;
}

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
      if (!(buf = double_or_free(buf, &cap, 1))) break;
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

/* The field at p, up to 20 bytes and the next separator, shown safely: a
 * byte outside printable ASCII as \xNN (a message never echoes raw bytes). */
static void csv_field(const char *p, char *buf, size_t cap) {
  size_t n = 0;
  for (int k = 0; p[k] && k < 20 && !strchr(", \t\r", p[k]) && n + 5 < cap; k++) {
    unsigned char c = (unsigned char)p[k];
    n += (size_t)snprintf(buf + n, cap - n, c >= 32 && c < 127 ? "%c" : "\\x%02x", c);
  }
  buf[n] = '\0';
}

/* CSV: rows of numbers separated by ',' (or spaces); [rows, cols], or [n] for one column. */
static gr_status read_csv(const char *path, const unsigned char *d, size_t len, gr_tensor *out,
                          gr_error *err) {
  for (size_t i = 0; i < len; i++) /* text only: control bytes mean another format */
    if ((d[i] < 32 && !strchr("\t\n\r", d[i])) || d[i] == 127)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "'%s' is not an IDX, .npy or CSV file (byte %zu is 0x%02x: binary data, "
                          "and CSV is text)",
                          path, i, d[i]);
  char *text = malloc(len + 1);
  if (!text) return gr_error_set_oom(err);
  memcpy(text, d, len);
  text[len] = '\0';
  size_t cap = 1024, n = 0;
  double *vals = gr_alloc_array(cap, sizeof *vals);
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
        char field[96];
        csv_field(p, field, sizeof field);
        st = gr_error_set(err, GR_ERR_DATA_LOSS, "'%s':%ld: not a number: '%s'", path, line, field);
        break;
      }
      if (n == cap) {
        if (!(vals = double_or_free(vals, &cap, sizeof *vals))) break;
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
  if (!vals) return gr_error_set_oom(err);
  if (st == GR_OK && rows == 0) st = gr_error_set(err, GR_ERR_DATA_LOSS, "'%s': no numbers", path);
  if (st == GR_OK) {
    gr_shape s = cols == 1 ? (gr_shape){1, {rows}} : (gr_shape){2, {rows, cols}};
    st = gr_tensor_alloc(out, GR_F64, &s, err);
    if (st == GR_OK) memcpy(gr_tensor_data(out), vals, n * sizeof *vals);
  }
  free(vals);
  return st;
}

/* "5" (a scalar) or "1,2,3" (a vector): true when all of s is numbers
 * separated by commas; *n gets their count (stored in vals when not NULL). */
static bool parse_inline(const char *s, double *vals, int64_t *n) {
  *n = 0;
  for (const char *p = s;; p++) {
    char *end;
    double v = strtod(p, &end);
    if (end == p) return false;
    if (vals) vals[*n] = v;
    ++*n;
    p = end;
    if (*p == '\0') return true;
    if (*p != ',') return false;
  }
}

bool cli_is_inline_value(const char *s) {
  int64_t n;
  return parse_inline(s, NULL, &n) && access(s, F_OK) != 0;
}

gr_status cli_read_tensor(const char *path, gr_dtype dtype, gr_tensor *out, gr_error *err) {
  *out = gr_tensor_empty();
  gr_tensor raw;
  int64_t n;
  if (cli_is_inline_value(path)) {
    parse_inline(path, NULL, &n);
    bool vector = strchr(path, ',') != NULL;
    GR_TRY(gr_tensor_alloc(&raw, GR_F64, &(gr_shape){vector ? 1 : 0, {n}}, err));
    parse_inline(path, gr_tensor_data(&raw), &n);
  } else {
    /* the format from the first bytes (after gzip): .npy, IDX, else CSV */
    unsigned char head[6] = {0};
    gzFile f = gzopen(path, "rb");
    if (!f) return gr_error_set(err, GR_ERR_NOT_FOUND, "cannot open '%s'", path);
    int n = gzread(f, head, sizeof head);
    gzclose(f);
    if (n >= 6 && memcmp(head, "\x93NUMPY", 6) == 0) {
      GR_TRY(gr_data_load_npy(path, &raw, err));
    } else if (n >= 4 && head[0] == 0 && head[1] == 0 && !ends_with(path, ".csv")) {
      GR_TRY(gr_data_load_idx(path, &raw, err));
    } else {
      unsigned char *d = NULL;
      size_t len = 0;
      GR_TRY(slurp(path, &d, &len, err));
      gr_status st = read_csv(path, d, len, &raw, err);
      free(d);
      GR_TRY(st);
    }
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

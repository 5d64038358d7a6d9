/* graphrun ckpt: inspect checkpoint files (docs/checkpoints.md).
 *   ls PATH [--step N]            checkpoints, or the tensors of one
 *   show PATH NAME [--step N] [--full]   a tensor, printed like NumPy
 *   diff PATH [A B] [--other PATH2]      compare two checkpoints
 *   verify PATH                   integrity_check and every checksum
 *   export PATH [--step N] [--out DIR] [NAME...]   tensors as .npy files
 * Exit codes: 0 ok, 1 runtime failure (damaged file; diff: differences
 * found, like diff(1)), 2 usage or input error. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "checkpoints/gr_checkpoints.h"
#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"

static const char usage_text[] =
    "usage: graphrun ckpt COMMAND PATH [ARGS...]\n\n"
    "Inspects a checkpoint file (a SQLite database, see docs/checkpoints.md), or a sharded\n"
    "checkpoint directory (a cluster's: one file per task and a manifest), seen as one file\n"
    "holding the merged tensors; verify names a missing or damaged shard.\n\n"
    "  ls PATH [--step N]                  list the checkpoints (newest last), or with --step\n"
    "                                      (-1: newest) the tensors of one checkpoint\n"
    "  show PATH NAME [--step N] [--full]  print a tensor like NumPy (long ones shortened\n"
    "                                      unless --full); the checksum is verified\n"
    "  diff PATH [A B] [--other PATH2]     compare the checkpoints at steps A and B (default:\n"
    "                                      the two newest); with --other, PATH's checkpoint\n"
    "                                      (A, default newest) against PATH2's (B, default "
    "newest)\n"
    "  verify PATH                         PRAGMA integrity_check, then every tensor's size\n"
    "                                      and checksum\n"
    "  export PATH [--step N] [--out DIR] [NAME...]\n"
    "                                      write tensors (default: all) as DIR/NAME.npy\n"
    "                                      (default DIR '.'; '/' in names makes subdirectories)\n\n"
    "Exit codes: 0 ok; 1 runtime failure (a damaged file; for diff: the checkpoints differ);\n"
    "2 usage or input error (missing file, not a checkpoint file, unknown tensor or step).\n";

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "graphrun ckpt: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (try graphrun ckpt --help)\n");
  return GR_EXIT_USAGE;
}

static int fail(const gr_error *err) {
  fprintf(stderr, "graphrun ckpt: %s\n", err->msg);
  switch (err->code) {
    case GR_ERR_NOT_FOUND:
    case GR_ERR_INVALID_ARGUMENT:
    case GR_ERR_FAILED_PRECONDITION:
    case GR_ERR_UNIMPLEMENTED:
      return GR_EXIT_USAGE;
    default:
      return GR_EXIT_FAILURE;
  }
}

static bool parse_step(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!*s || *end || errno || v < -1) return false;
  *out = v;
  return true;
}

static gr_ckpt *open_ro(const char *path, int *rc) {
  gr_ckpt *ck;
  gr_error err;
  gr_ckpt_options o = {.read_only = true};
  if (gr_ckpt_open(path, &o, &ck, &err) != GR_OK) {
    *rc = fail(&err);
    return NULL;
  }
  return ck;
}

static void human_bytes(int64_t b, char *buf, size_t cap) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int i = 0;
  while (v >= 1024 && i < 4) v /= 1024, i++;
  snprintf(buf, cap, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

/* ---- ls ------------------------------------------------------------------------ */

/* A sharded directory: the shard files of its newest checkpoint. */
static int print_shards(gr_ckpt *ck) {
  gr_ckpt_shard_info *sh;
  int n;
  gr_error err;
  char size[32];
  if (!gr_ckpt_is_sharded(ck)) return GR_EXIT_OK;
  if (gr_ckpt_list_shards(ck, -1, &sh, &n, &err) != GR_OK) return fail(&err);
  printf("shards of the newest checkpoint (in %s):\n", gr_ckpt_path(ck));
  for (int i = 0; i < n; i++) {
    human_bytes(sh[i].total_bytes, size, sizeof size);
    printf("  %-24s %-28s %4d tensors %10s\n", sh[i].file, sh[i].task, sh[i].num_tensors, size);
  }
  gr_ckpt_shard_infos_free(sh, n);
  return GR_EXIT_OK;
}

static int cmd_ls(gr_ckpt *ck, bool has_step, int64_t step) {
  gr_error err;
  char size[32];
  if (has_step) {
    gr_ckpt_tensor_info *t;
    int n;
    if (gr_ckpt_list_tensors(ck, step, &t, &n, &err) != GR_OK) return fail(&err);
    printf("%-32s %-5s %-18s %10s  %s\n", "name", "dtype", "shape", "bytes", "checksum");
    for (int i = 0; i < n; i++) {
      char sh[GR_SHAPE_STR_MAX];
      human_bytes(t[i].nbytes, size, sizeof size);
      printf("%-32s %-5s %-18s %10s  %016" PRIx64 "\n", t[i].name, gr_dtype_name(t[i].dtype),
             gr_shape_str(&t[i].shape, sh), size, t[i].checksum);
    }
    gr_ckpt_tensor_infos_free(t, n);
    return GR_EXIT_OK;
  }
  gr_ckpt_info *c;
  int n;
  if (gr_ckpt_list(ck, &c, &n, &err) != GR_OK) return fail(&err);
  printf("%10s  %-20s %7s %10s  %-16s  %s\n", "step", "time (UTC)", "tensors", "bytes",
         "fingerprint", "metadata");
  for (int i = 0; i < n; i++) {
    time_t secs = (time_t)c[i].time;
    struct tm tm;
    char when[32] = "?";
    if (gmtime_r(&secs, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    human_bytes(c[i].total_bytes, size, sizeof size);
    printf("%10" PRId64 "  %-20s %7d %10s  %-16s  %s\n", c[i].step, when, c[i].num_tensors, size,
           c[i].fingerprint, c[i].metadata);
  }
  if (n == 0) printf("(no checkpoints)\n");
  gr_ckpt_infos_free(c, n);
  return n ? print_shards(ck) : GR_EXIT_OK;
}

/* ---- show: NumPy-like printing --------------------------------------------------- */

#define EDGE 3

typedef struct printer {
  const gr_tensor *t;
  bool summarize;
  int width; /* measured in a first pass */
  bool measure;
} printer;

static int fmt_elem(const gr_tensor *t, int64_t i, char *buf, size_t cap) {
  double v = gr_tensor_get_f64(t, i);
  if (t->dtype == GR_BOOL) return snprintf(buf, cap, "%s", v != 0 ? "True" : "False");
  if (gr_dtype_is_integer(t->dtype)) {
    if (t->dtype == GR_I64)
      return snprintf(buf, cap, "%" PRId64, ((const int64_t *)gr_tensor_data(t))[i]);
    return snprintf(buf, cap, "%.0f", v);
  }
  int n = snprintf(buf, cap, "%.8g", v); /* NumPy's default precision */
  if (!strpbrk(buf, ".eEni")) n += snprintf(buf + n, cap - (size_t)n, "."); /* 1. like NumPy */
  return n;
}

static void put_elem(printer *p, int64_t i) {
  char buf[64];
  int n = fmt_elem(p->t, i, buf, sizeof buf);
  if (p->measure) {
    if (n > p->width) p->width = n;
  } else {
    printf("%*s", p->width, buf);
  }
}

static void out(printer *p, const char *s) {
  if (!p->measure) fputs(s, stdout);
}

/* Prints the sub-array at flat offset `base` starting at axis `ax`. */
static void print_axis(printer *p, int ax, int64_t base, int indent) {
  const gr_shape *sh = &p->t->shape;
  int64_t dim = sh->dims[ax], stride = 1;
  for (int k = ax + 1; k < sh->rank; k++) stride *= sh->dims[k];
  bool cut = p->summarize && dim > 2 * EDGE;
  out(p, "[");
  for (int64_t i = 0; i < dim; i++) {
    if (cut && i == EDGE) {
      if (ax == sh->rank - 1)
        out(p, "... ");
      else {
        out(p, "...,\n");
        for (int k = 0; k < sh->rank - 2 - ax; k++) out(p, "\n");
        for (int k = 0; k < indent + 1; k++) out(p, " ");
      }
      i = dim - EDGE;
    }
    if (ax == sh->rank - 1) {
      put_elem(p, base + i);
      if (i + 1 < dim) out(p, " ");
    } else {
      print_axis(p, ax + 1, base + i * stride, indent + 1);
      if (i + 1 < dim) {
        out(p, "\n");
        for (int k = 0; k < sh->rank - 2 - ax; k++) out(p, "\n");
        for (int k = 0; k < indent + 1; k++) out(p, " ");
      }
    }
  }
  out(p, "]");
}

static void print_tensor(const gr_tensor *t, bool full) {
  int64_t n = gr_tensor_num_elements(t);
  printer p = {t, !full && n > 1000, 0, true};
  if (t->shape.rank == 0) {
    char buf[64];
    fmt_elem(t, 0, buf, sizeof buf);
    printf("%s\n", buf);
    return;
  }
  if (n == 0) {
    printf("[]\n");
    return;
  }
  print_axis(&p, 0, 0, 0); /* measure */
  p.measure = false;
  print_axis(&p, 0, 0, 0);
  printf("\n");
}

static int cmd_show(gr_ckpt *ck, const char *name, int64_t step, bool full) {
  gr_tensor t;
  gr_error err;
  if (gr_ckpt_read_tensor(ck, step, name, &t, &err) != GR_OK) return fail(&err);
  int64_t actual = step;
  if (step < 0) gr_ckpt_latest_step(ck, &actual, &err);
  char sh[GR_SHAPE_STR_MAX], size[32];
  human_bytes((int64_t)gr_tensor_num_bytes(&t), size, sizeof size);
  printf("%s: %s %s (%s), step %" PRId64 ", checksum ok\n", name, gr_dtype_name(t.dtype),
         gr_shape_str(&t.shape, sh), size, actual);
  print_tensor(&t, full);
  gr_tensor_release(&t);
  return GR_EXIT_OK;
}

/* ---- diff ------------------------------------------------------------------------- */

static int diff_tensor(gr_ckpt *a, int64_t sa, gr_ckpt *b, int64_t sb,
                       const gr_ckpt_tensor_info *ta, const gr_ckpt_tensor_info *tb) {
  char s1[GR_SHAPE_STR_MAX], s2[GR_SHAPE_STR_MAX];
  if (ta->dtype != tb->dtype || !gr_shape_equal(&ta->shape, &tb->shape)) {
    printf("~ %s: %s %s -> %s %s\n", ta->name, gr_dtype_name(ta->dtype),
           gr_shape_str(&ta->shape, s1), gr_dtype_name(tb->dtype), gr_shape_str(&tb->shape, s2));
    return 1;
  }
  if (ta->checksum == tb->checksum) return 0; /* same bytes (to 64-bit hash certainty) */
  gr_tensor x, y;
  gr_error err;
  if (gr_ckpt_read_tensor(a, sa, ta->name, &x, &err) != GR_OK) {
    fail(&err);
    return -1;
  }
  if (gr_ckpt_read_tensor(b, sb, tb->name, &y, &err) != GR_OK) {
    fail(&err);
    gr_tensor_release(&x);
    return -1;
  }
  /* equal bytes under other checksums: a partitioned variable assembled from
   * slices (whose checksum hashes theirs) against one saved whole */
  size_t nb = gr_tensor_num_bytes(&x);
  if (nb == gr_tensor_num_bytes(&y) &&
      (nb == 0 || !memcmp(gr_tensor_data(&x), gr_tensor_data(&y), nb))) {
    gr_tensor_release(&x);
    gr_tensor_release(&y);
    return 0;
  }
  int64_t n = gr_tensor_num_elements(&x), differ = 0;
  double maxd = 0;
  for (int64_t i = 0; i < n; i++) {
    double u = gr_tensor_get_f64(&x, i), v = gr_tensor_get_f64(&y, i);
    if (u != v || memcmp((char *)gr_tensor_data(&x) + i * (int64_t)gr_dtype_size(x.dtype),
                         (char *)gr_tensor_data(&y) + i * (int64_t)gr_dtype_size(y.dtype),
                         gr_dtype_size(x.dtype)) != 0) {
      differ++;
      double d = u > v ? u - v : v - u;
      if (d > maxd || d != d) maxd = d;
    }
  }
  printf("~ %s: %" PRId64 " of %" PRId64 " elements differ, max |a-b| = %g\n", ta->name, differ, n,
         maxd);
  gr_tensor_release(&x);
  gr_tensor_release(&y);
  return 1;
}

static int cmd_diff(gr_ckpt *a, int64_t sa, gr_ckpt *b, int64_t sb) {
  gr_ckpt_tensor_info *ta, *tb;
  int na, nb;
  gr_error err;
  if (gr_ckpt_list_tensors(a, sa, &ta, &na, &err) != GR_OK) return fail(&err);
  if (gr_ckpt_list_tensors(b, sb, &tb, &nb, &err) != GR_OK) {
    gr_ckpt_tensor_infos_free(ta, na);
    return fail(&err);
  }
  int64_t xa = sa, xb = sb;
  if (sa < 0) gr_ckpt_latest_step(a, &xa, &err);
  if (sb < 0) gr_ckpt_latest_step(b, &xb, &err);
  printf("--- %s step %" PRId64 "\n+++ %s step %" PRId64 "\n", gr_ckpt_path(a), xa, gr_ckpt_path(b),
         xb);
  int i = 0, j = 0, changes = 0, same = 0, rc = GR_EXIT_OK;
  while (i < na || j < nb) { /* both sorted by name */
    int c = i >= na ? 1 : j >= nb ? -1 : strcmp(ta[i].name, tb[j].name);
    if (c < 0) {
      printf("- %s (only in a)\n", ta[i++].name);
      changes++;
    } else if (c > 0) {
      printf("+ %s (only in b)\n", tb[j++].name);
      changes++;
    } else {
      int d = diff_tensor(a, xa, b, xb, &ta[i++], &tb[j++]);
      if (d < 0)
        rc = GR_EXIT_FAILURE;
      else if (d)
        changes++;
      else
        same++;
    }
  }
  printf("%d tensors identical, %d differ\n", same, changes);
  gr_ckpt_tensor_infos_free(ta, na);
  gr_ckpt_tensor_infos_free(tb, nb);
  if (rc != GR_EXIT_OK) return GR_EXIT_USAGE; /* trouble, like diff(1) */
  return changes ? GR_EXIT_FAILURE : GR_EXIT_OK;
}

/* ---- verify ------------------------------------------------------------------------ */

static void print_problem(void *arg, const char *problem) {
  (void)arg;
  printf("problem: %s\n", problem);
}

static int cmd_verify(gr_ckpt *ck) {
  gr_error err;
  int checked = 0;
  gr_status s = gr_ckpt_verify(ck, print_problem, NULL, &checked, &err);
  if (s == GR_OK) {
    printf("%s: ok (integrity_check ok, %d tensors checked)\n", gr_ckpt_path(ck), checked);
    return GR_EXIT_OK;
  }
  fprintf(stderr, "graphrun ckpt verify: %s: %s\n", gr_ckpt_path(ck), err.msg);
  return GR_EXIT_FAILURE;
}

/* ---- export ------------------------------------------------------------------------ */

/* dir/name.npy (cli_out_path: subdirectories for '/', nothing outside dir). */
static int export_one(gr_ckpt *ck, int64_t step, const char *dir, const char *name) {
  char *path;
  int rc = cli_out_path("ckpt export", dir, name, ".npy", &path);
  if (rc != GR_EXIT_OK) return rc;
  gr_tensor t;
  gr_error err;
  if (gr_ckpt_read_tensor(ck, step, name, &t, &err) != GR_OK) {
    rc = fail(&err);
  } else {
    if (gr_data_write_npy(&t, path, &err) != GR_OK)
      rc = fail(&err);
    else
      printf("%s\n", path);
    gr_tensor_release(&t);
  }
  free(path);
  return rc;
}

static int cmd_export(gr_ckpt *ck, int64_t step, const char *dir, char **names, int nnames) {
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    fprintf(stderr, "graphrun ckpt export: output directory '%s' does not exist\n", dir);
    return GR_EXIT_USAGE;
  }
  int rc = GR_EXIT_OK;
  if (nnames > 0) {
    for (int i = 0; i < nnames; i++) {
      int r = export_one(ck, step, dir, names[i]);
      if (r > rc) rc = r;
    }
    return rc;
  }
  gr_ckpt_tensor_info *t;
  int n;
  gr_error err;
  if (gr_ckpt_list_tensors(ck, step, &t, &n, &err) != GR_OK) return fail(&err);
  for (int i = 0; i < n; i++) {
    int r = export_one(ck, step, dir, t[i].name);
    if (r > rc) rc = r;
  }
  gr_ckpt_tensor_infos_free(t, n);
  return rc;
}

/* ---- dispatch ------------------------------------------------------------------------ */

enum { F_STEP = 256, F_OUT, F_OTHER, F_FULL };

static const struct option ckpt_flags[] = {
    {"help", no_argument, NULL, 'h'},        {"step", required_argument, NULL, F_STEP},
    {"out", required_argument, NULL, F_OUT}, {"other", required_argument, NULL, F_OTHER},
    {"full", no_argument, NULL, F_FULL},     {0},
};

/* One ckpt command's arguments. */
typedef struct ckpt_args {
  const char *cmd; /* ls, show, diff, verify, export */
  const char *out_dir, *other;
  int64_t step, sa, sb; /* --step; diff's steps A and B */
  bool has_step, full, has_out;
  char **pos; /* the positional arguments: PATH first */
  int npos;
} ckpt_args;

/* Returned while the command goes on. */
#define CKPT_GO (-1)

/* The flags and arguments after the command's name (argv[1]). */
static int parse_args(int argc, char **argv, ckpt_args *a) {
  cli_opts po;
  cli_opts_start(&po, "ckpt", argc - 1, argv + 1, ckpt_flags, "h", CLI_OPTS_NUMBERS);
  for (int c; (c = cli_opts_next(&po)) != CLI_OPTS_END;) {
    if (c == F_STEP) {
      if (!parse_step(po.arg, &a->step)) return cli_opt_bad(&po, "a step number (-1: the newest)");
      a->has_step = true;
    } else if (c == F_OUT) {
      a->out_dir = po.arg, a->has_out = true;
    } else if (c == F_OTHER) {
      a->other = po.arg;
    } else if (c == F_FULL) {
      a->full = true;
    } else if (c == CLI_OPTS_ARG) {
      a->pos[a->npos++] = po.arg;
    } else {
      return GR_EXIT_USAGE;
    }
  }
  return CKPT_GO;
}

/* Which flags and how many arguments the command takes; diff's steps. */
static int check_args(ckpt_args *a) {
  const char *cmd = a->cmd;
  char **pos = a->pos;
  int npos = a->npos;
  if (npos < 1) return usage_error("%s needs a checkpoint file PATH", cmd);
  bool want_step = !strcmp(cmd, "ls") || !strcmp(cmd, "show") || !strcmp(cmd, "export");
  if (a->has_step && !want_step) return usage_error("%s takes no --step", cmd);
  if (a->full && strcmp(cmd, "show")) return usage_error("%s takes no --full", cmd);
  if (a->other && strcmp(cmd, "diff")) return usage_error("%s takes no --other", cmd);
  if (a->has_out && strcmp(cmd, "export")) return usage_error("%s takes no --out", cmd);
  if (!strcmp(cmd, "show") && npos != 2) return usage_error("%s needs PATH and a tensor NAME", cmd);
  if ((!strcmp(cmd, "ls") || !strcmp(cmd, "verify")) && npos != 1)
    return usage_error("unexpected argument '%s'", pos[npos - 1]);
  if (strcmp(cmd, "diff")) return CKPT_GO;
  if (npos > 3) return usage_error("unexpected argument '%s'", pos[3]);
  if (npos >= 2 && !parse_step(pos[1], &a->sa)) return usage_error("bad step '%s'", pos[1]);
  if (npos >= 3 && !parse_step(pos[2], &a->sb)) return usage_error("bad step '%s'", pos[2]);
  if (npos == 2 && !a->other) return usage_error("diff needs two steps A B (got only %s)", pos[1]);
  return CKPT_GO;
}

/* diff PATH without steps: the two newest checkpoints of ck. */
static int newest_two(gr_ckpt *ck, ckpt_args *a) {
  gr_ckpt_info *c;
  int n, rc = CKPT_GO;
  gr_error err;
  if (gr_ckpt_list(ck, &c, &n, &err) != GR_OK) return fail(&err);
  if (n < 2) {
    fprintf(stderr, "graphrun ckpt diff: '%s' holds %d checkpoint%s; give --other PATH2\n",
            a->pos[0], n, n == 1 ? "" : "s");
    rc = GR_EXIT_USAGE;
  } else {
    a->sa = c[n - 2].step;
    a->sb = c[n - 1].step;
  }
  gr_ckpt_infos_free(c, n);
  return rc;
}

/* The command on the open files (ck2: diff's other file, or NULL). */
static int dispatch(const ckpt_args *a, gr_ckpt *ck, gr_ckpt *ck2) {
  const char *cmd = a->cmd;
  if (!strcmp(cmd, "ls")) return cmd_ls(ck, a->has_step, a->step);
  if (!strcmp(cmd, "show")) return cmd_show(ck, a->pos[1], a->step, a->full);
  if (!strcmp(cmd, "diff")) return cmd_diff(ck, a->sa, ck2 ? ck2 : ck, a->sb);
  if (!strcmp(cmd, "verify")) return cmd_verify(ck);
  return cmd_export(ck, a->step, a->out_dir, a->pos + 1, a->npos - 1);
}

/* Opens PATH (and diff's other file) and runs the command. */
static int run_ckpt_command(ckpt_args *a) {
  int rc = CKPT_GO;
  const char *cmd = a->cmd;
  gr_ckpt *ck = open_ro(a->pos[0], &rc), *ck2 = NULL;
  if (rc == CKPT_GO && !strcmp(cmd, "diff")) {
    if (a->other)
      ck2 = open_ro(a->other, &rc);
    else if (a->npos == 1)
      rc = newest_two(ck, a);
  }
  if (rc == CKPT_GO) rc = dispatch(a, ck, ck2);
  gr_ckpt_close(ck);
  gr_ckpt_close(ck2);
  return rc;
}

int gr_cmd_ckpt(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage_text, stderr);
    return GR_EXIT_USAGE;
  }
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(usage_text, stdout);
      return GR_EXIT_OK;
    }
  const char *cmd = argv[1];
  if (strcmp(cmd, "ls") && strcmp(cmd, "show") && strcmp(cmd, "diff") && strcmp(cmd, "verify") &&
      strcmp(cmd, "export"))
    return usage_error("unknown command '%s'", cmd);
  ckpt_args a = {.cmd = cmd, .out_dir = ".", .step = -1, .sa = -1, .sb = -1};
  if (!(a.pos = calloc((size_t)argc, sizeof *a.pos))) return GR_EXIT_FAILURE;
  int rc = parse_args(argc, argv, &a);
  if (rc == CKPT_GO) rc = check_args(&a);
  if (rc == CKPT_GO) rc = run_ckpt_command(&a);
  free(a.pos);
  return rc;
}

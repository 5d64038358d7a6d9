/* graphrun CLI: NumPy-like tensor printing, JSON output and the progress display. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_util.h"

#define EDGE      3
#define THRESHOLD 1000

/* The shortest "%g" form of v with at most max_digits significant digits
 * that reads back as v exactly (as a float when f32), else max_digits: the
 * text is 0.4, not 0.40000001, for the float nearest 0.4. Trying from 6
 * digits is enough: a shorter form shows as itself there (%g drops zeros). */
static void shortest(char *buf, size_t cap, double v, bool f32, int max_digits) {
  for (int prec = 6; prec <= max_digits; prec++) {
    snprintf(buf, cap, "%.*g", prec, v);
    double back = strtod(buf, NULL);
    if (f32 ? (float)back == (float)v : back == v) return;
  }
}

/* Element i of an integer tensor, exact (an i64 above 2^53 is not a double). */
static long long int_elem(const gr_tensor *t, int64_t i) {
  if (t->dtype == GR_I64) return (long long)((const int64_t *)gr_tensor_data(t))[i];
  return (long long)gr_tensor_get_f64(t, i);
}

static void format_elem(const gr_tensor *t, int64_t i, char *buf, size_t cap, bool scalar) {
  double v = gr_tensor_get_f64(t, i);
  if (t->dtype == GR_BOOL)
    snprintf(buf, cap, "%s", v != 0 ? "True" : "False");
  else if (gr_dtype_is_integer(t->dtype))
    snprintf(buf, cap, "%lld", int_elem(t, i));
  else if (isnan(v))
    snprintf(buf, cap, "nan");
  else if (isinf(v))
    snprintf(buf, cap, "%sinf", v < 0 ? "-" : "");
  else if (v == floor(v) && fabs(v) < 1e16)
    snprintf(buf, cap, scalar ? "%.1f" : "%.0f.", v);
  else
    shortest(buf, cap, v, t->dtype == GR_F32, 8); /* as NumPy: 8 digits at most */
}

typedef struct printer {
  FILE *f;
  const gr_tensor *t;
  bool shorten;
  int width;
  bool measure;
} printer;

static void walk(printer *pr, int axis, int64_t base, int indent) {
  const gr_shape *s = &pr->t->shape;
  int64_t n = s->dims[axis];
  int64_t stride = 1;
  for (int k = axis + 1; k < s->rank; k++) stride *= s->dims[k];
  if (!pr->measure) fputc('[', pr->f);
  for (int64_t i = 0; i < n; i++) {
    if (pr->shorten && n > 2 * EDGE && i == EDGE) {
      if (!pr->measure) {
        if (axis == s->rank - 1)
          fputs(" ...", pr->f);
        else
          fprintf(pr->f, "\n%*s...", indent + 1, "");
      }
      i = n - EDGE - 1;
      continue;
    }
    if (!pr->measure && i > 0) {
      if (axis == s->rank - 1)
        fputc(' ', pr->f);
      else {
        for (int k = axis; k < s->rank - 1; k++) fputc('\n', pr->f);
        fprintf(pr->f, "%*s", indent + 1, "");
      }
    } else if (!pr->measure && i == 0 && pr->shorten && n > 2 * EDGE && false) {
    }
    if (axis == s->rank - 1) {
      char buf[64];
      format_elem(pr->t, base + i, buf, sizeof buf, false);
      int w = (int)strlen(buf);
      if (pr->measure) {
        if (w > pr->width) pr->width = w;
      } else {
        fprintf(pr->f, "%*s", pr->width, buf);
      }
    } else {
      walk(pr, axis + 1, base + i * stride, indent + 1);
    }
  }
  if (!pr->measure) fputc(']', pr->f);
}

void cli_print_tensor(FILE *f, const gr_tensor *t) {
  if (gr_tensor_is_empty(t) && gr_tensor_num_elements(t) != 0) {
    fputs("(empty)", f);
    return;
  }
  if (t->shape.rank == 0) {
    char buf[64];
    format_elem(t, 0, buf, sizeof buf, true);
    fputs(buf, f);
    return;
  }
  for (int k = 0; k < t->shape.rank; k++)
    if (t->shape.dims[k] == 0) {
      fputs("[]", f);
      return;
    }
  printer pr = {f, t, gr_tensor_num_elements(t) > THRESHOLD, 0, true};
  walk(&pr, 0, 0, 0);
  pr.measure = false;
  walk(&pr, 0, 0, 0);
}

static void json_rec(FILE *f, const gr_tensor *t, int axis, int64_t base) {
  const gr_shape *s = &t->shape;
  if (axis == s->rank) {
    double v = gr_tensor_get_f64(t, base);
    if (t->dtype == GR_BOOL)
      fputs(v != 0 ? "true" : "false", f);
    else if (gr_dtype_is_integer(t->dtype))
      fprintf(f, "%lld", int_elem(t, base));
    else if (isnan(v)) /* JSON has no NaN or infinity: strings, as pandas reads them */
      fputs("\"NaN\"", f);
    else if (isinf(v))
      fputs(v > 0 ? "\"Infinity\"" : "\"-Infinity\"", f);
    else { /* full round-trip precision: 9 digits make any float exact, 17 any double */
      char buf[40];
      shortest(buf, sizeof buf, v, t->dtype == GR_F32, t->dtype == GR_F32 ? 9 : 17);
      fputs(buf, f);
    }
    return;
  }
  int64_t stride = 1;
  for (int k = axis + 1; k < s->rank; k++) stride *= s->dims[k];
  fputc('[', f);
  for (int64_t i = 0; i < s->dims[axis]; i++) {
    if (i) fputs(", ", f);
    json_rec(f, t, axis + 1, base + i * stride);
  }
  fputc(']', f);
}

void cli_print_tensor_json(FILE *f, const gr_tensor *t) {
  fprintf(f, "{\"dtype\": \"%s\", \"shape\": [", gr_dtype_name(t->dtype));
  for (int k = 0; k < t->shape.rank; k++)
    fprintf(f, "%s%lld", k ? ", " : "", (long long)t->shape.dims[k]);
  fputs("], \"data\": ", f);
  json_rec(f, t, 0, 0);
  fputc('}', f);
}

/* ---- progress ---------------------------------------------------------------------- */

void cli_progress_start(cli_progress *pr, long total, FILE *out) {
  pr->total = total;
  pr->start = pr->last_print = cli_now();
  pr->tty = isatty(fileno(out));
  pr->last_line_step = 0;
  pr->out = out;
}

static void fmt_eta(double s, char *buf, size_t cap) {
  if (!isfinite(s) || s < 0) s = 0;
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    snprintf(buf, cap, "%02ld:%02ld", t / 60, t % 60);
}

void cli_progress_update(cli_progress *pr, long step, const char *name, bool has_scalar,
                         double value) {
  double now = cli_now(), el = now - pr->start;
  /* most steps print nothing: decide that before formatting anything */
  long every = pr->total / 10 > 0 ? pr->total / 10 : 1;
  if (pr->tty && now - pr->last_print < 0.1 && step < pr->total) return;
  if (!pr->tty &&
      ((step - pr->last_line_step < every && now - pr->last_print < 2.0 && step < pr->total) ||
       step == pr->last_line_step))
    return;
  double rate = el > 0 ? step / el : 0;
  char eta[32], sc[96] = "";
  fmt_eta(rate > 0 ? (pr->total - step) / rate : 0, eta, sizeof eta);
  if (has_scalar) snprintf(sc, sizeof sc, "  %s=%.6g", name, value);
  pr->last_print = now;
  if (pr->tty) {
    int w = 30, fill = pr->total > 0 ? (int)(w * step / pr->total) : w;
    char bar[40];
    for (int i = 0; i < w; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[w] = '\0';
    fprintf(pr->out, "\r[%s] %ld/%ld  %.1f step/s  ETA %s%s\033[K", bar, step, pr->total, rate, eta,
            sc);
    fflush(pr->out);
    return;
  }
  pr->last_line_step = step;
  fprintf(pr->out, "step %ld/%ld  %.1f step/s  ETA %s%s\n", step, pr->total, rate, eta, sc);
  fflush(pr->out);
}

void cli_progress_finish(cli_progress *pr, long steps) {
  double el = cli_now() - pr->start;
  if (pr->tty) fputc('\n', pr->out);
  fprintf(pr->out, "%ld steps in %.2f s (%.1f step/s)\n", steps, el, el > 0 ? steps / el : 0.0);
}

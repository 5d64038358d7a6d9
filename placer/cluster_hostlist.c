/* Slurm's node lists ("node[01-03,07],gpu5,big[1-2]": names, bracket ranges
 * and lists with their zero padding, several groups in one name), checked
 * whole before anything is expanded; every error names the variable and the
 * column. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "placer_internal.h"

#define MAX_DIGITS 9

static bool name_char(int c) {
  return isalnum(c) || c == '.' || c == '-' || c == '_';
}

/* "VAR:1:COL: what (in "LIST")" for the character s[i] of the list in VAR. */
static gr_status list_error(gr_error *err, const char *var, const char *s, size_t i,
                            const char *what, const char *arg) {
  char msg[300];
  snprintf(msg, sizeof msg, what, arg);
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s:1:%zu: %s (in \"%.80s%s\")", var, i + 1,
                      msg, s, strlen(s) > 80 ? "..." : "");
}

static const char *char_text(char c, char *buf) {
  if (c >= 0x20 && c < 0x7f)
    snprintf(buf, 16, "'%c'", c);
  else
    snprintf(buf, 16, "byte 0x%02x", (unsigned char)c);
  return buf;
}

/* Reads 1..MAX_DIGITS digits at s[*i]. */
static gr_status read_number(const char *var, const char *s, size_t *i, unsigned long *v,
                             int *width, gr_error *err) {
  size_t start = *i;
  char b[16];
  if (!isdigit((unsigned char)s[*i]))
    return list_error(err, var, s, *i, "expected a number in the range list, found %s",
                      s[*i] ? char_text(s[*i], b) : "the end");
  *v = 0;
  while (isdigit((unsigned char)s[*i])) {
    if (*i - start == MAX_DIGITS)
      return list_error(err, var, s, start, "number longer than 9 digits%s", "");
    *v = *v * 10 + (unsigned long)(s[*i] - '0');
    (*i)++;
  }
  *width = (int)(*i - start);
  return GR_OK;
}

/* Checks the whole list's syntax before anything is expanded. */
static gr_status check_list(const char *var, const char *s, gr_error *err) {
  size_t i = 0;
  char b[16];
  if (!s[0]) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s: empty node list", var);
  for (;;) {
    if (s[i] == ',' || !s[i]) return list_error(err, var, s, i, "empty node name%s", "");
    while (s[i] && s[i] != ',') {
      if (name_char((unsigned char)s[i])) {
        i++;
      } else if (s[i] == '[') {
        size_t open = i++;
        for (;;) {
          unsigned long lo, hi;
          int w;
          size_t at = i;
          if (!s[i]) return list_error(err, var, s, open, "'[' is not closed%s", "");
          GR_TRY(read_number(var, s, &i, &lo, &w, err));
          hi = lo;
          if (s[i] == '-') {
            i++;
            GR_TRY(read_number(var, s, &i, &hi, &w, err));
            if (hi < lo) {
              char r[48];
              snprintf(r, sizeof r, "%lu-%lu", lo, hi);
              return list_error(err, var, s, at, "descending range %s", r);
            }
          }
          if (s[i] == ',') {
            i++;
            continue;
          }
          if (s[i] == ']') {
            i++;
            break;
          }
          if (!s[i]) return list_error(err, var, s, open, "'[' is not closed%s", "");
          return list_error(err, var, s, i, "expected ',' or ']' in the range list, found %s",
                            char_text(s[i], b));
        }
      } else if (s[i] == ']') {
        return list_error(err, var, s, i, "']' without '['%s", "");
      } else {
        return list_error(err, var, s, i, "bad character %s in a node name", char_text(s[i], b));
      }
    }
    if (!s[i]) return GR_OK;
    i++; /* ',' */
  }
}

typedef struct expansion {
  const char *var, *s;
  char (*names)[GR_CLUSTER_HOST_MAX];
  int n, limit; /* names kept, at most limit */
  size_t host_start;
  gr_error *err;
} expansion;

enum { EXPAND_MORE, EXPAND_FULL, EXPAND_ERROR };

/* Expands the host expression from s[i] (up to ',' or the end) after the
 * prefix name[0 .. len). */
static int expand(expansion *x, size_t i, char *name, size_t len) {
  const char *s = x->s;
  while (s[i] && s[i] != ',' && s[i] != '[') {
    if (len + 1 >= GR_CLUSTER_HOST_MAX) goto too_long;
    name[len++] = s[i++];
  }
  if (s[i] != '[') {
    name[len] = '\0';
    for (int k = 0; k < x->n; k++)
      if (strcmp(x->names[k], name) == 0) {
        list_error(x->err, x->var, x->s, x->host_start, "node \"%s\" is listed twice", name);
        return EXPAND_ERROR;
      }
    memcpy(x->names[x->n++], name, len + 1);
    return x->n == x->limit ? EXPAND_FULL : EXPAND_MORE;
  }
  size_t j = i + 1, close = i;
  while (s[close] != ']') close++;
  while (j < close) {
    unsigned long lo, hi;
    int w, wh;
    read_number(x->var, s, &j, &lo, &w, NULL);
    hi = lo;
    if (s[j] == '-') {
      j++;
      read_number(x->var, s, &j, &hi, &wh, NULL);
    }
    if (s[j] == ',') j++;
    for (unsigned long v = lo; v <= hi; v++) {
      char digits[32];
      int dn = snprintf(digits, sizeof digits, "%0*lu", w, v);
      if (len + (size_t)dn >= GR_CLUSTER_HOST_MAX) goto too_long;
      memcpy(name + len, digits, (size_t)dn);
      int r = expand(x, close + 1, name, len + (size_t)dn);
      if (r != EXPAND_MORE) return r;
    }
  }
  return EXPAND_MORE;
too_long:
  list_error(x->err, x->var, x->s, x->host_start, "node name longer than %s characters", "253");
  return EXPAND_ERROR;
}

gr_status gr_slurm_nodelist_expand(const char *var, const char *s,
                                   char (*names)[GR_CLUSTER_HOST_MAX], int limit, int *n,
                                   gr_error *err) {
  *n = 0;
  if (!var) var = "node list";
  if (!s) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s: no node list", var);
  GR_TRY(check_list(var, s, err));
  expansion x = {.var = var, .s = s, .names = names, .limit = limit, .err = err};
  char name[GR_CLUSTER_HOST_MAX];
  size_t i = 0;
  for (;;) {
    x.host_start = i;
    int r = expand(&x, i, name, 0);
    if (r == EXPAND_ERROR) return err ? err->code : GR_ERR_INVALID_ARGUMENT;
    if (r == EXPAND_FULL) break;
    while (s[i] && s[i] != ',') {
      if (s[i] == '[')
        while (s[i] != ']') i++;
      i++;
    }
    if (!s[i]) break;
    i++;
  }
  *n = x.n;
  return GR_OK;
}

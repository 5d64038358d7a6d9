/* docs/distributed.md's "Wire format" tables hold what the code sends:
 * every kind of message of GR_MSG_LIST has one row in the table of kinds,
 * with its direction, exactly the fields of its spec (the names in
 * backquotes in its map column) and its limits; every kind that is
 * answered has one row in the table of results, with exactly the results
 * of its spec. The specs are the lists the msg_*.c files pack and read
 * (test_wire_msgs.c checks them against the frames). */
#include <graphrun.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/msg_internal.h"
#include "gr_test.h"
#include "test_util.h"

#define MAX_CELLS 8
#define MAX_NAMES 32

typedef struct row {
  char cells[MAX_CELLS][1024];
  int num_cells;
} row;

/* The cells of a table line "| a | b |", trimmed; false when it is none. */
static bool split_row(const char *line, size_t len, row *r) {
  r->num_cells = 0;
  if (len < 2 || line[0] != '|') return false;
  const char *p = line + 1, *end = line + len;
  while (p < end && r->num_cells < MAX_CELLS) {
    const char *bar = memchr(p, '|', (size_t)(end - p));
    if (!bar) break;
    while (p < bar && *p == ' ') p++;
    const char *q = bar;
    while (q > p && q[-1] == ' ') q--;
    size_t n = (size_t)(q - p) < 1023 ? (size_t)(q - p) : 1023;
    memcpy(r->cells[r->num_cells], p, n);
    r->cells[r->num_cells++][n] = '\0';
    p = bar + 1;
  }
  return true;
}

/* The names in backquotes in a cell (`id`, `feeds`; not `""`). */
static int names_in(const char *cell, char names[MAX_NAMES][64]) {
  int n = 0;
  for (const char *p = strchr(cell, '`'); p && n < MAX_NAMES;) {
    const char *q = strchr(p + 1, '`');
    if (!q) break;
    size_t len = (size_t)(q - p - 1);
    bool word = len > 0 && len < 64;
    for (size_t i = 0; word && i < len; i++)
      word = (p[1 + i] >= 'a' && p[1 + i] <= 'z') || p[1 + i] == '_';
    if (word) {
      bool seen = false;
      for (int k = 0; k < n && !seen; k++)
        seen = strlen(names[k]) == len && !strncmp(names[k], p + 1, len);
      if (!seen) memcpy(names[n], p + 1, len), names[n++][len] = '\0';
    }
    p = strchr(q + 1, '`');
  }
  return n;
}

/* The kind a first cell names ("`run`"), -1 when none. */
static int kind_of(const char *cell) {
  char names[MAX_NAMES][64];
  if (names_in(cell, names) != 1) return -1;
  for (int t = GR_MSG_NONE + 1; t < GR_MSG_COUNT; t++)
    if (!strcmp(gr_msg_type_name(t), names[0])) return t;
  return -1;
}

/* The cell lists exactly these fields. */
static void check_names(const char *where, const char *cell, const gr_msg_field *fields, int n) {
  char names[MAX_NAMES][64];
  int got = names_in(cell, names);
  for (int i = 0; i < n; i++) {
    bool found = false;
    for (int k = 0; k < got && !found; k++) found = !strcmp(names[k], fields[i].name);
    GR_CHECK_MSG(found, "docs/distributed.md, %s: field `%s` is not listed", where, fields[i].name);
  }
  for (int k = 0; k < got; k++) {
    bool known = false;
    for (int i = 0; i < n && !known; i++) known = !strcmp(names[k], fields[i].name);
    GR_CHECK_MSG(known, "docs/distributed.md, %s: `%s` is not a field of it", where, names[k]);
  }
}

/* A limit as the table writes it: 240, 4 KiB, 16 MiB, 2 GiB (2^31 - 1). */
static void limit_text(uint32_t v, char *out, size_t cap) {
  uint64_t x = v;
  if (x && (x + 1) % 1024 == 0) x++;
  if (x && x % (1u << 30) == 0)
    snprintf(out, cap, "%llu GiB", (unsigned long long)(x >> 30));
  else if (x && x % (1u << 20) == 0)
    snprintf(out, cap, "%llu MiB", (unsigned long long)(x >> 20));
  else if (x && x % 1024 == 0)
    snprintf(out, cap, "%llu KiB", (unsigned long long)(x >> 10));
  else
    snprintf(out, cap, "%llu", (unsigned long long)x);
}

/* The rows of the table whose header line starts with `header` in text;
 * *n rows (the header and the |---| line skipped). */
static row *table(const char *text, const char *header, int *n) {
  *n = 0;
  const char *p = strstr(text, header);
  GR_CHECK_MSG(p != NULL, "docs/distributed.md has no table '%s'", header);
  if (!p) return NULL;
  row *rows = calloc(64, sizeof *rows);
  if (!rows) return NULL;
  for (int line = 0; *p && *n < 64; line++) {
    const char *eol = strchr(p, '\n');
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    if (!split_row(p, len, &rows[*n])) break;
    if (line >= 2) (*n)++;
    if (!eol) break;
    p = eol + 1;
  }
  return rows;
}

static void test_kinds_table(void) {
  char *doc = gt_read_file(GR_SOURCE_DIR "/docs/distributed.md");
  GR_CHECK(doc != NULL);
  if (!doc) return;
  int n;
  row *rows = table(doc, "| type | direction | map | body | limits (map / body) |", &n);
  int seen[GR_MSG_COUNT] = {0};
  for (int i = 0; rows && i < n; i++) {
    const row *r = &rows[i];
    int t = r->num_cells == 5 ? kind_of(r->cells[0]) : -1;
    GR_CHECK_MSG(t > 0, "docs/distributed.md: the row '%s' of the wire table names no one kind",
                 r->cells[0]);
    if (t <= 0) continue;
    const gr_msg_spec *s = gr_msg_spec_of(t);
    char where[64], limits[64], a[16], b[16];
    snprintf(where, sizeof where, "the row of `%s`", gr_msg_type_name(t));
    seen[t]++;
    GR_CHECK_MSG(!strcmp(r->cells[1], s->direction),
                 "docs/distributed.md, %s: direction '%s', the code's is '%s'", where, r->cells[1],
                 s->direction);
    check_names(where, r->cells[2], s->fields, s->num_fields);
    uint32_t hmax, bmax;
    gr_msg_type_limits(t, &hmax, &bmax);
    limit_text(hmax, a, sizeof a);
    limit_text(bmax, b, sizeof b);
    snprintf(limits, sizeof limits, "%s / %s", a, b);
    GR_CHECK_MSG(!strcmp(r->cells[4], limits),
                 "docs/distributed.md, %s: limits '%s', the code's are '%s'", where, r->cells[4],
                 limits);
  }
  for (int t = GR_MSG_NONE + 1; t < GR_MSG_COUNT; t++)
    GR_CHECK_MSG(seen[t] == 1, "docs/distributed.md: the wire table has %d rows of `%s` (want 1)",
                 seen[t], gr_msg_type_name(t));
  free(rows);
  free(doc);
}

static void test_results_table(void) {
  char *doc = gt_read_file(GR_SOURCE_DIR "/docs/distributed.md");
  GR_CHECK(doc != NULL);
  if (!doc) return;
  int n;
  row *rows = table(doc, "| request | results |", &n);
  int seen[GR_MSG_COUNT] = {0};
  for (int i = 0; rows && i < n; i++) {
    const row *r = &rows[i];
    int t = r->num_cells == 2 ? kind_of(r->cells[0]) : -1;
    const gr_msg_spec *s = t > 0 ? gr_msg_spec_of(t) : NULL;
    GR_CHECK_MSG(s && s->num_results >= 0,
                 "docs/distributed.md: the row '%s' of the results table names no request",
                 r->cells[0]);
    if (!s || s->num_results < 0) continue;
    char where[64];
    snprintf(where, sizeof where, "the results of `%s`", gr_msg_type_name(t));
    seen[t]++;
    check_names(where, r->cells[1], s->results, s->num_results);
  }
  for (int t = GR_MSG_NONE + 1; t < GR_MSG_COUNT; t++) {
    int want = gr_msg_spec_of(t)->num_results >= 0;
    GR_CHECK_MSG(seen[t] == want,
                 "docs/distributed.md: the results table has %d rows of `%s` (want %d)", seen[t],
                 gr_msg_type_name(t), want);
  }
  free(rows);
  free(doc);
}

int main(void) {
  GR_RUN(test_kinds_table);
  GR_RUN(test_results_table);
  return gr_test_finish();
}

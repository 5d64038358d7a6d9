/* DSL lexer (one-token lookahead), the arena and diagnostics with carets. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dsl_internal.h"

/* ---- arena ------------------------------------------------------------------ */

/* From 1 MiB on, blocks come from mmap with every page mapped by one call: a
 * page fault per 4 KiB on first touch costs microseconds on a virtual
 * machine, and a large program touches all of it. (Asking for huge pages
 * here measured slower on the 1M-node benchmark, unlike for the graph.) */
#define BIG_BLOCK (1u << 20)

void *dsl_calloc(size_t bytes) {
  if (bytes < BIG_BLOCK) return calloc(1, bytes);
  char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
#ifdef MADV_POPULATE_WRITE
  (void)madvise(p, bytes, MADV_POPULATE_WRITE); /* best effort */
#endif
  return p;
}

void dsl_calloc_free(void *p, size_t bytes) {
  if (bytes < BIG_BLOCK)
    free(p);
  else if (p)
    munmap(p, bytes);
}

static void chunk_free(dsl_chunk *c) {
  dsl_calloc_free(c, sizeof *c + c->cap);
}

/* n bytes at the next multiple of align (a power of two, at most 16),
 * zeroed when zero. Chunks (header included) double from 16 KiB to 4 MiB,
 * so a large program maps and populates 4 MiB at a time. */
static void *arena_take(dsl_arena *a, size_t n, size_t align, bool zero) {
  dsl_chunk *c = a->top;
  size_t at = c ? (c->used + align - 1) & ~(align - 1) : 0;
  if (!c || at > c->cap || c->cap - at < n) {
    size_t total = c ? 2 * (sizeof *c + c->cap) : (16u << 10);
    if (total > (4u << 20)) total = 4u << 20;
    if (total < sizeof *c + n) total = sizeof *c + n;
    dsl_chunk *nc = dsl_calloc(total);
    if (!nc) return NULL;
    nc->prev = c;
    nc->used = nc->clean = 0;
    nc->cap = total - sizeof *nc;
    a->top = c = nc;
    at = 0;
  }
  c->used = at + n;
  if (zero && at < c->clean) memset(c->data + at, 0, (c->clean < at + n ? c->clean : at + n) - at);
  if (c->clean < at + n) c->clean = at + n;
  return c->data + at;
}

void *dsl_alloc_aligned(dsl_arena *a, size_t n, size_t align) {
  return arena_take(a, n, align, true);
}

void *dsl_alloc(dsl_arena *a, size_t n) {
  return dsl_alloc_aligned(a, n, 16);
}

/* Strings need no alignment: bound names are packed. */
char *dsl_strndup(dsl_arena *a, const char *s, size_t n) {
  char *d = arena_take(a, n + 1, 1, false);
  if (d) {
    memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

dsl_mark dsl_arena_mark(dsl_arena *a) {
  return (dsl_mark){a->top, a->top ? a->top->used : 0};
}

void dsl_arena_restore(dsl_arena *a, dsl_mark m) {
  while (a->top && a->top != m.top) {
    if (!m.top && !a->top->prev) { /* keep the first chunk for reuse */
      a->top->used = 0;
      return;
    }
    dsl_chunk *p = a->top->prev;
    chunk_free(a->top);
    a->top = p;
  }
  if (a->top) a->top->used = m.used;
}

void dsl_arena_free(dsl_arena *a) {
  while (a->top) {
    dsl_chunk *p = a->top->prev;
    chunk_free(a->top);
    a->top = p;
  }
}

/* ---- diagnostics --------------------------------------------------------------- */

size_t dsl_bom_len(const dsl_source *src) {
  return src->text && src->len >= 3 && memcmp(src->text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
}

/* Where line 1 of a source starts (after a byte-order mark). */
static const char *text_start(const dsl_source *src) {
  return src->text + dsl_bom_len(src);
}

/* Appends the source line of pos and a caret under its column. */
static size_t append_caret(char *buf, size_t n, size_t cap, dsl_pos pos) {
  if (!pos.src || !pos.src->text || pos.line < 1 || n + 8 >= cap) return n;
  const char *p = text_start(pos.src), *end = pos.src->text + pos.src->len;
  for (int l = 1; l < pos.line && p < end; p++)
    if (*p == '\n') l++;
  const char *e = p;
  while (e < end && *e != '\n' && *e != '\r') e++;
  size_t len = (size_t)(e - p);
  if (len > 200) len = 200;
  n += (size_t)snprintf(buf + n, cap - n, "\n  ");
  for (size_t i = 0; i < len && n + 1 < cap; i++) {
    unsigned char c = (unsigned char)p[i];
    buf[n++] = (c == '\t' || (c >= 32 && c < 127) || c >= 128) ? (char)c : '?';
  }
  if (n < cap) buf[n] = '\0';
  n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "\n  ");
  for (int i = 1; i < pos.col && (size_t)(i - 1) < len && n + 1 < cap; i++)
    buf[n++] = p[i - 1] == '\t' ? '\t' : ' ';
  if (n + 1 < cap) buf[n++] = '^';
  n = n < cap ? n : cap - 1;
  buf[n] = '\0'; /* also when the indentation above filled the buffer */
  return n;
}

bool dsl_source_text(dsl_pos from, dsl_pos to, char *buf, size_t cap) {
  if (!from.src || from.src != to.src || !from.src->text || from.line != to.line ||
      to.col <= from.col || (size_t)(to.col - from.col) >= cap)
    return false;
  const char *p = text_start(from.src), *end = from.src->text + from.src->len;
  for (int l = 1; l < from.line && p < end; p++)
    if (*p == '\n') l++;
  if ((size_t)(end - p) < (size_t)to.col - 1) return false;
  size_t n = (size_t)(to.col - from.col);
  memcpy(buf, p + from.col - 1, n);
  while (n && (buf[n - 1] == ' ' || buf[n - 1] == '\t')) n--;
  buf[n] = '\0';
  return n > 0;
}

gr_status dsl_error(gr_error *err, gr_status code, dsl_pos pos, const char *fmt, ...) {
  if (!err) return code;
  char msg[GR_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  err->code = code;
  size_t n = (size_t)snprintf(err->msg, sizeof err->msg, "%s:%d:%d: error: %s",
                              pos.src ? pos.src->name : "<input>", pos.line, pos.col, msg);
  if (n >= sizeof err->msg) n = sizeof err->msg - 1;
  append_caret(err->msg, n, sizeof err->msg, pos);
  return code;
}

void dsl_error_note(gr_error *err, dsl_pos pos, const char *note) {
  if (!err) return;
  size_t n = strlen(err->msg);
  if (n + 1 >= sizeof err->msg) return;
  n += (size_t)snprintf(err->msg + n, sizeof err->msg - n, "\n%s:%d:%d: note: %s",
                        pos.src ? pos.src->name : "<input>", pos.line, pos.col, note);
  if (n >= sizeof err->msg) return;
  append_caret(err->msg, n, sizeof err->msg, pos);
}

/* ---- lexer ------------------------------------------------------------------------ */

static const char *const tok_names[] = {
#define DSL_X_TOKN(e, s) s,
    DSL_TOKEN_LIST(DSL_X_TOKN)
#undef DSL_X_TOKN
};

const char *dsl_tok_name(dsl_tok t) {
  return t >= 0 && t < T_COUNT ? tok_names[t] : "?";
}

static const struct {
  const char *word;
  dsl_tok tok;
} keywords[] = {{"def", T_DEF},
                {"return", T_RETURN},
                {"import", T_IMPORT},
                {"scope", T_SCOPE},
                {"device", T_DEVICE},
                {"colocate_with", T_COLOCATE},
                {"control_dependencies", T_DEPS},
                {"cond", T_COND},
                {"else", T_ELSE},
                {"while", T_WHILE},
                {"true", T_TRUE},
                {"false", T_FALSE},
                {"fetch", T_FETCH},
                {"target", T_TARGET}};

void dsl_lex_init(dsl_lexer *lx, const dsl_source *src, gr_error *err) {
  memset(lx, 0, sizeof *lx);
  lx->src = src;
  lx->p = lx->line_start = src->text + dsl_bom_len(src);
  lx->end = src->text + src->len;
  lx->line = 1;
  lx->err = err;
}

static dsl_pos here(const dsl_lexer *lx, const char *at) {
  return (dsl_pos){lx->src, lx->line, (int)(at - lx->line_start) + 1};
}

static bool lex_fail(dsl_lexer *lx, const char *at, const char *fmt, const char *arg) {
  dsl_error(lx->err, GR_ERR_INVALID_ARGUMENT, here(lx, at), fmt, arg);
  lx->failed = true;
  lx->tok.kind = T_EOF;
  return false;
}

static bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

static bool lex_number(dsl_lexer *lx, const char *s) {
  const char *p = s;
  bool is_int = true;
  while (p < lx->end && is_digit(*p)) p++;
  if (p < lx->end && *p == '.') {
    is_int = false;
    p++;
    while (p < lx->end && is_digit(*p)) p++;
  }
  if (p < lx->end && (*p == 'e' || *p == 'E')) {
    is_int = false;
    p++;
    if (p < lx->end && (*p == '+' || *p == '-')) p++;
    if (p >= lx->end || !is_digit(*p))
      return lex_fail(lx, s, "malformed number: exponent has no digits%s", "");
    while (p < lx->end && is_digit(*p)) p++;
  }
  if (p < lx->end && (is_ident_start(*p) || *p == '.'))
    return lex_fail(lx, s, "malformed number (unexpected character after it)%s", "");
  char buf[64];
  size_t len = (size_t)(p - s);
  if (len >= sizeof buf) {
    /* very long literals: only digits matter for range; treat as out of range */
    if (is_int) return lex_fail(lx, s, "integer literal out of range%s", "");
    len = sizeof buf - 1;
  }
  memcpy(buf, s, len);
  buf[len] = '\0';
  dsl_token *t = &lx->tok;
  t->kind = T_NUMBER;
  t->is_int = is_int;
  if (is_int) {
    errno = 0;
    long long v = strtoll(buf, NULL, 10);
    if (errno == ERANGE) return lex_fail(lx, s, "integer literal out of range%s", "");
    t->inum = v;
    t->num = (double)v;
  } else {
    t->num = strtod(buf, NULL);
    if (!isfinite(t->num)) return lex_fail(lx, s, "number literal out of range%s", "");
    t->inum = 0;
  }
  t->len = (size_t)(p - s);
  lx->p = p;
  return true;
}

/* Punctuation, each two-character form before its one-character prefix. */
static const struct {
  const char *text;
  dsl_tok tok;
} puncts[] = {{"**", T_POW},   {"==", T_EQ},    {"!=", T_NE},    {"<=", T_LE},    {">=", T_GE},
              {"&&", T_AND},   {"||", T_OR},    {"(", T_LPAREN}, {")", T_RPAREN}, {"[", T_LBRACK},
              {"]", T_RBRACK}, {"{", T_LBRACE}, {"}", T_RBRACE}, {",", T_COMMA},  {";", T_SEMI},
              {"+", T_PLUS},   {"-", T_MINUS},  {"/", T_SLASH},  {"@", T_AT},     {"?", T_QUESTION},
              {"*", T_STAR},   {"=", T_ASSIGN}, {"!", T_NOT},    {"<", T_LT},     {">", T_GT}};

static bool lex_string(dsl_lexer *lx, const char *s) {
  const char *p = s + 1;
  while (p < lx->end && *p != '"') {
    if (*p == '\n') break;
    if (*p == '\\') {
      p++;
      if (p >= lx->end || *p == '\n') break;
      if (!strchr("\"\\nt", *p)) {
        char esc[8];
        snprintf(esc, sizeof esc, "\\%c", (*p >= 32 && *p < 127) ? *p : '?');
        lx->p = p;
        return lex_fail(lx, p - 1, "unknown escape '%s' in string (use \\\" \\\\ \\n \\t)", esc);
      }
    }
    p++;
  }
  if (p >= lx->end || *p != '"') return lex_fail(lx, s, "unterminated string%s", "");
  lx->tok.kind = T_STRING;
  lx->tok.len = (size_t)(p + 1 - s);
  lx->p = p + 1;
  return true;
}

bool dsl_lex_next(dsl_lexer *lx) {
  if (lx->failed) return false;
  const char *p = lx->p;
  for (;;) {
    while (p < lx->end && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
    if (p < lx->end && (*p == '#' || (*p == '/' && p + 1 < lx->end && p[1] == '/'))) {
      while (p < lx->end && *p != '\n') p++;
      continue;
    }
    if (p < lx->end && *p == '\n') {
      bool tok = lx->depth == 0 || lx->stack[lx->depth - 1] == '{';
      dsl_pos pos = here(lx, p);
      p++;
      lx->line++;
      lx->line_start = p;
      if (tok) {
        lx->tok = (dsl_token){.kind = T_NEWLINE, .pos = pos, .start = p - 1, .len = 1};
        lx->p = p;
        return true;
      }
      continue;
    }
    break;
  }
  dsl_token *t = &lx->tok;
  memset(t, 0, sizeof *t);
  t->pos = here(lx, p);
  t->start = p;
  t->len = 1;
  if (p >= lx->end) {
    t->kind = T_EOF;
    t->len = 0;
    lx->p = p;
    return true;
  }
  char c = *p;
  if (c == '\0') return lex_fail(lx, p, "unexpected NUL byte%s", "");
  if (is_ident_start(c)) {
    const char *q = p;
    while (q < lx->end && (is_ident_start(*q) || is_digit(*q))) q++;
    t->kind = T_IDENT;
    t->len = (size_t)(q - p);
    for (size_t k = 0; k < sizeof keywords / sizeof keywords[0]; k++)
      if (strlen(keywords[k].word) == t->len && memcmp(keywords[k].word, p, t->len) == 0)
        t->kind = keywords[k].tok;
    lx->p = q;
    return true;
  }
  if (is_digit(c) || (c == '.' && p + 1 < lx->end && is_digit(p[1]))) return lex_number(lx, p);
  if (c == '"') return lex_string(lx, p);
  dsl_tok k = T_EOF;
  size_t len = 0;
  char n = p + 1 < lx->end ? p[1] : '\0';
  for (size_t q = 0; q < sizeof puncts / sizeof puncts[0] && !len; q++) {
    const char *t = puncts[q].text;
    if (t[0] == c && (!t[1] || t[1] == n)) {
      k = puncts[q].tok;
      len = t[1] ? 2 : 1;
    }
  }
  if (!len) {
    char shown[48];
    if (c == '&' || c == '|')
      snprintf(shown, sizeof shown, "'%c' (did you mean '%c%c'?)", c, c, c);
    else if (c >= 32 && c < 127)
      snprintf(shown, sizeof shown, "'%c'", c);
    else
      snprintf(shown, sizeof shown, "byte 0x%02x", (unsigned char)c);
    return lex_fail(lx, p, "unexpected character %s", shown);
  }
  if (k == T_LPAREN || k == T_LBRACK || k == T_LBRACE) {
    if (lx->depth >= DSL_LEX_MAX_DEPTH) return lex_fail(lx, p, "brackets nested too deeply%s", "");
    lx->stack_pos[lx->depth] = t->pos;
    lx->stack[lx->depth++] = c;
  } else if ((k == T_RPAREN || k == T_RBRACK || k == T_RBRACE) && lx->depth > 0) {
    char open = k == T_RPAREN ? '(' : k == T_RBRACK ? '[' : '{';
    if (lx->stack[lx->depth - 1] == open) lx->depth--;
  }
  t->kind = k;
  t->len = len;
  lx->p = p + len;
  return true;
}

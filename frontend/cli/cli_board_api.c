/* graphrun board: the /api/ requests. Each opens the run database
 * (query_only), turns one SELECT into JSON with SQLite's JSON functions
 * (so names and commands are escaped by SQLite) and answers it; the
 * graph is laid out and drawn as SVG with Graphviz's library (cgraph + gvc,
 * the "dot" layout) in a child process, once per run. */
#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_board.h"

typedef struct cli_board_svg {
  long long run;
  char *svg; /* NULL: not drawn (an error message in err) */
  char err[256];
  struct cli_board_svg *next;
} cli_board_svg;

void cli_board_reply(struct evhttp_request *req, int code, const char *type, const void *data,
                     size_t len) {
  struct evkeyvalq *h = evhttp_request_get_output_headers(req);
  evhttp_add_header(h, "Content-Type", type);
  evhttp_add_header(h, "Cache-Control", "no-store");
  evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
  struct evbuffer *out = evbuffer_new();
  if (out) evbuffer_add(out, data, len);
  evhttp_send_reply(req, code, code == 200 ? "OK" : "Error", out);
  if (out) evbuffer_free(out);
}

static void reply_error(struct evhttp_request *req, int code, const char *msg) {
  cli_board_reply(req, code, "text/plain; charset=utf-8", msg, strlen(msg));
}

/* The database, or NULL when it does not exist yet (no run has written). */
static sqlite3 *open_db(const cli_board *b) {
  sqlite3 *db = NULL;
  if (sqlite3_open_v2(b->db_path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
    sqlite3_close(db);
    return NULL;
  }
  sqlite3_busy_timeout(db, 5000);
  sqlite3_exec(db, "PRAGMA query_only = 1", NULL, NULL, NULL);
  return db;
}

/* Runs sql (a SELECT of one text value, ?1 bound to run) and answers with
 * its value; empty is what an absent database or row answers. */
static void answer_query(cli_board *b, struct evhttp_request *req, const char *sql, long long run,
                         const char *type, const char *empty) {
  sqlite3 *db = open_db(b);
  if (!db) return cli_board_reply(req, 200, type, empty, strlen(empty));
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  if (rc == SQLITE_OK) {
    sqlite3_bind_int64(st, 1, run);
    rc = sqlite3_step(st);
  }
  if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
    const char *text = (const char *)sqlite3_column_text(st, 0);
    cli_board_reply(req, 200, type, text, (size_t)sqlite3_column_bytes(st, 0));
  } else if (rc == SQLITE_ROW || rc == SQLITE_DONE || strstr(sqlite3_errmsg(db), "no such table")) {
    cli_board_reply(req, 200, type, empty, strlen(empty));
  } else {
    char msg[512];
    snprintf(msg, sizeof msg, "%s: %s", b->db_path, sqlite3_errmsg(db));
    reply_error(req, 500, msg);
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
}

/* ?run=N of the query; -1 when absent or not a number. */
static long long run_param(const char *query) {
  struct evkeyvalq q;
  long long run = -1;
  if (query && evhttp_parse_query_str(query, &q) == 0) {
    const char *v = evhttp_find_header(&q, "run");
    char *end;
    if (v && *v && (run = strtoll(v, &end, 10), *end)) run = -1;
    evhttp_clear_headers(&q);
  }
  return run;
}

static const char *const json_type = "application/json";

/* ---- the graph as SVG ---------------------------------------------------------- */

static char gv_error[256];

/* Graphviz's messages, kept for the answer instead of going to stderr. */
static int keep_gv_error(char *msg) {
  if (!gv_error[0]) snprintf(gv_error, sizeof gv_error, "%s", msg);
  return 0;
}

/* In a child process (Graphviz 2.43's gvFreeLayout frees twice on some
 * graphs with clusters, and a bad graph could crash it): lays dot out,
 * writes 'S' and the SVG, or 'E' and a message, to fd, and ends without
 * freeing. */
static void draw_in_child(const char *dot, int fd) {
  agseterr(AGERR);
  agseterrf(keep_gv_error);
  GVC_t *gvc = gvContext();
  Agraph_t *g = gvc ? agmemread(dot) : NULL;
  char *svg = NULL;
  unsigned int len = 0;
  bool ok =
      g && gvLayout(gvc, g, "dot") == 0 && gvRenderData(gvc, g, "svg", &svg, &len) == 0 && svg;
  char msg[300];
  snprintf(msg, sizeof msg, "E%s",
           gv_error[0] ? gv_error
           : !gvc      ? "no context"
           : !g        ? "bad DOT"
                       : "layout failed");
  const char *out = ok ? svg : msg;
  size_t n = ok ? len : strlen(msg);
  if (ok && write(fd, "S", 1) != 1) _exit(1);
  for (ssize_t w; n > 0 && (w = write(fd, out, n)) > 0; out += w, n -= (size_t)w) {}
  _exit(0);
}

/* The run's DOT text drawn as SVG (cached). */
static cli_board_svg *draw_graph(cli_board *b, long long run) {
  for (cli_board_svg *s = b->svgs; s; s = s->next)
    if (s->run == run) return s;
  cli_board_svg *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->run = run;
  sqlite3 *db = open_db(b);
  sqlite3_stmt *st = NULL;
  char *dot = NULL;
  if (db &&
      sqlite3_prepare_v2(db, "SELECT dot FROM graphs WHERE run = ?1", -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_int64(st, 1, run);
    if (sqlite3_step(st) == SQLITE_ROW) dot = strdup((const char *)sqlite3_column_text(st, 0));
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  if (!dot) {
    free(s);
    return NULL; /* not written yet: asked again later */
  }
  int fds[2];
  pid_t pid = pipe(fds) == 0 ? fork() : -1;
  if (pid == 0) {
    close(fds[0]);
    draw_in_child(dot, fds[1]);
  }
  char *buf = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&buf, &len);
  if (pid > 0) {
    close(fds[1]);
    char chunk[65536];
    for (ssize_t r; mem && (r = read(fds[0], chunk, sizeof chunk)) > 0;)
      fwrite(chunk, 1, (size_t)r, mem);
    close(fds[0]);
  }
  int status = 0;
  bool exited = pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status);
  if (mem) fclose(mem);
  if (exited && buf && len > 1 && buf[0] == 'S')
    s->svg = strndup(buf + 1, len - 1);
  else
    snprintf(s->err, sizeof s->err, "graphviz could not draw the graph of run %lld: %s", run,
             exited && buf && len > 1 ? buf + 1
             : pid < 0                ? "cannot start a process"
             : WIFSIGNALED(status)    ? strsignal(WTERMSIG(status))
                                      : "no answer");
  free(buf);
  free(dot);
  s->next = b->svgs;
  b->svgs = s;
  return s;
}

/* ---- the endpoints --------------------------------------------------------------- */

bool cli_board_api(cli_board *b, struct evhttp_request *req, const char *name, const char *query) {
  long long run = run_param(query);
  if (!strcmp(name, "runs")) {
    answer_query(b, req,
                 "SELECT json_group_array(json_object('id', id, 'started', started, 'ended', ended,"
                 " 'status', status, 'command', command, 'file', file, 'ckpt', ckpt, 'host', host,"
                 " 'pid', pid, 'epochs', epochs, 'steps_per_epoch', steps_per_epoch, 'batch_size',"
                 " batch_size, 'first_step', first_step, 'epochs_done', epochs_done,"
                 " 'best_metric', best_metric, 'best_value', best_value, 'best_epoch', best_epoch,"
                 " 'best_step', best_step)) FROM (SELECT * FROM runs ORDER BY id)",
                 run, json_type, "[]");
    return true;
  }
  if (run < 0 && strcmp(name, "runs")) {
    reply_error(req, 400, "this request wants ?run=ID (a run's id, from /api/runs)");
    return true;
  }
  if (!strcmp(name, "scalars"))
    answer_query(b, req,
                 "SELECT json_group_array(json_array(tag, epoch, step, wall, value)) FROM"
                 " (SELECT * FROM scalars WHERE run = ?1 ORDER BY tag, epoch)",
                 run, json_type, "[]");
  else if (!strcmp(name, "histograms"))
    answer_query(b, req,
                 "SELECT json_group_array(json_array(tag, epoch, min, max, count, json(buckets)))"
                 " FROM (SELECT * FROM histograms WHERE run = ?1 ORDER BY tag, epoch)",
                 run, json_type, "[]");
  else if (!strcmp(name, "nodes"))
    answer_query(b, req,
                 "SELECT json_group_array(json_array(name, op, device)) FROM"
                 " (SELECT * FROM nodes WHERE run = ?1 ORDER BY id)",
                 run, json_type, "[]");
  else if (!strcmp(name, "trace"))
    answer_query(b, req, "SELECT trace FROM traces WHERE run = ?1 ORDER BY epoch DESC LIMIT 1", run,
                 json_type, "{\"traceEvents\": []}");
  else if (!strcmp(name, "graph.svg")) {
    cli_board_svg *s = draw_graph(b, run);
    if (!s)
      reply_error(req, 404, "no graph recorded for this run (yet)");
    else if (!s->svg)
      reply_error(req, 500, s->err);
    else
      cli_board_reply(req, 200, "image/svg+xml", s->svg, strlen(s->svg));
  } else
    return false;
  return true;
}

void cli_board_api_free(cli_board *b) {
  while (b->svgs) {
    cli_board_svg *n = b->svgs->next;
    free(b->svgs->svg);
    free(b->svgs);
    b->svgs = n;
  }
}

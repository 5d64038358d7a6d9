/* graphrun board (cmd_board.c): a local web page over a directory's run
 * database (cli_epochs.h). The HTTP server is libevent's evhttp on one
 * thread; every request opens the database afresh (read-only queries) and
 * answers from it. cli_board_api.c answers the /api/ requests; the page and
 * its script are built into the program (frontend/cli/board/, embedded by
 * CMake as gr_board_assets.c). Internal to frontend/cli/. */
#ifndef GR_CLI_BOARD_H
#define GR_CLI_BOARD_H

#include <event2/http.h>
#include <stdbool.h>
#include <stddef.h>

/* The embedded files (gr_board_assets.c, generated). */
typedef struct cli_board_asset {
  const char *path, *type; /* "/board.js", "text/javascript; charset=utf-8" */
  const unsigned char *data;
  size_t len;
} cli_board_asset;
extern const cli_board_asset cli_board_assets[];
extern const int cli_board_num_assets;

/* What the handlers share (owned by cmd_board.c). */
typedef struct cli_board {
  const char *dir;
  char db_path[4096];
  struct cli_board_svg *svgs; /* rendered graphs, by run (cli_board_api.c) */
} cli_board;

/* Answers GET /api/NAME?QUERY (runs, scalars, histograms, nodes, trace,
 * graph.svg) from the database; false when NAME is none of them. */
bool cli_board_api(cli_board *b, struct evhttp_request *req, const char *name, const char *query);
/* Answers req with code and the body data of len bytes (never cached). */
void cli_board_reply(struct evhttp_request *req, int code, const char *type, const void *data,
                     size_t len);
/* Frees what the handlers cached. */
void cli_board_api_free(cli_board *b);

#endif

/* graphrun board DIR: serves a local web page with every run of DIR's run
 * database (DIR/runs.db, written by `graphrun run --epochs ... --logdir
 * DIR`): the curves of each run's scalars, live while it trains, weight
 * histograms, the graph coloured by device (SVG), the placement and the
 * step timeline. One thread: libevent's evhttp. Loopback only unless
 * --allow-remote; requests whose Host is not this server's are refused
 * (a page elsewhere cannot read the board through DNS rebinding). */
#include <jansson.h>
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "cli_board.h"
#include "cli_epochs.h"
#include "cli_options.h"
#include "commands.h"

#ifndef GR_CHARTJS_PATH
#define GR_CHARTJS_PATH "/usr/share/javascript/chart.js/chart.min.js"
#endif
#define POLL_SECONDS 20 /* the longest a /api/version request waits for a change */

typedef struct board_options {
  const char *dir, *bind, *chartjs;
  long port;
  bool allow_remote, verbose;
} board_options;

static void usage(FILE *f) {
  fprintf(f,
          "usage: graphrun board DIR [--port P] [--bind ADDR] [--allow-remote] [--verbose]\n\n"
          "Serves a web page with the runs of DIR/runs.db (graphrun run --epochs N --logdir DIR):\n"
          "their curves (live while they train), weight histograms, the graph coloured by\n"
          "device, the placement and the step timeline. Open the address it prints.\n\n"
          "  --port P           TCP port (default 6006; 0: any free port, printed)\n"
          "  --bind ADDR        address to listen on (default 127.0.0.1, this machine only)\n"
          "  --allow-remote     allow --bind to an address other machines reach (anyone who\n"
          "                     reaches it reads the runs: commands, names, values)\n"
          "  --verbose          log each request on stderr\n\n"
          "Chart.js comes from Debian's libjs-chart.js (%s).\n"
          "Exit codes: 0 stopped (SIGINT, SIGTERM), 1 cannot serve, 2 usage error.\n",
          GR_CHARTJS_PATH);
}

enum { F_PORT = 256, F_BIND, F_ALLOW_REMOTE, F_VERBOSE };

static const struct option flags[] = {
    {"help", no_argument, NULL, 'h'},          {"port", required_argument, NULL, F_PORT},
    {"bind", required_argument, NULL, F_BIND}, {"allow-remote", no_argument, NULL, F_ALLOW_REMOTE},
    {"verbose", no_argument, NULL, F_VERBOSE}, {0},
};

/* A numeric loopback address (127.0.0.0/8, ::1) or "localhost". */
static bool is_loopback(const char *addr) {
  struct in_addr a4;
  struct in6_addr a6;
  if (!strcmp(addr, "localhost")) return true;
  if (inet_pton(AF_INET, addr, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  return inet_pton(AF_INET6, addr, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

static int parse_options(int argc, char **argv, board_options *o) {
  *o = (board_options){.bind = "127.0.0.1", .port = 6006, .chartjs = GR_CHARTJS_PATH};
  const char *env = getenv("GRAPHRUN_CHARTJS");
  if (env && *env) o->chartjs = env;
  cli_opts po;
  cli_opts_start(&po, "board", argc, argv, flags, "h", CLI_OPTS_ANY_ORDER);
  for (int c; (c = cli_opts_next(&po)) != CLI_OPTS_END;) {
    switch (c) {
      case 'h':
        usage(stdout);
        return GR_EXIT_OK;
      case F_PORT:
        if (!cli_opt_long(&po, 0, 65535, &o->port)) return GR_EXIT_USAGE;
        break;
      case F_BIND:
        o->bind = po.arg;
        break;
      case F_ALLOW_REMOTE:
        o->allow_remote = true;
        break;
      case F_VERBOSE:
        o->verbose = true;
        break;
      case CLI_OPTS_ARG:
        if (o->dir) {
          fprintf(stderr, "graphrun board: more than one directory given ('%s', '%s')\n", o->dir,
                  po.arg);
          return GR_EXIT_USAGE;
        }
        o->dir = po.arg;
        break;
      default:
        return GR_EXIT_USAGE;
    }
  }
  if (!o->dir) {
    usage(stderr);
    return GR_EXIT_USAGE;
  }
  if (!o->allow_remote && !is_loopback(o->bind)) {
    fprintf(stderr,
            "graphrun board: --bind %s is not a loopback address: other machines could read "
            "the runs; add --allow-remote if that is what you want\n",
            o->bind);
    return GR_EXIT_USAGE;
  }
  struct stat sb;
  if (stat(o->dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    bool exists = stat(o->dir, &sb) == 0;
    fprintf(stderr, "graphrun board: %s: %s\n", o->dir,
            exists ? "not a directory" : strerror(errno));
    return GR_EXIT_USAGE;
  }
  return -1;
}

/* ---- the server ----------------------------------------------------------------- */

typedef struct server {
  cli_board b;
  board_options o;
  struct event_base *base;
  char host_port[300]; /* "127.0.0.1:6006", what a Host header may name */
  int port;
} server;

/* The Host header names this server (loopback names, the bound address),
 * or anything with --allow-remote. */
static bool host_ok(const server *sv, struct evhttp_request *req) {
  if (sv->o.allow_remote) return true;
  const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Host");
  if (!h) return false;
  char name[300];
  snprintf(name, sizeof name, "%s", h);
  char *colon = strrchr(name, ':');
  if (colon && !strchr(colon, ']')) {
    if (atoi(colon + 1) != sv->port) return false;
    *colon = '\0';
  }
  size_t n = strlen(name);
  if (n > 2 && name[0] == '[' && name[n - 1] == ']') name[n - 1] = '\0', memmove(name, name + 1, n);
  return is_loopback(name) || !strcmp(name, sv->o.bind);
}

/* Chart.js, from the file Debian's libjs-chart.js installs. */
static void send_chartjs(server *sv, struct evhttp_request *req) {
  FILE *f = fopen(sv->o.chartjs, "rb");
  char *data = NULL;
  size_t len = 0, cap = 0;
  while (f) {
    if (len == cap) {
      char *more = realloc(data, cap = cap ? 2 * cap : 1 << 18);
      if (!more) break;
      data = more;
    }
    size_t got = fread(data + len, 1, cap - len, f);
    if (!got) break;
    len += got;
  }
  if (f && !ferror(f) && data) {
    cli_board_reply(req, 200, "text/javascript; charset=utf-8", data, len);
  } else {
    char msg[4200];
    snprintf(msg, sizeof msg,
             "console.error('graphrun board: cannot read Chart.js at %s (apt-get install "
             "libjs-chart.js)');",
             sv->o.chartjs);
    cli_board_reply(req, 200, "text/javascript; charset=utf-8", msg, strlen(msg));
  }
  if (f) fclose(f);
  free(data);
}

/* ---- /api/version: waits for the database to change ------------------------------ */

/* Changes whenever a run writes: the sizes and times of runs.db and its WAL. */
static void db_version(const server *sv, char *buf, size_t cap) {
  struct stat a = {0}, w = {0};
  char wal[4200];
  snprintf(wal, sizeof wal, "%s-wal", sv->b.db_path);
  stat(sv->b.db_path, &a);
  stat(wal, &w);
  snprintf(buf, cap, "%lld.%ld.%lld-%lld.%ld.%lld", (long long)a.st_mtim.tv_sec, a.st_mtim.tv_nsec,
           (long long)a.st_size, (long long)w.st_mtim.tv_sec, w.st_mtim.tv_nsec,
           (long long)w.st_size);
}

typedef struct poll_wait {
  server *sv;
  struct evhttp_request *req;
  struct event *tick;
  char since[128];
  int ticks_left;
} poll_wait;

static void answer_version(poll_wait *p, const char *v) {
  json_t *doc = json_pack("{s:s}", "version", v);
  char *body = doc ? json_dumps(doc, 0) : NULL;
  json_decref(doc);
  evhttp_connection_set_closecb(evhttp_request_get_connection(p->req), NULL, NULL);
  if (body)
    cli_board_reply(p->req, 200, "application/json", body, strlen(body));
  else
    cli_board_reply(p->req, 500, "text/plain", "out of memory", 13);
  free(body);
  event_free(p->tick);
  free(p);
}

static void poll_closed(struct evhttp_connection *c, void *arg) {
  (void)c;
  poll_wait *p = arg; /* the page went away: nothing to answer */
  event_free(p->tick);
  free(p);
}

static void poll_tick(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  poll_wait *p = arg;
  char v[128];
  db_version(p->sv, v, sizeof v);
  if (strcmp(v, p->since) || --p->ticks_left <= 0) answer_version(p, v);
}

static void wait_version(server *sv, struct evhttp_request *req, const char *query) {
  struct evkeyvalq q;
  char since[128] = "";
  if (query && evhttp_parse_query_str(query, &q) == 0) {
    const char *s = evhttp_find_header(&q, "since");
    if (s) snprintf(since, sizeof since, "%s", s);
    evhttp_clear_headers(&q);
  }
  poll_wait *p = calloc(1, sizeof *p);
  struct timeval every = {0, 200 * 1000};
  if (!p || !(p->tick = event_new(sv->base, -1, EV_PERSIST, poll_tick, p))) {
    free(p);
    return evhttp_send_error(req, 503, "out of memory");
  }
  p->sv = sv, p->req = req, p->ticks_left = POLL_SECONDS * 5;
  snprintf(p->since, sizeof p->since, "%s", since);
  char v[128];
  db_version(sv, v, sizeof v);
  if (strcmp(v, since)) return answer_version(p, v);
  evhttp_connection_set_closecb(evhttp_request_get_connection(req), poll_closed, p);
  event_add(p->tick, &every);
}

/* ---- requests -------------------------------------------------------------------- */

static void handle(struct evhttp_request *req, void *arg) {
  server *sv = arg;
  const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
  const char *path = uri ? evhttp_uri_get_path(uri) : NULL,
             *query = uri ? evhttp_uri_get_query(uri) : NULL;
  if (sv->o.verbose) fprintf(stderr, "graphrun board: %s\n", evhttp_request_get_uri(req));
  if (!host_ok(sv, req)) return evhttp_send_error(req, 403, "unknown Host");
  if (evhttp_request_get_command(req) != EVHTTP_REQ_GET || !path)
    return evhttp_send_error(req, 405, "only GET");
  if (!strcmp(path, "/")) path = "/index.html";
  for (int i = 0; i < cli_board_num_assets; i++)
    if (!strcmp(path, cli_board_assets[i].path))
      return cli_board_reply(req, 200, cli_board_assets[i].type, cli_board_assets[i].data,
                             cli_board_assets[i].len);
  if (!strcmp(path, "/chart.js")) return send_chartjs(sv, req);
  if (!strcmp(path, "/api/version")) return wait_version(sv, req, query);
  if (!strcmp(path, "/api/dir"))
    return cli_board_reply(req, 200, "text/plain; charset=utf-8", sv->o.dir, strlen(sv->o.dir));
  if (!strncmp(path, "/api/", 5) && cli_board_api(&sv->b, req, path + 5, query)) return;
  evhttp_send_error(req, 404, "no such page");
}

static void stop(evutil_socket_t sig, short what, void *arg) {
  (void)sig, (void)what;
  event_base_loopexit(arg, NULL);
}

int gr_cmd_board(int argc, char **argv) {
  server sv = {0};
  int rc = parse_options(argc, argv, &sv.o);
  if (rc >= 0) return rc;
  sv.b.dir = sv.o.dir;
  snprintf(sv.b.db_path, sizeof sv.b.db_path, "%s/%s", sv.o.dir, CLI_RUNDB_FILE);
  signal(SIGPIPE, SIG_IGN);
  sv.base = event_base_new();
  struct evhttp *http = sv.base ? evhttp_new(sv.base) : NULL;
  struct evhttp_bound_socket *sock =
      http ? evhttp_bind_socket_with_handle(http, sv.o.bind, (ev_uint16_t)sv.o.port) : NULL;
  struct event *sigs[2] = {NULL, NULL};
  if (!sock) {
    fprintf(stderr, "graphrun board: cannot listen on %s port %ld: %s\n", sv.o.bind, sv.o.port,
            strerror(errno));
    rc = GR_EXIT_FAILURE;
  } else {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&ss, &sl);
    sv.port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET);
    evhttp_set_max_headers_size(http, 16384);
    evhttp_set_max_body_size(http, 0);
    evhttp_set_gencb(http, handle, &sv);
    sigs[0] = evsignal_new(sv.base, SIGINT, stop, sv.base);
    sigs[1] = evsignal_new(sv.base, SIGTERM, stop, sv.base);
    for (int i = 0; i < 2; i++)
      if (sigs[i]) event_add(sigs[i], NULL);
    bool v6 = strchr(sv.o.bind, ':') != NULL;
    printf("graphrun board: serving %s at http://%s%s%s:%d/\n", sv.o.dir, v6 ? "[" : "", sv.o.bind,
           v6 ? "]" : "", sv.port);
    fflush(stdout);
    event_base_dispatch(sv.base);
    rc = GR_EXIT_OK;
  }
  for (int i = 0; i < 2; i++)
    if (sigs[i]) event_free(sigs[i]);
  if (http) evhttp_free(http);
  if (sv.base) event_base_free(sv.base);
  cli_board_api_free(&sv.b);
  return rc;
}

/* `graphrun board` in headless Chromium: the page of a finished run shows
 * its curves with one point per epoch (the page writes each drawn point
 * into the DOM), the graph as SVG coloured by device, the placement and
 * the step timeline; and a page open while a run trains updates until the
 * run is done. The training run is paused (SIGSTOP) until the page has
 * loaded and waits for changes, so the test sees a running run whatever the
 * machine's load. Also: the JSON API, the Host check and --bind's refusal.
 * Exits 77 (skipped) without Chromium (`make test` installs it). Every
 * process started (board, runs, Chromium) is in a group of its own, killed
 * and reaped on any exit. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

static char dir[64], out[32768], chromium[256];
static gt_proc board;
static int port;

static const char model[] = "xs = const([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0], [8.0]])\n"
                            "step = global_step()\n"
                            "bx = batch(step, xs, batch_size=2)\n"
                            "scope \"v\" { w = variable(zeros([])) }\n"
                            "loss = reduce_mean(bx) * 0.0 - w\n"
                            "train = minimize(loss, sgd(0.25))\n"
                            "m = square(w - 3.0)\n"
                            "fetch loss\n"
                            "target train\n";

static bool find_chromium(void) {
  const char *env = getenv("GRAPHRUN_CHROMIUM");
  const char *tries[] = {env ? env : "", "/usr/bin/chromium", "/usr/bin/chromium-browser"};
  for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++)
    if (*tries[i] && access(tries[i], X_OK) == 0) {
      snprintf(chromium, sizeof chromium, "%s", tries[i]);
      return true;
    }
  return false;
}

/* Chromium headless dumps URL's DOM (after its scripts ran) into dir/NAME;
 * started, not waited for. */
static void start_dump(gt_proc *p, const char *url, const char *name) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "rm -rf '%s/profile-%s' && exec '%s' --headless --no-sandbox --disable-gpu "
           "--disable-background-networking --disable-component-update --disable-sync "
           "--no-first-run --disable-quic --disable-extensions --disable-dev-shm-usage "
           "--user-data-dir='%s/profile-%s' --virtual-time-budget=5000 --dump-dom '%s' "
           "> '%s/%s' 2> '%s/%s.err'",
           dir, name, chromium, dir, name, url, dir, name, dir, name);
  gt_proc_start(p, (char *[]){"/bin/sh", "-c", cmd, NULL});
}

/* Waits (generously: a loaded machine) for p to end; its file dir/NAME. */
static char *finish_dump(gt_proc *p, const char *name) {
  bool ended = gt_proc_wait(p, NULL, 180);
  gt_proc_finish(p);
  GR_CHECK_MSG(ended, "chromium did not finish within 180 s");
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) return strdup("");
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *s = calloc((size_t)n + 1, 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = '\0';
  fclose(f);
  return s;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

/* GET path with the given Host header; the status code (body into out). */
static int http_get(const char *path, const char *host) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  out[0] = '\0';
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  char req[512];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, host);
  size_t len = 0;
  if (write(fd, req, (size_t)n) == n)
    for (ssize_t r; len + 1 < sizeof out && (r = read(fd, out + len, sizeof out - 1 - len)) > 0;)
      len += (size_t)r;
  out[len] = '\0';
  close(fd);
  int code = -1;
  sscanf(out, "HTTP/1.%*d %d", &code);
  return code;
}

static void setup(void) {
  gt_write_file(dir, "t.gr", model);
  /* run 1: finished; on two devices, so the graph and timeline have two */
  GR_CHECK(gt_cli_expect(dir,
                         "run t.gr --epochs 5 --validate m --logdir logs --devices 2 --placement "
                         "round-robin --quiet",
                         0, NULL, out, sizeof out));
  char logs[128];
  snprintf(logs, sizeof logs, "%s/logs", dir);
  gt_proc_start(&board, (char *[]){"graphrun", "board", logs, "--port", "0", "--verbose", NULL});
  GR_CHECK_MSG(gt_proc_wait_line(&board, "graphrun board: serving", 60), "board: %s", board.buf);
  const char *at = strstr(board.buf, "http://127.0.0.1:");
  port = at ? atoi(at + strlen("http://127.0.0.1:")) : 0;
  GR_CHECK_MSG(port > 0, "no port in: %s", board.buf);
}

static void test_api(void) {
  char host[64];
  snprintf(host, sizeof host, "127.0.0.1:%d", port);
  GR_CHECK_EQ_INT(http_get("/api/runs", host), 200);
  GR_CHECK_STR_CONTAINS(out, "[{\"id\":1,");
  GR_CHECK_STR_CONTAINS(out, "\"status\":\"done\"");
  GR_CHECK_EQ_INT(http_get("/api/scalars?run=1", host), 200);
  GR_CHECK_STR_CONTAINS(out, "[\"val_m\",3,12,");
  GR_CHECK_EQ_INT(http_get("/api/scalars", host), 400);
  GR_CHECK_EQ_INT(http_get("/api/graph.svg?run=1", host), 200);
  GR_CHECK_STR_CONTAINS(out, "<svg");
  GR_CHECK_EQ_INT(http_get("/api/graph.svg?run=9", host), 404);
  GR_CHECK_EQ_INT(http_get("/chart.js", host), 200);
  GR_CHECK_STR_CONTAINS(out, "Chart.js v");
  GR_CHECK_EQ_INT(http_get("/nope", host), 404);
  /* another site's page (DNS rebinding) names its own host: refused */
  GR_CHECK_EQ_INT(http_get("/api/runs", "attacker.example"), 403);
  snprintf(host, sizeof host, "localhost:%d", port);
  GR_CHECK_EQ_INT(http_get("/", host), 200);
  GR_CHECK_STR_CONTAINS(out, "<title>graphrun board</title>");
  /* other machines only when asked for */
  GR_CHECK(gt_cli_expect(dir, "board logs --bind 0.0.0.0", 2,
                         "--bind 0.0.0.0 is not a loopback address", out, sizeof out));
  GR_CHECK(gt_cli_expect(dir, "board nowhere", 2, "graphrun board: nowhere:", out, sizeof out));
}

static void test_finished_run(void) {
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/?until=done&run=1", port);
  gt_proc p;
  start_dump(&p, url, "done.html");
  char *dom = finish_dump(&p, "done.html");
  GR_CHECK_MSG(strstr(dom, "data-done=\"true\""), "the page did not finish: %.2000s", dom);
  /* one point per epoch in each curve */
  GR_CHECK_EQ_INT(count(dom, "class=\"point\" data-run=\"1\" data-tag=\"loss\""), 5);
  GR_CHECK_EQ_INT(count(dom, "class=\"point\" data-run=\"1\" data-tag=\"val_m\""), 5);
  GR_CHECK(strstr(dom, "data-tag=\"val_m\" data-epoch=\"3\"><td>1</td><td>val_m</td><td>3</td>"
                       "<td>12</td><td>0</td>") != NULL);
  GR_CHECK_STR_CONTAINS(dom, "<canvas"); /* Chart.js drew */
  /* the graph (Graphviz's SVG) with its device legend, the placement, the timeline */
  GR_CHECK_STR_CONTAINS(dom, "<title>train</title>");
  GR_CHECK_STR_CONTAINS(dom, "/job:localhost/replica:0/task:0/device:CPU:1");
  GR_CHECK_STR_CONTAINS(dom, "data-device=\"/job:localhost/replica:0/task:0/device:CPU:0\"");
  GR_CHECK_STR_CONTAINS(dom, "data-device=\"/job:localhost/replica:0/task:0/device:CPU:1\"");
  GR_CHECK(count(dom, "class=\"node-run\"") > 3);
  GR_CHECK_STR_CONTAINS(dom, "data-histogram=\"v/w\" data-epochs=\"5\"");
  free(dom);
}

/* A model whose epochs take a while (100 steps of 384x384 products each):
 * the run can be stopped between its second epoch and its last. */
static const char *slow_model = "x = random_normal([384, 384], seed=1)\n"
                                "w = variable(random_normal([384, 384], seed=2) * 0.01)\n"
                                "loss = reduce_mean(square(matmul(x, w)))\n"
                                "train = minimize(loss, sgd(0.01))\n"
                                "m = loss * 1.0\n"
                                "fetch loss\n"
                                "target train\n";

static void test_live_updates(void) {
  gt_proc run, page;
  char logs[128];
  snprintf(logs, sizeof logs, "%s/logs", dir);
  gt_write_file(dir, "slow.gr", slow_model);
  char *argv[] = {"graphrun", "run",        "slow.gr", "--epochs", "12", "--steps-per-epoch",
                  "100",      "--validate", "m",       "--logdir", logs, NULL};
  char path[128];
  snprintf(path, sizeof path, "%s/slow.gr", dir);
  argv[2] = path;
  gt_proc_start(&run, argv);
  bool paused = gt_proc_wait_line(&run, "epoch 2/12", 60) && kill(run.pid, SIGSTOP) == 0;
  GR_CHECK_MSG(paused, "the run did not reach epoch 2: %s", run.buf);
  /* forget what the board logged so far (an offset would not do: the
   * buffer keeps only its tail, dropping its older half when full) */
  gt_proc_wait(&board, "\x01", 0.1);
  board.len = 0;
  board.buf[0] = '\0';
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/?until=done&run=2", port);
  start_dump(&page, url, "live.html");
  /* the page has read everything and waits for a change: a second version request */
  double end = gt_now() + 120;
  while (gt_now() < end && !strstr(board.buf, "version?since=1")) gt_proc_wait(&board, "\x01", 0.1);
  GR_CHECK_MSG(strstr(board.buf, "version?since=1"), "the page did not wait: %s", board.buf);
  kill(run.pid, SIGCONT);
  GR_CHECK(gt_proc_wait(&run, NULL, 120));
  gt_proc_finish(&run);
  GR_CHECK_EQ_INT(gt_proc_exit_code(&run), 0);
  char *dom = finish_dump(&page, "live.html");
  /* the first look saw the run running with some epochs, a later one all 12, done */
  const char *first = strstr(dom, "<li data-run=\"2\"");
  int epochs = -1;
  GR_CHECK_MSG(first && strstr(first, "data-status=\"running\" data-epochs=\"") == first + 17,
               "first update of run 2: %.300s", first ? first : dom);
  if (first) sscanf(first + 17, "data-status=\"running\" data-epochs=\"%d", &epochs);
  GR_CHECK_MSG(epochs >= 1 && epochs < 12, "first look: %d epochs", epochs);
  GR_CHECK_STR_CONTAINS(dom, "<li data-run=\"2\" data-status=\"done\" data-epochs=\"12\">");
  GR_CHECK_EQ_INT(count(dom, "class=\"point\" data-run=\"2\" data-tag=\"loss\""), 12);
  GR_CHECK_EQ_INT(count(dom, "class=\"point\" data-run=\"1\" data-tag=\"loss\""), 5);
  free(dom);
}

/* The Fashion-MNIST MLP's graph: scopes in scopes, the gradients' too
 * (Graphviz 2.43 frees its layout twice: the board draws in a child). */
static void test_mlp_graph(void) {
  char logs[128];
  snprintf(logs, sizeof logs, "%s/logs", dir);
  char args[512];
  snprintf(args, sizeof args,
           "run " GR_SOURCE_DIR "/examples/fashion_mlp.gr --epochs 1 --steps-per-epoch 2 "
           "--logdir %s --quiet",
           logs);
  GR_CHECK(gt_cli_expect(dir, args, 0, NULL, out, sizeof out));
  char host[64];
  snprintf(host, sizeof host, "127.0.0.1:%d", port);
  GR_CHECK_EQ_INT(http_get("/api/graph.svg?run=3", host), 200);
  GR_CHECK_STR_CONTAINS(out, "<g id=\"clust1\" class=\"cluster\">");
  GR_CHECK_EQ_INT(http_get("/api/runs", host), 200); /* still serving */
}

int main(void) {
  if (!find_chromium()) {
    printf("test_board: skipped: no chromium (make test installs Debian's chromium)\n");
    return 77;
  }
  gt_proc_isolate();
  snprintf(dir, sizeof dir, "/tmp/gr_test_board_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  setup();
  if (port > 0) {
    GR_RUN(test_api);
    GR_RUN(test_finished_run);
    GR_RUN(test_live_updates);
    GR_RUN(test_mlp_graph);
  }
  gt_proc_finish(&board);
  gt_remove_tree(dir);
  return gr_test_finish();
}

/* gt_cluster: servers, proxies and the recovery-test training for the fault
 * tests (cluster_harness.h). */
#include "cluster_harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const weights[] = {"w1", "b1", "w2", "b2", "w3", "b3", "loss"};

void gt_cluster_path(const gt_cluster *c, const char *name, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/%s", c->dir, name);
}

int gt_rand_between(unsigned long long *s, int lo, int hi) {
  unsigned long long z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return hi > lo ? lo + (int)(z % (unsigned long long)(hi - lo + 1)) : lo;
}

static bool write_secret(gt_cluster *c) {
  gt_cluster_path(c, "secret", c->secret, sizeof c->secret);
  int fd = open(c->secret, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  char text[80];
  snprintf(text, sizeof text, "fault-tests-%d-%ld\n", (int)getpid(), (long)random());
  bool ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
  close(fd);
  return ok;
}

/* c->spec: a ClusterSpec of the given addresses. */
static void build_spec(gt_cluster *c) {
  size_t m = (size_t)snprintf(c->spec, sizeof c->spec, "{\"ps\": [");
  for (int k = 0; k < c->ps; k++)
    m += (size_t)snprintf(c->spec + m, sizeof c->spec - m, "%s\"%s\"", k ? ", " : "", c->given[k]);
  m += (size_t)snprintf(c->spec + m, sizeof c->spec - m, "], \"worker\": [");
  for (int k = c->ps; k < c->n; k++)
    m += (size_t)snprintf(c->spec + m, sizeof c->spec - m, "%s\"%s\"", k > c->ps ? ", " : "",
                          c->given[k]);
  snprintf(c->spec + m, sizeof c->spec - m, "]}");
}

bool gt_cluster_start(gt_cluster *c, const gt_cluster_options *o) {
  memset(c, 0, sizeof *c);
  snprintf(c->dir, sizeof c->dir, "/tmp/gr_faults_XXXXXX");
  if (!mkdtemp(c->dir)) {
    c->dir[0] = '\0';
    fprintf(stderr, "gt_cluster: no temporary directory\n");
    return false;
  }
  if (!write_secret(c)) {
    fprintf(stderr, "gt_cluster: cannot write the secret\n");
    return false;
  }
  snprintf(c->cluster_id, sizeof c->cluster_id, "gt-%d-%ld", (int)getpid(), (long)random());
  c->n = o->ps + o->workers;
  c->ps = o->ps;
  if (c->n > GT_MAX_TASKS) return false;
  if (o->client_netns) snprintf(c->client_netns, sizeof c->client_netns, "%s", o->client_netns);
  const char *exe = gt_graphrun_exe();
  for (int k = 0; k < c->n; k++) {
    bool ps = k < o->ps;
    int index = ps ? k : k - o->ps;
    snprintf(c->task[k], sizeof c->task[k], "%s:%d", ps ? "ps" : "worker", index);
    snprintf(c->name[k], sizeof c->name[k], "/job:%s/replica:0/task:%d", ps ? "ps" : "worker",
             index);
    const char *host = o->host[k] ? o->host[k] : "127.0.0.1";
    char idx[16], bind[80], threads[16], devices[16];
    snprintf(idx, sizeof idx, "%d", index);
    snprintf(threads, sizeof threads, "%d", o->threads > 0 ? o->threads : 1);
    snprintf(devices, sizeof devices, "%d", o->devices[k] > 0 ? o->devices[k] : 1);
    snprintf(bind, sizeof bind, "%s:0", host);
    char *argv[32];
    int a = 0;
    if (o->netns[k]) {
      argv[a++] = "/usr/sbin/ip";
      argv[a++] = "netns";
      argv[a++] = "exec";
      argv[a++] = (char *)o->netns[k];
      argv[a++] = (char *)exe;
    } else {
      argv[a++] = "graphrun";
    }
    char *rest[] = {"server",
                    "--job",
                    ps ? "ps" : "worker",
                    "--task",
                    idx,
                    "--bind",
                    bind,
                    "--threads",
                    threads,
                    "--devices",
                    devices,
                    "--secret-file",
                    c->secret,
                    "--cluster-id",
                    c->cluster_id,
                    o->quiet ? "--quiet" : NULL,
                    NULL};
    for (int i = 0; rest[i]; i++) argv[a++] = rest[i];
    for (int i = 0; o->server_args && o->server_args[i] && i < 8; i++)
      argv[a++] = (char *)o->server_args[i];
    argv[a] = NULL;
    gt_proc_start(&c->srv[k], argv);
    c->started[k] = true;
  }
  for (int k = 0; k < c->n; k++) {
    char want[96];
    const char *host = o->host[k] ? o->host[k] : "127.0.0.1";
    snprintf(want, sizeof want, "listening on %s:", host);
    if (!gt_proc_wait_line(&c->srv[k], want, 30)) {
      fprintf(stderr, "gt_cluster: %s did not start:\n%s\n", c->task[k], c->srv[k].buf);
      return false;
    }
    int port = atoi(strstr(c->srv[k].buf, want) + strlen(want));
    snprintf(c->addr[k], sizeof c->addr[k], "%s:%d", host, port);
    snprintf(c->given[k], sizeof c->given[k], "%s", c->addr[k]);
    if (o->proxies) {
      if (!(c->px[k] = gt_proxy_start(c->addr[k]))) return false;
      snprintf(c->given[k], sizeof c->given[k], "127.0.0.1:%d", gt_proxy_port(c->px[k]));
    }
  }
  build_spec(c);
  return true;
}

void gt_cluster_route(gt_cluster *c, int k, const char *addr) {
  snprintf(c->given[k], sizeof c->given[k], "%s", addr);
  build_spec(c);
}

void gt_cluster_stop(gt_cluster *c) {
  for (int k = 0; k < c->n; k++) {
    if (c->started[k]) gt_proc_finish(&c->srv[k]);
    c->started[k] = false;
    gt_proxy_stop(c->px[k]);
    c->px[k] = NULL;
  }
  if (c->dir[0]) gt_remove_tree(c->dir);
  c->dir[0] = '\0';
}

/* The strings of the recovery test's run flags. */
typedef struct mlp_args {
  char file[PATH_MAX], ckpt[PATH_MAX], out[PATH_MAX], steps[16], every[16];
} mlp_args;

/* recovery_mlp.gr and the run flags every recovery test gives, into argv
 * (strings in m); returns how many. */
static int mlp_argv(mlp_args *m, const char *dir, const char *name, int steps, int save_every,
                    const char **argv) {
  snprintf(m->file, sizeof m->file, "%s/tests/data/recovery_mlp.gr", GR_SOURCE_DIR);
  const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
  snprintf(m->ckpt, sizeof m->ckpt, "%s/ckpt_%s", dir, base);
  if (name[0] == '/')
    snprintf(m->out, sizeof m->out, "%s", name);
  else
    snprintf(m->out, sizeof m->out, "%s/%s", dir, name);
  snprintf(m->steps, sizeof m->steps, "%d", steps);
  snprintf(m->every, sizeof m->every, "%d", save_every);
  const char *args[] = {m->file,
                        "--steps",
                        m->steps,
                        "--ckpt",
                        m->ckpt,
                        "--save-every",
                        m->every,
                        "--out",
                        m->out,
                        "--eval",
                        "w1,b1,w2,b2,w3,b3",
                        "--timeout",
                        "30",
                        "--recovery-timeout",
                        "30"};
  int n = (int)(sizeof args / sizeof args[0]);
  memcpy(argv, args, sizeof args);
  return n;
}

/* Appends the NULL-terminated list to argv at *a (up to cap entries). */
static void append_args(const char **argv, int *a, int cap, const char *const *list) {
  for (int i = 0; list && list[i] && *a < cap; i++) argv[(*a)++] = list[i];
}

void gt_cluster_run_mlp(const gt_cluster *c, gt_proc *p, const char *name, int steps,
                        int save_every, const char *const *extra) {
  mlp_args m;
  const char *argv[70] = {"graphrun", "run"};
  int a = 2;
  a += mlp_argv(&m, c->dir, name, steps, save_every, argv + a);
  append_args(argv, &a, 62,
              (const char *const[]){"--cluster", c->spec, "--secret-file", c->secret,
                                    "--cluster-id", c->cluster_id, "--max-failures", "50", NULL});
  append_args(argv, &a, 62, extra);
  argv[a] = NULL;
  if (c->client_netns[0]) { /* ip netns exec NS graphrun ... */
    memmove(argv + 4, argv, sizeof(char *) * (size_t)(a + 1));
    argv[0] = "/usr/sbin/ip", argv[1] = "netns", argv[2] = "exec", argv[3] = c->client_netns;
    argv[4] = gt_graphrun_exe();
  }
  gt_proc_start(p, (char *const *)argv);
}

void gt_launch_run_mlp(gt_proc *p, const char *dir, const char *name, int steps, int save_every,
                       const char *const *launch_flags, const char *const *extra) {
  mlp_args m;
  const char *argv[70] = {"graphrun", "launch"};
  int a = 2;
  append_args(argv, &a, 40, launch_flags);
  a += mlp_argv(&m, dir, name, steps, save_every, argv + a);
  append_args(argv, &a, 68, extra);
  argv[a] = NULL;
  gt_proc_start(p, (char *const *)argv);
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = malloc(1 << 20);
  *len = buf ? fread(buf, 1, 1 << 20, f) : 0;
  fclose(f);
  return buf;
}

bool gt_same_weights(const char *a, const char *b) {
  bool same = true;
  for (size_t i = 0; i < sizeof weights / sizeof *weights; i++) {
    char pa[PATH_MAX], pb[PATH_MAX];
    snprintf(pa, sizeof pa, "%s/%s.npy", a, weights[i]);
    snprintf(pb, sizeof pb, "%s/%s.npy", b, weights[i]);
    size_t la = 0, lb = 0;
    char *da = slurp(pa, &la), *db = slurp(pb, &lb);
    if (!da || !db || la != lb || la == 0 || memcmp(da, db, la) != 0) {
      fprintf(stderr, "weights differ: %s (%zu bytes%s) vs %s (%zu bytes%s)\n", pa, la,
              da ? "" : ", missing", pb, lb, db ? "" : ", missing");
      same = false;
    }
    free(da);
    free(db);
  }
  return same;
}

bool gt_json_loss(const char *out, char *buf, size_t cap) {
  const char *l = strstr(out, "{\"loss\"");
  const char *e = l ? strchr(l, '}') : NULL;
  if (!e || (size_t)(e - l) >= cap) return false;
  memcpy(buf, l, (size_t)(e - l));
  buf[e - l] = '\0';
  return true;
}

const char *gt_find_after(const gt_proc *p, size_t from, const char *want) {
  return from <= p->len ? strstr(p->buf + from, want) : NULL;
}

double gt_wait_line_after(gt_proc *p, size_t from, const char *want, double since, double seconds) {
  double end = gt_now() + seconds;
  for (;;) {
    const char *at = gt_find_after(p, from, want);
    if (at && strchr(at, '\n')) return gt_now() - since;
    if (gt_now() >= end) return -1;
    if (!gt_proc_wait(p, "\x01", 0.002) && p->done && p->out < 0) return -1;
  }
}

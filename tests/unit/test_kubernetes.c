/* The Kubernetes manifests (examples/kubernetes/graphrun.yaml), checked
 * without a Kubernetes: read as YAML (python3-yaml, into JSON), their
 * objects checked against each other (the headless Service selects every
 * pod and its names are the cluster's addresses; each job's Indexed Job has
 * one completion per task; the secret is mounted 0400 where --secret-file
 * reads it; readiness is the server's port), then each container's own
 * script run as Kubernetes would run it in each pod (JOB_COMPLETION_INDEX,
 * the ConfigMap's and Secret's files), with a `graphrun` that records its
 * TF_CONFIG and arguments: TF_CONFIG must name the pod's own task, and the
 * real servers started from what was recorded (listening on loopback
 * instead of 0.0.0.0:2222) must say they are that task; the chief's client,
 * pointed at them, runs the ConfigMap's model to 238. Without python3-yaml
 * it says why and exits 77. */
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gr_test.h"
#include "placer/gr_placer.h"
#include "test_proc.h"
#include "test_util.h"

#define MANIFESTS GR_SOURCE_DIR "/examples/kubernetes/graphrun.yaml"
#define MAX_PODS  8

static char dir[PATH_MAX];
static json_t *objects; /* the manifests, as JSON */

static const json_t *find(const char *kind, const char *name) {
  size_t i;
  json_t *o;
  json_array_foreach(objects, i, o) {
    const char *k = json_string_value(json_object_get(o, "kind"));
    const char *n = json_string_value(json_object_get(json_object_get(o, "metadata"), "name"));
    if (k && n && !strcmp(k, kind) && !strcmp(n, name)) return o;
  }
  return NULL;
}

/* o's value at a path of keys and indexes: "spec/template/spec/containers/#0". */
static const json_t *at(const json_t *o, const char *path) {
  char p[256];
  snprintf(p, sizeof p, "%s", path);
  for (char *save, *k = strtok_r(p, "/", &save); k && o; k = strtok_r(NULL, "/", &save))
    o = k[0] == '#' ? json_array_get(o, (size_t)atoi(k + 1)) : json_object_get(o, k);
  return o;
}

static const char *str_at(const json_t *o, const char *path) {
  const char *s = json_string_value(at(o, path));
  return s ? s : "";
}

/* The container named name of a pod template, or NULL. */
static const json_t *container(const json_t *job, const char *name) {
  size_t i;
  json_t *c;
  json_array_foreach(at(job, "spec/template/spec/containers"), i, c) {
    if (!strcmp(str_at(c, "name"), name)) return c;
  }
  return NULL;
}

/* The mount path of volume `volume` in container c ("" when none). */
static const char *mount_of(const json_t *c, const char *volume) {
  size_t i;
  json_t *m;
  json_array_foreach(json_object_get(c, "volumeMounts"), i, m) {
    if (!strcmp(str_at(m, "name"), volume)) return str_at(m, "mountPath");
  }
  return "";
}

/* What a pod's container ran: its TF_CONFIG and its arguments. */
typedef struct recorded {
  char tf[2048];
  char *args[32];
  int nargs;
  char buf[4096];
} recorded;

/* Runs container c's script as Kubernetes would in pod `pod` (index i):
 * the ConfigMap at dir/cm, the secret at dir/secret, a recording
 * `graphrun` first on PATH. */
static bool run_script(const json_t *c, const char *pod, int i, recorded *r) {
  char script[8192], path[PATH_MAX + 64], *out = script;
  const char *src = str_at(c, "args/#0");
  const char *cm = mount_of(c, "cluster"), *sec = mount_of(c, "secret");
  /* the mounts' paths, where this test put their files */
  size_t n = 0;
  while (*src && n < sizeof script - PATH_MAX) {
    if (cm[0] && !strncmp(src, cm, strlen(cm)) && src[strlen(cm)] == '/')
      n += (size_t)snprintf(out + n, sizeof script - n, "%s/cm", dir), src += strlen(cm);
    else if (sec[0] && !strncmp(src, sec, strlen(sec)) && src[strlen(sec)] == '/')
      n += (size_t)snprintf(out + n, sizeof script - n, "%s/secret", dir), src += strlen(sec);
    else
      out[n++] = *src++;
  }
  out[n] = '\0';
  char index[32], host[64], env_path[PATH_MAX + 16], rec[PATH_MAX + 32];
  snprintf(index, sizeof index, "JOB_COMPLETION_INDEX=%d", i);
  snprintf(host, sizeof host, "HOSTNAME=%s", pod);
  snprintf(env_path, sizeof env_path, "PATH=%s/bin:/usr/bin:/bin", dir);
  snprintf(rec, sizeof rec, "RECORD=%s/record", dir);
  gt_proc p;
  gt_proc_start(&p, (char *[]){"/usr/bin/env", "-i", index, host, env_path, rec, "/bin/sh", "-c",
                               script, NULL});
  bool ok = gt_proc_wait(&p, NULL, 30);
  gt_proc_finish(&p);
  ok = ok && gt_proc_exit_code(&p) == 0;
  GR_CHECK_MSG(ok, "pod %s: its script failed:\n%s", pod, p.buf);
  memset(r, 0, sizeof *r);
  snprintf(path, sizeof path, "%s/record.tf", dir); /* TF_CONFIG, whose JSON may span lines */
  FILE *f = fopen(path, "r");
  size_t got = f ? fread(r->tf, 1, sizeof r->tf - 1, f) : 0;
  while (got > 0 && r->tf[got - 1] == '\n') got--;
  r->tf[got] = '\0';
  if (f) fclose(f);
  unlink(path);
  ok = ok && got > 0;
  snprintf(path, sizeof path, "%s/record", dir);
  f = fopen(path, "r");
  size_t used = 0;
  while (ok && f && r->nargs < 31 && used < sizeof r->buf - 1 &&
         fgets(r->buf + used, (int)(sizeof r->buf - used), f)) {
    r->buf[used + strcspn(r->buf + used, "\n")] = '\0';
    r->args[r->nargs++] = r->buf + used;
    used += strlen(r->buf + used) + 1;
  }
  if (f) fclose(f);
  unlink(path);
  return ok;
}

static int arg_index(const recorded *r, const char *a) {
  for (int k = 0; k < r->nargs; k++)
    if (!strcmp(r->args[k], a)) return k;
  return -1;
}

/* The value after flag f ("" when none). */
static const char *flag(const recorded *r, const char *f) {
  int k = arg_index(r, f);
  return k >= 0 && k + 1 < r->nargs ? r->args[k + 1] : "";
}

typedef struct pod {
  char job[32];
  int index;
  gt_proc srv;
  int port;
} pod;

/* Starts the real server from what the pod's script recorded: on loopback. */
static bool start_server(pod *p, const recorded *r) {
  char *argv[40] = {"/usr/bin/env"}, tf[2100], secret[PATH_MAX + 16];
  int n = 1;
  snprintf(tf, sizeof tf, "TF_CONFIG=%s", r->tf);
  argv[n++] = tf, argv[n++] = "GRAPHRUN_CLUSTER_ID=k8s-test", argv[n++] = (char *)gt_graphrun_exe();
  snprintf(secret, sizeof secret, "%s/secret/secret", dir);
  for (int k = 0; k < r->nargs && n < 38; k++) {
    bool bind = k > 0 && !strcmp(r->args[k - 1], "--bind");
    argv[n++] = bind ? "127.0.0.1:0" : r->args[k];
  }
  argv[n] = NULL;
  gt_proc_start(&p->srv, argv);
  char want[128];
  snprintf(want, sizeof want, "/job:%s/replica:0/task:%d listening on 127.0.0.1:", p->job,
           p->index);
  bool ok = gt_proc_wait_line(&p->srv, want, 30);
  GR_CHECK_MSG(ok, "the server of %s-%d:\n%s", p->job, p->index, p->srv.buf);
  if (ok) p->port = atoi(strstr(p->srv.buf, want) + strlen(want));
  return ok;
}

static void test_objects(void) {
  const json_t *svc = find("Service", "graphrun"), *cm = find("ConfigMap", "graphrun-cluster");
  GR_CHECK(svc && cm);
  if (!svc || !cm) return;
  GR_CHECK_MSG(!strcmp(str_at(svc, "spec/clusterIP"), "None"), "the Service is not headless");
  GR_CHECK(json_is_true(at(svc, "spec/publishNotReadyAddresses")));
  GR_CHECK_EQ_INT(json_integer_value(at(svc, "spec/ports/#0/port")), 2222);
  /* the ConfigMap's model is examples/cluster_basics.gr's code */
  char *want = NULL, line[512];
  size_t wn = 0;
  FILE *f = fopen(GR_SOURCE_DIR "/examples/cluster_basics.gr", "r"),
       *m = open_memstream(&want, &wn);
  while (f && fgets(line, sizeof line, f))
    if (line[0] != '#') fputs(line, m);
  if (f) fclose(f);
  fclose(m);
  GR_CHECK_MSG(!strcmp(str_at(cm, "data/model.gr"), want),
               "model.gr differs from "
               "examples/cluster_basics.gr:\n%s",
               str_at(cm, "data/model.gr"));
  free(want);
  const char *spec = str_at(cm, "data/cluster.json");
  gr_cluster *c = NULL;
  gr_error err;
  GR_CHECK_OK(gr_cluster_parse_json(spec, strlen(spec), "cluster.json", &c, &err), err);
  for (int k = 0; c && k < gr_cluster_num_tasks(c); k++) {
    const gr_cluster_task *t = gr_cluster_task_at(c, k);
    char name[64], addr[128];
    snprintf(name, sizeof name, "graphrun-%s", t->job);
    snprintf(addr, sizeof addr, "%s-%d.%s:2222", name, t->index, str_at(svc, "metadata/name"));
    GR_CHECK_MSG(!strcmp(t->address, addr), "/job:%s/task:%d is at %s, its pod's name is %s",
                 t->job, t->index, t->address, addr);
    const json_t *job = find("Job", name);
    GR_CHECK_MSG(job, "no Job %s", name);
    if (!job || t->index) continue;
    int tasks = 0;
    for (int j = 0; j < gr_cluster_num_tasks(c); j++)
      tasks += !strcmp(gr_cluster_task_at(c, j)->job, t->job);
    GR_CHECK(!strcmp(str_at(job, "spec/completionMode"), "Indexed"));
    GR_CHECK_EQ_INT(json_integer_value(at(job, "spec/completions")), tasks);
    GR_CHECK_EQ_INT(json_integer_value(at(job, "spec/parallelism")), tasks);
    GR_CHECK(!strcmp(str_at(job, "spec/template/spec/subdomain"), "graphrun"));
    GR_CHECK(!strcmp(str_at(job, "spec/template/spec/restartPolicy"), "OnFailure"));
    GR_CHECK(!strcmp(str_at(job, "spec/template/metadata/labels/app"),
                     str_at(svc, "spec/selector/app")));
    const json_t *server = container(job, "server");
    GR_CHECK(server && json_integer_value(at(server, "readinessProbe/tcpSocket/port")) == 2222);
    size_t i;
    json_t *v;
    json_array_foreach(at(job, "spec/template/spec/volumes"), i, v) {
      if (!strcmp(str_at(v, "name"), "secret"))
        GR_CHECK_MSG(json_integer_value(at(v, "secret/defaultMode")) == 0400 &&
                         !strcmp(str_at(v, "secret/secretName"), "graphrun-secret"),
                     "%s: the secret must be mounted 0400 (the server refuses more)", name);
    }
  }
  gr_cluster_free(c);
}

static void test_pods(void) {
  const json_t *cm = find("ConfigMap", "graphrun-cluster");
  if (!cm) return;
  const char *spec = str_at(cm, "data/cluster.json");
  gr_cluster *c = NULL;
  gr_error err;
  if (gr_cluster_parse_json(spec, strlen(spec), "cluster.json", &c, &err) != GR_OK) return;
  pod pods[MAX_PODS] = {0};
  int n = gr_cluster_num_tasks(c);
  recorded r, client;
  memset(&client, 0, sizeof client);
  bool servers = true;
  for (int k = 0; k < n && k < MAX_PODS; k++) {
    const gr_cluster_task *t = gr_cluster_task_at(c, k);
    char name[64], podname[80];
    snprintf(name, sizeof name, "graphrun-%s", t->job);
    snprintf(podname, sizeof podname, "%s-%d", name, t->index);
    snprintf(pods[k].job, sizeof pods[k].job, "%s", t->job);
    pods[k].index = t->index;
    const json_t *job = find("Job", name), *ct = job ? container(job, "server") : NULL;
    if (!ct || !run_script(ct, podname, t->index, &r)) {
      servers = false;
      continue;
    }
    /* TF_CONFIG names the pod's own task */
    gr_cluster *tc = NULL;
    gr_cluster_self self;
    GR_CHECK_OK(gr_cluster_from_tf_config(r.tf, &tc, &self, &err), err);
    GR_CHECK_MSG(tc && !strcmp(self.job, t->job) && self.index == t->index,
                 "pod %s: TF_CONFIG names /job:%s/task:%d", podname, self.job, self.index);
    gr_cluster_free(tc);
    char secret[PATH_MAX + 16];
    snprintf(secret, sizeof secret, "%s/secret/secret", dir);
    GR_CHECK_MSG(r.nargs > 0 && !strcmp(r.args[0], "server") &&
                     !strcmp(flag(&r, "--cluster"), "env") &&
                     !strcmp(flag(&r, "--bind"), "0.0.0.0:2222") &&
                     !strcmp(flag(&r, "--secret-file"), secret),
                 "pod %s: graphrun %s ...", podname, r.nargs ? r.args[0] : "");
    servers = start_server(&pods[k], &r) && servers;
    const json_t *cl = container(job, "client");
    if (cl) {
      GR_CHECK_MSG(!strcmp(t->job, "chief"), "the client runs in the chief's pod, not %s", podname);
      if (run_script(cl, podname, t->index, &client)) {
        GR_CHECK_OK(gr_cluster_from_tf_config(client.tf, &tc, &self, &err), err);
        GR_CHECK(tc && !strcmp(self.job, "chief") && self.index == 0);
        gr_cluster_free(tc);
      }
    }
  }
  GR_CHECK_MSG(client.nargs > 2 && !strcmp(client.args[0], "run") &&
                   !strcmp(flag(&client, "--cluster"), "env") &&
                   atof(flag(&client, "--connect-timeout")) >= 60,
               "the chief's client: graphrun %s ...", client.nargs ? client.args[0] : "");
  if (servers && client.nargs > 2) { /* the client, its cluster at the servers' real ports */
    char tf[2048], model[PATH_MAX + 32];
    size_t m = (size_t)snprintf(tf, sizeof tf, "TF_CONFIG={\"cluster\": {");
    for (int k = 0; k < n; k++) { /* a job's tasks are together, in order */
      bool first = k == 0 || strcmp(pods[k - 1].job, pods[k].job) != 0;
      if (first)
        m += (size_t)snprintf(tf + m, sizeof tf - m, "%s\"%s\": [", k ? "], " : "", pods[k].job);
      m += (size_t)snprintf(tf + m, sizeof tf - m, "%s\"127.0.0.1:%d\"", first ? "" : ", ",
                            pods[k].port);
    }
    snprintf(tf + m, sizeof tf - m, "]}, \"task\": {\"type\": \"chief\", \"index\": 0}}");
    snprintf(model, sizeof model, "%s/cm/model.gr", dir);
    char *argv[40] = {"/usr/bin/env", tf, "GRAPHRUN_CLUSTER_ID=k8s-test",
                      (char *)gt_graphrun_exe()};
    int a = 4;
    for (int k = 0; k < client.nargs && a < 38; k++) argv[a++] = k == 1 ? model : client.args[k];
    argv[a] = NULL;
    gt_proc run;
    gt_proc_start(&run, argv);
    bool ended = gt_proc_wait(&run, NULL, 120);
    gt_proc_finish(&run);
    GR_CHECK_MSG(ended && gt_proc_exit_code(&run) == 0 && strstr(run.buf, "y = 238.0"),
                 "the chief's client:\n%s", run.buf);
    printf("%d pods' servers as their TF_CONFIG says; the chief's client: %s", n,
           strstr(run.buf, "y = ") ? strstr(run.buf, "y = ") : "(nothing)\n");
  }
  for (int k = 0; k < n && k < MAX_PODS; k++)
    if (pods[k].srv.pid > 0) {
      if (!pods[k].srv.done) kill(pods[k].srv.pid, SIGTERM);
      gt_proc_wait(&pods[k].srv, NULL, 20);
      gt_proc_finish(&pods[k].srv);
    }
  gr_cluster_free(c);
}

/* The manifests as JSON (python3-yaml), or NULL. */
static json_t *load(void) {
  gt_proc p;
  gt_proc_start(&p, (char *[]){"/usr/bin/python3", "-c",
                               "import sys, json, yaml; "
                               "json.dump(list(yaml.safe_load_all(open(sys.argv[1]))), sys.stdout)",
                               MANIFESTS, NULL});
  bool ok = gt_proc_wait(&p, NULL, 60);
  gt_proc_finish(&p);
  json_error_t je;
  json_t *j = ok && gt_proc_exit_code(&p) == 0 ? json_loads(p.buf, 0, &je) : NULL;
  if (!j) fprintf(stderr, "reading %s:\n%s\n", MANIFESTS, p.buf);
  return j;
}

/* dir/cm (the ConfigMap's files), dir/secret/secret, dir/bin/graphrun (records). */
static void files(void) {
  const json_t *cm = find("ConfigMap", "graphrun-cluster");
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/cm", dir);
  mkdir(path, 0700);
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)json_object_get(cm, "data"), k, v) {
    gt_write_file(path, k, json_string_value(v));
  }
  snprintf(path, sizeof path, "%s/secret", dir);
  mkdir(path, 0700);
  gt_write_file(path, "secret", "0123456789abcdef0123456789abcdef\n");
  strncat(path, "/secret", sizeof path - strlen(path) - 1);
  chmod(path, 0400);
  snprintf(path, sizeof path, "%s/bin", dir);
  mkdir(path, 0700);
  gt_write_file(path, "graphrun",
                "#!/bin/sh\nprintf '%s\\n' \"$TF_CONFIG\" > \"$RECORD.tf\"\n"
                "printf '%s\\n' \"$@\" > \"$RECORD\"\n");
  strncat(path, "/graphrun", sizeof path - strlen(path) - 1);
  chmod(path, 0700);
}

int main(void) {
  gt_proc_isolate();
  gt_proc probe;
  gt_proc_start(&probe, (char *[]){"/usr/bin/python3", "-c", "import yaml", NULL});
  bool have = gt_proc_wait(&probe, NULL, 30);
  gt_proc_finish(&probe);
  if (!have || gt_proc_exit_code(&probe) != 0) {
    printf("SKIP: python3 with yaml is missing (make test installs python3-yaml); the "
           "manifests were not checked\n");
    return 77;
  }
  if (!(objects = load())) return 1;
  snprintf(dir, sizeof dir, "/tmp/gr_k8s_%d", (int)getpid());
  gt_remove_tree(dir);
  mkdir(dir, 0700);
  files();
  GR_RUN(test_objects);
  GR_RUN(test_pods);
  json_decref(objects);
  gt_remove_tree(dir);
  return gr_test_finish();
}

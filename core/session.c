#include "core/gr_session.h"

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/gr_colocation.h"
#include "core/executor.h"
#include "core/gr_rng.h"
#include "core/gr_resource.h"
#include "core/device_plan.h"
#include "core/session_remote.h"
#include "core/session_rewrite.h"
#include "core/step_watch_internal.h"
#include "core/map.h"

#define GR_INIT_DEPTH_MAX 16
#define GR_LAST_EPS_MAX   16

typedef struct prepared {
  gr_graph *graph; /* the rewrite hook's graph the step runs, or NULL: the session's */
  int *feed_index; /* with graph: the caller's feeds it takes, in order (those of nodes it
                      has; a fed node nothing needs may be gone) */
  int num_feeds;
  gr_executor *exec;    /* the step's nodes are on one device */
  gr_device_plan *plan; /* or on several: one executor per device */
  void *remote_plan;    /* or in other processes: the remote runner's */
  int num_vars;
  gr_node **vars;   /* variable nodes this step reads */
  int vars_ready;   /* all of them were initialised once */
  bool uses_stacks; /* some node needs the step's stacks */
  bool collective;  /* some node is a collective (GR_OP_COLLECTIVE): on one device too, its
                       members meet in a rendezvous of the step */
  char *key;
} prepared;

struct gr_session {
  gr_graph *graph;
  gr_session_options opts;
  gr_threadpool *pool;
  gr_watchdog *watchdog; /* with a step timeout */
  gr_resource_mgr *resources;
  gr_device_spec *devices;
  char **device_names;
  pthread_mutex_t mu;
  gr_map cache;
  int num_cached;
  int64_t step;
  int init_depth;
  uint64_t incarnation; /* in every rendezvous key of this session */
  char **soft_noted;    /* specs soft placement has reported (under mu) */
  int num_soft_noted;
  _Atomic int64_t last_sends, last_bytes; /* the latest step's transfers */
  /* the latest run's endpoints and what they prepared (under mu): a loop
   * that runs one signature finds it without building its key */
  prepared *last;
  int last_nf, last_nx, last_nt;
  gr_output last_eps[GR_LAST_EPS_MAX];
};

static void (*intra_op_hook)(int);
void gr_session_set_intra_op_hook(void (*fn)(int)) {
  intra_op_hook = fn;
}

static gr_session_rewrite_fn rewrite_hook;
void gr_session_set_rewrite_hook(gr_session_rewrite_fn fn) {
  rewrite_hook = fn;
}

/* Device k from the options' names: a full device name, not one before it. */
static gr_status set_named_device(gr_session *s, int k, gr_error *err) {
  const char *name = s->opts.device_names[k];
  gr_error e;
  if (!name || gr_device_spec_parse(name, &s->devices[k], &e) != GR_OK)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "session device %d: %s", k,
                        name ? e.msg : "no name");
  if (!gr_device_spec_is_full(&s->devices[k]))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "session device %d: '%s' is not a full device name "
                        "(/job:J/replica:R/task:T/device:TYPE:K)",
                        k, name);
  for (int j = 0; j < k; j++)
    if (gr_device_spec_matches(&s->devices[j], &s->devices[k]))
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "session devices %d and %d are both '%s'",
                          j, k, name);
  return GR_OK;
}

gr_session *gr_session_new(gr_graph *g, const gr_session_options *opts, gr_error *err) {
  if (!g) {
    gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "gr_session_new: graph is NULL");
    return NULL;
  }
  const gr_error *ge = gr_graph_error(g);
  if (ge) {
    gr_error_set(err, ge->code, "the graph has a build error: %s", ge->msg);
    return NULL;
  }
  gr_session_options o = opts ? *opts : (gr_session_options){0};
  if (o.inter_op_threads < 0 || o.intra_op_threads < 0 || o.num_devices < 0 ||
      o.inter_op_threads > 1024 || o.intra_op_threads > 1024 || o.num_devices > 1024) {
    gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                 "session options out of range (threads and devices must be in [0, 1024])");
    return NULL;
  }
  if (o.step_timeout_ms < 0) {
    gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "step_timeout_ms is negative (0: no limit)");
    return NULL;
  }
  if (!o.inter_op_threads) o.inter_op_threads = gr_num_cores();
  if (!o.intra_op_threads) o.intra_op_threads = 1;
  if (!o.num_devices) o.num_devices = 1;
  gr_session *s = calloc(1, sizeof *s);
  if (!s) goto oom;
  s->graph = g;
  s->opts = o;
  s->incarnation = gr_rng_hash_name("session") ^ (uint64_t)(uintptr_t)s ^ (uint64_t)time(NULL);
  pthread_mutex_init(&s->mu, NULL);
  gr_map_init(&s->cache, GR_MAP_STR);
  /* the calling thread runs nodes too, so the pool has one thread fewer */
  s->pool = gr_threadpool_new(o.inter_op_threads - 1);
  gr_threadpool_set_name(s->pool, "gr-inter-op");
  s->resources = o.resources ? gr_resource_mgr_ref(o.resources) : gr_resource_mgr_new();
  s->devices = calloc((size_t)o.num_devices, sizeof *s->devices);
  s->device_names = calloc((size_t)o.num_devices, sizeof(char *));
  if (o.step_timeout_ms > 0 && !(s->watchdog = gr_watchdog_new(o.step_timeout_ms))) goto oom;
  if (!s->pool || !s->resources || !s->devices || !s->device_names) goto oom;
  for (int k = 0; k < o.num_devices; k++) {
    char buf[GR_DEVICE_NAME_MAX];
    if (o.device_names && set_named_device(s, k, err) != GR_OK) {
      gr_session_free(s);
      return NULL;
    }
    if (!o.device_names) s->devices[k] = gr_device_spec_local_cpu(k);
    s->device_names[k] = strdup(gr_device_spec_str(&s->devices[k], buf));
    if (!s->device_names[k]) goto oom;
  }
  if (intra_op_hook) intra_op_hook(o.intra_op_threads);
  return s;
oom:
  gr_session_free(s);
  gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory creating a session");
  return NULL;
}

static void prepared_free(const gr_session *s, prepared *p) {
  if (!p) return;
  if (p->remote_plan) s->opts.remote->free_plan(s->opts.remote->self, p->remote_plan);
  gr_executor_free(p->exec);
  gr_device_plan_free(p->plan);
  gr_graph_free(p->graph);
  free(p->feed_index);
  free(p->vars);
  free(p->key);
  free(p);
}

void gr_session_free(gr_session *s) {
  if (!s) return;
  void *p;
  for (size_t pos = 0; gr_map_next(&s->cache, &pos, NULL, &p);) prepared_free(s, p);
  gr_map_free(&s->cache);
  for (int i = 0; i < s->num_soft_noted; i++) free(s->soft_noted[i]);
  free(s->soft_noted);
  gr_threadpool_free(s->pool);
  gr_watchdog_free(s->watchdog);
  gr_resource_mgr_free(s->resources);
  if (s->device_names)
    for (int k = 0; k < s->opts.num_devices; k++) free(s->device_names[k]);
  free(s->device_names);
  free(s->devices);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

gr_resource_mgr *gr_session_resources(gr_session *s) {
  return s->resources;
}
int64_t gr_session_step(const gr_session *s) {
  return __atomic_load_n(&s->step, __ATOMIC_RELAXED);
}
void gr_session_set_step(gr_session *s, int64_t step) {
  __atomic_store_n(&s->step, step, __ATOMIC_RELAXED);
}
int gr_session_num_devices(const gr_session *s) {
  return s->opts.num_devices;
}
gr_transfer_stats gr_session_last_transfers(const gr_session *s) {
  return (gr_transfer_stats){atomic_load_explicit(&s->last_sends, memory_order_relaxed),
                             atomic_load_explicit(&s->last_bytes, memory_order_relaxed)};
}

int gr_session_num_cached(const gr_session *s) {
  return s->num_cached;
}

/* ---- preparation ----------------------------------------------------------- */

static char *signature(const gr_feed *feeds, int nf, const gr_output *fetches, int nx,
                       const gr_output *targets, int nt) {
  size_t cap = 32 + 24 * (size_t)(nf + nx + nt);
  char *k = malloc(cap);
  if (!k) return NULL;
  k[0] = '\0'; /* a run with nothing to feed, fetch or run */
  size_t n = 0;
  for (int i = 0; i < nf; i++)
    n += (size_t)snprintf(k + n, cap - n, "f%d:%d,",
                          feeds[i].output.node ? feeds[i].output.node->id : -1,
                          feeds[i].output.index);
  for (int i = 0; i < nx; i++)
    n += (size_t)snprintf(k + n, cap - n, "x%d:%d,", fetches[i].node ? fetches[i].node->id : -1,
                          fetches[i].index);
  for (int i = 0; i < nt; i++)
    n += (size_t)snprintf(k + n, cap - n, "t%d,", targets[i].node ? targets[i].node->id : -1);
  return k;
}

static gr_status check_endpoint(gr_session *s, gr_output o, const char *what, int i,
                                gr_error *err) {
  if (!o.node) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s %d is a null output", what, i);
  if (o.node->graph != s->graph || gr_graph_node(s->graph, o.node->id) != o.node)
    return gr_error_set(err, GR_ERR_NOT_FOUND, "%s %d ('%s') is not a node of this session's graph",
                        what, i, o.node->name);
  if (strcmp(what, "target") != 0 && (o.index < 0 || o.index >= o.node->num_outputs))
    return gr_error_set(err, GR_ERR_OUT_OF_RANGE, "%s %d: '%s' has no output %d (it has %d)", what,
                        i, o.node->name, o.index, o.node->num_outputs);
  return GR_OK;
}

/* Index of the session device named exactly `name`, -1 when none. */
static int device_named(const gr_session *s, const char *name) {
  for (int k = 0; name && k < s->opts.num_devices; k++)
    if (strcmp(name, s->device_names[k]) == 0) return k;
  return -1;
}

/* Soft placement: where a node whose spec matches no device of this session
 * runs: the session device the placer assigned it, else the session's device
 * of the spec's type and index, else of its type, else device 0. */
static int soft_device(const gr_session *s, const gr_node *node, const gr_device_spec *spec) {
  int k = device_named(s, node->assigned_device);
  if (k >= 0) return k;
  gr_device_spec local = gr_device_spec_any();
  memcpy(local.type, spec->type, sizeof local.type);
  local.id = spec->id;
  for (int pass = 0; pass < 2; pass++, local.id = GR_DEVICE_ANY)
    for (k = 0; k < s->opts.num_devices; k++)
      if (gr_device_spec_matches(&local, &s->devices[k])) return k;
  return 0;
}

/* Tells the user, once per spec and session, that soft placement moved it;
 * once for every GPU pin (this build has CPUs only). */
static void note_soft(gr_session *s, const gr_node *node, const gr_device_spec *spec,
                      const char *request, int k) {
  bool gpu = strcmp(spec->type, "GPU") == 0;
  const char *key = gpu ? "GPU" : request;
  pthread_mutex_lock(&s->mu);
  bool seen = false;
  for (int i = 0; i < s->num_soft_noted && !seen; i++) seen = !strcmp(s->soft_noted[i], key);
  char **more =
      seen ? NULL
           : gr_realloc_array(s->soft_noted, (size_t)(s->num_soft_noted + 1), sizeof(char *));
  if (more) {
    s->soft_noted = more;
    if ((more[s->num_soft_noted] = strdup(key))) s->num_soft_noted++;
  }
  pthread_mutex_unlock(&s->mu);
  if (seen) return;
  char msg[GR_ERROR_MSG_MAX];
  if (gpu)
    snprintf(msg, sizeof msg,
             "soft placement: this build has no GPU: the nodes pinned to GPUs run on this "
             "session's CPUs (the first: '%s', pinned to '%s', on %s)",
             node->name, request, s->device_names[k]);
  else
    snprintf(msg, sizeof msg,
             "soft placement: no device of this session matches '%s': the nodes pinned there run "
             "on this session's devices ('%s' on %s)",
             request, node->name, s->device_names[k]);
  if (s->opts.log_fn)
    s->opts.log_fn(s->opts.log_arg, msg);
  else
    fprintf(stderr, "graphrun: note: %s\n", msg);
}

/* The session device for a node whose request is spec: the one the placer
 * assigned it when that is a session device the spec allows (have >= 0),
 * else the first that the spec matches; with none, soft placement picks one
 * (soft_device) or it is an error. -1 after an error. */
static int device_for(gr_session *s, gr_node *node, const gr_device_spec *spec, int have,
                      gr_error *err) {
  if (have >= 0 && gr_device_spec_matches(spec, &s->devices[have])) return have;
  int k = 0;
  while (k < s->opts.num_devices && !gr_device_spec_matches(spec, &s->devices[k])) k++;
  if (k < s->opts.num_devices) return k;
  char request[GR_DEVICE_NAME_MAX];
  gr_device_spec_str(spec, request);
  if (s->opts.soft_placement) {
    k = soft_device(s, node, spec);
    note_soft(s, node, spec, request, k);
    return k;
  }
  if (strcmp(spec->type, "GPU") == 0) {
    gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                 "node '%s' is pinned to '%s', but this build has no GPU; soft placement runs GPU "
                 "pins on a CPU, as TensorFlow's allow_soft_placement (graphrun run "
                 "--soft-placement; gr_session_options.soft_placement)",
                 node->name, request);
    return -1;
  }
  char list[512];
  size_t m = 0;
  for (int d = 0; d < s->opts.num_devices && m < sizeof list - 1; d++)
    m += (size_t)snprintf(list + m, sizeof list - m, "%s%s", d ? ", " : "", s->device_names[d]);
  gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
               "node '%s': device spec '%s' matches no device of this session "
               "(devices: %s); soft placement would run it on one of them "
               "(graphrun run --soft-placement; gr_session_options.soft_placement)",
               node->name, request, list);
  return -1;
}

/* Per group of several members (by its first member's id): the device of its
 * first member that the placer put on a session device the group's request
 * allows, -1 when none. One pass over the graph g, so a group gets one
 * device whatever subset of it a step runs. */
static int *group_devices(gr_session *s, const gr_graph *g, const gr_colocation *col) {
  int total = col->num_nodes;
  int *dev = gr_alloc_array((size_t)total + 1, sizeof(int));
  if (!dev) return NULL;
  for (int id = 0; id < total; id++) dev[id] = -2; /* not seen */
  for (int id = 0; id < total; id++) {
    int r = col->group[id];
    if (col->size[id] < 2 || dev[r] >= 0) continue;
    gr_device_spec spec = gr_colocation_spec(col, g, id);
    int k = device_named(s, gr_graph_node(g, id)->assigned_device);
    dev[r] = k >= 0 && gr_device_spec_matches(&spec, &s->devices[k]) ? k : -1;
  }
  return dev;
}

/* Resolves each needed node's device. A colocation group (core/gr_colocation.h)
 * runs on one device: its first member's placed device, when the group's
 * request allows it, else the first the request matches. A node alone keeps
 * the device the placer assigned it when its request (its own pin, else that
 * of the node its hint names) allows it, else the first such device. With
 * none, soft placement picks one (soft_device) or it is an error.
 * *num_used: how many different devices the nodes use. nodes: of g (the
 * session's graph, or a step's rewritten one). */
static gr_status assign_devices(gr_session *s, gr_graph *g, gr_node *const *nodes, int n,
                                int *num_used, gr_error *err) {
  gr_colocation col;
  GR_TRY(gr_colocation_compute(g, s->opts.soft_placement, &col, err));
  char *used = calloc((size_t)s->opts.num_devices, 1);
  int *gdev = group_devices(s, g, &col);
  gr_status st = GR_OK;
  if (!used || !gdev) st = gr_error_set_oom(err);
  *num_used = 0;
  for (int i = 0; i < n && st == GR_OK; i++) {
    gr_node *node = nodes[i];
    gr_device_spec spec = gr_colocation_spec(&col, g, node->id);
    int r = col.group[node->id], k;
    if (col.size[node->id] > 1) {
      if (gdev[r] < 0) gdev[r] = device_for(s, node, &spec, -1, err);
      k = gdev[r];
    } else {
      k = device_for(s, node, &spec, device_named(s, node->assigned_device), err);
    }
    if (k < 0) {
      st = err ? err->code : GR_ERR_INVALID_ARGUMENT;
      break;
    }
    if (!used[k]) ++*num_used;
    used[k] = 1;
    if (!node->assigned_device || strcmp(node->assigned_device, s->device_names[k]) != 0)
      node->assigned_device = gr_graph_strdup(g, s->device_names[k]);
  }
  free(used);
  free(gdev);
  gr_colocation_free(&col);
  return st;
}

gr_status gr_session_place_nodes(gr_session *s, gr_node *const *nodes, int n, gr_error *err) {
  int used;
  return assign_devices(s, s->graph, nodes, n, &used, err);
}

/* Marks needed[id] for every node the fetches and targets need, walking
 * back through data and control inputs and stopping at fed endpoints (a
 * control input on a fed node is satisfied by the feed); parent[id]: the
 * node that needs it (-1: fetched or a target). feed_eps: the fed endpoints. */
static gr_status mark_needed(const gr_graph *g, const gr_output *feed_eps, int nf,
                             const gr_output *fetches, int nx, const gr_output *targets, int nt,
                             unsigned char *needed, int *parent, gr_error *err) {
  gr_prune_request r = {.feeds = feed_eps,
                        .fetches = fetches,
                        .targets = targets,
                        .num_feeds = nf,
                        .num_fetches = nx,
                        .num_targets = nt,
                        .feeds_cut_control = true};
  return gr_graph_mark_needed(g, &r, needed, parent, err);
}

/* The error for a needed placeholder n that is not fed. */
static gr_status unfed_placeholder(gr_graph *g, const gr_node *n, int parent, gr_error *err) {
  if (parent >= 0)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "placeholder '%s' must be fed: it is needed by '%s'", n->name,
                        gr_graph_node(g, parent)->name);
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                      "placeholder '%s' must be fed: it is fetched or run as a target", n->name);
}

/* The nodes of g a step needs (nodes[0..*nn), by id), checking that every
 * needed placeholder is fed; counts the variable nodes and notes step
 * stacks in p. */
static gr_status collect(gr_graph *g, const gr_output *feed_eps, int nf, const gr_output *fetches,
                         int nx, const gr_output *targets, int nt, gr_node **nodes, int *nn,
                         int *nvars, prepared *p, gr_error *err) {
  int total = gr_graph_num_nodes(g);
  unsigned char *needed = calloc((size_t)total + 1, 1);
  int *parent = gr_alloc_array((size_t)total + 1, sizeof(int));
  gr_status st = !needed || !parent
                     ? gr_error_set_oom(err)
                     : mark_needed(g, feed_eps, nf, fetches, nx, targets, nt, needed, parent, err);
  *nn = *nvars = 0;
  for (int id = 0; st == GR_OK && id < total; id++) {
    if (!needed[id]) continue;
    gr_node *n = gr_graph_node(g, id);
    if (n->op->flags & GR_OP_PLACEHOLDER) {
      st = unfed_placeholder(g, n, parent[id], err);
      break;
    }
    if (n->op->flags & GR_OP_VARIABLE) (*nvars)++;
    if (n->op->flags & GR_OP_STEP_STACKS) p->uses_stacks = true;
    if (n->op->flags & GR_OP_COLLECTIVE) p->collective = true;
    nodes[(*nn)++] = n;
  }
  free(needed);
  free(parent);
  return st;
}

/* The step's endpoints (of the session's graph: nf feeds, then fetches
 * and targets) as the endpoints of the same names in p->graph, the
 * rewritten one; feeds of nodes it does not have are dropped (*nf and
 * p->feed_index say which stay). */
static gr_status rename_endpoints(prepared *p, gr_output *eps, int *nf, int n, gr_error *err) {
  p->feed_index = gr_alloc_array((size_t)*nf + 1, sizeof(int));
  if (!p->feed_index) return gr_error_set_oom(err);
  int kept = 0;
  for (int i = 0; i < n; i++) {
    gr_node *m = gr_graph_find_node(p->graph, eps[i].node->name);
    if (!m && i >= *nf)
      return gr_error_set(err, GR_ERR_INTERNAL, "the rewritten graph lost node '%s'",
                          eps[i].node->name);
    if (i < *nf && m) {
      p->feed_index[kept] = i;
      eps[kept++] = (gr_output){m, eps[i].index};
    } else if (m) {
      eps[i].node = m;
    }
  }
  p->num_feeds = *nf = kept;
  return GR_OK;
}

static gr_status prepare(gr_session *s, const gr_feed *feeds, int nf, const gr_output *fetches,
                         int nx, const gr_output *targets, int nt, prepared **out, gr_error *err) {
  gr_graph *g = s->graph;
  int total = gr_graph_num_nodes(g);
  gr_node **nodes = gr_alloc_array((size_t)total + 1, sizeof(gr_node *));
  gr_output *eps = gr_alloc_array((size_t)(nf + nx + nt) + 1, sizeof(gr_output));
  prepared *p = calloc(1, sizeof *p);
  gr_status st = GR_OK;
  if (!nodes || !eps || !p) {
    st = gr_error_set_oom(err);
    goto done;
  }
  /* the endpoints in one array: feeds, fetches, targets */
  gr_output *feed_eps = eps, *fetch_eps = eps + nf, *target_eps = eps + nf + nx;
  for (int i = 0; i < nf; i++) feed_eps[i] = feeds[i].output;
  for (int i = 0; i < nx; i++) fetch_eps[i] = fetches[i];
  for (int i = 0; i < nt; i++) target_eps[i] = targets[i];
  int nn, nvars;
  st = collect(g, feed_eps, nf, fetch_eps, nx, target_eps, nt, nodes, &nn, &nvars, p, err);
  if (st == GR_OK && rewrite_hook && !s->opts.no_fusion) {
    /* the graph passes' fusion: a smaller graph of fused nodes, or NULL */
    st = rewrite_hook(g, feed_eps, nf, fetch_eps, nx, target_eps, nt, &p->graph, err);
    if (st == GR_OK && p->graph) st = rename_endpoints(p, eps, &nf, nf + nx + nt, err);
    if (st == GR_OK && p->graph) {
      p->uses_stacks = p->collective = false;
      st = collect(p->graph, feed_eps, nf, fetch_eps, nx, target_eps, nt, nodes, &nn, &nvars, p,
                   err);
    }
  }
  if (st != GR_OK) goto done;
  int num_used = 0;
  if ((st = assign_devices(s, p->graph ? p->graph : g, nodes, nn, &num_used, err)) != GR_OK)
    goto done;
  p->vars = gr_alloc_array((size_t)nvars + 1, sizeof(gr_node *));
  if (!p->vars) {
    st = gr_error_set_oom(err);
    goto done;
  }
  for (int i = 0; i < nn; i++)
    if (nodes[i]->op->flags & GR_OP_VARIABLE) p->vars[p->num_vars++] = nodes[i];
  gr_partition_options po = {.incarnation = s->incarnation,
                             .schedule_recvs = s->opts.schedule_recvs};
  if (s->opts.remote) {
    gr_partitions *parts;
    st = gr_partition_graph(nodes, nn, feed_eps, nf, fetch_eps, nx, &po, &parts, err);
    if (st == GR_OK)
      st = s->opts.remote->prepare(s->opts.remote->self, parts, &p->remote_plan, err);
  } else if (num_used > 1)
    st = gr_device_plan_new(nodes, nn, feed_eps, nf, fetch_eps, nx, s->pool, &po, &p->plan, err);
  else
    st = gr_executor_new(nodes, nn, feed_eps, nf, fetch_eps, nx, s->pool, &p->exec, err);
done:
  free(nodes);
  free(eps);
  if (st != GR_OK) {
    prepared_free(s, p);
    p = NULL;
  }
  *out = p;
  return st;
}

typedef struct init_list {
  gr_output *v;
  int n, cap;
} init_list;

/* Adds the initialiser of variable `name` to the list unless the variable has
 * a value or its initialiser is listed already. */
static gr_status add_initializer(gr_session *s, const char *name, const char *device, init_list *l,
                                 gr_error *err) {
  if (s->opts.remote) {
    bool ready = false;
    GR_TRY(s->opts.remote->var_initialized(s->opts.remote->self, name, device, &ready, err));
    if (ready) return GR_OK;
  } else {
    gr_var *v = gr_resource_mgr_find_var(s->resources, name);
    if (v && gr_var_is_initialized(v)) return GR_OK;
  }
  for (int k = 0; k < l->n; k++)
    if (strcmp(gr_node_attr_string(l->v[k].node, "var", ""), name) == 0) return GR_OK;
  /* the variable node of that name carries the initialiser */
  gr_node *vnode = gr_graph_find_node(s->graph, name);
  const char *init = vnode ? gr_node_attr_string(vnode, "initializer", "") : "";
  gr_node *in = init[0] ? gr_graph_find_node(s->graph, init) : NULL;
  if (!in || s->opts.no_auto_init)
    return gr_error_set(err, GR_ERR_FAILED_PRECONDITION, "variable '%s' is not initialised%s", name,
                        in ? " (auto-initialisation is off: run its initialiser first)"
                           : " and has no initialiser");
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 16;
    gr_output *more = gr_realloc_array(l->v, (size_t)cap, sizeof(gr_output));
    if (!more) return gr_error_set_oom(err);
    l->v = more;
    l->cap = cap;
  }
  l->v[l->n++] = (gr_output){in, 0};
  return GR_OK;
}

/* Set while this thread runs initialisers: their run takes the current
 * step id without counting a step, so a run's step ids (which random ops
 * and readers key on) do not depend on whether variables were initialised
 * before it, by an explicit gr_session_init_variables or on first use. */
static _Thread_local int initialising;

/* Initialises the variables that the nodes in vars need and that have no value yet. */
static gr_status init_vars(gr_session *s, gr_node **vars, int n, gr_error *err) {
  init_list l = {NULL, 0, 0};
  gr_status st = GR_OK;
  for (int i = 0; i < n && st == GR_OK; i++)
    for (int a = 0; a < vars[i]->num_attrs && st == GR_OK; a++)
      if (gr_attr_names_variable(&vars[i]->attrs[a]))
        st = add_initializer(s, vars[i]->attrs[a].value.s, vars[i]->assigned_device, &l, err);
  gr_output *inits = l.v;
  int ni = l.n;
  if (st == GR_OK && ni > 0) {
    if (s->init_depth >= GR_INIT_DEPTH_MAX) {
      st = gr_error_set(err, GR_ERR_FAILED_PRECONDITION,
                        "variable initialisers depend on each other more than %d deep",
                        GR_INIT_DEPTH_MAX);
    } else {
      s->init_depth++;
      initialising++;
      st = gr_session_run(s, NULL, 0, NULL, 0, NULL, inits, ni, err);
      initialising--;
      s->init_depth--;
      if (st != GR_OK) gr_error_prefix(err, "initialising variables");
    }
  }
  free(inits);
  return st;
}

gr_status gr_session_init_variables(gr_session *s, gr_error *err) {
  int total = gr_graph_num_nodes(s->graph);
  gr_node **vars = gr_alloc_array((size_t)total + 1, sizeof(gr_node *));
  if (!vars) return gr_error_set_oom(err);
  int n = 0;
  for (int i = 0; i < total; i++) {
    gr_node *node = gr_graph_node(s->graph, i);
    if (node->op->flags & GR_OP_VARIABLE) vars[n++] = node;
  }
  bool saved = s->opts.no_auto_init;
  s->opts.no_auto_init = false;
  gr_status st = init_vars(s, vars, n, err);
  s->opts.no_auto_init = saved;
  free(vars);
  return st;
}

gr_status gr_session_find_uninitialized(gr_session *s, const char *except, const char **name,
                                        gr_error *err) {
  *name = NULL;
  gr_device_spec skip;
  if (except && gr_device_spec_parse(except, &skip, err) != GR_OK)
    return err ? err->code : GR_ERR_INVALID_ARGUMENT;
  for (int i = 0; i < gr_graph_num_nodes(s->graph); i++) {
    gr_node *node = gr_graph_node(s->graph, i);
    const char *var = gr_node_attr_string(node, "var", "");
    /* the variable nodes themselves: "var" names the node */
    if (!(node->op->flags & GR_OP_VARIABLE) || strcmp(var, node->name) != 0) continue;
    int used;
    GR_TRY(assign_devices(s, s->graph, &node, 1, &used, err));
    int k = device_named(s, node->assigned_device);
    if (except && k >= 0 && gr_device_spec_matches(&skip, &s->devices[k])) continue;
    bool ready = false;
    if (s->opts.remote) {
      GR_TRY(s->opts.remote->var_initialized(s->opts.remote->self, var, node->assigned_device,
                                             &ready, err));
    } else {
      gr_var *v = gr_resource_mgr_find_var(s->resources, var);
      ready = v && gr_var_is_initialized(v);
    }
    if (!ready) {
      *name = node->name;
      return GR_OK;
    }
  }
  return GR_OK;
}

gr_status gr_session_run(gr_session *s, const gr_feed *feeds, int num_feeds,
                         const gr_output *fetches, int num_fetches, gr_tensor *results,
                         const gr_output *targets, int num_targets, gr_error *err) {
  return gr_session_run_traced(s, feeds, num_feeds, fetches, num_fetches, results, targets,
                               num_targets, NULL, err);
}

/* The arguments of a run: arrays, endpoints of this graph, feeds with
 * values and none fed twice. */
static gr_status check_args(gr_session *s, const gr_feed *feeds, int num_feeds,
                            const gr_output *fetches, int num_fetches, const gr_output *targets,
                            int num_targets, gr_error *err) {
  if (num_feeds < 0 || num_fetches < 0 || num_targets < 0 || (num_feeds && !feeds) ||
      (num_fetches && !fetches) || (num_targets && !targets))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "gr_session_run: bad argument arrays");
  for (int i = 0; i < num_feeds; i++) {
    GR_TRY(check_endpoint(s, feeds[i].output, "feed", i, err));
    if (!feeds[i].value)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "feed %d ('%s') has no value", i,
                          feeds[i].output.node->name);
    for (int j = 0; j < i; j++)
      if (feeds[j].output.node == feeds[i].output.node &&
          feeds[j].output.index == feeds[i].output.index)
        return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "'%s' is fed twice",
                            feeds[i].output.node->name);
  }
  for (int i = 0; i < num_fetches; i++) GR_TRY(check_endpoint(s, fetches[i], "fetch", i, err));
  for (int i = 0; i < num_targets; i++) GR_TRY(check_endpoint(s, targets[i], "target", i, err));
  return GR_OK;
}

gr_status gr_session_check_feeds(gr_session *s, const gr_feed *feeds, int num_feeds,
                                 const gr_output *fetches, int num_fetches,
                                 const gr_output *targets, int num_targets, gr_error *err) {
  GR_TRY(check_args(s, feeds, num_feeds, fetches, num_fetches, targets, num_targets, err));
  int total = gr_graph_num_nodes(s->graph);
  unsigned char *needed = calloc((size_t)total + 1, 1);
  int *parent = gr_alloc_array((size_t)total + 1, sizeof(int));
  gr_output *feed_eps = gr_alloc_array((size_t)num_feeds + 1, sizeof(gr_output));
  gr_status st = GR_OK;
  if (!needed || !parent || !feed_eps) {
    st = gr_error_set_oom(err);
  } else {
    for (int i = 0; i < num_feeds; i++) feed_eps[i] = feeds[i].output;
    st = mark_needed(s->graph, feed_eps, num_feeds, fetches, num_fetches, targets, num_targets,
                     needed, parent, err);
    for (int id = 0; id < total && st == GR_OK; id++) {
      gr_node *n = gr_graph_node(s->graph, id);
      if (needed[id] && (n->op->flags & GR_OP_PLACEHOLDER))
        st = unfed_placeholder(s->graph, n, parent[id], err);
    }
  }
  free(needed);
  free(parent);
  free(feed_eps);
  return st;
}

/* Are these the endpoints of the latest run (s->mu held)? */
static bool is_last(const gr_session *s, const gr_feed *feeds, int nf, const gr_output *fetches,
                    int nx, const gr_output *targets, int nt) {
  if (!s->last || nf != s->last_nf || nx != s->last_nx || nt != s->last_nt) return false;
  const gr_output *e = s->last_eps;
  for (int i = 0; i < nf; i++, e++)
    if (feeds[i].output.node != e->node || feeds[i].output.index != e->index) return false;
  for (int i = 0; i < nx; i++, e++)
    if (fetches[i].node != e->node || fetches[i].index != e->index) return false;
  for (int i = 0; i < nt; i++, e++)
    if (targets[i].node != e->node) return false;
  return true;
}

/* Remembers p as the latest run's (s->mu held); runs with many endpoints
 * always go through the cache. */
static void set_last(gr_session *s, prepared *p, const gr_feed *feeds, int nf,
                     const gr_output *fetches, int nx, const gr_output *targets, int nt) {
  if (nf + nx + nt > GR_LAST_EPS_MAX) return;
  gr_output *e = s->last_eps;
  for (int i = 0; i < nf; i++) *e++ = feeds[i].output;
  for (int i = 0; i < nx; i++) *e++ = fetches[i];
  for (int i = 0; i < nt; i++) *e++ = (gr_output){targets[i].node, 0};
  s->last_nf = nf, s->last_nx = nx, s->last_nt = nt;
  s->last = p;
}

/* The prepared executor of a signature: from the cache, or prepared now and
 * cached (prepared entries live as long as the session). */
static gr_status find_prepared(gr_session *s, const gr_feed *feeds, int num_feeds,
                               const gr_output *fetches, int num_fetches, const gr_output *targets,
                               int num_targets, prepared **out, gr_error *err) {
  char *key = signature(feeds, num_feeds, fetches, num_fetches, targets, num_targets);
  if (!key) return gr_error_set_oom(err);
  pthread_mutex_lock(&s->mu);
  prepared *p = gr_map_get_str(&s->cache, key);
  pthread_mutex_unlock(&s->mu);
  if (!p) {
    prepared *np;
    gr_status st =
        prepare(s, feeds, num_feeds, fetches, num_fetches, targets, num_targets, &np, err);
    if (st != GR_OK) {
      free(key);
      return st;
    }
    pthread_mutex_lock(&s->mu);
    p = gr_map_get_str(&s->cache, key);
    if (!p) {
      np->key = key;
      key = NULL;
      if (gr_map_put_str(&s->cache, np->key, np)) {
        p = np;
        s->num_cached++;
      } else {
        key = np->key;
        np->key = NULL;
      }
    }
    pthread_mutex_unlock(&s->mu);
    if (p != np) prepared_free(s, np);
    if (!p) {
      free(key);
      return gr_error_set_oom(err);
    }
  }
  free(key);
  pthread_mutex_lock(&s->mu);
  set_last(s, p, feeds, num_feeds, fetches, num_fetches, targets, num_targets);
  pthread_mutex_unlock(&s->mu);
  *out = p;
  return GR_OK;
}

static gr_status run_one(gr_session *s, prepared *p, const gr_tensor *fv, gr_tensor *results,
                         gr_step_trace *trace, int64_t num_steps, gr_error *err);

/* num_steps steps of one signature; results (and the trace) from the last. */
static gr_status run_steps(gr_session *s, const gr_feed *feeds, int num_feeds,
                           const gr_output *fetches, int num_fetches, gr_tensor *results,
                           const gr_output *targets, int num_targets, gr_step_trace *trace,
                           int64_t num_steps, gr_error *err) {
  if (num_fetches > 0 && !results)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "gr_session_run: bad argument arrays");
  for (int i = 0; i < num_fetches; i++) results[i] = gr_tensor_empty();
  GR_TRY(check_args(s, feeds, num_feeds, fetches, num_fetches, targets, num_targets, err));
  const gr_error *ge = gr_graph_error(s->graph);
  if (ge) return gr_error_set(err, ge->code, "the graph has a build error: %s", ge->msg);

  pthread_mutex_lock(&s->mu);
  prepared *p =
      is_last(s, feeds, num_feeds, fetches, num_fetches, targets, num_targets) ? s->last : NULL;
  pthread_mutex_unlock(&s->mu);
  if (!p)
    GR_TRY(find_prepared(s, feeds, num_feeds, fetches, num_fetches, targets, num_targets, &p, err));
  if (!__atomic_load_n(&p->vars_ready, __ATOMIC_ACQUIRE) && p->num_vars) {
    GR_TRY(init_vars(s, p->vars, p->num_vars, err));
    __atomic_store_n(&p->vars_ready, 1, __ATOMIC_RELEASE);
  }
  gr_tensor fv_small[8];
  gr_tensor *fv = num_feeds <= 8 ? fv_small : gr_alloc_array((size_t)num_feeds, sizeof(gr_tensor));
  if (!fv) return gr_error_set_oom(err);
  for (int i = 0; i < num_feeds; i++) fv[i] = *feeds[i].value;
  if (p->feed_index) /* a rewritten graph's feeds */
    for (int i = 0; i < p->num_feeds; i++) fv[i] = *feeds[p->feed_index[i]].value;
  gr_status st = GR_OK;
  /* on a cluster the tasks loop over the steps; here, one step at a time */
  for (int64_t k = 0; k < (p->remote_plan ? 1 : num_steps) && st == GR_OK; k++) {
    if (k > 0)
      for (int i = 0; i < num_fetches; i++) gr_tensor_release(&results[i]);
    st = run_one(s, p, fv, results, p->remote_plan || k == num_steps - 1 ? trace : NULL,
                 p->remote_plan ? num_steps : 1, err);
  }
  if (fv != fv_small) free(fv);
  return st;
}

/* A step (on a cluster: num_steps) of prepared signature p. */
static gr_status run_one(gr_session *s, prepared *p, const gr_tensor *fv, gr_tensor *results,
                         gr_step_trace *trace, int64_t num_steps, gr_error *err) {
  gr_transfer_stats moved = {0, 0};
  int64_t step_id = initialising ? __atomic_load_n(&s->step, __ATOMIC_RELAXED)
                                 : __atomic_fetch_add(&s->step, num_steps, __ATOMIC_RELAXED);
  gr_step_info step = {.step_id = step_id,
                       .seed = gr_graph_seed(s->graph),
                       .resources = s->resources,
                       .stacks = p->uses_stacks ? gr_step_stacks_new() : NULL,
                       .trace = trace,
                       .watch = s->watchdog ? gr_watchdog_begin_step(s->watchdog) : NULL};
  if (p->exec && p->collective) step.rendezvous = gr_rendezvous_new();
  gr_status st = (!step.stacks && p->uses_stacks) || (s->watchdog && !step.watch) ||
                         (p->exec && p->collective && !step.rendezvous)
                     ? gr_error_set_oom(err)
                 : p->remote_plan ? s->opts.remote->run(s->opts.remote->self, p->remote_plan, fv,
                                                        results, &step, num_steps, &moved, err)
                 : p->plan        ? gr_device_plan_run(p->plan, fv, results, &step, &moved, err)
                                  : gr_executor_run(p->exec, fv, results, &step, err);
  if (step.watch) st = gr_watchdog_end_step(s->watchdog, step.watch, st, err);
  atomic_store_explicit(&s->last_sends, moved.sends, memory_order_relaxed);
  atomic_store_explicit(&s->last_bytes, moved.bytes, memory_order_relaxed);
  gr_step_stacks_free(step.stacks);
  if (p->exec && p->collective) gr_rendezvous_free(step.rendezvous);
  return st;
}

gr_status gr_session_run_traced(gr_session *s, const gr_feed *feeds, int num_feeds,
                                const gr_output *fetches, int num_fetches, gr_tensor *results,
                                const gr_output *targets, int num_targets, gr_step_trace *trace,
                                gr_error *err) {
  return run_steps(s, feeds, num_feeds, fetches, num_fetches, results, targets, num_targets, trace,
                   1, err);
}

gr_status gr_session_run_steps(gr_session *s, const gr_feed *feeds, int num_feeds,
                               const gr_output *fetches, int num_fetches, gr_tensor *results,
                               const gr_output *targets, int num_targets, int64_t num_steps,
                               gr_step_trace *trace, gr_error *err) {
  if (num_steps < 1 || num_steps > GR_SESSION_MAX_STEPS)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "gr_session_run_steps: %lld steps (1 to %d)",
                        (long long)num_steps, GR_SESSION_MAX_STEPS);
  return run_steps(s, feeds, num_feeds, fetches, num_fetches, results, targets, num_targets, trace,
                   num_steps, err);
}

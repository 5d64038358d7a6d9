/* A cluster from Slurm: the node list (SLURM_JOB_NODELIST syntax:
 * "node[01-03,07],gpu5,big[1-2]"), the number of tasks, this task's rank and
 * how the tasks split into jobs ("ps:1,worker:3"). Task p runs on node
 * p mod N at port base_port + p / N. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placer_internal.h"

#define NODELIST   "SLURM_JOB_NODELIST"
#define MAX_DIGITS 9

static bool name_char(int c) {
  return isalnum(c) || c == '.' || c == '-' || c == '_';
}

/* "SLURM_JOB_NODELIST:1:COL: what (in "LIST")" for the character s[i]. */
static gr_status list_error(gr_error *err, const char *s, size_t i, const char *what,
                            const char *arg) {
  char msg[300];
  snprintf(msg, sizeof msg, what, arg);
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, NODELIST ":1:%zu: %s (in \"%.80s%s\")", i + 1,
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
static gr_status read_number(const char *s, size_t *i, unsigned long *v, int *width,
                             gr_error *err) {
  size_t start = *i;
  char b[16];
  if (!isdigit((unsigned char)s[*i]))
    return list_error(err, s, *i, "expected a number in the range list, found %s",
                      s[*i] ? char_text(s[*i], b) : "the end");
  *v = 0;
  while (isdigit((unsigned char)s[*i])) {
    if (*i - start == MAX_DIGITS)
      return list_error(err, s, start, "number longer than 9 digits%s", "");
    *v = *v * 10 + (unsigned long)(s[*i] - '0');
    (*i)++;
  }
  *width = (int)(*i - start);
  return GR_OK;
}

/* Checks the whole list's syntax before anything is expanded. */
static gr_status check_list(const char *s, gr_error *err) {
  size_t i = 0;
  char b[16];
  if (!s[0]) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, NODELIST ": empty node list");
  for (;;) {
    if (s[i] == ',' || !s[i]) return list_error(err, s, i, "empty node name%s", "");
    while (s[i] && s[i] != ',') {
      if (name_char((unsigned char)s[i])) {
        i++;
      } else if (s[i] == '[') {
        size_t open = i++;
        for (;;) {
          unsigned long lo, hi;
          int w;
          size_t at = i;
          if (!s[i]) return list_error(err, s, open, "'[' is not closed%s", "");
          GR_TRY(read_number(s, &i, &lo, &w, err));
          hi = lo;
          if (s[i] == '-') {
            i++;
            GR_TRY(read_number(s, &i, &hi, &w, err));
            if (hi < lo) {
              char r[48];
              snprintf(r, sizeof r, "%lu-%lu", lo, hi);
              return list_error(err, s, at, "descending range %s", r);
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
          if (!s[i]) return list_error(err, s, open, "'[' is not closed%s", "");
          return list_error(err, s, i, "expected ',' or ']' in the range list, found %s",
                            char_text(s[i], b));
        }
      } else if (s[i] == ']') {
        return list_error(err, s, i, "']' without '['%s", "");
      } else {
        return list_error(err, s, i, "bad character %s in a node name", char_text(s[i], b));
      }
    }
    if (!s[i]) return GR_OK;
    i++; /* ',' */
  }
}

typedef struct expansion {
  const char *s;
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
        list_error(x->err, x->s, x->host_start, "node \"%s\" is listed twice", name);
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
    read_number(s, &j, &lo, &w, NULL);
    hi = lo;
    if (s[j] == '-') {
      j++;
      read_number(s, &j, &hi, &wh, NULL);
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
  list_error(x->err, x->s, x->host_start, "node name longer than %s characters", "253");
  return EXPAND_ERROR;
}

/* The first `limit` nodes of the list into names; *n gets how many (fewer
 * when the list is shorter). */
static gr_status expand_list(const char *s, char (*names)[GR_CLUSTER_HOST_MAX], int limit, int *n,
                             gr_error *err) {
  GR_TRY(check_list(s, err));
  expansion x = {.s = s, .names = names, .limit = limit, .err = err};
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

/* ---- "ps:1,worker:3" ------------------------------------------------------- */

typedef struct job_count {
  char name[GR_DEVICE_JOB_MAX];
  int count; /* -1: the tasks left over */
} job_count;

static gr_status jobs_error(gr_error *err, const char *jobs, size_t i, const char *what) {
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "slurm jobs \"%.100s\":1:%zu: %s", jobs, i + 1,
                      what);
}

static gr_status parse_jobs(const char *jobs, int ntasks, job_count *out, int *njobs,
                            gr_error *err) {
  char msg[256], why[256];
  int n = 0, rest = -1, sum = 0;
  size_t i = 0;
  for (;;) {
    size_t start = i, colon = 0;
    while (jobs[i] && jobs[i] != ',') {
      if (jobs[i] == ':' && !colon) colon = i;
      i++;
    }
    size_t end = colon ? colon : i;
    if (end == start) return jobs_error(err, jobs, start, "empty job name");
    if (n == ntasks) {
      snprintf(msg, sizeof msg, "more jobs than the %d tasks", ntasks);
      return jobs_error(err, jobs, start, msg);
    }
    job_count *j = &out[n];
    snprintf(j->name, sizeof j->name, "%.*s", (int)(end - start), jobs + start);
    if (end - start >= GR_DEVICE_JOB_MAX || gr_cluster_job_problem(j->name, why, sizeof why)) {
      if (end - start >= GR_DEVICE_JOB_MAX)
        snprintf(why, sizeof why, "job name longer than %d characters", GR_DEVICE_JOB_MAX - 1);
      return jobs_error(err, jobs, start, why);
    }
    for (int k = 0; k < n; k++)
      if (strcmp(out[k].name, j->name) == 0) {
        snprintf(msg, sizeof msg, "job \"%s\" is named twice", j->name);
        return jobs_error(err, jobs, start, msg);
      }
    if (colon) {
      long v = 0;
      size_t d = colon + 1;
      if (d == i) return jobs_error(err, jobs, d, "missing task count after ':'");
      for (; d < i; d++) {
        if (!isdigit((unsigned char)jobs[d]))
          return jobs_error(err, jobs, colon + 1, "the task count is not a number");
        if (v <= GR_CLUSTER_MAX_TASKS) v = v * 10 + (jobs[d] - '0');
      }
      if (v < 1 || v > GR_CLUSTER_MAX_TASKS) {
        snprintf(msg, sizeof msg, "task count must be in 1..%d", GR_CLUSTER_MAX_TASKS);
        return jobs_error(err, jobs, colon + 1, msg);
      }
      j->count = (int)v;
      sum += (int)v;
    } else {
      if (rest >= 0) return jobs_error(err, jobs, start, "two jobs without a task count");
      j->count = -1;
      rest = n;
    }
    n++;
    if (!jobs[i]) break;
    i++;
  }
  if (rest >= 0) {
    if (sum >= ntasks) {
      snprintf(msg, sizeof msg,
               "the counted jobs take all %d tasks (SLURM_NTASKS=%d), none are left for \"%s\"",
               sum, ntasks, out[rest].name);
      return jobs_error(err, jobs, 0, msg);
    }
    out[rest].count = ntasks - sum;
  } else if (sum != ntasks) {
    snprintf(msg, sizeof msg, "the jobs have %d tasks, SLURM_NTASKS=%d", sum, ntasks);
    return jobs_error(err, jobs, 0, msg);
  }
  *njobs = n;
  return GR_OK;
}

/* ---- the cluster ------------------------------------------------------------ */

static gr_status build(gr_cluster *c, char (*nodes)[GR_CLUSTER_HOST_MAX], int nnodes,
                       const job_count *jobs, int njobs, int base_port, gr_error *err) {
  int p = 0;
  for (int j = 0; j < njobs; j++)
    for (int k = 0; k < jobs[j].count; k++, p++) {
      const char *node = nodes[p % nnodes];
      char address[GR_CLUSTER_ADDRESS_MAX];
      snprintf(address, sizeof address, "%s:%d", node, base_port + p / nnodes);
      int t;
      GR_TRY(gr_cluster_add_task(c, jobs[j].name, node, &t, err));
      GR_TRY(gr_cluster_set_task_address(c, t, address, err));
      GR_TRY(gr_cluster_add_device(c, t, GR_CLUSTER_DEFAULT_FLOPS, GR_CLUSTER_DEFAULT_MEM_BANDWIDTH,
                                   GR_CLUSTER_DEFAULT_OVERHEAD, err));
    }
  return GR_OK;
}

gr_status gr_cluster_from_slurm(const char *nodelist, int procid, int ntasks, const char *jobs,
                                int base_port, gr_cluster **out, gr_cluster_self *self,
                                gr_error *err) {
  *out = NULL;
  if (!nodelist) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, NODELIST ": no node list");
  if (ntasks < 1 || ntasks > GR_CLUSTER_MAX_TASKS)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "SLURM_NTASKS=%d: must be in 1..%d", ntasks,
                        GR_CLUSTER_MAX_TASKS);
  if (procid < 0 || procid >= ntasks)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "SLURM_PROCID=%d: must be in 0..%d (SLURM_NTASKS=%d)", procid, ntasks - 1,
                        ntasks);
  if (base_port < 1 || base_port > 65535)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "slurm: base port %d is out of 1..65535",
                        base_port);
  if (!jobs || !*jobs) jobs = "worker";
  job_count *jc = calloc((size_t)ntasks, sizeof *jc);
  char(*nodes)[GR_CLUSTER_HOST_MAX] = gr_alloc_array((size_t)ntasks, sizeof *nodes);
  gr_cluster *c = gr_cluster_new();
  int njobs = 0, nnodes = 0;
  gr_status s = GR_OK;
  if (!jc || !nodes || !c) s = gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "slurm: out of memory");
  if (s == GR_OK) s = expand_list(nodelist, nodes, ntasks, &nnodes, err);
  if (s == GR_OK) s = parse_jobs(jobs, ntasks, jc, &njobs, err);
  if (s == GR_OK && base_port + (ntasks - 1) / nnodes > 65535)
    s = gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                     "slurm: %d tasks on %d nodes need ports %d..%d, above 65535", ntasks, nnodes,
                     base_port, base_port + (ntasks - 1) / nnodes);
  if (s == GR_OK) s = build(c, nodes, nnodes, jc, njobs, base_port, err);
  free(jc);
  free(nodes);
  if (s != GR_OK) {
    gr_cluster_free(c);
    return s;
  }
  if (self) {
    const gr_cluster_task *t = gr_cluster_task_at(c, procid);
    snprintf(self->job, sizeof self->job, "%s", t->job);
    self->index = t->index;
    self->task = procid;
  }
  *out = c;
  return GR_OK;
}

/* A non-negative integer environment variable. */
static gr_status env_int(const char *var, int *out, gr_error *err) {
  const char *v = getenv(var);
  if (!v)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s is not set (not inside a Slurm job?)",
                        var);
  char *end;
  long x = strtol(v, &end, 10);
  if (!*v || *end || x < 0 || x > 1000000000L)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s=\"%.40s\" is not a non-negative integer",
                        var, v);
  *out = (int)x;
  return GR_OK;
}

gr_status gr_cluster_from_slurm_env(const char *jobs, int base_port, gr_cluster **out,
                                    gr_cluster_self *self, gr_error *err) {
  *out = NULL;
  const char *nodelist = getenv(NODELIST);
  if (!nodelist)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        NODELIST " is not set (not inside a Slurm job?)");
  int procid = 0, ntasks = 0, nodeid = 0;
  GR_TRY(env_int("SLURM_PROCID", &procid, err));
  GR_TRY(env_int("SLURM_NTASKS", &ntasks, err));
  gr_cluster_self me;
  GR_TRY(gr_cluster_from_slurm(nodelist, procid, ntasks, jobs, base_port, out, &me, err));
  if (getenv("SLURM_NODEID")) {
    gr_status s = env_int("SLURM_NODEID", &nodeid, err);
    /* tasks 0 .. N-1 were added on nodes 0 .. N-1 in order, so a task's
     * host_id is the index of its node in the list */
    const gr_cluster_task *t = gr_cluster_task_at(*out, procid);
    if (s == GR_OK && nodeid != t->host_id)
      s = gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                       "SLURM_NODEID=%d: task %d runs on node %d, but the round-robin order "
                       "puts it on node %d (%s): start the tasks with srun --distribution=cyclic",
                       nodeid, procid, nodeid, t->host_id, t->host);
    if (s != GR_OK) {
      gr_cluster_free(*out);
      *out = NULL;
      return s;
    }
  }
  if (self) *self = me;
  return GR_OK;
}

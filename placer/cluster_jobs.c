/* How the tasks of a launcher (Slurm, MPI) split into jobs: "ps:1,worker:3"
 * gives the tasks, in rank order, to the jobs in turn; one job may leave out
 * its count to take the rest. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placer_internal.h"

static gr_status jobs_error(gr_error *err, const gr_jobs_names *nm, const char *jobs, size_t i,
                            const char *what) {
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s jobs \"%.100s\":1:%zu: %s", nm->launcher,
                      jobs, i + 1, what);
}

gr_status gr_jobs_parse(const char *jobs, int ntasks, const gr_jobs_names *nm, gr_job_count *out,
                        int *njobs, gr_error *err) {
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
    if (end == start) return jobs_error(err, nm, jobs, start, "empty job name");
    if (n == ntasks) {
      snprintf(msg, sizeof msg, "more jobs than the %d tasks", ntasks);
      return jobs_error(err, nm, jobs, start, msg);
    }
    gr_job_count *j = &out[n];
    snprintf(j->name, sizeof j->name, "%.*s", (int)(end - start), jobs + start);
    if (end - start >= GR_DEVICE_JOB_MAX || gr_cluster_job_problem(j->name, why, sizeof why)) {
      if (end - start >= GR_DEVICE_JOB_MAX)
        snprintf(why, sizeof why, "job name longer than %d characters", GR_DEVICE_JOB_MAX - 1);
      return jobs_error(err, nm, jobs, start, why);
    }
    for (int k = 0; k < n; k++)
      if (strcmp(out[k].name, j->name) == 0) {
        snprintf(msg, sizeof msg, "job \"%s\" is named twice", j->name);
        return jobs_error(err, nm, jobs, start, msg);
      }
    if (colon) {
      long v = 0;
      size_t d = colon + 1;
      if (d == i) return jobs_error(err, nm, jobs, d, "missing task count after ':'");
      for (; d < i; d++) {
        if (!isdigit((unsigned char)jobs[d]))
          return jobs_error(err, nm, jobs, colon + 1, "the task count is not a number");
        if (v <= GR_CLUSTER_MAX_TASKS) v = v * 10 + (jobs[d] - '0');
      }
      if (v < 1 || v > GR_CLUSTER_MAX_TASKS) {
        snprintf(msg, sizeof msg, "task count must be in 1..%d", GR_CLUSTER_MAX_TASKS);
        return jobs_error(err, nm, jobs, colon + 1, msg);
      }
      j->count = (int)v;
      sum += (int)v;
    } else {
      if (rest >= 0) return jobs_error(err, nm, jobs, start, "two jobs without a task count");
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
               "the counted jobs take all %d tasks (%s=%d), none are left for \"%s\"", sum,
               nm->ntasks_var, ntasks, out[rest].name);
      return jobs_error(err, nm, jobs, 0, msg);
    }
    out[rest].count = ntasks - sum;
  } else if (sum != ntasks) {
    snprintf(msg, sizeof msg, "the jobs have %d tasks, %s=%d", sum, nm->ntasks_var, ntasks);
    return jobs_error(err, nm, jobs, 0, msg);
  }
  *njobs = n;
  return GR_OK;
}

gr_status gr_cluster_task_of_rank(const char *jobs, int ntasks, int rank, const char *launcher,
                                  const char *ntasks_var, char job[GR_DEVICE_JOB_MAX], int *index,
                                  gr_error *err) {
  if (ntasks < 1 || ntasks > GR_CLUSTER_MAX_TASKS)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "%s=%d: must be in 1..%d", ntasks_var, ntasks,
                        GR_CLUSTER_MAX_TASKS);
  if (rank < 0 || rank >= ntasks)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "rank %d: must be in 0..%d (%s=%d)", rank,
                        ntasks - 1, ntasks_var, ntasks);
  if (!jobs || !*jobs) jobs = "worker";
  gr_jobs_names nm = {launcher, ntasks_var};
  gr_job_count *jc = calloc((size_t)ntasks, sizeof *jc);
  if (!jc) return gr_error_set_oom(err);
  int njobs = 0;
  gr_status s = gr_jobs_parse(jobs, ntasks, &nm, jc, &njobs, err);
  for (int j = 0, first = 0; s == GR_OK && j < njobs; first += jc[j++].count)
    if (rank < first + jc[j].count) {
      snprintf(job, GR_DEVICE_JOB_MAX, "%s", jc[j].name);
      *index = rank - first;
      break;
    }
  free(jc);
  return s;
}

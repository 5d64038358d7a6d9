/* The scaling model of synchronous data parallelism (gr_placer.h,
 * docs/scaling.md): a ring all-reduce in buckets (hierarchical with several
 * workers per host), each bucket sent as soon
 * as the backward pass has made its gradients and the buckets one after
 * another on the link (as PyTorch DDP does), plus the master's part of a
 * step. Pure arithmetic: no state, any thread. */
#include <math.h>
#include <stdint.h>

#include "placer/gr_placer.h"

#define MAX_BUCKETS 1000000

double gr_scale_ring_time(const gr_scale_params *p, int n, double bytes) {
  if (n <= 1) return 0;
  double per_byte = 1 / p->link_bw + (p->host_bw > 0 ? 1 / p->host_bw : 0);
  double steps = 2.0 * (n - 1);
  return steps / n * bytes * per_byte + steps * p->hop_latency;
}

double gr_scale_allreduce_time(const gr_scale_params *p, int n, double bytes) {
  int g = p->per_host > 1 ? p->per_host : 1, hosts = (n + g - 1) / g;
  if (g == 1 || hosts == 1) return gr_scale_ring_time(p, n, bytes);
  int levels = 0;
  while (((int64_t)1 << levels) < g) levels++;
  double per_step = (p->host_bw > 0 ? bytes / p->host_bw : 0) + p->host_hop;
  return 2.0 * levels * per_step + gr_scale_ring_time(p, hosts, bytes);
}

static gr_status check(const char *name, double v, double lo, bool lo_open, gr_error *err) {
  if (isfinite(v) && (lo_open ? v > lo : v >= lo)) return GR_OK;
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "scaling model: %s is %g, want %s %g", name, v,
                      lo_open ? ">" : ">=", lo);
}

gr_status gr_scale_predict(const gr_scale_params *p, int n, gr_scale_result *out, gr_error *err) {
  *out = (gr_scale_result){0};
  GR_TRY(check("compute", p->compute, 0, true, err));
  GR_TRY(check("backward", p->backward, 0, true, err));
  if (p->backward > 1)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "scaling model: backward is %g, want a fraction of compute (<= 1)",
                        p->backward);
  GR_TRY(check("grad_bytes", p->grad_bytes, 0, false, err));
  GR_TRY(check("bucket_bytes", p->bucket_bytes, 0, false, err));
  GR_TRY(check("link_bw", p->link_bw, 0, true, err));
  GR_TRY(check("host_bw", p->host_bw, 0, false, err));
  GR_TRY(check("hop_latency", p->hop_latency, 0, false, err));
  GR_TRY(check("step_fixed", p->step_fixed, 0, false, err));
  GR_TRY(check("step_task", p->step_task, 0, false, err));
  GR_TRY(check("control_rtt", p->control_rtt, 0, false, err));
  GR_TRY(check("host_hop", p->host_hop, 0, false, err));
  GR_TRY(check("per_host", p->per_host, 0, false, err));
  if (n < 1 || n > GR_CLUSTER_MAX_TASKS)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "scaling model: %d workers, want 1 to %d", n,
                        GR_CLUSTER_MAX_TASKS);
  double bucket = p->bucket_bytes > 0 ? p->bucket_bytes : p->grad_bytes;
  double buckets = bucket > 0 ? ceil(p->grad_bytes / bucket) : 0;
  if (buckets > MAX_BUCKETS)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "scaling model: %g buckets of %g bytes for %g bytes of gradient, want at "
                        "most %d (a larger bucket_bytes)",
                        buckets, bucket, p->grad_bytes, MAX_BUCKETS);
  /* bucket i is ready when the backward pass has made its share of the
   * gradient; the link sends one bucket at a time */
  double backward = p->compute * p->backward, forward = p->compute - backward;
  double link_free = 0;
  for (int i = 0; i < (int)buckets; i++) {
    double bytes = i + 1 < (int)buckets ? bucket : p->grad_bytes - bucket * i;
    double ready = forward + backward * fmin(1, bucket * (i + 1) / p->grad_bytes);
    double t = gr_scale_allreduce_time(p, n, bytes);
    out->allreduce += t;
    link_free = fmax(ready, link_free) + t;
  }
  double done = fmax(p->compute, link_free);
  out->exposed = done - p->compute;
  out->control = p->step_fixed + n * p->step_task + p->control_rtt;
  out->step = done + out->control;
  double one = p->compute + p->step_fixed + p->step_task + p->control_rtt;
  out->efficiency = one / out->step;
  return GR_OK;
}

void gr_scale_params_from_cluster(gr_scale_params *p, const gr_cluster *c, double net_latency) {
  gr_link host = gr_cluster_get_link(c, GR_LINK_SAME_HOST);
  p->hop_latency = host.latency + net_latency;
  p->host_hop = host.latency;
  p->host_bw = host.bandwidth;
  p->step_fixed = gr_cluster_get_link(c, GR_LINK_SAME_TASK).step;
  p->step_task = host.step;
  p->control_rtt = 2 * net_latency;
}

/* The scaling model (placer/scale.c, docs/scaling.md): known inputs give
 * known outputs, and the modelled step never improves with a slower link
 * or more workers. */
#include <graphrun.h>

#include "gr_test.h"

/* 1 s of compute, 2/3 of it backward, 100 MB of gradient in one bucket, a
 * 1 GB/s link, no host limit, latencies and control zero unless a case sets
 * them. */
static gr_scale_params base(void) {
  return (gr_scale_params){.compute = 1, .backward = 2.0 / 3, .grad_bytes = 100e6, .link_bw = 1e9};
}

static gr_scale_result predict(const gr_scale_params *p, int n) {
  gr_scale_result r;
  gr_error err;
  gr_status st = gr_scale_predict(p, n, &r, &err);
  GR_CHECK_MSG(st == GR_OK, "%s", err.msg);
  return r;
}

static void test_ring_time(void) {
  gr_scale_params p = base();
  GR_CHECK_NEAR(gr_scale_ring_time(&p, 1, 100e6), 0, 0);
  /* 2(n-1)/n * bytes / bw: 4 workers move 1.5 x the bytes */
  GR_CHECK_NEAR(gr_scale_ring_time(&p, 4, 100e6), 0.15, 1e-12);
  p.hop_latency = 1e-3; /* + 2(n-1) hops */
  GR_CHECK_NEAR(gr_scale_ring_time(&p, 4, 100e6), 0.156, 1e-12);
  p.host_bw = 1e9; /* a host as fast as the link halves the rate */
  GR_CHECK_NEAR(gr_scale_ring_time(&p, 4, 100e6), 0.306, 1e-12);
}

/* Several workers per host: a tree inside each host (2 ceil(log2 g) steps,
 * each the whole bucket through the transport), the ring among the hosts'
 * leaders; one host, or one worker per host: the ring over all. */
static void test_hierarchical_time(void) {
  gr_scale_params p = base();
  p.hop_latency = 30e-6, p.host_hop = 5e-6, p.host_bw = 2e9;
  double b = 1e6;
  p.per_host = 8; /* 64 workers on 8 hosts: 3 levels */
  GR_CHECK_NEAR(gr_scale_allreduce_time(&p, 64, b),
                6 * (b / 2e9 + 5e-6) + gr_scale_ring_time(&p, 8, b), 1e-15);
  p.per_host = 6; /* 13 workers on 3 hosts (the last has 1): 3 levels */
  GR_CHECK_NEAR(gr_scale_allreduce_time(&p, 13, b),
                6 * (b / 2e9 + 5e-6) + gr_scale_ring_time(&p, 3, b), 1e-15);
  p.per_host = 8; /* one host */
  GR_CHECK_NEAR(gr_scale_allreduce_time(&p, 8, b), gr_scale_ring_time(&p, 8, b), 0);
  p.per_host = 1;
  GR_CHECK_NEAR(gr_scale_allreduce_time(&p, 64, b), gr_scale_ring_time(&p, 64, b), 0);
  /* a small bucket over many workers: fewer hops wins; a large one through
   * a slow transport: the tree's whole-bucket steps lose */
  p.per_host = 8;
  GR_CHECK(gr_scale_allreduce_time(&p, 256, 1e5) < gr_scale_ring_time(&p, 256, 1e5));
  GR_CHECK(gr_scale_allreduce_time(&p, 64, 100e6) > gr_scale_ring_time(&p, 64, 100e6));
  /* the step uses it */
  p.grad_bytes = 1e5;
  gr_scale_result r = predict(&p, 256);
  GR_CHECK_NEAR(r.allreduce, gr_scale_allreduce_time(&p, 256, 1e5), 1e-15);
}

static void test_one_worker(void) {
  gr_scale_params p = base();
  p.step_fixed = 0.01, p.step_task = 0.002, p.control_rtt = 0.001;
  gr_scale_result r = predict(&p, 1);
  GR_CHECK_NEAR(r.allreduce, 0, 0);
  GR_CHECK_NEAR(r.step, 1.013, 1e-12);
  GR_CHECK_NEAR(r.efficiency, 1, 1e-12);
}

static void test_one_bucket(void) {
  /* one bucket: ready only at the end of the backward pass, nothing hidden */
  gr_scale_params p = base();
  gr_scale_result r = predict(&p, 4);
  GR_CHECK_NEAR(r.allreduce, 0.15, 1e-12);
  GR_CHECK_NEAR(r.exposed, 0.15, 1e-12);
  GR_CHECK_NEAR(r.step, 1.15, 1e-12);
  GR_CHECK_NEAR(r.efficiency, 1 / 1.15, 1e-12);
}

static void test_buckets_overlap(void) {
  /* 4 buckets of 25 MB, 0.0375 s each; the backward pass (2/3 s) makes one
   * every 1/6 s: each is sent before the next is ready, and only the last
   * one shows */
  gr_scale_params p = base();
  p.bucket_bytes = 25e6;
  gr_scale_result r = predict(&p, 4);
  GR_CHECK_NEAR(r.allreduce, 0.15, 1e-12);
  GR_CHECK_NEAR(r.exposed, 0.0375, 1e-12);
  GR_CHECK_NEAR(r.step, 1.0375, 1e-12);
  /* a link too slow to keep up: the buckets queue, and the sum shows less
   * the part of the backward pass after the first bucket was ready */
  p.link_bw = 1e8;
  r = predict(&p, 4);
  GR_CHECK_NEAR(r.allreduce, 1.5, 1e-9);
  GR_CHECK_NEAR(r.step, 1.0 / 3 + 2.0 / 3 / 4 + 1.5, 1e-9);
}

static void test_control(void) {
  /* the master's part grows with the tasks it drives */
  gr_scale_params p = base();
  p.grad_bytes = 0;
  p.step_fixed = 0.001, p.step_task = 1e-4;
  gr_scale_result r = predict(&p, 64);
  GR_CHECK_NEAR(r.control, 0.001 + 64 * 1e-4, 1e-12);
  GR_CHECK_NEAR(r.step, 1.0074, 1e-12);
  GR_CHECK_NEAR(r.efficiency, 1.0011 / 1.0074, 1e-12);
}

static void test_monotonic(void) {
  /* more workers or a slower link never make a step faster */
  gr_scale_params p = base();
  p.bucket_bytes = 25e6, p.host_bw = 3e9, p.hop_latency = 50e-6;
  p.step_fixed = 1e-4, p.step_task = 2e-5, p.control_rtt = 1e-4;
  p.compute = 0.3;
  const double gbps[] = {1, 10, 25, 40, 100, 400};
  const int workers[] = {1, 2, 4, 8, 16, 64, 128, 256, 1024};
  for (int li = 0; li < 6; li++) {
    double prev = 0;
    for (int wi = 0; wi < 9; wi++) {
      p.link_bw = gbps[li] * 1e9 / 8;
      gr_scale_result r = predict(&p, workers[wi]);
      GR_CHECK_MSG(r.step >= prev, "%g Gb/s: %d workers %g s < %g s", gbps[li], workers[wi], r.step,
                   prev);
      GR_CHECK(r.efficiency > 0 && r.efficiency <= 1 + 1e-12);
      prev = r.step;
      if (li > 0) {
        p.link_bw = gbps[li - 1] * 1e9 / 8;
        gr_scale_result slower = predict(&p, workers[wi]);
        GR_CHECK_MSG(slower.step >= r.step, "%d workers: %g Gb/s faster than %g Gb/s", workers[wi],
                     gbps[li - 1], gbps[li]);
      }
    }
  }
}

static void test_bad_params(void) {
  gr_scale_result r;
  gr_error err;
  gr_scale_params p = base();
  p.link_bw = 0;
  GR_CHECK(gr_scale_predict(&p, 4, &r, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "link_bw is 0");
  p = base();
  p.backward = 1.5;
  GR_CHECK(gr_scale_predict(&p, 4, &r, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "backward");
  p = base();
  p.compute = NAN;
  GR_CHECK(gr_scale_predict(&p, 4, &r, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "compute");
  p = base();
  GR_CHECK(gr_scale_predict(&p, 0, &r, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "0 workers");
  p.bucket_bytes = 1; /* 1e8 buckets */
  GR_CHECK(gr_scale_predict(&p, 4, &r, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "buckets");
}

int main(void) {
  GR_RUN(test_ring_time);
  GR_RUN(test_hierarchical_time);
  GR_RUN(test_one_worker);
  GR_RUN(test_one_bucket);
  GR_RUN(test_buckets_overlap);
  GR_RUN(test_control);
  GR_RUN(test_monotonic);
  GR_RUN(test_bad_params);
  return gr_test_finish();
}

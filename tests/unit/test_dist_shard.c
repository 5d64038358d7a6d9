/* Per-replica input shards on a launched local cluster (`graphrun launch
 * --workers 3`, real server processes, each run bounded in time and
 * reaped): examples/allreduce.gr, whose replicas read their own rows
 * (shard_input=true), against the same file with shard_input=false (the
 * global batch read on one task and sliced). Worker 0 sends the other two
 * workers' rows no more (the trace's bytes per link, printed by the run),
 * and the training is the same bits: the loss of every step (chained into
 * one f64 by a few lines the test adds to both) and the weights. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gr_dsl.h"
#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

#define STEPS   "6"
#define LENIENT "250:12" /* heartbeats for a loaded machine (as test_dist_parallel.c) */

static char tmp[] = "/tmp/gr_dist_shard_XXXXXX";

/* Every step's loss, kept: chain = 3 chain + loss after each update. */
static const char *const chain_lines =
    "\nchain = variable(const(0, f64))\n"
    "control_dependencies(train) { loss_chain = assign(chain, chain * 3 + cast(loss, f64)) }\n";

/* examples/allreduce.gr with shard_input as given, and the chain, in tmp/NAME.gr. */
static bool write_variant(const char *name, bool shard) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/examples/allreduce.gr", GR_SOURCE_DIR);
  char *text = gt_read_file(path);
  GR_CHECK_MSG(text != NULL, "cannot read %s", path);
  if (!text) return false;
  const char *key = "shard_input=true";
  char *at = strstr(text, key);
  GR_CHECK_MSG(at != NULL, "allreduce.gr does not shard its input");
  if (!at) return free(text), false;
  size_t cap = strlen(text) + strlen(chain_lines) + 16;
  char *out = malloc(cap);
  if (!out) return free(text), false;
  snprintf(out, cap, "%.*s%s%s%s", (int)(at - text), text, shard ? key : "shard_input=false",
           at + strlen(key), chain_lines);
  char file[64];
  snprintf(file, sizeof file, "%s.gr", name);
  gt_write_file(tmp, file, out);
  free(out), free(text);
  return true;
}

/* Runs tmp/NAME.gr on 3 workers; *from0: the bytes worker 0 sent in the
 * last step. Fetches go to tmp/NAME/. */
static bool launch(const char *name, long long *from0) {
  char file[PATH_MAX], out[PATH_MAX], trace[PATH_MAX];
  snprintf(file, sizeof file, "%s/%s.gr", tmp, name);
  snprintf(out, sizeof out, "%s/%s", tmp, name);
  snprintf(trace, sizeof trace, "%s/%s.json", tmp, name);
  gt_proc p;
  gt_proc_start(&p, (char *[]){"graphrun",
                               "launch",
                               "--ps",
                               "0",
                               "--workers",
                               "3",
                               file,
                               "--steps",
                               STEPS,
                               "--fetch",
                               "loss,loss_chain,layer1/w1,layer3/b3",
                               "--target",
                               "loss_chain,worst",
                               "--out",
                               out,
                               "--trace",
                               trace,
                               "--timeout",
                               "60",
                               "--heartbeat",
                               LENIENT,
                               NULL});
  bool ended = gt_proc_wait(&p, NULL, 180);
  gt_proc_finish(&p);
  GR_CHECK_MSG(ended, "%s did not end within 180 s:\n%s", name, p.buf);
  int code = gt_proc_exit_code(&p);
  GR_CHECK_MSG(code == 0, "%s: exit %d:\n%s", name, code, p.buf);
  /* "graphrun run:   /job:worker/replica:0/task:0/device:CPU:0 -> ...: V values, B bytes" */
  *from0 = 0;
  int links = 0;
  const char *src = "   /job:worker/replica:0/task:0/device:CPU:0 -> ";
  for (const char *l = strstr(p.buf, src); l; l = strstr(l + 1, src)) {
    const char *v = strstr(l, ": ");
    const char *b = v ? strstr(v, " values, ") : NULL;
    if (!b) break;
    *from0 += strtoll(b + 9, NULL, 10);
    links++;
  }
  GR_CHECK_MSG(links >= 2, "%s: worker 0's links not printed:\n%s", name, p.buf);
  return code == 0 && ended && links >= 2;
}

static bool same_file(const char *name) {
  char a[PATH_MAX], b[PATH_MAX];
  snprintf(a, sizeof a, "%s/sharded/%s.npy", tmp, name);
  snprintf(b, sizeof b, "%s/sliced/%s.npy", tmp, name);
  gr_tensor ta, tb;
  gr_error err;
  if (gr_data_load_npy(a, &ta, &err) != GR_OK) return fprintf(stderr, "%s\n", err.msg), false;
  if (gr_data_load_npy(b, &tb, &err) != GR_OK) {
    gr_tensor_release(&ta);
    return fprintf(stderr, "%s\n", err.msg), false;
  }
  bool same = gt_bit_equal(&ta, &tb);
  gr_tensor_release(&ta), gr_tensor_release(&tb);
  return same;
}

static void test_allreduce_sharded(void) {
  if (!write_variant("sharded", true) || !write_variant("sliced", false)) return;
  long long sharded = 0, sliced = 0;
  if (!launch("sharded", &sharded) || !launch("sliced", &sliced)) return;
  printf("allreduce.gr on 3 workers: worker 0 sent %lld bytes in a step sliced, %lld sharded\n",
         sliced, sharded);
  /* sliced, worker 0 sends workers 1 and 2 their 64 rows: 784 pixel bytes
   * and a label byte each; sharded, not even the step number (each
   * replica reads its own copy of global_step) */
  GR_CHECK_MSG(sliced - sharded >= 2 * 64 * 785, "%lld vs %lld", sliced, sharded);
  const char *files[] = {"loss", "loss_chain", "layer1/w1", "layer3/b3"};
  for (int i = 0; i < 4; i++)
    GR_CHECK_MSG(same_file(files[i]), "%s differs between the sharded and sliced runs", files[i]);
}

int main(void) {
  if (!mkdtemp(tmp)) return 1;
  gt_proc_isolate();
  GR_RUN(test_allreduce_sharded);
  gt_remove_tree(tmp);
  return gr_test_finish();
}

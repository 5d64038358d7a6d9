/* Checkpoint save and restore speed against raw file I/O on the same bytes.
 *
 * 256 MiB of variables (8 f32 tensors of 32 MiB) held by a session:
 *   raw:     write() every tensor to a file + fsync; pread them back
 *   save:    gr_ckpt_save_session into a checkpoint file with max_to_keep=1
 *            (from the second save on, each one also deletes the previous)
 *   restore: gr_ckpt_restore_latest into a new session (checksums verified)
 *   sharded: the same variables as a sharded checkpoint directory: 4 shard
 *            files written at once by 4 threads (as 4 tasks would), then the
 *            manifest row committed; max_to_keep=1 (older shards deleted)
 * After one warm-up round (file blocks, buffers), medians of 5 interleaved rounds. The files live
 * in $TMPDIR (default /tmp), on the disk that checkpoints would use.
 *
 * Last line: ckpt: save_pct_of_raw=P restore_gbps=G sharded_pct_of_raw=S
 * (targets P >= 65, G >= 2, S >= 65)
 * --smoke: 2 tensors of 1 MiB, one round. */
#include <fcntl.h>
#include <graphrun.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "bench_util.h"
#include "checkpoints/gr_checkpoints.h"

static void die(const char *what, const gr_error *e) {
  fprintf(stderr, "bench_ckpt: %s: %s\n", what, e ? e->msg : "");
  exit(1);
}

static double raw_write(const char *path, gr_tensor *t, int n) {
  double t0 = bench_now();
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) die("raw open", NULL);
  for (int i = 0; i < n; i++) {
    const char *p = gr_tensor_data(&t[i]);
    size_t left = gr_tensor_num_bytes(&t[i]);
    while (left) {
      ssize_t w = write(fd, p, left);
      if (w <= 0) die("raw write", NULL);
      p += w;
      left -= (size_t)w;
    }
  }
  if (fsync(fd) != 0) die("raw fsync", NULL);
  close(fd);
  return bench_now() - t0;
}

static double raw_read(const char *path, gr_tensor *t, int n) {
  double t0 = bench_now();
  int fd = open(path, O_RDONLY);
  if (fd < 0) die("raw open", NULL);
  off_t off = 0;
  for (int i = 0; i < n; i++) {
    char *p = gr_tensor_data(&t[i]);
    size_t left = gr_tensor_num_bytes(&t[i]);
    while (left) {
      ssize_t r = pread(fd, p, left, off);
      if (r <= 0) die("raw read", NULL);
      p += r, off += r;
      left -= (size_t)r;
    }
  }
  close(fd);
  return bench_now() - t0;
}

/* One task's shard: its tensors written into DIR/ps-K.ckpt, as a task's
 * save node writes it. */
typedef struct shard_job {
  char path[600];
  gr_ckpt_tensor t[8];
  int n;
  int64_t step;
  gr_status st;
  gr_error err;
} shard_job;

static void *write_shard(void *arg) {
  shard_job *j = arg;
  j->st = gr_ckpt_save_shard(j->path, j->step, j->t, j->n, &j->err);
  return NULL;
}

#define SHARDS 4

/* Saves vals as SHARDS shards written at once, then the manifest row. */
static double sharded_save(gr_ckpt *dir, gr_tensor *vals, int n, int64_t step) {
  double t0 = bench_now();
  shard_job jobs[SHARDS];
  pthread_t th[SHARDS];
  gr_ckpt_shard shards[SHARDS];
  char files[SHARDS][32], tasks[SHARDS][32], names[8][32];
  for (int k = 0; k < SHARDS; k++) {
    snprintf(files[k], sizeof files[k], "ps-%d.ckpt", k);
    snprintf(tasks[k], sizeof tasks[k], "/job:ps/task:%d", k);
    shards[k] = (gr_ckpt_shard){files[k], tasks[k]};
    jobs[k] = (shard_job){.step = step};
    if (!gr_ckpt_shard_path(dir, files[k], jobs[k].path, sizeof jobs[k].path))
      die("shard path", NULL);
  }
  for (int i = 0; i < n; i++) { /* round-robin over the shards */
    snprintf(names[i], sizeof names[i], "layer%d/w", i);
    shard_job *j = &jobs[i % SHARDS];
    j->t[j->n++] = (gr_ckpt_tensor){names[i], &vals[i]};
  }
  for (int k = 0; k < SHARDS; k++) pthread_create(&th[k], NULL, write_shard, &jobs[k]);
  for (int k = 0; k < SHARDS; k++) pthread_join(th[k], NULL);
  for (int k = 0; k < SHARDS; k++)
    if (jobs[k].st != GR_OK) die("shard save", &jobs[k].err);
  gr_error err;
  int used = n < SHARDS ? n : SHARDS;
  if (gr_ckpt_commit_shards(dir, step, shards, used, NULL, &err) != GR_OK) die("commit", &err);
  return bench_now() - t0;
}

int main(int argc, char **argv) {
  int smoke = bench_is_smoke(argc, argv);
  int n = smoke ? 2 : 8, reps = smoke ? 1 : 5;
  int64_t elems = smoke ? (1 << 18) : (8 << 20); /* 1 MiB or 32 MiB of f32 */
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char raw_path[512], ck_path[512], dir_path[512];
  snprintf(raw_path, sizeof raw_path, "%s/bench_ckpt_raw.%d", tmp, (int)getpid());
  snprintf(ck_path, sizeof ck_path, "%s/bench_ckpt.%d.db", tmp, (int)getpid());
  snprintf(dir_path, sizeof dir_path, "%s/bench_ckpt_dir.%d", tmp, (int)getpid());
  unlink(ck_path);

  gr_graph *g = gr_graph_new();
  for (int i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "layer%d/w", i);
    gr_variable(g, name,
                gr_random_uniform(g, GR_F32, (gr_shape){2, {elems / 1024, 1024}}, -1, 1, i));
  }
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  if (!s) die("session", &err);
  if (gr_session_init_variables(s, &err) != GR_OK) die("init", &err);
  gr_tensor *vals = calloc((size_t)n, sizeof *vals), *back = calloc((size_t)n, sizeof *back);
  for (int i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "layer%d/w", i);
    gr_var *v = gr_resource_mgr_get_var(gr_session_resources(s), name);
    gr_var_lock(v);
    gr_tensor_ref(&vals[i], gr_var_value(v));
    gr_var_unlock(v);
    gr_tensor_alloc(&back[i], GR_F32, &vals[i].shape, &err);
  }
  double bytes = (double)n * (double)elems * 4;

  gr_ckpt *ck, *dir;
  gr_ckpt_options o = {.max_to_keep = 1}, od = {.max_to_keep = 1, .sharded = true};
  if (gr_ckpt_open(ck_path, &o, &ck, &err) != GR_OK) die("open", &err);
  if (gr_ckpt_open(dir_path, &od, &dir, &err) != GR_OK) die("open", &err);
  double tw[8], tr[8], ts[8], tl[8], tsh[8];
  for (int r = -1; r < reps; r++) { /* r = -1: warm-up (file blocks, buffers), not counted */
    int k = r < 0 ? reps : r;
    tw[k] = raw_write(raw_path, vals, n);
    tr[k] = raw_read(raw_path, back, n);
    gr_session_set_step(s, 100 + r);
    double t0 = bench_now();
    if (gr_ckpt_save_session(ck, s, g, NULL, &err) != GR_OK) die("save", &err);
    ts[k] = bench_now() - t0;
    gr_session *s2 = gr_session_new(g, NULL, &err);
    if (!s2) die("session", &err);
    t0 = bench_now();
    int64_t step;
    if (gr_ckpt_restore_latest(ck, s2, g, &step, &err) != GR_OK) die("restore", &err);
    tl[k] = bench_now() - t0;
    if (step != 100 + r) die("restored the wrong step", NULL);
    gr_var *v = gr_resource_mgr_get_var(gr_session_resources(s2), "layer0/w");
    gr_var_lock(v);
    int same =
        memcmp(gr_tensor_data(gr_var_value(v)), gr_tensor_data(&vals[0]), (size_t)elems * 4) == 0;
    gr_var_unlock(v);
    if (!same) die("restored values differ", NULL);
    gr_session_free(s2);
    tsh[k] = sharded_save(dir, vals, n, 100 + r);
    printf("%s %d: raw write+fsync %.3f s, raw read %.3f s, save %.3f s, restore %.3f s, "
           "sharded save %.3f s\n",
           r < 0 ? "warm-up" : "run", r, tw[k], tr[k], ts[k], tl[k], tsh[k]);
  }
  gr_ckpt_close(ck);
  gr_ckpt_close(dir);
  double w = bench_median(tw, reps), rd = bench_median(tr, reps), sv = bench_median(ts, reps),
         rs = bench_median(tl, reps), sh = bench_median(tsh, reps);
  printf("%.0f MiB: raw write+fsync %.2f GB/s, raw read %.2f GB/s, save %.2f GB/s, restore %.2f "
         "GB/s\n",
         bytes / (1 << 20), bytes / w / 1e9, bytes / rd / 1e9, bytes / sv / 1e9, bytes / rs / 1e9);
  printf("sharded save (%d shards written at once, then the manifest): %.2f GB/s\n", SHARDS,
         bytes / sh / 1e9);
  for (int i = 0; i < n; i++) {
    gr_tensor_release(&vals[i]);
    gr_tensor_release(&back[i]);
  }
  free(vals);
  free(back);
  gr_session_free(s);
  gr_graph_free(g);
  unlink(raw_path);
  unlink(ck_path);
  bench_remove_tree("bench_ckpt", dir_path);
  printf("ckpt: save_pct_of_raw=%.0f restore_gbps=%.2f sharded_pct_of_raw=%.0f\n", 100.0 * w / sv,
         bytes / rs / 1e9, 100.0 * w / sh);
  return 0;
}

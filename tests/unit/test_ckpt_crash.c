/* Crash safety: a child process saves checkpoints in a loop (retention on,
 * so deletes happen too) and is killed with SIGKILL at random instants.
 * After every kill the file must pass integrity_check and every checksum,
 * its newest checkpoint must be the last one the child reported committed
 * (or the one after, if the kill fell between COMMIT and the report), and
 * that checkpoint must restore to exactly the values saved at its step.
 *
 * One kill in five falls anywhere in the child's start-up (opening or
 * creating the file), the others anywhere in the three saves after its
 * first report, calibrated by a first child left running for 300 ms. The file
 * lives in /dev/shm when it exists (GR_CKPT_CRASH_DIR overrides): a SIGKILL
 * does not lose the page cache, so fsync plays no part in what is tested
 * here and tmpfs keeps 200 rounds fast.
 *
 * With --sharded the same over a sharded checkpoint directory: each save
 * writes two shard files, as two tasks would (each its own file, opened
 * and closed per save as a task's `save` node does), then commits the
 * manifest, so kills also fall between the shards and the manifest.
 *
 *   test_ckpt_crash [KILLS] [--sharded]   (default 200; `make soak-ckpt` runs 1000) */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkpoints/gr_checkpoints.h"
#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

static char dir[64], path[128], journal[140];
static bool sharded;

#define W_ELEMS   (32 * 64)
#define BIG_ELEMS 20000

/* The values saved at a step: a pure function of the step. */
static void fill(int64_t step, gr_tensor t[3]) {
  gr_error err;
  gr_tensor_alloc(&t[0], GR_F32, &(gr_shape){2, {32, 64}}, &err);
  gr_tensor_alloc(&t[1], GR_F64, &(gr_shape){1, {BIG_ELEMS}}, &err);
  t[2] = gr_tensor_scalar_i64(step);
  float *w = gr_tensor_data(&t[0]);
  double *b = gr_tensor_data(&t[1]);
  for (int i = 0; i < W_ELEMS; i++) w[i] = (float)((step * 7919 + i * 31) % 10007) * 0.25f;
  for (int i = 0; i < BIG_ELEMS; i++) b[i] = (double)(step * 104729 + i) * 1e-3;
}

static const char *names[3] = {"model/w", "model/big", "global_step"};

/* A task's save: its own shard file (and its retention), as its save node. */
static gr_status save_shard(const char *file, int64_t step, const gr_ckpt_tensor *ct, int n,
                            gr_error *err) {
  char p[200];
  snprintf(p, sizeof p, "%s/%s", path, file);
  return gr_ckpt_save_shard(p, step, ct, n, err);
}

static gr_status save(gr_ckpt *ck, int64_t step, const gr_ckpt_tensor ct[3], gr_error *err) {
  if (!sharded) return gr_ckpt_save_tensors(ck, step, ct, 3, NULL, err);
  GR_TRY(save_shard("ps-0.ckpt", step, ct, 1, err));
  GR_TRY(save_shard("ps-1.ckpt", step, ct + 1, 2, err));
  gr_ckpt_shard sh[2] = {{"ps-0.ckpt", "/job:ps/task:0"}, {"ps-1.ckpt", "/job:ps/task:1"}};
  return gr_ckpt_commit_shards(ck, step, sh, 2, NULL, err);
}

static void child(int64_t first_step, int fd) {
  gr_ckpt *ck;
  gr_error err;
  gr_ckpt_options o = {.max_to_keep = 2, .keep_every_n_steps = 1000, .sharded = sharded};
  if (gr_ckpt_open(path, &o, &ck, &err) != GR_OK) {
    fprintf(stderr, "child: %s\n", err.msg);
    _exit(3);
  }
  for (int64_t step = first_step;; step++) {
    gr_tensor t[3];
    fill(step, t);
    gr_ckpt_tensor ct[3];
    for (int i = 0; i < 3; i++) ct[i] = (gr_ckpt_tensor){names[i], &t[i]};
    if (save(ck, step, ct, &err) != GR_OK) {
      fprintf(stderr, "child: %s\n", err.msg);
      _exit(3);
    }
    for (int i = 0; i < 3; i++) gr_tensor_release(&t[i]);
    if (write(fd, &step, sizeof step) != sizeof step) _exit(4);
  }
}

/* Checks the file after a kill; returns the newest step (-1: none). */
static int64_t check_file(int64_t last_reported, int64_t prev_latest, int round) {
  gr_ckpt *ck;
  gr_error err;
  gr_ckpt_options o = {.read_only = true};
  gr_status os = gr_ckpt_open(path, &o, &ck, &err);
  if (os == GR_ERR_NOT_FOUND && last_reported < 0 && prev_latest < 0)
    return -1; /* killed while creating the file: no checkpoint yet, as it should be */
  if (os != GR_OK) {
    GR_CHECK_MSG(0, "round %d: open: %s", round, err.msg);
    return prev_latest;
  }
  int checked = 0;
  GR_CHECK_MSG(gr_ckpt_verify(ck, NULL, NULL, &checked, &err) == GR_OK, "round %d: %s", round,
               err.msg);
  int64_t latest = -1;
  gr_status s = gr_ckpt_latest_step(ck, &latest, &err);
  if (s == GR_ERR_NOT_FOUND)
    latest = -1;
  else
    GR_CHECK_MSG(s == GR_OK, "round %d: %s", round, err.msg);
  GR_CHECK_MSG(latest >= prev_latest,
               "round %d: newest step went back from %" PRId64 " to %" PRId64, round, prev_latest,
               latest);
  if (last_reported >= 0)
    GR_CHECK_MSG(latest == last_reported || latest == last_reported + 1,
                 "round %d: newest step %" PRId64 " but the child committed %" PRId64, round,
                 latest, last_reported);
  if (latest >= 0) {
    gr_tensor want[3];
    fill(latest, want);
    for (int i = 0; i < 3; i++) {
      gr_tensor got;
      if (gr_ckpt_read_tensor(ck, latest, names[i], &got, &err) != GR_OK) {
        GR_CHECK_MSG(0, "round %d: %s", round, err.msg);
        continue;
      }
      GR_CHECK_MSG(gr_tensor_num_bytes(&got) == gr_tensor_num_bytes(&want[i]) &&
                       memcmp(gr_tensor_data(&got), gr_tensor_data(&want[i]),
                              gr_tensor_num_bytes(&got)) == 0,
                   "round %d: %s at step %" PRId64 " differs from what was saved", round, names[i],
                   latest);
      gr_tensor_release(&got);
    }
    for (int i = 0; i < 3; i++) gr_tensor_release(&want[i]);
  }
  gr_ckpt_close(ck);
  return latest;
}

static int kills = 200;

static pid_t spawn(int64_t first_step, int *rfd) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    child(first_step, fds[1]);
  }
  close(fds[1]);
  *rfd = fds[0];
  return pid;
}

/* Kills the child; returns the last step it reported (-1: none), counts reports. */
static int64_t kill_and_drain(pid_t pid, int fd, int64_t *saves, int round) {
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  GR_CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
               "round %d: the child ended by itself (status %d)", round, status);
  int64_t step, last = -1;
  while (read(fd, &step, sizeof step) == sizeof step) {
    last = step;
    (*saves)++;
  }
  close(fd);
  return last;
}

/* Did the kill leave a rollback journal (a transaction cut short)? */
static bool journal_left(void) {
  struct stat sb;
  if (!sharded) return stat(journal, &sb) == 0;
  static const char *const files[] = {"manifest.ckpt", "ps-0.ckpt", "ps-1.ckpt"};
  for (int i = 0; i < 3; i++) {
    char j[220];
    snprintf(j, sizeof j, "%s/%s-journal", path, files[i]);
    if (stat(j, &sb) == 0) return true;
  }
  return false;
}

static void test_kill_at_random_instants(void) {
  /* a new seed each run (printed; GR_TEST_SEED=N repeats one) */
  gt_rng r = {getenv("GR_TEST_SEED") ? strtoull(getenv("GR_TEST_SEED"), NULL, 10)
                                     : (uint64_t)time(NULL)};
  printf("seed %" PRIu64 ", file %s\n", r.s, path);
  /* calibration: how long do start-up and one save take here? */
  int fd;
  int64_t calib_saves = 0, first;
  double t0 = gt_now();
  pid_t pid0 = spawn(0, &fd);
  GR_CHECK(pid0 > 0);
  if (pid0 <= 0) return;
  bool started = read(fd, &first, sizeof first) == sizeof first;
  GR_CHECK_MSG(started, "the calibration child saved nothing");
  double startup = gt_now() - t0;
  calib_saves += started;
  struct timespec cal = {0, 300 * 1000000L};
  nanosleep(&cal, NULL);
  int64_t last0 = kill_and_drain(pid0, fd, &calib_saves, -1);
  if (last0 < 0 && started) last0 = first;
  double per_save = 0.3 / (double)(calib_saves + 1);
  long startup_us = (long)(startup * 1e6), window_us = (long)(3 * per_save * 1e6) + 1;
  printf("calibration: start-up and first save %.2f ms, then %.3f ms per save\n", startup * 1e3,
         per_save * 1e3);
  int64_t latest = check_file(last0, -1, -1);
  int64_t saves = 0;
  int hot = 0, rounds_failed_before = gr_test_checks_failed_;
  for (int round = 0; round < kills && gr_test_checks_failed_ - rounds_failed_before < 5; round++) {
    pid_t pid = spawn(latest + 1, &fd);
    GR_CHECK(pid > 0);
    if (pid <= 0) return;
    /* one round in five: anywhere in start-up (opening, creating the file);
     * else once the child is saving, anywhere in its next three saves */
    int64_t got = -1;
    bool in_loop = gt_int(&r, 0, 4) > 0;
    if (in_loop && read(fd, &got, sizeof got) == sizeof got)
      saves++;
    else
      got = -1;
    long us = (long)gt_int(&r, 0, in_loop ? window_us : startup_us);
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
    int64_t last = kill_and_drain(pid, fd, &saves, round);
    if (last < 0) last = got;
    hot += journal_left();
    latest = check_file(last, latest, round);
  }
  printf("%d kills, %" PRId64 " saves committed, %d kills left a journal to roll back, newest "
         "step %" PRId64 "\n",
         kills, saves, hot, latest);
  /* the test only means something if kills landed inside transactions */
  GR_CHECK_MSG(hot > 0, "no kill interrupted a transaction");
  GR_CHECK(saves > 0);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--sharded") == 0)
      sharded = true;
    else
      kills = atoi(argv[i]);
  }
  if (kills < 1) {
    fprintf(stderr, "usage: test_ckpt_crash [KILLS] [--sharded]\n");
    return 2;
  }
  const char *base = getenv("GR_CKPT_CRASH_DIR");
  struct stat sb;
  if (!base) base = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) ? "/dev/shm" : "/tmp";
  snprintf(dir, sizeof dir, "%s/gr_test_ckpt_crash_XXXXXX", base);
  if (!mkdtemp(dir)) return 1;
  snprintf(path, sizeof path, "%s/%s", dir, sharded ? "crash_dir" : "crash.db");
  snprintf(journal, sizeof journal, "%s-journal", path);
  GR_RUN(test_kill_at_random_instants);
  gt_remove_tree(dir);
  return gr_test_finish();
}

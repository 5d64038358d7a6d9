/* Asynchronous saves (gr_ckpt_save_session_async, graphrun run --save-async):
 * the checkpoints equal synchronous saves' byte for byte while steps run
 * during the writes; a process killed during a background write leaves the
 * previous checkpoint the newest (a file, and a sharded directory killed
 * between its shard and its manifest), and restore picks it; a failed
 * write (a real one: the file size limit) is reported once, naming the
 * step and the file, by the next save or the wait; the end waits for the
 * write in flight, and a save waits for the previous write.
 *
 * The writes are slowed or blocked through ckpt_before_commit_hook (a
 * test-only hook called just before each COMMIT on the writing thread).
 * The killed writer is this program run again (--child), so the process
 * that is killed is a fresh one. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkpoints/ckpt_internal.h"
#include "gr_test.h"
#include "test_util.h"

static char dir[64];

/* A model whose variables change every step (step-keyed noise), with one
 * large variable so a write takes a while. */
typedef struct model {
  gr_graph *g;
  gr_output train;
} model;

static model build_model(void) {
  model m;
  m.g = gr_graph_new();
  gr_graph_set_seed(m.g, 42);
  gr_shape ws = {2, {64, 1024}};
  gr_output w = gr_variable(m.g, "w", gr_random_normal(m.g, GR_F32, ws, 0, 1, 1));
  gr_output b =
      gr_variable(m.g, "b", gr_const_data(m.g, GR_I64, (gr_shape){1, {2}}, (int64_t[]){5, 6}));
  gr_output deps[2] = {
      gr_assign_add(m.g, w, gr_random_uniform(m.g, GR_F32, ws, -1, 1, 2)),
      gr_assign_add(m.g, b, gr_const_data(m.g, GR_I64, (gr_shape){1, {2}}, (int64_t[]){1, 2}))};
  m.train = gr_group(m.g, "train", deps, 2);
  return m;
}

static gr_session *new_session(model *m) {
  gr_error err;
  gr_session *s = gr_session_new(m->g, NULL, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  if (s) GR_CHECK_OK(gr_session_init_variables(s, &err), err);
  return s;
}

static void run_train(gr_session *s, model *m, int steps) {
  gr_error err;
  for (int i = 0; i < steps; i++)
    GR_CHECK_OK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &m->train, 1, &err), err);
}

static gr_ckpt *open_ck(const char *path, bool sharded) {
  gr_ckpt *ck = NULL;
  gr_error err;
  gr_ckpt_options o = {.max_to_keep = 3, .sharded = sharded};
  GR_CHECK_OK(gr_ckpt_open(path, &o, &ck, &err), err);
  return ck;
}

/* A model, its session, a checkpoint in dir and its writer. */
typedef struct fixture {
  model m;
  const char *path;
  gr_ckpt *ck;
  gr_session *s;
  gr_ckpt_async *w;
} fixture;

static bool setup(fixture *f, const char *name, bool sharded) {
  gr_error err;
  f->m = build_model();
  f->path = gt_path_in(dir, name);
  f->ck = open_ck(f->path, sharded);
  f->s = new_session(&f->m);
  f->w = NULL;
  if (f->ck) GR_CHECK_OK(gr_ckpt_async_new(f->ck, &f->w, &err), err);
  return f->ck && f->s && f->w;
}

/* Waits for the last write (checked), then frees it all. */
static void teardown(fixture *f) {
  gr_error err;
  GR_CHECK_OK(gr_ckpt_async_free(f->w, &err), err);
  gr_session_free(f->s);
  gr_ckpt_close(f->ck);
  gr_graph_free(f->m.g);
}

/* ---- the hook --------------------------------------------------------------------- */

static atomic_int hook_mode;      /* 0: nothing; 1: sleep; 2: block (a child to be killed) */
static atomic_int commits_begun;  /* commits the hook saw */
static atomic_int commits_inside; /* writes inside the hook now */
static atomic_int most_inside;
static int block_fd = -1;   /* mode 2: a byte written here, then blocked forever */
static int64_t block_step;  /* mode 2: the step whose commit blocks */
static bool block_manifest; /* mode 2: only the manifest's commit (a directory path) */

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static void hook(const char *path, int64_t step) {
  atomic_fetch_add(&commits_begun, 1);
  int inside = atomic_fetch_add(&commits_inside, 1) + 1;
  int most = atomic_load(&most_inside);
  while (inside > most && !atomic_compare_exchange_weak(&most_inside, &most, inside)) {}
  if (atomic_load(&hook_mode) == 1) sleep_ms(150);
  if (atomic_load(&hook_mode) == 2 && step == block_step) {
    struct stat st;
    bool is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    if (!block_manifest || is_dir) {
      (void)!write(block_fd, "b", 1);
      for (;;) pause(); /* killed here, inside the transaction */
    }
  }
  atomic_fetch_sub(&commits_inside, 1);
}

/* Mode 0 keeps the counts of the writes before for the checks after. */
static void set_hook(int mode) {
  atomic_store(&hook_mode, mode);
  if (mode) atomic_store(&commits_begun, 0), atomic_store(&most_inside, 0);
  ckpt_before_commit_hook = mode ? hook : NULL;
}

/* ---- async equals sync ------------------------------------------------------------ */

/* Every checkpoint of a and b: the same steps, tensors, checksums, bytes. */
static void same_checkpoints(gr_ckpt *a, gr_ckpt *b) {
  gr_ckpt_info *ia = NULL, *ib = NULL;
  int na = 0, nb = 0;
  gr_error err;
  GR_CHECK_OK(gr_ckpt_list(a, &ia, &na, &err), err);
  GR_CHECK_OK(gr_ckpt_list(b, &ib, &nb, &err), err);
  GR_CHECK_EQ_INT(na, nb);
  GR_CHECK(na >= 2);
  for (int i = 0; i < na && i < nb; i++) {
    GR_CHECK_EQ_INT(ia[i].step, ib[i].step);
    GR_CHECK(strcmp(ia[i].fingerprint, ib[i].fingerprint) == 0);
    GR_CHECK(strcmp(ia[i].metadata, ib[i].metadata) == 0);
    gr_ckpt_tensor_info *ta = NULL, *tb = NULL;
    int nta = 0, ntb = 0;
    GR_CHECK_OK(gr_ckpt_list_tensors(a, ia[i].step, &ta, &nta, &err), err);
    GR_CHECK_OK(gr_ckpt_list_tensors(b, ib[i].step, &tb, &ntb, &err), err);
    GR_CHECK_EQ_INT(nta, ntb);
    for (int k = 0; k < nta && k < ntb; k++) {
      GR_CHECK(strcmp(ta[k].name, tb[k].name) == 0);
      GR_CHECK_MSG(ta[k].checksum == tb[k].checksum, "step %" PRId64 " tensor %s", ia[i].step,
                   ta[k].name);
      gr_tensor x, y;
      GR_CHECK_OK(gr_ckpt_read_tensor(a, ia[i].step, ta[k].name, &x, &err), err);
      GR_CHECK_OK(gr_ckpt_read_tensor(b, ib[i].step, tb[k].name, &y, &err), err);
      GR_CHECK(gt_bit_equal(&y, &x));
      gr_tensor_release(&x);
      gr_tensor_release(&y);
    }
    gr_ckpt_tensor_infos_free(ta, nta);
    gr_ckpt_tensor_infos_free(tb, ntb);
  }
  gr_ckpt_infos_free(ia, na);
  gr_ckpt_infos_free(ib, nb);
}

static void async_equals_sync(bool sharded) {
  fixture f;
  gr_error err;
  bool ok = setup(&f, sharded ? "async_dir" : "async.ckpt", sharded);
  gr_ckpt *a = open_ck(gt_path_in(dir, sharded ? "sync_dir" : "sync.ckpt"), sharded);
  gr_session *sa = new_session(&f.m);
  if (ok && a && sa) {
    for (int round = 0; round < 4; round++) {
      run_train(sa, &f.m, 2);
      GR_CHECK_OK(gr_ckpt_save_session(a, sa, f.m.g, "{\"round\": 1}", &err), err);
    }
    set_hook(1); /* each write sleeps before its commit: the next steps run meanwhile */
    for (int round = 0; round < 4; round++) {
      run_train(f.s, &f.m, 2);
      GR_CHECK_OK(gr_ckpt_save_session_async(f.w, f.s, f.m.g, "{\"round\": 1}", &err), err);
    }
    run_train(f.s, &f.m, 1); /* while the last write sleeps */
    GR_CHECK_OK(gr_ckpt_async_wait(f.w, &err), err);
    set_hook(0);
    GR_CHECK(atomic_load(&most_inside) == 1); /* never two writes at once */
    same_checkpoints(a, f.ck);
    int64_t latest = -1;
    GR_CHECK_OK(gr_ckpt_latest_step(f.ck, &latest, &err), err);
    GR_CHECK_EQ_INT(latest, 8);
  }
  gr_session_free(sa);
  gr_ckpt_close(a);
  teardown(&f);
}

static void test_async_equals_sync_file(void) {
  async_equals_sync(false);
}

static void test_async_equals_sync_sharded(void) {
  async_equals_sync(true);
}

/* ---- a kill during the write ------------------------------------------------------ */

/* The child (this program with --child PATH SHARDED FD): saves step 3 and
 * waits for it, then saves step 6, whose commit (of the manifest, for a
 * directory) blocks; the parent kills it there. */
static int child_main(const char *path, bool sharded, int fd) {
  model m = build_model();
  gr_error err;
  gr_ckpt *ck;
  gr_ckpt_options o = {.max_to_keep = 3, .sharded = sharded};
  gr_session *s = gr_session_new(m.g, NULL, &err);
  gr_ckpt_async *w;
  if (!s || gr_session_init_variables(s, &err) != GR_OK ||
      gr_ckpt_open(path, &o, &ck, &err) != GR_OK || gr_ckpt_async_new(ck, &w, &err) != GR_OK) {
    fprintf(stderr, "child: %s\n", err.msg);
    return 1;
  }
  block_fd = fd, block_step = 6, block_manifest = sharded;
  set_hook(2);
  for (int i = 0; i < 3; i++) gr_session_run(s, NULL, 0, NULL, 0, NULL, &m.train, 1, &err);
  if (gr_ckpt_save_session_async(w, s, m.g, NULL, &err) != GR_OK ||
      gr_ckpt_async_wait(w, &err) != GR_OK) {
    fprintf(stderr, "child: %s\n", err.msg);
    return 1;
  }
  for (int i = 0; i < 3; i++) gr_session_run(s, NULL, 0, NULL, 0, NULL, &m.train, 1, &err);
  if (gr_ckpt_save_session_async(w, s, m.g, NULL, &err) != GR_OK) return 1;
  /* the steps go on while the write blocks; then the end waits for it */
  for (int i = 0; i < 3; i++) gr_session_run(s, NULL, 0, NULL, 0, NULL, &m.train, 1, &err);
  gr_ckpt_async_free(w, &err);
  return 2; /* never reached: killed while waiting */
}

static char self_exe[4096];

static void kill_during_write(bool sharded) {
  const char *path = gt_path_in(dir, sharded ? "killed_dir" : "killed.ckpt");
  int fds[2];
  GR_CHECK(pipe(fds) == 0);
  char fdtext[16];
  snprintf(fdtext, sizeof fdtext, "%d", fds[1]);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    execl(self_exe, self_exe, "--child", path, sharded ? "1" : "0", fdtext, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  GR_CHECK(pid > 0);
  if (pid <= 0) return;
  struct pollfd p = {.fd = fds[0], .events = POLLIN};
  char c = 0;
  bool blocked = poll(&p, 1, 120000) == 1 && read(fds[0], &c, 1) == 1 && c == 'b';
  GR_CHECK_MSG(blocked, "the child's write did not block at its commit");
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  close(fds[0]);
  GR_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  if (!blocked) return;
  /* the previous checkpoint is the newest, whole, and restores */
  gr_ckpt *ck = open_ck(path, sharded);
  gr_error err;
  if (!ck) return;
  int64_t latest = -1;
  GR_CHECK_OK(gr_ckpt_latest_step(ck, &latest, &err), err);
  GR_CHECK_EQ_INT(latest, 3);
  int checked = 0;
  GR_CHECK_OK(gr_ckpt_verify(ck, NULL, NULL, &checked, &err), err);
  model m = build_model();
  gr_session *s = gr_session_new(m.g, NULL, &err), *ref = new_session(&m);
  run_train(ref, &m, 3);
  int64_t step = -1;
  GR_CHECK_OK(gr_ckpt_restore_latest(ck, s, m.g, &step, &err), err);
  GR_CHECK_EQ_INT(step, 3);
  GR_CHECK_EQ_INT(gr_session_step(s), 3);
  const char *names[2] = {"b", "w"};
  for (int i = 0; i < 2; i++) {
    gr_var *a = gr_resource_mgr_get_var(gr_session_resources(s), names[i]);
    gr_var *b = gr_resource_mgr_get_var(gr_session_resources(ref), names[i]);
    GR_CHECK(a && b && gt_bit_equal(gr_var_value(a), gr_var_value(b)));
  }
  if (sharded) { /* the shard of step 6 was committed: only the manifest makes it a checkpoint */
    gr_ckpt *shard;
    GR_CHECK_OK(gr_ckpt_open(gt_path_in(path, "local.ckpt"), &(gr_ckpt_options){.read_only = true},
                             &shard, &err),
                err);
    int64_t in_shard = -1;
    if (shard) GR_CHECK_OK(gr_ckpt_latest_step(shard, &in_shard, &err), err);
    GR_CHECK_EQ_INT(in_shard, 6);
    gr_ckpt_close(shard);
  }
  /* and the next save of a new run goes on from there */
  run_train(s, &m, 2);
  GR_CHECK_OK(gr_ckpt_save_session(ck, s, m.g, NULL, &err), err);
  GR_CHECK_OK(gr_ckpt_latest_step(ck, &latest, &err), err);
  GR_CHECK_EQ_INT(latest, 5);
  gr_session_free(s);
  gr_session_free(ref);
  gr_ckpt_close(ck);
  gr_graph_free(m.g);
}

static void test_kill_during_write_file(void) {
  kill_during_write(false);
}

static void test_kill_during_write_sharded(void) {
  kill_during_write(true);
}

/* ---- a failed write ---------------------------------------------------------------- */

/* A real write error: the file size limit (RLIMIT_FSIZE, SIGXFSZ ignored:
 * the write fails with EFBIG) set just above the file's size. */
static void limit_file_size(const char *path, struct rlimit *old) {
  struct stat st;
  GR_CHECK(stat(path, &st) == 0);
  getrlimit(RLIMIT_FSIZE, old);
  struct rlimit r = *old;
  r.rlim_cur = (rlim_t)st.st_size + 4096;
  GR_CHECK(setrlimit(RLIMIT_FSIZE, &r) == 0);
}

static void test_write_error_named(void) {
  fixture f;
  gr_error err;
  if (!setup(&f, "full.ckpt", false)) {
    teardown(&f);
    return;
  }
  const char *path = f.path;
  signal(SIGXFSZ, SIG_IGN);
  run_train(f.s, &f.m, 1);
  GR_CHECK_OK(gr_ckpt_save_session_async(f.w, f.s, f.m.g, NULL, &err), err);
  GR_CHECK_OK(gr_ckpt_async_wait(f.w, &err), err);
  struct rlimit old;
  /* reported by the wait: once, naming the step and the file */
  limit_file_size(path, &old);
  run_train(f.s, &f.m, 1);
  /* the snapshot is fine: the write fails */
  GR_CHECK_OK(gr_ckpt_save_session_async(f.w, f.s, f.m.g, NULL, &err), err);
  gr_status st = gr_ckpt_async_wait(f.w, &err);
  setrlimit(RLIMIT_FSIZE, &old);
  GR_CHECK(st != GR_OK);
  GR_CHECK_STR_CONTAINS(err.msg, "step 2");
  GR_CHECK_STR_CONTAINS(err.msg, path);
  if (getenv("GR_TEST_VERBOSE")) printf("  %s\n", err.msg);
  GR_CHECK_OK(gr_ckpt_async_wait(f.w, &err), err); /* reported once */
  /* reported by the next save, which saves nothing */
  limit_file_size(path, &old);
  run_train(f.s, &f.m, 1);
  GR_CHECK_OK(gr_ckpt_save_session_async(f.w, f.s, f.m.g, NULL, &err), err);
  set_hook(1); /* the write is still in flight when the next save comes */
  run_train(f.s, &f.m, 1);
  st = gr_ckpt_save_session_async(f.w, f.s, f.m.g, NULL, &err);
  set_hook(0);
  setrlimit(RLIMIT_FSIZE, &old);
  GR_CHECK(st != GR_OK);
  GR_CHECK_STR_CONTAINS(err.msg, "step 3");
  GR_CHECK_STR_CONTAINS(err.msg, path);
  int64_t latest = -1;
  GR_CHECK_OK(gr_ckpt_latest_step(f.ck, &latest, &err), err);
  GR_CHECK_EQ_INT(latest, 1); /* neither step 2 nor 3, nor 4 (not taken) */
  /* then saves go on */
  GR_CHECK_OK(gr_ckpt_save_session_async(f.w, f.s, f.m.g, NULL, &err), err);
  GR_CHECK_OK(gr_ckpt_async_wait(f.w, &err), err);
  GR_CHECK_OK(gr_ckpt_latest_step(f.ck, &latest, &err), err);
  GR_CHECK_EQ_INT(latest, 4);
  signal(SIGXFSZ, SIG_DFL);
  teardown(&f);
}

/* ---- the end waits; one write at a time ------------------------------------------- */

static void test_end_waits_for_the_write(void) {
  fixture f;
  gr_error err;
  if (!setup(&f, "end.ckpt", false)) {
    teardown(&f);
    return;
  }
  set_hook(1);
  run_train(f.s, &f.m, 1);
  GR_CHECK_OK(gr_ckpt_save_session_async(f.w, f.s, f.m.g, NULL, &err), err);
  run_train(f.s, &f.m, 1);
  /* the second save waits for the first write (its commit begun and ended) */
  GR_CHECK_OK(gr_ckpt_save_session_async(f.w, f.s, f.m.g, NULL, &err), err);
  GR_CHECK(atomic_load(&commits_begun) >= 1);
  GR_CHECK_OK(gr_ckpt_async_free(f.w, &err), err); /* returns once step 2 is committed */
  f.w = NULL;
  GR_CHECK_EQ_INT(atomic_load(&commits_begun), 2);
  GR_CHECK_EQ_INT(atomic_load(&commits_inside), 0);
  GR_CHECK(atomic_load(&most_inside) == 1);
  set_hook(0);
  gr_ckpt *ro;
  GR_CHECK_OK(gr_ckpt_open(f.path, &(gr_ckpt_options){.read_only = true}, &ro, &err), err);
  int64_t latest = -1;
  if (ro) GR_CHECK_OK(gr_ckpt_latest_step(ro, &latest, &err), err);
  GR_CHECK_EQ_INT(latest, 2);
  gr_ckpt_close(ro);
  teardown(&f);
}

/* ---- graphrun run --save-async ---------------------------------------------------- */

static const char *cli_model = "x = random_uniform([64, 32], minval=-1, maxval=1, seed=7)\n"
                               "h = dense(x, 256, activation=\"relu\")\n"
                               "loss = reduce_mean(square(dense(h, 1) - 1))\n"
                               "train = minimize(loss, adam(0.01))\n"
                               "fetch loss\n"
                               "target train\n";

static void test_cli_save_async(void) {
  char out[8192];
  gt_write_file(dir, "t.gr", cli_model);
  GR_CHECK(gt_cli_expect(dir, "run t.gr --steps 9 --ckpt s.ckpt --save-every 2 --keep 0 --quiet", 0,
                         NULL, out, sizeof out));
  GR_CHECK(gt_cli_expect(dir,
                         "run t.gr --steps 9 --ckpt a.ckpt --save-every 2 --keep 0 --save-async", 0,
                         "saving (in the background) a checkpoint after step 2", out, sizeof out));
  gr_ckpt *a = NULL, *b = NULL;
  gr_error err;
  gr_ckpt_options ro = {.read_only = true};
  GR_CHECK_OK(gr_ckpt_open(gt_path_in(dir, "s.ckpt"), &ro, &a, &err), err);
  GR_CHECK_OK(gr_ckpt_open(gt_path_in(dir, "a.ckpt"), &ro, &b, &err), err);
  if (a && b) same_checkpoints(a, b); /* steps 2, 4, 6, 8 and 9 */
  int64_t latest = -1;
  if (b) GR_CHECK_OK(gr_ckpt_latest_step(b, &latest, &err), err);
  GR_CHECK_EQ_INT(latest, 9);
  gr_ckpt_close(a);
  gr_ckpt_close(b);
  /* resuming from it, asynchronously too */
  GR_CHECK(gt_cli_expect(dir,
                         "run t.gr --steps 12 --ckpt a.ckpt --save-every 2 --quiet --save-async", 0,
                         "restored", out, sizeof out));
  GR_CHECK(gt_cli_expect(dir, "run t.gr --steps 2 --save-async", 2,
                         "--save-every, --save-async and --no-restore need --ckpt PATH", out,
                         sizeof out));
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "--child") == 0)
    return child_main(argv[2], strcmp(argv[3], "1") == 0, atoi(argv[4]));
  ssize_t len = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
  if (len <= 0) return 1;
  self_exe[len] = '\0';
  snprintf(dir, sizeof dir, "/tmp/gr_test_ckpt_async_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  GR_RUN(test_async_equals_sync_file);
  GR_RUN(test_async_equals_sync_sharded);
  GR_RUN(test_kill_during_write_file);
  GR_RUN(test_kill_during_write_sharded);
  GR_RUN(test_write_error_named);
  GR_RUN(test_end_waits_for_the_write);
  GR_RUN(test_cli_save_async);
  gt_remove_tree(dir);
  return gr_test_finish();
}

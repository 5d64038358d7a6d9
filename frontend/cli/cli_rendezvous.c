/* The rendezvous: a private directory that the servers of a launch and
 * their clients share (on Slurm, in the job's submit directory, which every
 * node sees). Each server writes where it listens into JOB-INDEX.task
 * (written aside, then renamed: a reader sees a whole entry or none); a
 * client waits until every task of the newest launch has written one; the
 * first process that needs the cluster's secret or id and has none makes
 * them there (written aside, then linked: one of several racing wins, the
 * others read it). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli_resolve.h"
#include "cli_util.h"

#define RDV_MAGIC "graphrun-rendezvous 1"

static const char *rendezvous_flag, *in_use;
static char in_use_buf[4096];

void cli_set_rendezvous(const char *dir) {
  rendezvous_flag = dir;
}

static double wait_s = 120;

void cli_set_rendezvous_wait(double seconds) {
  wait_s = seconds > 0 ? seconds : 120;
}

double cli_rendezvous_wait_s(void) {
  return wait_s;
}

void cli_rendezvous_use(const char *dir) {
  snprintf(in_use_buf, sizeof in_use_buf, "%s", dir);
  in_use = in_use_buf;
}

const char *cli_rendezvous_in_use(void) {
  return in_use;
}

bool cli_random_hex(char *hex, size_t n) {
  unsigned char raw[64];
  int ur = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  bool ok = n <= sizeof raw && ur >= 0 && read(ur, raw, n) == (ssize_t)n;
  if (ur >= 0) close(ur);
  for (size_t i = 0; ok && i < n; i++) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
  return ok;
}

/* mkdir -p path, each made 0700. */
static gr_status make_dirs(const char *path, gr_error *err) {
  char p[4096];
  snprintf(p, sizeof p, "%s", path);
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s) continue;
    char was = *s;
    *s = '\0';
    if (mkdir(p, 0700) != 0 && errno != EEXIST)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "rendezvous %s: cannot make %s: %s", path,
                          p, strerror(errno));
    if (!was) return GR_OK;
    *s = was;
  }
}

gr_status cli_rendezvous_dir(const cli_launcher *l, char *dir, size_t cap, gr_error *err) {
  const char *d = rendezvous_flag ? rendezvous_flag : getenv("GRAPHRUN_RENDEZVOUS");
  const char *job = getenv("SLURM_JOB_ID"), *submit = getenv("SLURM_SUBMIT_DIR");
  if (d && *d) {
    snprintf(dir, cap, "%s", d);
  } else if (l->kind == CLI_SLURM && job && *job) {
    char cwd[2048];
    if (!submit || !*submit) submit = getcwd(cwd, sizeof cwd) ? cwd : ".";
    snprintf(dir, cap, "%s/.graphrun/slurm-%s", submit, job);
  } else if (l->kind == CLI_SLURM) {
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "slurm: SLURM_JOB_ID is not set (not inside a Slurm job?)");
  } else {
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "mpi: where do the servers and the clients meet? give --rendezvous DIR "
                        "(or GRAPHRUN_RENDEZVOUS): a fresh directory every host sees, such as one "
                        "made by mktemp -d in your home, the same for the servers and the client");
  }
  GR_TRY(make_dirs(dir, err));
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "rendezvous %s: not a directory", dir);
  if (sb.st_uid != getuid() || (sb.st_mode & 022))
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "rendezvous %s has mode %04o%s: other users could change the addresses "
                        "and read the secret in it; run chmod 700 %s",
                        dir, (unsigned)(sb.st_mode & 07777),
                        sb.st_uid != getuid() ? " and another owner" : "", dir);
  return GR_OK;
}

/* ---- entries -------------------------------------------------------------------- */

static void entry_path(const char *dir, const char *job, int index, char *path, size_t cap) {
  snprintf(path, cap, "%s/%s-%d.task", dir, job, index);
}

gr_status cli_rendezvous_publish(const char *dir, const cli_rdv_entry *e, gr_error *err) {
  char path[4200], tmp[4300];
  entry_path(dir, e->job, e->index, path, sizeof path);
  snprintf(tmp, sizeof tmp, "%s/.%s-%d.task.%ld", dir, e->job, e->index, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f)
    return gr_error_set(err, GR_ERR_UNAVAILABLE, "rendezvous: cannot write %s: %s", tmp,
                        strerror(errno));
  fprintf(f,
          RDV_MAGIC "\njob %s\nindex %d\nrank %d\nntasks %d\ndevices %d\naddress %s\n"
                    "launch %s\npid %ld\nhost %s\n",
          e->job, e->index, e->rank, e->ntasks, e->devices, e->address, e->launch, e->pid, e->host);
  bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    int e2 = errno;
    unlink(tmp);
    return gr_error_set(err, GR_ERR_UNAVAILABLE, "rendezvous: cannot write %s: %s", path,
                        strerror(e2));
  }
  return GR_OK;
}

/* The fields of an entry: "key value" lines after the first. */
typedef struct field {
  const char *key;
  size_t offset, size; /* size 0: an int */
} field;

static const field fields[] = {
    {"job", offsetof(cli_rdv_entry, job), sizeof((cli_rdv_entry *)0)->job},
    {"address", offsetof(cli_rdv_entry, address), sizeof((cli_rdv_entry *)0)->address},
    {"launch", offsetof(cli_rdv_entry, launch), sizeof((cli_rdv_entry *)0)->launch},
    {"host", offsetof(cli_rdv_entry, host), sizeof((cli_rdv_entry *)0)->host},
    {"index", offsetof(cli_rdv_entry, index), 0},
    {"rank", offsetof(cli_rdv_entry, rank), 0},
    {"ntasks", offsetof(cli_rdv_entry, ntasks), 0},
    {"devices", offsetof(cli_rdv_entry, devices), 0},
};
#define NUM_FIELDS ((int)(sizeof fields / sizeof *fields))

/* Reads one entry; false (with why) when it is not a whole, valid one. */
static bool read_entry(const char *path, cli_rdv_entry *e, char *why, size_t cap) {
  FILE *f = fopen(path, "r");
  if (!f) return snprintf(why, cap, "%s", strerror(errno)), false;
  memset(e, 0, sizeof *e);
  char line[512];
  int seen = 0;
  bool ok = fgets(line, sizeof line, f) && !strncmp(line, RDV_MAGIC, strlen(RDV_MAGIC));
  if (!ok) snprintf(why, cap, "line 1: not a graphrun rendezvous entry");
  while (ok && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    char *v = strchr(line, ' ');
    if (!v) continue;
    *v++ = '\0';
    if (!strcmp(line, "pid")) e->pid = atol(v);
    for (int k = 0; k < NUM_FIELDS; k++) {
      if (strcmp(line, fields[k].key) != 0) continue;
      char *to = (char *)e + fields[k].offset;
      if (fields[k].size)
        snprintf(to, fields[k].size, "%s", v);
      else
        *(int *)to = atoi(v);
      seen |= 1 << k;
    }
  }
  fclose(f);
  if (ok && (seen != (1 << NUM_FIELDS) - 1 || e->rank < 0 || e->ntasks < 1 ||
             e->rank >= e->ntasks || e->index < 0 || !e->address[0] || e->devices < 1))
    ok = false,
    snprintf(why, cap, "an incomplete entry (job, index, rank < ntasks, devices, address)");
  return ok;
}

bool cli_rendezvous_lookup(const char *dir, const char *job, int index, const char *launch,
                           cli_rdv_entry *out) {
  char path[4200], why[128];
  entry_path(dir, job, index, path, sizeof path);
  return read_entry(path, out, why, sizeof why) && (!launch || !strcmp(out->launch, launch));
}

void cli_rendezvous_withdraw(const char *dir, const cli_rdv_entry *e) {
  cli_rdv_entry now;
  char path[4200];
  if (!cli_rendezvous_lookup(dir, e->job, e->index, e->launch, &now) || now.pid != e->pid) return;
  entry_path(dir, e->job, e->index, path, sizeof path);
  unlink(path);
}

/* ---- reading the cluster ----------------------------------------------------------- */

typedef struct scan {
  cli_rdv_entry *e; /* the newest launch's entries, by rank (rank < ntasks) */
  bool *have;
  int ntasks;
  char launch[64];
  double newest;
  char bad[400]; /* an entry that could not be read, and why ("": none) */
} scan;

/* Reads dir's entries into s: those of the launch of the newest entry. */
static gr_status scan_dir(const char *dir, scan *s, gr_error *err) {
  DIR *d = opendir(dir);
  if (!d) return gr_error_set(err, GR_ERR_UNAVAILABLE, "rendezvous %s: %s", dir, strerror(errno));
  cli_rdv_entry *all = NULL;
  int n = 0, cap = 0;
  struct dirent *de;
  gr_status st = GR_OK;
  while (st == GR_OK && (de = readdir(d))) {
    size_t len = strlen(de->d_name);
    if (de->d_name[0] == '.' || len < 6 || strcmp(de->d_name + len - 5, ".task")) continue;
    char path[4400], why[128];
    struct stat sb;
    cli_rdv_entry e;
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    if (stat(path, &sb) != 0) continue;
    if (!read_entry(path, &e, why, sizeof why)) {
      snprintf(s->bad, sizeof s->bad, "; %s: %s (not read)", de->d_name, why);
      continue;
    }
    double t = (double)sb.st_mtim.tv_sec + sb.st_mtim.tv_nsec * 1e-9;
    if (t >= s->newest) {
      s->newest = t;
      s->ntasks = e.ntasks;
      snprintf(s->launch, sizeof s->launch, "%s", e.launch);
    }
    if (n == cap) {
      cli_rdv_entry *more = realloc(all, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *all);
      if (!more) {
        st = gr_error_set_oom(err);
        break;
      }
      all = more;
    }
    all[n++] = e;
  }
  closedir(d);
  if (st == GR_OK && s->ntasks > 0 &&
      (!(s->e = calloc((size_t)s->ntasks, sizeof *s->e)) ||
       !(s->have = calloc((size_t)s->ntasks, sizeof *s->have))))
    st = gr_error_set_oom(err);
  for (int i = 0; st == GR_OK && i < n; i++)
    if (!strcmp(all[i].launch, s->launch) && all[i].ntasks == s->ntasks) {
      s->e[all[i].rank] = all[i];
      s->have[all[i].rank] = true;
    }
  free(all);
  return st;
}

/* The cluster of a complete scan, in rank order. */
static gr_status build(const char *dir, const scan *s, gr_cluster **out, gr_error *err) {
  gr_cluster *c = gr_cluster_new();
  if (!c) return gr_error_set_oom(err);
  gr_status st = GR_OK;
  for (int r = 0; r < s->ntasks && st == GR_OK; r++) {
    const cli_rdv_entry *e = &s->e[r];
    int t;
    st = gr_cluster_add_task_at(c, e->job, e->address, e->devices, &t, err);
    if (st == GR_OK && gr_cluster_task_at(c, t)->index != e->index)
      st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "rendezvous %s: rank %d is /job:%s/task:%d, but the ranks before it make "
                        "it task %d of its job",
                        dir, r, e->job, e->index, gr_cluster_task_at(c, t)->index);
    if (st != GR_OK) gr_error_prefix(err, "rendezvous %s/%s-%d.task", dir, e->job, e->index);
  }
  if (st != GR_OK) {
    gr_cluster_free(c);
    return st;
  }
  *out = c;
  return GR_OK;
}

gr_status cli_rendezvous_wait(const char *dir, double seconds, gr_cluster **out, gr_error *err) {
  *out = NULL;
  double start = cli_now(), deadline = start + seconds;
  bool told = false;
  for (;;) {
    scan s = {0};
    gr_status st = scan_dir(dir, &s, err);
    int have = 0;
    for (int r = 0; st == GR_OK && r < s.ntasks; r++) have += s.have[r];
    if (st == GR_OK && s.ntasks > 0 && have == s.ntasks) st = build(dir, &s, out, err);
    if (st != GR_OK || *out || cli_now() >= deadline) {
      if (st == GR_OK && !*out) {
        char missing[256] = "";
        size_t m = 0;
        for (int r = 0; r < s.ntasks && m < sizeof missing - 16; r++)
          if (!s.have[r]) m += (size_t)snprintf(missing + m, sizeof missing - m, " %d", r);
        if (s.ntasks)
          st = gr_error_set(err, GR_ERR_DEADLINE_EXCEEDED,
                            "rendezvous %s: after %.3g s, %d of the %d tasks of %s have not said "
                            "where they listen (ranks%s): did they start?%s",
                            dir, seconds, s.ntasks - have, s.ntasks, s.launch, missing, s.bad);
        else
          st = gr_error_set(err, GR_ERR_DEADLINE_EXCEEDED,
                            "rendezvous %s: after %.3g s no task has said where it listens: are "
                            "the servers running, with the same rendezvous?%s",
                            dir, seconds, s.bad);
      }
      free(s.e), free(s.have);
      return st;
    }
    free(s.e), free(s.have);
    if (!told && cli_now() - start > 3) {
      fprintf(stderr, "graphrun: waiting for the tasks to say where they listen (rendezvous %s)\n",
              dir);
      told = true;
    }
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);
  }
}

/* ---- the secret and the id --------------------------------------------------------- */

/* DIR/name holding `content` unless it exists: made aside, then linked. */
static gr_status make_once(const char *dir, const char *name, const char *content, gr_error *err) {
  char path[4200], tmp[4300];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (access(path, F_OK) == 0) return GR_OK;
  snprintf(tmp, sizeof tmp, "%s/.%s.%ld", dir, name, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  size_t n = strlen(content);
  bool ok = fd >= 0 && write(fd, content, n) == (ssize_t)n && fsync(fd) == 0;
  if (fd >= 0) close(fd);
  int e = errno;
  if (ok && link(tmp, path) != 0 && errno != EEXIST) ok = false, e = errno;
  unlink(tmp);
  if (!ok)
    return gr_error_set(err, GR_ERR_UNAVAILABLE, "rendezvous: cannot write %s: %s", path,
                        strerror(e));
  return GR_OK;
}

gr_status cli_rendezvous_secret_file(const char *dir, char *path, size_t cap, gr_error *err) {
  char hex[72];
  if (!cli_random_hex(hex, 32))
    return gr_error_set(err, GR_ERR_UNAVAILABLE, "no random bytes for a secret");
  hex[64] = '\n', hex[65] = '\0';
  GR_TRY(make_once(dir, "secret", hex, err));
  snprintf(path, cap, "%s/secret", dir);
  return GR_OK;
}

gr_status cli_rendezvous_cluster_id(const char *dir, char *id, size_t cap, gr_error *err) {
  char hex[40], text[64], path[4200];
  if (!cli_random_hex(hex, 8))
    return gr_error_set(err, GR_ERR_UNAVAILABLE, "no random bytes for a cluster id");
  snprintf(text, sizeof text, "rdv-%s\n", hex);
  GR_TRY(make_once(dir, "cluster-id", text, err));
  snprintf(path, sizeof path, "%s/cluster-id", dir);
  FILE *f = fopen(path, "r");
  bool ok = f && fgets(id, (int)cap, f);
  if (f) fclose(f);
  if (!ok)
    return gr_error_set(err, GR_ERR_UNAVAILABLE, "rendezvous: cannot read %s: %s", path,
                        strerror(errno));
  id[strcspn(id, "\n")] = '\0';
  return GR_OK;
}

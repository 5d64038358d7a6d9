/* Listing a folder of class sub-folders (image_internal.h) and choosing the
 * files of a validation split and a shard. The order is Keras' (sorted
 * class names; in each class, files sorted by folder path then name, byte
 * order), so labels and splits do not depend on the file system's order. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ops/gr_ops.h"
#include "ops/image_internal.h"
#include "ops/ops_internal.h"

#define MAX_DEPTH 64
#define MAX_FILES ((int64_t)1 << 26)

/* ---- growable arrays ----------------------------------------------------------------- */

typedef struct strbuf {
  char *s;
  size_t len, cap;
} strbuf;

/* Appends s[0..n) and a NUL; the offset of the copy, -1 when out of memory. */
static int64_t sb_add(strbuf *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->s, cap);
    if (!p) return -1;
    b->s = p, b->cap = cap;
  }
  int64_t at = (int64_t)b->len;
  memcpy(b->s + b->len, s, n);
  b->s[b->len + n] = '\0';
  b->len += n + 1;
  return at;
}

typedef struct entry {
  int64_t dir, name; /* offsets into the walk's text: relative folder, file name */
} entry;

typedef struct walk {
  const char *root;
  strbuf text;
  entry *files;
  int64_t n, cap, ignored;
  gr_error *err;
} walk;

static bool has_image_ext(const char *name) {
  static const char *const exts[] = {".png", ".jpg", ".jpeg"};
  size_t n = strlen(name);
  for (int i = 0; i < 3; i++) {
    size_t e = strlen(exts[i]);
    if (n > e && strcasecmp(name + n - e, exts[i]) == 0) return true;
  }
  return false;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The entries of folder path (not . and ..), sorted, in a malloc'd array
 * of malloc'd strings. */
static gr_status read_sorted(const char *path, char ***out, int *n, gr_error *err) {
  DIR *d = opendir(path);
  if (!d)
    return gr_error_set(err, GR_ERR_NOT_FOUND, "%s: cannot read the folder: %s", path,
                        strerror(errno));
  char **names = NULL;
  int count = 0, cap = 0;
  gr_status st = GR_OK;
  for (struct dirent *e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (count == cap) {
      int ncap = cap ? cap * 2 : 64;
      char **p = gr_realloc_array(names, (size_t)ncap, sizeof *p);
      if (!p) {
        st = gr_error_set_oom(err);
        break;
      }
      names = p, cap = ncap;
    }
    if (!(names[count] = strdup(e->d_name))) {
      st = gr_error_set_oom(err);
      break;
    }
    count++;
  }
  closedir(d);
  if (st != GR_OK) {
    for (int i = 0; i < count; i++) free(names[i]);
    free(names);
    return st;
  }
  if (count) qsort(names, (size_t)count, sizeof *names, cmp_str);
  *out = names, *n = count;
  return GR_OK;
}

static void free_names(char **names, int n) {
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}

/* What path is: 'd' a folder (not through a link when !follow), 'f' a
 * regular file (links followed), 0 anything else. */
static char kind_of(const char *path, bool follow) {
  struct stat st;
  if (lstat(path, &st) != 0) return 0;
  if (S_ISLNK(st.st_mode)) {
    if (stat(path, &st) != 0) return 0;
    if (S_ISDIR(st.st_mode)) return follow ? 'd' : 0;
  }
  return S_ISDIR(st.st_mode) ? 'd' : S_ISREG(st.st_mode) ? 'f' : 0;
}

static gr_status add_file(walk *w, int64_t dir, const char *name) {
  if (w->n == MAX_FILES)
    return gr_error_set(w->err, GR_ERR_RESOURCE_EXHAUSTED, "%s: more than %lld image files",
                        w->root, (long long)MAX_FILES);
  if (w->n == w->cap) {
    int64_t cap = w->cap ? w->cap * 2 : 1024;
    entry *p = gr_realloc_array(w->files, (size_t)cap, sizeof *p);
    if (!p) return gr_error_set_oom(w->err);
    w->files = p, w->cap = cap;
  }
  int64_t at = sb_add(&w->text, name, strlen(name));
  if (at < 0) return gr_error_set_oom(w->err);
  w->files[w->n++] = (entry){dir, at};
  return GR_OK;
}

/* Walks root/rel: its image files, then its sub-folders' (not through links). */
static gr_status walk_dir(walk *w, const char *rel, int depth) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s", w->root, rel) >= (int)sizeof path)
    return gr_error_set(w->err, GR_ERR_INVALID_ARGUMENT, "%s/%s: path too long", w->root, rel);
  if (depth > MAX_DEPTH)
    return gr_error_set(w->err, GR_ERR_INVALID_ARGUMENT, "%s: folders nested more than %d deep",
                        path, MAX_DEPTH);
  char **names;
  int n;
  GR_TRY(read_sorted(path, &names, &n, w->err));
  int64_t dir = sb_add(&w->text, rel, strlen(rel));
  gr_status st = dir < 0 ? gr_error_set_oom(w->err) : GR_OK;
  char sub[4096];
  for (int i = 0; i < n && st == GR_OK; i++) {
    if (snprintf(sub, sizeof sub, "%s/%s", path, names[i]) >= (int)sizeof sub) continue;
    char k = kind_of(sub, false);
    if (k == 'f' && has_image_ext(names[i]))
      st = add_file(w, dir, names[i]);
    else if (k == 'f')
      w->ignored++;
  }
  for (int i = 0; i < n && st == GR_OK; i++) {
    if (snprintf(sub, sizeof sub, "%s/%s", path, names[i]) >= (int)sizeof sub) continue;
    if (kind_of(sub, false) != 'd') continue;
    char subrel[4096];
    if (snprintf(subrel, sizeof subrel, "%s/%s", rel, names[i]) >= (int)sizeof subrel) continue;
    st = walk_dir(w, subrel, depth + 1);
  }
  free_names(names, n);
  return st;
}

/* Keras sorts the walk by folder path, then names: a folder's files come
 * before those of its sub-folders only when the paths sort so ("a/b" <
 * "a/b/c" but "a/b-x" < "a/b/c"). */
static int cmp_entry(const void *pa, const void *pb, void *text) {
  const entry *a = pa, *b = pb;
  const char *t = text;
  int c = strcmp(t + a->dir, t + b->dir);
  return c ? c : strcmp(t + a->name, t + b->name);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
  return h;
}

void gr_image_list_free(gr_image_list *l) {
  free(l->class_names);
  free(l->path_at);
  free(l->labels);
  free(l->text);
  free(l->names);
  memset(l, 0, sizeof *l);
}

/* The files of class sub-folder `cls` (label k), sorted as Keras, appended
 * to the listing's paths. */
static gr_status list_class(const char *dir, const char *cls, int k, strbuf *paths,
                            int64_t **path_at, int32_t **labels, int64_t *n, int64_t *cap,
                            int64_t *ignored, gr_error *err) {
  walk w = {.root = dir, .err = err};
  gr_status st = walk_dir(&w, cls, 0);
  if (st == GR_OK && w.n) qsort_r(w.files, (size_t)w.n, sizeof *w.files, cmp_entry, w.text.s);
  *ignored += w.ignored;
  for (int64_t i = 0; i < w.n && st == GR_OK; i++) {
    if (*n == *cap) {
      int64_t nc = *cap ? *cap * 2 : 1024;
      int64_t *pa = gr_realloc_array(*path_at, (size_t)nc, sizeof *pa);
      if (pa) *path_at = pa;
      int32_t *lb = pa ? gr_realloc_array(*labels, (size_t)nc, sizeof *lb) : NULL;
      if (lb) *labels = lb;
      if (!pa || !lb) {
        st = gr_error_set_oom(err);
        break;
      }
      *cap = nc;
    }
    const char *d = w.text.s + w.files[i].dir, *f = w.text.s + w.files[i].name;
    size_t ld = strlen(d), lf = strlen(f);
    int64_t at = sb_add(paths, d, ld);
    if (at < 0) {
      st = gr_error_set_oom(err);
      break;
    }
    paths->s[paths->len - 1] = '/'; /* "dir" + "/" + "name" */
    if (sb_add(paths, f, lf) < 0) {
      st = gr_error_set_oom(err);
      break;
    }
    (*path_at)[*n] = at;
    (*labels)[*n] = k;
    (*n)++;
  }
  free(w.text.s);
  free(w.files);
  return st;
}

gr_status gr_image_list_dir(const char *dir, gr_image_list *out, gr_error *err) {
  memset(out, 0, sizeof *out);
  if (kind_of(dir, true) != 'd')
    return gr_error_set(err, GR_ERR_NOT_FOUND, "%s: %s", dir,
                        access(dir, F_OK) == 0 ? "not a folder" : "no such folder");
  char **names;
  int n;
  GR_TRY(read_sorted(dir, &names, &n, err));
  strbuf cls = {0}, paths = {0};
  gr_status st = GR_OK;
  int64_t cap = 0;
  char sub[4096];
  for (int i = 0; i < n && st == GR_OK; i++) {
    if (names[i][0] == '.') continue;
    if (snprintf(sub, sizeof sub, "%s/%s", dir, names[i]) >= (int)sizeof sub ||
        kind_of(sub, true) != 'd')
      continue;
    if (strchr(names[i], '\n')) {
      st = gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "%s: a class folder's name holds a line break", sub);
      break;
    }
    if (sb_add(&cls, names[i], strlen(names[i])) < 0) {
      st = gr_error_set_oom(err);
      break;
    }
    cls.s[cls.len - 1] = '\n';
    st = list_class(dir, names[i], out->num_classes, &paths, &out->path_at, &out->labels,
                    &out->num_files, &cap, &out->ignored, err);
    out->num_classes++;
  }
  free_names(names, n);
  out->text = paths.s;
  out->names = cls.s;
  if (st == GR_OK && out->num_classes == 0)
    st = gr_error_set(err, GR_ERR_NOT_FOUND,
                      "%s: no class sub-folders (each class is a sub-folder of images)", dir);
  if (st == GR_OK && out->num_files == 0)
    st = gr_error_set(err, GR_ERR_NOT_FOUND,
                      "%s: no images in its %d class sub-folders (files ending in .png, .jpg or "
                      ".jpeg)",
                      dir, out->num_classes);
  size_t len = cls.len;
  if (st == GR_OK) {
    cls.s[len - 1] = '\0'; /* no line break after the last name */
    /* the pointers, then a copy of the names whose line breaks become NULs */
    size_t ptrs = (size_t)out->num_classes * sizeof(char *);
    if (!(out->class_names = malloc(ptrs + len))) st = gr_error_set_oom(err);
  }
  if (st != GR_OK) {
    gr_image_list_free(out);
    return st;
  }
  char *p = (char *)out->class_names + (size_t)out->num_classes * sizeof(char *);
  memcpy(p, out->names, len);
  uint64_t h = fnv(1469598103934665603ull, out->names, len);
  for (int k = 0; k < out->num_classes; k++) {
    out->class_names[k] = p;
    p += strcspn(p, "\n");
    if (*p) *p++ = '\0';
  }
  for (int64_t i = 0; i < out->num_files; i++) {
    const char *f = gr_image_list_path(out, i);
    h = fnv(h, f, strlen(f) + 1);
    h = fnv(h, &out->labels[i], sizeof out->labels[i]);
  }
  out->fingerprint = h;
  return GR_OK;
}

/* ---- the subset of one node -------------------------------------------------------------- */

/* The split: [lo, hi) of the ordered files. */
static void split_range(int64_t n, const gr_image_subset_spec *s, int64_t *lo, int64_t *hi) {
  int64_t val = s->subset ? (int64_t)(s->validation_split * (double)n) : 0;
  *lo = s->subset == 2 ? n - val : 0;
  *hi = s->subset == 1 ? n - val : n;
}

int64_t gr_image_subset_count(int64_t n, const gr_image_subset_spec *s) {
  int64_t lo, hi;
  split_range(n, s, &lo, &hi);
  int64_t m = hi - lo;
  return m > s->shard_index ? (m - s->shard_index + s->num_shards - 1) / s->num_shards : 0;
}

#define SPLIT_STREAM 0x73706c6974ull /* "split" */

gr_status gr_image_subset_files(int64_t n, const gr_image_subset_spec *s, int64_t **out,
                                gr_error *err) {
  int64_t *order = gr_alloc_array((size_t)(n ? n : 1), sizeof *order);
  int64_t count = gr_image_subset_count(n, s);
  int64_t *files = gr_alloc_array((size_t)(count ? count : 1), sizeof *files);
  if (!order || !files) {
    free(order);
    free(files);
    return gr_error_set_oom(err);
  }
  if (s->shuffle)
    gr_ops_permute(order, n, s->seed, SPLIT_STREAM, 0);
  else
    for (int64_t i = 0; i < n; i++) order[i] = i;
  int64_t lo, hi;
  split_range(n, s, &lo, &hi);
  for (int64_t k = 0; k < count; k++) files[k] = order[lo + s->shard_index + k * s->num_shards];
  free(order);
  *out = files;
  return GR_OK;
}

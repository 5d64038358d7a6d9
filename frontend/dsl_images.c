/* DSL built-ins for folders of images (ops/gr_images.h):
 *
 *   images, labels = image_folder("data/train", size=[180, 180], batch=32,
 *                                 validation_split=0.2, subset="training", seed=123)
 *   ti, tl, vi, vl = image_folder("data", ..., subset="both", validation_step=t)
 *   names = class_names(images)      # ["cat", "dog"]: a compile-time list of strings
 *   k = num_classes(images)          # 2
 *   n = num_images(images)           # files per epoch of its subset (and shard)
 *   m = num_batches(images)          # batches per epoch: n / batch, the rest dropped
 *   s = skipped_images(images)       # i64: unreadable files skipped so far
 *
 * The folder is relative to the .gr file it is written in, as every path
 * of the language. `step` (default global_step()) is the batch number. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl_internal.h"

static gr_status bad_arg(const dsl_bargs *a, int i, const char *what) {
  return dsl_error(a->p->err, GR_ERR_INVALID_ARGUMENT, a->e->call.args[i].pos, "%s: %s", a->fn,
                   what);
}

/* Keyword `kw` or its Keras spelling `alias`: the index of the one given. */
static int kw2(const dsl_bargs *a, const char *kw, const char *alias) {
  int i = dsl_bargs_kw(a, kw);
  return i >= 0 ? i : dsl_bargs_kw(a, alias);
}

static gr_status want_step(const dsl_bargs *a, int i, gr_output *out) {
  if (a->v[i].kind == V_TENSOR || a->v[i].has_t || a->v[i].kind == V_NUM)
    return dsl_to_tensor(a->p, &a->v[i], a->e->call.args[i].pos, GR_I64, out);
  return bad_arg(a, i, "the step must be a tensor or an integer (the batch number)");
}

static gr_status folder_options(const dsl_bargs *a, gr_image_folder_options *o, int *subset) {
  int i;
  if ((i = kw2(a, "size", "image_size")) >= 0) {
    const dsl_value *v = &a->v[i];
    if (v->kind != V_LIST || v->list.n != 2 || v->list.items[0].kind != V_NUM ||
        v->list.items[1].kind != V_NUM || !v->list.items[0].num.is_int ||
        !v->list.items[1].num.is_int)
      return bad_arg(a, i, "size must be [height, width]");
    o->height = v->list.items[0].num.i, o->width = v->list.items[1].num.i;
    if (o->height < 1 || o->width < 1 || o->height > 65536 || o->width > 65536)
      return bad_arg(a, i, "each of size's height and width must be from 1 to 65536");
  }
  if ((i = kw2(a, "batch", "batch_size")) >= 0)
    GR_TRY(dsl_bargs_int(a, i, "batch", 1, 1 << 20, &o->batch_size));
  if ((i = dsl_bargs_kw(a, "validation_split")) >= 0) {
    const dsl_value *v = &a->v[i];
    if (v->kind != V_NUM || !(v->num.v >= 0 && v->num.v < 1))
      return bad_arg(a, i, "validation_split must be a number in [0, 1)");
    o->validation_split = v->num.v;
  }
  static const char *const subsets[] = {"training", "validation", "both", NULL};
  GR_TRY(
      dsl_bargs_choice(a, "subset", subsets, "\"training\", \"validation\" or \"both\"", subset));
  if ((*subset >= 0) != (o->validation_split > 0)) {
    int at = *subset >= 0 ? dsl_bargs_kw(a, "subset") : dsl_bargs_kw(a, "validation_split");
    return bad_arg(a, at,
                   *subset >= 0 ? "subset needs a validation_split (as in Keras)"
                                : "a validation_split needs subset=\"training\", \"validation\" "
                                  "or \"both\" (as in Keras)");
  }
  bool has_seed = (i = dsl_bargs_kw(a, "seed")) >= 0;
  if (has_seed) GR_TRY(dsl_bargs_int(a, i, "seed", INT64_MIN, INT64_MAX, &o->seed));
  if ((i = dsl_bargs_kw(a, "shuffle")) >= 0) GR_TRY(dsl_bargs_bool(a, i, "shuffle", &o->shuffle));
  if (o->validation_split > 0 && o->shuffle && !has_seed)
    return dsl_error(a->p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "%s: a validation_split with shuffling needs a seed=..., so that the "
                     "training and validation subsets do not overlap (as in Keras)",
                     a->fn);
  static const char *const colors[] = {"rgb", "grayscale", "rgba", NULL};
  int k = 0;
  GR_TRY(dsl_bargs_choice(a, "color_mode", colors, "\"rgb\", \"grayscale\" or \"rgba\"", &k));
  o->color_mode = colors[k];
  static const char *const label_modes[] = {"int", "categorical", "binary", NULL};
  k = 0;
  GR_TRY(
      dsl_bargs_choice(a, "label_mode", label_modes, "\"int\", \"categorical\" or \"binary\"", &k));
  o->label_mode = label_modes[k];
  static const char *const inferred[] = {"inferred", NULL};
  GR_TRY(dsl_bargs_choice(a, "labels", inferred,
                          "\"inferred\" (from the class sub-folders; the only labels supported)",
                          &k));
  static const char *const flips[] = {"horizontal", "vertical", "horizontal_and_vertical", NULL};
  k = -1;
  GR_TRY(dsl_bargs_choice(a, "random_flip", flips,
                          "\"horizontal\", \"vertical\" or \"horizontal_and_vertical\"", &k));
  o->random_flip = k >= 0 ? flips[k] : NULL;
  if ((i = dsl_bargs_kw(a, "num_shards")) >= 0)
    GR_TRY(dsl_bargs_int(a, i, "num_shards", 1, INT32_MAX, &o->num_shards));
  if ((i = dsl_bargs_kw(a, "shard_index")) >= 0)
    GR_TRY(dsl_bargs_int(a, i, "shard_index", 0, o->num_shards - 1, &o->shard_index));
  if ((i = dsl_bargs_kw(a, "max_pixels")) >= 0)
    GR_TRY(dsl_bargs_int(a, i, "max_pixels", 1, INT64_MAX, &o->max_pixels));
  if ((i = dsl_bargs_kw(a, "threads")) >= 0)
    GR_TRY(dsl_bargs_int(a, i, "threads", 0, 256, &o->threads));
  if ((i = dsl_bargs_kw(a, "prefetch")) >= 0)
    GR_TRY(dsl_bargs_int(a, i, "prefetch", 0, 64, &o->prefetch));
  return GR_OK;
}

static gr_status image_folder(const dsl_bargs *a, dsl_value *out) {
  gr_dsl_program *p = a->p;
  static const char *const allowed[] = {
      "size",        "image_size", "batch",           "batch_size", "validation_split",
      "subset",      "seed",       "shuffle",         "color_mode", "labels",
      "label_mode",  "step",       "validation_step", "num_shards", "shard_index",
      "random_flip", "max_pixels", "threads",         "prefetch",   NULL};
  GR_TRY(dsl_bargs_only_keywords(a, allowed));
  if (a->npos != 1 || a->v[0].kind != V_STR)
    return dsl_error(p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "image_folder takes the folder first: images, labels = "
                     "image_folder(\"data/train\", size=[180, 180], batch=32)");
  gr_image_folder_options o;
  gr_image_folder_options_init(&o);
  int subset = -1;
  GR_TRY(folder_options(a, &o, &subset));
  dsl_set_loc(p, a->e->pos);
  gr_output step, vstep;
  int si = dsl_bargs_kw(a, "step"), vi = dsl_bargs_kw(a, "validation_step");
  if (vi >= 0 && subset != 2) return bad_arg(a, vi, "validation_step goes with subset=\"both\"");
  if (si >= 0)
    GR_TRY(want_step(a, si, &step));
  else
    step = gr_global_step(p->g);
  if (vi >= 0)
    GR_TRY(want_step(a, vi, &vstep));
  else
    vstep = step;
  GR_TRY(dsl_check_graph(p, a->e->pos));
  char *dir =
      a->v[0].str_src ? dsl_path_join(a->v[0].str_src->name, a->v[0].str) : strdup(a->v[0].str);
  if (!dir) return gr_error_set_oom(p->err);
  gr_output t[4];
  int n = 0;
  /* subset -1: none, 0 training, 1 validation, 2 both: a node each */
  static const char *const names[] = {"training", "validation"};
  int first = subset == 2 ? 0 : subset, last = subset == 2 ? 1 : subset;
  for (int s = first; s <= last && !gr_graph_error(p->g); s++) {
    o.subset = s >= 0 ? names[s] : NULL;
    dsl_set_loc(p, a->e->pos);
    gr_output b = gr_image_folder(p->g, s == 1 && subset == 2 ? vstep : step, dir, &o);
    t[n++] = gr_output_at(b, 0);
    t[n++] = gr_output_at(b, 1);
  }
  free(dir);
  GR_TRY(dsl_check_graph(p, a->e->pos));
  return dsl_tuple_value(p, t, n, out);
}

DSL_BUILTIN(image_folder, image_folder(&a, out))

/* ---- what a program knows about its folder ---------------------------------------------- */

static gr_status folder_output(const dsl_bargs *a, gr_output *o) {
  if (a->n != 1 || a->npos != 1 || a->v[0].kind != V_TENSOR ||
      gr_image_folder_num_images(a->v[0].t) < 0)
    return dsl_error(a->p->err, GR_ERR_INVALID_ARGUMENT, a->e->pos,
                     "%s takes the images or labels of an image_folder(...): %s(images)", a->fn,
                     a->fn);
  *o = a->v[0].t;
  return GR_OK;
}

static gr_status folder_info(const dsl_bargs *a, dsl_value *out) {
  gr_output o;
  GR_TRY(folder_output(a, &o));
  if (!strcmp(a->fn, "num_images") || !strcmp(a->fn, "num_batches")) {
    int64_t n = gr_image_folder_num_images(o);
    dsl_int_value(out, a->fn[4] == 'b' ? n / o.node->out_shapes[0].dims[0] : n);
    return GR_OK;
  }
  if (!strcmp(a->fn, "skipped_images")) {
    dsl_tensor_value(out, gr_output_at((gr_output){o.node, 0}, 2));
    return GR_OK;
  }
  int k;
  char **names = gr_image_folder_class_names(o, &k);
  if (!names) return gr_error_set_oom(a->p->err);
  if (!strcmp(a->fn, "num_classes")) {
    free(names);
    dsl_int_value(out, k);
    return GR_OK;
  }
  memset(out, 0, sizeof *out);
  out->kind = V_LIST;
  out->list.n = k;
  out->list.items = dsl_alloc(&a->p->temp, sizeof(dsl_value) * (size_t)(k + 1));
  gr_status st = out->list.items ? GR_OK : gr_error_set_oom(a->p->err);
  for (int i = 0; i < k && st == GR_OK; i++) {
    dsl_value *v = &out->list.items[i];
    v->kind = V_STR;
    if (!(v->str = dsl_strndup(&a->p->temp, names[i], strlen(names[i]))))
      st = gr_error_set_oom(a->p->err);
  }
  free(names);
  return st;
}

DSL_BUILTIN(image_folder_info, folder_info(&a, out))

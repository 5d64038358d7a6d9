/* Collective groups (GR_OP_COLLECTIVE, core/gr_op.h): after the nodes are
 * copied, each member's copy learns the devices of the whole group in rank
 * order (its string attr "devices"), so that its kernel can name its peers
 * in rendezvous keys, and a server can connect to their tasks before the
 * step runs. A group whose members are not all in the step is an error
 * here: its kernels would wait for each other forever. Members may share a
 * device (soft placement): their keys carry their ranks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gr_op.h"
#include "core/partition_internal.h"

typedef struct member {
  const char *key;
  int64_t rank;
  int pos;
} member;

static int by_key_rank(const void *a, const void *b) {
  const member *x = a, *y = b;
  int k = strcmp(x->key, y->key);
  if (k) return k;
  return (x->rank > y->rank) - (x->rank < y->rank);
}

static gr_status missing(pctx *c, const char *key, int rank, int64_t size) {
  return gr_error_set(c->err, GR_ERR_FAILED_PRECONDITION,
                      "collective group '%s': rank %d of %lld is not in this step; every member "
                      "of a collective must run in the same step (fetch or target what needs "
                      "all of them)",
                      key, rank, (long long)size);
}

/* The members [m, m + k) of one group, sorted by rank: checks them and
 * writes the devices into every copy. */
static gr_status settle_group(pctx *c, const member *m, int k) {
  const gr_node *first = c->nodes[m[0].pos];
  int64_t size = gr_node_attr_int(first, "group_size", 0);
  for (int i = 0; i < k; i++) {
    const gr_node *nd = c->nodes[m[i].pos];
    if (gr_node_attr_int(nd, "group_size", 0) != size || m[i].rank < 0 || m[i].rank >= size)
      return gr_error_set(c->err, GR_ERR_INVALID_ARGUMENT,
                          "collective group '%s': node '%s' has rank %lld of %lld, but '%s' says "
                          "the group has %lld members",
                          m[0].key, nd->name, (long long)m[i].rank,
                          (long long)gr_node_attr_int(nd, "group_size", 0), first->name,
                          (long long)size);
    if (i > 0 && m[i].rank == m[i - 1].rank)
      return gr_error_set(c->err, GR_ERR_INVALID_ARGUMENT,
                          "collective group '%s': two members have rank %lld ('%s' and '%s')",
                          m[0].key, (long long)m[i].rank, c->nodes[m[i - 1].pos]->name, nd->name);
    if (m[i].rank != i) return missing(c, m[0].key, i, size);
  }
  if (k != size) return missing(c, m[0].key, k, size);
  size_t len = 1;
  for (int i = 0; i < k; i++) len += strlen(c->devs[c->dev[m[i].pos]]) + 1;
  char *all = malloc(len), *at = all;
  if (!all) return gr_part_oom(c);
  for (int i = 0; i < k; i++) at += sprintf(at, "%s%s", i ? "," : "", c->devs[c->dev[m[i].pos]]);
  gr_status st = GR_OK;
  for (int i = 0; i < k && st == GR_OK; i++) {
    gr_node *cp = c->copy[m[i].pos];
    gr_attr *a = NULL;
    for (int j = 0; j < cp->num_attrs && !a; j++)
      if (!strcmp(cp->attrs[j].name, "devices") && cp->attrs[j].value.type == GR_ATTR_STRING)
        a = &cp->attrs[j];
    if (!a) {
      st = gr_error_set(c->err, GR_ERR_INTERNAL, "collective '%s' (op %s) has no attr 'devices'",
                        cp->name, cp->op->name);
      break;
    }
    const char *s = gr_graph_strdup(c->ps->parts[c->dev[m[i].pos]].graph, all);
    if (!s) st = gr_part_oom(c);
    a->value.s = s;
  }
  free(all);
  return st;
}

gr_status gr_part_collectives(pctx *c) {
  int k = 0;
  for (int i = 0; i < c->n; i++) k += (c->nodes[i]->op->flags & GR_OP_COLLECTIVE) != 0;
  if (!k) return GR_OK;
  member *m = malloc(sizeof *m * (size_t)k);
  if (!m) return gr_part_oom(c);
  k = 0;
  for (int i = 0; i < c->n; i++)
    if (c->nodes[i]->op->flags & GR_OP_COLLECTIVE)
      m[k++] = (member){gr_node_attr_string(c->nodes[i], "group_key", ""),
                        gr_node_attr_int(c->nodes[i], "rank", -1), i};
  qsort(m, (size_t)k, sizeof *m, by_key_rank);
  gr_status st = GR_OK;
  for (int lo = 0, hi; lo < k && st == GR_OK; lo = hi) {
    for (hi = lo + 1; hi < k && !strcmp(m[hi].key, m[lo].key);) hi++;
    st = settle_group(c, m + lo, hi - lo);
  }
  free(m);
  return st;
}

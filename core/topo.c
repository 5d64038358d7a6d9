/* Topological order over nodes numbered 0..n-1 (gr_topo_sort): Kahn's
 * algorithm on successor lists built from the edges the caller lists. The
 * graph, the partitioner, the control-flow executor and autodiff each list
 * their own edges (which ones order, which are loop back edges) and share
 * the algorithm. */
#include <stdlib.h>
#include <string.h>

#include "core/gr_graph.h"

typedef struct succ_lists {
  int *cnt;   /* per node: edges counted, then edges placed */
  int *start; /* n + 1 offsets into succ */
  int *succ;
  int *indeg;
  size_t edges;
} succ_lists;

static void count_edge(void *acc, int src, int dst) {
  succ_lists *s = acc;
  (void)dst;
  s->cnt[src]++;
  s->edges++;
}

static void place_edge(void *acc, int src, int dst) {
  succ_lists *s = acc;
  s->succ[s->start[src] + s->cnt[src]++] = dst;
  s->indeg[dst]++;
}

int gr_topo_sort(int n, gr_topo_edges_fn edges, const void *ctx, const unsigned char *skip,
                 int *order) {
  succ_lists s = {calloc((size_t)n + 1, sizeof(int)), gr_alloc_array((size_t)n + 2, sizeof(int)),
                  NULL, calloc((size_t)n + 1, sizeof(int)), 0};
  int head = 0, tail = -1;
  if (!s.cnt || !s.start || !s.indeg) goto out;
  edges(ctx, count_edge, &s);
  s.succ = gr_alloc_array(s.edges + 1, sizeof(int));
  if (!s.succ) goto out;
  s.start[0] = 0;
  for (int i = 0; i < n; i++) s.start[i + 1] = s.start[i] + s.cnt[i];
  memset(s.cnt, 0, sizeof(int) * (size_t)n);
  edges(ctx, place_edge, &s);
  tail = 0;
  for (int i = 0; i < n; i++)
    if (!s.indeg[i] && !(skip && skip[i])) order[tail++] = i;
  while (head < tail) {
    int v = order[head++];
    for (int k = s.start[v]; k < s.start[v + 1]; k++)
      if (--s.indeg[s.succ[k]] == 0) order[tail++] = s.succ[k];
  }
out:
  free(s.cnt), free(s.start), free(s.succ), free(s.indeg);
  return tail;
}

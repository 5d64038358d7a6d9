/* Partitioned variables (gr_ops_partitioned.h): a variable split along
 * axis 0 into ordinary variables NAME/part_K, read as their concatenation.
 * The parts are placed like any variable (a ps device function spreads
 * them over the ps tasks); the concatenation runs where its reader runs,
 * and its gradient (slices of the incoming gradient) reaches each part, so
 * updates and slots stay with the part. */
#include <stdio.h>
#include <string.h>

#include "ops/gr_ops.h"
#include "ops/ops_internal.h"

void gr_partition_rows(int64_t rows, int num_parts, int k, int64_t *offset, int64_t *size) {
  int64_t base = rows / num_parts, extra = rows % num_parts;
  *size = base + (k < extra);
  *offset = base * k + (k < extra ? k : extra);
}

static gr_output fail_named(gr_graph *g, gr_status code, const char *full, const char *what) {
  return gr_ops_fail(g, code, "partitioned variable '%s': %s", full, what);
}

/* Checks initial_value and num_parts; fills *sh. */
static bool check_args(gr_graph *g, const char *full, gr_output iv, int num_parts, gr_shape *sh) {
  char b[GR_SHAPE_STR_MAX], msg[400];
  gr_dtype dt = iv.node->out_dtypes[iv.index];
  *sh = iv.node->out_shapes[iv.index];
  if (!gr_dtype_is_float(dt)) {
    snprintf(msg, sizeof msg, "initial value '%s' is %s; a partitioned variable is f32 or f64",
             iv.node->name, gr_dtype_name(dt));
    fail_named(g, GR_ERR_DTYPE, full, msg);
    return false;
  }
  if (!gr_shape_is_fully_known(sh) || sh->rank < 1) {
    snprintf(msg, sizeof msg,
             "initial value '%s' has shape %s; a partitioned variable needs a fully known "
             "shape of rank >= 1 (it is split along axis 0)",
             iv.node->name, gr_shape_str(sh, b));
    fail_named(g, GR_ERR_SHAPE, full, msg);
    return false;
  }
  if (num_parts < 1 || num_parts > GR_PARTITIONS_MAX) {
    snprintf(msg, sizeof msg, "the number of parts must be 1..%d, got %d", GR_PARTITIONS_MAX,
             num_parts);
    fail_named(g, GR_ERR_INVALID_ARGUMENT, full, msg);
    return false;
  }
  if (num_parts > sh->dims[0]) {
    snprintf(msg, sizeof msg, "%d parts of a value with %lld rows %s: a part needs a row",
             num_parts, (long long)sh->dims[0], gr_shape_str(sh, b));
    fail_named(g, GR_ERR_INVALID_ARGUMENT, full, msg);
    return false;
  }
  return true;
}

gr_output gr_partitioned_variable(gr_graph *g, const char *name, gr_output initial_value,
                                  int num_parts, gr_output *parts) {
  if (gr_graph_error(g) || !initial_value.node) return (gr_output){NULL, 0};
  if (!name || !*name)
    return gr_ops_fail(g, GR_ERR_INVALID_ARGUMENT, "partitioned variable needs a name");
  const char *scope = gr_graph_name_scope(g);
  size_t len = strlen(scope) + strlen(name) + 2;
  char *full = gr_graph_alloc(g, len);
  if (!full) return gr_ops_fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  snprintf(full, len, "%s%s%s", scope, *scope ? "/" : "", name);
  gr_shape sh;
  if (!check_args(g, full, initial_value, num_parts, &sh)) return (gr_output){NULL, 0};
  if (gr_graph_find_node(g, full))
    return fail_named(g, GR_ERR_ALREADY_EXISTS, full, "a node of that name exists");
  gr_output *vs = gr_graph_alloc(g, sizeof *vs * (size_t)num_parts);
  if (!vs) return gr_ops_fail(g, GR_ERR_RESOURCE_EXHAUSTED, "out of memory");
  if (gr_graph_push_name_scope(g, name) != GR_OK) return (gr_output){NULL, 0};
  int64_t begin[GR_MAX_RANK] = {0}, size[GR_MAX_RANK];
  for (int d = 0; d < sh.rank; d++) size[d] = sh.dims[d];
  for (int k = 0; k < num_parts && !gr_graph_error(g); k++) {
    gr_partition_rows(sh.dims[0], num_parts, k, &begin[0], &size[0]);
    char pname[32];
    snprintf(pname, sizeof pname, "part_%d", k);
    gr_output rows =
        num_parts == 1 ? initial_value : gr_slice(g, initial_value, begin, size, sh.rank);
    gr_attr extra[] = {gr_attr_string("partition_of", full),
                       gr_attr_int("partition_offset", begin[0]), gr_attr_shape("full_shape", sh)};
    vs[k] = gr_ops_variable_with(g, pname, rows, extra, 3);
  }
  gr_graph_pop_name_scope(g);
  if (gr_graph_error(g)) return (gr_output){NULL, 0};
  gr_attr axis = gr_attr_int("axis", 0);
  gr_output whole = num_parts == 1 ? gr_ops_build(g, "identity", name, vs, 1, NULL, 0)
                                   : gr_ops_build(g, "concat", name, vs, num_parts, &axis, 1);
  if (!whole.node) return whole;
  if (strcmp(whole.node->name, full) != 0)
    return fail_named(g, GR_ERR_ALREADY_EXISTS, full, "a node of that name exists");
  if (parts) memcpy(parts, vs, sizeof *vs * (size_t)num_parts);
  return whole;
}

int gr_partitioned_parts(const gr_graph *g, const char *full_name, gr_output *parts, int cap) {
  int n = 0;
  char pname[600];
  for (int k = 0; k < GR_PARTITIONS_MAX; k++) {
    snprintf(pname, sizeof pname, "%s/part_%d", full_name, k);
    gr_node *v = gr_graph_find_node(g, pname);
    if (!v || !(v->op->flags & GR_OP_VARIABLE) ||
        strcmp(gr_node_attr_string(v, "partition_of", ""), full_name) != 0)
      break;
    if (n < cap) parts[n] = (gr_output){v, 0};
    n++;
  }
  return n;
}

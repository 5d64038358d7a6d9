/* Tensor shapes: rank <= GR_MAX_RANK, int64 dims, -1 for an unknown dim and
 * rank -1 for an unknown rank (in shape inference only; runtime tensors are
 * always fully known).
 *
 *   gr_shape s = gr_shape_make(2, (int64_t[]){128, 784});
 *   char buf[GR_SHAPE_STR_MAX];
 *   puts(gr_shape_str(&s, buf));            // "[128, 784]"
 */
#ifndef GR_SHAPE_H
#define GR_SHAPE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/gr_status.h"

#define GR_MAX_RANK      8
#define GR_SHAPE_STR_MAX 200
#define GR_DIM_UNKNOWN   (-1)

typedef struct gr_shape {
  int rank; /* -1: unknown rank */
  int64_t dims[GR_MAX_RANK];
} gr_shape;

/* dims may be NULL: all zero. */
gr_shape gr_shape_make(int rank, const int64_t *dims);
gr_shape gr_shape_scalar(void);
gr_shape gr_shape_unknown(void);
/* Number of elements; -1 if any dim or the rank is unknown; INT64_MAX when the
 * product overflows (such a tensor can never be allocated). */
int64_t gr_shape_num_elements(const gr_shape *s);
bool gr_shape_is_fully_known(const gr_shape *s);
bool gr_shape_equal(const gr_shape *a, const gr_shape *b);
/* Could a and b describe the same runtime shape (unknowns match anything)? */
bool gr_shape_compatible(const gr_shape *a, const gr_shape *b);
/* Formats into buf (at least GR_SHAPE_STR_MAX bytes); "?" for unknown dims. Returns buf. */
char *gr_shape_str(const gr_shape *s, char *buf);
/* NumPy broadcasting of a and b into out; false when incompatible. */
bool gr_shape_broadcast(const gr_shape *a, const gr_shape *b, gr_shape *out);
/* Normalise axis in [-rank, rank) to [0, rank); false when out of range. */
bool gr_shape_normalize_axis(int rank, int64_t axis, int *out);

#endif

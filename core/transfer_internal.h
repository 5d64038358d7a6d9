/* The transfer ops defined in core (transfer_ops.c), for the partitioner and
 * the registry. Internal to core. */
#ifndef GR_TRANSFER_INTERNAL_H
#define GR_TRANSFER_INTERNAL_H

#include "core/gr_op.h"

extern const gr_op_def gr_op__send;
extern const gr_op_def gr_op__recv;

#endif

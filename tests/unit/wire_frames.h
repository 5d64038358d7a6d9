/* Frames for the transport's tests (test_dist_tls, test_dist_local): a
 * TENSOR frame whose body is a pattern of its sequence number, and the
 * check that one arrived intact.
 *
 *   gr_conn_send(c, gt_frame(7, 100000), NULL);
 *   ... on_message: bool ok = gt_frame_intact(in, &seq); gr_inmsg_free(in);
 */
#ifndef GR_WIRE_FRAMES_H
#define GR_WIRE_FRAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "distributed/transport_internal.h"

/* A TENSOR frame of n body bytes (the pattern of seq), seq and n in its map. */
gr_outmsg *gt_frame(uint64_t seq, size_t n);
/* m (a TENSOR frame of gt_frame's) has its n bytes of the pattern of its
 * seq (into *seq); false when anything is off. Does not take m. */
bool gt_frame_intact(const gr_inmsg *m, uint64_t *seq);

#endif

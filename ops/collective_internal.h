/* Inside the collective all-reduce (ops/collective.c): one member's
 * schedule, and which of its steps read the inputs themselves instead of
 * the flat buffer (ops/collective_inputs.c). Not part of the ops face. */
#ifndef GR_COLLECTIVE_INTERNAL_H
#define GR_COLLECTIVE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

/* One step of a member's schedule: send a part of the buffer to a peer,
 * receive one and add it in (or copy it over), or divide a part by n (a
 * mean, where a total is complete). Keys carry tag and tag_n, which sender
 * and receiver agree on. */
typedef struct gr_coll_action {
  char kind; /* 's' send, 'a' receive and add, 'c' receive and copy, 'd' divide, 'u' update
                the variables of the part (gr_coll_plan_updates) */
  char tag;
  int peer, tag_n;
  int64_t piece;    /* the piece of the chunk, in the key */
  int64_t off, len; /* elements */
  /* the part's values are still the inputs' (no step has touched it): a
   * send sends them from the inputs, an add writes inputs + received into
   * the buffer, a division copies them in first. Set by
   * gr_coll_mark_from_inputs. */
  bool from_inputs;
} gr_coll_action;

/* Marks the steps of acts[0..n) that meet their part untouched, so that
 * the inputs need not be copied into the buffer before the schedule runs
 * (the ring: every chunk is first sent or added; the tree: a leaf sends,
 * a parent adds its first child). True when that covers the buffer
 * [0, total): every part ends written by the schedule, and a part sent
 * from the inputs is next overwritten by a copy (its total), never read
 * from the buffer first. Else false, every mark cleared: the caller copies
 * the inputs in first, as without marks. Only memory can fail it besides
 * (false too). */
bool gr_coll_mark_from_inputs(gr_coll_action *acts, int n, int64_t total);

/* The schedule acts[0..n) with an update step ('u', off and len only)
 * after each step that leaves a part of the buffer [0, total) holding its
 * total for good (the last add, copy or division of that part), and after
 * the sends right behind that step (the peers wait for those), over the
 * part it finalises; and at the end over parts no step writes (a member
 * alone: its inputs are the totals). Every element is in exactly one
 * update step. *out (malloc'd, the caller's) and *num_out; false when out
 * of memory. Call after gr_coll_mark_from_inputs, which knows no 'u'. */
bool gr_coll_plan_updates(const gr_coll_action *acts, int n, int64_t total, gr_coll_action **out,
                          int *num_out);

#endif

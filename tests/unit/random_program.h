/* Random training programs as `.gr` text, for the differential test of
 * placements (tests/unit/test_dist_placement_diff.c): each is a small
 * program (tensors of at most 5 x 3 floats) with one meaning, so that any
 * placement of it must give the one-process values bit for bit.
 *
 *   gt_program p;
 *   gt_program_make(seed, "s42_1", 3, &p);   // name scope s42_1, pins to 3 workers
 *   // p.text: the program; p.fetch[0..p.nfetch): names to fetch each step;
 *   // p.target: the train op to run each step ("" when none)
 *   gt_program_free(&p);
 *
 * What a program may hold (all deterministic from the seed): random inputs
 * (fresh each step), trained variables (weights, biases, a scalar, an
 * embedding table) and one minimize() with sgd, momentum (plain or
 * Nesterov) or adam; while loops (counted, nested two deep with the inner
 * trip count set by the outer counter, or ended by a float condition),
 * conds (one or two values, in loops too), gradients() through loops with
 * respect to variables and invariants, gradients() inside a loop body,
 * batch norm in training, a FIFO queue (one element or many at a time), a
 * gradient accumulator, counters updated with assign/assign_add/assign_sub
 * (at the top level, in a cond, in a loop body), gather, reductions,
 * concat/slice/pad, select, dropout, stop_gradient, colocate_with blocks
 * and, in about a third of the programs, device blocks pinning statements
 * to /job:ps/task:0 and /job:worker/task:K.
 *
 * One meaning: every access to a counter is ordered after the one before
 * it by control_dependencies (as a TensorFlow 1 program must be), a counter
 * used in a loop is used only there and read after it, values read from
 * counters reach the loss only through stop_gradient (so minimize never
 * updates a counter), the queue's and the accumulator's ops form one
 * ordered chain each, trained variables are never named inside a
 * control_dependencies block (where they would be read anew), and
 * minimize()'s updates wait for the loss, so every update of a trained
 * variable runs after every read of it in the step.
 *
 * Names: every variable, queue and accumulator lives in name scope `scope`,
 * so programs run one after another on one cluster do not share state
 * (the tasks keep variables by name). Not thread-safe: one call at a time
 * per gt_program; different programs may be made at once. */
#ifndef GT_RANDOM_PROGRAM_H
#define GT_RANDOM_PROGRAM_H

#include <stddef.h>
#include <stdint.h>

#define GT_PROG_MAX_FETCH 48

/* What a program holds (gt_program.features). */
enum {
  GT_PF_LOOP = 1 << 0,        /* a while loop */
  GT_PF_NESTED = 1 << 1,      /* a loop in a loop body */
  GT_PF_COND_LOOP = 1 << 2,   /* a cond in a loop body */
  GT_PF_DATA_LOOP = 1 << 3,   /* a loop ended by a float condition */
  GT_PF_LOOP_GRAD = 1 << 4,   /* gradients (explicit or minimize) through a loop */
  GT_PF_BODY_GRAD = 1 << 5,   /* gradients() inside a loop body */
  GT_PF_TRAIN = 1 << 6,       /* minimize */
  GT_PF_QUEUE = 1 << 7,       /* a FIFO queue */
  GT_PF_ACCUM = 1 << 8,       /* a gradient accumulator */
  GT_PF_BATCH_NORM = 1 << 9,  /* batch norm in training */
  GT_PF_COUNTER = 1 << 10,    /* assign / assign_add / assign_sub */
  GT_PF_LOOP_STATE = 1 << 11, /* a counter updated in a loop body */
  GT_PF_PINS = 1 << 12,       /* device blocks */
  GT_PF_COLOCATE = 1 << 13,   /* colocate_with blocks */
  GT_PF_GRADIENTS = 1 << 14,  /* explicit gradients() */
  GT_PF_COND = 1 << 15,       /* a cond */
};
#define GT_PF_COUNT 16

typedef struct gt_program {
  char *text; /* the program (malloc'd), with `fetch` and `target` lines */
  size_t len;
  int nfetch;
  char fetch[GT_PROG_MAX_FETCH][32]; /* bound names to fetch each step */
  char target[32];                   /* the train op, "" when none */
  unsigned features;                 /* GT_PF_* */
} gt_program;

/* Program number `seed`, its names in name scope `scope`; device blocks
 * name /job:ps/task:0 and /job:worker/task:0..workers-1. Aborts only when
 * out of memory. */
void gt_program_make(uint64_t seed, const char *scope, int workers, gt_program *p);
void gt_program_free(gt_program *p);
/* The name of feature bit i (GT_PF_LOOP is bit 0: "loop"). */
const char *gt_program_feature_name(int i);

#endif

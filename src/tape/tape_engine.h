/* Internal: the tape's own structs, shared by the two files of its engine,
 * src/tape/tape.c (arena, records, backward walk, no-grad, recomputation) and
 * src/tape/tape_tensors.c (tensors, leaves and the gradient pool).  The op files
 * do not include this: they reach the tape through src/tape/tape_internal.h. */
#ifndef VIT_SRC_TAPE_ENGINE_H
#define VIT_SRC_TAPE_ENGINE_H

#include <stdint.h>

#include "tape_internal.h"

/* Alignment of every arena allocation and gradient buffer. */
#define VIT_TAPE_ALIGN 64

typedef struct chunk chunk; /* an arena chunk (src/tape/tape.c) */

/* A gradient buffer lent by the pool. */
typedef struct gblock {
    struct gblock *next;
    size_t cap; /* in reals */
    int busy;
    vit_real *p;
} gblock;

/* The tape's own view of a tensor: every vit_tensor it hands out is the
 * first member of a node, so a vit_tensor * from this tape is a node *. */
typedef struct node {
    vit_tensor t;
    gblock *gb;        /* the pool buffer behind t.grad, or NULL */
    /* An output made by vit_tape_output_kept in mixed precision: its
     * float values (t.data) live in the tape's ring and are overwritten two
     * kept outputs later; half (arena) is what the backward reads instead,
     * the values rounded to bf16 (VIT_KEEP_BF16), or NULL (VIT_KEEP_NONE:
     * no backward reads them). */
    uint16_t *half;
    unsigned char leaf, retain, kept;
    /* A leaf with a gradient, while a backward reports finished leaves
     * (vit_tape_on_leaf_grad): the index of the first op that reads it, or
     * -1 (none, or already reported). */
    int first_use;
} node;

static inline node *vit_tape_node(vit_tensor *x) { return (node *)x; }

struct vit_tape {
    chunk *chunks, *cur;
    size_t high;          /* most arena bytes in use at once since the reset */
    vit_op_rec *ops;
    int nops, cap_ops;
    int status;
    int grad;             /* grad mode */
    int backward_done;
    long grad_leaves;     /* leaves made with a gradient buffer */
    gblock *pool;         /* every gradient buffer, lent (busy) or free */
    /* One scratch buffer for what nobody keeps past an op: no-grad
     * intermediates, the attention backward's work (shared by every
     * layer), a checkpoint's output on its way out.  These never overlap:
     * a no-grad forward runs no backward. */
    vit_real *scratch;
    size_t scratch_cap;
    /* Two buffers taking turns for the float values of kept outputs
     * (vit_tape_output_kept), kept across steps. */
    vit_real *ring[2];
    size_t ring_cap[2];
    int ring_next;
    vit_tape *sub;        /* recomputation tape of vit_op_checkpoint */
    /* While a checkpoint's sub-graph is recomputed, the forward of a lazy
     * op (VIT_OP_LAZY) waits (pending = 1 + its index) until another op
     * reads its output: none does, and the backward needs only its inputs. */
    int recomputing, pending;
    /* vit_tape_on_leaf_grad's callback (NULL: none) and its context. */
    vit_tape_leaf_fn on_leaf;
    void *on_leaf_ctx;
};

/* bytes of arena memory (rounded up to VIT_TAPE_ALIGN), valid until the
 * reset; NULL with VIT_ENOMEM recorded (src/tape/tape.c). */
void *vit_tape_arena(vit_tape *t, size_t bytes);

#endif

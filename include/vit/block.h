/*
 * vit/block.h - the pre-norm transformer block as one op on the tape.
 *
 *     y = x + MHA(LN1(x))
 *     out = y + W2 GELU(W1 LN2(y) + b1) + b2
 *
 * (with drop path, vit_block_opts, each branch scaled per sample first)
 *
 * the block of the ViT (vit/model.h) and of the GPT-style sequence model in
 * examples/seq_model.c, written from the public ops of vit/tape.h:
 * vit_op_layernorm, vit_op_mha, vit_op_add_layernorm (the first residual
 * and LN2 in one pass), vit_op_linear_gelu and vit_op_linear_add (the MLP's
 * layers, the second one added onto the residual).  Its values are bitwise
 * those ops' in this order, and its backward is theirs; the fused ops round
 * differently from vit_op_add / vit_op_linear / vit_op_gelu chained.
 *
 *     vit_block_weights w = {ln1_g, ln1_b, attn, ln2_g, ln2_b, w1, b1, w2, b2};
 *     x = vit_op_block(tape, &mha, &w, x, NULL);        (per layer)
 *
 * Threads and memory: as the ops it records (vit/tape.h): one tape, one
 * thread at a time; every tensor it makes is the tape's.  In mixed
 * precision (vit_bf16_thread_mixed, or a training step with precision
 * bf16), in grad mode, the block keeps what its backward reads of its
 * inner activations in bf16 instead of float (the layer norms' outputs,
 * GELU's output and derivative, the attention's projections, context and
 * maps; nothing of the attention's output): 44% less of the tape's arena
 * per block on vit_bench's large configuration.  Their float values pass
 * through two buffers of the tape.
 * The block's output and the residual sum stay float.  When the maps are
 * asked for (probs), or the layer runs the tiled attention core, the
 * attention keeps its float cache.
 */
#ifndef VIT_BLOCK_H
#define VIT_BLOCK_H

#include "vit/core.h"
#include "vit/attention.h"
#include "vit/rng.h"
#include "vit/tape.h"

VIT_BEGIN_DECLS

/* One block's parameters as tensors on the tape (leaves, usually over a
 * vit_params, vit/params.h), D = mha->d_model, M = the MLP's width: */
typedef struct vit_block_weights {
    vit_tensor *ln1_g, *ln1_b; /* [D] each: LN1's gain and shift */
    vit_tensor *attn;          /* the flat [vit_mha_param_count(mha)] vit_op_mha takes
                                  (W_QKV, W_O, b_QKV, b_O, then tau with learn_scale) */
    vit_tensor *ln2_g, *ln2_b; /* [D] each: LN2's */
    vit_tensor *w1, *b1;       /* [D, M], [M]: the MLP's first layer (b1 may be NULL) */
    vit_tensor *w2, *b2;       /* [M, D], [D]: its second (b2 may be NULL) */
} vit_block_weights;

/* What else a block may do (all fields 0: the plain block): */
typedef struct vit_block_opts {
    vit_real eps;    /* the layer norms' epsilon (> 0), or 0 for VIT_LAYERNORM_EPS */
    int token0_only; /* 1: compute token 0's output alone, out [B, 1, D]: LN1(x)'s
                        token 0 is the one query against every token's keys and
                        values, and the residuals and the MLP run on that token
                        (for when nothing but token 0 is read, as a head on a
                        class token: the other tokens would get no gradient).
                        A mask in mha then needs only the row of query 0: the
                        first row of a [T, T] mask serves as [1, T]. */
    vit_real **probs; /* if not NULL: *probs gets the attention maps [B, heads,
                         n_q, T] (n_q = 1 with token0_only, else T), memory of
                         the tape, as vit_op_mha's probs (NULL for a layer
                         that runs the tiled core) */
    const vit_real *drop_attn, *drop_mlp; /* stochastic depth (drop path): if not
                         NULL, [B] per-sample scales of the attention and the
                         MLP branch before each is added to the residual
                         (vit_op_drop_path; vit_drop_path_scales draws them:
                         0 drops the branch for that sample, 1 / (1 - rate)
                         keeps it).  The MLP's second layer then runs as
                         vit_op_linear, vit_op_drop_path and vit_op_add
                         instead of the fused vit_op_linear_add.  Read until
                         the backward (the op copies them).  NULL: the plain
                         block, bitwise (training only: leave them NULL at
                         evaluation) */
    vit_tensor *bias; /* if not NULL: a learnable additive score bias
                         [1 or heads, T, T] (3-D, else VIT_EINVAL naming
                         opts->bias and the shapes), a tensor of the tape
                         whose gradient flows (e.g. vit_op_relpos_bias's
                         output): the attention runs as vit_op_mha_bias.
                         A constant bias in mha (mha->bias, bias_heads) is
                         added to it (one of 1 head is spread over the
                         heads when the other has them).  With token0_only
                         query 0's row of each is used.  NULL: mha's
                         constant bias alone, as before */
} vit_block_opts;

/* Records one pre-norm block on x [B, T, D]: self-attention of shape mha
 * (copied; mha->batch = B, n_q = n_k = T, d_model = D, its mask and bias
 * pointers valid until the backward) with weights w (the struct is read,
 * not kept), and returns out [B, T, D] ([B, 1, D] with token0_only), a
 * tensor of the tape.  opts may be NULL (the defaults).
 * Returns NULL on error, as any op (vit/tape.h): at once for a NULL x (a
 * failed op before); VIT_EINVAL for a NULL tape, mha or w (recorded in the
 * tape's status when tape is not NULL), for a weight tensor left NULL that
 * must not be, or for shapes that do not agree (named by the op that
 * refuses them); VIT_ENOMEM. */
vit_tensor *vit_op_block(vit_tape *tape, const vit_mha *mha, const vit_block_weights *w,
                         vit_tensor *x, const vit_block_opts *opts);

/* Stochastic depth's per-sample branch scales: scale[i] (i < n, overwritten)
 * = 0 with probability rate (the branch dropped for sample i), else
 * 1 / (1 - rate), so the branch's expected value is unchanged.  One uniform
 * draw of rng per sample (u < rate drops).  Returns VIT_OK; VIT_EINVAL for
 * a NULL scale or rng, n < 0 or rate outside [0, 1).  Reentrant. */
int vit_drop_path_scales(vit_real *scale, int n, double rate, vit_rng *rng);

VIT_END_DECLS

#endif

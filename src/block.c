/*
 * The pre-norm transformer block from the public ops; see vit/block.h.
 */
#include "vit/block.h"

#include "error.h"
#include "tape_internal.h"
#include "vit/layernorm.h"

/* The first required weight left NULL, or NULL when all are there. */
static const char *missing(const vit_block_weights *w)
{
    return !w->ln1_g ? "ln1_g" : !w->ln1_b ? "ln1_b" : !w->attn ? "attn" : !w->ln2_g ? "ln2_g"
         : !w->ln2_b ? "ln2_b" : !w->w1 ? "w1" : !w->w2 ? "w2" : NULL;
}

vit_tensor *vit_op_block(vit_tape *tape, const vit_mha *mha, const vit_block_weights *w,
                         vit_tensor *x, const vit_block_opts *opts)
{
    static const char fn[] = "vit_op_block";
    if (!x)
        return NULL;
    const char *none = !tape ? "tape" : !mha ? "mha" : !w ? "weights" : missing(w);
    if (none) {
        vit_fail(VIT_EINVAL, "%s: %s%s is NULL", fn, tape && mha && w ? "weight " : "", none);
        vit_tape_fail(tape, VIT_EINVAL);
        return NULL;
    }
    const vit_block_opts o = opts ? *opts : (vit_block_opts){0};
    const vit_real eps = o.eps != 0 ? o.eps : (vit_real)VIT_LAYERNORM_EPS;
    vit_mha m = *mha;
    /* In mixed precision the outputs read only by the next op (or two)
     * keep no float values on the tape (vit_tape_output_kept): the layer
     * norms' outputs, which the backward reads only as bf16 GEMM operands,
     * are kept in bf16, the attention's output (added to the residual,
     * whose backward reads no values) not at all; the MLP is one op that
     * keeps only its pre-activation, in bf16 (vit_tape_mlp_kept). */
    vit_tensor *h = vit_tape_layernorm_kept(tape, x, w->ln1_g, w->ln1_b, eps, VIT_KEEP_BF16);
    vit_tensor *q = h; /* the same tensor: the fused Q/K/V projection */
    if (o.token0_only) {
        int row[3] = {m.batch, 1, m.d_model};
        m.n_q = 1;
        q = vit_op_reshape(tape, vit_op_token(tape, h, 0), 3, row);
        x = vit_op_reshape(tape, vit_op_token(tape, x, 0), 3, row);
    }
    h = vit_tape_mha_kept(tape, &m, w->attn, q, h, o.probs, VIT_KEEP_NONE);
    if (o.drop_attn && h)
        h = vit_op_drop_path(tape, h, o.drop_attn);
    h = vit_tape_add_layernorm_kept(tape, x, h, w->ln2_g, w->ln2_b, eps, &x, VIT_KEEP_BF16);
    if (o.drop_mlp) {
        h = vit_tape_linear_gelu_kept(tape, h, w->w1, w->b1, VIT_KEEP_BF16);
        h = vit_op_linear(tape, h, w->w2, w->b2);
        h = h ? vit_op_drop_path(tape, h, o.drop_mlp) : NULL;
        return vit_op_add(tape, x, h);
    }
    return vit_tape_mlp_kept(tape, h, w->w1, w->b1, w->w2, w->b2, x);
}

int vit_drop_path_scales(vit_real *scale, int n, double rate, vit_rng *rng)
{
    if (!scale || !rng || n < 0 || !(rate >= 0 && rate < 1))
        return vit_fail(VIT_EINVAL, "vit_drop_path_scales: %s",
                        !scale ? "scale is NULL" : !rng ? "rng is NULL"
                        : n < 0 ? "n is negative" : "rate outside [0, 1)");
    vit_real keep = (vit_real)(1 / (1 - rate));
    for (int i = 0; i < n; i++)
        scale[i] = vit_rng_uniform(rng) < rate ? 0 : keep;
    return VIT_OK;
}

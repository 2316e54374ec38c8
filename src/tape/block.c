/*
 * The pre-norm transformer block from the public ops; see vit/block.h.
 */
#include "vit/block.h"

#include <string.h>

#include "error.h"
#include "tape_internal.h"
#include "vit/layernorm.h"

/* The first required weight left NULL, or NULL when all are there. */
static const char *missing(const vit_block_weights *w)
{
    return !w->ln1_g ? "ln1_g" : !w->ln1_b ? "ln1_b" : !w->attn ? "attn" : !w->ln2_g ? "ln2_g"
         : !w->ln2_b ? "ln2_b" : !w->w1 ? "w1" : !w->w2 ? "w2" : NULL;
}

/* The attention's score bias as one tensor of the tape: the learnable lb
 * [1 or H, T, T] plus mha's constant one (if any; a head count of 1 is
 * spread over H when the other has H), cut to row 0 of each head
 * ([bh, 1, T]) for token0_only.  *heads gets its head count.  NULL on
 * error (recorded). */
static vit_tensor *score_bias(vit_tape *t, const vit_mha *m, vit_tensor *lb, int token0,
                              int *heads)
{
    static const char fn[] = "vit_op_block";
    const int H = m->heads, T = m->n_k;
    if (lb->ndim == 3 && lb->shape[0] != 1 && lb->shape[0] != H)
        return vit_tape_error(t, vit_fail(VIT_EINVAL,
            "%s: opts->bias has %d heads; it must be [1 or heads (%d), T, T]", fn, lb->shape[0],
            H));
    if (vit_tape_check_shape(t, fn, "opts->bias", lb, "[1 or heads, T, T]", 3,
                             (int[]){-1, T, T}))
        return NULL;
    int bh = lb->shape[0];
    if (m->bias) {
        const int ch = m->bias_heads, total = bh == H || ch == H ? H : 1;
        if (bh != total) { /* [1, T, T] repeated H times: a gather of its one "token" */
            int *zeros = vit_tape_alloc(t, (size_t)H * sizeof *zeros);
            if (!zeros)
                return NULL;
            for (int h = 0; h < H; h++) zeros[h] = 0;
            lb = vit_op_reshape(t, lb, 3, (int[]){1, 1, T * T});
            lb = vit_op_reshape(t, vit_op_gather_tokens(t, lb, zeros, H), 3, (int[]){H, T, T});
        }
        vit_tensor *c = vit_tape_tensor(t, 3, (int[]){total, T, T});
        if (!c || !lb)
            return NULL;
        const size_t TT = (size_t)T * T;
        for (int h = 0; h < total; h++)
            memcpy(c->data + h * TT, m->bias + (ch == 1 ? 0 : h * TT), TT * sizeof *c->data);
        lb = vit_op_add(t, c, lb);
        bh = total;
    }
    if (token0) /* each head's [T, T] as an item of T tokens: its token 0 */
        lb = vit_op_gather_tokens(t, lb, (int[]){0}, 1);
    *heads = bh;
    return lb;
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
    if (o.bias) {
        vit_tensor *sb = score_bias(tape, mha, o.bias, o.token0_only, &m.bias_heads);
        m.bias = NULL; /* in sb */
        h = sb ? vit_tape_mha_bias_kept(tape, &m, w->attn, q, h, sb, o.probs, VIT_KEEP_NONE)
               : NULL;
    } else {
        if (o.token0_only && m.bias && m.bias_heads > 1) {
            /* The constant bias of query 0: row 0 of each head's [T, T]. */
            const size_t T = (size_t)m.n_k;
            vit_real *rows = vit_tape_alloc(tape, (size_t)m.heads * T * sizeof *rows);
            if (!rows)
                return NULL;
            for (int hh = 0; hh < m.heads; hh++)
                memcpy(rows + hh * T, mha->bias + hh * T * T, T * sizeof *rows);
            m.bias = rows;
        }
        h = vit_tape_mha_kept(tape, &m, w->attn, q, h, o.probs, VIT_KEEP_NONE);
    }
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

/*
 * tests/test_block.c - the pre-norm transformer block op, vit_op_block
 * (float64 build).
 *
 *  - values: the block equals the chain LN -> MHA -> add -> LN -> linear
 *    -> GELU -> linear -> add written with the unfused ops (to rounding),
 *    with and without a causal mask; token0_only gives row 0 of the whole
 *    block's output, and the maps it hands back are the attention of query
 *    0 (each row a distribution);
 *  - gradients: every weight and x by central differences of a weighted
 *    sum of the output (gc_check), for the whole block and token0_only;
 *  - drop path: the scales come from the rng (0 or 1/(1-rate), rate 0 all
 *    exactly 1); a sample dropped on both branches comes out bitwise as it
 *    went in; scales of 1 give the plain block; a kept sample's branches
 *    are scaled; gradients with a fixed mask by central differences;
 *  - errors: a NULL tape, mha, weights struct or required weight is
 *    VIT_EINVAL naming it and stops the tape; a NULL x returns NULL at
 *    once; NULL biases of the MLP are allowed.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "vit/block.h"
#include "vit/layernorm.h"

enum { B = 2, T = 5, D = 8, HEADS = 2, M = 12, NW = 9 };

/* The block's inputs as buffers: x, then the weights in vit_block_weights'
 * order, each with a gradient buffer. */
typedef struct setup {
    vit_mha mha;
    unsigned char mask[T * T];
    vit_real *val[1 + NW], *grad[1 + NW];
    size_t n[1 + NW];
    int ndim[1 + NW], shape[1 + NW][3];
    vit_real *wout; /* the loss weights, [B, T, D] */
    int token0_only;
    const vit_real *drop_attn, *drop_mlp; /* drop-path scales [B] or NULL */
    vit_real *lbias, *glbias; /* a learnable score bias [lbias_heads, T, T], or NULL */
    int lbias_heads;
    vit_tape *tape;
} setup;

static const char *const names[1 + NW] = {"x", "ln1_g", "ln1_b", "attn", "ln2_g", "ln2_b",
                                          "w1", "b1", "w2", "b2"};

static void make(setup *s, int causal)
{
    memset(s, 0, sizeof *s);
    s->mha = (vit_mha){.batch = B, .n_q = T, .n_k = T, .d_model = D, .heads = HEADS,
                       .has_bias = 1};
    if (causal) {
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++)
                s->mask[i * T + j] = j <= i;
        s->mha.mask.allowed = s->mask;
    }
    const int np = (int)vit_mha_param_count(&s->mha);
    const int shapes[1 + NW][4] = {{3, B, T, D}, {1, D}, {1, D}, {1, np}, {1, D},
                                   {1, D}, {2, D, M}, {1, M}, {2, M, D}, {1, D}};
    uint64_t seed = 7;
    for (int i = 0; i < 1 + NW; i++) {
        s->ndim[i] = shapes[i][0];
        s->n[i] = 1;
        for (int k = 0; k < s->ndim[i]; k++) {
            s->shape[i][k] = shapes[i][1 + k];
            s->n[i] *= (size_t)shapes[i][1 + k];
        }
        s->val[i] = gc_zeros(s->n[i]);
        s->grad[i] = gc_zeros(s->n[i]);
        gc_fill(s->val[i], s->n[i], &seed, i == 0 ? 1.0 : 0.4);
        if (i == 1 || i == 4) /* gains around 1 */
            for (size_t j = 0; j < s->n[i]; j++)
                s->val[i][j] += 1;
    }
    s->wout = gc_zeros((size_t)B * T * D);
    gc_fill(s->wout, (size_t)B * T * D, &seed, 1.0);
    s->tape = vit_tape_new();
    ck_assert_ptr_nonnull(s->tape);
}

static void unmake(setup *s)
{
    for (int i = 0; i < 1 + NW; i++) {
        free(s->val[i]);
        free(s->grad[i]);
    }
    free(s->wout);
    vit_tape_free(s->tape);
}

static vit_tensor *leaf(setup *s, int i, int grads)
{
    return vit_tape_leaf(s->tape, s->val[i], grads ? s->grad[i] : NULL, s->ndim[i], s->shape[i]);
}

static vit_block_weights weights(vit_tensor *const *in)
{
    return (vit_block_weights){in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9]};
}

/* The block on the setup's leaves (grads: with gradient buffers). */
static vit_tensor *block(setup *s, int grads, vit_real **probs)
{
    vit_tensor *in[1 + NW];
    for (int i = 0; i < 1 + NW; i++)
        in[i] = leaf(s, i, grads);
    vit_block_weights w = weights(in);
    vit_block_opts o = {.token0_only = s->token0_only, .probs = probs,
                        .drop_attn = s->drop_attn, .drop_mlp = s->drop_mlp};
    if (s->lbias)
        o.bias = vit_tape_leaf(s->tape, s->lbias, grads ? s->glbias : NULL, 3,
                               (int[]){s->lbias_heads, T, T});
    return vit_op_block(s->tape, &s->mha, &w, in[0], &o);
}

/* The same block from the unfused ops. */
static vit_tensor *reference(setup *s)
{
    vit_tape *t = s->tape;
    vit_tensor *in[1 + NW];
    for (int i = 0; i < 1 + NW; i++)
        in[i] = leaf(s, i, 0);
    const vit_real eps = (vit_real)VIT_LAYERNORM_EPS;
    vit_tensor *x = in[0];
    vit_tensor *h = vit_op_layernorm(t, x, in[1], in[2], eps);
    x = vit_op_add(t, x, vit_op_mha(t, &s->mha, in[3], h, h, NULL));
    h = vit_op_layernorm(t, x, in[4], in[5], eps);
    h = vit_op_gelu(t, vit_op_linear(t, h, in[6], in[7]));
    return vit_op_add(t, x, vit_op_linear(t, h, in[8], in[9]));
}

START_TEST(test_block_values)
{
    setup s;
    make(&s, _i);
    size_t n = (size_t)B * T * D;
    vit_real *ref = gc_zeros(n);
    vit_tensor *y = reference(&s);
    ck_assert_ptr_nonnull(y);
    memcpy(ref, y->data, n * sizeof *ref);
    vit_tape_reset(s.tape);
    y = block(&s, 0, NULL);
    ck_assert_msg(y != NULL, "%s", vit_last_error());
    ck_assert_int_eq(y->ndim, 3);
    ck_assert_int_eq(y->shape[0], B);
    ck_assert_int_eq(y->shape[1], T);
    ck_assert_int_eq(y->shape[2], D);
    double e = gc_max_abs_diff(ref, y->data, n);
    ck_assert_msg(e < 1e-12, "block vs unfused ops: max |diff| %g", e);
    ck_assert_msg(gc_max_abs_diff(ref, s.val[0], n) > 1e-2, "the block did nothing");

    /* token 0 alone: row 0 of each item, and the maps of query 0 */
    vit_tape_reset(s.tape);
    s.token0_only = 1;
    vit_real *probs = NULL;
    y = block(&s, 0, &probs);
    ck_assert_msg(y != NULL, "%s", vit_last_error());
    ck_assert_int_eq(y->shape[1], 1);
    ck_assert_ptr_nonnull(probs);
    for (int b = 0; b < B; b++) {
        double e0 = gc_max_abs_diff(ref + (size_t)b * T * D, y->data + (size_t)b * D, D);
        ck_assert_msg(e0 < 1e-12, "token0_only item %d: max |diff| %g", b, e0);
        for (int h = 0; h < HEADS; h++) {
            const vit_real *p = probs + ((size_t)b * HEADS + h) * T;
            double sum = 0;
            for (int j = 0; j < T; j++)
                sum += p[j];
            ck_assert_msg(fabs(sum - 1) < 1e-12, "maps of item %d head %d sum to %g", b, h, sum);
            if (_i) /* causal: query 0 sees key 0 alone */
                ck_assert_msg(fabs(p[0] - 1) < 1e-12, "masked map %g", (double)p[0]);
        }
    }
    free(ref);
    unmake(&s);
}
END_TEST

/* sum of wout * output, recomputed without gradients. */
static double loss_of(void *ctx)
{
    setup *s = ctx;
    vit_tape_reset(s->tape);
    vit_tensor *y = block(s, 0, NULL);
    ck_assert_ptr_nonnull(y);
    return gc_dot(y->data, s->wout, y->size);
}

START_TEST(test_block_gradients)
{
    setup s;
    make(&s, _i & 1);
    s.token0_only = _i >> 1;
    vit_tensor *y = block(&s, 1, NULL);
    ck_assert_msg(y != NULL, "%s", vit_last_error());
    ck_assert_int_eq(vit_tape_backward_from(s.tape, y, s.wout), VIT_OK);
    for (int i = 0; i < 1 + NW; i++) {
        char name[64];
        snprintf(name, sizeof name, "block%s%s d%s", _i & 1 ? " causal" : "",
                 s.token0_only ? " token0" : "", names[i]);
        double e = gc_check(name, s.val[i], s.grad[i], s.n[i], loss_of, &s);
        ck_assert_msg(e <= GC_TOL, "%s: max_rel %.3e", name, e);
    }
    unmake(&s);
}
END_TEST

/* The block with drop-path scales against the unfused chain with each
 * branch scaled by hand. */
static vit_tensor *reference_drop(setup *s, const vit_real *sa, const vit_real *sm)
{
    vit_tape *t = s->tape;
    vit_tensor *in[1 + NW];
    for (int i = 0; i < 1 + NW; i++)
        in[i] = leaf(s, i, 0);
    const vit_real eps = (vit_real)VIT_LAYERNORM_EPS;
    vit_tensor *x = in[0];
    vit_tensor *h = vit_op_layernorm(t, x, in[1], in[2], eps);
    vit_tensor *a = vit_op_mha(t, &s->mha, in[3], h, h, NULL);
    for (int b = 0; a && b < B; b++)
        for (int j = 0; j < T * D; j++)
            a->data[b * T * D + j] *= sa[b];
    x = vit_op_add(t, x, a);
    h = vit_op_layernorm(t, x, in[4], in[5], eps);
    h = vit_op_linear(t, vit_op_gelu(t, vit_op_linear(t, h, in[6], in[7])), in[8], in[9]);
    for (int b = 0; h && b < B; b++)
        for (int j = 0; j < T * D; j++)
            h->data[b * T * D + j] *= sm[b];
    return vit_op_add(t, x, h);
}

START_TEST(test_block_drop_path_values)
{
    setup s;
    make(&s, 0);
    size_t n = (size_t)B * T * D;
    vit_rng rng;
    vit_rng_seed(&rng, 3);
    vit_real sc[4];
    ck_assert_int_eq(vit_drop_path_scales(sc, 4, 0.0, &rng), VIT_OK);
    for (int i = 0; i < 4; i++)
        ck_assert(sc[i] == 1); /* rate 0 keeps everything, unscaled */
    ck_assert_int_eq(vit_drop_path_scales(sc, 4, 0.25, &rng), VIT_OK);
    for (int i = 0; i < 4; i++)
        ck_assert(sc[i] == 0 || sc[i] == (vit_real)(1 / 0.75));
    ck_assert_int_eq(vit_drop_path_scales(sc, 4, 1.0, &rng), VIT_EINVAL);
    ck_assert_int_eq(vit_drop_path_scales(NULL, 4, 0.5, &rng), VIT_EINVAL);

    /* scales of 1: the plain block (to rounding: the MLP's add is unfused) */
    vit_real ones[B] = {1, 1}, *plain = gc_zeros(n);
    vit_tensor *y = block(&s, 0, NULL);
    ck_assert_ptr_nonnull(y);
    memcpy(plain, y->data, n * sizeof *plain);
    vit_tape_reset(s.tape);
    s.drop_attn = s.drop_mlp = ones;
    y = block(&s, 0, NULL);
    ck_assert_msg(y != NULL, "%s", vit_last_error());
    ck_assert(gc_max_abs_diff(plain, y->data, n) < 1e-12);

    /* item 0 dropped on both branches: bitwise its input; item 1 kept with
     * scale 2 on attention, 1.5 on the MLP: the hand-scaled chain */
    vit_real sa[B] = {0, 2}, sm[B] = {0, 1.5};
    vit_tape_reset(s.tape);
    s.drop_attn = sa;
    s.drop_mlp = sm;
    y = block(&s, 0, NULL);
    ck_assert_ptr_nonnull(y);
    ck_assert(memcmp(y->data, s.val[0], (size_t)T * D * sizeof *y->data) == 0);
    ck_assert(gc_max_abs_diff(y->data + T * D, plain + T * D, (size_t)T * D) > 1e-3);
    memcpy(plain, y->data, n * sizeof *plain);
    vit_tape_reset(s.tape);
    y = reference_drop(&s, sa, sm);
    ck_assert_ptr_nonnull(y);
    double e = gc_max_abs_diff(plain, y->data, n);
    ck_assert_msg(e < 1e-12, "drop path vs scaled chain: max |diff| %g", e);
    /* token0_only: row 0 of the same */
    vit_tape_reset(s.tape);
    s.token0_only = 1;
    y = block(&s, 0, NULL);
    ck_assert_ptr_nonnull(y);
    for (int b = 0; b < B; b++)
        ck_assert(gc_max_abs_diff(plain + (size_t)b * T * D, y->data + (size_t)b * D, D) < 1e-12);
    free(plain);
    unmake(&s);
}
END_TEST

/* Gradients through a fixed mask drawn from a vit_rng: the forward of every
 * perturbation uses the same scales, as the trainer's step does. */
START_TEST(test_block_drop_path_gradients)
{
    setup s;
    make(&s, 0);
    s.token0_only = _i;
    vit_rng rng;
    vit_rng_seed(&rng, 11);
    vit_real sc[2 * B];
    /* redraw until each branch keeps one item and drops one */
    do
        ck_assert_int_eq(vit_drop_path_scales(sc, 2 * B, 0.5, &rng), VIT_OK);
    while (sc[0] == sc[1] || sc[2] == sc[3]);
    s.drop_attn = sc;
    s.drop_mlp = sc + B;
    vit_tensor *y = block(&s, 1, NULL);
    ck_assert_msg(y != NULL, "%s", vit_last_error());
    ck_assert_int_eq(vit_tape_backward_from(s.tape, y, s.wout), VIT_OK);
    for (int i = 0; i < 1 + NW; i++) {
        char name[64];
        snprintf(name, sizeof name, "block drop_path%s d%s", _i ? " token0" : "", names[i]);
        double e = gc_check(name, s.val[i], s.grad[i], s.n[i], loss_of, &s);
        ck_assert_msg(e <= GC_TOL, "%s: max_rel %.3e", name, e);
    }
    unmake(&s);
}
END_TEST

START_TEST(test_block_errors)
{
    setup s;
    make(&s, 0);
    vit_tensor *in[1 + NW];
    for (int i = 0; i < 1 + NW; i++)
        in[i] = leaf(&s, i, 0);
    vit_block_weights w = weights(in);
    ck_assert_ptr_null(vit_op_block(s.tape, &s.mha, &w, NULL, NULL));
    ck_assert_int_eq(vit_tape_status(s.tape), VIT_OK); /* a NULL x: nothing new to say */
    ck_assert_ptr_null(vit_op_block(NULL, &s.mha, &w, in[0], NULL));
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "tape is NULL"));
    ck_assert_ptr_null(vit_op_block(s.tape, NULL, &w, in[0], NULL));
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "mha is NULL"));
    ck_assert_int_eq(vit_tape_status(s.tape), VIT_EINVAL);
    vit_tape_reset(s.tape);
    ck_assert_ptr_null(vit_op_block(s.tape, &s.mha, NULL, in[0], NULL));
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "weights is NULL"));
    vit_tensor **field[7] = {&w.ln1_g, &w.ln1_b, &w.attn, &w.ln2_g, &w.ln2_b, &w.w1, &w.w2};
    const char *fname[7] = {"ln1_g", "ln1_b", "attn", "ln2_g", "ln2_b", "w1", "w2"};
    for (int k = 0; k < 7; k++) {
        vit_tape_reset(s.tape);
        for (int i = 0; i < 1 + NW; i++)
            in[i] = leaf(&s, i, 0);
        w = weights(in);
        *field[k] = NULL;
        ck_assert_ptr_null(vit_op_block(s.tape, &s.mha, &w, in[0], NULL));
        ck_assert_int_eq(vit_tape_status(s.tape), VIT_EINVAL);
        char want[64];
        snprintf(want, sizeof want, "weight %s is NULL", fname[k]);
        ck_assert_msg(strstr(vit_last_error(), want), "'%s' lacks '%s'", vit_last_error(), want);
    }
    /* The MLP's biases may be left out: then the block is the one with zeros. */
    vit_tape_reset(s.tape);
    memset(s.val[7], 0, s.n[7] * sizeof *s.val[7]);
    memset(s.val[9], 0, s.n[9] * sizeof *s.val[9]);
    for (int i = 0; i < 1 + NW; i++)
        in[i] = leaf(&s, i, 0);
    w = weights(in);
    vit_tensor *with = vit_op_block(s.tape, &s.mha, &w, in[0], NULL);
    w.b1 = w.b2 = NULL;
    vit_tensor *without = vit_op_block(s.tape, &s.mha, &w, in[0], NULL);
    ck_assert_ptr_nonnull(with);
    ck_assert_ptr_nonnull(without);
    ck_assert(gc_max_abs_diff(with->data, without->data, with->size) < 1e-12);
    /* A shape that does not agree is refused by the op that reads it. */
    vit_tensor *bad = vit_tape_leaf(s.tape, s.val[6], NULL, 2, (int[]){M, D});
    w.w1 = bad;
    ck_assert_ptr_null(vit_op_block(s.tape, &s.mha, &w, in[0], NULL));
    ck_assert_int_eq(vit_tape_status(s.tape), VIT_EINVAL);
    unmake(&s);
}
END_TEST

/* ---- a learnable score bias (opts.bias) ---------------------------------- */

/* A learnable bias of bh heads, filled from seed. */
static void with_bias(setup *s, int bh, uint64_t seed)
{
    s->lbias_heads = bh;
    s->lbias = gc_zeros((size_t)bh * T * T);
    s->glbias = gc_zeros((size_t)bh * T * T);
    gc_fill(s->lbias, (size_t)bh * T * T, &seed, 1.0);
}

/* The block's output (no gradients) copied out. */
static vit_real *output(setup *s)
{
    vit_tape_reset(s->tape);
    vit_tensor *y = block(s, 0, NULL);
    ck_assert_msg(y != NULL, "%s", vit_last_error());
    vit_real *out = gc_zeros(y->size);
    memcpy(out, y->data, y->size * sizeof *out);
    return out;
}

/* Case _i: 0 a learnable bias per head alone; 1 a learnable one of 1 head
 * and a constant per head; 2 a learnable per head and a constant of 1
 * head.  Each against the block with the sum given as a constant bias,
 * whole and token0_only (against row 0 of the whole block). */
START_TEST(test_block_bias_values)
{
    setup s;
    make(&s, 0);
    const size_t TT = (size_t)T * T;
    with_bias(&s, _i == 1 ? 1 : HEADS, 41);
    const int ch = _i == 0 ? 0 : _i == 1 ? HEADS : 1; /* heads of the constant */
    vit_real *cb = gc_zeros(HEADS * TT), *sum = gc_zeros(HEADS * TT);
    uint64_t seed = 43;
    gc_fill(cb, HEADS * TT, &seed, 1.0);
    if (ch) {
        s.mha.bias = cb;
        s.mha.bias_heads = ch;
    }
    for (int h = 0; h < HEADS; h++)
        for (size_t e = 0; e < TT; e++)
            sum[h * TT + e] = s.lbias[(s.lbias_heads == 1 ? 0 : h) * TT + e]
                            + (ch ? cb[(ch == 1 ? 0 : h) * TT + e] : 0);
    vit_real *got = output(&s);
    vit_tape_reset(s.tape);
    s.token0_only = 1;
    vit_real *got0 = output(&s);
    /* the reference: the constant sum, no learnable bias */
    vit_real *lb = s.lbias;
    s.lbias = NULL;
    s.mha.bias = sum;
    s.mha.bias_heads = HEADS;
    s.token0_only = 0;
    vit_real *want = output(&s);
    s.token0_only = 1; /* the constant per-head bias alone, token 0 */
    vit_real *want0 = output(&s);
    const size_t n = (size_t)B * T * D;
    double e = gc_max_abs_diff(got, want, n);
    ck_assert_msg(e < 1e-12, "case %d: learnable bias vs constant sum: %g", _i, e);
    s.mha.bias = NULL;
    s.token0_only = 0;
    vit_real *plain = output(&s);
    ck_assert_msg(gc_max_abs_diff(plain, want, n) > 1e-3, "the bias changed nothing");
    for (int b = 0; b < B; b++) {
        double e0 = gc_max_abs_diff(got0 + (size_t)b * D, want + (size_t)b * T * D, D);
        double e1 = gc_max_abs_diff(want0 + (size_t)b * D, want + (size_t)b * T * D, D);
        ck_assert_msg(e0 < 1e-12, "case %d item %d: token0_only with opts.bias: %g", _i, b, e0);
        ck_assert_msg(e1 < 1e-12, "item %d: token0_only with a constant bias per head: %g", b,
                      e1);
    }
    s.lbias = lb;
    free(got), free(got0), free(want), free(want0), free(plain), free(cb), free(sum);
    free(s.lbias), free(s.glbias);
    unmake(&s);
}
END_TEST

/* Every weight, x and the learnable bias by central differences: _i bit 0
 * token0_only, bit 1 a learnable bias of one head with a constant one per
 * head (else a learnable one per head alone). */
START_TEST(test_block_bias_gradients)
{
    setup s;
    make(&s, 0);
    s.token0_only = _i & 1;
    with_bias(&s, _i & 2 ? 1 : HEADS, 51);
    vit_real cb[HEADS * T * T];
    uint64_t seed = 53;
    gc_fill(cb, HEADS * T * T, &seed, 1.0);
    if (_i & 2) {
        s.mha.bias = cb;
        s.mha.bias_heads = HEADS;
    }
    vit_tensor *y = block(&s, 1, NULL);
    ck_assert_msg(y != NULL, "%s", vit_last_error());
    ck_assert_int_eq(vit_tape_backward_from(s.tape, y, s.wout), VIT_OK);
    /* A step of 1e-4: b_K's true gradient is 0 (a key bias shifts every
     * score of a row alike), and with the biases' extra sums the rounding
     * noise of a 1e-5 step reached 1.8e-10 there under valgrind's
     * arithmetic (1.8e-6 over the 1e-4 floor); the truncation error of
     * 1e-4 is of order 1e-8. */
    char name[64];
    for (int i = 0; i < 1 + NW; i++) {
        snprintf(name, sizeof name, "block bias %d d%s", _i, names[i]);
        double e = gc_check_ex(name, s.val[i], s.grad[i], s.n[i], loss_of, &s, 1e-4,
                               GC_ABS_FLOOR);
        ck_assert_msg(e <= GC_TOL, "%s: max_rel %.3e", name, e);
    }
    snprintf(name, sizeof name, "block bias %d dbias", _i);
    double big = 0;
    for (int j = 0; j < s.lbias_heads * T * T; j++)
        big = fmax(big, fabs((double)s.glbias[j]));
    ck_assert_msg(big > 1e-3, "%s: gradient too small to check (%g)", name, big);
    double e = gc_check_ex(name, s.lbias, s.glbias, (size_t)s.lbias_heads * T * T, loss_of, &s,
                           1e-4, GC_ABS_FLOOR);
    ck_assert_msg(e <= GC_TOL, "%s: max_rel %.3e", name, e);
    free(s.lbias), free(s.glbias);
    unmake(&s);
}
END_TEST

/* A bias that only holds the right number of values is refused, naming
 * the block, the argument and the shapes. */
START_TEST(test_block_bias_errors)
{
    setup s;
    make(&s, 0);
    static vit_real buf[4 * T * T * 2];
    struct { int ndim, shape[4]; const char *what; } cases[] = {
        {4, {HEADS, T, T, 1},
         "opts->bias must be [1 or heads, T, T] = [*, 5, 5], got [2, 5, 5, 1]"},
        {3, {HEADS, T * T, 1}, "got [2, 25, 1]"},
        {3, {3, T, T}, "3 heads"},
        {2, {HEADS * T, T}, "got [10, 5]"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        vit_tape_reset(s.tape);
        vit_tensor *in[1 + NW];
        for (int i = 0; i < 1 + NW; i++)
            in[i] = leaf(&s, i, 0);
        vit_block_weights w = weights(in);
        vit_block_opts o = {.bias = vit_tape_leaf(s.tape, buf, NULL, cases[k].ndim,
                                                  cases[k].shape)};
        ck_assert_ptr_null(vit_op_block(s.tape, &s.mha, &w, in[0], &o));
        ck_assert_int_eq(vit_tape_status(s.tape), VIT_EINVAL);
        ck_assert_msg(strstr(vit_last_error(), "vit_op_block")
                          && strstr(vit_last_error(), cases[k].what),
                      "'%s' lacks '%s'", vit_last_error(), cases[k].what);
    }
    unmake(&s);
}
END_TEST

static Suite *block_suite(void)
{
    Suite *s = suite_create("block");
    TCase *tc = tcase_create("block");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_block_values, 0, 2);
    tcase_add_loop_test(tc, test_block_gradients, 0, 4);
    tcase_add_test(tc, test_block_drop_path_values);
    tcase_add_loop_test(tc, test_block_drop_path_gradients, 0, 2);
    tcase_add_test(tc, test_block_errors);
    tcase_add_loop_test(tc, test_block_bias_values, 0, 3);
    tcase_add_loop_test(tc, test_block_bias_gradients, 0, 4);
    tcase_add_test(tc, test_block_bias_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(block_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

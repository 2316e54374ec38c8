/*
 * tests/test_params.c - named parameter tensors (vit/params.h), built
 * against both libraries: float64 (test_params) and float32
 * (test_params_f32, the precision the ViT trains in, where the order of
 * the init's rounding shows).
 *
 * The ViT's tensor list, rebuilt here by hand from src/model/model.c's layout(),
 * must give vit_model's offsets, groups and, from the same seed, bitwise
 * its initial values: the model is to move onto vit_params.  Then the init
 * kinds against the generator run by hand, the groups through
 * vit_adamw_step, tape leaves through a backward checked by hand, and the
 * bad inputs with their messages.
 */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file_util.h"
#include "vit/attention.h"
#include "vit/model.h"
#include "vit/params.h"

/* Tolerance of computed (not copied or drawn) values: a few ulps. */
#define TOL (sizeof(vit_real) == sizeof(double) ? 1e-14 : 1e-6)

/* ---- the ViT's layout, as src/model/model.c's layout() lays it out ---------- */

/* One row of the block's tensor list: name suffix, the two dimensions as
 * codes (D, M, T for 3D, or 0 for a 1-D tensor), decay and init.  The
 * attention's input projections are one W_QKV [D, 3D] = [W_Q | W_K | W_V]
 * with biases b_QKV [3D], as vit_mha lays out self-attention. */
typedef struct row {
    const char *suffix;
    char d0, d1;
    int decay, init;
} row;

static const row block_rows[] = {
    {"ln1.g", 'D', 0, 0, VIT_INIT_ONE},     {"ln1.b", 'D', 0, 0, VIT_INIT_ZERO},
    {"attn.w_qkv", 'D', 'T', 1, VIT_INIT_NORMAL}, {"attn.w_o", 'D', 'D', 1, VIT_INIT_NORMAL},
    {"attn.b_qkv", 'T', 0, 0, VIT_INIT_ZERO}, {"attn.b_o", 'D', 0, 0, VIT_INIT_ZERO},
    {"ln2.g", 'D', 0, 0, VIT_INIT_ONE},     {"ln2.b", 'D', 0, 0, VIT_INIT_ZERO},
    {"mlp.w1", 'D', 'M', 1, VIT_INIT_NORMAL}, {"mlp.b1", 'M', 0, 0, VIT_INIT_ZERO},
    {"mlp.w2", 'M', 'D', 1, VIT_INIT_NORMAL}, {"mlp.b2", 'D', 0, 0, VIT_INIT_ZERO},
};

static int dim_of(char code, const vit_config *c)
{
    return code == 'D' ? c->dim : code == 'M' ? c->mlp : code == 'T' ? 3 * c->dim : 0;
}

/* Adds a 1-D (d1 == 0) or 2-D tensor and fails the test if that fails. */
static int add2(vit_params *p, const char *name, int d0, int d1, int decay, int init,
                double std)
{
    int shape[2] = {d0, d1};
    int ix = vit_params_add(p, name, d1 ? 2 : 1, shape, init, std, decay);
    ck_assert_msg(ix >= 0, "%s: %s", name, vit_last_error());
    return ix;
}

/* The ViT of config c on a new vit_params (not allocated). */
static vit_params *vit_layout(const vit_config *c)
{
    vit_params *p = vit_params_new();
    ck_assert_ptr_nonnull(p);
    /* Tokens: the patch grid of the padded image at the stride (0: the
     * patch side, no overlap), plus the class token. */
    int stride = c->patch_stride ? c->patch_stride : c->patch;
    int gh = (c->image_height + 2 * c->patch_pad - c->patch) / stride + 1;
    int gw = (c->image_width + 2 * c->patch_pad - c->patch) / stride + 1;
    int D = c->dim, T = gh * gw + 1;
    double s = c->init_std;
    add2(p, "patch.w", c->patch * c->patch * c->channels, D, 1, VIT_INIT_NORMAL, s);
    add2(p, "patch.b", D, 0, 0, VIT_INIT_ZERO, 0);
    add2(p, "cls", D, 0, 0, VIT_INIT_ZERO, 0);
    add2(p, "pos", T, D, 0, VIT_INIT_NORMAL, s);
    for (int l = 0; l < c->depth; l++)
        for (size_t r = 0; r < sizeof block_rows / sizeof block_rows[0]; r++) {
            const row *w = &block_rows[r];
            char name[VIT_PARAMS_NAME_MAX + 1];
            snprintf(name, sizeof name, "blocks.%d.%s", l, w->suffix);
            add2(p, name, dim_of(w->d0, c), dim_of(w->d1, c), w->decay, w->init, s);
        }
    add2(p, "ln.g", D, 0, 0, VIT_INIT_ONE, 0);
    add2(p, "ln.b", D, 0, 0, VIT_INIT_ZERO, 0);
    add2(p, "head.w", D, c->classes, 1, VIT_INIT_NORMAL, s);
    add2(p, "head.b", c->classes, 0, 0, VIT_INIT_ZERO, 0);
    return p;
}

/* Layout, groups and init of vit_params against vit_model for config c. */
static void check_against_model(const vit_config *c, uint64_t seed)
{
    vit_model *m = vit_model_new(c);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    vit_params *p = vit_layout(c);

    int nt = vit_model_tensor_count(m);
    ck_assert_int_eq(vit_params_tensor_count(p), nt);
    ck_assert_uint_eq(vit_params_count(p), vit_model_param_count(m));
    for (int i = 0; i < nt; i++) {
        const vit_model_tensor *mt = vit_model_tensor_at(m, i);
        const vit_param_tensor *pt = vit_params_tensor(p, i);
        ck_assert_str_eq(pt->name, mt->name);
        ck_assert_int_eq(pt->ndim, mt->ndim);
        for (int d = 0; d < VIT_TENSOR_MAX_DIMS; d++)
            ck_assert_int_eq(pt->shape[d], mt->shape[d]);
        ck_assert_uint_eq(pt->offset, mt->offset);
        ck_assert_uint_eq(pt->size, mt->size);
        ck_assert_int_eq(vit_params_find(p, mt->name), i);
    }

    int mg, pg;
    const vit_param_group *gm = vit_model_groups(m, &mg);
    const vit_param_group *gp = vit_params_groups(p, &pg);
    ck_assert_int_eq(pg, mg);
    for (int g = 0; g < mg; g++) {
        ck_assert_uint_eq(gp[g].offset, gm[g].offset);
        ck_assert_uint_eq(gp[g].count, gm[g].count);
        ck_assert_int_eq(gp[g].decay, gm[g].decay);
    }

    ck_assert_int_eq(vit_params_alloc(p), VIT_OK);
    vit_rng rm, rp;
    vit_rng_seed(&rm, seed);
    vit_rng_seed(&rp, seed);
    vit_model_init(m, &rm);
    ck_assert_int_eq(vit_params_init(p, &rp), VIT_OK);
    size_t n = vit_params_count(p);
    const vit_real *vm = vit_model_params(m), *vp = vit_params_values(p);
    size_t ones = 0, drawn = 0;
    for (size_t j = 0; j < n; j++) {
        ck_assert_msg(memcmp(&vm[j], &vp[j], sizeof vm[j]) == 0,
                      "value %zu: model %.17g, params %.17g", j, (double)vm[j], (double)vp[j]);
        ones += vp[j] == 1;
        drawn += vp[j] != 0 && vp[j] != 1;
    }
    /* Both consumed the same draws, and the init was not trivial. */
    ck_assert_mem_eq(&rm, &rp, sizeof rm);
    ck_assert_uint_eq(ones, (size_t)(2 * c->depth + 1) * (size_t)c->dim);
    ck_assert_uint_gt(drawn, n / 2);

    vit_params_free(p);
    vit_model_free(m);
}

START_TEST(test_digits_layout_matches_model)
{
    vit_config c;
    vit_config_default(&c);
    vit_train_config tc; /* the default recipe's seed */
    vit_train_config_default(&tc);
    check_against_model(&c, tc.seed);
    check_against_model(&c, 20261129);
}
END_TEST

START_TEST(test_other_shape_matches_model)
{
    /* Every dimension different, so a D swapped for M or T shows. */
    vit_config c;
    vit_config_default(&c);
    c.image_height = 12, c.image_width = 8, c.channels = 3, c.classes = 7;
    c.patch = 4, c.dim = 24, c.depth = 2, c.heads = 3, c.mlp = 40, c.init_std = 0.37;
    c.patch_stride = 0, c.patch_pad = 0; /* a 3x2 grid: T = 7, apart from every other size */
    check_against_model(&c, 5);
}
END_TEST

/* ---- init kinds -------------------------------------------------------- */

START_TEST(test_init_kinds_by_hand)
{
    vit_params *p = vit_params_new();
    int z = add2(p, "z", 3, 0, 0, VIT_INIT_ZERO, 5.0);
    int o = add2(p, "o", 2, 2, 0, VIT_INIT_ONE, 5.0);
    int nrm = add2(p, "n", 40, 25, 1, VIT_INIT_NORMAL, 0.5);
    int u = add2(p, "u", 500, 0, 1, VIT_INIT_UNIFORM, 0.25);
    ck_assert_double_eq(vit_params_tensor(p, z)->scale, 0);
    ck_assert_double_eq(vit_params_tensor(p, nrm)->scale, 0.5);
    ck_assert_int_eq(vit_params_alloc(p), VIT_OK);
    size_t n = vit_params_count(p);
    ck_assert_uint_eq(n, 3 + 4 + 1000 + 500);
    vit_real *v = vit_params_values(p), *g = vit_params_grads(p);
    for (size_t j = 0; j < n; j++)
        v[j] = 7, g[j] = 3;

    vit_rng r, ref;
    vit_rng_seed(&r, 42);
    ref = r;
    ck_assert_int_eq(vit_params_init(p, &r), VIT_OK);
    for (int j = 0; j < 3; j++)
        ck_assert_double_eq(vit_params_value_of(p, z)[j], 0);
    for (int j = 0; j < 4; j++)
        ck_assert_double_eq(vit_params_value_of(p, o)[j], 1);
    int redraws = 0;
    for (int j = 0; j < 1000; j++) {
        double zz;
        while (fabs(zz = vit_rng_normal(&ref)) > 2)
            redraws++;
        ck_assert_double_eq(vit_params_value_of(p, nrm)[j], (vit_real)(zz * 0.5));
    }
    /* P(|z| > 2) = 4.55%: about 48 of 1000 are redrawn; the cut is used. */
    ck_assert_int_gt(redraws, 15);
    double lo = 1, hi = -1;
    for (int j = 0; j < 500; j++) {
        double x = vit_params_value_of(p, u)[j];
        ck_assert_double_eq(x, (vit_real)((2 * vit_rng_uniform(&ref) - 1) * 0.25));
        lo = fmin(lo, x), hi = fmax(hi, x);
    }
    ck_assert(lo >= -0.25 && lo < -0.24 && hi < 0.25 && hi > 0.24);
    ck_assert_mem_eq(&r, &ref, sizeof r);
    for (size_t j = 0; j < n; j++)
        ck_assert_double_eq(g[j], 3); /* gradients untouched */

    vit_params_zero_grads(p);
    for (size_t j = 0; j < n; j++)
        ck_assert_double_eq(g[j], 0);
    vit_params_free(p);
}
END_TEST

START_TEST(test_buffers_aligned_and_zeroed)
{
    vit_params *p = vit_params_new();
    add2(p, "a", 3, 0, 0, VIT_INIT_ONE, 0);
    add2(p, "b", 5, 7, 1, VIT_INIT_ONE, 0);
    int shape4[4] = {2, 1, 3, 2};
    ck_assert_int_eq(vit_params_add(p, "c", 4, shape4, VIT_INIT_ONE, 0, 0), 2);
    ck_assert_ptr_null(vit_params_values(p));
    ck_assert_ptr_null(vit_params_grads(p));
    ck_assert_ptr_null(vit_params_value_of(p, 0));
    ck_assert_int_eq(vit_params_alloc(p), VIT_OK);
    vit_real *v = vit_params_values(p), *g = vit_params_grads(p);
    ck_assert_uint_eq((uintptr_t)v % 64, 0);
    ck_assert_uint_eq((uintptr_t)g % 64, 0);
    ck_assert_uint_eq(vit_params_count(p), 3 + 35 + 12);
    for (size_t j = 0; j < vit_params_count(p); j++) {
        ck_assert_double_eq(v[j], 0);
        ck_assert_double_eq(g[j], 0);
    }
    ck_assert_ptr_eq(vit_params_value_of(p, 1), v + 3);
    ck_assert_ptr_eq(vit_params_grad_of(p, 2), g + 38);
    const vit_param_tensor *c = vit_params_tensor(p, 2);
    ck_assert_int_eq(c->ndim, 4);
    ck_assert_int_eq(c->shape[2], 3);
    ck_assert_uint_eq(c->size, 12);
    ck_assert_int_eq(vit_params_tensor(p, 1)->shape[2], 0);
    ck_assert_int_eq(vit_params_tensor(p, 1)->decay, 1);
    vit_params_free(p);
}
END_TEST

/* ---- groups ------------------------------------------------------------ */

START_TEST(test_groups_merge_runs)
{
    /* decay 1 1 0 1 0 0 (any nonzero flag counts as 1) -> 4 groups. */
    static const int decay[6] = {1, 5, 0, -1, 0, 0};
    static const int size[6] = {6, 4, 3, 10, 2, 5};
    vit_params *p = vit_params_new();
    for (int i = 0; i < 6; i++) {
        char name[8];
        snprintf(name, sizeof name, "t%d", i);
        add2(p, name, size[i], 0, decay[i], VIT_INIT_ONE, 0);
    }
    int ng = -1;
    const vit_param_group *g = vit_params_groups(p, &ng);
    ck_assert_int_eq(ng, 4);
    const vit_param_group want[4] = {{0, 10, 1}, {10, 3, 0}, {13, 10, 1}, {23, 7, 0}};
    for (int i = 0; i < 4; i++) {
        ck_assert_uint_eq(g[i].offset, want[i].offset);
        ck_assert_uint_eq(g[i].count, want[i].count);
        ck_assert_int_eq(g[i].decay, want[i].decay);
    }
    ck_assert_ptr_eq(vit_params_groups(p, NULL), g);

    /* The groups drive AdamW: with zero gradients only decayed values move,
     * each by the factor 1 - lr * wd. */
    ck_assert_int_eq(vit_params_alloc(p), VIT_OK);
    vit_rng r;
    vit_rng_seed(&r, 1);
    ck_assert_int_eq(vit_params_init(p, &r), VIT_OK);
    vit_adamw opt;
    ck_assert_int_eq(vit_adamw_init(&opt, vit_params_count(p), 0.9, 0.999, 1e-8, 0.5), VIT_OK);
    ck_assert_int_eq(vit_adamw_step(&opt, vit_params_values(p), vit_params_grads(p), g, ng, 0.1),
                     VIT_OK);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < size[i]; j++)
            ck_assert_double_eq_tol(vit_params_value_of(p, i)[j], decay[i] ? 0.95 : 1.0, TOL);
    vit_adamw_free(&opt);
    vit_params_free(p);
}
END_TEST

/* ---- tape leaves ------------------------------------------------------- */

START_TEST(test_leaves_carry_gradients)
{
    /* logits = x W + b for one row, cross-entropy against label 1:
     * dL/db = softmax - onehot, dL/dW = x^T (softmax - onehot). */
    vit_params *p = vit_params_new();
    int w = add2(p, "w", 3, 2, 1, VIT_INIT_NORMAL, 1.0);
    int b = add2(p, "b", 2, 0, 0, VIT_INIT_ZERO, 0);
    ck_assert_int_eq(vit_params_alloc(p), VIT_OK);
    const vit_real W[6] = {0.5, -1, 2, 0.25, -0.75, 1.5}, B[2] = {0.1, -0.2};
    memcpy(vit_params_value_of(p, w), W, sizeof W);
    memcpy(vit_params_value_of(p, b), B, sizeof B);
    vit_real x[3] = {1, -2, 0.5};
    vit_tape *tape = vit_tape_new();
    vit_tensor *xw = vit_tape_leaf(tape, x, NULL, 2, (int[]){1, 3});
    vit_tensor *lw = vit_params_leaf(p, tape, w, 1), *lb = vit_params_leaf(p, tape, b, 1);
    ck_assert_ptr_nonnull(lw);
    ck_assert_ptr_eq(lw->data, vit_params_value_of(p, w));
    ck_assert_ptr_eq(lw->grad, vit_params_grad_of(p, w));
    ck_assert_int_eq(lw->ndim, 2);
    ck_assert_int_eq(lw->shape[1], 2);
    vit_tensor *logits = vit_op_linear(tape, xw, lw, lb);
    vit_tensor *loss = vit_op_cross_entropy(tape, logits, (int[]){1}, 0, NULL);
    ck_assert_int_eq(vit_tape_backward(tape, loss), VIT_OK);

    double z0 = 1 * 0.5 - 2 * 2 + 0.5 * -0.75 + 0.1, z1 = 1 * -1 - 2 * 0.25 + 0.5 * 1.5 - 0.2;
    double p0 = 1 / (1 + exp(z1 - z0)), d[2] = {p0, (1 - p0) - 1};
    const vit_real *gb = vit_params_grad_of(p, b), *gw = vit_params_grad_of(p, w);
    for (int k = 0; k < 2; k++) {
        ck_assert_double_eq_tol(gb[k], d[k], TOL);
        for (int i = 0; i < 3; i++)
            ck_assert_double_eq_tol(gw[i * 2 + k], x[i] * d[k], TOL);
    }
    ck_assert_double_gt(fabs(gb[0]), 0.01);

    /* Without grad: a constant over the same values. */
    vit_tape_reset(tape);
    vit_tensor *c = vit_params_leaf(p, tape, b, 0);
    ck_assert_ptr_eq(c->data, vit_params_value_of(p, b));
    ck_assert_ptr_null(c->grad);
    vit_tape_free(tape);
    vit_params_free(p);
}
END_TEST

START_TEST(test_leaf_range_is_attention_weights)
{
    vit_config c;
    vit_config_default(&c);
    vit_params *p = vit_layout(&c);
    ck_assert_int_eq(vit_params_alloc(p), VIT_OK);
    int first = vit_params_find(p, "blocks.2.attn.w_qkv");
    ck_assert_int_eq(vit_params_find(p, "blocks.2.attn.b_o"), first + 3);
    vit_tape *tape = vit_tape_new();
    vit_tensor *a = vit_params_leaf_range(p, tape, first, 4, 1);
    ck_assert_ptr_nonnull(a);
    vit_mha mha = {.batch = 1, .n_q = 17, .n_k = 17, .d_model = c.dim, .heads = c.heads,
                   .has_bias = 1};
    ck_assert_int_eq(a->ndim, 1);
    ck_assert_int_eq(a->shape[0], (int)vit_mha_param_count(&mha));
    ck_assert_uint_eq(a->size, 4u * 64 * 64 + 4 * 64);
    ck_assert_ptr_eq(a->data, vit_params_value_of(p, first));
    ck_assert_ptr_eq(a->grad, vit_params_grad_of(p, first));
    /* The last tensor alone, through the range. */
    int last = vit_params_tensor_count(p) - 1;
    vit_tensor *h = vit_params_leaf_range(p, tape, last, 1, 0);
    ck_assert_int_eq(h->shape[0], c.classes);
    ck_assert_ptr_null(h->grad);
    ck_assert_int_eq(vit_tape_status(tape), VIT_OK);
    vit_tape_free(tape);
    vit_params_free(p);
}
END_TEST

/* ---- bad input --------------------------------------------------------- */

/* The call's result is `code` and the message holds both strings. */
#define EXPECT_FAIL(call, code, s1, s2)                                                     \
    do {                                                                                    \
        ck_assert_int_eq((call), (code));                                                   \
        ck_assert_msg(strstr(vit_last_error(), s1) && strstr(vit_last_error(), s2),          \
                      "message \"%s\" lacks \"%s\" or \"%s\"", vit_last_error(), s1, s2);   \
    } while (0)

START_TEST(test_add_bad_inputs)
{
    vit_params *p = vit_params_new();
    int one[1] = {4}, zero[2] = {3, 0}, neg[1] = {-2};
    ck_assert_int_eq(vit_params_add(p, "w", 1, one, VIT_INIT_NORMAL, 0.1, 1), 0);
    const char *fn = "vit_params_add";
    EXPECT_FAIL(vit_params_add(NULL, "x", 1, one, 0, 0, 0), VIT_EINVAL, fn, "p is NULL");
    EXPECT_FAIL(vit_params_add(p, NULL, 1, one, 0, 0, 0), VIT_EINVAL, fn, "name is NULL");
    EXPECT_FAIL(vit_params_add(p, "x", 1, NULL, 0, 0, 0), VIT_EINVAL, fn, "shape is NULL");
    EXPECT_FAIL(vit_params_add(p, "", 1, one, 0, 0, 0), VIT_EINVAL, fn, "empty");
    EXPECT_FAIL(vit_params_add(p, "w", 1, one, 0, 0, 0), VIT_EINVAL, "\"w\"",
                "already used by tensor 0");
    EXPECT_FAIL(vit_params_add(p, "x", 0, one, 0, 0, 0), VIT_EINVAL, "\"x\"", "ndim");
    EXPECT_FAIL(vit_params_add(p, "x", 5, (int[5]){1, 1, 1, 1, 1}, 0, 0, 0), VIT_EINVAL, "\"x\"",
                "ndim must be 1..4, got 5");
    EXPECT_FAIL(vit_params_add(p, "x", 2, zero, 0, 0, 0), VIT_EINVAL, "\"x\"",
                "shape[1] = 0 must be positive");
    EXPECT_FAIL(vit_params_add(p, "x", 1, neg, 0, 0, 0), VIT_EINVAL, "\"x\"", "shape[0] = -2");
    EXPECT_FAIL(vit_params_add(p, "x", 1, one, 5, 0, 0), VIT_EINVAL, "\"x\"", "unknown init 5");
    EXPECT_FAIL(vit_params_add(p, "x", 1, one, VIT_INIT_CONST, NAN, 0), VIT_EINVAL, "\"x\"",
                "not finite");
    EXPECT_FAIL(vit_params_add(p, "x", 1, one, -1, 0, 0), VIT_EINVAL, "\"x\"", "unknown init");
    EXPECT_FAIL(vit_params_add(p, "x", 1, one, VIT_INIT_NORMAL, -0.1, 0), VIT_EINVAL, "\"x\"",
                "scale");
    EXPECT_FAIL(vit_params_add(p, "x", 1, one, VIT_INIT_UNIFORM, NAN, 0), VIT_EINVAL, "\"x\"",
                "scale");
    EXPECT_FAIL(vit_params_add(p, "x", 1, one, VIT_INIT_NORMAL, INFINITY, 0), VIT_EINVAL,
                "\"x\"", "scale");

    char name[VIT_PARAMS_NAME_MAX + 2];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = 0;
    EXPECT_FAIL(vit_params_add(p, name, 1, one, 0, 0, 0), VIT_EINVAL, fn, "longer than 63");
    name[VIT_PARAMS_NAME_MAX] = 0; /* exactly the limit: accepted */
    ck_assert_int_eq(vit_params_add(p, name, 1, one, 0, 0, 0), 1);
    ck_assert_int_eq(vit_params_find(p, name), 1);

    /* Sizes: one tensor whose product overflows, then a total that would. */
    int huge[4] = {INT_MAX, INT_MAX, INT_MAX, INT_MAX};
    EXPECT_FAIL(vit_params_add(p, "huge", 4, huge, 0, 0, 0), VIT_ENOMEM, "\"huge\"", "overflow");
    /* 2^63 bytes each: the first fits (it is never allocated), two do not. */
    int per = (int)(sizeof(double) / sizeof(vit_real));
    int big[3] = {1 << 30, 1 << 30, per};
    ck_assert_int_eq(vit_params_add(p, "big", 3, big, 0, 0, 0), 2);
    EXPECT_FAIL(vit_params_add(p, "big2", 3, big, 0, 0, 0), VIT_ENOMEM, "\"big2\"", "overflow");

    /* Failed adds changed nothing; scale NaN is fine where it is unused. */
    ck_assert_int_eq(vit_params_tensor_count(p), 3);
    ck_assert_uint_eq(vit_params_count(p), 8 + ((size_t)per << 60));
    ck_assert_int_eq(vit_params_find(p, "x"), -1);
    ck_assert_int_eq(vit_params_add(p, "x", 1, one, VIT_INIT_ZERO, NAN, 0), 3);
    ck_assert_double_eq(vit_params_tensor(p, 3)->scale, 0);
    vit_params_free(p);
}
END_TEST

START_TEST(test_lifecycle_errors)
{
    vit_params *p = vit_params_new();
    vit_rng r;
    vit_rng_seed(&r, 3);
    int one[1] = {4};
    EXPECT_FAIL(vit_params_alloc(NULL), VIT_EINVAL, "vit_params_alloc", "p is NULL");
    EXPECT_FAIL(vit_params_alloc(p), VIT_EINVAL, "vit_params_alloc", "no tensors");
    ck_assert_int_eq(vit_params_add(p, "w", 1, one, VIT_INIT_NORMAL, 1, 1), 0);
    EXPECT_FAIL(vit_params_init(p, &r), VIT_EINVAL, "vit_params_init", "before vit_params_alloc");
    ck_assert_int_eq(vit_params_alloc(p), VIT_OK);
    EXPECT_FAIL(vit_params_alloc(p), VIT_EINVAL, "vit_params_alloc", "already allocated");
    EXPECT_FAIL(vit_params_add(p, "late", 1, one, 0, 0, 0), VIT_EINVAL, "\"late\"",
                "after vit_params_alloc");
    EXPECT_FAIL(vit_params_init(NULL, &r), VIT_EINVAL, "vit_params_init", "p is NULL");
    vit_rng before = r;
    EXPECT_FAIL(vit_params_init(p, NULL), VIT_EINVAL, "vit_params_init", "rng is NULL");
    ck_assert_mem_eq(&r, &before, sizeof r);
    ck_assert_int_eq(vit_params_tensor_count(p), 1);
    ck_assert_uint_eq(vit_params_count(p), 4);

    /* Accessors on NULL or out of range: NULL, 0 or -1, no crash. */
    int n = 9;
    ck_assert_ptr_null(vit_params_groups(NULL, &n));
    ck_assert_int_eq(n, 0);
    ck_assert_uint_eq(vit_params_count(NULL), 0);
    ck_assert_int_eq(vit_params_tensor_count(NULL), 0);
    ck_assert_ptr_null(vit_params_tensor(p, 1));
    ck_assert_ptr_null(vit_params_tensor(p, -1));
    ck_assert_ptr_null(vit_params_value_of(p, 1));
    ck_assert_ptr_null(vit_params_grad_of(NULL, 0));
    ck_assert_ptr_null(vit_params_values(NULL));
    ck_assert_int_eq(vit_params_find(p, NULL), -1);
    ck_assert_int_eq(vit_params_find(NULL, "w"), -1);
    vit_params_zero_grads(NULL);
    vit_params_free(NULL);

    vit_params *empty = vit_params_new();
    ck_assert_ptr_null(vit_params_groups(empty, &n));
    ck_assert_int_eq(n, 0);
    vit_params_zero_grads(empty);
    vit_params_free(empty);
    vit_params_free(p);
}
END_TEST

START_TEST(test_leaf_errors_reach_tape)
{
    vit_params *p = vit_params_new();
    add2(p, "a", 3, 0, 0, VIT_INIT_ONE, 0);
    add2(p, "b", 2, 2, 1, VIT_INIT_ONE, 0);
    vit_tape *tape = vit_tape_new();
    const char *fl = "vit_params_leaf", *fr = "vit_params_leaf_range";

    ck_assert_ptr_null(vit_params_leaf(p, tape, 0, 1));
    ck_assert_str_eq(vit_last_error(), "vit_params_leaf: called before vit_params_alloc");
    ck_assert_int_eq(vit_tape_status(tape), VIT_EINVAL);
    ck_assert_int_eq(vit_params_alloc(p), VIT_OK);

    struct { int first, count; const char *what; } bad[] = {
        {-1, 1, "tensors -1..-1 are outside 0..1"}, {2, 1, "tensors 2..2 are outside 0..1"},
        {1, 2, "tensors 1..2 are outside 0..1"},    {0, 0, "count must be positive, got 0"},
        {INT_MAX, 2, "outside 0..1"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        vit_tape_reset(tape);
        ck_assert_ptr_null(vit_params_leaf_range(p, tape, bad[k].first, bad[k].count, 1));
        ck_assert_msg(strstr(vit_last_error(), fr) && strstr(vit_last_error(), bad[k].what),
                      "case %zu: %s", k, vit_last_error());
        ck_assert_int_eq(vit_tape_status(tape), VIT_EINVAL);
        /* The next op on the tape fails and keeps the message. */
        char msg[256];
        snprintf(msg, sizeof msg, "%s", vit_last_error());
        ck_assert_ptr_null(vit_op_gelu(tape, vit_params_leaf(p, tape, 0, 1)));
        ck_assert_str_eq(vit_last_error(), msg);
    }
    vit_tape_reset(tape);
    EXPECT_FAIL(vit_params_leaf(p, tape, 2, 0) == NULL, 1, fl, "tensors 2..2 are outside 0..1");
    ck_assert_int_eq(vit_tape_status(tape), VIT_EINVAL);
    vit_tape_reset(tape);
    EXPECT_FAIL(vit_params_leaf(NULL, tape, 0, 0) == NULL, 1, fl, "p is NULL");
    ck_assert_int_eq(vit_tape_status(tape), VIT_EINVAL);
    EXPECT_FAIL(vit_params_leaf(p, NULL, 0, 0) == NULL, 1, fl, "tape is NULL");
    EXPECT_FAIL(vit_params_leaf_range(p, NULL, 0, 1, 0) == NULL, 1, fr, "tape is NULL");

    /* A good leaf after a reset: the range covers both tensors. */
    vit_tape_reset(tape);
    vit_tensor *all = vit_params_leaf_range(p, tape, 0, 2, 1);
    ck_assert_int_eq(all->shape[0], 7);
    ck_assert_int_eq(vit_tape_status(tape), VIT_OK);
    vit_tape_free(tape);
    vit_params_free(p);
}
END_TEST

/* ---- files: vit_params_save / vit_params_load ---------------------------- */

/* A small user model: two tensors of other ranks than the ViT's. */
static vit_params *file_model(const char *w_name, int w0, int w1, int with_extra)
{
    vit_params *p = vit_params_new();
    ck_assert_ptr_nonnull(p);
    ck_assert_int_ge(vit_params_add(p, w_name, 2, (int[]){w0, w1}, VIT_INIT_NORMAL, 0.5, 1), 0);
    ck_assert_int_ge(vit_params_add(p, "rel.table", 3, (int[]){2, 9, 3}, VIT_INIT_UNIFORM, 1, 0),
                     0);
    if (with_extra)
        ck_assert_int_ge(vit_params_add(p, "head.b", 1, (int[]){4}, VIT_INIT_ONE, 0, 0), 0);
    ck_assert_int_eq(vit_params_alloc(p), VIT_OK);
    return p;
}

/* Saved, then loaded into a second object of the same tensors added in
 * another order: the values come back (float32 values exactly; float64
 * ones rounded to float), with the note; gradients untouched. */
START_TEST(test_save_load_roundtrip)
{
    const char *path = fu_path("model.params");
    const int files_before = fu_count_entries(fu_suite_dir);
    vit_rng rng;
    vit_rng_seed(&rng, 5);
    vit_params *a = file_model("fc.w", 4, 6, 1);
    ck_assert_int_eq(vit_params_init(a, &rng), VIT_OK);
    ck_assert_int_eq(vit_params_save(a, path, "mlp: 6 -> 4, relpos 3"), VIT_OK);

    vit_params *b = vit_params_new();
    ck_assert_int_ge(vit_params_add(b, "head.b", 1, (int[]){4}, VIT_INIT_ZERO, 0, 0), 0);
    ck_assert_int_ge(vit_params_add(b, "rel.table", 3, (int[]){2, 9, 3}, VIT_INIT_ZERO, 0, 0), 0);
    ck_assert_int_ge(vit_params_add(b, "fc.w", 2, (int[]){4, 6}, VIT_INIT_ZERO, 0, 1), 0);
    ck_assert_int_eq(vit_params_alloc(b), VIT_OK);
    vit_real *g = vit_params_grads(b);
    for (size_t i = 0; i < vit_params_count(b); i++) g[i] = 7;
    char *note = NULL;
    ck_assert_int_eq(vit_params_load(b, path, &note), VIT_OK);
    ck_assert_str_eq(note, "mlp: 6 -> 4, relpos 3");
    free(note);
    for (int i = 0; i < vit_params_tensor_count(a); i++) {
        const vit_param_tensor *t = vit_params_tensor(a, i);
        const vit_real *x = vit_params_value_of(a, i);
        const vit_real *y = vit_params_value_of(b, vit_params_find(b, t->name));
        for (size_t j = 0; j < t->size; j++)
            ck_assert_msg(y[j] == (vit_real)(float)x[j], "%s[%zu]: %g loaded, %g saved", t->name,
                          j, (double)y[j], (double)x[j]);
    }
    ck_assert(vit_params_value_of(b, 0)[0] == 1); /* head.b: VIT_INIT_ONE, not the zeros */
    for (size_t i = 0; i < vit_params_count(b); i++) ck_assert(g[i] == 7);
    /* A second save replaces the file whole and leaves no temporary. */
    ck_assert_int_eq(vit_params_save(a, path, NULL), VIT_OK);
    ck_assert_int_eq(vit_params_load(b, path, &note), VIT_OK);
    ck_assert_str_eq(note, "");
    free(note);
    ck_assert_int_eq(fu_count_entries(fu_suite_dir), files_before + 1);
    vit_params_free(a);
    vit_params_free(b);
}
END_TEST

/* Every difference of names and shapes is named, and nothing is loaded. */
START_TEST(test_load_mismatch_named)
{
    const char *path = fu_path("other.params");
    vit_params *a = file_model("fc.w", 4, 6, 1);
    vit_real *v = vit_params_values(a);
    for (size_t i = 0; i < vit_params_count(a); i++) v[i] = (vit_real)i;
    ck_assert_int_eq(vit_params_save(a, path, NULL), VIT_OK);
    /* fc.w transposed (same count), head.b absent, proj.w not in the file */
    vit_params *b = vit_params_new();
    ck_assert_int_ge(vit_params_add(b, "fc.w", 2, (int[]){6, 4}, VIT_INIT_ZERO, 0, 1), 0);
    ck_assert_int_ge(vit_params_add(b, "rel.table", 2, (int[]){18, 3}, VIT_INIT_ZERO, 0, 0), 0);
    ck_assert_int_ge(vit_params_add(b, "proj.w", 1, (int[]){4}, VIT_INIT_ZERO, 0, 0), 0);
    ck_assert_int_eq(vit_params_alloc(b), VIT_OK);
    char *note = (char *)"unchanged?";
    ck_assert_int_eq(vit_params_load(b, path, &note), VIT_EFORMAT);
    ck_assert_ptr_null(note);
    const char *msg = vit_last_error();
    static const char *const want[] = {
        "vit_params_load", "4 differences",
        "'fc.w' is [4, 6] in the file, [6, 4] in the model",
        "'rel.table' is [2, 9, 3] in the file, [18, 3] in the model",
        "'proj.w' is missing from the file",
        "'head.b' is in the file but not in the model"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        ck_assert_msg(strstr(msg, want[i]), "'%s' lacks '%s'", msg, want[i]);
    for (size_t i = 0; i < vit_params_count(b); i++)
        ck_assert(vit_params_values(b)[i] == 0);
    vit_params_free(a);
    vit_params_free(b);
}
END_TEST

START_TEST(test_save_load_errors)
{
    vit_params *open = vit_params_new();
    ck_assert_int_ge(vit_params_add(open, "w", 1, (int[]){3}, VIT_INIT_ZERO, 0, 0), 0);
    ck_assert_int_eq(vit_params_save(open, fu_path("x"), NULL), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "not allocated"));
    ck_assert_int_eq(vit_params_load(open, fu_path("x"), NULL), VIT_EINVAL);
    ck_assert_int_eq(vit_params_alloc(open), VIT_OK);
    ck_assert_int_eq(vit_params_save(NULL, fu_path("x"), NULL), VIT_EINVAL);
    ck_assert_int_eq(vit_params_save(open, NULL, NULL), VIT_EINVAL);
    ck_assert_int_eq(vit_params_load(NULL, fu_path("x"), NULL), VIT_EINVAL);
    /* a missing file, a folder that does not exist, a damaged file */
    ck_assert_int_eq(vit_params_load(open, fu_path("none"), NULL), VIT_EIO);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "vit_params_load"));
    ck_assert_int_eq(vit_params_save(open, fu_path("no/such/dir/x"), NULL), VIT_EIO);
    const char *path = fu_path("w.params");
    ck_assert_int_eq(vit_params_save(open, path, NULL), VIT_OK);
    size_t n;
    unsigned char *bytes = fu_read(path, &n);
    bytes[n - 6] ^= 0x40; /* a value's bit: the checksum no longer matches */
    fu_write(path, bytes, n);
    free(bytes);
    ck_assert_int_eq(vit_params_load(open, path, NULL), VIT_EFORMAT);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "checksum"));
    /* a value not finite: refused, the old file kept */
    ck_assert_int_eq(vit_params_save(open, path, "first"), VIT_OK);
    vit_params_values(open)[1] = NAN;
    ck_assert_int_eq(vit_params_save(open, path, "second"), VIT_ENUM);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "vit_params_save"));
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "'w'"));
    char *note;
    ck_assert_int_eq(vit_params_load(open, path, &note), VIT_OK);
    ck_assert_str_eq(note, "first");
    free(note);
    vit_params_free(open);
}
END_TEST

static Suite *params_suite(void)
{
    Suite *s = suite_create("params");
    TCase *model = tcase_create("against_model");
    tcase_set_timeout(model, 60);
    tcase_add_test(model, test_digits_layout_matches_model);
    tcase_add_test(model, test_other_shape_matches_model);
    tcase_add_test(model, test_leaf_range_is_attention_weights);
    suite_add_tcase(s, model);
    TCase *own = tcase_create("values");
    tcase_add_test(own, test_init_kinds_by_hand);
    tcase_add_test(own, test_buffers_aligned_and_zeroed);
    tcase_add_test(own, test_groups_merge_runs);
    tcase_add_test(own, test_leaves_carry_gradients);
    suite_add_tcase(s, own);
    TCase *bad = tcase_create("bad_input");
    tcase_add_test(bad, test_add_bad_inputs);
    tcase_add_test(bad, test_lifecycle_errors);
    tcase_add_test(bad, test_leaf_errors_reach_tape);
    suite_add_tcase(s, bad);
    TCase *files = tcase_create("files");
    tcase_add_test(files, test_save_load_roundtrip);
    tcase_add_test(files, test_load_mismatch_named);
    tcase_add_test(files, test_save_load_errors);
    suite_add_tcase(s, files);
    return s;
}

int main(void) { return fu_run_suite(params_suite, "/tmp/vit_test_params_XXXXXX"); }

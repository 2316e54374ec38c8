/*
 * tests/test_tape.c - the reverse-mode tape (float64 build).
 *
 *  - gradient checks: for every op (mul also as x * x, concat with a
 *    constant piece, embedding with repeated ids, masked mean with padding,
 *    an all-padding item and no mask, mha_bias with bias_heads 1 and H,
 *    self and cross), custom ops (a context copied from the stack, an
 *    arena-saved buffer, a NULL forward) and a checkpointed sub-graph, a
 *    small graph ending in the cross-entropy op; the tape's backward gives
 *    the gradient of every leaf, central differences of the same loss
 *    (recomputed by a forward on a reset tape without gradient buffers)
 *    check it, per leaf; a checkpoint's gradients are bitwise the direct
 *    call's;
 *  - a tensor used several times receives the sum of the contributions;
 *  - vit_tape_backward_from against hand-computed vector-Jacobian
 *    products; one backward per reset;
 *  - no-grad mode: every op's values bitwise, nothing recorded;
 *  - memory: after the first step the arena keeps its size and the op count
 *    restarts at every reset; marks and releases reuse the same memory;
 *    op-made tensors hold no gradient outside the backward (retained ones
 *    against a hand computation) and a chain of K layers keeps a constant
 *    number of gradients;
 *  - errors: a NULL input propagates to the end of the forward and to the
 *    backward, shape mismatches are VIT_EINVAL with a message, reset clears;
 *    custom op errors. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "vit/loss.h"
#include "vit/tape.h"
#include "vit/local_conv.h"

#define ASSERT_GRAD(name, x, g, n, f, ctx)                                         \
    do {                                                                           \
        double e_ = gc_check(name, x, g, n, f, ctx);                               \
        ck_assert_msg(e_ <= GC_TOL, "%s: max_rel %.3e > %.0e", name, e_, GC_TOL);  \
    } while (0)

/* ---- a small harness: leaves, a builder, a cross-entropy at the end ---- */

#define MAX_LEAVES 4
#define MAX_ROWS 64
#define SMOOTHING 0.1

typedef struct leaf {
    const char *name;
    int ndim, shape[VIT_TENSOR_MAX_DIMS];
    size_t n;
    vit_real *data, *grad;
    int wants_grad; /* 0: a constant input (no grad buffer) */
} leaf;

typedef struct graph graph;

/* Records the graph's ops on t from the leaf tensors in[] and returns its
 * output; the harness views that output as rows [size / last, last] of
 * logits for the cross-entropy. */
typedef vit_tensor *(*build_fn)(graph *g, vit_tape *t, vit_tensor **in);

struct graph {
    int nleaves;
    leaf leaf[MAX_LEAVES];
    build_fn build;
    vit_mha mha;
    vit_patch_shape ps;
    int index;
    vit_real smoothing;
    const void *aux; /* what a builder needs besides leaves (ids, a mask) */
    int labels[MAX_ROWS];
    vit_tape *tape; /* used for the finite-difference losses */
};

static void add_leaf(graph *g, const char *name, int wants_grad, double scale, uint64_t *seed,
                     int ndim, int d0, int d1, int d2, int d3)
{
    leaf *l = &g->leaf[g->nleaves++];
    int dims[4] = {d0, d1, d2, d3};
    l->name = name;
    l->ndim = ndim;
    l->n = 1;
    for (int i = 0; i < ndim; i++) {
        l->shape[i] = dims[i];
        l->n *= (size_t)dims[i];
    }
    l->data = gc_zeros(l->n);
    l->grad = gc_zeros(l->n);
    l->wants_grad = wants_grad;
    gc_fill(l->data, l->n, seed, scale);
}

static void graph_free(graph *g)
{
    for (int i = 0; i < g->nleaves; i++) {
        free(g->leaf[i].data);
        free(g->leaf[i].grad);
    }
    vit_tape_free(g->tape);
}

/* y as a 2-D [rows, last] tensor for the cross-entropy: a reshape op, so
 * the gradient reaches y (and is handed over without a copy). */
static vit_tensor *as_rows(vit_tape *t, vit_tensor *y)
{
    if (!y)
        return NULL;
    int last = y->shape[y->ndim - 1];
    int shape[2] = {(int)(y->size / (size_t)last), last};
    return vit_op_reshape(t, y, 2, shape);
}

/* Records the whole graph on t (reset first) and returns the loss. */
static vit_tensor *record(graph *g, vit_tape *t, int with_grads)
{
    vit_tensor *in[MAX_LEAVES];
    vit_tape_reset(t);
    for (int i = 0; i < g->nleaves; i++) {
        leaf *l = &g->leaf[i];
        in[i] = vit_tape_leaf(t, l->data, with_grads && l->wants_grad ? l->grad : NULL, l->ndim,
                              l->shape);
    }
    vit_tensor *z = as_rows(t, g->build(g, t, in));
    if (!z)
        return NULL;
    ck_assert_int_le(z->shape[0], MAX_ROWS);
    for (int i = 0; i < z->shape[0]; i++)
        g->labels[i] = (5 * i + 2) % z->shape[1];
    return vit_op_cross_entropy(t, z, g->labels, g->smoothing, NULL);
}

static double graph_loss(void *ctx)
{
    graph *g = ctx;
    vit_tensor *loss = record(g, g->tape, 0);
    ck_assert_msg(loss != NULL, "forward failed: %s", vit_last_error());
    return (double)loss->data[0];
}

/* Backward on the tape, then every leaf that wants a gradient against
 * central differences.  A second step without zeroing must double every
 * gradient (the tape accumulates into leaves, like the kernels).  The
 * leaves are kept (holding twice their gradient) for further checks. */
static void check_graph_keep(graph *g, const char *what)
{
    g->tape = vit_tape_new();
    vit_tape *t = vit_tape_new();
    ck_assert_ptr_nonnull(g->tape);
    ck_assert_ptr_nonnull(t);
    vit_tensor *loss = record(g, t, 1);
    ck_assert_msg(loss != NULL, "%s: forward failed: %s", what, vit_last_error());
    ck_assert_msg(isfinite((double)loss->data[0]), "%s: loss not finite", what);
    int rc = vit_tape_backward(t, loss);
    ck_assert_msg(rc == VIT_OK, "%s: backward: %s", what, vit_last_error());
    /* The loss recomputed without gradient buffers is the same number. */
    ck_assert_msg(graph_loss(g) == (double)loss->data[0], "%s: loss differs without grads", what);

    vit_real *first[MAX_LEAVES] = {0};
    for (int i = 0; i < g->nleaves; i++) {
        leaf *l = &g->leaf[i];
        if (!l->wants_grad)
            continue;
        char name[96];
        snprintf(name, sizeof name, "%s.%s", what, l->name);
        /* A gradient far below the check's absolute floor would pass
         * whatever it held. */
        double big = 0;
        for (size_t j = 0; j < l->n; j++)
            big = fmax(big, fabs((double)l->grad[j]));
        ck_assert_msg(big > 10 * GC_ABS_FLOOR, "%s: gradient too small to check (max %.3e)", name,
                      big);
        ASSERT_GRAD(name, l->data, l->grad, l->n, graph_loss, g);
        first[i] = gc_zeros(l->n);
        memcpy(first[i], l->grad, l->n * sizeof *l->grad);
    }
    loss = record(g, t, 1);
    ck_assert_int_eq(vit_tape_backward(t, loss), VIT_OK);
    for (int i = 0; i < g->nleaves; i++) {
        leaf *l = &g->leaf[i];
        if (!l->wants_grad)
            continue;
        for (size_t j = 0; j < l->n; j++)
            ck_assert_msg(fabs((double)l->grad[j] - 2.0 * (double)first[i][j])
                              <= 1e-12 * fmax(1.0, fabs((double)l->grad[j])),
                          "%s.%s[%zu]: second backward did not accumulate", what, l->name, j);
        free(first[i]);
    }
    vit_tape_free(t);
}

static void check_graph(graph *g, const char *what)
{
    check_graph_keep(g, what);
    graph_free(g);
}

/* ---- one graph per op ----------------------------------------------- */

static vit_tensor *b_linear(graph *g, vit_tape *t, vit_tensor **in)
{
    (void)g;
    return vit_op_linear(t, in[0], in[1], g->nleaves > 2 ? in[2] : NULL);
}

/* vit_tape_on_leaf_grad: a leaf read by two ops (w, in both products) is
 * reported after the backward of the first of them, with its gradient
 * then final; a leaf without a gradient (x) is not reported. */
typedef struct {
    int calls;
    vit_tensor *leaf;
    vit_real grad[2];
} leaf_log;

static void log_leaf(void *ctx, vit_tensor *leaf)
{
    leaf_log *L = ctx;
    L->calls++;
    L->leaf = leaf;
    memcpy(L->grad, leaf->grad, sizeof L->grad);
}

START_TEST(test_leaf_reports)
{
    vit_tape *t = vit_tape_new();
    vit_real xd[2] = {2, 3}, wd[2] = {5, 7}, wg[2] = {0, 0}, one[2] = {1, 1};
    int shape[1] = {2};
    leaf_log L = {0};
    ck_assert_int_eq(vit_tape_on_leaf_grad(t, log_leaf, &L), VIT_OK);
    vit_tensor *x = vit_tape_leaf(t, xd, NULL, 1, shape), *w = vit_tape_leaf(t, wd, wg, 1, shape);
    vit_tensor *y = vit_op_mul(t, vit_op_mul(t, x, w), w); /* x w^2: d/dw = 2 x w */
    ck_assert_int_eq(vit_tape_backward_from(t, y, one), VIT_OK);
    ck_assert_int_eq(L.calls, 1);
    ck_assert_ptr_eq(L.leaf, w);
    ck_assert(L.grad[0] == 20 && L.grad[1] == 42);
    ck_assert(wg[0] == 20 && wg[1] == 42);
    ck_assert_int_eq(vit_tape_on_leaf_grad(NULL, log_leaf, &L), VIT_EINVAL);
    vit_tape_free(t);
}
END_TEST

START_TEST(test_linear)
{
    /* 3-D input: the leading dimensions are flattened into rows. */
    graph g = {.build = b_linear, .smoothing = SMOOTHING};
    uint64_t seed = 11;
    add_leaf(&g, "x", 1, 1.0, &seed, 3, 2, 3, 4, 0);
    add_leaf(&g, "W", 1, 1.0, &seed, 2, 4, 5, 0, 0);
    add_leaf(&g, "b", 1, 1.0, &seed, 1, 5, 0, 0, 0);
    check_graph(&g, "linear");
}
END_TEST

START_TEST(test_linear_nobias_const_input)
{
    /* No bias, and x a constant: only W gets a gradient. */
    graph g = {.build = b_linear, .smoothing = SMOOTHING};
    uint64_t seed = 12;
    add_leaf(&g, "x", 0, 1.0, &seed, 2, 5, 4, 0, 0);
    add_leaf(&g, "W", 1, 1.0, &seed, 2, 4, 3, 0, 0);
    check_graph(&g, "linear_nobias");
}
END_TEST

static vit_tensor *b_layernorm(graph *g, vit_tape *t, vit_tensor **in)
{
    (void)g;
    return vit_op_layernorm(t, in[0], in[1], in[2], (vit_real)1e-5);
}

START_TEST(test_layernorm)
{
    graph g = {.build = b_layernorm, .smoothing = SMOOTHING};
    uint64_t seed = 13;
    add_leaf(&g, "x", 1, 2.0, &seed, 2, 6, 5, 0, 0);
    add_leaf(&g, "gamma", 1, 1.5, &seed, 1, 5, 0, 0, 0);
    add_leaf(&g, "beta", 1, 1.0, &seed, 1, 5, 0, 0, 0);
    check_graph(&g, "layernorm");
}
END_TEST

static vit_tensor *b_gelu(graph *g, vit_tape *t, vit_tensor **in)
{
    (void)g;
    return vit_op_gelu(t, in[0]);
}

START_TEST(test_gelu)
{
    graph g = {.build = b_gelu, .smoothing = SMOOTHING};
    uint64_t seed = 14;
    add_leaf(&g, "x", 1, 3.0, &seed, 2, 6, 5, 0, 0);
    check_graph(&g, "gelu");
}
END_TEST

/* x feeds both operands of the add: directly and through a linear map. */
static vit_tensor *b_add_residual(graph *g, vit_tape *t, vit_tensor **in)
{
    (void)g;
    return vit_op_add(t, in[0], vit_op_linear(t, in[0], in[1], NULL));
}

START_TEST(test_add_residual)
{
    graph g = {.build = b_add_residual, .smoothing = SMOOTHING};
    uint64_t seed = 15;
    add_leaf(&g, "x", 1, 1.0, &seed, 2, 6, 5, 0, 0);
    add_leaf(&g, "W", 1, 1.0, &seed, 2, 5, 5, 0, 0);
    check_graph(&g, "add_residual");
}
END_TEST

/* x used three times: both operands of one add, and through GELU. */
static vit_tensor *b_add_same(graph *g, vit_tape *t, vit_tensor **in)
{
    (void)g;
    return vit_op_add(t, vit_op_add(t, in[0], in[0]), vit_op_gelu(t, in[0]));
}

START_TEST(test_add_same_tensor)
{
    graph g = {.build = b_add_same, .smoothing = SMOOTHING};
    uint64_t seed = 16;
    add_leaf(&g, "x", 1, 1.0, &seed, 2, 6, 5, 0, 0);
    check_graph(&g, "add_same");

    /* Independently of finite differences: for y = x + x the gradient of x
     * is exactly twice that of y. */
    vit_tape *t = vit_tape_new();
    vit_real x[6] = {0.1, -0.2, 0.3, 0.4, -0.5, 0.6}, gx[6] = {0};
    int shape[2] = {2, 3}, labels[2] = {0, 2};
    vit_tensor *lx = vit_tape_leaf(t, x, gx, 2, shape);
    vit_tensor *y = vit_op_add(t, lx, lx);
    vit_tensor *loss = vit_op_cross_entropy(t, y, labels, 0, NULL);
    ck_assert_ptr_nonnull(loss);
    ck_assert_int_eq(vit_tape_retain_grad(t, y), VIT_OK);
    ck_assert_int_eq(vit_tape_backward(t, loss), VIT_OK);
    for (int i = 0; i < 6; i++)
        ck_assert_double_eq_tol(gx[i], 2.0 * y->grad[i], 1e-15);
    vit_tape_free(t);
}
END_TEST

static vit_tensor *b_mha(graph *g, vit_tape *t, vit_tensor **in)
{
    vit_real *probs = NULL;
    /* Self-attention passes the same tensor as x_q and x_kv. */
    vit_tensor *xkv = g->nleaves > 2 ? in[2] : in[1];
    vit_tensor *y = vit_op_mha(t, &g->mha, in[0], in[1], xkv, &probs);
    if (y)
        ck_assert_ptr_nonnull(probs);
    return y;
}

START_TEST(test_mha_self)
{
    graph g = {.build = b_mha, .smoothing = SMOOTHING};
    g.mha = (vit_mha){.batch = 2, .n_q = 3, .n_k = 3, .d_model = 4, .heads = 2, .has_bias = 1};
    uint64_t seed = 17;
    add_leaf(&g, "params", 1, 0.8, &seed, 1, (int)vit_mha_param_count(&g.mha), 0, 0, 0);
    add_leaf(&g, "x", 1, 1.0, &seed, 3, 2, 3, 4, 0);
    check_graph(&g, "mha_self");
}
END_TEST

START_TEST(test_mha_cross)
{
    graph g = {.build = b_mha, .smoothing = SMOOTHING};
    g.mha = (vit_mha){.batch = 2, .n_q = 3, .n_k = 5, .d_model = 4, .d_kv = 6, .heads = 2,
                      .has_bias = 1};
    uint64_t seed = 18;
    add_leaf(&g, "params", 1, 0.8, &seed, 1, (int)vit_mha_param_count(&g.mha), 0, 0, 0);
    add_leaf(&g, "x_q", 1, 1.0, &seed, 3, 2, 3, 4, 0);
    add_leaf(&g, "x_kv", 1, 1.0, &seed, 3, 2, 5, 6, 0);
    check_graph(&g, "mha_cross");
}
END_TEST

/* Locality self-attention through the tape: the no-self mask and tau, the
 * last heads entries of the parameter tensor, checked with the rest. */
START_TEST(test_mha_lsa)
{
    static unsigned char no_self[4 * 4];
    ck_assert_int_eq(vit_mask_no_self(no_self, 4, 4), VIT_OK);
    graph g = {.build = b_mha, .smoothing = SMOOTHING};
    g.mha = (vit_mha){.batch = 2, .n_q = 4, .n_k = 4, .d_model = 4, .heads = 2, .has_bias = 1,
                      .learn_scale = 1, .mask = {.allowed = no_self}};
    ck_assert_uint_eq(vit_mha_param_count(&g.mha), 4 * 16 + 4 * 4 + 2);
    uint64_t seed = 19;
    add_leaf(&g, "params", 1, 0.8, &seed, 1, (int)vit_mha_param_count(&g.mha), 0, 0, 0);
    add_leaf(&g, "x", 1, 1.0, &seed, 3, 2, 4, 4, 0);
    check_graph(&g, "mha_lsa");
}
END_TEST


static vit_tensor *b_patch(graph *g, vit_tape *t, vit_tensor **in)
{
    return vit_op_patch_embed(t, &g->ps, in[0], in[1], in[2]);
}

START_TEST(test_patch_embed)
{
    graph g = {.build = b_patch, .smoothing = SMOOTHING};
    g.ps = (vit_patch_shape){.batch = 2, .height = 4, .width = 6, .channels = 2, .patch = 2, .dim = 3};
    uint64_t seed = 19;
    add_leaf(&g, "img", 1, 1.0, &seed, 4, 2, 4, 6, 2);
    add_leaf(&g, "W", 1, 1.0, &seed, 2, 8, 3, 0, 0);
    add_leaf(&g, "b", 1, 1.0, &seed, 1, 3, 0, 0, 0);
    check_graph(&g, "patch_embed");
}
END_TEST

/* Overlapping, padded patches through the tape. */
START_TEST(test_patch_embed_overlap)
{
    graph g = {.build = b_patch, .smoothing = SMOOTHING};
    g.ps = (vit_patch_shape){.batch = 2, .height = 4, .width = 6, .channels = 2, .patch = 3,
                             .dim = 3, .stride = 1, .pad = 1};
    ck_assert_int_eq(vit_patch_count(&g.ps), 24);
    uint64_t seed = 23;
    add_leaf(&g, "img", 1, 1.0, &seed, 4, 2, 4, 6, 2);
    add_leaf(&g, "W", 1, 1.0, &seed, 2, 18, 3, 0, 0);
    add_leaf(&g, "b", 1, 1.0, &seed, 1, 3, 0, 0, 0);
    check_graph(&g, "patch_embed_overlap");
}
END_TEST

static vit_tensor *b_cls(graph *g, vit_tape *t, vit_tensor **in)
{
    (void)g;
    return vit_op_cls_prepend(t, in[0], in[1]);
}

START_TEST(test_cls_prepend)
{
    graph g = {.build = b_cls, .smoothing = SMOOTHING};
    uint64_t seed = 20;
    add_leaf(&g, "x", 1, 1.0, &seed, 3, 2, 3, 4, 0);
    add_leaf(&g, "cls", 1, 1.0, &seed, 1, 4, 0, 0, 0);
    check_graph(&g, "cls_prepend");
}
END_TEST

static vit_tensor *b_pos(graph *g, vit_tape *t, vit_tensor **in)
{
    (void)g;
    return vit_op_pos_add(t, in[0], in[1]);
}

START_TEST(test_pos_add)
{
    graph g = {.build = b_pos, .smoothing = SMOOTHING};
    uint64_t seed = 21;
    add_leaf(&g, "x", 1, 1.0, &seed, 3, 2, 3, 4, 0);
    add_leaf(&g, "pos", 1, 1.0, &seed, 2, 3, 4, 0, 0);
    check_graph(&g, "pos_add");
}
END_TEST

/* The local convolution on a 2 x 3 grid (T = 7), with its bias or
 * (index 1) without. */
static vit_tensor *b_local(graph *g, vit_tape *t, vit_tensor **in)
{
    return vit_op_local_conv(t, in[0], in[1], g->index ? NULL : in[2], 2, 3);
}

START_TEST(test_local_conv)
{
    graph g = {.build = b_local, .smoothing = SMOOTHING, .index = _i};
    uint64_t seed = 60 + (uint64_t)_i;
    add_leaf(&g, "x", 1, 1.0, &seed, 3, 2, 7, 4, 0);
    add_leaf(&g, "w", 1, 1.0, &seed, 2, 9, 4, 0, 0);
    if (_i == 0)
        add_leaf(&g, "bias", 1, 1.0, &seed, 1, 4, 0, 0, 0);
    check_graph(&g, _i ? "local_conv (no bias)" : "local_conv");
}
END_TEST

static vit_tensor *b_token(graph *g, vit_tape *t, vit_tensor **in)
{
    return vit_op_token(t, in[0], g->index);
}

START_TEST(test_token)
{
    /* Loop over token 0, 1, 2 of three. */
    graph g = {.build = b_token, .smoothing = SMOOTHING, .index = _i};
    uint64_t seed = 22 + (uint64_t)_i;
    add_leaf(&g, "x", 1, 2.0, &seed, 3, 2, 3, 4, 0);
    char what[32];
    snprintf(what, sizeof what, "token%d", _i);
    check_graph(&g, what);
}
END_TEST

static vit_tensor *b_mean(graph *g, vit_tape *t, vit_tensor **in)
{
    return vit_op_mean_tokens(t, in[0], g->index);
}

START_TEST(test_mean_tokens)
{
    /* first = 0 (all tokens) and 1 (skip the class token). */
    graph g = {.build = b_mean, .smoothing = SMOOTHING, .index = _i};
    uint64_t seed = 30 + (uint64_t)_i;
    add_leaf(&g, "x", 1, 2.0, &seed, 3, 2, 4, 5, 0);
    char what[32];
    snprintf(what, sizeof what, "mean_tokens%d", _i);
    check_graph(&g, what);
}
END_TEST

static vit_tensor *b_identity(graph *g, vit_tape *t, vit_tensor **in)
{
    (void)g;
    (void)t;
    return in[0];
}

START_TEST(test_cross_entropy)
{
    /* Logits straight from a leaf; with and without label smoothing. */
    graph g = {.build = b_identity, .smoothing = _i ? (vit_real)0.2 : 0};
    uint64_t seed = 40;
    add_leaf(&g, "logits", 1, 3.0, &seed, 2, 4, 5, 0, 0);
    check_graph(&g, _i ? "cross_entropy_smooth" : "cross_entropy");
}
END_TEST

/* The soft-target op on logits z [6, 5] (a leaf): mixed targets by
 * central differences; smoothed one-hot targets give the hard op's loss
 * and gradient; the op copies the targets. */
typedef struct soft_xent {
    vit_real z[30], t[30];
} soft_xent;

static double soft_xent_loss(soft_xent *s, vit_real *grad)
{
    vit_tape *t = vit_tape_new();
    vit_tensor *z = vit_tape_leaf(t, s->z, grad, 2, (int[]){6, 5});
    vit_tensor *loss = vit_op_cross_entropy_soft(t, z, s->t, NULL);
    ck_assert_msg(loss != NULL, "%s", vit_last_error());
    double v = (double)loss->data[0];
    if (grad)
        ck_assert_int_eq(vit_tape_backward(t, loss), VIT_OK);
    vit_tape_free(t);
    return v;
}

static double soft_xent_fn(void *ctx) { return soft_xent_loss(ctx, NULL); }

START_TEST(test_cross_entropy_soft)
{
    soft_xent s;
    uint64_t seed = 91;
    gc_fill(s.z, 30, &seed, 3.0);
    const double sm = 0.1, lam = 0.35;
    int labels[6];
    for (int i = 0; i < 6; i++) {
        labels[i] = (2 * i + 1) % 5;
        for (int c = 0; c < 5; c++)
            s.t[i * 5 + c] = (vit_real)(lam * ((1 - sm) * (c == labels[i]) + sm / 5)
                                        + (1 - lam) * ((1 - sm) * (c == (i + 3) % 5) + sm / 5));
    }
    vit_real dz[30] = {0};
    soft_xent_loss(&s, dz);
    ASSERT_GRAD("xent_soft", s.z, dz, 30, soft_xent_fn, &s);

    /* one-hot targets, smoothed: the hard op */
    for (int i = 0; i < 30; i++)
        s.t[i] = (vit_real)((1 - sm) * (i % 5 == labels[i / 5]) + sm / 5);
    memset(dz, 0, sizeof dz);
    double ls = soft_xent_loss(&s, dz);
    vit_tape *t = vit_tape_new();
    vit_real dh[30] = {0};
    vit_tensor *z = vit_tape_leaf(t, s.z, dh, 2, (int[]){6, 5});
    vit_tensor *hard = vit_op_cross_entropy(t, z, labels, (vit_real)sm, NULL);
    ck_assert_int_eq(vit_tape_backward(t, hard), VIT_OK);
    ck_assert_msg(fabs(ls - (double)hard->data[0]) < 1e-14, "soft %.17g, hard %.17g", ls,
                  (double)hard->data[0]);
    ck_assert(gc_max_abs_diff(dz, dh, 30) < 1e-15);
    /* the targets are copied: changed after the forward, the backward
     * still uses the forward's */
    vit_tape_reset(t);
    memset(dh, 0, sizeof dh);
    z = vit_tape_leaf(t, s.z, dh, 2, (int[]){6, 5});
    vit_tensor *soft = vit_op_cross_entropy_soft(t, z, s.t, NULL);
    ck_assert_ptr_nonnull(soft);
    vit_real keep = s.t[0];
    s.t[0] = 5;
    ck_assert_int_eq(vit_tape_backward(t, soft), VIT_OK);
    s.t[0] = keep;
    ck_assert(gc_max_abs_diff(dz, dh, 30) == 0);
    /* refused: 3-D logits, NULL targets */
    vit_tape_reset(t);
    z = vit_tape_leaf(t, s.z, NULL, 3, (int[]){2, 3, 5});
    ck_assert_ptr_null(vit_op_cross_entropy_soft(t, z, s.t, NULL));
    ck_assert_int_eq(vit_tape_status(t), VIT_EINVAL);
    vit_tape_reset(t);
    z = vit_tape_leaf(t, s.z, NULL, 2, (int[]){6, 5});
    ck_assert_ptr_null(vit_op_cross_entropy_soft(t, z, NULL, NULL));
    vit_tape_free(t);
}
END_TEST

/* The masked, weighted cross-entropy on logits z [6, 5]: rows 1 and 4
 * ignored (label -1), weights 0.5 .. 3. */
typedef struct masked_xent {
    vit_real z[30], dz[30];
    int labels[6];
    const vit_real *weights;
    int ignore;
    vit_real smoothing;
} masked_xent;

static double masked_loss(masked_xent *m, vit_real *grad)
{
    vit_tape *t = vit_tape_new();
    int shape[2] = {6, 5};
    vit_tensor *z = vit_tape_leaf(t, m->z, grad, 2, shape);
    vit_tensor *loss = vit_op_cross_entropy_masked(t, z, m->labels, m->weights, m->ignore,
                                                   m->smoothing, NULL);
    ck_assert_msg(loss != NULL, "%s", vit_last_error());
    double v = (double)loss->data[0];
    if (grad)
        ck_assert_int_eq(vit_tape_backward(t, loss), VIT_OK);
    vit_tape_free(t);
    return v;
}

static double masked_loss_fn(void *ctx) { return masked_loss(ctx, NULL); }

START_TEST(test_cross_entropy_masked)
{
    static const vit_real w[6] = {0.5, 7, 1, 2, 9, 3}; /* rows 1 and 4 are ignored anyway */
    masked_xent m = {.labels = {0, -1, 3, 4, -1, 2}, .weights = w, .ignore = -1,
                     .smoothing = _i ? (vit_real)0.1 : 0};
    uint64_t seed = 77;
    gc_fill(m.z, 30, &seed, 3.0);
    double loss = masked_loss(&m, m.dz);
    /* By hand: the weighted mean of the counted rows' smoothed losses. */
    double num = 0, den = 0;
    for (int i = 0; i < 6; i++) {
        if (m.labels[i] < 0)
            continue;
        double mx = -INFINITY, z = 0, sum = 0;
        for (int c = 0; c < 5; c++)
            mx = fmax(mx, (double)m.z[i * 5 + c]);
        for (int c = 0; c < 5; c++) {
            z += exp((double)m.z[i * 5 + c] - mx);
            sum += (double)m.z[i * 5 + c];
        }
        double lse = mx + log(z), s = (double)m.smoothing;
        double li = -(1 - s) * ((double)m.z[i * 5 + m.labels[i]] - lse) - s / 5 * (sum - 5 * lse);
        num += (double)w[i] * li;
        den += (double)w[i];
    }
    ck_assert_msg(fabs(loss - num / den) < 1e-14, "loss %.17g, by hand %.17g", loss, num / den);
    for (int c = 0; c < 5; c++) /* ignored rows: exactly no gradient */
        ck_assert(m.dz[5 + c] == 0 && m.dz[20 + c] == 0);
    ASSERT_GRAD(_i ? "xent_masked_smooth" : "xent_masked", m.z, m.dz, 30, masked_loss_fn, &m);

    /* Nothing ignored, no weights: the plain op's loss and gradient. */
    masked_xent p = m;
    p.weights = NULL;
    p.ignore = -100;
    for (int i = 0; i < 6; i++)
        p.labels[i] = i % 5;
    memset(p.dz, 0, sizeof p.dz);
    double lp = masked_loss(&p, p.dz);
    vit_tape *t = vit_tape_new();
    vit_real dz[30] = {0};
    vit_tensor *z = vit_tape_leaf(t, p.z, dz, 2, (int[]){6, 5});
    vit_tensor *plain = vit_op_cross_entropy(t, z, p.labels, p.smoothing, NULL);
    ck_assert_int_eq(vit_tape_backward(t, plain), VIT_OK);
    ck_assert(fabs(lp - (double)plain->data[0]) < 1e-15);
    ck_assert(gc_max_abs_diff(dz, p.dz, 30) < 1e-16);
    vit_tape_free(t);

    /* Every row ignored: loss 0, gradient 0.  A negative weight: refused. */
    for (int i = 0; i < 6; i++)
        p.labels[i] = -100;
    memset(p.dz, 0, sizeof p.dz);
    ck_assert(masked_loss(&p, p.dz) == 0);
    for (int j = 0; j < 30; j++)
        ck_assert(p.dz[j] == 0);
    vit_real bad[6] = {1, 1, -1, 1, 1, 1}, loss1, probs[30];
    ck_assert_int_eq(vit_cross_entropy_masked_forward(&loss1, probs, m.z, m.labels, bad, 6, 5, 0,
                                                      -1), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "weights[2]"));
    int out_of_range[6] = {0, 5, 0, 0, 0, 0};
    ck_assert_int_eq(vit_cross_entropy_masked_forward(&loss1, probs, m.z, out_of_range, NULL, 6,
                                                      5, 0, -1), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "labels[1] = 5"));
}
END_TEST

/* ---- the elementwise, shape and lookup ops ------------------------------ */

static vit_tensor *b_mul(graph *g, vit_tape *t, vit_tensor **in)
{
    (void)g;
    return vit_op_mul(t, in[0], in[1]);
}

/* The same tensor as both operands: a leaf (x * x) and an op-made one
 * (h * h with h = GELU(x)), whose lent gradient receives both terms. */
static vit_tensor *b_mul_same(graph *g, vit_tape *t, vit_tensor **in)
{
    (void)g;
    vit_tensor *h = vit_op_gelu(t, in[0]);
    return vit_op_add(t, vit_op_mul(t, in[0], in[0]), vit_op_mul(t, h, h));
}

static vit_tensor *b_scale(graph *g, vit_tape *t, vit_tensor **in)
{
    (void)g;
    return vit_op_scale(t, in[0], (vit_real)-1.75);
}

/* Softmax over the last dimension of a 3-D tensor, scaled so that the
 * cross-entropy sees logits of some spread. */
static vit_tensor *b_softmax(graph *g, vit_tape *t, vit_tensor **in)
{
    (void)g;
    return vit_op_scale(t, vit_op_softmax(t, in[0]), 6);
}

/* x [2, 3, 4] -> [6, 4] (a leaf's gradient through a reshape), a linear map,
 * then back to [2, 3, 4] (an op-made tensor's), used twice after that. */
static vit_tensor *b_reshape(graph *g, vit_tape *t, vit_tensor **in)
{
    (void)g;
    vit_tensor *r = vit_op_reshape(t, in[0], 2, (int[]){6, 4});
    if (r)
        ck_assert(r->ndim == 2 && r->shape[0] == 6 && r->shape[1] == 4 && r->data == in[0]->data);
    vit_tensor *u = vit_op_reshape(t, vit_op_linear(t, r, in[1], NULL), 3, (int[]){2, 3, 4});
    if (u)
        ck_assert(u->ndim == 3 && u->shape[0] == 2 && u->shape[1] == 3 && u->shape[2] == 4);
    return vit_op_add(t, vit_op_gelu(t, u), u);
}

/* Leaves: a [2, 2, 4], b [2, 3, 4] (constant), c [2, 1, 4]; two pieces
 * (a, b) or three (a, b, c). */
static vit_tensor *b_concat(graph *g, vit_tape *t, vit_tensor **in)
{
    return vit_op_concat_tokens(t, g->nleaves, in);
}

START_TEST(test_concat_tokens)
{
    graph g = {.build = b_concat, .smoothing = SMOOTHING};
    uint64_t seed = 85 + (uint64_t)_i;
    add_leaf(&g, "a", 1, 2.0, &seed, 3, 2, 2, 4, 0);
    add_leaf(&g, "b", 0, 2.0, &seed, 3, 2, 3, 4, 0);
    if (_i)
        add_leaf(&g, "c", 1, 2.0, &seed, 3, 2, 1, 4, 0);

    /* The values: each item's tokens in the order of the pieces. */
    vit_tape *t = vit_tape_new();
    vit_tensor *in[3];
    for (int k = 0; k < g.nleaves; k++)
        in[k] = vit_tape_leaf(t, g.leaf[k].data, NULL, 3, g.leaf[k].shape);
    vit_tensor *y = vit_op_concat_tokens(t, g.nleaves, in);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(y->shape[1], _i ? 6 : 5);
    for (int b = 0; b < 2; b++)
        for (int k = 0, t0 = 0; k < g.nleaves; t0 += g.leaf[k].shape[1], k++) {
            size_t n = (size_t)g.leaf[k].shape[1] * 4;
            ck_assert(memcmp(y->data + ((size_t)b * y->shape[1] + t0) * 4,
                             g.leaf[k].data + b * n, n * sizeof(vit_real)) == 0);
        }
    vit_tape_free(t);
    check_graph(&g, _i ? "concat3" : "concat2");
}
END_TEST

/* Ids [2, 3] into a table [5, 4]; ids 1 and 3 repeat, 2 is never used. */
static const int embed_ids[6] = {1, 3, 1, 4, 1, 3};

static vit_tensor *b_embedding(graph *g, vit_tape *t, vit_tensor **in)
{
    int ids[6];
    memcpy(ids, g->aux, sizeof ids); /* the op copies its ids */
    vit_tensor *y = vit_op_embedding(t, in[0], ids, 2, (int[]){2, 3});
    memset(ids, 0, sizeof ids);
    return y;
}

START_TEST(test_embedding)
{
    graph g = {.build = b_embedding, .smoothing = SMOOTHING, .aux = embed_ids};
    uint64_t seed = 87;
    add_leaf(&g, "table", 1, 2.0, &seed, 2, 5, 4, 0, 0);
    vit_tape *t = vit_tape_new();
    vit_tensor *y = b_embedding(&g, t, (vit_tensor *[]){
        vit_tape_leaf(t, g.leaf[0].data, NULL, 2, g.leaf[0].shape)});
    ck_assert_ptr_nonnull(y);
    ck_assert(y->ndim == 3 && y->shape[0] == 2 && y->shape[1] == 3 && y->shape[2] == 4);
    for (int i = 0; i < 6; i++)
        ck_assert(memcmp(y->data + i * 4, g.leaf[0].data + embed_ids[i] * 4,
                         4 * sizeof(vit_real)) == 0);
    vit_tape_free(t);
    check_graph_keep(&g, "embedding");
    /* Rows 0 and 2 are never looked up: exactly no gradient.  Rows 1 and 3,
     * looked up several times, were checked above. */
    for (int j = 0; j < 4; j++)
        ck_assert(g.leaf[0].grad[j] == 0 && g.leaf[0].grad[2 * 4 + j] == 0);
    graph_free(&g);
}
END_TEST

/* x [3, 4, 5]: item 0 has two padding tokens, item 1 none, item 2 only
 * padding (its output is zeros and x gets no gradient there); aux NULL
 * means no mask. */
static const unsigned char mean_mask[12] = {1, 0, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0};

static vit_tensor *b_masked_mean(graph *g, vit_tape *t, vit_tensor **in)
{
    return vit_op_masked_mean(t, in[0], g->aux);
}

START_TEST(test_masked_mean)
{
    graph g = {.build = b_masked_mean, .smoothing = SMOOTHING, .aux = _i ? NULL : mean_mask};
    uint64_t seed = 88 + (uint64_t)_i;
    add_leaf(&g, "x", 1, 2.0, &seed, 3, 3, 4, 5, 0);
    /* The values against sums written out here. */
    vit_tape *t = vit_tape_new();
    vit_tensor *y = b_masked_mean(&g, t, (vit_tensor *[]){
        vit_tape_leaf(t, g.leaf[0].data, NULL, 3, g.leaf[0].shape)});
    ck_assert_ptr_nonnull(y);
    ck_assert(y->ndim == 2 && y->shape[0] == 3 && y->shape[1] == 5);
    for (int b = 0; b < 3; b++)
        for (int j = 0; j < 5; j++) {
            double s = 0, n = 0;
            for (int k = 0; k < 4; k++)
                if (_i || mean_mask[b * 4 + k]) {
                    s += g.leaf[0].data[(b * 4 + k) * 5 + j];
                    n++;
                }
            ck_assert_double_eq_tol(y->data[b * 5 + j], n ? s / n : 0.0, 1e-15);
        }
    vit_tape_free(t);
    check_graph_keep(&g, _i ? "masked_mean_nomask" : "masked_mean");
    for (int i = 0; i < 12; i++)
        for (int j = 0; j < 5; j++)
            ck_assert_msg((g.leaf[0].grad[i * 5 + j] == 0) == (!_i && !mean_mask[i]),
                          "token %d: gradient %g", i, (double)g.leaf[0].grad[i * 5 + j]);
    graph_free(&g);
}
END_TEST

/* Attention with a learnable score bias: leaves params, x_q, [x_kv,] bias. */
static vit_tensor *b_mha_bias(graph *g, vit_tape *t, vit_tensor **in)
{
    vit_real *probs = NULL;
    int cross = g->nleaves == 4;
    vit_tensor *y = vit_op_mha_bias(t, &g->mha, in[0], in[1], in[cross ? 2 : 1],
                                    in[cross ? 3 : 2], &probs);
    if (y)
        ck_assert_ptr_nonnull(probs);
    return y;
}

START_TEST(test_mha_bias)
{
    /* _i bit 0: bias_heads H (else 1); bit 1: cross-attention. */
    int H = 2, bh = _i & 1 ? H : 1, cross = _i & 2;
    graph g = {.build = b_mha_bias, .smoothing = SMOOTHING};
    g.mha = (vit_mha){.batch = 2, .n_q = 3, .n_k = cross ? 4 : 3, .d_model = 4,
                      .d_kv = cross ? 6 : 0, .heads = H, .has_bias = 1, .bias_heads = bh};
    uint64_t seed = 90 + (uint64_t)_i;
    add_leaf(&g, "params", 1, 0.8, &seed, 1, (int)vit_mha_param_count(&g.mha), 0, 0, 0);
    add_leaf(&g, "x_q", 1, 1.0, &seed, 3, 2, 3, 4, 0);
    if (cross)
        add_leaf(&g, "x_kv", 1, 1.0, &seed, 3, 2, 4, 6, 0);
    add_leaf(&g, "bias", 1, 2.0, &seed, 3, bh, 3, g.mha.n_k, 0);
    char what[32];
    snprintf(what, sizeof what, "mha_bias%s_h%d", cross ? "_cross" : "", bh);
    check_graph(&g, what);
}
END_TEST

/* ---- custom ops and checkpoints ---------------------------------------- */

/* y[r, j] = coef * x[r, j]^3 * w[j] for x [R, D], w [D]: the context comes
 * from the caller's stack (coef) and the forward stores there a saved
 * buffer from the tape's arena (3 coef x^2) for the backward. */
typedef struct cube_ctx {
    vit_real coef;
    vit_real *x2; /* set by the forward */
} cube_ctx;

static int cube_forward(const vit_op_call *c)
{
    cube_ctx *ctx = c->ctx;
    const vit_tensor *x = c->in[0], *w = c->in[1];
    size_t D = w->size;
    ctx->x2 = vit_tape_alloc(c->tape, x->size * sizeof *ctx->x2);
    if (!ctx->x2)
        return vit_tape_status(c->tape);
    for (size_t i = 0; i < x->size; i++) {
        ctx->x2[i] = 3 * ctx->coef * x->data[i] * x->data[i];
        c->out->data[i] = ctx->coef * x->data[i] * x->data[i] * x->data[i] * w->data[i % D];
    }
    return VIT_OK;
}

static int cube_backward(const vit_op_call *c)
{
    const cube_ctx *ctx = c->ctx;
    const vit_tensor *x = c->in[0], *w = c->in[1];
    size_t D = w->size;
    for (size_t i = 0; i < x->size; i++) {
        if (c->din[0])
            c->din[0][i] += c->dout[i] * ctx->x2[i] * w->data[i % D];
        if (c->din[1]) /* y / w[j] = coef x^3 = x2 x / 3 */
            c->din[1][i % D] += c->dout[i] * ctx->x2[i] * x->data[i] / 3;
    }
    return VIT_OK;
}

static vit_tensor *cube_op(vit_tape *t, vit_tensor *x, vit_tensor *w)
{
    cube_ctx ctx = {.coef = (vit_real)0.75};
    vit_tensor *in[2] = {x, w};
    vit_tensor *y = x ? vit_op_custom(t, "cube", 2, in, x->ndim, x->shape, cube_forward,
                                      cube_backward, &ctx, sizeof ctx)
                      : NULL;
    /* The op has its own copy: what the stack holds later does not matter. */
    ctx.coef = NAN;
    ctx.x2 = NULL;
    return y;
}

/* The custom op between two tape ops, so that its din and dout are lent
 * gradients; with w a constant, its din is NULL. */
static vit_tensor *b_cube(graph *g, vit_tape *t, vit_tensor **in)
{
    (void)g;
    return vit_op_gelu(t, cube_op(t, vit_op_scale(t, in[0], (vit_real)1.5), in[1]));
}

/* A custom op without a forward: the caller writes y = sin(x) after the
 * call; the backward reads x from its input. */
static int sin_backward(const vit_op_call *c)
{
    const vit_tensor *x = c->in[0];
    for (size_t i = 0; i < x->size; i++)
        c->din[0][i] += c->dout[i] * cos(x->data[i]);
    return VIT_OK;
}

static vit_tensor *b_sin(graph *g, vit_tape *t, vit_tensor **in)
{
    (void)g;
    vit_tensor *y = vit_op_custom(t, "sin", 1, in, in[0]->ndim, in[0]->shape, NULL, sin_backward,
                                  NULL, 0);
    if (y)
        for (size_t i = 0; i < y->size; i++)
            y->data[i] = sin(in[0]->data[i]);
    return vit_op_scale(t, y, 3);
}

/* r + GELU(x) W + b: the residual r also feeds the loss through a GELU, so
 * its gradient has two parts. */
static vit_tensor *b_linear_add(graph *g, vit_tape *t, vit_tensor **in)
{
    vit_tensor *y = vit_op_linear_add(t, vit_op_gelu(t, in[0]), in[1], g->nleaves > 3 ? in[3] : NULL,
                                      in[2]);
    return vit_op_add(t, y, vit_op_gelu(t, in[2]));
}

/* GELU(x W + b) fused, read twice downstream (its gradient then
 * accumulates before the backward forms GELU's in place). */
static vit_tensor *b_linear_gelu(graph *g, vit_tape *t, vit_tensor **in)
{
    vit_tensor *y = vit_op_linear_gelu(t, in[0], in[1], g->nleaves > 2 ? in[2] : NULL);
    return vit_op_add(t, vit_op_scale(t, y, 2), vit_op_mul(t, y, y));
}

/* The fused op against the two ops it replaces, on the same inputs and the
 * same upstream gradient: outputs and all three gradients agree to
 * rounding (float64). */
START_TEST(test_linear_gelu_matches_unfused)
{
    enum { N = 7, K = 5, M = 9 };
    uint64_t seed = 1414;
    vit_real x[N * K], W[K * M], b[M], dy[N * M], y[2][N * M];
    vit_real dx[2][N * K], dW[2][K * M], db[2][M];
    gc_fill(x, N * K, &seed, 1.5);
    gc_fill(W, K * M, &seed, 1.0);
    gc_fill(b, M, &seed, 1.0);
    gc_fill(dy, N * M, &seed, 1.0);
    for (int f = 0; f < 2; f++) {
        memset(dx[f], 0, sizeof dx[f]);
        memset(dW[f], 0, sizeof dW[f]);
        memset(db[f], 0, sizeof db[f]);
        vit_tape *t = vit_tape_new();
        ck_assert_ptr_nonnull(t);
        vit_tensor *tx = vit_tape_leaf(t, x, dx[f], 2, (int[]){N, K});
        vit_tensor *tW = vit_tape_leaf(t, W, dW[f], 2, (int[]){K, M});
        vit_tensor *tb = vit_tape_leaf(t, b, db[f], 1, (int[]){M});
        vit_tensor *ty = f ? vit_op_linear_gelu(t, tx, tW, tb)
                           : vit_op_gelu(t, vit_op_linear(t, tx, tW, tb));
        ck_assert_ptr_nonnull(ty);
        memcpy(y[f], ty->data, sizeof y[f]);
        ck_assert_int_eq(vit_tape_backward_from(t, ty, dy), VIT_OK);
        vit_tape_free(t);
    }
    ck_assert_double_le(gc_max_rel(y[0], y[1], N * M, 1e-3), 1e-13);
    ck_assert_double_le(gc_max_rel(dx[0], dx[1], N * K, 1e-3), 1e-13);
    ck_assert_double_le(gc_max_rel(dW[0], dW[1], K * M, 1e-3), 1e-13);
    ck_assert_double_le(gc_max_rel(db[0], db[1], M, 1e-3), 1e-13);
    double big = 0;
    for (int i = 0; i < K * M; i++)
        big = fmax(big, fabs(dW[1][i]));
    ck_assert_double_gt(big, 0.1);
}
END_TEST

/* LN(a + b) fused with the sum read on (as the residual stream is). */
static vit_tensor *b_add_layernorm(graph *g, vit_tape *t, vit_tensor **in)
{
    (void)g;
    vit_tensor *sum;
    vit_tensor *y = vit_op_add_layernorm(t, in[0], in[1], in[2], in[3], (vit_real)1e-5, &sum);
    return vit_op_add(t, vit_op_mul(t, y, y), vit_op_scale(t, sum, 0.5));
}

/* The fused add + layer norm against the two ops: the sum, the output and
 * every gradient agree to rounding; a NULL sum is refused by name. */
START_TEST(test_add_layernorm_matches_unfused)
{
    enum { N = 6, D = 11 };
    uint64_t seed = 1415;
    vit_real a[N * D], b[N * D], g[D], be[D], dy[N * D], y[2][N * D], s[2][N * D];
    vit_real da[2][N * D], dbb[2][N * D], dg[2][D], dbe[2][D];
    gc_fill(a, N * D, &seed, 2.0);
    gc_fill(b, N * D, &seed, 1.0);
    gc_fill(g, D, &seed, 1.0);
    gc_fill(be, D, &seed, 1.0);
    gc_fill(dy, N * D, &seed, 1.0);
    for (int f = 0; f < 2; f++) {
        memset(da[f], 0, sizeof da[f]);
        memset(dbb[f], 0, sizeof dbb[f]);
        memset(dg[f], 0, sizeof dg[f]);
        memset(dbe[f], 0, sizeof dbe[f]);
        vit_tape *t = vit_tape_new();
        ck_assert_ptr_nonnull(t);
        vit_tensor *ta = vit_tape_leaf(t, a, da[f], 2, (int[]){N, D});
        vit_tensor *tb = vit_tape_leaf(t, b, dbb[f], 2, (int[]){N, D});
        vit_tensor *tg = vit_tape_leaf(t, g, dg[f], 1, (int[]){D});
        vit_tensor *tbe = vit_tape_leaf(t, be, dbe[f], 1, (int[]){D});
        vit_tensor *sum = NULL, *ty;
        if (f) {
            ty = vit_op_add_layernorm(t, ta, tb, tg, tbe, (vit_real)1e-5, &sum);
        } else {
            sum = vit_op_add(t, ta, tb);
            ty = vit_op_layernorm(t, sum, tg, tbe, (vit_real)1e-5);
        }
        ck_assert_ptr_nonnull(ty);
        ck_assert_ptr_nonnull(sum);
        memcpy(y[f], ty->data, sizeof y[f]);
        memcpy(s[f], sum->data, sizeof s[f]);
        ck_assert_int_eq(vit_tape_backward_from(t, ty, dy), VIT_OK);
        vit_tape_free(t);
    }
    ck_assert_double_le(gc_max_rel(s[0], s[1], N * D, 1e-3), 0);
    ck_assert_double_le(gc_max_rel(y[0], y[1], N * D, 1e-3), 1e-13);
    ck_assert_double_le(gc_max_rel(da[0], da[1], N * D, 1e-3), 1e-13);
    ck_assert_double_le(gc_max_rel(dbb[0], dbb[1], N * D, 1e-3), 1e-13);
    ck_assert_double_le(gc_max_rel(dg[0], dg[1], D, 1e-3), 1e-13);
    ck_assert_double_le(gc_max_rel(dbe[0], dbe[1], D, 1e-3), 1e-13);
    double big = 0;
    for (int i = 0; i < N * D; i++)
        big = fmax(big, fabs(da[1][i]));
    ck_assert_double_gt(big, 0.1);

    vit_tape *t = vit_tape_new();
    vit_tensor *ta = vit_tape_leaf(t, a, NULL, 2, (int[]){N, D});
    vit_tensor *tg = vit_tape_leaf(t, g, NULL, 1, (int[]){D});
    ck_assert_ptr_null(vit_op_add_layernorm(t, ta, ta, tg, tg, (vit_real)1e-5, NULL));
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "vit_op_add_layernorm"));
    vit_tape_free(t);
}
END_TEST

/* ---- graphs that need only their leaves -------------------------------- */

typedef struct leaf_spec {
    const char *name;
    int wants_grad, ndim, d[4];
    double scale;
} leaf_spec;

static const struct leaf_case {
    const char *what;
    build_fn build;
    leaf_spec leaf[MAX_LEAVES];
} leaf_cases[] = {
    {"mul", b_mul, {{"a", 1, 3, {2, 3, 5}, 2.0}, {"b", 1, 3, {2, 3, 5}, 2.0}}},
    {"mul_same", b_mul_same, {{"x", 1, 2, {6, 5}, 2.0}}},
    {"scale", b_scale, {{"x", 1, 2, {6, 5}, 1.0}}},
    {"softmax", b_softmax, {{"x", 1, 3, {2, 3, 5}, 2.0}}},
    {"reshape", b_reshape, {{"x", 1, 3, {2, 3, 4}, 1.0}, {"W", 1, 2, {4, 4}, 1.0}}},
    {"custom_cube", b_cube, {{"x", 1, 2, {4, 5}, 1.0}, {"w", 1, 1, {5}, 1.5}}},
    {"custom_cube_const_w", b_cube, {{"x", 1, 2, {4, 5}, 1.0}, {"w", 0, 1, {5}, 1.5}}},
    {"custom_no_forward", b_sin, {{"x", 1, 2, {6, 5}, 2.0}}},
    {"linear_add", b_linear_add, {{"x", 1, 3, {2, 3, 4}, 1.0}, {"W", 1, 2, {4, 5}, 1.0},
                                  {"r", 1, 3, {2, 3, 5}, 1.0}, {"b", 1, 1, {5}, 1.0}}},
    {"linear_gelu", b_linear_gelu, {{"x", 1, 3, {2, 3, 4}, 1.5}, {"W", 1, 2, {4, 5}, 1.0},
                                    {"b", 1, 1, {5}, 1.0}}},
    {"linear_gelu_nobias", b_linear_gelu, {{"x", 1, 2, {6, 4}, 1.5}, {"W", 1, 2, {4, 5}, 1.0}}},
    {"linear_gelu_const_x", b_linear_gelu, {{"x", 0, 2, {6, 4}, 1.5}, {"W", 1, 2, {4, 37}, 1.0},
                                            {"b", 1, 1, {37}, 1.0}}},
    {"add_layernorm", b_add_layernorm, {{"a", 1, 3, {2, 3, 6}, 2.0}, {"b", 1, 3, {2, 3, 6}, 1.0},
                                        {"gamma", 1, 1, {6}, 1.5}, {"beta", 1, 1, {6}, 1.0}}},
    {"linear_add_nobias", b_linear_add, {{"x", 1, 2, {6, 4}, 1.0}, {"W", 1, 2, {4, 5}, 1.0},
                                         {"r", 1, 2, {6, 5}, 1.0}}},
};

START_TEST(test_leaf_cases)
{
    const struct leaf_case *c = &leaf_cases[_i];
    graph g = {.build = c->build, .smoothing = SMOOTHING};
    uint64_t seed = 80 + (uint64_t)_i;
    for (int k = 0; k < MAX_LEAVES && c->leaf[k].name; k++) {
        const leaf_spec *l = &c->leaf[k];
        add_leaf(&g, l->name, l->wants_grad, l->scale, &seed, l->ndim, l->d[0], l->d[1], l->d[2],
                 l->d[3]);
    }
    check_graph(&g, c->what);
}
END_TEST

/* The checkpointed sub-graph: a parameter W [4, 4] made inside from ctx,
 * r = x + s * GELU(x W + b)^2, with x [2, 3, 4] and b [4] as inputs. */
typedef struct block_ctx {
    vit_real *W, *gW;
    vit_real s;
} block_ctx;

static vit_tensor *block_fn(vit_tape *t, vit_tensor *const *in, void *c)
{
    const block_ctx *ctx = c;
    vit_tensor *W = vit_tape_leaf(t, ctx->W, ctx->gW, 2, (int[]){4, 4});
    vit_tensor *h = vit_op_gelu(t, vit_op_linear(t, in[0], W, in[1]));
    return vit_op_add(t, in[0], vit_op_scale(t, vit_op_mul(t, h, h), ctx->s));
}

/* Leaves x, W, b, W2: the block through a checkpoint (g->index 1) or
 * called directly (0), then x + block(x) (x reaches the loss outside the
 * block too) through a linear map W2. */
static vit_tensor *b_block(graph *g, vit_tape *t, vit_tensor **in)
{
    block_ctx ctx = {.W = in[1]->data, .gW = in[1]->grad, .s = (vit_real)0.5};
    vit_tensor *bin[2] = {in[0], in[2]};
    vit_tensor *r = g->index ? vit_op_checkpoint(t, block_fn, 2, bin, &ctx, sizeof ctx)
                             : block_fn(t, bin, &ctx);
    ctx.W = ctx.gW = NULL; /* the checkpoint's copy is used in its backward */
    return vit_op_linear(t, vit_op_add(t, r, in[0]), in[3], NULL);
}

static void block_graph(graph *g, int checkpoint)
{
    *g = (graph){.build = b_block, .smoothing = SMOOTHING, .index = checkpoint};
    uint64_t seed = 103;
    add_leaf(g, "x", 1, 1.0, &seed, 3, 2, 3, 4, 0);
    add_leaf(g, "W", 1, 1.0, &seed, 2, 4, 4, 0, 0);
    add_leaf(g, "b", 1, 1.0, &seed, 1, 4, 0, 0, 0);
    add_leaf(g, "W2", 1, 1.0, &seed, 2, 4, 5, 0, 0);
}

START_TEST(test_checkpoint_grad)
{
    graph g;
    block_graph(&g, 1);
    check_graph(&g, "checkpoint");
}
END_TEST

START_TEST(test_checkpoint_bitwise)
{
    /* Gradients of every leaf bitwise those of the direct call: from zeroed
     * gradients, and again accumulating onto the first step's. */
    graph g[2];
    vit_tape *t[2];
    vit_tensor *loss[2];
    for (int k = 0; k < 2; k++) {
        block_graph(&g[k], k);
        t[k] = vit_tape_new();
    }
    for (int step = 0; step < 2; step++) {
        for (int k = 0; k < 2; k++) {
            loss[k] = record(&g[k], t[k], 1);
            ck_assert_msg(loss[k] != NULL, "%s", vit_last_error());
            ck_assert_int_eq(vit_tape_backward(t[k], loss[k]), VIT_OK);
        }
        ck_assert(memcmp(loss[0]->data, loss[1]->data, sizeof *loss[0]->data) == 0);
        /* The block's five ops are one on the checkpointing tape. */
        ck_assert_int_eq(vit_tape_op_count(t[1]), vit_tape_op_count(t[0]) - 4);
        for (int i = 0; i < 4; i++)
            ck_assert_msg(memcmp(g[0].leaf[i].grad, g[1].leaf[i].grad,
                                 g[0].leaf[i].n * sizeof(vit_real)) == 0,
                          "step %d: gradient of %s differs from the direct call's", step + 1,
                          g[0].leaf[i].name);
    }
    for (int k = 0; k < 2; k++) {
        vit_tape_free(t[k]);
        graph_free(&g[k]);
    }
}
END_TEST

START_TEST(test_chain_shapes)
{
    /* Shapes only: cls_prepend adds one token, token/mean drop the token
     * dimension, linear keeps leading dimensions. */
    vit_tape *t = vit_tape_new();
    vit_real img[2 * 4 * 4], W[4 * 3], cls[3], pos[5 * 3];
    uint64_t seed = 50;
    gc_fill(img, 32, &seed, 1);
    gc_fill(W, 12, &seed, 1);
    gc_fill(cls, 3, &seed, 1);
    gc_fill(pos, 15, &seed, 1);
    vit_patch_shape ps = {.batch = 2, .height = 4, .width = 4, .channels = 1, .patch = 2, .dim = 3};
    vit_tensor *x = vit_op_patch_embed(t, &ps, vit_tape_leaf(t, img, NULL, 4, (int[]){2, 4, 4, 1}),
                                       vit_tape_leaf(t, W, NULL, 2, (int[]){4, 3}), NULL);
    ck_assert_ptr_nonnull(x);
    ck_assert_int_eq(x->ndim, 3);
    ck_assert_int_eq(x->shape[0], 2);
    ck_assert_int_eq(x->shape[1], 4);
    ck_assert_int_eq(x->shape[2], 3);
    ck_assert_ptr_null(x->grad); /* no input had a gradient */
    x = vit_op_cls_prepend(t, x, vit_tape_leaf(t, cls, NULL, 1, (int[]){3}));
    ck_assert_int_eq(x->shape[1], 5);
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 3; j++)
            ck_assert(x->data[(size_t)b * 15 + j] == cls[j]);
    x = vit_op_pos_add(t, x, vit_tape_leaf(t, pos, NULL, 2, (int[]){5, 3}));
    ck_assert_int_eq(x->shape[1], 5);
    vit_tensor *tok = vit_op_token(t, x, 4), *mean = vit_op_mean_tokens(t, x, 1);
    ck_assert_int_eq(tok->ndim, 2);
    ck_assert_int_eq(tok->shape[0], 2);
    ck_assert_int_eq(tok->shape[1], 3);
    ck_assert_int_eq(mean->ndim, 2);
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 3; j++) {
            ck_assert(tok->data[b * 3 + j] == x->data[(size_t)b * 15 + 12 + j]);
            double s = 0;
            for (int k = 1; k < 5; k++)
                s += x->data[(size_t)b * 15 + k * 3 + j];
            ck_assert_double_eq_tol(mean->data[b * 3 + j], s / 4, 1e-15);
        }
    /* No input has a gradient, so there is nothing to record. */
    ck_assert_int_eq(vit_tape_op_count(t), 0);
    ck_assert_int_eq(vit_tape_status(t), VIT_OK);
    vit_tape_free(t);
}
END_TEST

/* ---- memory ---------------------------------------------------------- */

typedef struct mem_net {
    vit_real *x, *W1, *b1, *W2, *Wh, *g1, *g2, *gb1, *gh;
    int labels[64];
} mem_net;

/* A step big enough to need several arena chunks the first time
 * (activations [64, 512] in doubles are 256 KiB each). */
static double mem_step(vit_tape *t, mem_net *n, int *ops)
{
    vit_tape_reset(t);
    ck_assert_int_eq(vit_tape_op_count(t), 0);
    vit_tensor *x = vit_tape_leaf(t, n->x, NULL, 2, (int[]){64, 128});
    vit_tensor *W1 = vit_tape_leaf(t, n->W1, n->g1, 2, (int[]){128, 512});
    vit_tensor *b1 = vit_tape_leaf(t, n->b1, n->gb1, 1, (int[]){512});
    vit_tensor *W2 = vit_tape_leaf(t, n->W2, n->g2, 2, (int[]){512, 128});
    vit_tensor *Wh = vit_tape_leaf(t, n->Wh, n->gh, 2, (int[]){128, 10});
    vit_tensor *h = vit_op_gelu(t, vit_op_linear(t, x, W1, b1));
    vit_tensor *y = vit_op_add(t, x, vit_op_linear(t, h, W2, NULL));
    vit_tensor *loss = vit_op_cross_entropy(t, vit_op_linear(t, y, Wh, NULL), n->labels, 0.1, NULL);
    ck_assert_msg(loss != NULL, "%s", vit_last_error());
    ck_assert_int_eq(vit_tape_backward(t, loss), VIT_OK);
    *ops = vit_tape_op_count(t);
    return (double)loss->data[0];
}

START_TEST(test_memory_steady)
{
    mem_net n;
    uint64_t seed = 60;
    n.x = gc_zeros(64 * 128);
    n.W1 = gc_zeros(128 * 512);
    n.b1 = gc_zeros(512);
    n.W2 = gc_zeros(512 * 128);
    n.Wh = gc_zeros(128 * 10);
    n.g1 = gc_zeros(128 * 512);
    n.gb1 = gc_zeros(512);
    n.g2 = gc_zeros(512 * 128);
    n.gh = gc_zeros(128 * 10);
    gc_fill(n.x, 64 * 128, &seed, 1);
    gc_fill(n.W1, 128 * 512, &seed, 0.1);
    gc_fill(n.b1, 512, &seed, 0.1);
    gc_fill(n.W2, 512 * 128, &seed, 0.05);
    gc_fill(n.Wh, 128 * 10, &seed, 0.1);
    for (int i = 0; i < 64; i++)
        n.labels[i] = i % 10;

    vit_tape *t = vit_tape_new();
    ck_assert_int_eq(vit_tape_bytes(t), 0);
    int ops1, ops;
    double loss1 = mem_step(t, &n, &ops1);
    size_t bytes1 = vit_tape_bytes(t), used1 = vit_tape_used_bytes(t);
    ck_assert_int_eq(ops1, 6); /* linear, gelu, linear, add, linear, cross-entropy */
    /* What the step used is within what the tape holds, and at least the
     * arena's two [64, 512] outputs (the first linear's and GELU's). */
    ck_assert_uint_le(used1, bytes1);
    ck_assert_uint_ge(used1, 2 * 64 * 512 * sizeof(vit_real));
    /* Two [64, 512] tensors with their grads alone are 1 MiB. */
    ck_assert_msg(bytes1 >= 1u << 20, "arena holds only %zu bytes", bytes1);
    vit_real *g1 = gc_zeros(128 * 512);
    memcpy(g1, n.g1, 128 * 512 * sizeof *g1);
    for (int step = 0; step < 5; step++) {
        memset(n.g1, 0, 128 * 512 * sizeof *n.g1);
        memset(n.gb1, 0, 512 * sizeof *n.gb1);
        memset(n.g2, 0, 512 * 128 * sizeof *n.g2);
        memset(n.gh, 0, 128 * 10 * sizeof *n.gh);
        double loss = mem_step(t, &n, &ops);
        ck_assert_int_eq(ops, ops1);
        ck_assert_msg(vit_tape_bytes(t) == bytes1, "step %d: arena %zu bytes, first step %zu",
                      step + 2, vit_tape_bytes(t), bytes1);
        ck_assert_uint_eq(vit_tape_used_bytes(t), used1);
        /* Reused memory must not leak old values into the new step. */
        ck_assert(loss == loss1);
        ck_assert(memcmp(g1, n.g1, 128 * 512 * sizeof *g1) == 0);
    }
    printf("tape memory: %zu bytes after the first step, unchanged over 5 more\n", bytes1);
    vit_tape_reset(t);
    ck_assert_int_eq(vit_tape_op_count(t), 0);
    ck_assert_int_eq(vit_tape_bytes(t), bytes1);
    /* A reset keeps the memory but nothing of it is used yet: the arena's
     * outputs no longer count. */
    ck_assert_uint_le(vit_tape_used_bytes(t) + 2 * 64 * 512 * sizeof(vit_real), used1);
    ck_assert_int_eq(vit_tape_used_bytes(NULL), 0);
    vit_tape_free(t);
    free(g1);
    free(n.x); free(n.W1); free(n.b1); free(n.W2); free(n.Wh);
    free(n.g1); free(n.gb1); free(n.g2); free(n.gh);
}
END_TEST

/* ---- errors ---------------------------------------------------------- */

static void expect_msg(const char *fn, const char *what)
{
    const char *msg = vit_last_error();
    ck_assert_msg(strstr(msg, fn) != NULL, "message '%s' does not name %s", msg, fn);
    if (what)
        ck_assert_msg(strstr(msg, what) != NULL, "message '%s' does not mention '%s'", msg, what);
}

START_TEST(test_null_propagates)
{
    vit_tape *t = vit_tape_new();
    vit_real w[12] = {0}, gw[12] = {0};
    int labels[3] = {0, 1, 2};
    vit_tensor *W = vit_tape_leaf(t, w, gw, 2, (int[]){4, 3});
    ck_assert_int_eq(vit_tape_status(t), VIT_OK);
    vit_tensor *y = vit_op_linear(t, NULL, W, NULL);
    ck_assert_ptr_null(y);
    ck_assert_int_eq(vit_tape_status(t), VIT_EINVAL);
    expect_msg("vit_op_linear", "NULL");
    int ops = vit_tape_op_count(t);
    /* Every later op returns NULL at once, whatever its inputs. */
    y = vit_op_gelu(t, y);
    ck_assert_ptr_null(y);
    ck_assert_ptr_null(vit_op_gelu(t, W)); /* even a valid input, after an error */
    vit_tensor *loss = vit_op_cross_entropy(t, y, labels, 0, NULL);
    ck_assert_ptr_null(loss);
    ck_assert_int_eq(vit_tape_op_count(t), ops);
    ck_assert_int_eq(vit_tape_status(t), VIT_EINVAL);
    expect_msg("vit_op_linear", NULL); /* the first error's message is kept */
    int rc = vit_tape_backward(t, loss);
    ck_assert_int_eq(rc, VIT_EINVAL);
    ck_assert_int_eq(rc, vit_tape_status(t));
    expect_msg("vit_tape_backward", NULL);
    /* Reset clears the error: the same ops now work. */
    vit_tape_reset(t);
    ck_assert_int_eq(vit_tape_status(t), VIT_OK);
    ck_assert_int_eq(vit_tape_op_count(t), 0);
    vit_real x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    vit_tensor *lx = vit_tape_leaf(t, x, NULL, 2, (int[]){2, 4});
    W = vit_tape_leaf(t, w, gw, 2, (int[]){4, 3});
    loss = vit_op_cross_entropy(t, vit_op_linear(t, lx, W, NULL), labels, 0, NULL);
    ck_assert_ptr_nonnull(loss);
    ck_assert_int_eq(vit_tape_backward(t, loss), VIT_OK);
    ck_assert_int_eq(vit_tape_status(t), VIT_OK);

    /* A NULL tape is an error, not a crash. */
    ck_assert_ptr_null(vit_op_gelu(NULL, lx));
    ck_assert_ptr_null(vit_tape_leaf(NULL, x, NULL, 1, (int[]){8}));
    ck_assert_int_eq(vit_tape_backward(NULL, loss), VIT_EINVAL);
    ck_assert_int_eq(vit_tape_status(NULL), VIT_EINVAL);
    vit_tape_free(t);
    vit_tape_free(NULL);
}
END_TEST

START_TEST(test_shape_errors)
{
    vit_tape *t = vit_tape_new();
    vit_real a[24] = {0}, b[24] = {0};
    /* linear: x width 4 but W has 5 rows */
    vit_tensor *x = vit_tape_leaf(t, a, NULL, 2, (int[]){3, 4});
    vit_tensor *W = vit_tape_leaf(t, b, NULL, 2, (int[]){5, 2});
    ck_assert_ptr_null(vit_op_linear(t, x, W, NULL));
    ck_assert_int_eq(vit_tape_status(t), VIT_EINVAL);
    expect_msg("vit_op_linear", NULL);
    vit_tape_reset(t);
    /* linear: bias of the wrong length */
    x = vit_tape_leaf(t, a, NULL, 2, (int[]){3, 4});
    W = vit_tape_leaf(t, b, NULL, 2, (int[]){4, 2});
    vit_tensor *bias = vit_tape_leaf(t, b, NULL, 1, (int[]){3});
    ck_assert_ptr_null(vit_op_linear(t, x, W, bias));
    ck_assert_int_eq(vit_tape_status(t), VIT_EINVAL);
    expect_msg("vit_op_linear", NULL);
    vit_tape_reset(t);
    ck_assert_int_eq(vit_tape_status(t), VIT_OK);
    /* add: same number of values, different shapes */
    vit_tensor *p = vit_tape_leaf(t, a, NULL, 2, (int[]){3, 4});
    vit_tensor *q = vit_tape_leaf(t, b, NULL, 2, (int[]){4, 3});
    ck_assert_ptr_null(vit_op_add(t, p, q));
    ck_assert_int_eq(vit_tape_status(t), VIT_EINVAL);
    expect_msg("vit_op_add", "shape");
    vit_tape_reset(t);
    /* token out of range, pos of the wrong size, layernorm gamma too short */
    x = vit_tape_leaf(t, a, NULL, 3, (int[]){2, 3, 4});
    ck_assert_ptr_null(vit_op_token(t, x, 3));
    expect_msg("vit_op_token", NULL);
    vit_tape_reset(t);
    x = vit_tape_leaf(t, a, NULL, 3, (int[]){2, 3, 4});
    ck_assert_ptr_null(vit_op_pos_add(t, x, vit_tape_leaf(t, b, NULL, 2, (int[]){2, 4})));
    expect_msg("vit_op_pos_add", NULL);
    vit_tape_reset(t);
    /* mha_bias: a 4-D [H, N, N, 1] bias holds the right count but is not
     * [bias_heads, n_q, n_k] (issue 45) */
    vit_mha mb = {.batch = 1, .n_q = 2, .n_k = 2, .d_model = 2, .heads = 2, .bias_heads = 2};
    vit_real pm[16] = {0};
    x = vit_tape_leaf(t, a, NULL, 3, (int[]){1, 2, 2});
    ck_assert_ptr_null(vit_op_mha_bias(t, &mb, vit_tape_leaf(t, pm, NULL, 1, (int[]){16}), x, x,
                                       vit_tape_leaf(t, b, NULL, 4, (int[]){2, 2, 2, 1}), NULL));
    expect_msg("vit_op_mha_bias",
               "bias must be [bias_heads, n_q, n_k] = [2, 2, 2], got [2, 2, 2, 1]");
    vit_tape_reset(t);
    /* local_conv: 3 tokens are not a class token and a 2 x 2 grid */
    vit_real w36[36] = {0};
    x = vit_tape_leaf(t, a, NULL, 3, (int[]){2, 3, 4});
    ck_assert_ptr_null(vit_op_local_conv(t, x, vit_tape_leaf(t, w36, NULL, 2, (int[]){9, 4}),
                                         NULL, 2, 2));
    expect_msg("vit_op_local_conv", "1 + 2*2");
    vit_tape_reset(t);
    x = vit_tape_leaf(t, a, NULL, 2, (int[]){6, 4});
    vit_tensor *g3 = vit_tape_leaf(t, b, NULL, 1, (int[]){3});
    ck_assert_ptr_null(vit_op_layernorm(t, x, g3, g3, 1e-5));
    expect_msg("vit_op_layernorm", NULL);
    vit_tape_reset(t);
    /* bad leaves */
    ck_assert_ptr_null(vit_tape_leaf(t, a, NULL, 2, (int[]){3, 0}));
    ck_assert_int_eq(vit_tape_status(t), VIT_EINVAL);
    vit_tape_reset(t);
    ck_assert_ptr_null(vit_tape_leaf(t, NULL, NULL, 1, (int[]){3}));
    vit_tape_reset(t);
    /* backward of a loss that is not a scalar with a gradient */
    x = vit_tape_leaf(t, a, NULL, 2, (int[]){3, 4});
    ck_assert_int_eq(vit_tape_backward(t, x), VIT_EINVAL);
    expect_msg("vit_tape_backward", NULL);
    vit_tape_free(t);
}
END_TEST

START_TEST(test_kernel_error_status)
{
    /* An error inside a kernel (a NaN reaching attention scores) becomes the
     * tape's status with the kernel's code. */
    vit_tape *t = vit_tape_new();
    vit_mha m = {.batch = 1, .n_q = 2, .n_k = 2, .d_model = 4, .heads = 2, .has_bias = 1};
    size_t np = vit_mha_param_count(&m);
    vit_real *p = gc_zeros(np), x[8];
    uint64_t seed = 70;
    gc_fill(p, np, &seed, 0.5);
    gc_fill(x, 8, &seed, 1);
    x[3] = NAN;
    vit_tensor *lx = vit_tape_leaf(t, x, NULL, 3, (int[]){1, 2, 4});
    vit_tensor *lp = vit_tape_leaf(t, p, NULL, 1, (int[]){(int)np});
    ck_assert_ptr_null(vit_op_mha(t, &m, lp, lx, lx, NULL));
    ck_assert_int_eq(vit_tape_status(t), VIT_ENUM);
    vit_tape_reset(t);
    ck_assert_int_eq(vit_tape_status(t), VIT_OK);
    free(p);
    vit_tape_free(t);
}
END_TEST

/* ---- backward from any tensor, once per reset --------------------------- */

/* Leaves x [3, 4] and W [4, 5], both with gradients, on tape t. */
typedef struct xw {
    vit_real x[12], W[20], gx[12], gW[20];
    vit_tensor *lx, *lW;
} xw;

static void xw_init(xw *f, uint64_t seed)
{
    memset(f, 0, sizeof *f);
    gc_fill(f->x, 12, &seed, 1);
    gc_fill(f->W, 20, &seed, 1);
}

static vit_tensor *xw_linear(vit_tape *t, xw *f)
{
    f->lx = vit_tape_leaf(t, f->x, f->gx, 2, (int[]){3, 4});
    f->lW = vit_tape_leaf(t, f->W, f->gW, 2, (int[]){4, 5});
    return vit_op_linear(t, f->lx, f->lW, NULL);
}

static const int xw_labels[3] = {4, 0, 2};

static vit_tensor *xw_loss(vit_tape *t, xw *f)
{
    return vit_op_cross_entropy(t, xw_linear(t, f), xw_labels, SMOOTHING, NULL);
}

/* |a - b| <= tol * max(1, |b|) for every entry. */
static void assert_close(const char *what, const vit_real *a, const double *b, size_t n,
                         double tol)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs((double)a[i] - b[i]) <= tol * fmax(1.0, fabs(b[i])),
                      "%s[%zu]: %.17g, expected %.17g", what, i, (double)a[i], b[i]);
}

START_TEST(test_backward_from_tensor)
{
    /* y = x W with a caller's dy [3, 5]: dW = x^T dy, dx = dy W^T. */
    xw f;
    xw_init(&f, 110);
    vit_real dy[15], dy0[15];
    uint64_t seed = 111;
    gc_fill(dy, 15, &seed, 1);
    memcpy(dy0, dy, sizeof dy);
    vit_tape *t = vit_tape_new();
    vit_tensor *y = xw_linear(t, &f);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(vit_tape_backward_from(t, y, dy), VIT_OK);
    ck_assert(memcmp(dy, dy0, sizeof dy) == 0); /* read only */
    ck_assert_ptr_null(y->grad);                 /* not retained */
    double dW[20] = {0}, dx[12] = {0};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++)
            for (int r = 0; r < 3; r++) {
                dW[i * 5 + j] += (double)f.x[r * 4 + i] * dy[r * 5 + j];
                dx[r * 4 + i] += (double)dy[r * 5 + j] * f.W[i * 5 + j];
            }
    assert_close("dW", f.gW, dW, 20, 1e-14);
    assert_close("dx", f.gx, dx, 12, 1e-14);

    /* A scalar loss with dy = {s}: s times the plain backward's gradients. */
    xw g;
    xw_init(&g, 112);
    vit_tape_reset(t);
    ck_assert_int_eq(vit_tape_backward(t, xw_loss(t, &g)), VIT_OK);
    double sW[20], sx[12];
    const vit_real s = (vit_real)-0.3;
    for (int i = 0; i < 20; i++)
        sW[i] = s * g.gW[i];
    for (int i = 0; i < 12; i++)
        sx[i] = s * g.gx[i];
    memset(g.gW, 0, sizeof g.gW);
    memset(g.gx, 0, sizeof g.gx);
    vit_tape_reset(t);
    ck_assert_int_eq(vit_tape_backward_from(t, xw_loss(t, &g), &s), VIT_OK);
    assert_close("s dW", g.gW, sW, 20, 1e-14);
    assert_close("s dx", g.gx, sx, 12, 1e-14);

    /* dy NULL is refused. */
    vit_tape_reset(t);
    ck_assert_int_eq(vit_tape_backward_from(t, xw_linear(t, &g), NULL), VIT_EINVAL);
    expect_msg("vit_tape_backward", "dy");
    vit_tape_free(t);
}
END_TEST

START_TEST(test_backward_once)
{
    xw f;
    xw_init(&f, 113);
    vit_tape *t = vit_tape_new();
    vit_tensor *loss = xw_loss(t, &f);
    ck_assert_int_eq(vit_tape_backward(t, loss), VIT_OK);
    vit_real gx[12], gW[20];
    memcpy(gx, f.gx, sizeof gx);
    memcpy(gW, f.gW, sizeof gW);
    /* Again without a reset: refused, leaf gradients untouched. */
    ck_assert_int_eq(vit_tape_backward(t, loss), VIT_EINVAL);
    expect_msg("vit_tape_backward", "already ran its backward");
    vit_real one = 1;
    ck_assert_int_eq(vit_tape_backward_from(t, loss, &one), VIT_EINVAL);
    expect_msg("vit_tape_backward", "already ran its backward");
    ck_assert(memcmp(gx, f.gx, sizeof gx) == 0 && memcmp(gW, f.gW, sizeof gW) == 0);
    /* After a reset the same step runs again and accumulates: exactly twice. */
    vit_tape_reset(t);
    ck_assert_int_eq(vit_tape_backward(t, xw_loss(t, &f)), VIT_OK);
    for (int i = 0; i < 12; i++)
        ck_assert(f.gx[i] == 2 * gx[i]);
    for (int i = 0; i < 20; i++)
        ck_assert(f.gW[i] == 2 * gW[i]);
    vit_tape_free(t);
}
END_TEST

/* ---- no-grad mode ------------------------------------------------------ */

/* Inputs for one of every op, all leaves with gradient buffers. */
typedef struct all_in {
    vit_real x[24], W[16], b[4], gamma[4], beta[4], table[20], clsv[4], pos[12], img[32], Wp[16];
    vit_real bias[18], *params;
    vit_real g[512]; /* gradient buffers, carved per leaf */
    vit_mha mha, mha_b;
    vit_patch_shape ps;
} all_in;

static void all_in_init(all_in *a)
{
    memset(a, 0, sizeof *a);
    a->mha = (vit_mha){.batch = 2, .n_q = 3, .n_k = 3, .d_model = 4, .heads = 2, .has_bias = 1};
    a->mha_b = a->mha;
    a->mha_b.bias_heads = 2;
    a->ps = (vit_patch_shape){.batch = 2, .height = 4, .width = 4, .channels = 1, .patch = 2,
                              .dim = 4};
    size_t np = vit_mha_param_count(&a->mha);
    a->params = gc_zeros(np);
    uint64_t seed = 120;
    vit_real *bufs[] = {a->x, a->W, a->b, a->gamma, a->beta, a->table, a->clsv, a->pos, a->img,
                        a->Wp, a->bias, a->params};
    size_t ns[] = {24, 16, 4, 4, 4, 20, 4, 12, 32, 16, 18, np};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++)
        gc_fill(bufs[k], ns[k], &seed, 1);
}

#define ALL_OPS 21

/* Runs every op (and a custom op and a checkpoint) on t; out[ALL_OPS]. */
static void all_ops(vit_tape *t, all_in *a, vit_tensor **out)
{
    vit_real *g = a->g;
#define LEAF(data, n, nd, ...) \
    (g += (n), vit_tape_leaf(t, data, g - (n), nd, (int[]){__VA_ARGS__}))
    vit_tensor *x = LEAF(a->x, 24, 3, 2, 3, 4), *W = LEAF(a->W, 16, 2, 4, 4);
    vit_tensor *b = LEAF(a->b, 4, 1, 4), *gm = LEAF(a->gamma, 4, 1, 4);
    vit_tensor *bt = LEAF(a->beta, 4, 1, 4), *tab = LEAF(a->table, 20, 2, 5, 4);
    vit_tensor *cls = LEAF(a->clsv, 4, 1, 4), *pos = LEAF(a->pos, 12, 2, 3, 4);
    vit_tensor *img = LEAF(a->img, 32, 4, 2, 4, 4, 1), *Wp = LEAF(a->Wp, 16, 2, 4, 4);
    vit_tensor *bias = LEAF(a->bias, 18, 3, 2, 3, 3);
    ck_assert_int_le(g - a->g, 512);
#undef LEAF
    vit_tensor *p = vit_tape_leaf(t, a->params, NULL, 1, (int[]){(int)vit_mha_param_count(&a->mha)});
    static const int ids[6] = {0, 4, 4, 2, 1, 0}, labels[6] = {0, 1, 2, 3, 0, 1};
    static const unsigned char mask[12] = {1, 1, 0, 1, 0, 1, 1, 1, 1, 1, 0, 0};
    int k = 0;
    out[k++] = vit_op_linear(t, x, W, b);
    out[k++] = vit_op_layernorm(t, out[0], gm, bt, (vit_real)1e-5);
    out[k++] = vit_op_gelu(t, out[1]);
    out[k++] = vit_op_add(t, out[2], x);
    out[k++] = vit_op_mul(t, out[3], x);
    out[k++] = vit_op_scale(t, out[4], (vit_real)0.5);
    out[k++] = vit_op_softmax(t, out[5]);
    out[k++] = vit_op_reshape(t, out[6], 2, (int[]){6, 4});
    out[k++] = vit_op_concat_tokens(t, 2, (vit_tensor *[]){x, out[3]});
    out[k++] = vit_op_embedding(t, tab, ids, 2, (int[]){2, 3});
    out[k++] = vit_op_masked_mean(t, out[8], mask);
    out[k++] = vit_op_mha(t, &a->mha, p, x, out[9], NULL);
    out[k++] = vit_op_mha_bias(t, &a->mha_b, p, out[2], out[2], bias, NULL);
    out[k++] = vit_op_patch_embed(t, &a->ps, img, Wp, b);
    out[k++] = vit_op_cls_prepend(t, out[13], cls);
    out[k++] = vit_op_pos_add(t, out[12], pos);
    out[k++] = vit_op_token(t, out[14], 0);
    out[k++] = vit_op_mean_tokens(t, out[14], 1);
    out[k++] = vit_op_cross_entropy(t, out[7], labels, SMOOTHING, NULL);
    out[k++] = cube_op(t, out[15], b);
    block_ctx bc = {.W = a->W, .gW = g, .s = (vit_real)0.5};
    out[k++] = vit_op_checkpoint(t, block_fn, 2, (vit_tensor *[]){out[19], b}, &bc, sizeof bc);
    ck_assert_int_eq(k, ALL_OPS);
    ck_assert_msg(vit_tape_status(t) == VIT_OK, "%s", vit_last_error());
}

START_TEST(test_no_grad)
{
    all_in a;
    all_in_init(&a);
    vit_tape *tg = vit_tape_new(), *tn = vit_tape_new();
    vit_tensor *yg[ALL_OPS], *yn[ALL_OPS];
    all_ops(tg, &a, yg);
    ck_assert_int_gt(vit_tape_op_count(tg), ALL_OPS - 2);

    ck_assert_int_eq(vit_tape_grad_enabled(tn), 1);
    ck_assert_int_eq(vit_tape_set_grad(tn, 0), 1);
    ck_assert_int_eq(vit_tape_set_grad(tn, 0), 0);
    ck_assert_int_eq(vit_tape_grad_enabled(tn), 0);
    all_ops(tn, &a, yn);
    ck_assert_int_eq(vit_tape_op_count(tn), 0);
    for (int k = 0; k < ALL_OPS; k++) {
        ck_assert_msg(yg[k]->requires_grad, "op %d", k);
        ck_assert_msg(!yn[k]->requires_grad && !yn[k]->grad, "op %d", k);
        ck_assert_int_eq(yn[k]->size, yg[k]->size);
        ck_assert_msg(memcmp(yn[k]->data, yg[k]->data, yn[k]->size * sizeof(vit_real)) == 0,
                      "op %d: values differ without gradients", k);
    }
    /* Nothing to run a backward from. */
    ck_assert_int_eq(vit_tape_backward(tn, yn[18]), VIT_EINVAL);
    expect_msg("vit_tape_backward", "no-grad");
    for (size_t i = 0; i < sizeof a.g / sizeof *a.g; i++)
        ck_assert(a.g[i] == 0);
    /* The mode survives a reset; switching back returns the old mode. */
    vit_tape_reset(tn);
    ck_assert_int_eq(vit_tape_grad_enabled(tn), 0);
    ck_assert_int_eq(vit_tape_set_grad(tn, 1), 0);
    ck_assert_int_eq(vit_tape_set_grad(tn, 1), 1);
    all_ops(tn, &a, yn);
    ck_assert_int_eq(vit_tape_op_count(tn), vit_tape_op_count(tg));
    ck_assert_int_eq(vit_tape_set_grad(NULL, 0), VIT_EINVAL);
    ck_assert_int_eq(vit_tape_grad_enabled(NULL), 0);
    vit_tape_free(tg);
    vit_tape_free(tn);
    free(a.params);
}
END_TEST

/* ---- marks and releases ------------------------------------------------ */

/* One piece of a no-grad evaluation: layer norm, attention, GELU(x W + b)
 * over x [4, 16, 32]; the piece's leaf is piece p of the batch. */
typedef struct piece_net {
    vit_real x[8][4 * 16 * 32], W[32 * 32], b[32], gamma[32], beta[32], *params;
    vit_mha mha;
} piece_net;

static vit_tensor *piece(vit_tape *t, piece_net *n, int p)
{
    vit_tensor *x = vit_tape_leaf(t, n->x[p], NULL, 3, (int[]){4, 16, 32});
    vit_tensor *prm = vit_tape_leaf(t, n->params, NULL, 1, (int[]){(int)vit_mha_param_count(&n->mha)});
    vit_tensor *h = vit_op_layernorm(t, x, vit_tape_leaf(t, n->gamma, NULL, 1, (int[]){32}),
                                     vit_tape_leaf(t, n->beta, NULL, 1, (int[]){32}), 1e-5);
    h = vit_op_mha(t, &n->mha, prm, h, h, NULL);
    return vit_op_gelu(t, vit_op_linear(t, h, vit_tape_leaf(t, n->W, NULL, 2, (int[]){32, 32}),
                                        vit_tape_leaf(t, n->b, NULL, 1, (int[]){32})));
}

START_TEST(test_mark_release)
{
    piece_net *n = calloc(1, sizeof *n);
    ck_assert_ptr_nonnull(n);
    n->mha = (vit_mha){.batch = 4, .n_q = 16, .n_k = 16, .d_model = 32, .heads = 4, .has_bias = 1};
    n->params = gc_zeros(vit_mha_param_count(&n->mha));
    uint64_t seed = 130;
    gc_fill(&n->x[0][0], sizeof n->x / sizeof(vit_real), &seed, 1);
    gc_fill(n->W, 32 * 32, &seed, 0.2);
    gc_fill(n->b, 32, &seed, 0.2);
    gc_fill(n->gamma, 32, &seed, 1);
    gc_fill(n->beta, 32, &seed, 1);
    gc_fill(n->params, vit_mha_param_count(&n->mha), &seed, 0.2);
    const size_t piece_n = 4 * 16 * 32;

    /* Reference: every piece on its own tape, nothing released. */
    vit_real *ref = gc_zeros(8 * piece_n);
    vit_tape *r = vit_tape_new();
    vit_tape_set_grad(r, 0);
    for (int p = 0; p < 8; p++) {
        vit_tensor *y = piece(r, n, p);
        ck_assert_ptr_nonnull(y);
        memcpy(ref + p * piece_n, y->data, piece_n * sizeof *ref);
    }
    vit_tape_free(r);

    /* Forty pieces through one mark: the same memory every time. */
    vit_tape *t = vit_tape_new();
    vit_tape_set_grad(t, 0);
    size_t m = vit_tape_mark(t), bytes = 0;
    vit_real *first = NULL;
    for (int p = 0; p < 40; p++) {
        vit_tensor *y = piece(t, n, p % 8);
        ck_assert_ptr_nonnull(y);
        ck_assert_msg(memcmp(y->data, ref + (p % 8) * piece_n, piece_n * sizeof *ref) == 0,
                      "piece %d: values differ from a tape without releases", p);
        if (p == 0) {
            first = y->data;
            bytes = vit_tape_bytes(t);
        }
        ck_assert_msg(y->data == first, "piece %d: output at %p, first at %p", p,
                      (void *)y->data, (void *)first);
        ck_assert_msg(vit_tape_bytes(t) == bytes, "piece %d: %zu bytes, first piece %zu", p,
                      vit_tape_bytes(t), bytes);
        ck_assert_int_gt(vit_tape_mark(t), m);
        ck_assert_int_eq(vit_tape_release(t, m), VIT_OK);
        ck_assert_int_eq(vit_tape_mark(t), m);
    }
    /* A mark beyond the position: refused. */
    ck_assert_int_eq(vit_tape_release(t, m + 64), VIT_EINVAL);
    expect_msg("vit_tape_release", "beyond");
    vit_tape_free(t);

    /* Grad mode: a step recorded before the mark, a no-grad piece released
     * after it, then the step's backward gives the gradients of a tape
     * that never ran the piece. */
    xw f[2];
    vit_tape *tt[2] = {vit_tape_new(), vit_tape_new()};
    for (int k = 0; k < 2; k++) {
        xw_init(&f[k], 131);
        vit_tensor *loss = xw_loss(tt[k], &f[k]);
        if (k) {
            m = vit_tape_mark(tt[k]);
            ck_assert_int_eq(vit_tape_set_grad(tt[k], 0), 1);
            ck_assert_ptr_nonnull(piece(tt[k], n, 3));
            ck_assert_int_eq(vit_tape_release(tt[k], m), VIT_OK);
            ck_assert_int_eq(vit_tape_set_grad(tt[k], 1), 0);
        }
        ck_assert_int_eq(vit_tape_backward(tt[k], loss), VIT_OK);
    }
    ck_assert(memcmp(f[0].gx, f[1].gx, sizeof f[0].gx) == 0);
    ck_assert(memcmp(f[0].gW, f[1].gW, sizeof f[0].gW) == 0);

    /* Ops recorded since the mark: refused, and the tape stays usable. */
    vit_tape_reset(tt[0]);
    memset(f[0].gW, 0, sizeof f[0].gW);
    memset(f[0].gx, 0, sizeof f[0].gx);
    m = vit_tape_mark(tt[0]);
    vit_tensor *loss = xw_loss(tt[0], &f[0]);
    ck_assert_int_eq(vit_tape_release(tt[0], m), VIT_EINVAL);
    expect_msg("vit_tape_release", "recorded");
    ck_assert_int_eq(vit_tape_backward(tt[0], loss), VIT_OK);
    ck_assert(memcmp(f[0].gW, f[1].gW, sizeof f[0].gW) == 0);
    ck_assert_int_eq(vit_tape_release(NULL, 0), VIT_EINVAL);
    for (int k = 0; k < 2; k++)
        vit_tape_free(tt[k]);
    free(ref);
    free(n->params);
    free(n);
}
END_TEST

/* ---- lean gradients ---------------------------------------------------- */

START_TEST(test_retain_grad)
{
    /* a = x W1, h = GELU(a), z = h W2, loss = CE(z); q = GELU(a) unused.
     * x [4, 6] constant, W1 [6, 8], W2 [8, 5]. */
    vit_real x[24], W1[48], W2[40], g1[48] = {0}, g2[40] = {0};
    uint64_t seed = 140;
    gc_fill(x, 24, &seed, 1);
    gc_fill(W1, 48, &seed, 1);
    gc_fill(W2, 40, &seed, 1);
    static const int labels[4] = {1, 4, 0, 2};
    vit_tape *t = vit_tape_new();
    vit_tensor *lx = vit_tape_leaf(t, x, NULL, 2, (int[]){4, 6});
    vit_tensor *lW1 = vit_tape_leaf(t, W1, g1, 2, (int[]){6, 8});
    vit_tensor *lW2 = vit_tape_leaf(t, W2, g2, 2, (int[]){8, 5});
    vit_tensor *a = vit_op_linear(t, lx, lW1, NULL), *h = vit_op_gelu(t, a);
    vit_tensor *q = vit_op_gelu(t, a), *z = vit_op_linear(t, h, lW2, NULL);
    vit_tensor *loss = vit_op_cross_entropy(t, z, labels, 0, NULL);
    ck_assert_ptr_nonnull(loss);
    vit_tensor *made[5] = {a, h, q, z, loss};
    for (int k = 0; k < 5; k++)
        ck_assert_msg(made[k]->requires_grad && !made[k]->grad, "tensor %d holds a gradient", k);

    /* Leaves and tensors without a gradient cannot be retained. */
    ck_assert_int_eq(vit_tape_retain_grad(t, lW1), VIT_EINVAL);
    expect_msg("vit_tape_retain_grad", "leaf");
    vit_tensor *c = vit_op_gelu(t, lx);
    ck_assert_int_eq(vit_tape_retain_grad(t, c), VIT_EINVAL);
    expect_msg("vit_tape_retain_grad", "no gradient");
    ck_assert_int_eq(vit_tape_retain_grad(t, NULL), VIT_EINVAL);

    ck_assert_int_eq(vit_tape_retain_grad(t, h), VIT_OK);
    ck_assert_int_eq(vit_tape_retain_grad(t, z), VIT_OK);
    ck_assert_int_eq(vit_tape_retain_grad(t, q), VIT_OK);
    ck_assert_int_eq(vit_tape_backward(t, loss), VIT_OK);
    /* Too late for a itself: its gradient has gone back to the pool. */
    ck_assert_int_eq(vit_tape_retain_grad(t, a), VIT_EINVAL);
    expect_msg("vit_tape_retain_grad", "before");
    ck_assert_ptr_null(a->grad);
    ck_assert_ptr_null(loss->grad);
    ck_assert_ptr_nonnull(h->grad);
    ck_assert_ptr_nonnull(z->grad);
    ck_assert_ptr_nonnull(q->grad);

    /* dz = (softmax(z) - onehot) / B, dh = dz W2^T, dW2 = h^T dz. */
    double dz[20], dh[32] = {0}, dW2[40] = {0};
    for (int r = 0; r < 4; r++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < 5; j++)
            mx = fmax(mx, z->data[r * 5 + j]);
        for (int j = 0; j < 5; j++)
            s += exp(z->data[r * 5 + j] - mx);
        for (int j = 0; j < 5; j++)
            dz[r * 5 + j] = (exp(z->data[r * 5 + j] - mx) / s - (j == labels[r])) / 4;
    }
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < 8; i++)
            for (int j = 0; j < 5; j++) {
                dh[r * 8 + i] += dz[r * 5 + j] * W2[i * 5 + j];
                dW2[i * 5 + j] += (double)h->data[r * 8 + i] * dz[r * 5 + j];
            }
    assert_close("dz", z->grad, dz, 20, 1e-14);
    assert_close("dh", h->grad, dh, 32, 1e-14);
    assert_close("dW2", g2, dW2, 40, 1e-14);
    /* Nothing reached q: its retained gradient reads as zeros. */
    for (int i = 0; i < 32; i++)
        ck_assert(q->grad[i] == 0);

    /* No-grad outputs cannot be retained either. */
    vit_tape_reset(t);
    vit_tape_set_grad(t, 0);
    lW1 = vit_tape_leaf(t, W1, g1, 2, (int[]){6, 8});
    c = vit_op_gelu(t, lW1);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(vit_tape_retain_grad(t, c), VIT_EINVAL);
    vit_tape_free(t);
}
END_TEST

/* K layers x = GELU(x W_k + b_k) of [64, 128] and a cross-entropy over
 * the last x as 128-class logits. */
#define LEAN_K 8
#define LEAN_R 64
#define LEAN_D 128

typedef struct lean_net {
    vit_real *x, *W[LEAN_K], *b[LEAN_K], *gW[LEAN_K], *gb[LEAN_K];
    int labels[LEAN_R];
} lean_net;

static void lean_step(vit_tape *t, lean_net *n)
{
    vit_tape_reset(t);
    vit_tensor *x = vit_tape_leaf(t, n->x, NULL, 2, (int[]){LEAN_R, LEAN_D});
    vit_tensor *made[2 * LEAN_K + 1];
    for (int k = 0; k < LEAN_K; k++) {
        made[2 * k] = vit_op_linear(t, x, vit_tape_leaf(t, n->W[k], n->gW[k], 2,
                                                         (int[]){LEAN_D, LEAN_D}),
                                    vit_tape_leaf(t, n->b[k], n->gb[k], 1, (int[]){LEAN_D}));
        made[2 * k + 1] = x = vit_op_gelu(t, made[2 * k]);
    }
    made[2 * LEAN_K] = vit_op_cross_entropy(t, x, n->labels, SMOOTHING, NULL);
    ck_assert_msg(made[2 * LEAN_K] != NULL, "%s", vit_last_error());
    for (int k = 0; k <= 2 * LEAN_K; k++)
        ck_assert_msg(!made[k]->grad, "forward: op %d holds a gradient", k);
    ck_assert_int_eq(vit_tape_backward(t, made[2 * LEAN_K]), VIT_OK);
    for (int k = 0; k <= 2 * LEAN_K; k++)
        ck_assert_msg(!made[k]->grad, "backward: op %d still holds a gradient", k);
}

START_TEST(test_lean_memory)
{
    lean_net n;
    uint64_t seed = 150;
    n.x = gc_zeros(LEAN_R * LEAN_D);
    gc_fill(n.x, LEAN_R * LEAN_D, &seed, 1);
    for (int k = 0; k < LEAN_K; k++) {
        n.W[k] = gc_zeros(LEAN_D * LEAN_D);
        n.gW[k] = gc_zeros(LEAN_D * LEAN_D);
        n.b[k] = gc_zeros(LEAN_D);
        n.gb[k] = gc_zeros(LEAN_D);
        gc_fill(n.W[k], LEAN_D * LEAN_D, &seed, 0.15);
        gc_fill(n.b[k], LEAN_D, &seed, 0.1);
    }
    for (int i = 0; i < LEAN_R; i++)
        n.labels[i] = (7 * i) % LEAN_D;
    vit_tape *t = vit_tape_new();
    lean_step(t, &n);
    lean_step(t, &n); /* the arena is now one block of the step's size */
    /* One activation [64, 128]; the arena holds the 2K op outputs and the
     * cross-entropy's probabilities, plus records; the gradient pool holds
     * at most three activations' gradients (the two crossing an op and
     * the loss's), where one per activation would be another 2K + 1. */
    const size_t act = (size_t)LEAN_R * LEAN_D * sizeof(vit_real);
    const size_t values = (2 * LEAN_K + 1) * act, records = 64 * 1024, pool = 3 * act;
    size_t bytes = vit_tape_bytes(t);
    printf("lean tape: %zu bytes for %d layers, bound %zu (values %zu)\n", bytes, LEAN_K,
           values + records + pool, values);
    ck_assert_msg(bytes >= values, "%zu bytes cannot hold the %zu bytes of values", bytes, values);
    ck_assert_msg(bytes <= values + records + pool, "%zu bytes > values %zu + records %zu + pool %zu",
                  bytes, values, records, pool);
    vit_tape_free(t);
    free(n.x);
    for (int k = 0; k < LEAN_K; k++) {
        free(n.W[k]);
        free(n.gW[k]);
        free(n.b[k]);
        free(n.gb[k]);
    }
}
END_TEST

/* ---- custom op errors ------------------------------------------------- */

static int fail_backward(const vit_op_call *c)
{
    (void)c;
    return VIT_ENUM;
}

static int fail_forward(const vit_op_call *c)
{
    (void)c;
    return VIT_EFORMAT;
}

START_TEST(test_custom_errors)
{
    vit_real x[6] = {1, 2, 3, 4, 5, 6}, gx[6] = {0};
    static const int labels[2] = {0, 2};
    vit_tape *t = vit_tape_new();
    vit_tensor *lx = vit_tape_leaf(t, x, gx, 2, (int[]){2, 3});
    /* A backward's error stops vit_tape_backward with its code. */
    vit_tensor *y = vit_op_custom(t, "fails", 1, &lx, 2, lx->shape, NULL, fail_backward, NULL, 0);
    ck_assert_ptr_nonnull(y);
    memcpy(y->data, x, sizeof x);
    vit_tensor *loss = vit_op_cross_entropy(t, y, labels, 0, NULL);
    ck_assert_int_eq(vit_tape_backward(t, loss), VIT_ENUM);
    ck_assert_int_eq(vit_tape_status(t), VIT_ENUM);
    for (int i = 0; i < 6; i++)
        ck_assert(gx[i] == 0);
    /* So does a forward's, in the forward. */
    vit_tape_reset(t);
    lx = vit_tape_leaf(t, x, gx, 2, (int[]){2, 3});
    ck_assert_ptr_null(vit_op_custom(t, "fails", 1, &lx, 2, lx->shape, fail_forward,
                                     fail_backward, NULL, 0));
    ck_assert_int_eq(vit_tape_status(t), VIT_EFORMAT);
    /* An input with a gradient needs a backward; a constant one does not. */
    vit_tape_reset(t);
    lx = vit_tape_leaf(t, x, gx, 2, (int[]){2, 3});
    ck_assert_ptr_null(vit_op_custom(t, "nobackward", 1, &lx, 2, lx->shape, NULL, NULL, NULL, 0));
    ck_assert_int_eq(vit_tape_status(t), VIT_EINVAL);
    expect_msg("nobackward", "backward is NULL");
    vit_tape_reset(t);
    lx = vit_tape_leaf(t, x, NULL, 2, (int[]){2, 3});
    ck_assert_ptr_nonnull(vit_op_custom(t, "nobackward", 1, &lx, 2, lx->shape, NULL, NULL, NULL, 0));
    ck_assert_int_eq(vit_tape_op_count(t), 0);
    /* n_in out of range. */
    vit_tensor *many[17];
    for (int n_in = 0; n_in <= 17; n_in += 17) {
        vit_tape_reset(t);
        for (int i = 0; i < 17; i++)
            many[i] = vit_tape_leaf(t, x, gx, 2, (int[]){2, 3});
        ck_assert_ptr_null(vit_op_custom(t, "wide", n_in, many, 2, (int[]){2, 3}, NULL,
                                         sin_backward, NULL, 0));
        ck_assert_int_eq(vit_tape_status(t), VIT_EINVAL);
        expect_msg("wide", "n_in");
    }
    vit_tape_free(t);
}
END_TEST

/* ---- Swin's ops: windowed attention ------------------------------------ */

/* Windowed attention on 16 tokens of B = 2 items, H = 2 heads of width 3
 * (qkv [2, 16, 18]).  A 4 x 4 grid in windows of 2 x 2: case 0 plain
 * windows with a bias per head, 1 shifted by 1 with one shared bias, 2
 * shifted without bias, 3 shifted by 1 column and no row with a bias per
 * head, 4 by 1 row and no column without bias.  Rectangular windows (the
 * bias [1 or H, T, T] with T = 8): 5 a 4 x 4 grid in windows of 2 x 4
 * shifted by 1 row and 2 columns with a bias per head, 6 a 2 x 8 grid in
 * windows of 2 x 4 shifted by 2 columns with a shared bias, 7 a 4 x 4
 * grid in windows of 4 x 2 shifted by 2 rows and 1 column without. */
static const vit_window_opts win_opts[8] = {
    {.heads = 2, .grid_h = 4, .grid_w = 4, .window_h = 2, .window_w = 2},
    {.heads = 2, .grid_h = 4, .grid_w = 4, .window_h = 2, .window_w = 2, .shift_h = 1,
     .shift_w = 1},
    {.heads = 2, .grid_h = 4, .grid_w = 4, .window_h = 2, .window_w = 2, .shift_h = 1,
     .shift_w = 1, .scale = 0.7},
    {.heads = 2, .grid_h = 4, .grid_w = 4, .window_h = 2, .window_w = 2, .shift_w = 1},
    {.heads = 2, .grid_h = 4, .grid_w = 4, .window_h = 2, .window_w = 2, .shift_h = 1},
    {.heads = 2, .grid_h = 4, .grid_w = 4, .window_h = 2, .window_w = 4, .shift_h = 1,
     .shift_w = 2},
    {.heads = 2, .grid_h = 2, .grid_w = 8, .window_h = 2, .window_w = 4, .shift_w = 2},
    {.heads = 2, .grid_h = 4, .grid_w = 4, .window_h = 4, .window_w = 2, .shift_h = 2,
     .shift_w = 1},
};
/* Which cases have a bias, and its heads (0: none). */
static const int win_bias_heads[8] = {2, 1, 0, 2, 0, 2, 1, 0};

static vit_tensor *b_window(graph *g, vit_tape *t, vit_tensor **in)
{
    return vit_op_window_attn(t, in[0], g->nleaves > 1 ? in[1] : NULL, g->aux);
}

START_TEST(test_window_attn)
{
    graph g = {.build = b_window, .smoothing = SMOOTHING, .aux = &win_opts[_i]};
    uint64_t seed = 90 + (uint64_t)_i;
    add_leaf(&g, "qkv", 1, 1.5, &seed, 3, 2, 16, 18, 0);
    const int T = win_opts[_i].window_h * win_opts[_i].window_w;
    if (win_bias_heads[_i])
        add_leaf(&g, "bias", 1, 1.0, &seed, 3, win_bias_heads[_i], T, T, 0);
    static const char *what[8] = {"window_attn", "window_attn (shifted, shared bias)",
                                  "window_attn (shifted, no bias)",
                                  "window_attn (columns shifted, not rows)",
                                  "window_attn (rows shifted, not columns)",
                                  "window_attn (2x4 windows, shifted 1, 2)",
                                  "window_attn (2x4 windows over 2x8, shifted 0, 2, shared bias)",
                                  "window_attn (4x2 windows, shifted 2, 1, no bias)"};
    check_graph(&g, what[_i]);
}
END_TEST

/* The op computes what vit_sdpa computes on the same fused buffer (its own
 * strides) with the window mask of vit_mask_window: the full-grid route
 * it replaces. */
START_TEST(test_window_attn_matches_masked)
{
    enum { B = 2, N = 16, D = 6, H = 2 };
    const vit_window_opts *o = &win_opts[_i];
    vit_real qkv[B * N * 3 * D], ref[B * N * D], probs[B * H * N * N];
    unsigned char allowed[N * N];
    uint64_t seed = 7 + (uint64_t)_i;
    gc_fill(qkv, sizeof qkv / sizeof *qkv, &seed, 2.0);
    ck_assert_int_eq(vit_mask_window(allowed, o->grid_h, o->grid_w, o->window_h, o->window_w,
                                     o->shift_h, o->shift_w), VIT_OK);
    vit_sdpa a = {.batch = B, .heads = H, .n_q = N, .n_k = N, .d_k = D / H, .d_v = D / H,
                  .scale = o->scale, .mask = {.allowed = allowed},
                  .ld_q = 3 * D, .ld_k = 3 * D, .ld_v = 3 * D};
    ck_assert_int_eq(vit_sdpa_forward(&a, ref, probs, qkv, qkv + D, qkv + 2 * D), VIT_OK);
    vit_tape *t = vit_tape_new();
    vit_tensor *y = vit_op_window_attn(t, vit_tape_leaf(t, qkv, NULL, 3, (int[]){B, N, 3 * D}),
                                       NULL, o);
    ck_assert_msg(y != NULL, "%s", vit_last_error());
    ck_assert_int_eq(y->ndim, 3);
    ck_assert_int_eq(y->shape[1], N);
    ck_assert_int_eq(y->shape[2], D);
    double e = gc_max_abs_diff(y->data, ref, (size_t)B * N * D);
    ck_assert_msg(e < 1e-12, "window op vs masked sdpa: %.3e", e);
    vit_tape_free(t);
}
END_TEST

/* One bad argument per call: the op refuses it, names itself, the
 * argument and the shapes, and records nothing. */
START_TEST(test_window_attn_errors)
{
    static vit_real buf[2 * 16 * 18], bb[2 * 4 * 4 * 2];
    vit_window_opts o = win_opts[0];
    vit_tape *t = vit_tape_new();
    struct { int ndim, shape[4]; const char *arg, *what; } cases[] = {
        {3, {2, 16, 17}, NULL, "3 * heads"},              /* D not whole */
        {3, {2, 8, 36}, "qkv", "[*, 16, *], got [2, 8, 36]"}, /* wrong token count */
        {4, {2, 4, 4, 18}, "qkv", "got [2, 4, 4, 18]"},   /* a grid layout: same values */
        {2, {32, 18}, "qkv", "got [32, 18]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        vit_tape_reset(t);
        vit_tensor *x = vit_tape_leaf(t, buf, NULL, cases[i].ndim, cases[i].shape);
        ck_assert_ptr_null(vit_op_window_attn(t, x, NULL, &o));
        ck_assert_int_eq(vit_tape_status(t), VIT_EINVAL);
        expect_msg("vit_op_window_attn", cases[i].what);
        if (cases[i].arg)
            expect_msg("vit_op_window_attn", cases[i].arg);
        ck_assert_int_eq(vit_tape_op_count(t), 0);
    }
    /* Biases: a 4-D [H, T, T, 1], the wrong head count, a flat [H*T*T]. */
    struct { int ndim, shape[4]; const char *what; } biases[] = {
        {4, {2, 4, 4, 1}, "got [2, 4, 4, 1]"},
        {3, {3, 4, 4}, "[2, 4, 4], got [3, 4, 4]"},
        {1, {32}, "got [32]"},
        {3, {2, 2, 8}, "got [2, 2, 8]"},
    };
    for (size_t i = 0; i < sizeof biases / sizeof *biases; i++) {
        vit_tape_reset(t);
        vit_tensor *x = vit_tape_leaf(t, buf, NULL, 3, (int[]){2, 16, 18});
        vit_tensor *b = vit_tape_leaf(t, bb, NULL, biases[i].ndim, biases[i].shape);
        ck_assert_ptr_null(vit_op_window_attn(t, x, b, &o));
        expect_msg("vit_op_window_attn", "bias");
        expect_msg("vit_op_window_attn", biases[i].what);
    }
    /* Options: a window that does not divide the grid, a shift outside
     * [0, M) on either axis (the other one valid), no heads; rectangular
     * windows whose rows or columns do not divide the grid's, a shift
     * outside its own axis's side (valid on the other's); NULL. */
    vit_window_opts bad[11] = {o, o, o, o, o, o, o, o, o, o, o};
    bad[0].window_h = bad[0].window_w = 3;
    bad[1].shift_h = 2;
    bad[2].heads = 0;
    bad[3].shift_w = 2;
    bad[4].shift_w = -1, bad[4].shift_h = 1;
    bad[5].shift_h = -1, bad[5].shift_w = 1;
    bad[6].window_h = 3, bad[6].window_w = 4;
    bad[7].window_h = 4, bad[7].window_w = 3;
    bad[8].window_h = 2, bad[8].window_w = 4, bad[8].shift_h = 2, bad[8].shift_w = 3;
    bad[9].window_h = 4, bad[9].window_w = 2, bad[9].shift_h = 3, bad[9].shift_w = 2;
    bad[10].window_w = 0;
    const char *bad_what[11] = {"multiple of window", "shift", "heads", "shift", "shift",
                                "shift", "grid_h 4 (grid 4 x 4) is not a multiple of window_h 3",
                                "grid_w 4 (grid 4 x 4) is not a multiple of window_w 3",
                                "shift_h must be in [0, window_h = 2), got 2",
                                "shift_w must be in [0, window_w = 2), got 2",
                                "window_w (0)"};
    for (int i = 0; i < 11; i++) {
        vit_tape_reset(t);
        vit_tensor *x = vit_tape_leaf(t, buf, NULL, 3, (int[]){2, 16, 18});
        ck_assert_ptr_null(vit_op_window_attn(t, x, NULL, &bad[i]));
        ck_assert_int_eq(vit_tape_status(t), VIT_EINVAL);
        expect_msg("window", bad_what[i]);
    }
    vit_tape_reset(t);
    ck_assert_ptr_null(vit_op_window_attn(t, vit_tape_leaf(t, buf, NULL, 3, (int[]){2, 16, 18}),
                                          NULL, NULL));
    expect_msg("vit_op_window_attn", "opts");
    vit_tape_free(t);
}
END_TEST

/* ---- Swin's ops: relative position bias --------------------------------- */

/* The bias alone (window 3: table [25, 2] -> [2, 9, 9]) and (index 1)
 * feeding the windowed attention (window 2: table [9, 2] -> [2, 4, 4]),
 * the table's gradient through both; with Mh != Mw the bias alone
 * (index 2, window 2 x 3: table [15, 2] -> [2, 6, 6]; index 3, 3 x 2) and
 * into the attention of 2 x 4 windows shifted by 1 row and 2 columns
 * (index 4, table [21, 2] -> [2, 8, 8]). */
static const int relpos_win[5][2] = {{3, 3}, {2, 2}, {2, 3}, {3, 2}, {2, 4}};

static vit_tensor *b_relpos(graph *g, vit_tape *t, vit_tensor **in)
{
    const int *w = relpos_win[g->index];
    if (g->index != 1 && g->index != 4)
        return vit_op_relpos_bias(t, in[0], w[0], w[1]);
    return vit_op_window_attn(t, in[1], vit_op_relpos_bias(t, in[0], w[0], w[1]),
                              &win_opts[g->index == 1 ? 1 : 5]);
}

START_TEST(test_relpos_bias)
{
    graph g = {.build = b_relpos, .smoothing = SMOOTHING, .index = _i};
    uint64_t seed = 110 + (uint64_t)_i;
    const int *w = relpos_win[_i];
    add_leaf(&g, "table", 1, 1.0, &seed, 2, (2 * w[0] - 1) * (2 * w[1] - 1), 2, 0, 0);
    if (_i == 1 || _i == 4)
        add_leaf(&g, "qkv", 1, 1.5, &seed, 3, 2, 16, 18, 0);
    char what[64];
    snprintf(what, sizeof what, "relpos_bias %dx%d%s", w[0], w[1],
             _i == 1 || _i == 4 ? " into window_attn" : "");
    check_graph(&g, what);
}
END_TEST

/* The gather is torchvision's relative_position_index: for a 2 x 2 window
 * that index is (printed by torchvision 0.14's SwinTransformer code)
 *   [[4, 3, 1, 0], [5, 4, 2, 1], [7, 6, 4, 3], [8, 7, 5, 4]],
 * so head h of pair (i, j) reads table[index[i][j], h]. */
START_TEST(test_relpos_bias_index)
{
    static const int index[4][4] = {{4, 3, 1, 0}, {5, 4, 2, 1}, {7, 6, 4, 3}, {8, 7, 5, 4}};
    vit_real table[9 * 3];
    for (int r = 0; r < 9; r++)
        for (int h = 0; h < 3; h++)
            table[r * 3 + h] = (vit_real)(10 * r + h);
    vit_tape *t = vit_tape_new();
    vit_tensor *y = vit_op_relpos_bias(t, vit_tape_leaf(t, table, NULL, 2, (int[]){9, 3}), 2, 2);
    ck_assert_msg(y != NULL, "%s", vit_last_error());
    ck_assert_int_eq(y->ndim, 3);
    ck_assert_int_eq(y->shape[0], 3);
    ck_assert_int_eq(y->shape[1], 4);
    ck_assert_int_eq(y->shape[2], 4);
    for (int h = 0; h < 3; h++)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++)
                ck_assert_msg(y->data[(h * 4 + i) * 4 + j] == (vit_real)(10 * index[i][j] + h),
                              "bias[%d, %d, %d] = %g", h, i, j,
                              (double)y->data[(h * 4 + i) * 4 + j]);
    /* The backward sums the pairs at each offset: with dbias all ones, the
     * centre row (offset 0) gets T = 4 per head, the corners 1. */
    vit_real g[9 * 3] = {0};
    vit_tape_reset(t);
    vit_tensor *tab = vit_tape_leaf(t, table, g, 2, (int[]){9, 3});
    y = vit_op_relpos_bias(t, tab, 2, 2);
    vit_real ones[48];
    for (int i = 0; i < 48; i++) ones[i] = 1;
    ck_assert_int_eq(vit_tape_backward_from(t, y, ones), VIT_OK);
    static const int count[9] = {1, 2, 1, 2, 4, 2, 1, 2, 1};
    for (int r = 0; r < 9; r++)
        for (int h = 0; h < 3; h++)
            ck_assert_msg(g[r * 3 + h] == count[r], "dtable[%d, %d] = %g", r, h,
                          (double)g[r * 3 + h]);
    vit_tape_free(t);
}
END_TEST

/* A window of 2 rows by 3 columns (torchvision's window_size [2, 3]):
 * positions p = y*3 + x, table [(2*2-1)*(2*3-1), H] = [15, H], and
 * index[i][j] = (y_i - y_j + 1) * 5 + (x_i - x_j + 2), by hand:
 *   i = (0,0): 7 6 5 2 1 0     i = (1,0): 12 11 10 7 6 5
 *   i = (0,1): 8 7 6 3 2 1     i = (1,1): 13 12 11 8 7 6
 *   i = (0,2): 9 8 7 4 3 2     i = (1,2): 14 13 12 9 8 7
 * (torchvision 0.14's relative_position_index for window_size [2, 3]
 * prints the same).  The backward's count per row: the pairs at offset
 * (dy, dx), (2 - |dy|) * (3 - |dx|). */
START_TEST(test_relpos_bias_index_rect)
{
    static const int index[6][6] = {{7, 6, 5, 2, 1, 0},       {8, 7, 6, 3, 2, 1},
                                    {9, 8, 7, 4, 3, 2},       {12, 11, 10, 7, 6, 5},
                                    {13, 12, 11, 8, 7, 6},    {14, 13, 12, 9, 8, 7}};
    enum { R = 15, H = 2, T = 6 };
    vit_real table[R * H];
    for (int r = 0; r < R; r++)
        for (int h = 0; h < H; h++)
            table[r * H + h] = (vit_real)(10 * r + h);
    vit_real g[R * H] = {0};
    vit_tape *t = vit_tape_new();
    vit_tensor *y = vit_op_relpos_bias(t, vit_tape_leaf(t, table, g, 2, (int[]){R, H}), 2, 3);
    ck_assert_msg(y != NULL, "%s", vit_last_error());
    ck_assert_int_eq(y->ndim, 3);
    ck_assert_int_eq(y->shape[0], H);
    ck_assert_int_eq(y->shape[1], T);
    ck_assert_int_eq(y->shape[2], T);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++)
                ck_assert_msg(y->data[(h * T + i) * T + j] == (vit_real)(10 * index[i][j] + h),
                              "bias[%d, %d, %d] = %g", h, i, j,
                              (double)y->data[(h * T + i) * T + j]);
    vit_real ones[H * T * T];
    for (int i = 0; i < H * T * T; i++) ones[i] = 1;
    ck_assert_int_eq(vit_tape_backward_from(t, y, ones), VIT_OK);
    static const int count[R] = {1, 2, 3, 2, 1, 2, 4, 6, 4, 2, 1, 2, 3, 2, 1};
    for (int r = 0; r < R; r++)
        for (int h = 0; h < H; h++)
            ck_assert_msg(g[r * H + h] == count[r], "dtable[%d, %d] = %g", r, h,
                          (double)g[r * H + h]);
    /* 3 x 2 is not 2 x 3: its table has 5 * 3 = 15 rows too, laid out
     * otherwise. */
    vit_tape_reset(t);
    y = vit_op_relpos_bias(t, vit_tape_leaf(t, table, NULL, 2, (int[]){R, H}), 3, 2);
    ck_assert_msg(y != NULL, "%s", vit_last_error());
    /* (y_i - y_j + 2) * 3 + (x_i - x_j + 1): pair (0, 1) reads 2 * 3 + 0 = 6,
     * pair (5, 0) = (2,1) -> (0,0) reads 4 * 3 + 2 = 14 */
    ck_assert(y->data[0 * T + 1] == (vit_real)(10 * 6));
    ck_assert(y->data[5 * T + 0] == (vit_real)(10 * 14));
    vit_tape_free(t);
}
END_TEST

START_TEST(test_relpos_bias_errors)
{
    static vit_real buf[64];
    vit_tape *t = vit_tape_new();
    struct { int ndim, shape[4], mh, mw; const char *what; } cases[] = {
        {2, {9, 2}, 3, 3, "[25, *], got [9, 2]"},   /* a table for another window */
        {1, {18}, 2, 2, "table must be"},           /* flat: the right count only */
        {3, {3, 3, 2}, 2, 2, "got [3, 3, 2]"},
        {2, {2, 9}, 2, 2, "got [2, 9]"},             /* transposed */
        {2, {9, 2}, 0, 2, "window_h must be 1..256, got 0"},
        {2, {9, 2}, 2, 0, "window_w must be 1..256, got 0"},
        {2, {9, 2}, 2, 257, "window_w must be 1..256, got 257"},
        /* rectangular: the square table of either side, or 3 x 2's
         * count the other way ([15, *] fits both 2 x 3 and 3 x 2) */
        {2, {9, 2}, 2, 3, "(window 2 x 3) = [15, *], got [9, 2]"},
        {2, {25, 2}, 2, 3, "(window 2 x 3) = [15, *], got [25, 2]"},
        {2, {21, 2}, 3, 2, "(window 3 x 2) = [15, *], got [21, 2]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        vit_tape_reset(t);
        vit_tensor *x = vit_tape_leaf(t, buf, NULL, cases[i].ndim, cases[i].shape);
        ck_assert_ptr_null(vit_op_relpos_bias(t, x, cases[i].mh, cases[i].mw));
        ck_assert_int_eq(vit_tape_status(t), VIT_EINVAL);
        expect_msg("vit_op_relpos_bias", cases[i].what);
    }
    vit_tape_free(t);
}
END_TEST

/* ---- Swin's ops: gathers of tokens, patch merging ------------------------ */

/* A gather with a repeat, a skip and a reorder ([2, 5, 3] -> [2, 6, 3]),
 * and (index 1) the 2x2 merge of a 4 x 4 grid ([2, 16, 3] -> [2, 4, 12])
 * followed by the layer norm over 4C it exists for. */
static const int gather_idx[6] = {4, 0, 0, 2, 1, 4};

static vit_tensor *b_gather(graph *g, vit_tape *t, vit_tensor **in)
{
    if (g->index == 0)
        return vit_op_gather_tokens(t, in[0], gather_idx, 6);
    return vit_op_layernorm(t, vit_op_patch_merge(t, in[0], 4, 4), in[1], in[2], 1e-5);
}

START_TEST(test_gather_tokens)
{
    graph g = {.build = b_gather, .smoothing = SMOOTHING, .index = _i};
    uint64_t seed = 130 + (uint64_t)_i;
    if (_i == 0) {
        add_leaf(&g, "x", 1, 1.0, &seed, 3, 2, 5, 3, 0);
    } else {
        add_leaf(&g, "x", 1, 1.0, &seed, 3, 2, 16, 3, 0);
        add_leaf(&g, "gamma", 1, 1.0, &seed, 1, 12, 0, 0, 0);
        add_leaf(&g, "beta", 1, 1.0, &seed, 1, 12, 0, 0, 0);
    }
    check_graph(&g, _i == 0 ? "gather_tokens" : "patch_merge then layernorm");
}
END_TEST

/* The merge's channel order is torchvision's: its _patch_merging_pad
 * (0.14) on a 2 x 4 grid of 2 channels holding 100 row + 10 column +
 * channel gives [[0, 1, 100, 101, 10, 11, 110, 111],
 * [20, 21, 120, 121, 30, 31, 130, 131]].  The gather's backward of a
 * repeated index sums, and a token nobody reads gets nothing. */
START_TEST(test_patch_merge_order)
{
    static const vit_real want[2][8] = {{0, 1, 100, 101, 10, 11, 110, 111},
                                        {20, 21, 120, 121, 30, 31, 130, 131}};
    vit_real x[8 * 2];
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 4; c++)
            for (int ch = 0; ch < 2; ch++)
                x[(r * 4 + c) * 2 + ch] = (vit_real)(100 * r + 10 * c + ch);
    vit_tape *t = vit_tape_new();
    vit_tensor *y = vit_op_patch_merge(t, vit_tape_leaf(t, x, NULL, 3, (int[]){1, 8, 2}), 2, 4);
    ck_assert_msg(y != NULL, "%s", vit_last_error());
    ck_assert_int_eq(y->ndim, 3);
    ck_assert_int_eq(y->shape[1], 2);
    ck_assert_int_eq(y->shape[2], 8);
    for (int o = 0; o < 2; o++)
        for (int k = 0; k < 8; k++)
            ck_assert_msg(y->data[o * 8 + k] == want[o][k], "merged[%d][%d] = %g", o, k,
                          (double)y->data[o * 8 + k]);
    vit_real g[8 * 2] = {0}, dy[6 * 2];
    for (int i = 0; i < 12; i++) dy[i] = (vit_real)(i + 1);
    vit_tape_reset(t);
    static const int idx[6] = {3, 1, 3, 0, 3, 1};
    y = vit_op_gather_tokens(t, vit_tape_leaf(t, x, g, 3, (int[]){1, 8, 2}), idx, 6);
    ck_assert_int_eq(vit_tape_backward_from(t, y, dy), VIT_OK);
    /* token 3: rows 0, 2, 4 of dy = (1+5+9, 2+6+10); token 1: rows 1, 5;
     * token 0: row 3; the others nothing. */
    static const vit_real dx[8][2] = {{7, 8}, {3 + 11, 4 + 12}, {0, 0}, {15, 18},
                                      {0, 0}, {0, 0}, {0, 0}, {0, 0}};
    for (int i = 0; i < 8; i++)
        for (int ch = 0; ch < 2; ch++)
            ck_assert_msg(g[i * 2 + ch] == dx[i][ch], "dx[%d][%d] = %g", i, ch,
                          (double)g[i * 2 + ch]);
    vit_tape_free(t);
}
END_TEST

START_TEST(test_gather_errors)
{
    static vit_real buf[64];
    vit_tape *t = vit_tape_new();
    static const int idx[3] = {0, 5, 1};
    /* gather: an index past the tokens, a 2-D x, no index */
    vit_tensor *x = vit_tape_leaf(t, buf, NULL, 3, (int[]){2, 5, 3});
    ck_assert_ptr_null(vit_op_gather_tokens(t, x, idx, 3));
    ck_assert_int_eq(vit_tape_status(t), VIT_EINVAL);
    expect_msg("vit_op_gather_tokens", "idx[1] = 5");
    vit_tape_reset(t);
    x = vit_tape_leaf(t, buf, NULL, 2, (int[]){10, 3});
    ck_assert_ptr_null(vit_op_gather_tokens(t, x, idx, 1));
    expect_msg("vit_op_gather_tokens", "x must be [B, N, C] = [*, *, *], got [10, 3]");
    vit_tape_reset(t);
    x = vit_tape_leaf(t, buf, NULL, 3, (int[]){2, 5, 3});
    ck_assert_ptr_null(vit_op_gather_tokens(t, x, NULL, 3));
    expect_msg("vit_op_gather_tokens", "idx is NULL");
    /* merge: odd sides, a grid that is not x's tokens, an image layout */
    vit_tape_reset(t);
    x = vit_tape_leaf(t, buf, NULL, 3, (int[]){1, 15, 4});
    ck_assert_ptr_null(vit_op_patch_merge(t, x, 3, 5));
    expect_msg("vit_op_patch_merge", "even");
    vit_tape_reset(t);
    x = vit_tape_leaf(t, buf, NULL, 3, (int[]){1, 16, 4});
    ck_assert_ptr_null(vit_op_patch_merge(t, x, 2, 4));
    expect_msg("vit_op_patch_merge", "[*, 8, *], got [1, 16, 4]");
    vit_tape_reset(t);
    x = vit_tape_leaf(t, buf, NULL, 4, (int[]){1, 4, 4, 4});
    ck_assert_ptr_null(vit_op_patch_merge(t, x, 4, 4));
    expect_msg("vit_op_patch_merge", "got [1, 4, 4, 4]");
    ck_assert_int_eq(vit_tape_op_count(t), 0);
    vit_tape_free(t);
}
END_TEST

/* ---- strict shapes (issue 45): a tensor that holds the right number of
 * values in another layout is refused, the message naming the op, the
 * argument, the expected layout and the given shape. ---- */

typedef struct strict_case {
    const char *op, *want; /* the message holds both */
    int which;             /* the case's builder below */
} strict_case;

static const strict_case strict_cases[] = {
    {"vit_op_linear", "b must be [out] = [2], got [1, 2]", 0},
    {"vit_op_linear", "W must be [in, out], in = x's last dimension = [4, *], got [4, 2, 1]", 1},
    {"vit_op_linear_gelu", "b must be [out] = [2], got [2, 1]", 2},
    {"vit_op_linear_add", "r must be x's shape with the last dimension out = [3, 2], got [2, 3]",
     3},
    {"vit_op_layernorm", "gamma must be [d], d = x's last dimension = [4], got [1, 4]", 4},
    {"vit_op_add_layernorm", "beta must be [d], d = x's last dimension = [4], got [4, 1]", 5},
    {"vit_op_mha", "x_q must be [batch, n_q, d_model] = [1, 3, 4], got [3, 4]", 6},
    {"vit_op_mha", "params must be [vit_mha_param_count(cfg)] = [80], got [20, 4]", 7},
    {"vit_op_patch_embed", "img must be [batch, height, width, channels] = [1, 4, 4, 1], "
     "got [1, 16, 1]", 8},
    {"vit_op_patch_embed", "W must be [patch*patch*channels, dim] = [4, 3], got [3, 4]", 9},
    {"vit_op_cls_prepend", "cls must be [D] = [4], got [1, 4]", 10},
    {"vit_op_pos_add", "pos must be [T, D] = [3, 4], got [1, 3, 4]", 11},
    {"vit_op_local_conv", "w must be [9, C] = [9, 4], got [4, 9]", 12},
    {"vit_op_token", "x must be [B, T, D] = [*, *, *], got [3, 4]", 13},
    {"vit_op_masked_mean", "x must be [B, T, D] = [*, *, *], got [1, 1, 3, 4]", 14},
    {"vit_op_cross_entropy", "logits must be [B, C] = [*, *], got [1, 3, 4]", 15},
    {"vit_op_cross_entropy_soft", "logits must be [B, C] = [*, *], got [12]", 16},
};

START_TEST(test_strict_shapes)
{
    const strict_case *c = &strict_cases[_i];
    static vit_real a[256], b[256], p[256];
    vit_tape *t = vit_tape_new();
    vit_tensor *x34 = vit_tape_leaf(t, a, NULL, 2, (int[]){3, 4});
    vit_tensor *W42 = vit_tape_leaf(t, b, NULL, 2, (int[]){4, 2});
    vit_tensor *y = NULL, *sum;
    vit_mha m = {.batch = 1, .n_q = 3, .n_k = 3, .d_model = 4, .heads = 2, .has_bias = 1};
    vit_patch_shape ps = {.batch = 1, .height = 4, .width = 4, .channels = 1, .patch = 2,
                          .dim = 3};
    switch (c->which) {
    case 0:
        y = vit_op_linear(t, x34, W42, vit_tape_leaf(t, p, NULL, 2, (int[]){1, 2}));
        break;
    case 1:
        y = vit_op_linear(t, x34, vit_tape_leaf(t, b, NULL, 3, (int[]){4, 2, 1}), NULL);
        break;
    case 2:
        y = vit_op_linear_gelu(t, x34, W42, vit_tape_leaf(t, p, NULL, 2, (int[]){2, 1}));
        break;
    case 3:
        y = vit_op_linear_add(t, x34, W42, NULL, vit_tape_leaf(t, p, NULL, 2, (int[]){2, 3}));
        break;
    case 4:
        y = vit_op_layernorm(t, x34, vit_tape_leaf(t, p, NULL, 2, (int[]){1, 4}),
                             vit_tape_leaf(t, p, NULL, 1, (int[]){4}), 1e-5);
        break;
    case 5:
        y = vit_op_add_layernorm(t, x34, x34, vit_tape_leaf(t, p, NULL, 1, (int[]){4}),
                                 vit_tape_leaf(t, p, NULL, 2, (int[]){4, 1}), 1e-5, &sum);
        break;
    case 6:
        y = vit_op_mha(t, &m, vit_tape_leaf(t, p, NULL, 1, (int[]){80}), x34, x34, NULL);
        break;
    case 7: {
        vit_tensor *x = vit_tape_leaf(t, a, NULL, 3, (int[]){1, 3, 4});
        y = vit_op_mha(t, &m, vit_tape_leaf(t, p, NULL, 2, (int[]){20, 4}), x, x, NULL);
        break;
    }
    case 8: /* tokens [B, N, C] are not the image [B, H, W, C] */
        y = vit_op_patch_embed(t, &ps, vit_tape_leaf(t, a, NULL, 3, (int[]){1, 16, 1}),
                               vit_tape_leaf(t, b, NULL, 2, (int[]){4, 3}), NULL);
        break;
    case 9:
        y = vit_op_patch_embed(t, &ps, vit_tape_leaf(t, a, NULL, 4, (int[]){1, 4, 4, 1}),
                               vit_tape_leaf(t, b, NULL, 2, (int[]){3, 4}), NULL);
        break;
    case 10:
        y = vit_op_cls_prepend(t, vit_tape_leaf(t, a, NULL, 3, (int[]){2, 3, 4}),
                               vit_tape_leaf(t, p, NULL, 2, (int[]){1, 4}));
        break;
    case 11:
        y = vit_op_pos_add(t, vit_tape_leaf(t, a, NULL, 3, (int[]){2, 3, 4}),
                           vit_tape_leaf(t, p, NULL, 3, (int[]){1, 3, 4}));
        break;
    case 12:
        y = vit_op_local_conv(t, vit_tape_leaf(t, a, NULL, 3, (int[]){2, 5, 4}),
                              vit_tape_leaf(t, b, NULL, 2, (int[]){4, 9}), NULL, 2, 2);
        break;
    case 13:
        y = vit_op_token(t, x34, 0);
        break;
    case 14:
        y = vit_op_masked_mean(t, vit_tape_leaf(t, a, NULL, 4, (int[]){1, 1, 3, 4}), NULL);
        break;
    case 15: {
        static const int labels[3] = {0, 1, 2};
        y = vit_op_cross_entropy(t, vit_tape_leaf(t, a, NULL, 3, (int[]){1, 3, 4}), labels, 0,
                                 NULL);
        break;
    }
    case 16:
        y = vit_op_cross_entropy_soft(t, vit_tape_leaf(t, a, NULL, 1, (int[]){12}), b, NULL);
        break;
    }
    ck_assert_ptr_null(y);
    ck_assert_int_eq(vit_tape_status(t), VIT_EINVAL);
    ck_assert_int_eq(vit_tape_op_count(t), 0);
    expect_msg(c->op, c->want);
    vit_tape_free(t);
}
END_TEST

static Suite *tape_suite(void)
{
    Suite *s = suite_create("tape");
    TCase *tc = tcase_create("grad");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_linear);
    tcase_add_test(tc, test_leaf_reports);
    tcase_add_test(tc, test_linear_nobias_const_input);
    tcase_add_test(tc, test_layernorm);
    tcase_add_test(tc, test_gelu);
    tcase_add_test(tc, test_add_residual);
    tcase_add_test(tc, test_add_same_tensor);
    tcase_add_test(tc, test_mha_self);
    tcase_add_test(tc, test_mha_cross);
    tcase_add_test(tc, test_mha_lsa);
    tcase_add_test(tc, test_patch_embed_overlap);
    tcase_add_test(tc, test_patch_embed);
    tcase_add_test(tc, test_cls_prepend);
    tcase_add_test(tc, test_pos_add);
    tcase_add_loop_test(tc, test_local_conv, 0, 2);
    tcase_add_loop_test(tc, test_token, 0, 3);
    tcase_add_loop_test(tc, test_mean_tokens, 0, 2);
    tcase_add_loop_test(tc, test_cross_entropy, 0, 2);
    tcase_add_loop_test(tc, test_cross_entropy_masked, 0, 2);
    tcase_add_test(tc, test_cross_entropy_soft);
    tcase_add_loop_test(tc, test_leaf_cases, 0, (int)(sizeof leaf_cases / sizeof *leaf_cases));
    tcase_add_test(tc, test_linear_gelu_matches_unfused);
    tcase_add_test(tc, test_add_layernorm_matches_unfused);
    tcase_add_loop_test(tc, test_concat_tokens, 0, 2);
    tcase_add_test(tc, test_embedding);
    tcase_add_loop_test(tc, test_masked_mean, 0, 2);
    tcase_add_loop_test(tc, test_mha_bias, 0, 4);
    tcase_add_test(tc, test_checkpoint_grad);
    tcase_add_loop_test(tc, test_window_attn, 0, 8);
    tcase_add_loop_test(tc, test_window_attn_matches_masked, 0, 8);
    tcase_add_loop_test(tc, test_relpos_bias, 0, 5);
    tcase_add_test(tc, test_relpos_bias_index);
    tcase_add_test(tc, test_relpos_bias_index_rect);
    tcase_add_loop_test(tc, test_gather_tokens, 0, 2);
    tcase_add_test(tc, test_patch_merge_order);
    tcase_add_test(tc, test_checkpoint_bitwise);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("memory_errors");
    tcase_set_timeout(tm, 60);
    tcase_add_test(tm, test_chain_shapes);
    tcase_add_test(tm, test_memory_steady);
    tcase_add_test(tm, test_null_propagates);
    tcase_add_test(tm, test_shape_errors);
    tcase_add_test(tm, test_kernel_error_status);
    tcase_add_test(tm, test_backward_from_tensor);
    tcase_add_test(tm, test_backward_once);
    tcase_add_test(tm, test_no_grad);
    tcase_add_test(tm, test_mark_release);
    tcase_add_test(tm, test_retain_grad);
    tcase_add_test(tm, test_lean_memory);
    tcase_add_test(tm, test_custom_errors);
    tcase_add_test(tm, test_window_attn_errors);
    tcase_add_test(tm, test_relpos_bias_errors);
    tcase_add_test(tm, test_gather_errors);
    tcase_add_loop_test(tm, test_strict_shapes, 0,
                        (int)(sizeof strict_cases / sizeof *strict_cases));
    suite_add_tcase(s, tm);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(tape_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

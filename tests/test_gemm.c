/* The GEMM layer's two paths (vit/gemm.h), float32: every op that runs a
 * GEMM gives the same results through OpenBLAS and through libxsmm, to 1e-5
 * of the output's scale, on the same inputs; the policy switch does what it
 * says (and each forced run really took the path it names, counted by the
 * layer's statistics); without libxsmm, asking for it is refused. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vit/vit.h"

#define TOL 1e-5

static vit_rng rng;

static vit_real *randn(size_t n)
{
    vit_real *p = malloc(n * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (vit_real)vit_rng_normal(&rng);
    return p;
}

static vit_real *zeros(size_t n)
{
    vit_real *p = calloc(n, sizeof *p);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* Calls made on each path since the last reset: [1] BLAS, [2] libxsmm. */
static void path_calls(unsigned long long calls[3])
{
    vit_gemm_shape sh[256];
    size_t n = vit_gemm_shapes(sh, 256);
    ck_assert_uint_le(n, 256);
    calls[0] = calls[1] = calls[2] = 0;
    for (size_t i = 0; i < n; i++)
        calls[sh[i].path == VIT_GEMM_XSMM ? 2 : 1] += sh[i].calls;
}

/* An op under test: fills its outputs (a list of n_out arrays of the given
 * sizes) from inputs it owns; run once per path. */
typedef struct op_case {
    const char *name;
    void (*run)(void *ctx, vit_real **out);
    void *ctx;
    int n_out;
    size_t sizes[4];
} op_case;

/* |got - ref| <= TOL * max |ref| over n values, ref not trivially small;
 * what names the output in a failure. */
static void output_agrees(const char *what, const vit_real *ref, const vit_real *got, size_t n)
{
    double scale = 0, diff = 0;
    for (size_t j = 0; j < n; j++) {
        scale = fmax(scale, fabs(ref[j]));
        diff = fmax(diff, fabs(ref[j] - got[j]));
    }
    ck_assert_msg(scale > 1e-2, "%s is trivially small (%g)", what, scale);
    ck_assert_msg(diff <= TOL * scale, "%s: paths differ by %g of scale %g", what, diff / scale,
                  scale);
}

/* |xsmm - blas| <= TOL * max |blas| for each output, after checking that the
 * BLAS run used BLAS only and the libxsmm run used libxsmm for every GEMM
 * it can take (all of these ops' GEMMs: beta is 0 or 1). */
static void both_paths_agree(const op_case *c)
{
    vit_real *out[2][4];
    for (int p = 0; p < 2; p++) {
        ck_assert_int_eq(vit_gemm_set_path(p ? VIT_GEMM_XSMM : VIT_GEMM_BLAS), VIT_OK);
        for (int i = 0; i < c->n_out; i++)
            out[p][i] = zeros(c->sizes[i]);
        c->run(c->ctx, out[p]);
        unsigned long long calls[3];
        path_calls(calls);
        /* (the libxsmm run may have none: small attention pairs run the
         * direct kernels of src/kernels/pair_gemm.c there, tested below) */
        ck_assert_msg(p == 1 || calls[1] > 0, "%s ran no GEMM", c->name);
        if (p == 0)
            ck_assert_msg(calls[2] == 0, "%s: %llu calls on libxsmm when BLAS was forced",
                          c->name, calls[2]);
        else
            ck_assert_msg(calls[1] == 0, "%s: %llu calls on BLAS when libxsmm was forced",
                          c->name, calls[1]);
    }
    ck_assert_int_eq(vit_gemm_set_path(VIT_GEMM_AUTO), VIT_OK);
    for (int i = 0; i < c->n_out; i++) {
        char what[96];
        snprintf(what, sizeof what, "%s output %d", c->name, i);
        output_agrees(what, out[0][i], out[1][i], c->sizes[i]);
        free(out[0][i]);
        free(out[1][i]);
    }
}

/* ---- linear ----------------------------------------------------------- */

typedef struct {
    int n, in, out, bias;
    vit_real *x, *W, *b, *dy;
} linear_ctx;

static void linear_run(void *p, vit_real **o)
{
    linear_ctx *c = p;
    /* o: y [n, out], dx [n, in] (accumulated onto a start), dW, db */
    ck_assert_int_eq(vit_linear_forward(o[0], c->x, c->W, c->bias ? c->b : NULL, c->n, c->in,
                                        c->out), VIT_OK);
    for (size_t i = 0; i < (size_t)c->n * c->in; i++)
        o[1][i] = (vit_real)(0.25 * sin((double)i)); /* += onto something */
    ck_assert_int_eq(vit_linear_backward(o[1], o[2], o[3], c->dy, c->x, c->W, c->n, c->in,
                                         c->out), VIT_OK);
}

static void linear_case(int n, int in, int out, int bias)
{
    linear_ctx c = {n, in, out, bias, randn((size_t)n * in), randn((size_t)in * out),
                    randn((size_t)out), randn((size_t)n * out)};
    op_case oc = {"linear", linear_run, &c, 4,
                  {(size_t)n * out, (size_t)n * in, (size_t)in * out, (size_t)out}};
    both_paths_agree(&oc);
    free(c.x); free(c.W); free(c.b); free(c.dy);
}

START_TEST(linear_agrees)
{
    /* digits' and medium's slice shapes, odd sizes, one row, wide */
    linear_case(544, 64, 128, 1);
    linear_case(544, 128, 64, 0);
    linear_case(1600, 128, 256, 1);
    linear_case(37, 19, 23, 1);
    linear_case(1, 64, 10, 1);
    linear_case(65, 192, 768, 0);
    /* libxsmm sums long reductions in chunks (src/kernels/gemm.c, k_chunk): dW over
     * 512 rows into 256 outputs is two equal chunks, over 800 rows four with
     * a shorter last one; dx = dy W^T of 2080 outputs is three chunks of a
     * packed operand */
    linear_case(512, 48, 256, 1);
    linear_case(800, 40, 256, 0);
    linear_case(300, 64, 2080, 0);
}
END_TEST

/* ---- patch embedding -------------------------------------------------- */

typedef struct {
    vit_patch_shape s;
    vit_real *img, *W, *b, *dy;
} patch_ctx;

static void patch_run(void *p, vit_real **o)
{
    patch_ctx *c = p;
    /* o: y, cols, dimg, dW (db is a column sum, no GEMM) */
    ck_assert_int_eq(vit_patch_embed_forward(&c->s, o[0], o[1], c->img, c->W, c->b), VIT_OK);
    ck_assert_int_eq(vit_patch_embed_backward(&c->s, o[2], o[3], NULL, c->dy, o[1], c->W),
                     VIT_OK);
}

START_TEST(patch_embed_agrees)
{
    vit_patch_shape s = {.batch = 5, .height = 12, .width = 8, .channels = 3, .patch = 4, .dim = 24};
    int N = vit_patch_count(&s), K = s.patch * s.patch * s.channels;
    size_t nimg = (size_t)s.batch * s.height * s.width * s.channels;
    patch_ctx c = {s, randn(nimg), randn((size_t)K * s.dim), randn((size_t)s.dim),
                   randn((size_t)s.batch * N * s.dim)};
    op_case oc = {"patch embedding", patch_run, &c, 4,
                  {(size_t)s.batch * N * s.dim, (size_t)s.batch * N * K, nimg,
                   (size_t)K * s.dim}};
    both_paths_agree(&oc);
    free(c.img); free(c.W); free(c.b); free(c.dy);
}
END_TEST

/* ---- attention cores ---------------------------------------------------- */

typedef struct {
    vit_sdpa a;
    int tiled;
    vit_real *q, *k, *v, *dout;
} sdpa_ctx;

static void sdpa_run(void *p, vit_real **o)
{
    sdpa_ctx *c = p;
    const vit_sdpa *a = &c->a;
    size_t nsave = c->tiled ? (size_t)a->batch * a->heads * a->n_q
                            : (size_t)a->batch * a->heads * a->n_q * a->n_k;
    vit_real *saved = zeros(nsave);
    /* o: out, dq, dk, dv */
    if (c->tiled) {
        ck_assert_int_eq(vit_sdpa_tiled_forward(a, o[0], saved, c->q, c->k, c->v, NULL), VIT_OK);
        ck_assert_int_eq(vit_sdpa_tiled_backward(a, o[1], o[2], o[3], NULL, c->dout, o[0], saved,
                                                 c->q, c->k, c->v, NULL), VIT_OK);
    } else {
        ck_assert_int_eq(vit_sdpa_forward(a, o[0], saved, c->q, c->k, c->v), VIT_OK);
        ck_assert_int_eq(vit_sdpa_backward(a, o[1], o[2], o[3], NULL, c->dout, saved, c->q, c->k,
                                           c->v, NULL), VIT_OK);
    }
    free(saved);
}

static void sdpa_case(int B, int H, int nq, int nk, int dk, int dv, int tiled, int causal)
{
    sdpa_ctx c;
    memset(&c, 0, sizeof c);
    c.a = (vit_sdpa){.batch = B, .heads = H, .n_q = nq, .n_k = nk, .d_k = dk, .d_v = dv};
    c.a.mask.causal = causal;
    c.tiled = tiled;
    size_t nqk = (size_t)B * nq * H * dk, nkk = (size_t)B * nk * H * dk;
    size_t nv = (size_t)B * nk * H * dv, no = (size_t)B * nq * H * dv;
    c.q = randn(nqk);
    c.k = randn(nkk);
    c.v = randn(nv);
    c.dout = randn(no);
    op_case oc = {tiled ? "tiled attention" : "attention", sdpa_run, &c, 4, {no, nqk, nkk, nv}};
    both_paths_agree(&oc);
    free(c.q); free(c.k); free(c.v); free(c.dout);
}

START_TEST(attention_agrees)
{
    sdpa_case(4, 4, 17, 17, 16, 16, 0, 0); /* digits' heads */
    sdpa_case(2, 3, 13, 11, 7, 5, 0, 0);
    sdpa_case(2, 2, 50, 50, 32, 32, 0, 1);
    sdpa_case(2, 2, 70, 70, 16, 16, 1, 0);
    sdpa_case(1, 3, 33, 45, 8, 12, 1, 1);
}
END_TEST

/* ---- attention pairs on the direct kernels ------------------------------ */

/* Small pairs (head widths 16 or 32, at most 32 keys; at width 16 up to 64
 * on a CPU with AVX2 but not AVX-512) skip the GEMM layer
 * in float32 on a CPU with AVX2 and FMA (src/kernels/pair_gemm.c) unless the BLAS
 * path is forced.  Against that reference: forward, and a backward that
 * accumulates onto nonzero gradients, with masks, a score bias and a
 * learnable per-head scale; and on such a CPU the direct run must have
 * made no GEMM call at all (so it really was the kernels). */
typedef struct {
    vit_sdpa a;
    vit_real *q, *k, *v, *dout, *start;
    size_t nq_all, nk_all, nv_all;
} direct_ctx;

/* want 1: pairs every AVX2 + FMA CPU's kernels take; 2: pairs only the
 * AVX2 kernels take (up to 64 keys at width 16), not AVX-512's. */
static int direct_expected(int want)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
        && (want == 1 || !__builtin_cpu_supports("avx512f"));
#else
    (void)want;
    return 0;
#endif
}

static void direct_run(const direct_ctx *c, vit_real **o, unsigned long long *gemm_calls)
{
    const vit_sdpa *a = &c->a;
    size_t np = (size_t)a->batch * a->heads * a->n_q * a->n_k;
    vit_real *probs = zeros(np), *dscale = zeros((size_t)a->heads);
    /* o: out, dq, dk, dv, dscale; the gradients start from c->start */
    memcpy(o[1], c->start, c->nq_all * sizeof *o[1]);
    memcpy(o[2], c->start, c->nk_all * sizeof *o[2]);
    memcpy(o[3], c->start, c->nv_all * sizeof *o[3]);
    vit_gemm_stats_reset();
    ck_assert_int_eq(vit_sdpa_forward(a, o[0], probs, c->q, c->k, c->v), VIT_OK);
    if (a->head_scale)
        ck_assert_int_eq(vit_sdpa_backward_scale(a, o[1], o[2], o[3], NULL, dscale, c->dout,
                                                 probs, c->q, c->k, c->v, NULL), VIT_OK);
    else
        ck_assert_int_eq(vit_sdpa_backward(a, o[1], o[2], o[3], NULL, c->dout, probs, c->q,
                                           c->k, c->v, NULL), VIT_OK);
    unsigned long long calls[3];
    path_calls(calls);
    *gemm_calls = calls[1] + calls[2];
    memcpy(o[4], dscale, (size_t)a->heads * sizeof *dscale);
    free(probs);
    free(dscale);
}

/* stride: row stride of q, k, v as a multiple of the dense one (2: every
 * other block of columns, as in a fused projection) */
static void direct_case(int B, int H, int nq, int nk, int d, int stride, int causal,
                        int padded, int bias, int learn_scale, int want_direct)
{
    direct_ctx c;
    memset(&c, 0, sizeof c);
    c.a = (vit_sdpa){.batch = B, .heads = H, .n_q = nq, .n_k = nk, .d_k = d, .d_v = d};
    c.a.ld_q = c.a.ld_k = c.a.ld_v = stride * H * d;
    c.a.mask.causal = causal;
    unsigned char *valid = NULL;
    vit_real *bias_v = NULL, *tau = NULL;
    if (padded) { /* item b has its last b keys padded */
        valid = malloc((size_t)B * nk);
        ck_assert_ptr_nonnull(valid);
        for (int b = 0; b < B; b++)
            for (int j = 0; j < nk; j++)
                valid[(size_t)b * nk + j] = j < nk - b;
        c.a.mask.key_valid = valid;
    }
    if (bias) {
        bias_v = randn((size_t)H * nq * nk);
        c.a.bias = bias_v;
        c.a.bias_heads = H;
    }
    if (learn_scale) {
        tau = randn((size_t)H);
        c.a.head_scale = tau;
    }
    c.nq_all = (size_t)B * nq * c.a.ld_q;
    c.nk_all = (size_t)B * nk * c.a.ld_k;
    c.nv_all = (size_t)B * nk * c.a.ld_v;
    size_t no = (size_t)B * nq * H * d;
    c.q = randn(c.nq_all);
    c.k = randn(c.nk_all);
    c.v = randn(c.nv_all);
    c.dout = randn(no);
    c.start = randn(c.nq_all > c.nk_all ? c.nq_all : c.nk_all);
    size_t sizes[5] = {no, c.nq_all, c.nk_all, c.nv_all, (size_t)H};
    vit_real *out[2][5];
    unsigned long long calls[2];
    for (int p = 0; p < 2; p++) {
        ck_assert_int_eq(vit_gemm_set_path(p ? VIT_GEMM_AUTO : VIT_GEMM_BLAS), VIT_OK);
        for (int i = 0; i < 5; i++)
            out[p][i] = zeros(sizes[i]);
        direct_run(&c, out[p], &calls[p]);
    }
    ck_assert_int_eq(vit_gemm_set_path(VIT_GEMM_AUTO), VIT_OK);
    ck_assert_msg(calls[0] > 0, "the BLAS run made no GEMM call");
    if (want_direct && direct_expected(want_direct))
        ck_assert_msg(calls[1] == 0, "B %d H %d nq %d nk %d d %d: %llu GEMM calls where the "
                      "direct kernels should serve", B, H, nq, nk, d, calls[1]);
    else
        ck_assert_msg(calls[1] > 0, "B %d H %d nq %d nk %d d %d: no GEMM call, but the direct "
                      "kernels do not take this pair", B, H, nq, nk, d);
    for (int i = 0; i < 5; i++) {
        if (i == 4 && !learn_scale)
            break;
        char what[96];
        snprintf(what, sizeof what, "direct attention B %d H %d nq %d nk %d d %d, output %d", B,
                 H, nq, nk, d, i);
        output_agrees(what, out[0][i], out[1][i], sizes[i]);
    }
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < 5; i++)
            free(out[p][i]);
    free(c.q); free(c.k); free(c.v); free(c.dout); free(c.start);
    free(valid); free(bias_v); free(tau);
}

START_TEST(attention_direct_agrees)
{
    /* digits' pairs, in a fused-projection layout */
    direct_case(8, 4, 17, 17, 16, 3, 0, 0, 0, 0, 1);
    /* the key limit, width 32, fewer queries than one block of rows */
    direct_case(4, 2, 32, 32, 32, 1, 0, 0, 0, 0, 1);
    direct_case(6, 2, 3, 29, 16, 1, 0, 0, 0, 0, 1);
    /* one key; one query; masks, bias, learnable scale */
    direct_case(4, 2, 9, 1, 16, 1, 0, 0, 0, 0, 1);
    direct_case(4, 2, 1, 20, 32, 2, 0, 0, 0, 0, 1);
    direct_case(4, 3, 17, 17, 16, 1, 1, 0, 1, 0, 1);
    direct_case(5, 2, 12, 24, 32, 1, 0, 1, 0, 1, 1);
    /* AVX2 without AVX-512: up to 64 keys at width 16 (the Fashion-MNIST
     * default's 50), with a mask, bias and learnable scale; elsewhere GEMMs */
    direct_case(4, 4, 50, 50, 16, 3, 0, 0, 0, 0, 2);
    direct_case(4, 2, 17, 33, 16, 1, 0, 0, 0, 0, 2);
    direct_case(4, 2, 64, 64, 16, 1, 0, 0, 0, 0, 2);
    direct_case(5, 2, 41, 57, 16, 2, 0, 1, 1, 1, 2);
    /* past the kernels' limits: GEMMs, as before */
    direct_case(4, 2, 17, 65, 16, 1, 0, 0, 0, 0, 0);
    direct_case(4, 2, 50, 50, 32, 1, 0, 0, 0, 0, 0);
    direct_case(4, 2, 17, 33, 32, 1, 0, 0, 0, 0, 0);
    direct_case(4, 2, 17, 17, 64, 1, 0, 0, 0, 0, 0);
    direct_case(4, 2, 17, 17, 8, 1, 0, 0, 0, 0, 0);
}
END_TEST

/* ---- a whole training step ---------------------------------------------- */

typedef struct {
    vit_model *m;
    vit_real *images;
    int labels[16];
} model_ctx;

static void model_run(void *p, vit_real **o)
{
    model_ctx *c = p;
    double loss;
    ck_assert_int_eq(vit_model_train_grads(c->m, c->images, c->labels, 16, 0.1, &loss, NULL),
                     VIT_OK);
    memcpy(o[0], vit_model_grads(c->m), vit_model_param_count(c->m) * sizeof(vit_real));
    o[1][0] = (vit_real)loss;
}

START_TEST(train_step_agrees)
{
    vit_config cfg;
    vit_config_default(&cfg);
    cfg.image_height = cfg.image_width = 8;
    cfg.channels = 1;
    cfg.classes = 10;
    cfg.patch = 2;
    cfg.dim = 32;
    cfg.depth = 2;
    cfg.heads = 2;
    cfg.mlp = 64;
    model_ctx c;
    c.m = vit_model_new(&cfg);
    ck_assert_ptr_nonnull(c.m);
    vit_model_init(c.m, &rng);
    c.images = randn(16 * 64);
    for (int i = 0; i < 16; i++)
        c.labels[i] = i % 10;
    op_case oc = {"training step", model_run, &c, 2, {vit_model_param_count(c.m), 1}};
    both_paths_agree(&oc);
    free(c.images);
    vit_model_free(c.m);
}
END_TEST

/* ---- the switch itself ---------------------------------------------------- */

START_TEST(policy_switch)
{
    ck_assert_int_eq(vit_gemm_set_path((vit_gemm_path)7), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "vit_gemm_set_path"));
    ck_assert_int_eq(vit_gemm_set_path(VIT_GEMM_BLAS), VIT_OK);
    ck_assert_int_eq(vit_gemm_get_path(), VIT_GEMM_BLAS);
    ck_assert_str_eq(vit_gemm_path_name(VIT_GEMM_XSMM), "xsmm");
    ck_assert_str_eq(vit_gemm_path_name(VIT_GEMM_DNNL), "dnnl");
    ck_assert_str_eq(vit_gemm_path_name((vit_gemm_path)9), "?");
    if (!vit_gemm_have_dnnl()) {
        ck_assert_int_eq(vit_gemm_set_path(VIT_GEMM_DNNL), VIT_EINVAL);
        ck_assert_ptr_nonnull(strstr(vit_last_error(), "oneDNN path cannot run"));
        ck_assert_int_eq(vit_gemm_get_path(), VIT_GEMM_BLAS);
    }
    if (!vit_gemm_have_xsmm()) {
        /* refused, and the policy in force is unchanged */
        ck_assert_int_eq(vit_gemm_set_path(VIT_GEMM_XSMM), VIT_EINVAL);
        ck_assert_ptr_nonnull(strstr(vit_last_error(), "without libxsmm"));
        ck_assert_int_eq(vit_gemm_get_path(), VIT_GEMM_BLAS);
    }
    /* one shape, counted once per call, on the path forced */
    vit_real *x = randn(40 * 8), *W = randn(8 * 6), *y = zeros(40 * 6);
    for (int r = 0; r < 3; r++)
        ck_assert_int_eq(vit_linear_forward(y, x, W, NULL, 40, 8, 6), VIT_OK);
    vit_gemm_shape sh[4];
    ck_assert_uint_eq(vit_gemm_shapes(sh, 4), 1);
    ck_assert_int_eq(sh[0].M, 40);
    ck_assert_int_eq(sh[0].N, 6);
    ck_assert_int_eq(sh[0].K, 8);
    ck_assert_int_eq(sh[0].beta, 0);
    ck_assert_int_eq(sh[0].path, VIT_GEMM_BLAS);
    ck_assert_int_eq(sh[0].bf16, 0);
    ck_assert_uint_eq(sh[0].calls, 3);
    ck_assert(sh[0].seconds == 0); /* timing was off */
    vit_gemm_set_timing(1);
    ck_assert_int_eq(vit_linear_forward(y, x, W, NULL, 40, 8, 6), VIT_OK);
    vit_gemm_set_timing(0);
    ck_assert_uint_eq(vit_gemm_shapes(sh, 4), 1);
    ck_assert_uint_eq(sh[0].calls, 4);
    ck_assert(sh[0].seconds > 0);
    vit_gemm_stats_reset();
    ck_assert_uint_eq(vit_gemm_shapes(NULL, 0), 0);
    ck_assert_int_eq(vit_gemm_set_path(VIT_GEMM_AUTO), VIT_OK);
    free(x); free(W); free(y);
}
END_TEST

#if defined(__x86_64__) && defined(__GNUC__) && !defined(VIT_DOUBLE)
/* The path the shape (trans_a, M, N, K) ran on since the last reset. */
static vit_gemm_path path_of(int ta, int M, int N, int K)
{
    vit_gemm_shape sh[64];
    size_t n = vit_gemm_shapes(sh, 64);
    ck_assert_uint_le(n, 64);
    for (size_t i = 0; i < n; i++)
        if (sh[i].trans_a == ta && sh[i].M == M && sh[i].N == N && sh[i].K == K)
            return sh[i].path;
    ck_abort_msg("no GEMM of shape ta %d %d x %d x %d ran", ta, M, N, K);
    return VIT_GEMM_AUTO;
}
#endif

/* The automatic policy on a CPU with AVX2 but not AVX-512 (src/kernels/
 * gemm.c, avx2_prefers_blas): the weight gradient (TN, K = 544) and a wide
 * product (N * K = 128 * 128) go to the BLAS, a narrow one (64 * 64) stays
 * on libxsmm; with AVX-512 all three, N <= 1024, stay on libxsmm.  An
 * OPENBLAS_CORETYPE may pick a BLAS core too weak for the rule, so the
 * AVX2 case is asserted only with OpenBLAS choosing its own (an AVX2 CPU
 * gets its Haswell or Zen kernels). */
START_TEST(auto_rule_by_cpu)
{
#if defined(__x86_64__) && defined(__GNUC__) && !defined(VIT_DOUBLE)
    __builtin_cpu_init();
    int avx512 = __builtin_cpu_supports("avx512f");
    int avx2_only = __builtin_cpu_supports("avx2") && !avx512;
    if (!avx512 && !(avx2_only && !getenv("OPENBLAS_CORETYPE")))
        return;
    ck_assert_int_eq(vit_gemm_set_path(VIT_GEMM_AUTO), VIT_OK);
    vit_set_threads(1); /* whole products: with 2 threads each runs in halves */
    const int n = 544;
    vit_real *x = randn((size_t)n * 128), *W = randn(128 * 128), *y = zeros((size_t)n * 128);
    vit_real *dy = randn((size_t)n * 128), *dx = zeros((size_t)n * 128), *dW = zeros(128 * 128);
    vit_gemm_stats_reset();
    ck_assert_int_eq(vit_linear_forward(y, x, W, NULL, n, 128, 128), VIT_OK);
    ck_assert_int_eq(vit_linear_backward(dx, dW, NULL, dy, x, W, n, 128, 128), VIT_OK);
    ck_assert_int_eq(vit_linear_forward(y, x, W, NULL, n, 64, 64), VIT_OK);
    vit_gemm_path wide = avx2_only ? VIT_GEMM_BLAS : VIT_GEMM_XSMM;
    ck_assert_int_eq(path_of(0, n, 128, 128), wide);  /* y = x W, wide */
    ck_assert_int_eq(path_of(1, 128, 128, n), wide);  /* dW = x^T dy */
    ck_assert_int_eq(path_of(0, n, 64, 64), VIT_GEMM_XSMM); /* narrow */
    vit_gemm_stats_reset();
    vit_set_threads(2);
    free(x); free(W); free(y); free(dy); free(dx); free(dW);
#endif
}
END_TEST

int main(void)
{
    vit_rng_seed(&rng, 14);
    vit_set_threads(2);
    Suite *s = suite_create("gemm");
    TCase *t = tcase_create("policy");
    tcase_add_test(t, policy_switch);
    suite_add_tcase(s, t);
    TCase *d = tcase_create("direct");
    tcase_set_timeout(d, 60);
    tcase_add_test(d, attention_direct_agrees);
    suite_add_tcase(s, d);
    if (vit_gemm_have_xsmm()) {
        TCase *p = tcase_create("paths");
        tcase_set_timeout(p, 60);
        tcase_add_test(p, linear_agrees);
        tcase_add_test(p, patch_embed_agrees);
        tcase_add_test(p, attention_agrees);
        tcase_add_test(p, train_step_agrees);
        tcase_add_test(p, auto_rule_by_cpu);
        suite_add_tcase(s, p);
    }
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}

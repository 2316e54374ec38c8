/*
 * tests/test_attention_tiled.c - the two alternative attention paths, in the
 * float64 build:
 *
 *  - tiled (memory-efficient) attention against the standard vit_sdpa path
 *    (outputs and every gradient, to 1e-12) over tile sizes that do and do
 *    not divide the sequence, every mask kind, score bias per head and
 *    shared, fully masked rows and cross-attention; its log-sum-exp against
 *    a naive one; central differences (gc_check); results independent of
 *    the thread count; accumulation, NULL gradients, work;
 *  - windowed attention against vit_sdpa with the vit_mask_window mask
 *    (plain and shifted windows, with and without a window bias), and by
 *    central differences;
 *  - argument errors of both.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attention_util.h"
#include "gradcheck.h"
#include "vit/attention.h"

/* ---- Helpers ---------------------------------------------------------------- */

static int bitwise_equal(const vit_real *a, const vit_real *b, size_t n)
{
    return memcmp(a, b, n * sizeof *a) == 0;
}

/* Random 0/1 mask with P(1) = p. */
static unsigned char *random_mask(size_t n, double p, uint64_t *seed)
{
    unsigned char *m = malloc(n);
    for (size_t i = 0; i < n; i++) m[i] = gc_uniform(seed) < p;
    return m;
}

/* ---- One attention problem ---------------------------------------------------- */

typedef struct {
    vit_sdpa a;
    vit_real *q, *k, *v, *bias, *w, *out, *lse;
    size_t nq, nk, nv, nout, nl, nb;
} tcase;

static void tcase_init(tcase *c, vit_sdpa a, int with_bias, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->a = a;
    size_t B = a.batch, H = a.heads;
    c->nq = B * a.n_q * H * a.d_k;
    c->nk = B * a.n_k * H * a.d_k;
    c->nv = B * a.n_k * H * a.d_v;
    c->nout = B * a.n_q * H * a.d_v;
    c->nl = B * H * a.n_q;
    c->q = gc_zeros(c->nq);
    c->k = gc_zeros(c->nk);
    c->v = gc_zeros(c->nv);
    c->w = gc_zeros(c->nout);
    c->out = gc_zeros(c->nout);
    c->lse = gc_zeros(c->nl);
    gc_fill(c->q, c->nq, &seed, 1.0);
    gc_fill(c->k, c->nk, &seed, 1.0);
    gc_fill(c->v, c->nv, &seed, 1.0);
    gc_fill(c->w, c->nout, &seed, 1.0);
    c->nb = (size_t)(a.bias_heads > 0 ? a.bias_heads : 1) * a.n_q * a.n_k;
    if (with_bias) {
        c->bias = gc_zeros(c->nb);
        gc_fill(c->bias, c->nb, &seed, 1.0);
        c->a.bias = c->bias;
    } else {
        c->a.bias = NULL;
    }
}

static void tcase_free(tcase *c)
{
    free(c->q); free(c->k); free(c->v); free(c->bias);
    free(c->w); free(c->out); free(c->lse);
}

/* Gradients of L = sum w .* out: dq, dk, dv, dbias. */
typedef struct {
    vit_real *g[4];
} grads;

static grads grads_new(const tcase *c)
{
    grads g = {{gc_zeros(c->nq), gc_zeros(c->nk), gc_zeros(c->nv), gc_zeros(c->nb)}};
    return g;
}

static void grads_free(grads *g)
{
    for (int t = 0; t < 4; t++) free(g->g[t]);
}

static size_t grad_len(const tcase *c, int t)
{
    size_t n[4] = {c->nq, c->nk, c->nv, c->nb};
    return n[t];
}

static const char *grad_name[4] = {"dq", "dk", "dv", "dbias"};

/* The standard path: out and gradients. */
static void run_standard(const tcase *c, vit_real *out, grads *g, int want_dbias)
{
    size_t np = (size_t)c->a.batch * c->a.heads * c->a.n_q * c->a.n_k;
    vit_real *probs = gc_zeros(np);
    ck_assert_int_eq(vit_sdpa_forward(&c->a, out, probs, c->q, c->k, c->v), VIT_OK);
    ck_assert_int_eq(vit_sdpa_backward(&c->a, g->g[0], g->g[1], g->g[2],
                                       want_dbias ? g->g[3] : NULL, c->w, probs, c->q, c->k,
                                       c->v, NULL), VIT_OK);
    free(probs);
}

/* The tiled path into c->out, c->lse and g. */
static void run_tiled(tcase *c, grads *g, int want_dbias)
{
    ck_assert_int_eq(vit_sdpa_tiled_forward(&c->a, c->out, c->lse, c->q, c->k, c->v, NULL),
                     VIT_OK);
    ck_assert_int_eq(vit_sdpa_tiled_backward(&c->a, g->g[0], g->g[1], g->g[2],
                                             want_dbias ? g->g[3] : NULL, c->w, c->out, c->lse,
                                             c->q, c->k, c->v, NULL), VIT_OK);
}

/* lse against log sum exp of the scores, by loops in double. */
static void check_lse(const char *tag, const tcase *c)
{
    const vit_sdpa *a = &c->a;
    int B = a->batch, H = a->heads, nq = a->n_q, nk = a->n_k, dk = a->d_k;
    double scale = a->scale != 0 ? a->scale : 1.0 / sqrt((double)dk);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < nq; i++) {
                double sum = 0.0;
                for (int j = 0; j < nk; j++) {
                    if (!ref_allowed(a, b, i, j)) continue;
                    double dot = 0.0;
                    for (int t = 0; t < dk; t++)
                        dot += c->q[((size_t)b * nq + i) * H * dk + h * dk + t] *
                               c->k[((size_t)b * nk + j) * H * dk + h * dk + t];
                    double s = scale * dot;
                    if (a->bias)
                        s += a->bias[((size_t)(a->bias_heads == 1 ? 0 : h) * nq + i) * nk + j];
                    sum += exp(s);
                }
                double want = log(sum); /* -inf for a fully masked row */
                double got = c->lse[((size_t)b * H + h) * nq + i];
                if (isinf(want))
                    ck_assert_msg(isinf(got) && got < 0, "%s: lse of a masked row is %g", tag, got);
                else
                    ck_assert_msg(fabs(got - want) <= 1e-12, "%s: lse[%d,%d,%d] %.17g vs %.17g",
                                  tag, b, h, i, got, want);
            }
}

/* Tiled against standard for each tile size in tiles[][2] (0-terminated):
 * out, dq, dk, dv and (with want_dbias) dbias to 1e-12, and lse against the
 * naive one. */
static void compare_paths(const char *tag, vit_sdpa a, int with_bias, int want_dbias,
                          const int (*tiles)[2], uint64_t seed)
{
    tcase c;
    tcase_init(&c, a, with_bias, seed);
    vit_real *ref_out = gc_zeros(c.nout);
    grads ref = grads_new(&c);
    run_standard(&c, ref_out, &ref, want_dbias);
    for (int t = 0; tiles[t][0] > 0; t++) {
        ck_assert_int_eq(vit_sdpa_tiled_set_tiles(tiles[t][0], tiles[t][1]), VIT_OK);
        grads g = grads_new(&c);
        run_tiled(&c, &g, want_dbias);
        double e = gc_max_abs_diff(c.out, ref_out, c.nout);
        printf("tiled %-22s tiles %3d x %-3d out %.1e", tag, tiles[t][0], tiles[t][1], e);
        ck_assert_msg(gc_all_finite(c.out, c.nout) && e <= 1e-12,
                      "%s tiles %dx%d: out differs by %g", tag, tiles[t][0], tiles[t][1], e);
        for (int u = 0; u < (want_dbias ? 4 : 3); u++) {
            size_t n = grad_len(&c, u);
            double d = gc_max_abs_diff(g.g[u], ref.g[u], n);
            printf(" %s %.1e", grad_name[u], d);
            ck_assert_msg(gc_all_finite(g.g[u], n) && d <= 1e-12,
                          "%s tiles %dx%d: %s differs by %g", tag, tiles[t][0], tiles[t][1],
                          grad_name[u], d);
        }
        printf("\n");
        check_lse(tag, &c);
        grads_free(&g);
    }
    vit_sdpa_tiled_set_tiles(0, 0);
    free(ref_out);
    grads_free(&ref);
    tcase_free(&c);
}

/* Tile sizes: single rows and keys, sizes that do not divide the sequence,
 * that divide it, and larger than it. */
static const int some_tiles[][2] = {{1, 1}, {3, 5}, {4, 4}, {5, 3}, {7, 2}, {128, 256}, {0, 0}};

START_TEST(test_tiled_vs_standard_nomask)
{
    compare_paths("nomask", sdpa_shape(2, 2, 11, 11, 3, 4), 0, 0, some_tiles, 1);
    vit_sdpa a = sdpa_shape(2, 3, 9, 9, 5, 2);
    a.scale = 0.7;
    compare_paths("scale0.7", a, 0, 0, some_tiles, 2);
}
END_TEST

START_TEST(test_tiled_vs_standard_cross)
{
    compare_paths("cross 7x13", sdpa_shape(2, 2, 7, 13, 3, 5), 0, 0, some_tiles, 3);
    compare_paths("cross 13x6", sdpa_shape(1, 3, 13, 6, 4, 3), 0, 0, some_tiles, 4);
}
END_TEST

START_TEST(test_tiled_vs_standard_masks)
{
    uint64_t seed = 5;
    vit_sdpa a = sdpa_shape(2, 2, 10, 12, 3, 3);
    unsigned char *shared = random_mask(10 * 12, 0.6, &seed);
    unsigned char *item = random_mask(2 * 10 * 12, 0.5, &seed);
    unsigned char valid[24];
    for (int j = 0; j < 24; j++) valid[j] = j % 12 != 3 && j % 12 != 8 && j != 17;

    vit_sdpa m = a;
    m.mask.allowed = shared;
    compare_paths("allowed shared", m, 0, 0, some_tiles, 6);
    m = a;
    m.mask.allowed = item;
    m.mask.allowed_per_item = 1;
    compare_paths("allowed per item", m, 0, 0, some_tiles, 7);
    m = a;
    m.mask.key_valid = valid;
    compare_paths("key_valid", m, 0, 0, some_tiles, 8);
    m = a;
    m.mask.causal = 1;
    compare_paths("causal 10x12", m, 0, 0, some_tiles, 9);
    m = sdpa_shape(2, 2, 12, 7, 3, 3);
    m.mask.causal = 1;
    compare_paths("causal 12x7", m, 0, 0, some_tiles, 10);
    m = a;
    m.mask.allowed = item;
    m.mask.allowed_per_item = 1;
    m.mask.key_valid = valid;
    m.mask.causal = 1;
    compare_paths("all masks", m, 0, 0, some_tiles, 11);
    free(shared);
    free(item);
}
END_TEST

START_TEST(test_tiled_vs_standard_bias)
{
    vit_sdpa a = sdpa_shape(2, 3, 9, 11, 3, 3);
    a.bias_heads = 1;
    compare_paths("bias shared", a, 1, 1, some_tiles, 12);
    a.bias_heads = 3;
    compare_paths("bias per head", a, 1, 1, some_tiles, 13);
    /* dbias at a zero bias (bias NULL). */
    compare_paths("dbias without bias", a, 0, 1, some_tiles, 14);
    vit_sdpa b = sdpa_shape(1, 2, 9, 11, 3, 3);
    b.bias_heads = 2;
    b.mask.causal = 1;
    compare_paths("bias B1 causal", b, 1, 1, some_tiles, 15);
}
END_TEST

START_TEST(test_tiled_vs_standard_fully_masked)
{
    /* Query 2 sees nothing; item 1 has no valid key at all. */
    unsigned char m[8 * 9], valid[2 * 9];
    memset(m, 1, sizeof m);
    memset(m + 2 * 9, 0, 9);
    for (int j = 0; j < 18; j++) valid[j] = j < 9;
    vit_sdpa a = sdpa_shape(2, 2, 8, 9, 3, 3);
    a.mask.allowed = m;
    a.mask.key_valid = valid;
    a.bias_heads = 2;
    compare_paths("fully masked", a, 1, 1, some_tiles, 16);

    tcase c;
    tcase_init(&c, a, 1, 16);
    ck_assert_int_eq(vit_sdpa_tiled_forward(&c.a, c.out, c.lse, c.q, c.k, c.v, NULL), VIT_OK);
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 8; i++) {
                int dead = b == 1 || i == 2;
                double l = c.lse[(b * 2 + h) * 8 + i];
                ck_assert(dead ? (isinf(l) && l < 0) : isfinite(l));
                for (int t = 0; t < 3; t++) {
                    double o = c.out[(b * 8 + i) * 6 + h * 3 + t];
                    ck_assert(dead ? o == 0.0 : isfinite(o));
                }
            }
    tcase_free(&c);
}
END_TEST

START_TEST(test_tiled_vs_standard_long)
{
    /* Longer than the default tiles (128 x 256) without dividing them, and
     * long enough for the standard path's BLAS branch. */
    static const int deflt[][2] = {{128, 256}, {0, 0}}; /* the defaults */
    vit_sdpa a = sdpa_shape(1, 2, 300, 270, 8, 6);
    a.mask.causal = 1;
    a.bias_heads = 2;
    compare_paths("long 300x270", a, 1, 1, deflt, 17);
}
END_TEST

/* ---- Gradient checks ---------------------------------------------------------- */

/* L = sum w .* out through the tiled forward. */
static double tiled_loss(void *ctx)
{
    tcase *c = ctx;
    if (vit_sdpa_tiled_forward(&c->a, c->out, c->lse, c->q, c->k, c->v, NULL) != VIT_OK)
        return NAN;
    return gc_dot(c->w, c->out, c->nout);
}

static void gradcheck_tiled(const char *tag, vit_sdpa a, int with_bias, int tq, int tk,
                            uint64_t seed)
{
    ck_assert_int_eq(vit_sdpa_tiled_set_tiles(tq, tk), VIT_OK);
    tcase c;
    tcase_init(&c, a, with_bias, seed);
    grads g = grads_new(&c);
    run_tiled(&c, &g, with_bias);
    vit_real *x[4] = {c.q, c.k, c.v, c.bias};
    for (int t = 0; t < (with_bias ? 4 : 3); t++) {
        char name[96];
        snprintf(name, sizeof name, "tiled %s %s", tag, grad_name[t]);
        size_t n = grad_len(&c, t);
        ck_assert_msg(gc_all_finite(g.g[t], n), "%s: non-finite gradient", name);
        double err = gc_check(name, x[t], g.g[t], n, tiled_loss, &c);
        ck_assert_msg(err <= GC_TOL, "%s: max_rel %.3e > %.1e", name, err, GC_TOL);
    }
    grads_free(&g);
    tcase_free(&c);
    vit_sdpa_tiled_set_tiles(0, 0);
}

START_TEST(test_tiled_gradcheck)
{
    gradcheck_tiled("nomask", sdpa_shape(2, 2, 7, 7, 3, 3), 0, 3, 4, 21);
    gradcheck_tiled("cross", sdpa_shape(1, 2, 5, 9, 3, 2), 0, 2, 4, 22);
    vit_sdpa a = sdpa_shape(2, 2, 7, 8, 3, 3);
    unsigned char valid[16];
    for (int j = 0; j < 16; j++) valid[j] = j != 4 && j != 13;
    unsigned char m[7 * 8];
    uint64_t seed = 23;
    for (int i = 0; i < 7 * 8; i++) m[i] = gc_uniform(&seed) < 0.7;
    memset(m + 3 * 8, 0, 8); /* a fully masked row */
    a.mask.key_valid = valid;
    a.mask.allowed = m;
    a.mask.causal = 1;
    a.bias_heads = 2;
    gradcheck_tiled("masks+bias/head", a, 1, 3, 3, 24);
    a.bias_heads = 1;
    a.mask.causal = 0;
    gradcheck_tiled("masks+bias shared", a, 1, 5, 2, 25);
}
END_TEST

/* ---- Behaviour ------------------------------------------------------------------ */

/* Runs the tiled forward and backward on `threads` threads. */
static void tiled_on_threads(tcase *c, grads *g, int threads, int want_dbias)
{
    ck_assert_int_eq(vit_set_threads(threads), VIT_OK);
    run_tiled(c, g, want_dbias);
}

START_TEST(test_tiled_thread_count_invariant)
{
    /* Large enough for the library to use its threads; 6 pairs make the
     * fused schedule run for 1, 2, 3 threads and the split one for 4 and 5,
     * with no dbias, a dbias per head and a shared one. */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    for (int mode = 0; mode < 3; mode++) {
        vit_sdpa a = sdpa_shape(2, 3, 40, 45, 8, 8);
        a.mask.causal = mode == 1;
        a.bias_heads = mode == 2 ? 1 : 3;
        ck_assert_int_eq(vit_sdpa_tiled_set_tiles(16, 16), VIT_OK);
        tcase c;
        tcase_init(&c, a, mode > 0, 31 + mode);
        grads ref = grads_new(&c);
        tiled_on_threads(&c, &ref, 1, mode > 0);
        vit_real *out1 = gc_zeros(c.nout);
        memcpy(out1, c.out, c.nout * sizeof *out1);
        static const int counts[] = {2, 3, 4, 5};
        for (int t = 0; t < 4; t++) {
            grads g = grads_new(&c);
            tiled_on_threads(&c, &g, counts[t], mode > 0);
            ck_assert_msg(bitwise_equal(c.out, out1, c.nout), "mode %d: out differs on %d threads",
                          mode, counts[t]);
            for (int u = 0; u < (mode > 0 ? 4 : 3); u++)
                ck_assert_msg(bitwise_equal(g.g[u], ref.g[u], grad_len(&c, u)),
                              "mode %d: %s differs on %d threads", mode, grad_name[u], counts[t]);
            grads_free(&g);
        }
        free(out1);
        grads_free(&ref);
        tcase_free(&c);
    }
    vit_set_threads(ncpu > 0 ? (int)ncpu : 1);
    vit_sdpa_tiled_set_tiles(0, 0);
}
END_TEST

START_TEST(test_tiled_accumulates_and_work)
{
    vit_sdpa a = sdpa_shape(2, 2, 9, 7, 3, 2);
    a.bias_heads = 1;
    a.mask.causal = 1;
    ck_assert_int_eq(vit_sdpa_tiled_set_tiles(4, 3), VIT_OK);
    tcase c;
    tcase_init(&c, a, 1, 41);
    size_t ws = vit_sdpa_tiled_work_size(&c.a);
    ck_assert_uint_gt(ws, 0);
    vit_real *work = gc_zeros(ws);
    vit_real *out2 = gc_zeros(c.nout), *lse2 = gc_zeros(c.nl);
    /* The forward with and without the caller's work. */
    ck_assert_int_eq(vit_sdpa_tiled_forward(&c.a, out2, lse2, c.q, c.k, c.v, work), VIT_OK);
    ck_assert_int_eq(vit_sdpa_tiled_forward(&c.a, c.out, c.lse, c.q, c.k, c.v, NULL), VIT_OK);
    ck_assert(bitwise_equal(out2, c.out, c.nout) && bitwise_equal(lse2, c.lse, c.nl));
    /* Once with work, twice without: the second call accumulates. */
    grads g1 = grads_new(&c), g2 = grads_new(&c);
    ck_assert_int_eq(vit_sdpa_tiled_backward(&c.a, g1.g[0], g1.g[1], g1.g[2], g1.g[3], c.w, c.out,
                                             c.lse, c.q, c.k, c.v, work), VIT_OK);
    for (int r = 0; r < 2; r++)
        ck_assert_int_eq(vit_sdpa_tiled_backward(&c.a, g2.g[0], g2.g[1], g2.g[2], g2.g[3], c.w,
                                                 c.out, c.lse, c.q, c.k, c.v, NULL), VIT_OK);
    for (int t = 0; t < 4; t++) {
        double m = 0.0;
        int nonzero = 0;
        for (size_t i = 0; i < grad_len(&c, t); i++) {
            nonzero |= g1.g[t][i] != 0.0;
            m = fmax(m, fabs(2 * g1.g[t][i] - g2.g[t][i]));
        }
        ck_assert_msg(nonzero, "%s is all zero", grad_name[t]);
        ck_assert_msg(m <= 1e-14, "%s: second backward did not accumulate", grad_name[t]);
    }
    /* One gradient at a time equals the same gradient from the full call. */
    for (int t = 0; t < 4; t++) {
        grads one = grads_new(&c);
        vit_real *p[4] = {NULL, NULL, NULL, NULL};
        p[t] = one.g[t];
        ck_assert_int_eq(vit_sdpa_tiled_backward(&c.a, p[0], p[1], p[2], p[3], c.w, c.out, c.lse,
                                                 c.q, c.k, c.v, NULL), VIT_OK);
        ck_assert_msg(gc_max_abs_diff(one.g[t], g1.g[t], grad_len(&c, t)) <= 1e-15,
                      "%s alone differs", grad_name[t]);
        grads_free(&one);
    }
    ck_assert_int_eq(vit_sdpa_tiled_backward(&c.a, NULL, NULL, NULL, NULL, c.w, c.out, c.lse,
                                             c.q, c.k, c.v, NULL), VIT_OK);
    grads_free(&g1);
    grads_free(&g2);
    free(work); free(out2); free(lse2);
    tcase_free(&c);
    vit_sdpa_tiled_set_tiles(0, 0);
}
END_TEST

START_TEST(test_tiled_work_is_linear)
{
    /* The scratch does not grow with the sequence once it exceeds a tile:
     * memory is the O(n) of q, k, v, out and lse alone. */
    vit_sdpa a = sdpa_shape(1, 4, 1024, 1024, 64, 64), b = a;
    b.n_q = b.n_k = 4096;
    ck_assert_uint_gt(vit_sdpa_tiled_work_size(&a), 0);
    ck_assert_uint_eq(vit_sdpa_tiled_work_size(&a), vit_sdpa_tiled_work_size(&b));
    ck_assert_uint_lt(vit_sdpa_tiled_work_size(&b), (size_t)1024 * 1024);
}
END_TEST

START_TEST(test_tiled_chooser)
{
    vit_sdpa small = sdpa_shape(1, 1, 65, 65, 8, 8), big = small;
    big.n_q = big.n_k = 1024;
    unsetenv("VIT_SDPA_TILED");
    ck_assert_int_eq(vit_sdpa_use_tiled(&small), 0);
    ck_assert_int_ne(vit_sdpa_use_tiled(&big), 0);
    small.n_q = small.n_k = 256;
    ck_assert_int_eq(vit_sdpa_use_tiled(&small), 0);
    small.n_k = 257;
    ck_assert_int_ne(vit_sdpa_use_tiled(&small), 0);
    small.n_k = 65;
    setenv("VIT_SDPA_TILED", "1", 1);
    ck_assert_int_ne(vit_sdpa_use_tiled(&small), 0);
    setenv("VIT_SDPA_TILED", "0", 1);
    ck_assert_int_eq(vit_sdpa_use_tiled(&big), 0);
    setenv("VIT_SDPA_TILED", "auto", 1);
    ck_assert_int_ne(vit_sdpa_use_tiled(&big), 0);
    unsetenv("VIT_SDPA_TILED");
    ck_assert_int_eq(vit_sdpa_use_tiled(NULL), 0);
}
END_TEST

START_TEST(test_tiled_nonfinite)
{
    vit_sdpa a = sdpa_shape(2, 2, 6, 6, 2, 2);
    unsigned char m[36];
    memset(m, 1, sizeof m);
    memset(m + 4 * 6, 0, 6);
    a.mask.allowed = m;
    ck_assert_int_eq(vit_sdpa_tiled_set_tiles(4, 4), VIT_OK);
    tcase c;
    tcase_init(&c, a, 0, 51);
    /* Item 1, head 1, query 4 (q row width H*d_k = 4): scores that are all
     * masked, reported anyway, as by the standard path. */
    c.q[(1 * 6 + 4) * 4 + 2] = NAN;
    c.q[(1 * 6 + 4) * 4 + 3] = NAN;
    ck_assert_int_eq(vit_sdpa_tiled_forward(&c.a, c.out, c.lse, c.q, c.k, c.v, NULL), VIT_ENUM);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "vit_sdpa_tiled_forward"));
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "item 1, head 1, query 4"));
    tcase_free(&c);
    vit_sdpa_tiled_set_tiles(0, 0);
}
END_TEST

/* ---- Windowed attention ---------------------------------------------------------- */

/* Token of position p in window wi, from the layout documented in
 * attention.h. */
static int win_token(const vit_window_attn *w, int wi, int p)
{
    int Mh = w->window_h, Mw = w->window_w, nwx = w->grid_w / Mw;
    int r = ((wi / nwx) * Mh + p / Mw + w->shift_h) % w->grid_h;
    int col = ((wi % nwx) * Mw + p % Mw + w->shift_w) % w->grid_w;
    return r * w->grid_w + col;
}

typedef struct {
    vit_window_attn w;
    vit_real *q, *k, *v, *bias, *dout, *out, *probs;
    size_t nq, nv, nb, np;
} wcase;

static void wcase_init(wcase *c, vit_window_attn w, int with_bias, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->w = w;
    size_t N = (size_t)w.grid_h * w.grid_w, T = (size_t)w.window_h * w.window_w;
    c->nq = w.batch * N * w.heads * w.d_k;
    c->nv = w.batch * N * w.heads * w.d_v;
    c->nb = (size_t)w.bias_heads * T * T;
    c->np = vit_window_attn_lse_size(&w);
    ck_assert_uint_eq(c->np, w.batch * w.heads * N);
    c->q = gc_zeros(c->nq);
    c->k = gc_zeros(c->nq);
    c->v = gc_zeros(c->nv);
    c->dout = gc_zeros(c->nv);
    c->out = gc_zeros(c->nv);
    c->probs = gc_zeros(c->np);
    gc_fill(c->q, c->nq, &seed, 1.0);
    gc_fill(c->k, c->nq, &seed, 1.0);
    gc_fill(c->v, c->nv, &seed, 1.0);
    gc_fill(c->dout, c->nv, &seed, 1.0);
    if (with_bias) {
        c->bias = gc_zeros(c->nb);
        gc_fill(c->bias, c->nb, &seed, 1.0);
        c->w.bias = c->bias;
    }
}

static void wcase_free(wcase *c)
{
    free(c->q); free(c->k); free(c->v); free(c->bias);
    free(c->dout); free(c->out); free(c->probs);
}

/* Windowed attention against vit_sdpa with the vit_mask_window mask and the
 * window bias spread over [H, N, N]: out, lse (window rows against the
 * tiled core's), dq, dk, dv and dbias (the full dbias summed over windows). */
static void compare_window(const char *tag, vit_window_attn w, int with_bias, uint64_t seed)
{
    wcase c;
    wcase_init(&c, w, with_bias, seed);
    const int N = w.grid_h * w.grid_w, T = w.window_h * w.window_w, H = w.heads, B = w.batch;
    const int nW = N / T, bh = with_bias ? w.bias_heads : 1;
    unsigned char *allowed = malloc((size_t)N * N);
    ck_assert_int_eq(vit_mask_window(allowed, w.grid_h, w.grid_w, w.window_h, w.window_w,
                                     w.shift_h, w.shift_w), VIT_OK);
    vit_real *full_bias = gc_zeros((size_t)bh * N * N);
    if (with_bias)
        for (int h = 0; h < bh; h++)
            for (int wi = 0; wi < nW; wi++)
                for (int p = 0; p < T; p++)
                    for (int u = 0; u < T; u++)
                        full_bias[((size_t)h * N + win_token(&w, wi, p)) * N + win_token(&w, wi, u)] =
                            c.bias[((size_t)h * T + p) * T + u];
    vit_sdpa a = sdpa_shape(B, H, N, N, w.d_k, w.d_v);
    a.scale = w.scale;
    a.mask.allowed = allowed;
    a.bias = with_bias ? full_bias : NULL;
    a.bias_heads = bh;

    size_t nfull = (size_t)B * H * N * N;
    vit_real *ref_out = gc_zeros(c.nv), *ref_probs = gc_zeros(nfull);
    vit_real *rg[4] = {gc_zeros(c.nq), gc_zeros(c.nq), gc_zeros(c.nv), gc_zeros((size_t)bh * N * N)};
    ck_assert_int_eq(vit_sdpa_forward(&a, ref_out, ref_probs, c.q, c.k, c.v), VIT_OK);
    ck_assert_int_eq(vit_sdpa_backward(&a, rg[0], rg[1], rg[2], with_bias ? rg[3] : NULL, c.dout,
                                       ref_probs, c.q, c.k, c.v, NULL), VIT_OK);

    vit_real *g[4] = {gc_zeros(c.nq), gc_zeros(c.nq), gc_zeros(c.nv), gc_zeros(c.nb)};
    ck_assert_int_eq(vit_window_attn_forward(&c.w, c.out, c.probs, c.q, c.k, c.v), VIT_OK);
    ck_assert_int_eq(vit_window_attn_backward(&c.w, g[0], g[1], g[2], with_bias ? g[3] : NULL,
                                              c.dout, c.probs, c.q, c.k, c.v), VIT_OK);

    double eo = gc_max_abs_diff(c.out, ref_out, c.nv);
    ck_assert_msg(eo <= 1e-12, "%s: out differs by %g", tag, eo);
    /* Each window row's log-sum-exp is the full masked row's (the tiled
     * core's lse), and the full map is zero outside the windows (a window
     * row of it sums to 1). */
    vit_real *ref_lse = gc_zeros((size_t)B * H * N), *out2 = gc_zeros(c.nv);
    ck_assert_int_eq(vit_sdpa_tiled_forward(&a, out2, ref_lse, c.q, c.k, c.v, NULL), VIT_OK);
    double ep = 0.0;
    for (int bhx = 0; bhx < B * H; bhx++)
        for (int wi = 0; wi < nW; wi++)
            for (int p = 0; p < T; p++) {
                double row = 0.0;
                int t = win_token(&w, wi, p);
                for (int u = 0; u < T; u++)
                    row += ref_probs[((size_t)bhx * N + t) * N + win_token(&w, wi, u)];
                vit_real x = c.probs[((size_t)bhx * nW + wi) * T + p];
                ep = fmax(ep, fabs(x - ref_lse[(size_t)bhx * N + t]));
                ck_assert_msg(fabs(row - 1.0) <= 1e-12, "%s: window row sum %g", tag, row);
            }
    ck_assert_msg(ep <= 1e-12, "%s: lse differs by %g", tag, ep);
    free(ref_lse);
    free(out2);
    printf("window %-24s out %.1e lse %.1e", tag, eo, ep);
    for (int u = 0; u < 3; u++) {
        size_t n = u < 2 ? c.nq : c.nv;
        double d = gc_max_abs_diff(g[u], rg[u], n);
        printf(" %s %.1e", grad_name[u], d);
        ck_assert_msg(d <= 1e-12, "%s: %s differs by %g", tag, grad_name[u], d);
    }
    if (with_bias) {
        vit_real *wb = gc_zeros(c.nb);
        for (int h = 0; h < bh; h++)
            for (int wi = 0; wi < nW; wi++)
                for (int p = 0; p < T; p++)
                    for (int u = 0; u < T; u++)
                        wb[((size_t)h * T + p) * T + u] +=
                            rg[3][((size_t)h * N + win_token(&w, wi, p)) * N + win_token(&w, wi, u)];
        double d = gc_max_abs_diff(g[3], wb, c.nb);
        printf(" dbias %.1e", d);
        ck_assert_msg(d <= 1e-12, "%s: dbias differs by %g", tag, d);
        free(wb);
    }
    printf("\n");
    for (int u = 0; u < 4; u++) { free(g[u]); free(rg[u]); }
    free(ref_out); free(ref_probs); free(full_bias); free(allowed);
    wcase_free(&c);
}

static vit_window_attn win_shape(int B, int H, int gh, int gw, int M, int shift, int dk, int dv)
{
    vit_window_attn w;
    memset(&w, 0, sizeof w);
    w.batch = B; w.heads = H; w.grid_h = gh; w.grid_w = gw; w.window_h = w.window_w = M;
    w.shift_h = w.shift_w = shift;
    w.d_k = dk; w.d_v = dv;
    return w;
}

/* win_shape with its own shift per axis (torchvision drops the shift only
 * on an axis that one window covers). */
static vit_window_attn win_axes(int B, int H, int gh, int gw, int M, int shift_h, int shift_w,
                                int dk, int dv)
{
    vit_window_attn w = win_shape(B, H, gh, gw, M, 0, dk, dv);
    w.shift_h = shift_h;
    w.shift_w = shift_w;
    return w;
}

/* Windows of Mh rows by Mw columns, each axis with its own shift. */
static vit_window_attn win_rect(int B, int H, int gh, int gw, int Mh, int Mw, int shift_h,
                                int shift_w, int dk, int dv)
{
    vit_window_attn w = win_axes(B, H, gh, gw, Mh, shift_h, shift_w, dk, dv);
    w.window_w = Mw;
    return w;
}

START_TEST(test_window_vs_masked)
{
    compare_window("8x8 M4 shift0", win_shape(2, 2, 8, 8, 4, 0, 3, 4), 0, 61);
    compare_window("8x8 M4 shift2", win_shape(2, 2, 8, 8, 4, 2, 3, 4), 0, 62);
    compare_window("6x4 M2 shift0", win_shape(2, 3, 6, 4, 2, 0, 4, 3), 0, 63);
    compare_window("6x4 M2 shift1", win_shape(2, 3, 6, 4, 2, 1, 4, 3), 0, 64);
    compare_window("4x4 M4 shift2 (1 window)", win_shape(1, 2, 4, 4, 4, 2, 3, 3), 0, 65);
    compare_window("6x9 M3 shift1", win_shape(1, 2, 6, 9, 3, 1, 2, 2), 0, 66);
    vit_window_attn w = win_shape(2, 2, 8, 8, 4, 2, 3, 3);
    w.bias_heads = 2;
    compare_window("8x8 M4 shift2 bias/head", w, 1, 67);
    w.bias_heads = 1;
    w.scale = 0.6;
    compare_window("8x8 M4 shift2 bias shared", w, 1, 68);
    w = win_shape(2, 1, 6, 4, 2, 1, 3, 3);
    w.bias_heads = 1;
    compare_window("6x4 M2 shift1 bias H=1", w, 1, 69);
    /* one window across the width, no shift: read and written in place */
    compare_window("8x4 M4 shift0 (in place)", win_shape(2, 2, 8, 4, 4, 0, 3, 4), 0, 60);
    w = win_shape(2, 2, 8, 4, 4, 0, 3, 3);
    w.bias_heads = 2;
    compare_window("8x4 M4 shift0 bias (in place)", w, 1, 59);
    /* one shift per axis: 0 on the axis one window covers (7 x 14 in
     * windows of 7, torchvision's 28x56 images at patch 4), and a
     * row-only shift, which must leave the in-place route */
    compare_window("7x14 M7 shift 0,3", win_axes(1, 2, 7, 14, 7, 0, 3, 4, 4), 0, 58);
    w = win_axes(2, 2, 8, 4, 4, 2, 0, 3, 3);
    w.bias_heads = 2;
    compare_window("8x4 M4 shift 2,0 bias", w, 1, 57);
    compare_window("6x9 M3 shift 2,1", win_axes(2, 2, 6, 9, 3, 2, 1, 3, 2), 0, 56);
    w = win_axes(1, 2, 4, 8, 4, 0, 2, 3, 3);
    w.bias_heads = 1;
    compare_window("4x8 M4 shift 0,2 bias shared", w, 1, 55);
}
END_TEST

/* Rectangular windows: 8x6 in windows of 4x3 (shifted on either axis,
 * both, neither), 6x9 in 3x3 against 2x3 (the same columns, other rows),
 * 16x14 in 8x7 (64x56 photos at patch 4, shifted 4 and 3), one window of
 * 8x7 over its whole grid (the merged stage: in place), a window across
 * the width that is not square (6x4 in 2x4: in place, and shifted by
 * rows: gathered), with a bias per head and shared. */
START_TEST(test_window_rect_vs_masked)
{
    compare_window("8x6 W4x3 shift 0,0", win_rect(2, 2, 8, 6, 4, 3, 0, 0, 3, 4), 0, 41);
    compare_window("8x6 W4x3 shift 2,0", win_rect(2, 2, 8, 6, 4, 3, 2, 0, 3, 4), 0, 42);
    compare_window("8x6 W4x3 shift 0,1", win_rect(2, 2, 8, 6, 4, 3, 0, 1, 4, 3), 0, 43);
    compare_window("8x6 W4x3 shift 2,1", win_rect(2, 3, 8, 6, 4, 3, 2, 1, 3, 3), 0, 44);
    compare_window("6x9 W3x3 shift 1,1", win_rect(1, 2, 6, 9, 3, 3, 1, 1, 2, 3), 0, 45);
    compare_window("6x9 W2x3 shift 1,1", win_rect(1, 2, 6, 9, 2, 3, 1, 1, 2, 3), 0, 46);
    compare_window("6x9 W2x3 shift 0,1", win_rect(2, 2, 6, 9, 2, 3, 0, 1, 3, 2), 0, 47);
    compare_window("6x9 W2x3 shift 1,0", win_rect(2, 2, 6, 9, 2, 3, 1, 0, 3, 2), 0, 48);
    vit_window_attn w = win_rect(2, 2, 8, 6, 4, 3, 2, 1, 3, 3);
    w.bias_heads = 2;
    compare_window("8x6 W4x3 shift 2,1 bias/head", w, 1, 49);
    w = win_rect(2, 2, 6, 9, 2, 3, 1, 1, 3, 3);
    w.bias_heads = 1;
    w.scale = 0.7;
    compare_window("6x9 W2x3 shift 1,1 bias shared", w, 1, 50);
    w = win_rect(1, 2, 16, 14, 8, 7, 4, 3, 4, 4);
    w.bias_heads = 2;
    compare_window("16x14 W8x7 shift 4,3 bias/head", w, 1, 51);
    w = win_rect(2, 2, 8, 7, 8, 7, 0, 0, 4, 4);
    w.bias_heads = 2;
    compare_window("8x7 W8x7 (1 window, in place) bias", w, 1, 52);
    w = win_rect(2, 2, 6, 4, 2, 4, 0, 0, 3, 3);
    w.bias_heads = 2;
    compare_window("6x4 W2x4 (in place) bias", w, 1, 53);
    w.shift_h = 1;
    compare_window("6x4 W2x4 shift 1,0 bias", w, 1, 54);
}
END_TEST

/* L = sum dout .* out through the windowed forward. */
static double window_loss(void *ctx)
{
    wcase *c = ctx;
    if (vit_window_attn_forward(&c->w, c->out, c->probs, c->q, c->k, c->v) != VIT_OK)
        return NAN;
    return gc_dot(c->dout, c->out, c->nv);
}

static void gradcheck_window(const char *tag, vit_window_attn w, int with_bias, uint64_t seed)
{
    wcase c;
    wcase_init(&c, w, with_bias, seed);
    vit_real *g[4] = {gc_zeros(c.nq), gc_zeros(c.nq), gc_zeros(c.nv), gc_zeros(c.nb)};
    ck_assert_int_eq(vit_window_attn_forward(&c.w, c.out, c.probs, c.q, c.k, c.v), VIT_OK);
    ck_assert_int_eq(vit_window_attn_backward(&c.w, g[0], g[1], g[2], with_bias ? g[3] : NULL,
                                              c.dout, c.probs, c.q, c.k, c.v), VIT_OK);
    vit_real *x[4] = {c.q, c.k, c.v, c.bias};
    size_t n[4] = {c.nq, c.nq, c.nv, c.nb};
    for (int t = 0; t < (with_bias ? 4 : 3); t++) {
        char name[96];
        snprintf(name, sizeof name, "window %s %s", tag, grad_name[t]);
        ck_assert_msg(gc_all_finite(g[t], n[t]), "%s: non-finite gradient", name);
        double err = gc_check(name, x[t], g[t], n[t], window_loss, &c);
        ck_assert_msg(err <= GC_TOL, "%s: max_rel %.3e > %.1e", name, err, GC_TOL);
    }
    for (int t = 0; t < 4; t++) free(g[t]);
    wcase_free(&c);
}

START_TEST(test_window_gradcheck)
{
    vit_window_attn w = win_shape(2, 2, 4, 4, 2, 1, 3, 2);
    w.bias_heads = 2;
    gradcheck_window("4x4 M2 shift1 bias/head", w, 1, 71);
    w = win_shape(1, 2, 6, 3, 3, 0, 2, 3);
    w.bias_heads = 1;
    gradcheck_window("6x3 M3 shift0 bias shared", w, 1, 72);
    gradcheck_window("4x4 M2 shift0", win_shape(1, 1, 4, 4, 2, 0, 3, 3), 0, 73);
    /* a shift on one axis only, each way */
    w = win_axes(1, 2, 3, 6, 3, 0, 1, 2, 2);
    w.bias_heads = 2;
    gradcheck_window("3x6 M3 shift 0,1 bias/head", w, 1, 74);
    gradcheck_window("4x4 M2 shift 1,0", win_axes(1, 2, 4, 4, 2, 1, 0, 3, 2), 0, 75);
}
END_TEST

/* Mh != Mw: windows of 2x3 on a 4x6 grid shifted on either axis and both,
 * 3x2 on 6x4, with a bias per head and shared, and 1x3 (one row). */
START_TEST(test_window_rect_gradcheck)
{
    vit_window_attn w = win_rect(2, 2, 4, 6, 2, 3, 1, 1, 3, 2);
    w.bias_heads = 2;
    gradcheck_window("4x6 W2x3 shift 1,1 bias/head", w, 1, 76);
    w = win_rect(1, 2, 4, 6, 2, 3, 0, 1, 2, 3);
    w.bias_heads = 1;
    gradcheck_window("4x6 W2x3 shift 0,1 bias shared", w, 1, 77);
    w = win_rect(1, 2, 6, 4, 3, 2, 1, 0, 2, 2);
    w.bias_heads = 2;
    gradcheck_window("6x4 W3x2 shift 1,0 bias/head", w, 1, 78);
    gradcheck_window("2x6 W1x3 shift 0,1", win_rect(1, 2, 2, 6, 1, 3, 0, 1, 3, 2), 0, 79);
}
END_TEST

START_TEST(test_window_accumulates)
{
    vit_window_attn w = win_shape(2, 2, 4, 4, 2, 1, 3, 2);
    w.bias_heads = 2;
    wcase c;
    wcase_init(&c, w, 1, 81);
    ck_assert_int_eq(vit_window_attn_forward(&c.w, c.out, c.probs, c.q, c.k, c.v), VIT_OK);
    size_t n[4] = {c.nq, c.nq, c.nv, c.nb};
    vit_real *g1[4], *g2[4];
    for (int t = 0; t < 4; t++) { g1[t] = gc_zeros(n[t]); g2[t] = gc_zeros(n[t]); }
    ck_assert_int_eq(vit_window_attn_backward(&c.w, g1[0], g1[1], g1[2], g1[3], c.dout, c.probs,
                                              c.q, c.k, c.v), VIT_OK);
    for (int r = 0; r < 2; r++)
        ck_assert_int_eq(vit_window_attn_backward(&c.w, g2[0], g2[1], g2[2], g2[3], c.dout,
                                                  c.probs, c.q, c.k, c.v), VIT_OK);
    for (int t = 0; t < 4; t++) {
        double m = 0.0;
        for (size_t i = 0; i < n[t]; i++) m = fmax(m, fabs(2 * g1[t][i] - g2[t][i]));
        ck_assert_msg(m <= 1e-14, "%s: second backward did not accumulate", grad_name[t]);
        free(g1[t]);
        free(g2[t]);
    }
    ck_assert_int_eq(vit_window_attn_backward(&c.w, NULL, NULL, NULL, NULL, c.dout, c.probs,
                                              c.q, c.k, c.v), VIT_OK);
    /* A non-finite score is reported with its tokens. */
    c.k[5 * 6 + 3] = INFINITY; /* item 0, token 5, head 1 (row width H*d_k = 6) */
    ck_assert_int_eq(vit_window_attn_forward(&c.w, c.out, c.probs, c.q, c.k, c.v), VIT_ENUM);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "vit_window_attn_forward"));
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "key 5"));
    wcase_free(&c);
}
END_TEST

/* With the weights kept (w.probs) the forward needs no lse and the backward
 * reads none: lse NULL gives the same out and weights as with one, and the
 * same gradients, bit for bit; those agree with the backward that remakes
 * the weights from lse up to rounding; without w.probs a NULL lse is
 * still refused. */
START_TEST(test_window_kept_weights_need_no_lse)
{
    vit_window_attn w = win_shape(2, 2, 4, 4, 2, 1, 3, 2);
    w.bias_heads = 2;
    wcase c;
    wcase_init(&c, w, 1, 83);
    const size_t nw = c.np * 4, n[4] = {c.nq, c.nq, c.nv, c.nb}; /* T = 4 */
    vit_real *pw[2] = {gc_zeros(nw), gc_zeros(nw)}, *out2 = gc_zeros(c.nv);
    vit_real *g[3][4];
    for (int r = 0; r < 3; r++)
        for (int t = 0; t < 4; t++) g[r][t] = gc_zeros(n[t]);
    /* r 0: remade from lse; r 1: kept, with lse; r 2: kept, lse NULL */
    ck_assert_int_eq(vit_window_attn_forward(&c.w, c.out, c.probs, c.q, c.k, c.v), VIT_OK);
    ck_assert_int_eq(vit_window_attn_backward(&c.w, g[0][0], g[0][1], g[0][2], g[0][3], c.dout,
                                              c.probs, c.q, c.k, c.v), VIT_OK);
    vit_window_attn kw = c.w;
    kw.probs = pw[0];
    ck_assert_int_eq(vit_window_attn_forward(&kw, out2, c.probs, c.q, c.k, c.v), VIT_OK);
    ck_assert_int_eq(vit_window_attn_backward(&kw, g[1][0], g[1][1], g[1][2], g[1][3], c.dout,
                                              c.probs, c.q, c.k, c.v), VIT_OK);
    ck_assert(bitwise_equal(out2, c.out, c.nv));
    kw.probs = pw[1];
    ck_assert_int_eq(vit_window_attn_forward(&kw, out2, NULL, c.q, c.k, c.v), VIT_OK);
    ck_assert_int_eq(vit_window_attn_backward(&kw, g[2][0], g[2][1], g[2][2], g[2][3], c.dout,
                                              NULL, c.q, c.k, c.v), VIT_OK);
    ck_assert(bitwise_equal(out2, c.out, c.nv) && bitwise_equal(pw[0], pw[1], nw));
    for (int t = 0; t < 4; t++) {
        ck_assert_msg(bitwise_equal(g[1][t], g[2][t], n[t]), "%s: lse NULL changed it",
                      grad_name[t]);
        double m = 0.0, top = 0.0;
        for (size_t i = 0; i < n[t]; i++) {
            m = fmax(m, fabs(g[0][t][i] - g[1][t][i]));
            top = fmax(top, fabs(g[0][t][i]));
        }
        ck_assert_msg(top > 0 && m <= 1e-12 * top, "%s: kept and remade weights differ by %g",
                      grad_name[t], m);
    }
    EXPECT_EINVAL(vit_window_attn_backward(&c.w, g[0][0], NULL, NULL, NULL, c.dout, NULL, c.q,
                                           c.k, c.v), "lse");
    for (int r = 0; r < 3; r++)
        for (int t = 0; t < 4; t++) free(g[r][t]);
    free(pw[0]);
    free(pw[1]);
    free(out2);
    wcase_free(&c);
}
END_TEST

/* ---- Argument errors ---------------------------------------------------------- */

START_TEST(test_bad_input)
{
    vit_real buf[4096] = {0};
    vit_real *q = buf, *k = buf + 512, *v = buf + 1024, *out = buf + 1536, *l = buf + 2048;
    vit_sdpa a = sdpa_shape(1, 2, 3, 3, 2, 2);

    EXPECT_EINVAL(vit_sdpa_tiled_forward(NULL, out, l, q, k, v, NULL), "a is NULL");
    EXPECT_EINVAL(vit_sdpa_tiled_forward(&a, out, NULL, q, k, v, NULL), "lse");
    EXPECT_EINVAL(vit_sdpa_tiled_forward(&a, NULL, l, q, k, v, NULL), "out");
    EXPECT_EINVAL(vit_sdpa_tiled_forward(&a, out, l, q, NULL, v, NULL), "k is NULL");
    EXPECT_EINVAL(vit_sdpa_tiled_forward(&a, q, l, q, k, v, NULL), "alias");
    EXPECT_EINVAL(vit_sdpa_tiled_backward(&a, q, k, v, NULL, NULL, out, l, q, k, v, NULL), "dout");
    EXPECT_EINVAL(vit_sdpa_tiled_backward(&a, q, k, v, NULL, out, out, NULL, q, k, v, NULL), "lse");
    EXPECT_EINVAL(vit_sdpa_tiled_backward(&a, q, k, v, NULL, out, NULL, l, q, k, v, NULL),
                  "out is NULL");
    vit_sdpa z = a;
    z.n_k = 0;
    EXPECT_EINVAL(vit_sdpa_tiled_forward(&z, out, l, q, k, v, NULL), "n_k");
    ck_assert_uint_eq(vit_sdpa_tiled_work_size(&z), 0);
    ck_assert_uint_eq(vit_sdpa_tiled_work_size(NULL), 0);
    z = a;
    z.heads = -1;
    EXPECT_EINVAL(vit_sdpa_tiled_backward(&z, q, k, v, NULL, out, out, l, q, k, v, NULL), "heads");
    z = a;
    z.bias = buf + 3000;
    z.bias_heads = 3;
    EXPECT_EINVAL(vit_sdpa_tiled_forward(&z, out, l, q, k, v, NULL), "bias_heads");
    z = a;
    z.bias_heads = 0;
    EXPECT_EINVAL(vit_sdpa_tiled_backward(&z, NULL, NULL, NULL, buf + 3000, out, out, l, q, k, v,
                                          NULL), "bias_heads");
    z = a;
    z.scale = INFINITY;
    EXPECT_EINVAL(vit_sdpa_tiled_forward(&z, out, l, q, k, v, NULL), "scale");
    EXPECT_EINVAL(vit_sdpa_tiled_set_tiles(-1, 4), "tile_q");
    EXPECT_EINVAL(vit_sdpa_tiled_set_tiles(4, 5000), "tile_k");

    vit_window_attn w = win_shape(1, 2, 4, 4, 2, 1, 2, 2);
    vit_real *p = buf + 2100;
    EXPECT_EINVAL(vit_window_attn_forward(NULL, out, p, q, k, v), "w is NULL");
    EXPECT_EINVAL(vit_window_attn_forward(&w, out, NULL, q, k, v), "lse");
    EXPECT_EINVAL(vit_window_attn_forward(&w, out, p, q, k, NULL), "v is NULL");
    EXPECT_EINVAL(vit_window_attn_forward(&w, v, p, q, k, v), "alias");
    EXPECT_EINVAL(vit_window_attn_backward(&w, q, k, v, NULL, NULL, p, q, k, v), "dout");
    EXPECT_EINVAL(vit_window_attn_backward(&w, q, k, v, NULL, out, p, NULL, k, v), "q is NULL");
    vit_window_attn wb = w;
    wb.bias_heads = 0; /* dbias asked for without a valid bias_heads */
    EXPECT_EINVAL(vit_window_attn_backward(&wb, NULL, NULL, NULL, buf + 3000, out, p, q, k, v),
                  "bias_heads");
    vit_window_attn e = w;
    e.grid_w = 5;
    EXPECT_EINVAL(vit_window_attn_forward(&e, out, p, q, k, v), "multiple");
    ck_assert_uint_eq(vit_window_attn_lse_size(&e), 0);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "multiple"));
    e = w;
    e.shift_h = 2; /* each axis checked alone, the other one valid */
    EXPECT_EINVAL(vit_window_attn_forward(&e, out, p, q, k, v), "shift_h");
    e.shift_h = -1;
    EXPECT_EINVAL(vit_window_attn_backward(&e, q, k, v, NULL, out, p, q, k, v), "shift_h");
    e = w;
    e.shift_w = 2;
    EXPECT_EINVAL(vit_window_attn_forward(&e, out, p, q, k, v), "shift_w");
    e.shift_h = 0, e.shift_w = -1;
    EXPECT_EINVAL(vit_window_attn_backward(&e, q, k, v, NULL, out, p, q, k, v), "shift_w");
    ck_assert_uint_eq(vit_window_attn_lse_size(&e), 0);
    e = w;
    e.window_h = 0;
    EXPECT_EINVAL(vit_window_attn_forward(&e, out, p, q, k, v), "window_h");
    e = w;
    e.window_w = 0;
    EXPECT_EINVAL(vit_window_attn_forward(&e, out, p, q, k, v), "window_w");
    /* rectangular: each axis against its own side (w: a 4x4 grid) */
    e = w;
    e.window_w = 4, e.window_h = 3;
    EXPECT_EINVAL(vit_window_attn_forward(&e, out, p, q, k, v),
                  "grid_h 4 (grid 4 x 4) is not a multiple of window_h 3 (window 3 x 4)");
    e.window_h = 4, e.window_w = 3;
    EXPECT_EINVAL(vit_window_attn_backward(&e, q, k, v, NULL, out, p, q, k, v),
                  "grid_w 4 (grid 4 x 4) is not a multiple of window_w 3 (window 4 x 3)");
    e = w;
    e.window_h = 4, e.window_w = 2, e.shift_h = 3, e.shift_w = 2;
    EXPECT_EINVAL(vit_window_attn_forward(&e, out, p, q, k, v),
                  "shift_w must be in [0, window_w = 2), got 2");
    e.window_h = 2, e.window_w = 4, e.shift_h = 2, e.shift_w = 3;
    EXPECT_EINVAL(vit_window_attn_forward(&e, out, p, q, k, v),
                  "shift_h must be in [0, window_h = 2), got 2");
    e = w;
    e.d_k = 0;
    EXPECT_EINVAL(vit_window_attn_forward(&e, out, p, q, k, v), "d_k");
    e = w;
    e.bias = buf + 3000;
    e.bias_heads = 4;
    EXPECT_EINVAL(vit_window_attn_forward(&e, out, p, q, k, v), "bias_heads");
    e = w;
    e.bias_heads = 0;
    EXPECT_EINVAL(vit_window_attn_backward(&e, NULL, NULL, NULL, buf + 3000, out, p, q, k, v),
                  "bias_heads");
    e = w;
    e.scale = NAN;
    EXPECT_EINVAL(vit_window_attn_forward(&e, out, p, q, k, v), "scale");
    e = w;
    e.ld_k = 3; /* rows narrower than H*d_k = 4 */
    EXPECT_EINVAL(vit_window_attn_forward(&e, out, p, q, k, v), "ld_k (3)");
    e = w;
    e.ld_v = -4;
    EXPECT_EINVAL(vit_window_attn_backward(&e, q, k, v, NULL, out, p, q, k, v), "ld_v");
    ck_assert_uint_eq(vit_window_attn_lse_size(NULL), 0);
}
END_TEST

/* ---- Runner ------------------------------------------------------------------- */

static Suite *tiled_suite(void)
{
    Suite *s = suite_create("attention_tiled");
    TCase *t = tcase_create("tiled_vs_standard");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_tiled_vs_standard_nomask);
    tcase_add_test(t, test_tiled_vs_standard_cross);
    tcase_add_test(t, test_tiled_vs_standard_masks);
    tcase_add_test(t, test_tiled_vs_standard_bias);
    tcase_add_test(t, test_tiled_vs_standard_fully_masked);
    tcase_add_test(t, test_tiled_vs_standard_long);
    suite_add_tcase(s, t);

    TCase *g = tcase_create("tiled_behaviour");
    tcase_set_timeout(g, 60);
    tcase_add_test(g, test_tiled_gradcheck);
    tcase_add_test(g, test_tiled_thread_count_invariant);
    tcase_add_test(g, test_tiled_accumulates_and_work);
    tcase_add_test(g, test_tiled_work_is_linear);
    tcase_add_test(g, test_tiled_chooser);
    tcase_add_test(g, test_tiled_nonfinite);
    suite_add_tcase(s, g);

    TCase *w = tcase_create("window");
    tcase_set_timeout(w, 60);
    tcase_add_test(w, test_window_vs_masked);
    tcase_add_test(w, test_window_rect_vs_masked);
    tcase_add_test(w, test_window_gradcheck);
    tcase_add_test(w, test_window_rect_gradcheck);
    tcase_add_test(w, test_window_accumulates);
    tcase_add_test(w, test_window_kept_weights_need_no_lse);
    suite_add_tcase(s, w);

    TCase *e = tcase_create("errors");
    tcase_set_timeout(e, 60);
    tcase_add_test(e, test_bad_input);
    suite_add_tcase(s, e);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(tiled_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

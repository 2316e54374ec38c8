/* Windowed attention (vit/attention.h) in float32, the training precision:
 * a window whose tokens are consecutive rows of the grid (one window across
 * the grid's width, no shift) is read and written in place, the others
 * are gathered into dense blocks first and scattered back
 * (src/kernels/attention_window.c).  Both routes must give the same bits.
 *
 * The same two windows of Mh x Mw tokens, side by side in an Mh x 2Mw grid
 * (gathered) and stacked in a 2Mh x Mw grid (in place), with the tokens
 * moved accordingly: out, lse (or the kept weights), dq, dk, dv and dbias
 * equal bit for bit, Q, K and V read from one fused [B, N, 3D] buffer as
 * Swin's block does.  At 7 x 7 (49 tokens, Swin's window: GEMMs), 8 x 7
 * (56 tokens, 64x56 photos' rectangular window: GEMMs), 4 x 4 and 4 x 2
 * (16 and 8 tokens: src/kernels/pair_gemm.c's direct kernels), on one
 * thread and on two.  And through the tape, whose op writes a fresh
 * gradient whole instead of clearing and adding to it.  (The float64 build checks both routes against the
 * masked full attention and finite differences: test_attention_tiled.) */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vit/vit.h"

/* Token of the side-by-side grid (row r, column c of Mh x 2Mw) in the
 * stacked one (2Mh x Mw): window c / Mw of the first becomes window c / Mw
 * of the second. */
static int stacked(int Mh, int Mw, int r, int c)
{
    return ((c / Mw) * Mh + r) * Mw + c % Mw;
}

static float *fill(size_t n, double f)
{
    float *p = malloc(n * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)sin(f * (double)i + 0.1);
    return p;
}

/* dst's token rows (width w) = src's, moved from side by side to stacked. */
static void restack(float *dst, const float *src, int B, int Mh, int Mw, int w)
{
    const int N = 2 * Mh * Mw;
    for (int b = 0; b < B; b++)
        for (int r = 0; r < Mh; r++)
            for (int c = 0; c < 2 * Mw; c++)
                memcpy(dst + ((size_t)b * N + stacked(Mh, Mw, r, c)) * w,
                       src + ((size_t)b * N + r * 2 * Mw + c) * w, (size_t)w * sizeof *dst);
}

static void same_bits(const char *what, const float *a, const float *b, size_t n, int Mh,
                      int Mw, int kept)
{
    ck_assert_msg(!memcmp(a, b, n * sizeof *a), "window %d x %d, weights %s: %s differs", Mh,
                  Mw, kept ? "kept" : "remade", what);
}

/* One route: forward and backward on grid gh x gw of the fused qkv. */
static void run(vit_window_attn w, const float *qkv, const float *dout, float *out, float *lse,
                float *dqkv, float *dbias)
{
    const int D = w.heads * w.d_k;
    ck_assert_int_eq(vit_window_attn_forward(&w, out, lse, qkv, qkv + D, qkv + 2 * D), VIT_OK);
    ck_assert_int_eq(vit_window_attn_backward(&w, dqkv, dqkv + D, dqkv + 2 * D, dbias, dout, lse,
                                              qkv, qkv + D, qkv + 2 * D),
                     VIT_OK);
}

static void compare_routes(int Mh, int Mw, int d, int kept)
{
    const int B = 2, H = 2, D = H * d, T = Mh * Mw, N = 2 * T;
    const size_t nqkv = (size_t)B * N * 3 * D, nout = (size_t)B * N * D;
    const size_t nlse = (size_t)B * H * N, nw = nlse * T, nb = (size_t)H * T * T;
    float *qkv = fill(nqkv, 0.37), *dout = fill(nout, 0.91), *bias = fill(nb, 0.13);
    float *qkv2 = fill(nqkv, 0), *dout2 = fill(nout, 0);
    restack(qkv2, qkv, B, Mh, Mw, 3 * D);
    restack(dout2, dout, B, Mh, Mw, D);
    float *out[2], *lse[2], *probs[2], *dqkv[2], *dbias[2];
    for (int r = 0; r < 2; r++) {
        out[r] = calloc(nout, sizeof(float));
        lse[r] = calloc(nlse, sizeof(float));
        probs[r] = kept ? calloc(nw, sizeof(float)) : NULL;
        dqkv[r] = calloc(nqkv, sizeof(float));
        dbias[r] = calloc(nb, sizeof(float));
        ck_assert(out[r] && lse[r] && (probs[r] || !kept) && dqkv[r] && dbias[r]);
    }
    vit_window_attn w;
    memset(&w, 0, sizeof w);
    w.batch = B, w.heads = H, w.window_h = Mh, w.window_w = Mw, w.d_k = w.d_v = d;
    w.bias = bias, w.bias_heads = H, w.ld_q = w.ld_k = w.ld_v = 3 * D;
    w.grid_h = Mh, w.grid_w = 2 * Mw, w.probs = probs[0]; /* side by side: gathered */
    run(w, qkv, dout, out[0], lse[0], dqkv[0], dbias[0]);
    w.grid_h = 2 * Mh, w.grid_w = Mw, w.probs = probs[1]; /* stacked: in place */
    run(w, qkv2, dout2, out[1], lse[1], dqkv[1], dbias[1]);

    float *moved = fill(nqkv, 0);
    restack(moved, out[0], B, Mh, Mw, D);
    same_bits("out", moved, out[1], nout, Mh, Mw, kept);
    same_bits("lse", lse[0], lse[1], nlse, Mh, Mw, kept);
    if (kept)
        same_bits("weights", probs[0], probs[1], nw, Mh, Mw, kept);
    restack(moved, dqkv[0], B, Mh, Mw, 3 * D);
    same_bits("dq, dk, dv", moved, dqkv[1], nqkv, Mh, Mw, kept);
    same_bits("dbias", dbias[0], dbias[1], nb, Mh, Mw, kept);
    /* not a comparison of nothing: every gradient part is nonzero */
    double top[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < nqkv; i++)
        top[(i % (3 * D)) / D] = fmax(top[(i % (3 * D)) / D], fabs(dqkv[1][i]));
    for (size_t i = 0; i < nb; i++)
        top[3] = fmax(top[3], fabs(dbias[1][i]));
    for (int u = 0; u < 4; u++)
        ck_assert_msg(top[u] > 1e-3, "window %d x %d: gradient part %d is all zero", Mh, Mw, u);

    for (int r = 0; r < 2; r++) {
        free(out[r]), free(lse[r]), free(probs[r]), free(dqkv[r]), free(dbias[r]);
    }
    free(qkv), free(dout), free(bias), free(qkv2), free(dout2), free(moved);
}

START_TEST(in_place_windows_match_gathered_ones)
{
    ck_assert_int_eq(vit_set_threads(_i ? 2 : 1), VIT_OK);
    for (int kept = 0; kept < 2; kept++) {
        compare_routes(7, 7, 32, kept); /* Swin's window and head: GEMMs */
        compare_routes(4, 4, 16, kept); /* 16 tokens: the direct pair kernels */
        compare_routes(8, 7, 32, kept); /* 64x56 photos' window: GEMMs */
        compare_routes(4, 2, 16, kept); /* 8 tokens: the direct pair kernels */
    }
}
END_TEST

/* The tape's op writes a fresh gradient of qkv whole instead of clearing it
 * and adding (src/tape/tape_ops_window.c): through a tape, qkv made by an
 * op (so that its gradient is the tape's, not cleared), the leaf's
 * gradient must equal the kernel's backward added to zeros, bit for bit,
 * on both routes (side by side: gathered; stacked: in place) and with a
 * shift, the weights kept or remade. */
static void tape_case(int Mh, int Mw, int gh, int gw, int shift_h, int shift_w, int kept)
{
    const int B = 2, H = 2, d = Mh * Mw > 32 ? 32 : 16, D = H * d, N = gh * gw;
    const size_t nqkv = (size_t)B * N * 3 * D, nout = (size_t)B * N * D;
    float *qkv = fill(nqkv, 0.37), *dout = fill(nout, 0.91), *zero = fill(nqkv, 0);
    float *leaf_grad = fill(nqkv, 0), *ref = fill(nqkv, 0), *out = fill(nout, 0);
    memset(zero, 0, nqkv * sizeof *zero);
    memset(leaf_grad, 0, nqkv * sizeof *leaf_grad);
    memset(ref, 0, nqkv * sizeof *ref);
    vit_window_attn w;
    memset(&w, 0, sizeof w);
    w.batch = B, w.heads = H, w.window_h = Mh, w.window_w = Mw, w.d_k = w.d_v = d;
    w.grid_h = gh, w.grid_w = gw;
    w.shift_h = shift_h, w.shift_w = shift_w, w.ld_q = w.ld_k = w.ld_v = 3 * D;
    float *lse = fill((size_t)B * H * N, 0), *probs = fill((size_t)B * H * N * Mh * Mw, 0);
    w.probs = kept ? probs : NULL; /* as the op keeps them */
    ck_assert_int_eq(vit_window_attn_forward(&w, out, kept ? NULL : lse, qkv, qkv + D,
                                             qkv + 2 * D), VIT_OK);
    ck_assert_int_eq(vit_window_attn_backward(&w, ref, ref + D, ref + 2 * D, NULL, dout, lse, qkv,
                                              qkv + D, qkv + 2 * D), VIT_OK);

    vit_tape *t = vit_tape_new();
    ck_assert_ptr_nonnull(t);
    int shape[3] = {B, N, 3 * D};
    vit_tensor *x = vit_tape_leaf(t, qkv, leaf_grad, 3, shape);
    vit_tensor *z = vit_tape_leaf(t, zero, NULL, 3, shape);
    vit_window_opts o = {.heads = H, .grid_h = gh, .grid_w = gw, .window_h = Mh, .window_w = Mw,
                         .shift_h = shift_h, .shift_w = shift_w,
                         .keep_weights = kept};
    vit_tensor *y = vit_op_window_attn(t, vit_op_add(t, x, z), NULL, &o);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(vit_tape_backward_from(t, y, dout), VIT_OK);
    ck_assert_msg(!memcmp(leaf_grad, ref, nqkv * sizeof *ref),
                  "window %d x %d, grid %d x %d, shifts %d, %d, weights %s: the tape's dqkv "
                  "differs", Mh, Mw, gh, gw, shift_h, shift_w, kept ? "kept" : "remade");
    vit_tape_free(t);
    free(qkv), free(dout), free(zero), free(leaf_grad), free(ref), free(out), free(lse), free(probs);
}

START_TEST(tape_writes_fresh_gradients_whole)
{
    ck_assert_int_eq(vit_set_threads(_i ? 2 : 1), VIT_OK);
    for (int kept = 0; kept < 2; kept++)
        for (int c = 0; c < 4; c++) { /* 4 x 4, 7 x 7, 8 x 7, 4 x 2 */
            const int Mh = (int[]){4, 7, 8, 4}[c], Mw = (int[]){4, 7, 7, 2}[c];
            tape_case(Mh, Mw, Mh, 2 * Mw, 0, 0, kept);     /* gathered */
            tape_case(Mh, Mw, 2 * Mh, Mw, 0, 0, kept);     /* in place */
            tape_case(Mh, Mw, 2 * Mh, 2 * Mw, Mh / 2, Mw / 2, kept); /* shifted */
            tape_case(Mh, Mw, Mh, 2 * Mw, 0, Mw / 2, kept); /* shifted columns only */
            tape_case(Mh, Mw, 2 * Mh, Mw, Mh / 2, 0, kept); /* rows only: not in place */
        }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("window");
    TCase *tc = tcase_create("routes");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, in_place_windows_match_gathered_ones, 0, 2);
    tcase_add_loop_test(tc, tape_writes_fresh_gradients_whole, 0, 2);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

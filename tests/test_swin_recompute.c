/*
 * tests/test_swin_recompute.c - the Swin's two settings of the recipe's
 * recompute (vit_model_set_recompute) in the training precision.  With 1
 * its blocks remake two things in the backward: the layer norms' outputs
 * (vit_tape_ln_linear, from x: the same kernel on the same rows, bit for
 * bit) and the window attention's weights (from the rows' log-sum-exps, as
 * exp(s - lse), where the forward's are exp(s - max) / sum: equal up to
 * rounding); with 0 (the default) it keeps both.  So the loss must be the
 * same bit for bit and the gradients the same up to that rounding: within
 * GRAD_TOL of each tensor's largest gradient (measured: about 1e-6), on one
 * slice and on two.  The float64 gradient check of both settings is in
 * test_swin.c.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vit/core.h"
#include "vit/model.h"
#include "vit/rng.h"

enum { B = 4, HW = 16 };

/* The weights' two roundings (a few float32 ulps each) carried through
 * the backward: far below what a wrong weight, mask or bias would give. */
#define GRAD_TOL 1e-4


static void set(vit_config *c, const char *key, const char *value)
{
    ck_assert_msg(vit_config_set(c, key, value) == VIT_OK, "%s = %s: %s", key, value,
                  vit_last_error());
}

/* 16x16 grey images, patch 2: an 8x8 grid in windows of 4 (every other
 * block shifted by 2), merged to 4x4; widths 16 and 32, two blocks a stage. */
static vit_model *small_swin(void)
{
    vit_config c;
    vit_config_default(&c);
    set(&c, "arch", "swin");
    static const char *const kv[][2] = {
        {"image_height", "16"}, {"image_width", "16"}, {"channels", "1"}, {"classes", "5"},
        {"patch", "2"}, {"window", "4"}, {"embed_dim", "16"}, {"stages", "2"},
        {"depth_1", "2"}, {"depth_2", "2"}, {"heads_1", "2"}, {"heads_2", "4"},
        {"mlp_ratio", "2"}};
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++)
        set(&c, kv[i][0], kv[i][1]);
    vit_model *m = vit_model_new(&c);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    vit_rng rng;
    vit_rng_seed(&rng, 11);
    vit_model_init(m, &rng);
    return m;
}

/* One step's loss and gradients (a fresh copy) with recompute r. */
static vit_real *step(vit_model *m, int r, const vit_real *images, const int *labels,
                      double *loss)
{
    ck_assert_int_eq(vit_model_set_recompute(m, r), VIT_OK);
    ck_assert_int_eq(vit_model_recompute(m), r);
    ck_assert_msg(vit_model_train_grads(m, images, labels, B, (vit_real)0.1, loss, NULL)
                  == VIT_OK, "%s", vit_last_error());
    size_t n = vit_model_param_count(m);
    vit_real *g = malloc(n * sizeof *g);
    ck_assert_ptr_nonnull(g);
    memcpy(g, vit_model_grads(m), n * sizeof *g);
    return g;
}

/* _i + 1 threads: one slice, then two. */
START_TEST(test_swin_recompute_same)
{
    vit_set_threads(_i + 1);
    vit_model *m = small_swin();
    vit_real images[B * HW * HW];
    int labels[B];
    vit_rng rng;
    vit_rng_seed(&rng, 5);
    for (int i = 0; i < B * HW * HW; i++)
        images[i] = (vit_real)vit_rng_uniform(&rng);
    for (int i = 0; i < B; i++)
        labels[i] = (3 * i + 1) % 5;
    double l0, l1;
    vit_real *g0 = step(m, 0, images, labels, &l0);
    vit_real *g1 = step(m, 1, images, labels, &l1);
    size_t n = vit_model_param_count(m), nonzero = 0;
    ck_assert_msg(l0 == l1, "loss %.9g without recompute, %.9g with", l0, l1);
    double worst = 0;
    for (int i = 0; i < vit_model_tensor_count(m); i++) {
        const vit_model_tensor *mt = vit_model_tensor_at(m, i);
        const vit_real *a = g0 + mt->offset, *b = g1 + mt->offset;
        double big = 0, diff = 0;
        for (size_t j = 0; j < mt->size; j++) {
            big = fmax(big, fabs((double)a[j]));
            diff = fmax(diff, fabs((double)a[j] - (double)b[j]));
            nonzero += a[j] != 0;
        }
        ck_assert_msg(diff <= GRAD_TOL * big, "%s: gradients %.3g apart, largest %.3g",
                      mt->name, diff, big);
        if (big > 0)
            worst = fmax(worst, diff / big);
    }
    ck_assert_uint_gt(nonzero, n / 2); /* a real gradient, not zeros on both sides */
    printf("swin recompute 0 vs 1 (%d thread(s)): loss equal, gradients within %.2e of each "
           "tensor's largest\n", _i + 1, worst);
    vit_real *g2 = step(m, 0, images, labels, &l0); /* and back: the default again */
    ck_assert_int_eq(memcmp(g0, g2, n * sizeof *g0), 0);
    free(g0);
    free(g1);
    free(g2);
    vit_model_free(m);
    vit_set_threads(1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("swin_recompute");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_swin_recompute_same, 0, 2);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

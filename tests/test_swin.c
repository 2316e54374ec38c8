/*
 * tests/test_swin.c - the Swin Transformer (src/model_swin.c): every
 * parameter's gradient against central differences in float64, the
 * recipe's choices, bad configs refused, and a model written by
 * torchvision (tools/torch_swin_fixture.py) reproducing its logits.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
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
    const vit_real *drop; /* stochastic depth's scales, [2 blocks, GB] */
} swin_ctx;

static double swin_loss(void *p)
{
    swin_ctx *c = p;
    vit_tape_reset(c->tape);
    vit_tensor *z = vit_swin_forward(c->m, c->tape, c->images, GB, c->drop, GB);
    vit_tensor *loss = vit_op_cross_entropy(c->tape, z, c->labels, (vit_real)0.1, NULL);
    ck_assert_msg(loss != NULL, "forward failed: %s", vit_last_error());
    return (double)loss->data[0];
}

/* Every parameter random and of order one (gains, biases and the bias
 * tables too), so no gradient is trivially zero; the whole network's
 * gradient against central differences, tensor by tensor.  _i = 1: with
 * stochastic depth's scales, every branch of image 0 kept (x 1.25), of
 * image 1 alternately dropped and kept. */
START_TEST(test_swin_gradient)
{
    vit_swin_config cfg = tiny();
    vit_real drop[2 * 4 * GB];
    for (int l = 0; l < 2 * 4; l++)
        drop[l * GB] = (vit_real)1.25, drop[l * GB + 1] = (vit_real)(l % 2 ? 1.25 : 0);
    swin_ctx c = {.m = vit_swin_new(&cfg), .tape = vit_tape_new(), .drop = _i ? drop : NULL};
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
    vit_tensor *z = vit_swin_forward(c.m, t, c.images, GB, c.drop, GB);
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
    printf("swin gradient%s: %d tensors, %zu parameters, max_rel %.2e\n", _i ? " (drop path)" : "", nt,
           n, worst);
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

/* The tensor `name` of a safetensors file (buf[size]) as F32 values of the
 * given shape: a pointer into buf, or a test failure naming the problem. */
static const unsigned char *st_tensor(const unsigned char *buf, size_t size, const char *name,
                                      const int *shape, int ndim)
{
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | buf[i];
    ck_assert_uint_le(8 + n, size);
    char *head = strndup((const char *)buf + 8, n), key[96];
    snprintf(key, sizeof key, "\"%s\":", name);
    const char *at = strstr(head, key);
    ck_assert_msg(at != NULL, "%s: not in the fixture", name);
    const char *sh = strstr(at, "\"shape\":["), *off = strstr(at, "\"data_offsets\":[");
    ck_assert_msg(sh && off && strstr(at, "\"F32\""), "%s: no shape, offsets or F32", name);
    sh += strlen("\"shape\":[");
    for (int d = 0; d < ndim; d++) {
        char *end;
        ck_assert_int_eq(strtol(sh, &end, 10), shape[d]);
        sh = end + 1;
    }
    ck_assert_int_eq(sh[-1], ']');
    unsigned long long a, b;
    ck_assert_int_eq(sscanf(off + strlen("\"data_offsets\":["), "%llu,%llu", &a, &b), 2);
    free(head);
    ck_assert_uint_le(8 + n + b, size);
    ck_assert_uint_eq(b - a, 4 * (uint64_t)shape[0] * (ndim > 1 ? shape[1] : 1) *
                                 (ndim > 2 ? shape[2] * shape[3] : 1));
    return buf + 8 + n + a;
}

/* A Swin written by torchvision (tools/torch_swin_fixture.py: every
 * parameter random, torchvision's names and layouts) loads tensor by
 * tensor through our torchvision mapping and gives torchvision's float64
 * logits on its 4 images, to rounding. */
START_TEST(test_swin_torchvision_fixture)
{
    vit_swin_config cfg = tiny();
    vit_swin *m = vit_swin_new(&cfg);
    ck_assert_ptr_nonnull(m);
    size_t size;
    unsigned char *buf = fu_read("data/swin_torch.safetensors", &size);
    int n = vit_swin_torch_tensors(m, NULL);
    vit_swin_torch_tensor *tt = calloc((size_t)n, sizeof *tt);
    ck_assert_int_eq(vit_swin_torch_tensors(m, tt), n);
    ck_assert_int_eq(n, 63);
    for (int i = 0; i < n; i++) {
        const unsigned char *src = st_tensor(buf, size, tt[i].name, tt[i].shape, tt[i].ndim);
        float *v = malloc(tt[i].size * sizeof *v);
        memcpy(v, src, tt[i].size * sizeof *v); /* little-endian F32, like this machine */
        vit_swin_torch_copy(m, &tt[i], v, 1);
        /* and back: the mapping is a permutation */
        float *w = calloc(tt[i].size, sizeof *w);
        vit_swin_torch_copy(m, &tt[i], w, 0);
        ck_assert_msg(memcmp(v, w, tt[i].size * sizeof *v) == 0, "%s: round trip", tt[i].name);
        free(v);
        free(w);
    }
    FILE *f = fopen("data/swin_torch_logits.txt", "r");
    ck_assert_ptr_nonnull(f);
    int B, H, W, C, K;
    ck_assert_int_eq(fscanf(f, "%d %d %d %d %d", &B, &H, &W, &C, &K), 5);
    ck_assert(B == 4 && H == 8 && W == 8 && C == 2 && K == 3);
    vit_real *images = gc_zeros((size_t)B * H * W * C), *want = gc_zeros((size_t)B * K);
    for (int i = 0; i < B * H * W * C; i++) {
        double v;
        ck_assert_int_eq(fscanf(f, "%lf", &v), 1);
        images[i] = (vit_real)(float)v; /* the float32 pixel the 9 digits name */
    }
    for (int i = 0; i < B * K; i++) {
        double v;
        ck_assert_int_eq(fscanf(f, "%lf", &v), 1);
        want[i] = (vit_real)v;
    }
    fclose(f);
    vit_tape *t = vit_tape_new();
    vit_tape_set_grad(t, 0);
    vit_tensor *z = vit_swin_forward(m, t, images, B, NULL, 0);
    ck_assert_msg(z != NULL, "%s", vit_last_error());
    double diff = gc_max_abs_diff(z->data, want, (size_t)B * K), big = 0;
    for (int i = 0; i < B * K; i++)
        big = fmax(big, fabs((double)want[i]));
    printf("swin vs torchvision: max |logit difference| %.3g (largest |logit| %.3g)\n", diff, big);
    ck_assert_msg(big > 0.1, "the fixture's logits are too small to tell anything");
    ck_assert_msg(diff < 1e-12, "logits differ from torchvision's by %g", diff);
    vit_tape_free(t);
    free(images);
    free(want);
    free(tt);
    free(buf);
    vit_swin_free(m);
}
END_TEST

static Suite *swin_suite(void)
{
    Suite *s = suite_create("swin");
    TCase *tg = tcase_create("gradient");
    tcase_set_timeout(tg, 120);
    tcase_add_loop_test(tg, test_swin_gradient, 0, 2);
    suite_add_tcase(s, tg);
    TCase *tc = tcase_create("config");
    tcase_add_test(tc, test_swin_rejects_bad_configs);
    tcase_add_test(tc, test_swin_recipe);
    tcase_add_test(tc, test_swin_torchvision_fixture);
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

/*
 * tests/test_model.c - the Vision Transformer model, its config and its
 * run checkpoints (float64 build).
 *
 *  - the gradient of the whole model (every parameter, cross-entropy with
 *    label smoothing) against central differences, per named tensor, for
 *    both pooling modes;
 *  - vit_model_train_grads (the batch in slices across threads) against
 *    one tape over the whole batch;
 *  - parameter counting and layout: three independent counts agree, the
 *    tensors tile the flat buffer, the optimizer groups cover it and decay
 *    exactly the weight matrices;
 *  - config text: the shipped models/digits-tiny.cfg equals the defaults,
 *    format/parse round-trips, doubles are written in the fewest digits
 *    that read back bitwise, bad text is rejected naming line and key, a
 *    key given twice (in a file or a checkpoint's stored config) naming
 *    both lines;
 *  - checkpoints: save/load restores parameters, logits, AdamW moments and
 *    progress; resuming with a different model shape fails naming it.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file_util.h"
#include "gradcheck.h"
#include "vit/checkpoint.h"
#include "vit/gemm.h"
#include "vit/model.h"
#include "vit/train.h"

#define DIGITS_CFG "../models/digits-tiny.cfg"

/* The tiny model of the gradient checks: 4x4x1 images, 2x2 patches (4
 * patches + the class token, T = 5), width 8, 2 blocks of 2 heads, MLP 12,
 * 3 classes.  Parameters by hand:
 *   patch.w 4*8 + patch.b 8 + cls 8 + pos 5*8                       =   88
 *   per block: 2 norms 2*2*8 + attention 4*(8*8 + 8)
 *              + mlp 8*12 + 12 + 12*8 + 8    = 32 + 288 + 212        =  532
 *   final norm 2*8 + head 8*3 + 3                                   =   43
 *   total 88 + 2*532 + 43                                           = 1195 */
static void tiny_config(vit_config *c, int pool)
{
    vit_config_default(c);
    c->image_height = 4;
    c->image_width = 4;
    c->channels = 1;
    c->classes = 3;
    c->patch = 2; /* non-overlapping, whatever the default recipe overlaps */
    c->patch_stride = 0;
    c->patch_pad = 0;
    c->dim = 8;
    c->depth = 2;
    c->heads = 2;
    c->mlp = 12;
    c->pool = pool;
}

/* The recipe tiny_config's runs train with: one epoch of batch 4, scored
 * one pass per image. */
static void tiny_train(vit_train_config *tc)
{
    vit_train_config_default(tc);
    tc->epochs = 1;
    tc->batch = 4;
    tc->tta = VIT_TTA_NONE;
}

/* Field-by-field equality (the struct has padding, so no memcmp); names
 * the first field that differs in *which. */
static int config_equal(const vit_config *a, const vit_config *b, const char **which)
{
#define EQ(f) if (a->f != b->f) { *which = #f; return 0; }
    EQ(image_height) EQ(image_width) EQ(channels) EQ(classes) EQ(patch) EQ(dim) EQ(depth)
    EQ(heads) EQ(mlp) EQ(pool) EQ(init_std)
    EQ(patch_stride) EQ(patch_pad) EQ(lsa) EQ(stem) EQ(stem2) EQ(local_conv) EQ(image_norm)
    EQ(arch) EQ(ln_eps) EQ(data_norm) EQ(data_mean.n) EQ(data_std.n)
#undef EQ
    if (memcmp(a->data_mean.v, b->data_mean.v, (size_t)a->data_mean.n * sizeof(double))) {
        *which = "data_mean";
        return 0;
    }
    if (memcmp(a->data_std.v, b->data_std.v, (size_t)a->data_std.n * sizeof(double))) {
        *which = "data_std";
        return 0;
    }
    *which = "";
    return 1;
}

/* The same for the training recipe. */
static int train_equal(const vit_train_config *a, const vit_train_config *b, const char **which)
{
#define EQ(f) if (a->f != b->f) { *which = #f; return 0; }
    EQ(epochs) EQ(batch) EQ(lr) EQ(min_lr) EQ(warmup)
    EQ(weight_decay) EQ(beta1) EQ(beta2) EQ(eps) EQ(smoothing) EQ(shift) EQ(rotate) EQ(scale)
    EQ(seed) EQ(recompute) EQ(ckpt_minutes) EQ(ema) EQ(tta)
    EQ(crop_pad) EQ(flip) EQ(erase) EQ(mixup) EQ(cutmix) EQ(mix_prob) EQ(drop_path)
    EQ(brightness) EQ(contrast) EQ(saturation) EQ(hue) EQ(grayscale) EQ(channel_perm) EQ(invert)
    EQ(precision)
#undef EQ
    *which = "";
    return 1;
}

#define ASSERT_TRAIN_EQ(a, b)                                                    \
    do {                                                                         \
        const char *w_;                                                          \
        ck_assert_msg(train_equal(a, b, &w_), "recipes differ in '%s'", w_);     \
    } while (0)

#define ASSERT_CONFIG_EQ(a, b)                                                   \
    do {                                                                         \
        const char *w_;                                                          \
        ck_assert_msg(config_equal(a, b, &w_), "configs differ in '%s'", w_);    \
    } while (0)

/* ---- whole-model gradient -------------------------------------------- */

#define GB 3 /* batch of the gradient check */

typedef struct model_ctx {
    vit_model *m;
    vit_tape *tape;
    vit_real *images;
    int labels[GB];
} model_ctx;

static double model_loss(void *p)
{
    model_ctx *c = p;
    vit_tape_reset(c->tape);
    vit_tensor *z = vit_model_forward(c->m, c->tape, c->images, GB, 0);
    vit_tensor *loss = vit_op_cross_entropy(c->tape, z, c->labels, (vit_real)0.1, NULL);
    ck_assert_msg(loss != NULL, "forward failed: %s", vit_last_error());
    return (double)loss->data[0];
}

/* _i: 0 cls pool, 1 mean pool, 2 locality self-attention, 3 LSA with
 * overlapping, padded 3x3 patches at stride 1 (a 4x4 grid, T = 17), 4 a
 * convolutional stem of 3 channels (its 3x3 convolution and GELU, then 2x2
 * patches of the 4x4x3 feature map), 5 the same stem and stem2 of 5
 * channels (a 4x4 convolution at stride 2 and GELU), then 1x1 patches of
 * its 2x2x5 map, 6 local_conv on the 4x4 grid of case 3's patches (every
 * tap of the 3x3 window inside it for the four middle tokens, some outside
 * for the rest). */
START_TEST(test_model_gradient)
{
    static const char *const names[7] = {"cls", "mean", "lsa", "lsa+overlap", "stem", "stem2",
                                         "local_conv"};
    int pool = _i == 1 ? VIT_POOL_MEAN : VIT_POOL_CLS;
    const char *pname = names[_i];
    vit_config cfg;
    tiny_config(&cfg, pool);
    cfg.lsa = _i == 2 || _i == 3;
    cfg.stem = _i == 4 || _i == 5 ? 3 : 0;
    if (_i == 5) {
        cfg.stem2 = 5;
        cfg.patch = 1;
    }
    cfg.local_conv = _i == 6;
    if (_i == 3 || _i == 6) {
        cfg.patch = 3;
        cfg.patch_stride = 1;
        cfg.patch_pad = 1;
    }
    model_ctx c = {.m = vit_model_new(&cfg), .tape = vit_tape_new()};
    ck_assert_msg(c.m != NULL, "%s", vit_last_error());
    size_t n = vit_model_param_count(c.m);
    vit_real *params = vit_model_params(c.m);
    /* Every parameter random and of order one, including layer-norm gains,
     * biases and the class token, so that no gradient is trivially zero
     * or hidden below the floor by a tiny initialisation. */
    uint64_t seed = 100 + (uint64_t)_i;
    gc_fill(params, n, &seed, 0.6);
    if (_i == 3)
        ck_assert_uint_eq(n, 1195 - 5 * 8 + 17 * 8 + (9 - 4) * 8 + 2 * 2);
    else if (_i == 6) /* case 3 without tau, with local.w [9, 8] and local.b [8] per block */
        ck_assert_uint_eq(n, 1195 - 5 * 8 + 17 * 8 + (9 - 4) * 8 + 2 * (9 * 8 + 8));
    else if (_i == 2)
        ck_assert_uint_eq(n, 1195 + 2 * 2); /* a tau [heads] per block */
    else if (_i == 4) /* stem.w [9, 3], stem.b [3]; patch.w [2*2*3, 8] instead of [4, 8] */
        ck_assert_uint_eq(n, 1195 + 9 * 3 + 3 + (12 - 4) * 8);
    else if (_i == 5) /* and stem2.w [16*3, 5], stem2.b [5]; patch.w [1*1*5, 8]; still 4
                         patches */
        ck_assert_uint_eq(n, 1195 + 9 * 3 + 3 + 16 * 3 * 5 + 5 + (5 - 4) * 8);
    else
        ck_assert_uint_eq(n, 1195);
    c.images = gc_zeros((size_t)GB * 16);
    for (int i = 0; i < GB * 16; i++)
        c.images[i] = (vit_real)gc_uniform(&seed);
    for (int i = 0; i < GB; i++)
        c.labels[i] = (i + 1) % 3;

    vit_tape *t = vit_tape_new();
    vit_model_zero_grads(c.m);
    vit_tensor *z = vit_model_forward(c.m, t, c.images, GB, 1);
    ck_assert_msg(z != NULL, "%s", vit_last_error());
    ck_assert_int_eq(z->ndim, 2);
    ck_assert_int_eq(z->shape[0], GB);
    ck_assert_int_eq(z->shape[1], 3);
    vit_tensor *loss = vit_op_cross_entropy(t, z, c.labels, (vit_real)0.1, NULL);
    ck_assert_ptr_nonnull(loss);
    ck_assert_int_eq(vit_tape_backward(t, loss), VIT_OK);
    vit_real *grads = gc_zeros(n);
    memcpy(grads, vit_model_grads(c.m), n * sizeof *grads);

    double worst = 0;
    int nt = vit_model_tensor_count(c.m);
    for (int i = 0; i < nt; i++) {
        const vit_model_tensor *mt = vit_model_tensor_at(c.m, i);
        char name[96];
        snprintf(name, sizeof name, "%s:%s", pname, mt->name);
        double e = gc_check(name, params + mt->offset, grads + mt->offset, mt->size, model_loss, &c);
        ck_assert_msg(e <= GC_TOL, "%s: max_rel %.3e > %.0e", name, e, GC_TOL);
        /* Every tensor must actually receive a gradient - except the key
         * bias: it adds q.b_k to every score of a query row, which the
         * softmax ignores, so its gradient is exactly zero. */
        double norm = 0;
        for (size_t j = 0; j < mt->size; j++)
            norm += fabs((double)grads[mt->offset + j]);
        const char *sfx = mt->name + strlen(mt->name) - 3;
        if (strcmp(sfx, "b_k") == 0)
            ck_assert_msg(norm < 1e-12, "%s: gradient %g should vanish", name, norm);
        else
            ck_assert_msg(norm > 1e-6, "%s: gradient is zero", name);
        worst = fmax(worst, e);
    }
    printf("model gradient (pool=%s): %d tensors, %zu parameters, max_rel %.2e\n", pname, nt, n, worst);
    vit_model_free(c.m);
    vit_tape_free(c.tape);
    vit_tape_free(t);
    free(c.images);
    free(grads);
}
END_TEST

/* Locality self-attention in the model: its tau tensors sit right after
 * each block's b_o, start at 1/sqrt(d_k) and are not decayed; every
 * token's weight on itself is exactly 0 in every layer's maps, every row
 * still sums to 1; with lsa = 0 the layout has no tau.  Overlapping patches
 * change the token count as the geometry says, and impossible geometry is
 * refused naming the keys. */
START_TEST(test_lsa_and_overlap_model)
{
    vit_config cfg;
    tiny_config(&cfg, VIT_POOL_CLS);
    cfg.lsa = 1;
    cfg.init_std = 0.5;
    vit_model *m = vit_model_new(&cfg);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    vit_rng rng;
    vit_rng_seed(&rng, 5);
    vit_model_init(m, &rng);
    int ntau = 0;
    for (int i = 0; i < vit_model_tensor_count(m); i++) {
        const vit_model_tensor *t = vit_model_tensor_at(m, i);
        if (!strstr(t->name, ".attn.tau")) continue;
        ntau++;
        const vit_model_tensor *prev = vit_model_tensor_at(m, i - 1);
        ck_assert_ptr_nonnull(strstr(prev->name, ".attn.b_o"));
        ck_assert_int_eq(t->ndim, 1);
        ck_assert_int_eq(t->shape[0], 2);
        ck_assert_int_eq(t->decay, 0);
        for (int h = 0; h < 2; h++)
            ck_assert(vit_model_params(m)[t->offset + h] == (vit_real)(1.0 / sqrt(4.0)));
    }
    ck_assert_int_eq(ntau, 2);
    vit_tape *t = vit_tape_new();
    vit_real img[3 * 16];
    uint64_t seed = 9;
    for (int i = 0; i < 3 * 16; i++)
        img[i] = (vit_real)gc_uniform(&seed);
    ck_assert_ptr_nonnull(vit_model_forward(m, t, img, 3, 0));
    for (int l = 0; l < 2; l++) {
        const vit_real *maps = vit_model_attention_maps(m, l);
        ck_assert_ptr_nonnull(maps);
        for (int r = 0; r < 3 * 2 * 5; r++) { /* [B=3, H=2, T=5] rows of T=5 */
            double sum = 0;
            for (int k = 0; k < 5; k++) {
                if (k == r % 5) ck_assert(maps[r * 5 + k] == 0);
                else ck_assert(maps[r * 5 + k] > 0);
                sum += maps[r * 5 + k];
            }
            ck_assert_double_eq_tol(sum, 1.0, 1e-12);
        }
    }
    vit_model_free(m);

    /* lsa = 0: no tau anywhere. */
    tiny_config(&cfg, VIT_POOL_CLS);
    m = vit_model_new(&cfg);
    for (int i = 0; i < vit_model_tensor_count(m); i++)
        ck_assert_ptr_null(strstr(vit_model_tensor_at(m, i)->name, "tau"));
    vit_model_free(m);

    /* 8x8 with patch 4, stride 2, padding 1: the 4x4 grid of patch 2. */
    vit_config_default(&cfg);
    cfg.patch = 4;
    cfg.patch_stride = 2;
    cfg.patch_pad = 1;
    vit_patch_shape ps = vit_config_patch_shape(&cfg);
    int gh = 0, gw = 0;
    ck_assert_int_eq(vit_patch_grid(&ps, &gh, &gw), VIT_OK);
    ck_assert_int_eq(gh, 4);
    ck_assert_int_eq(gw, 4);
    m = vit_model_new(&cfg);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    const vit_model_tensor *pw = vit_model_tensor_at(m, 0), *pos = vit_model_tensor_at(m, 3);
    ck_assert_int_eq(pw->shape[0], 16);
    ck_assert_int_eq(pos->shape[0], 17);
    vit_model_free(m);
    vit_tape_free(t);

    cfg.patch_pad = 0; /* (8 - 4) / 2: fine without padding too (3x3) */
    ck_assert_int_eq(vit_config_check(&cfg), VIT_OK);
    cfg.patch_stride = 3; /* 8 + 2 - 4 = 6 = 2 strides of 3, but 8 - 4 = 4 is not */
    ck_assert_int_eq(vit_config_check(&cfg), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "patch_stride"));
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "tile"));
    cfg.patch_stride = 5;
    ck_assert_int_eq(vit_config_check(&cfg), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "skip pixels"));
    cfg.patch_stride = 2;
    cfg.patch_pad = 4;
    ck_assert_int_eq(vit_config_check(&cfg), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "padding 4"));
    ck_assert_ptr_null(vit_model_new(&cfg));
}
END_TEST

START_TEST(test_forward_shapes_and_maps)
{
    /* Attention maps are probability rows; evaluation mode makes no grads;
     * batch 1 and batch 5 give the same logits for the same image. */
    vit_config cfg;
    tiny_config(&cfg, VIT_POOL_CLS);
    cfg.init_std = 0.5; /* attention maps far from uniform */
    vit_model *m = vit_model_new(&cfg);
    vit_rng rng;
    vit_rng_seed(&rng, 3);
    vit_model_init(m, &rng);
    vit_tape *t = vit_tape_new();
    vit_real img[5 * 16];
    uint64_t seed = 7;
    for (int i = 0; i < 5 * 16; i++)
        img[i] = (vit_real)gc_uniform(&seed);
    vit_tensor *z = vit_model_forward(m, t, img, 5, 0);
    ck_assert_ptr_nonnull(z);
    ck_assert_ptr_null(z->grad);
    vit_real z5[15];
    memcpy(z5, z->data, sizeof z5);
    for (int l = 0; l < 2; l++) {
        const vit_real *maps = vit_model_attention_maps(m, l);
        ck_assert_ptr_nonnull(maps);
        for (int r = 0; r < 5 * 2 * 5; r++) { /* [B=5, H=2, T=5] rows of T=5 */
            double s = 0;
            for (int k = 0; k < 5; k++) {
                ck_assert(maps[r * 5 + k] >= 0);
                s += maps[r * 5 + k];
            }
            ck_assert_double_eq_tol(s, 1.0, 1e-12);
        }
    }
    ck_assert_ptr_null(vit_model_attention_maps(m, 2));
    ck_assert_ptr_null(vit_model_attention_maps(m, -1));
    for (int b = 0; b < 5; b++) {
        vit_tape_reset(t);
        z = vit_model_forward(m, t, img + b * 16, 1, 0);
        ck_assert_ptr_nonnull(z);
        for (int k = 0; k < 3; k++)
            ck_assert_double_eq_tol(z->data[k], z5[b * 3 + k], 1e-12);
    }
    /* Bad arguments. */
    vit_tape_reset(t);
    ck_assert_ptr_null(vit_model_forward(m, t, img, 0, 0));
    ck_assert_ptr_null(vit_model_forward(m, t, NULL, 1, 0));
    ck_assert_ptr_null(vit_model_forward(NULL, t, img, 1, 0));
    ck_assert_ptr_null(vit_model_forward(m, NULL, img, 1, 0));
    vit_model_free(m);
    vit_tape_free(t);
}
END_TEST

START_TEST(test_forward_eval_threads)
{
    /* A no-grad batch of 150 images runs in three 64-image pieces (the last
     * of 22); on three threads each piece has its own thread and tape.
     * The logits and every attention map are the same bits as on one
     * thread, and in the same places; a training step afterwards still
     * runs on the tapes the workers borrowed. */
    enum { B = 150, PIX = 16, MAP = B * 2 * 5 * 5 };
    vit_config cfg;
    tiny_config(&cfg, VIT_POOL_CLS);
    cfg.init_std = 0.5;
    vit_model *m = vit_model_new(&cfg);
    vit_rng rng;
    vit_rng_seed(&rng, 5);
    vit_model_init(m, &rng);
    vit_tape *t = vit_tape_new();
    vit_real *img = malloc(sizeof *img * B * PIX), *maps1 = malloc(sizeof *maps1 * 2 * MAP);
    vit_real z1[B * 3];
    int labels[B];
    uint64_t seed = 11;
    for (int i = 0; i < B * PIX; i++)
        img[i] = (vit_real)gc_uniform(&seed);
    for (int i = 0; i < B; i++)
        labels[i] = i % 3;
    for (int threads = 1; threads <= 3; threads += 2) {
        ck_assert_int_eq(vit_set_threads(threads), VIT_OK);
        vit_tape_reset(t);
        vit_tensor *z = vit_model_forward(m, t, img, B, 0);
        ck_assert_ptr_nonnull(z);
        ck_assert_int_eq(vit_tape_grad_enabled(t), 1);
        for (int l = 0; l < 2; l++) {
            const vit_real *maps = vit_model_attention_maps(m, l);
            ck_assert_ptr_nonnull(maps);
            if (threads == 1)
                memcpy(maps1 + l * MAP, maps, sizeof *maps * MAP);
            else
                ck_assert(memcmp(maps1 + l * MAP, maps, sizeof *maps * MAP) == 0);
        }
        if (threads == 1)
            memcpy(z1, z->data, sizeof z1);
        else
            ck_assert(memcmp(z1, z->data, sizeof z1) == 0);
    }
    /* Each image alone gives its row (the pieces hold the right items). */
    for (int b = 0; b < B; b += 37) {
        vit_tape_reset(t);
        vit_tensor *z = vit_model_forward(m, t, img + b * PIX, 1, 0);
        ck_assert_ptr_nonnull(z);
        for (int k = 0; k < 3; k++)
            ck_assert_double_eq_tol(z->data[k], z1[b * 3 + k], 1e-12);
    }
    double loss;
    ck_assert_int_eq(vit_model_train_grads(m, img, labels, B, 0, &loss, NULL), VIT_OK);
    ck_assert(isfinite(loss) && loss > 0);
    vit_set_threads(1);
    free(img);
    free(maps1);
    vit_model_free(m);
    vit_tape_free(t);
}
END_TEST

/* ---- parameter count, layout, groups --------------------------------- */

/* Weight matrices by name: the last component is w, w_qkv, w_o,
 * w1 or w2. */
static int is_weight_matrix(const char *name)
{
    const char *dot = strrchr(name, '.');
    const char *last = dot ? dot + 1 : name;
    static const char *w[] = {"w", "w_qkv", "w_o", "w1", "w2"};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        if (strcmp(last, w[i]) == 0)
            return 1;
    return 0;
}

/* The count from the architecture, written out independently. */
static size_t expected_count(const vit_config *c)
{
    size_t D = (size_t)c->dim, M = (size_t)c->mlp, K = (size_t)c->classes;
    /* Patches along a side of the padded image, one every stride pixels
     * (stride 0: the patch side); each patch is patch^2 * channels wide. */
    size_t stride = (size_t)(c->patch_stride ? c->patch_stride : c->patch);
    size_t gh = ((size_t)c->image_height + 2 * (size_t)c->patch_pad - (size_t)c->patch) / stride + 1;
    size_t gw = ((size_t)c->image_width + 2 * (size_t)c->patch_pad - (size_t)c->patch) / stride + 1;
    size_t N = gh * gw;
    size_t patch = (size_t)c->patch * c->patch * c->channels * D + D;
    size_t attn = 4 * (D * D + D);
    size_t mlp = D * M + M + M * D + D;
    size_t norms = 2 * 2 * D;
    return patch + D /* cls */ + (N + 1) * D /* pos */ + (size_t)c->depth * (attn + mlp + norms)
           + 2 * D /* final norm */ + D * K + K;
}

static void check_layout(const vit_config *cfg)
{
    vit_model *m = vit_model_new(cfg);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    size_t n = vit_model_param_count(m);
    ck_assert_uint_eq(n, vit_config_param_count(cfg));
    ck_assert_uint_eq(n, expected_count(cfg));
    int nt = vit_model_tensor_count(m);
    ck_assert_int_eq(nt, 8 + 12 * cfg->depth); /* attn: w_qkv, w_o, b_qkv, b_o */
    size_t sum = 0;
    int weights = 0;
    for (int i = 0; i < nt; i++) {
        const vit_model_tensor *t = vit_model_tensor_at(m, i);
        ck_assert_ptr_nonnull(t);
        ck_assert_uint_eq(t->offset, sum); /* tiles the buffer in order */
        size_t prod = 1;
        for (int d = 0; d < t->ndim; d++)
            prod *= (size_t)t->shape[d];
        ck_assert_uint_eq(prod, t->size);
        sum += t->size;
        weights += is_weight_matrix(t->name);
        for (int j = 0; j < i; j++)
            ck_assert_msg(strcmp(vit_model_tensor_at(m, j)->name, t->name) != 0, "duplicate %s",
                          t->name);
    }
    ck_assert_uint_eq(sum, n);
    ck_assert_int_eq(weights, 2 + 4 * cfg->depth); /* patch.w, head.w, 4 per block */
    ck_assert_ptr_null(vit_model_tensor_at(m, nt));
    ck_assert_ptr_null(vit_model_tensor_at(m, -1));

    /* Groups: every parameter in exactly one, decay exactly on weights. */
    int ng = 0;
    const vit_param_group *g = vit_model_groups(m, &ng);
    ck_assert_int_ge(ng, 1);
    signed char *flag = malloc(n);
    memset(flag, -1, n);
    for (int k = 0; k < ng; k++) {
        ck_assert_uint_le(g[k].offset + g[k].count, n);
        for (size_t j = g[k].offset; j < g[k].offset + g[k].count; j++) {
            ck_assert_msg(flag[j] == -1, "parameter %zu in two groups", j);
            flag[j] = g[k].decay ? 1 : 0;
        }
    }
    for (int i = 0; i < nt; i++) {
        const vit_model_tensor *t = vit_model_tensor_at(m, i);
        int want = is_weight_matrix(t->name);
        for (size_t j = t->offset; j < t->offset + t->size; j++)
            ck_assert_msg(flag[j] == want, "%s: decay %d, expected %d", t->name, flag[j], want);
    }
    free(flag);

    /* Initialisation: gains 1, biases and cls 0, weights and pos random
     * with |w| <= 2 std (truncated). */
    vit_rng rng;
    vit_rng_seed(&rng, 5);
    vit_model_init(m, &rng);
    const vit_real *p = vit_model_params(m);
    for (int i = 0; i < nt; i++) {
        const vit_model_tensor *t = vit_model_tensor_at(m, i);
        const char *last = strrchr(t->name, '.');
        last = last ? last + 1 : t->name;
        int gain = strcmp(last, "g") == 0;
        int random = is_weight_matrix(t->name) || strcmp(t->name, "pos") == 0;
        double maxabs = 0;
        for (size_t j = 0; j < t->size; j++) {
            double v = (double)p[t->offset + j];
            maxabs = fmax(maxabs, fabs(v));
            if (gain)
                ck_assert_msg(v == 1.0, "%s not 1", t->name);
            else if (!random)
                ck_assert_msg(v == 0.0, "%s not 0", t->name);
        }
        if (random)
            ck_assert_msg(maxabs > 0 && maxabs <= 2 * cfg->init_std + 1e-12, "%s: max |w| %g",
                          t->name, maxabs);
    }
    vit_model_free(m);
}

START_TEST(test_param_count_and_groups)
{
    vit_config c;
    tiny_config(&c, VIT_POOL_CLS);
    ck_assert_uint_eq(vit_config_param_count(&c), 1195); /* by hand, above tiny_config */
    check_layout(&c);
    vit_config_default(&c);
    /* The default model by hand: 4x4 patches of 1 channel at stride 2 over
     * the 8x8 image padded by 1, a (8 + 2 - 4) / 2 + 1 = 4x4 grid:
     *   patch.w 16*64 + patch.b 64 + cls 64 + pos 17*64          =   2240
     *   per block: norms 4*64 + attention 4*(64*64 + 64)
     *              + mlp 64*128 + 128 + 128*64 + 64 = 256 + 16640 + 16576
     *                                                            =  33472
     *   final norm 2*64 + head 64*10 + 10                        =    778
     *   total 2240 + 4*33472 + 778                               = 136906 */
    ck_assert_uint_eq(vit_config_param_count(&c), 136906);
    check_layout(&c);
    /* A non-square colour image with another patch size. */
    tiny_config(&c, VIT_POOL_MEAN);
    c.image_height = 12;
    c.image_width = 6;
    c.channels = 3;
    c.patch = 3;
    c.depth = 3;
    c.classes = 5;
    check_layout(&c);
    /* An invalid config counts 0 and makes no model. */
    c.heads = 5;
    ck_assert_uint_eq(vit_config_param_count(&c), 0);
    ck_assert_ptr_null(vit_model_new(&c));
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "heads"));
}
END_TEST

START_TEST(test_macs_by_hand)
{
    vit_config c;
    vit_config_default(&c);
    /* The default model: N = 16 patches (the 4x4 grid above), T = 17,
     * D = 64, mlp 128, 1 channel of 4x4 patches, 10 classes:
     *   patch embedding 16 * 16 * 64                                =    16384
     *   per block 17 * (64*192 + 64*64 + 2*64*128) = 17 * 32768     =   557056
     *             + 2 * 17*17 * 64                                   =    36992
     *   4 blocks 4 * 594048                                          =  2376192
     *   head 64 * 10                                                 =      640
     *   total                                                        =  2393216 */
    ck_assert_uint_eq(vit_config_macs(&c), 2393216);
    /* Overlapping patches: 3x3 patches of a 6x10 image of 2 channels at
     * stride 1, padded by 1, a (6 + 2 - 3) + 1 = 6 by (10 + 2 - 3) + 1 = 10
     * grid, N = 60, T = 61; D = 8, mlp 12, 3 classes; lsa's tau adds no
     * multiply-adds:
     *   patch embedding 60 * 18 * 8                                 =     8640
     *   per block 61 * (8*24 + 8*8 + 2*8*12) = 61 * 448              =    27328
     *             + 2 * 61*61 * 8                                    =    59536
     *   2 blocks 2 * 86864                                           =   173728
     *   head 8 * 3                                                   =       24
     *   total                                                        =   182392 */
    tiny_config(&c, VIT_POOL_MEAN);
    c.image_height = 6;
    c.image_width = 10;
    c.channels = 2;
    c.patch = 3;
    c.patch_stride = 1;
    c.patch_pad = 1;
    c.lsa = 1;
    ck_assert_uint_eq(vit_config_macs(&c), 182392);
    c.lsa = 0;
    ck_assert_uint_eq(vit_config_macs(&c), 182392);
    /* A stem of 5 channels: its 3x3 convolution at each of the 6 * 10
     * pixels, and patches of 5 channels instead of 2:
     *   stem 60 * 18 * 5                                            =     5400
     *   patch embedding 60 * 45 * 8 (was 60 * 18 * 8 = 8640)        =    21600
     *   total 182392 + 5400 + 21600 - 8640                          =   200752 */
    c.stem = 5;
    ck_assert_uint_eq(vit_config_macs(&c), 200752);
    /* stem2 of 4 channels after it: its 4x4 convolution at stride 2 at each
     * of the 3 * 5 pixels of the half-size map, whose 15 patches (3x3 at
     * stride 1, padded) of 4 channels make 16 tokens:
     *   stem 60 * 18 * 5                                            =     5400
     *   stem2 15 * (16 * 5) * 4                                     =     4800
     *   patch embedding 15 * 36 * 8                                 =     4320
     *   per block 16 * 448 + 2 * 16*16 * 8 = 7168 + 4096            =    11264
     *   2 blocks                                                    =    22528
     *   head 8 * 3                                                  =       24
     *   total                                                       =    37072 */
    c.stem2 = 4;
    ck_assert_uint_eq(vit_config_macs(&c), 37072);
    /* Refused, naming the key: stem2 without a stem, an odd side, and
     * patches that do not tile the half-size map. */
    c.stem = 0;
    ck_assert_int_eq(vit_config_check(&c), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "stem2: 4 channels"));
    c.stem = 5;
    c.image_height = 7;
    ck_assert_int_eq(vit_config_check(&c), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "halves the 7x10 feature map"));
    c.image_height = 6;
    c.patch = 2;
    c.patch_stride = 0;
    c.patch_pad = 0;
    ck_assert_int_eq(vit_config_check(&c), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "patch: 2 does not divide the 3x5 feature map"));
    c.image_height = 8;
    ck_assert_int_eq(vit_config_check(&c), VIT_EINVAL); /* 4x5: still not */
    c.image_width = 12;
    ck_assert_int_eq(vit_config_check(&c), VIT_OK); /* 4x6 in 2x2 patches */
    c.image_height = 6;
    c.image_width = 10;
    c.patch = 3;
    c.patch_stride = 1;
    c.patch_pad = 1;
    c.stem2 = 0;
    c.stem = 0;
    /* An invalid config counts 0. */
    c.heads = 3;
    ck_assert_uint_eq(vit_config_macs(&c), 0);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "heads"));
    ck_assert_uint_eq(vit_config_macs(NULL), 0);
}
END_TEST

/* ---- config text ------------------------------------------------------ */

START_TEST(test_config_file_is_default)
{
    vit_config def, c;
    vit_train_config tdef, tc;
    vit_config_default(&def);
    vit_train_config_default(&tdef);
    /* Start from garbage so a key missing from the file shows up. */
    memset(&c, 0x7b, sizeof c);
    memset(&tc, 0x7b, sizeof tc);
    c.arch = NULL; /* a pointer: garbage there is no config at all (the ViT's keys stay garbage) */
    c.image_norm = 0; /* the text has it only when on (test_config_round_trip) */
    c.data_norm = 0;  /* likewise */
    c.data_mean.n = c.data_std.n = 0;
    int rc = vit_config_load(&c, &tc, DIGITS_CFG);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    ASSERT_CONFIG_EQ(&c, &def);
    ASSERT_TRAIN_EQ(&tc, &tdef);
    ck_assert_int_eq(vit_config_check(&def), VIT_OK);
    ck_assert_int_eq(vit_train_config_check(&tdef, &def), VIT_OK);
    /* The file holds recipe keys: a reader of the network alone refuses
     * them, naming the first. */
    vit_config_default(&c);
    ck_assert_int_eq(vit_config_load(&c, NULL, DIGITS_CFG), VIT_EFORMAT);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "a key of the training recipe"));

    rc = vit_config_load(&c, &tc, "../models/no-such-file.cfg");
    ck_assert_int_eq(rc, VIT_EIO);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "no-such-file.cfg"));
}
END_TEST

START_TEST(test_config_round_trip)
{
    vit_config a, b;
    vit_train_config ta, tb;
    vit_config_default(&a);
    vit_train_config_default(&ta);
    /* Every field away from its default, with values that need all 17
     * digits to survive text. */
    a.image_height = 12; a.image_width = 20; a.channels = 3; a.classes = 7;
    a.patch = 4; a.dim = 48; a.depth = 3; a.heads = 6; a.mlp = 100; a.pool = VIT_POOL_MEAN;
    ta.epochs = 17; ta.batch = 33;
    ta.lr = 0.1 + 0.2; ta.min_lr = 1.0 / 3.0 * 1e-5; ta.warmup = 2.5;
    ta.weight_decay = 0.123456789012345678; ta.beta1 = 0.85; ta.beta2 = 0.98765432109876;
    ta.eps = 3e-9; ta.smoothing = 0.05; ta.shift = 2; a.init_std = 0.0312;
    ta.seed = 18446744073709551615ull;
    ta.crop_pad = 3; ta.flip = 1; ta.erase = 1.0 / 7; ta.mixup = 0.8; ta.cutmix = 1.0 / 3.0;
    ta.mix_prob = 0.5;
    ta.drop_path = 0.1 + 0.2;
    ta.brightness = 0.1 + 0.2; ta.contrast = 1.0 / 3; ta.saturation = 0.7; ta.hue = 0.05 / 3;
    ta.grayscale = 2.0 / 3; ta.channel_perm = 1; ta.invert = 1;
    a.stem = 3; a.stem2 = 6;
    a.ln_eps = 1e-6 / 3;
    a.image_norm = 1; /* written only when on */
    a.data_norm = 1;  /* likewise, with its figures (not a model: vit_config_check refuses both) */
    a.data_mean = (vit_channel_values){3, {0.1 + 0.2, 1.0 / 3, -2.0 / 7}};
    a.data_std = (vit_channel_values){3, {1e-5 / 3, 0.2, 1000.0 / 3}};
    ta.precision = VIT_PRECISION_AUTO;
    char buf[4096], buf2[4096];
    int len = vit_config_format(&a, &ta, buf, sizeof buf);
    ck_assert_int_gt(len, 0);
    ck_assert_int_eq((int)strlen(buf), len);
    vit_config_default(&b);
    vit_train_config_default(&tb);
    int rc = vit_config_parse(&b, &tb, buf, "formatted");
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    ASSERT_CONFIG_EQ(&a, &b);
    ASSERT_TRAIN_EQ(&ta, &tb);
    ck_assert_int_eq(vit_config_format(&b, &tb, buf2, sizeof buf2), len);
    ck_assert_str_eq(buf, buf2);
    /* Every documented key of both tables appears in the text. */
    const char *key = NULL;
    int nkeys = 0, nnet = 0;
    for (int i = 0; vit_config_key_help(i, &key); i++, nkeys++, nnet++) {
        char pat[64];
        snprintf(pat, sizeof pat, "%s = ", key);
        ck_assert_msg(strstr(buf, pat) != NULL, "key %s missing from the formatted text", key);
    }
    for (int i = 0; vit_train_config_key_help(i, &key); i++, nkeys++) {
        char pat[64];
        snprintf(pat, sizeof pat, "%s = ", key);
        ck_assert_msg(strstr(buf, pat) != NULL, "key %s missing from the formatted text", key);
    }
    /* ... and nothing else: one line per key (22 of the network, 34 of
     * the recipe). */
    int lines = 0;
    for (const char *p = buf; *p; p++)
        lines += *p == '\n';
    ck_assert_int_eq(nkeys, lines);
    ck_assert_int_eq(nnet, 22);
    ck_assert_int_eq(nkeys, 56);
    /* The network alone: its keys only. */
    ck_assert_int_gt(vit_config_format(&a, NULL, buf2, sizeof buf2), 0);
    lines = 0;
    for (const char *p = buf2; *p; p++)
        lines += *p == '\n';
    ck_assert_int_eq(lines, nnet);
    ck_assert_ptr_null(strstr(buf2, "epochs = "));
    /* A buffer one byte short fails; exactly enough works. */
    ck_assert_int_lt(vit_config_format(&a, &ta, buf2, (size_t)len), 0);
    ck_assert_int_eq(vit_config_format(&a, &ta, buf2, (size_t)len + 1), len);
    /* Comments, blank lines, spaces and CR-less last line. */
    vit_config_default(&b);
    rc = vit_config_parse(&b, NULL, "# c\n\n   dim=16   # width\n\theads = 8\npool=mean", "t");
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(b.dim, 16);
    ck_assert_int_eq(b.heads, 8);
    ck_assert_int_eq(b.pool, VIT_POOL_MEAN);
}
END_TEST

/* The text of key's line in buf ("lr = 0.002\n" -> "0.002"), or "". */
static const char *line_value(const char *buf, const char *key, char *out, size_t cap)
{
    char pat[64];
    int n = snprintf(pat, sizeof pat, "%s = ", key);
    *out = 0;
    for (const char *p = buf; p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, pat, (size_t)n) == 0) {
            snprintf(out, cap, "%.*s", (int)strcspn(p + n, "\n"), p + n);
            break;
        }
    return out;
}

START_TEST(test_config_format_shortest)
{
    /* Doubles are written as people write them in a config file: the
     * defaults read 0.002, 1e-05, 0.05 (not 0.050000000000000003) ... */
    vit_config net, net_back;
    vit_train_config c, back;
    vit_config_default(&net);
    vit_train_config_default(&c);
    char buf[4096], v[64];
    ck_assert_int_gt(vit_config_format(&net, &c, buf, sizeof buf), 0);
    static const char *want[][2] = {
        {"lr", "0.002"}, {"min_lr", "1e-05"}, {"warmup", "5"}, {"weight_decay", "0.05"},
        {"beta1", "0.9"}, {"beta2", "0.999"}, {"eps", "1e-08"}, {"smoothing", "0.1"},
        {"rotate", "0"}, {"init_std", "0.1"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_str_eq(line_value(buf, want[i][0], v, sizeof v), want[i][1]);
    /* ... with as many digits as the value needs: 15, 16 or 17. */
    static const struct {
        double x;
        const char *text;
    } digits[] = {
        {0.1 + 0.2, "0.30000000000000004"},  /* 17 */
        {1.0 / 3.0, "0.3333333333333333"},   /* 16 */
        {2.0 / 3.0, "0.6666666666666666"},   /* 16 */
        {0.123456789012345, "0.123456789012345"}, /* 15 */
        {1e-12, "1e-12"},
        {7.0, "7"},
    };
    for (size_t i = 0; i < sizeof digits / sizeof digits[0]; i++) {
        vit_train_config_default(&c);
        c.lr = digits[i].x;
        ck_assert_int_gt(vit_config_format(&net, &c, buf, sizeof buf), 0);
        ck_assert_str_eq(line_value(buf, "lr", v, sizeof v), digits[i].text);
    }
    /* Every double survives text bitwise: 2000 random ones in lr's range
     * (1e-12 .. 10), drawn uniformly in the exponent and the mantissa. */
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < 2000; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        double x = ldexp(1.0 + (double)(s >> 12) / 4503599627370496.0, -39 + (int)(s % 43));
        if (x > 10)
            x /= 16;
        vit_train_config_default(&c);
        c.lr = x;
        c.min_lr = x * 1e-3;
        ck_assert_int_gt(vit_config_format(&net, &c, buf, sizeof buf), 0);
        vit_train_config_default(&back);
        vit_config_default(&net_back);
        ck_assert_msg(vit_config_parse(&net_back, &back, buf, "t") == VIT_OK, "%s", vit_last_error());
        ck_assert_msg(memcmp(&back.lr, &c.lr, sizeof c.lr) == 0 &&
                          memcmp(&back.min_lr, &c.min_lr, sizeof c.min_lr) == 0,
                      "%.17g / %.17g read back as %.17g / %.17g", c.lr, c.min_lr, back.lr,
                      back.min_lr);
    }
    /* Range messages use the same writing, so a value just outside is not
     * shown as a value inside (%g printed 0.9999995 as 1). */
    vit_train_config_default(&c);
    ck_assert_int_eq(vit_train_config_set(&c, "beta1", "0.9999995"), VIT_EINVAL);
    ck_assert_str_eq(vit_last_error(), "beta1: 0.9999995 is out of range [0, 0.999999]");
    ck_assert_int_eq(vit_train_config_set(&c, "lr", "1e-13"), VIT_EINVAL);
    ck_assert_str_eq(vit_last_error(), "lr: 1e-13 is out of range [1e-12, 10]");
    c.lr = 0.1 + 0.2;
    c.min_lr = 0.30000000000000010;
    ck_assert_int_eq(vit_train_config_check(&c, &net), VIT_EINVAL);
    ck_assert_str_eq(vit_last_error(), "min_lr: 0.3000000000000001 exceeds lr 0.30000000000000004");
}
END_TEST

/* The augmentation keys: defaults off (mix_prob 1), ranges refused by
 * vit_train_config_set and, for a struct filled in by code,
 * vit_train_config_check. */
START_TEST(test_config_augment_ranges)
{
    vit_config net;
    vit_train_config c;
    vit_config_default(&net);
    vit_train_config_default(&c);
    ck_assert(c.crop_pad == 0 && c.flip == 0 && c.mixup == 0 && c.cutmix == 0
              && c.drop_path == 0 && c.mix_prob == 1);
    static const char *bad[][3] = {
        {"crop_pad", "-1", "crop_pad: -1 is out of range [0, 64]"},
        {"crop_pad", "65", "crop_pad: 65 is out of range [0, 64]"},
        {"flip", "2", "flip: 2 is out of range [0, 1]"},
        {"mixup", "-0.5", "mixup: -0.5 is out of range [0, 100]"},
        {"cutmix", "nan", "cutmix: expected a number, got 'nan'"},
        {"mix_prob", "1.5", "mix_prob: 1.5 is out of range [0, 1]"},
        {"drop_path", "1", "drop_path: 1 is out of range [0, 0.99]"},
        {"drop_path", "-0.1", "drop_path: -0.1 is out of range [0, 0.99]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(vit_train_config_set(&c, bad[i][0], bad[i][1]), VIT_EINVAL);
        ck_assert_str_eq(vit_last_error(), bad[i][2]);
    }
    ck_assert_int_eq(vit_train_config_set(&c, "crop_pad", "4"), VIT_OK);
    ck_assert_int_eq(vit_train_config_set(&c, "drop_path", "0.1"), VIT_OK);
    ck_assert(c.crop_pad == 4 && c.drop_path == 0.1);
    ck_assert_int_eq(vit_train_config_check(&c, &net), VIT_OK);
    c.drop_path = 1;
    ck_assert_int_eq(vit_train_config_check(&c, &net), VIT_EINVAL);
    ck_assert_str_eq(vit_last_error(), "drop_path: 1 is out of range [0, 1)");
    c.drop_path = 0;
    c.mix_prob = -1;
    ck_assert_int_eq(vit_train_config_check(&c, &net), VIT_EINVAL);
    ck_assert_str_eq(vit_last_error(), "mix_prob: -1 is out of range [0, 1]");
    c.mix_prob = 1;
    c.flip = 3;
    ck_assert_int_eq(vit_train_config_check(&c, &net), VIT_EINVAL);
    ck_assert_str_eq(vit_last_error(), "flip: 3 is out of range [0, 1]");
}
END_TEST

START_TEST(test_config_bad_text)
{
    vit_train_config tc;
    vit_train_config_default(&tc);
    static const struct {
        const char *text, *line, *key;
    } bad[] = {
        {"dim = 8\nbogus = 3\n", "bad.cfg:2", "bogus"},  /* unknown key */
        {"lr = fast\n", "bad.cfg:1", "lr"},              /* not a number */
        {"dim = 64x\n", "bad.cfg:1", "dim"},             /* trailing junk */
        {"dim =\n", "bad.cfg:1", "dim"},                 /* empty value */
        {"epochs = 2.5\n", "bad.cfg:1", "epochs"},       /* not an integer */
        {"# ok\ndepth = 0\n", "bad.cfg:2", "depth"},     /* out of range */
        {"heads = -2\n", "bad.cfg:1", "heads"},          /* out of range */
        {"batch = 99999999999999999999\n", "bad.cfg:1", "batch"}, /* overflow */
        {"lr = 100\n", "bad.cfg:1", "lr"},               /* out of range */
        {"lr = nan\n", "bad.cfg:1", "lr"},               /* not finite */
        {"smoothing = inf\n", "bad.cfg:1", "smoothing"},
        {"seed = -1\n", "bad.cfg:1", "seed"},
        {"pool = max\n", "bad.cfg:1", "pool"},
        {"\n\npatch 2\n", "bad.cfg:3", NULL},            /* missing '=' */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vit_config c;
        vit_config_default(&c);
        int rc = vit_config_parse(&c, &tc, bad[i].text, "bad.cfg");
        const char *msg = vit_last_error();
        ck_assert_msg(rc == VIT_EFORMAT, "'%s': %d, not VIT_EFORMAT", bad[i].text, rc);
        ck_assert_msg(strstr(msg, bad[i].line) != NULL, "'%s': message '%s' lacks %s", bad[i].text,
                      msg, bad[i].line);
        if (bad[i].key)
            ck_assert_msg(strstr(msg, bad[i].key) != NULL, "'%s': message '%s' lacks %s",
                          bad[i].text, msg, bad[i].key);
    }
    /* vit_config_set directly. */
    vit_config c;
    vit_config_default(&c);
    ck_assert_int_eq(vit_config_set(&c, "nope", "1"), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "nope"));
    ck_assert_int_eq(vit_config_set(&c, "mlp", "1e3"), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "mlp"));
    ck_assert_int_eq(c.mlp, 128); /* unchanged by the failed set */
    ck_assert_int_eq(vit_config_set(&c, "mlp", "96"), VIT_OK);
    ck_assert_int_eq(c.mlp, 96);

    /* Each value valid, the combination not: the check names the key. */
    vit_config_default(&c);
    ck_assert_int_eq(vit_config_parse(&c, &tc, "dim = 10\nheads = 4\n", "bad.cfg"), VIT_OK);
    ck_assert_int_eq(vit_config_check(&c), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "heads"));
    vit_config_default(&c);
    c.patch = 3; /* does not divide 8 */
    c.patch_stride = 0;
    c.patch_pad = 0;
    ck_assert_int_eq(vit_config_check(&c), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "patch"));
    vit_config_default(&c);
    tc.min_lr = 1.0;
    ck_assert_int_eq(vit_train_config_check(&tc, &c), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "min_lr"));
}
END_TEST

/* ---- checkpoints ------------------------------------------------------ */

/* ---- a key given twice ------------------------------------------------ */

/* Writes text to DIR/name; the path goes to out[cap]. */
static const char *write_text(const char *dir, const char *name, const char *text, char *out,
                              size_t cap)
{
    snprintf(out, cap, "%s/%s", dir, name);
    FILE *f = fopen(out, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
    return out;
}

START_TEST(test_config_repeated_key)
{
    vit_train_config tc;
    vit_train_config_default(&tc);
    char dir[64], path[128], want[256];
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_model_test_XXXXXX");
    vit_config c;
    /* A doubled patch_stride line once went unnoticed: the later line won.
     * Now the file is refused, naming it, both lines and the key. */
    write_text(dir, "twice.cfg", "# overlap\npatch = 4\npatch_stride = 2\ndim = 32\n\n"
               "patch_stride = 3\n", path, sizeof path);
    vit_config_default(&c);
    ck_assert_int_eq(vit_config_load(&c, &tc, path), VIT_EFORMAT);
    snprintf(want, sizeof want, "%s:6: patch_stride is set twice (first on line 3)", path);
    ck_assert_str_eq(vit_last_error(), want);
    ck_assert_int_eq(c.dim, 32);         /* the lines before it were read ... */
    ck_assert_int_eq(c.patch_stride, 2); /* ... the repeat was not */

    static const struct {
        const char *text, *msg;
    } twice[] = {
        /* the same value, other spacing, a comment: still a repeat */
        {"dim=8\nheads = 2\n  dim = 8   # again\n", "t:3: dim is set twice (first on line 1)"},
        /* the first repeat is the one named, its first line the key's first */
        {"lr = 0.1\nlr = 0.1\nlr = 0.1\n", "t:2: lr is set twice (first on line 1)"},
        /* the repeat is the problem, whatever its value */
        {"depth = 2\n\ndepth = zero\n", "t:3: depth is set twice (first on line 1)"},
    };
    for (size_t i = 0; i < sizeof twice / sizeof twice[0]; i++) {
        vit_config_default(&c);
        ck_assert_int_eq(vit_config_parse(&c, &tc, twice[i].text, "t"), VIT_EFORMAT);
        ck_assert_str_eq(vit_last_error(), twice[i].msg);
    }
    /* Distinct keys still load, including ones sharing a prefix, and a
     * file setting every key once (as vit_config_format writes it). */
    vit_config_default(&c);
    ck_assert_int_eq(vit_config_parse(&c, &tc, "patch = 4\npatch_stride = 4\npatch_pad = 0\n", "t"),
                     VIT_OK);
    ck_assert_int_eq(c.patch_stride, 4);
    ck_assert_int_eq(c.patch_pad, 0);
    vit_config a, b;
    vit_train_config a_tc, b_tc;
    tiny_config(&a, VIT_POOL_MEAN);
    vit_train_config_default(&a_tc);
    a_tc.epochs = 9;
    a_tc.lr = 0.0123;
    char text[4096];
    ck_assert_int_gt(vit_config_format(&a, &a_tc, text, sizeof text), 0);
    vit_config_default(&b);
    vit_train_config_default(&b_tc);
    ck_assert_msg(vit_config_load(&b, &b_tc, write_text(dir, "once.cfg", text, path, sizeof path)) ==
                      VIT_OK, "%s", vit_last_error());
    ASSERT_CONFIG_EQ(&b, &a);
    ASSERT_TRAIN_EQ(&b_tc, &a_tc);

    /* A checkpoint's stored config is read by the same parser: a repeat
     * there is refused the same way, naming the checkpoint. */
    snprintf(path, sizeof path, "%s/twice.ckpt", dir);
    vit_ckpt ck = {.config = "dim = 8\nheads = 2\ndim = 16\n"};
    ck_assert_msg(vit_ckpt_write(path, &ck) == VIT_OK, "%s", vit_last_error());
    snprintf(want, sizeof want, "%s:3: dim is set twice (first on line 1)", path);
    ck_assert_int_eq(vit_run_config(path, &c, &tc), VIT_EFORMAT);
    ck_assert_str_eq(vit_last_error(), want);
    vit_model *m = NULL;
    ck_assert_int_eq(vit_run_load(path, &m, NULL, NULL, NULL), VIT_EFORMAT);
    ck_assert_str_eq(vit_last_error(), want);
    ck_assert_ptr_null(m);
    fu_remove_tree(dir);
}
END_TEST

/* Values a float32 checkpoint stores exactly. */
static void fill_float_exact(vit_real *x, size_t n, uint64_t *seed, double scale, int positive)
{
    gc_fill(x, n, seed, scale);
    for (size_t i = 0; i < n; i++)
        x[i] = (vit_real)(float)(positive ? fabs((double)x[i]) : x[i]);
}

START_TEST(test_run_save_load)
{
    char dir[64], path[128];
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_model_test_XXXXXX");
    snprintf(path, sizeof path, "%s/run.ckpt", dir);
    vit_config cfg;
    vit_train_config tc, tc2;
    tiny_config(&cfg, VIT_POOL_MEAN);
    vit_train_config_default(&tc);
    tc.lr = 0.0123;
    tc.seed = 77;
    vit_model *m = vit_model_new(&cfg);
    size_t n = vit_model_param_count(m);
    uint64_t seed = 200;
    fill_float_exact(vit_model_params(m), n, &seed, 0.5, 0);
    vit_adamw opt;
    ck_assert_int_eq(vit_adamw_init(&opt, n, tc.beta1, tc.beta2, tc.eps, tc.weight_decay), VIT_OK);
    fill_float_exact(opt.m, n, &seed, 0.01, 0);
    fill_float_exact(opt.v, n, &seed, 0.001, 1);
    opt.t = 7;
    vit_run_state st = {.step = 7, .epoch = 2};
    vit_rng_seed(&st.rng, 99);
    vit_rng_next(&st.rng);
    ck_assert_msg(vit_run_save(path, m, &tc, &opt, &st) == VIT_OK, "%s", vit_last_error());

    vit_model *m2 = NULL;
    vit_adamw opt2;
    vit_run_state st2;
    memset(&st2, 0, sizeof st2);
    ck_assert_msg(vit_run_load(path, &m2, &tc2, &opt2, &st2) == VIT_OK, "%s", vit_last_error());
    ck_assert_ptr_nonnull(m2);
    ASSERT_CONFIG_EQ(vit_model_config(m2), &cfg);
    ASSERT_TRAIN_EQ(&tc2, &tc); /* the recipe the file stores, lr and seed too */
    ck_assert_uint_eq(vit_model_param_count(m2), n);
    ck_assert(memcmp(vit_model_params(m2), vit_model_params(m), n * sizeof(vit_real)) == 0);
    ck_assert_uint_eq(opt2.n, n);
    ck_assert(memcmp(opt2.m, opt.m, n * sizeof(vit_real)) == 0);
    ck_assert(memcmp(opt2.v, opt.v, n * sizeof(vit_real)) == 0);
    ck_assert_uint_eq(opt2.t, 7);
    ck_assert(opt2.beta1 == tc.beta1 && opt2.beta2 == tc.beta2 && opt2.eps == tc.eps
              && opt2.weight_decay == tc.weight_decay);
    ck_assert_uint_eq(st2.step, 7);
    ck_assert_uint_eq(st2.epoch, 2);
    ck_assert(memcmp(st2.rng.s, st.rng.s, sizeof st.rng.s) == 0);
    ck_assert_uint_eq(vit_rng_next(&st2.rng), vit_rng_next(&st.rng));
    /* Saved without class names: they load as the indices. */
    ck_assert_int_eq(st2.nclass_names, cfg.classes);
    for (int k = 0; k < cfg.classes; k++) {
        char num[16];
        snprintf(num, sizeof num, "%d", k);
        ck_assert_str_eq(st2.class_names[k], num);
    }
    vit_run_state_free(&st2);
    ck_assert_ptr_null(st2.class_names);
    vit_adamw_free(&opt2);
    vit_model_free(m2);

    /* With class names: they come back; a count that is not the model's
     * classes is refused when saving, and in a file when loading. */
    char *names[3] = {"bag", "coat", "sneaker \xe2\x9c\x93"};
    ck_assert_int_eq(cfg.classes, 3);
    st.class_names = names;
    st.nclass_names = 2;
    ck_assert_int_eq(vit_run_save(path, m, &tc, &opt, &st), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "2 class names for a model of 3 classes"));
    st.nclass_names = 3;
    ck_assert_msg(vit_run_save(path, m, &tc, &opt, &st) == VIT_OK, "%s", vit_last_error());
    st.class_names = NULL;
    st.nclass_names = 0;
    ck_assert_msg(vit_run_load(path, &m2, NULL, &opt2, &st2) == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(st2.nclass_names, 3);
    for (int k = 0; k < 3; k++)
        ck_assert_str_eq(st2.class_names[k], names[k]);
    vit_run_state_free(&st2);
    vit_adamw_free(&opt2);
    vit_model_free(m2);
    vit_ckpt raw;
    ck_assert_int_eq(vit_ckpt_read(path, &raw), VIT_OK);
    ck_assert_int_eq(raw.nclass_names, 3);
    raw.nclass_names = 2; /* written with one name short */
    ck_assert_int_eq(vit_ckpt_write(path, &raw), VIT_OK);
    raw.nclass_names = 3; /* so that vit_ckpt_free frees all three */
    vit_ckpt_free(&raw);
    m2 = (vit_model *)&opt;
    ck_assert_int_eq(vit_run_load(path, &m2, NULL, &opt2, &st2), VIT_EFORMAT);
    ck_assert_ptr_null(m2);
    ck_assert_msg(strstr(vit_last_error(), path) &&
                  strstr(vit_last_error(), "2 class names, but the stored config has 3 classes"),
                  "message '%s'", vit_last_error());
    ck_assert_msg(vit_run_save(path, m, &tc, &opt, &st) == VIT_OK, "%s", vit_last_error());
    ck_assert_msg(vit_run_load(path, &m2, NULL, &opt2, NULL) == VIT_OK, "%s", vit_last_error());

    /* Same logits, bit for bit. */
    vit_tape *t = vit_tape_new();
    vit_real img[2 * 16];
    for (int i = 0; i < 32; i++)
        img[i] = (vit_real)gc_uniform(&seed);
    vit_tensor *z1 = vit_model_forward(m, t, img, 2, 0);
    ck_assert_ptr_nonnull(z1);
    vit_real l1[6];
    memcpy(l1, z1->data, sizeof l1);
    vit_tape_reset(t);
    vit_tensor *z2 = vit_model_forward(m2, t, img, 2, 0);
    ck_assert_ptr_nonnull(z2);
    ck_assert(memcmp(l1, z2->data, sizeof l1) == 0);

    /* Weights only: loads without an optimizer, not with one. */
    vit_model_free(m2);
    vit_adamw_free(&opt2);
    ck_assert_int_eq(vit_run_save(path, m, NULL, NULL, &st), VIT_OK);
    ck_assert_int_eq(vit_run_load(path, &m2, NULL, NULL, NULL), VIT_OK);
    ck_assert(memcmp(vit_model_params(m2), vit_model_params(m), n * sizeof(vit_real)) == 0);
    vit_model_free(m2);
    m2 = (vit_model *)&opt; /* must be reset to NULL on failure */
    ck_assert_int_eq(vit_run_load(path, &m2, NULL, &opt2, NULL), VIT_EFORMAT);
    ck_assert_ptr_null(m2);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "adam.m"));
    ck_assert_int_eq(vit_run_load("/nonexistent/x.ckpt", &m2, NULL, NULL, NULL), VIT_EIO);

    /* A well-formed file whose config describes no model: the message names
     * the file and keeps the config's own complaint. */
    vit_ckpt bad = {.config = "dim = 8\nheads = 3\n", .ntensors = 1,
                    .tensors = (vit_ckpt_tensor[]){{.name = "x", .ndim = 1, .dims = {1},
                                                    .data = (vit_real[]){0}}}};
    ck_assert_int_eq(vit_ckpt_write(path, &bad), VIT_OK);
    ck_assert_int_eq(vit_run_load(path, &m2, NULL, NULL, NULL), VIT_EFORMAT);
    ck_assert_ptr_null(m2);
    ck_assert_msg(strstr(vit_last_error(), path) && strstr(vit_last_error(), "heads: 3"),
                  "message '%s'", vit_last_error());

    vit_tape_free(t);
    vit_adamw_free(&opt);
    vit_model_free(m);
    fu_remove_tree(dir);
}
END_TEST

START_TEST(test_resume_shape_mismatch)
{
    char dir[64], path[128], out[128];
    fu_mkdtemp(dir, sizeof dir, "/tmp/vit_model_test_XXXXXX");
    snprintf(path, sizeof path, "%s/saved.ckpt", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    vit_config cfg;
    vit_train_config tc;
    tiny_config(&cfg, VIT_POOL_CLS);
    tiny_train(&tc);
    vit_model *m = vit_model_new(&cfg);
    vit_rng rng;
    vit_rng_seed(&rng, 1);
    vit_model_init(m, &rng);
    vit_adamw opt;
    ck_assert_int_eq(vit_adamw_init(&opt, vit_model_param_count(m), tc.beta1, tc.beta2, tc.eps,
                                    tc.weight_decay), VIT_OK);
    /* A checkpoint of a finished one-epoch run. */
    vit_run_state st = {.step = 2, .epoch = 1, .rng = rng};
    opt.t = 2;
    ck_assert_int_eq(vit_run_save(path, m, &tc, &opt, &st), VIT_OK);

    /* Six 4x4 images of 3 classes. */
    vit_real img[6 * 16];
    int lab[6] = {0, 1, 2, 0, 1, 2};
    uint64_t seed = 300;
    for (int i = 0; i < 6 * 16; i++)
        img[i] = (vit_real)gc_uniform(&seed);
    vit_dataset ds = {.count = 6, .height = 4, .width = 4, .channels = 1, .classes = 3,
                      .images = img, .labels = lab};
    vit_train_opts o = {.out_dir = out, .resume = path, .ckpt_every = 1};
    vit_train_result res;

    vit_config other = cfg;
    other.dim = 16;
    int rc = vit_train_run(&other, &tc, &ds, &ds, &o, &res);
    ck_assert_int_eq(rc, VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "dim") != NULL, "message '%s' does not name dim",
                  vit_last_error());
    other = cfg;
    other.depth = 3;
    rc = vit_train_run(&other, &tc, &ds, &ds, &o, &res);
    ck_assert_int_eq(rc, VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "depth") != NULL, "'%s'", vit_last_error());
    other = cfg;
    other.pool = VIT_POOL_MEAN;
    ck_assert_int_eq(vit_train_run(&other, &tc, &ds, &ds, &o, &res), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "pool") != NULL, "'%s'", vit_last_error());

    /* Control: the same shape resumes (nothing left to train). */
    rc = vit_train_run(&cfg, &tc, &ds, &ds, &o, &res);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(res.epochs_done, 1);
    ck_assert_uint_eq(res.steps, 2);
    vit_train_result_free(&res);

    vit_adamw_free(&opt);
    vit_model_free(m);
    fu_remove_tree(dir);
}
END_TEST


/* Calls of the last GEMM statistics with M rows, N columns and depth K. */
static unsigned long long gemm_calls_of(int M, int N, int K)
{
    vit_gemm_shape sh[256];
    size_t n = vit_gemm_shapes(sh, 256);
    unsigned long long calls = 0;
    for (size_t i = 0; i < n && i < 256; i++)
        if (sh[i].M == M && sh[i].N == N && sh[i].K == K)
            calls += sh[i].calls;
    return calls;
}

/* vit_model_train_grads against one tape over the whole batch (the full
 * forward, which the finite-difference checks cover): on 1, 2 and 3
 * threads (slices of 4, 3 and 3 or 5 and 5 rows) the same up to rounding
 * (float64: 1e-12 relative to the largest gradient), the same twice
 * bitwise, and the gradient overwritten, not accumulated.  With the mean
 * pool (_i = 1) 1 thread gives the tape's numbers exactly; with a head on
 * the class token (_i = 0, and 2 with lsa's no-self mask and per-head
 * scale) the last block computes token 0 alone, seen in its MLP's GEMM of
 * one row an item.  A NaN pixel in the last slice's rows is reported as
 * VIT_ENUM with the kernel's message, and a batch smaller than the thread
 * count still works. */
#define SB 10
/* vit_model_train_grads_ex: soft targets that are smoothed one-hots and
 * drop-path scales of 1 give the plain step (to rounding); every branch
 * dropped leaves the blocks' gradients exactly 0 and the rest nonzero;
 * slices on 3 threads read their rows of the scales and targets (same as 1
 * thread to rounding); and the forward of evaluation never drops
 * (bitwise equal to a second model of the same config). */
START_TEST(test_train_grads_extras)
{
    vit_config cfg;
    tiny_config(&cfg, VIT_POOL_CLS);
    vit_model *m = vit_model_new(&cfg);
    vit_model *m2 = vit_model_new(&cfg);
    ck_assert_ptr_nonnull(m);
    ck_assert_ptr_nonnull(m2);
    size_t n = vit_model_param_count(m);
    uint64_t seed = 78;
    gc_fill(vit_model_params(m), n, &seed, 0.6);
    memcpy(vit_model_params(m2), vit_model_params(m), n * sizeof(vit_real));
    vit_real images[SB * 16], targets[SB * 3], ones[2 * 2 * SB], zeros[2 * 2 * SB] = {0};
    vit_real half[2 * 2 * SB];
    int labels[SB];
    for (int i = 0; i < SB * 16; i++)
        images[i] = (vit_real)gc_uniform(&seed);
    for (int i = 0; i < SB; i++) {
        labels[i] = i % 3;
        for (int c = 0; c < 3; c++)
            targets[i * 3 + c] = (vit_real)(0.9 * (c == labels[i]) + 0.1 / 3);
    }
    for (int i = 0; i < 4 * SB; i++) {
        ones[i] = 1;
        half[i] = (i * 7) % 3 ? 2 : 0;
    }
    vit_tape *t = vit_tape_new();
    vit_tensor *z1 = vit_model_forward(m, t, images, SB, 0);
    vit_tape *t2 = vit_tape_new();
    vit_tensor *z2 = vit_model_forward(m2, t2, images, SB, 0);
    ck_assert(z1 && z2 && memcmp(z1->data, z2->data, z1->size * sizeof *z1->data) == 0);

    vit_real *ref = gc_zeros(n), *g = vit_model_grads(m), *one = gc_zeros(n);
    double l0, l1, l2;
    ck_assert_int_eq(vit_model_train_grads(m, images, labels, SB, (vit_real)0.1, &l0, NULL), VIT_OK);
    memcpy(ref, g, n * sizeof *ref);
    double gmax = 0;
    for (size_t i = 0; i < n; i++)
        gmax = fmax(gmax, fabs(ref[i]));
    vit_train_extras ex = {.targets = targets, .drop_scale = ones};
    ck_assert_int_eq(vit_model_train_grads_ex(m, images, labels, SB, 0, &ex, &l1, NULL), VIT_OK);
    ck_assert_double_le(fabs(l1 - l0), 1e-13);
    ck_assert(gc_max_abs_diff(ref, g, n) <= 1e-12 * gmax);

    ex = (vit_train_extras){.drop_scale = zeros};
    ck_assert_int_eq(vit_model_train_grads_ex(m, images, labels, SB, 0, &ex, &l1, NULL), VIT_OK);
    for (int k = 0; k < vit_model_tensor_count(m); k++) {
        const vit_model_tensor *tt = vit_model_tensor_at(m, k);
        double most = 0;
        for (size_t i = 0; i < tt->size; i++)
            most = fmax(most, fabs(g[tt->offset + i]));
        if (strncmp(tt->name, "blocks.", 7) == 0)
            ck_assert_msg(most == 0, "%s: gradient %g with every branch dropped", tt->name, most);
        else if (strncmp(tt->name, "head.", 5) == 0) /* the class token's input alone */
            ck_assert_msg(most > 0, "%s: no gradient", tt->name);
    }

    ex = (vit_train_extras){.targets = targets, .drop_scale = half};
    for (int threads = 1; threads <= 3; threads += 2) {
        ck_assert_int_eq(vit_set_threads(threads), VIT_OK);
        ck_assert_int_eq(vit_model_train_grads_ex(m, images, labels, SB, 0, &ex, &l2, NULL),
                         VIT_OK);
        if (threads == 1)
            memcpy(one, g, n * sizeof *one);
    }
    ck_assert(gc_max_abs_diff(one, g, n) <= 1e-12 * gmax);
    ck_assert(gc_max_abs_diff(ref, g, n) > 1e-3 * gmax); /* the drops did something */
    vit_set_threads(1);
    free(ref);
    free(one);
    vit_tape_free(t);
    vit_tape_free(t2);
    vit_model_free(m);
    vit_model_free(m2);
}
END_TEST

START_TEST(test_train_grads_slices)
{
    vit_config cfg;
    tiny_config(&cfg, _i == 1 ? VIT_POOL_MEAN : VIT_POOL_CLS);
    cfg.lsa = _i == 2;
    const int cls_only = _i != 1;
    vit_model *m = vit_model_new(&cfg);
    ck_assert_ptr_nonnull(m);
    size_t n = vit_model_param_count(m);
    uint64_t seed = 77;
    gc_fill(vit_model_params(m), n, &seed, 0.6);
    vit_real images[SB * 16];
    int labels[SB];
    for (int i = 0; i < SB * 16; i++)
        images[i] = (vit_real)gc_uniform(&seed);
    for (int i = 0; i < SB; i++)
        labels[i] = i % 3;

    /* Reference: one tape, whole batch, smoothing 0.1. */
    vit_tape *t = vit_tape_new();
    vit_model_zero_grads(m);
    vit_tensor *z = vit_model_forward(m, t, images, SB, 1);
    vit_tensor *loss = vit_op_cross_entropy(t, z, labels, (vit_real)0.1, NULL);
    ck_assert_ptr_nonnull(loss);
    ck_assert_int_eq(vit_tape_backward(t, loss), VIT_OK);
    double ref_loss = loss->data[0];
    int ref_correct = 0;
    for (int r = 0; r < SB; r++) {
        const vit_real *zr = z->data + (size_t)r * 3;
        int k = zr[1] > zr[0] ? 1 : 0;
        k = zr[2] > zr[k] ? 2 : k;
        ref_correct += k == labels[r];
    }
    vit_real *ref = gc_zeros(n), *first = gc_zeros(n);
    memcpy(ref, vit_model_grads(m), n * sizeof *ref);
    double gmax = 0;
    for (size_t i = 0; i < n; i++)
        gmax = fmax(gmax, fabs(ref[i]));

    for (int threads = 1; threads <= 3; threads++) {
        ck_assert_int_eq(vit_set_threads(threads), VIT_OK);
        for (int rep = 0; rep < 2; rep++) {
            double l = 0;
            int correct = -1;
            for (size_t i = 0; i < n; i++) /* stale values must not survive */
                vit_model_grads(m)[i] = 1e6;
            vit_gemm_stats_reset();
            ck_assert_int_eq(vit_model_train_grads(m, images, labels, SB, (vit_real)0.1, &l,
                                                   &correct), VIT_OK);
            /* The MLP's [rows, D] x [D, mlp] forward and its [rows, D] x
             * [mlp, D]^T backward, counted for the slices of the first
             * slice's size (1 thread: one of 10 items; 2: two of 5; 3:
             * two of 3, and one of 4): the last block's on one row an
             * item with cls_only, every block's on all T = 5 otherwise. */
            int items = threads == 1 ? SB : SB / threads, slices = threads == 1 ? 1 : 2;
            ck_assert_uint_eq(gemm_calls_of(items, cfg.mlp, cfg.dim),
                              (unsigned long long)(2 * slices * cls_only));
            ck_assert_uint_eq(gemm_calls_of(items * 5, cfg.mlp, cfg.dim),
                              (unsigned long long)(2 * slices * (cfg.depth - cls_only)));
            const vit_real *g = vit_model_grads(m);
            double worst = 0;
            for (size_t i = 0; i < n; i++)
                worst = fmax(worst, fabs(g[i] - ref[i]));
            if (threads == 1 && !cls_only) {
                ck_assert_msg(worst == 0, "1 thread differs from one tape by %g", worst);
                ck_assert_double_eq(l, ref_loss);
            } else {
                ck_assert_msg(worst <= 1e-12 * gmax, "%d threads: gradient off by %g (max %g)",
                              threads, worst, gmax);
                ck_assert_double_le(fabs(l - ref_loss), 1e-13 * fabs(ref_loss));
            }
            ck_assert_int_eq(correct, ref_correct);
            if (rep == 0)
                memcpy(first, g, n * sizeof *first);
            else
                ck_assert_msg(memcmp(first, g, n * sizeof *first) == 0,
                              "%d threads: two runs differ", threads);
        }
    }

    /* Batch of 2 on 3 threads: 2 slices. */
    double l2;
    ck_assert_int_eq(vit_model_train_grads(m, images, labels, 2, 0, &l2, NULL), VIT_OK);
    ck_assert(isfinite(l2));

    /* NaN in the last image: the last slice fails, its message comes back. */
    images[(SB - 1) * 16 + 3] = NAN;
    double l3;
    ck_assert_int_eq(vit_model_train_grads(m, images, labels, SB, 0, &l3, NULL), VIT_ENUM);
    ck_assert_msg(strstr(vit_last_error(), "non-finite") != NULL, "message: %s", vit_last_error());
    ck_assert_int_eq(vit_model_train_grads(NULL, images, labels, SB, 0, &l3, NULL), VIT_EINVAL);
    ck_assert_int_eq(vit_model_train_grads(m, images, labels, 0, 0, &l3, NULL), VIT_EINVAL);

    vit_set_threads(1);
    free(ref);
    free(first);
    vit_tape_free(t);
    vit_model_free(m);
}
END_TEST

static vit_model *filled_model(const vit_config *cfg, uint64_t seed, vit_real **images, int batch);

/* A slice in pieces (vit_model_set_micro_batch): the same gradient, loss and
 * right answers as one tape over the whole batch up to rounding (float64:
 * 1e-12 of the largest gradient), on 1 and 2 threads, with the products
 * really cut to the pieces' rows (on 1 thread pieces of 3 of the 10 items
 * are 2, 3, 2, 3: two of 3, each block's MLP once forward, once backward);
 * vit_model_micro_batch says what is in effect. */
START_TEST(test_train_grads_pieces)
{
    vit_config cfg;
    tiny_config(&cfg, VIT_POOL_MEAN);
    vit_real *images;
    vit_model *m = filled_model(&cfg, 91, &images, SB);
    size_t n = vit_model_param_count(m);
    int labels[SB];
    for (int i = 0; i < SB; i++)
        labels[i] = (i * 7) % 3;
    vit_tape *t = vit_tape_new();
    vit_model_zero_grads(m);
    vit_tensor *loss = vit_op_cross_entropy(t, vit_model_forward(m, t, images, SB, 1), labels,
                                            (vit_real)0.1, NULL);
    ck_assert_ptr_nonnull(loss);
    ck_assert_int_eq(vit_tape_backward(t, loss), VIT_OK);
    double ref_loss = loss->data[0];
    vit_real *ref = gc_zeros(n);
    memcpy(ref, vit_model_grads(m), n * sizeof *ref);
    double gmax = 0;
    for (size_t i = 0; i < n; i++)
        gmax = fmax(gmax, fabs(ref[i]));
    int whole_correct = -1;

    ck_assert_int_eq(vit_model_micro_batch(m), 0); /* automatic, not probed yet */
    const int sizes[] = {SB, 1, 3, 0};
    for (int threads = 1; threads <= 2; threads++) {
        ck_assert_int_eq(vit_set_threads(threads), VIT_OK);
        for (int k = 0; k < 4; k++) {
            ck_assert_int_eq(vit_model_set_micro_batch(m, sizes[k]), VIT_OK);
            double l = 0;
            int correct = -1;
            vit_gemm_stats_reset();
            ck_assert_int_eq(vit_model_train_grads(m, images, labels, SB, (vit_real)0.1, &l,
                                                   &correct), VIT_OK);
            if (sizes[k] == 3 && threads == 1) {
                ck_assert_uint_eq(gemm_calls_of(3 * 5, cfg.mlp, cfg.dim),
                                  (unsigned long long)(2 * 2 * cfg.depth));
                ck_assert_uint_eq(gemm_calls_of(2 * 5, cfg.mlp, cfg.dim),
                                  (unsigned long long)(2 * 2 * cfg.depth));
                ck_assert_uint_eq(gemm_calls_of(SB * 5, cfg.mlp, cfg.dim), 0);
            }
            if (sizes[k] == 0) /* the tiny model's every item fits in one piece */
                ck_assert_int_ge(vit_model_micro_batch(m), SB);
            else
                ck_assert_int_eq(vit_model_micro_batch(m), sizes[k]);
            const vit_real *g = vit_model_grads(m);
            double worst = 0;
            for (size_t i = 0; i < n; i++)
                worst = fmax(worst, fabs(g[i] - ref[i]));
            ck_assert_msg(worst <= 1e-12 * gmax, "%d threads, pieces of %d: gradient off by %g "
                          "(max %g)", threads, sizes[k], worst, gmax);
            ck_assert_double_le(fabs(l - ref_loss), 1e-13 * fabs(ref_loss));
            if (whole_correct < 0)
                whole_correct = correct;
            ck_assert_int_eq(correct, whole_correct);
        }
    }
    ck_assert_int_eq(vit_model_set_micro_batch(m, -1), VIT_EINVAL);
    ck_assert_int_eq(vit_model_set_micro_batch(NULL, 2), VIT_EINVAL);
    ck_assert_int_eq(vit_model_micro_batch(NULL), 0);
    vit_set_threads(1);
    free(ref);
    free(images);
    vit_tape_free(t);
    vit_model_free(m);
}
END_TEST

/* The automatic pieces of a model whose slice would not fit in 24 MiB of
 * tape (a 16x16 grid of width 16, whose attention maps make most of its
 * tape, at little cost to compute): the slice of 24 runs in pieces, each of at most the
 * images that fit (measured here on a tape of our own: 24 MiB over the
 * difference between 1 and 3 images), the same choice for a second model
 * whatever its images, and gradients as the whole slice's up to rounding. */
START_TEST(test_train_grads_pieces_auto)
{
    vit_config cfg;
    vit_config_default(&cfg);
    cfg.image_height = cfg.image_width = 16;
    cfg.channels = 1;
    cfg.classes = 4;
    cfg.patch = 1;
    cfg.patch_stride = 0;
    cfg.patch_pad = 0;
    cfg.dim = 16;
    cfg.depth = 2;
    cfg.heads = 2;
    cfg.mlp = 32;
    cfg.pool = VIT_POOL_MEAN;
    enum { B = 24 };
    vit_real *images[2];
    vit_model *m[2] = {filled_model(&cfg, 5, &images[0], B), filled_model(&cfg, 6, &images[1], B)};
    int labels[B];
    for (int i = 0; i < B; i++)
        labels[i] = i % 4;
    ck_assert_int_eq(vit_set_threads(1), VIT_OK);
    double l[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(vit_model_train_grads(m[i], images[i], labels, B, 0, &l[i], NULL), VIT_OK);
    int piece = vit_model_micro_batch(m[0]);
    ck_assert_int_eq(vit_model_micro_batch(m[1]), piece);
    size_t n = vit_model_param_count(m[0]);
    vit_real *g = gc_zeros(n);
    memcpy(g, vit_model_grads(m[0]), n * sizeof *g);

    /* What 1 and 3 images take on a tape, as the model's probe measures
     * (this forward adds to the model's gradients: copied above). */
    size_t used[2];
    for (int i = 0; i < 2; i++) {
        vit_tape *t = vit_tape_new();
        int nb = i ? 3 : 1;
        vit_tensor *z = vit_model_forward(m[0], t, images[0], nb, 1);
        ck_assert_int_eq(vit_tape_backward(t, vit_op_cross_entropy(t, z, labels, 0, NULL)), VIT_OK);
        used[i] = vit_tape_used_bytes(t);
        vit_tape_free(t);
    }
    size_t per = (used[1] - used[0]) / 2;
    printf("pieces: %zu bytes of tape an image, pieces of %d of a slice of %d\n", per, piece, B);
    ck_assert_int_gt(piece, 1);
    ck_assert_int_lt(piece, B);
    double fit = (double)((size_t)24 << 20) / (double)per;
    ck_assert_msg(fabs(piece - fit) <= 1, "pieces of %d where %.2f images fit", piece, fit);

    /* The same step as one slice, up to rounding. */
    ck_assert_int_eq(vit_model_set_micro_batch(m[0], B), VIT_OK);
    double whole;
    ck_assert_int_eq(vit_model_train_grads(m[0], images[0], labels, B, 0, &whole, NULL), VIT_OK);
    double worst = 0, gmax = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(g[i] - vit_model_grads(m[0])[i]));
        gmax = fmax(gmax, fabs(g[i]));
    }
    ck_assert_msg(worst <= (sizeof(vit_real) == 8 ? 1e-12 : 1e-5) * gmax,
                  "pieces against the whole slice: off by %g (max %g)", worst, gmax);
    ck_assert_double_le(fabs(whole - l[0]), (sizeof(vit_real) == 8 ? 1e-13 : 1e-6) * whole);
    free(g);
    for (int i = 0; i < 2; i++) {
        free(images[i]);
        vit_model_free(m[i]);
    }
}
END_TEST

/* ---- one model, several modes ----------------------------------------- */

/* A model of cfg with parameters and images drawn from seed. */
static vit_model *filled_model(const vit_config *cfg, uint64_t seed, vit_real **images, int batch)
{
    vit_model *m = vit_model_new(cfg);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    gc_fill(vit_model_params(m), vit_model_param_count(m), &seed, 0.5);
    size_t n = (size_t)batch * cfg->image_height * cfg->image_width * cfg->channels;
    *images = gc_zeros(n);
    gc_fill(*images, n, &seed, 1.0);
    return m;
}

/* What vit_train_extras.grads_ready saw: per value, the reports covering it
 * and the gradient when reported; the blocks' layers in report order. */
typedef struct {
    vit_model *m;
    int *seen, layers[64], nlayers, idle;
    vit_real *at_report;
} ready_log;

static void log_ready(void *ctx, size_t offset, size_t count)
{
    ready_log *L = ctx;
    const vit_real *g = vit_model_grads(L->m);
    if (count == 0) { /* a step of several slices waiting for its workers */
        L->idle++;
        return;
    }
    for (size_t i = offset; i < offset + count; i++) {
        L->seen[i]++;
        L->at_report[i] = g[i];
    }
    for (int k = 0; k < vit_model_tensor_count(L->m); k++) {
        const vit_model_tensor *tt = vit_model_tensor_at(L->m, k);
        if (tt->offset <= offset && offset < tt->offset + tt->size &&
            strncmp(tt->name, "blocks.", 7) == 0 && L->nlayers < 64)
            L->layers[L->nlayers++] = atoi(tt->name + 7);
    }
}

/* Every value of the model's gradient reported exactly once, and final
 * when it was (the value then is the one the step ended with). */
static void check_reports(const ready_log *L, size_t n)
{
    const vit_real *g = vit_model_grads(L->m);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(L->seen[i] == 1, "value %zu reported %d times", i, L->seen[i]);
        ck_assert_msg(L->at_report[i] == g[i], "value %zu changed after its report", i);
    }
}

/* On `threads` slices: the step without reports, then `reps` steps with
 * them (each on the buffers of the one before): the same loss and the
 * gradients bitwise, every value reported once and final when reported.
 * ref [n]: scratch. */
static void check_step_reports(ready_log *L, const vit_real *images, const int *labels,
                               int threads, int reps, vit_real *ref)
{
    vit_model *m = L->m;
    size_t n = vit_model_param_count(m);
    const vit_real *g = vit_model_grads(m);
    vit_train_extras ex = {.grads_ready = log_ready, .ready_ctx = L};
    double l0, l1;
    ck_assert_int_eq(vit_set_threads(threads), VIT_OK);
    ck_assert_int_eq(vit_model_train_grads(m, images, labels, SB, 0, &l0, NULL), VIT_OK);
    memcpy(ref, g, n * sizeof *ref);
    for (int rep = 0; rep < reps; rep++) {
        memset(L->seen, 0, n * sizeof *L->seen);
        L->nlayers = 0;
        ck_assert_int_eq(vit_model_train_grads_ex(m, images, labels, SB, 0, &ex, &l1, NULL),
                         VIT_OK);
        ck_assert(l1 == l0 && memcmp(ref, g, n * sizeof *g) == 0);
        check_reports(L, n);
    }
}

/* The reports a step makes as the backward goes (to sum the gradients
 * over the ranks meanwhile): on one slice, every value once, final when
 * reported, the last block's before the first's, and the gradients as
 * without reports; on 2 and 3 slices (5 + 5 and 3 + 3 + 4 images: the
 * slices' sum made chunk by chunk as all of them report it) every value
 * once too, final when reported, and the gradients bitwise those of the
 * same slices without reports.  With recompute (each block a checkpoint,
 * run again in the backward) the blocks' parameters are reported from the
 * recomputation's backward: the same on 1, 2 and 3 slices.  With slices in
 * pieces of 2 images (_i = 2, 3) the reports come from each slice's last
 * piece, after which its gradients are whole: the same checks hold. */
START_TEST(test_train_grads_ready)
{
    vit_config cfg;
    int rc = _i % 2, pieces = _i >= 2; /* pieces: slices of 2 images a piece */
    tiny_config(&cfg, rc ? VIT_POOL_MEAN : VIT_POOL_CLS);
    cfg.depth = 2 + rc;
    cfg.dim = 24; /* 11,699 and 17,355 parameters: 6 and 9 chunks on several slices */
    cfg.mlp = 64;
    vit_real *images;
    vit_model *m = filled_model(&cfg, 79, &images, SB);
    ck_assert_int_eq(vit_model_set_recompute(m, rc), VIT_OK);
    ck_assert_int_eq(vit_model_set_micro_batch(m, pieces ? 2 : 0), VIT_OK);
    size_t n = vit_model_param_count(m);
    int labels[SB];
    for (int i = 0; i < SB; i++)
        labels[i] = i % 3;
    vit_real *ref = gc_zeros(n), *one = gc_zeros(n);
    ready_log L = {.m = m, .seen = calloc(n, sizeof(int)), .at_report = gc_zeros(n)};
    ck_assert_ptr_nonnull(L.seen);
    check_step_reports(&L, images, labels, 1, 1, one);
    ck_assert_int_gt(L.nlayers, cfg.depth); /* every block's, recomputed or not */
    ck_assert_int_eq(L.layers[0], cfg.depth - 1);
    ck_assert_int_eq(L.layers[L.nlayers - 1], 0);
    for (int k = 1; k < L.nlayers; k++)
        ck_assert_int_le(L.layers[k], L.layers[k - 1]);
    for (int threads = 2; threads <= 3; threads++) {
        check_step_reports(&L, images, labels, threads, 2, ref);
        ck_assert(memcmp(ref, one, n * sizeof *ref) != 0); /* other sums than 1 slice's */
    }
    vit_set_threads(1);
    free(L.seen);
    free(L.at_report);
    free(ref);
    free(one);
    free(images);
    vit_model_free(m);
}
END_TEST

START_TEST(test_nograd_forward_is_bitwise)
{
    /* Shapes: the tiny model with either pool; an RGB model with 3x3
     * patches, 3 blocks and 70 images, more than one 64-image piece of the
     * evaluation forward. */
    vit_config cfg;
    tiny_config(&cfg, _i % 2 ? VIT_POOL_MEAN : VIT_POOL_CLS);
    int batch = 5;
    if (_i >= 2) {
        cfg.image_height = cfg.image_width = 6;
        cfg.channels = 3;
        cfg.patch = 3;
        cfg.dim = 12;
        cfg.depth = 3;
        cfg.heads = 3;
        cfg.mlp = 20;
        cfg.classes = 4;
        batch = 70;
    }
    vit_real *images;
    vit_model *m = filled_model(&cfg, 300 + (uint64_t)_i, &images, batch);
    vit_tape *train = vit_tape_new(), *eval = vit_tape_new();
    vit_tensor *zt = vit_model_forward(m, train, images, batch, 1);
    vit_tensor *ze = vit_model_forward(m, eval, images, batch, 0);
    ck_assert_msg(zt && ze, "%s", vit_last_error());
    ck_assert(zt->requires_grad && !ze->requires_grad);
    ck_assert_int_eq(vit_tape_op_count(eval), 0); /* nothing recorded */
    ck_assert_int_gt(vit_tape_op_count(train), 10);
    ck_assert_uint_eq(zt->size, ze->size);
    ck_assert_msg(memcmp(zt->data, ze->data, zt->size * sizeof *zt->data) == 0,
                  "shape %d: no-grad logits differ from the training forward's", _i);
    /* The maps too: the training tape's pointers against the copies. */
    int T = (cfg.image_height / cfg.patch) * (cfg.image_width / cfg.patch) + 1;
    size_t nmap = (size_t)batch * cfg.heads * T * T;
    vit_real *maps = gc_zeros(nmap * cfg.depth);
    vit_tape_reset(train);
    zt = vit_model_forward(m, train, images, batch, 1);
    for (int l = 0; l < cfg.depth; l++)
        memcpy(maps + nmap * l, vit_model_attention_maps(m, l), nmap * sizeof *maps);
    vit_tape_reset(eval);
    ze = vit_model_forward(m, eval, images, batch, 0);
    for (int l = 0; l < cfg.depth; l++)
        ck_assert_msg(memcmp(maps + nmap * l, vit_model_attention_maps(m, l),
                             nmap * sizeof *maps) == 0, "shape %d: maps of layer %d differ", _i, l);
    /* And with recompute the evaluation is the same again. */
    vit_model *mr;
    vit_real *images2;
    mr = filled_model(&cfg, 300 + (uint64_t)_i, &images2, batch);
    ck_assert_int_eq(vit_model_set_recompute(mr, 1), VIT_OK);
    ck_assert_int_eq(vit_model_recompute(mr), 1);
    ck_assert_int_eq(vit_model_set_recompute(mr, 2), VIT_EINVAL); /* 0 or 1 only */
    ck_assert_int_eq(vit_model_recompute(mr), 1);
    ck_assert_int_eq(vit_model_set_recompute(NULL, 0), VIT_EINVAL);
    vit_tape_reset(eval);
    vit_tensor *zr = vit_model_forward(mr, eval, images2, batch, 0);
    ck_assert_ptr_nonnull(zr);
    ck_assert(memcmp(zt->data, zr->data, zt->size * sizeof *zt->data) == 0);
    free(maps);
    free(images);
    free(images2);
    vit_tape_free(train);
    vit_tape_free(eval);
    vit_model_free(m);
    vit_model_free(mr);
}
END_TEST

START_TEST(test_recompute_is_bitwise)
{
    /* The same batch through vit_model_train_grads with and without
     * recompute, on 1 and 2 threads: gradients and loss bitwise equal. */
    vit_config cfg;
    tiny_config(&cfg, _i ? VIT_POOL_MEAN : VIT_POOL_CLS);
    cfg.depth = 3;
    const int batch = 6;
    int labels[6] = {0, 1, 2, 2, 1, 0};
    vit_real *images, *images2;
    vit_model *plain = filled_model(&cfg, 400, &images, batch);
    vit_model *rec = filled_model(&cfg, 400, &images2, batch);
    ck_assert_int_eq(vit_model_set_recompute(rec, 1), VIT_OK);
    size_t n = vit_model_param_count(plain);
    for (int threads = 1; threads <= 2; threads++) {
        ck_assert_int_eq(vit_set_threads(threads), VIT_OK);
        double lp, lr;
        int cp, cr;
        ck_assert_int_eq(vit_model_train_grads(plain, images, labels, batch, (vit_real)0.1, &lp,
                                               &cp), VIT_OK);
        ck_assert_int_eq(vit_model_train_grads(rec, images, labels, batch, (vit_real)0.1, &lr,
                                               &cr), VIT_OK);
        ck_assert_msg(lp == lr, "%d threads: loss %.17g vs %.17g", threads, lp, lr);
        ck_assert_int_eq(cp, cr);
        const vit_real *gp = vit_model_grads(plain), *gr = vit_model_grads(rec);
        double gmax = 0;
        for (size_t i = 0; i < n; i++)
            gmax = fmax(gmax, fabs(gp[i]));
        ck_assert(gmax > 1e-6); /* a real gradient, not zeros on both sides */
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(memcmp(&gp[i], &gr[i], sizeof *gp) == 0,
                          "%d threads: gradient %zu differs: %.17g vs %.17g", threads, i,
                          (double)gp[i], (double)gr[i]);
    }
    /* One tape, forward and backward, on the digits model with 16 images:
     * recompute holds well under half of the plain tape. */
    vit_model_free(plain);
    vit_model_free(rec);
    free(images);
    free(images2);
    vit_config_default(&cfg);
    int dl[16];
    for (int i = 0; i < 16; i++)
        dl[i] = i % 10;
    plain = filled_model(&cfg, 401, &images, 16);
    rec = filled_model(&cfg, 401, &images2, 16);
    ck_assert_int_eq(vit_model_set_recompute(rec, 1), VIT_OK);
    vit_tape *tp = vit_tape_new(), *tr = vit_tape_new();
    for (int step = 0; step < 2; step++) {
        vit_model *ms[2] = {plain, rec};
        vit_tape *ts[2] = {tp, tr};
        for (int k = 0; k < 2; k++) {
            vit_tape_reset(ts[k]);
            vit_tensor *loss = vit_op_cross_entropy(ts[k], vit_model_forward(ms[k], ts[k], images,
                                                    16, 1), dl, 0, NULL);
            ck_assert_int_eq(vit_tape_backward(ts[k], loss), VIT_OK);
        }
    }
    printf("tape bytes, digits model on 16 images: plain %zu, recompute %zu\n",
           vit_tape_bytes(tp), vit_tape_bytes(tr));
    ck_assert_uint_lt(2 * vit_tape_bytes(tr), vit_tape_bytes(tp));
    vit_set_threads(1);
    free(images);
    free(images2);
    vit_tape_free(tp);
    vit_tape_free(tr);
    vit_model_free(plain);
    vit_model_free(rec);
}
END_TEST

/* Bytes a training step needs on the tape, from the shapes alone: the
 * values of every op's output and what its backward reads (layer-norm
 * statistics, the attention cache, the patch matrix, the softmax), each
 * rounded up to the arena's 64 bytes. */
static size_t step_bytes(const vit_config *c, int B)
{
#define R64(n) ((((size_t)(n) * sizeof(vit_real)) + 63) & ~(size_t)63)
    /* The patch grid as the model tiles it (overlapping patches give more
     * tokens than image / patch); each token's im2col row is patch^2 *
     * channels wide whatever the stride. */
    vit_patch_shape ps = vit_config_patch_shape(c);
    int gh = 0, gw = 0;
    ck_assert_int_eq(vit_patch_grid(&ps, &gh, &gw), VIT_OK);
    size_t N = (size_t)gh * (size_t)gw, T = N + 1;
    size_t rows = (size_t)B * T, D = (size_t)c->dim, M = (size_t)c->mlp;
    size_t pdim = (size_t)c->patch * c->patch * c->channels;
    vit_mha mha = {.batch = B, .n_q = (int)T, .n_k = (int)T, .d_model = c->dim,
                   .heads = c->heads, .has_bias = 1};
    size_t front = R64(B * N * D) + R64(B * N * pdim) + 2 * R64(rows * D);
    size_t block = R64(rows * D) + R64(2 * rows)                 /* ln1 */
                 + R64(rows * D) + R64(vit_mha_cache_size(&mha)) /* attention */
                 + R64(rows * D)                                 /* add */
                 + R64(rows * D) + R64(2 * rows)                 /* ln2 */
                 + 2 * R64(rows * M)                             /* linear, GELU */
                 + R64(rows * D);                                /* linear + residual */
    size_t end = R64(rows * D) + R64(2 * rows) + R64(B * D) + R64(B * c->classes) /* head */
               + R64(1) + R64(B * c->classes);                   /* loss, softmax */
    return front + (size_t)c->depth * block + end;
#undef R64
}

START_TEST(test_tape_memory_bound)
{
    /* The digits model on 16 images: after a step the tape holds the
     * values and saved tensors, plus the few gradients in flight (at most
     * four [rows, max(D, M)] buffers), the attention backward's scratch and
     * small records.  A gradient kept per activation (the old design) adds
     * about as much again as the values and fails this. */
    vit_config cfg;
    vit_config_default(&cfg);
    const int B = 16;
    int labels[16];
    for (int i = 0; i < B; i++)
        labels[i] = i % 10;
    vit_real *images;
    vit_model *m = filled_model(&cfg, 500, &images, B);
    vit_tape *t = vit_tape_new();
    for (int step = 0; step < 3; step++) {
        vit_tape_reset(t);
        vit_model_zero_grads(m);
        vit_tensor *loss = vit_op_cross_entropy(t, vit_model_forward(m, t, images, B, 1), labels, 0,
                                                NULL);
        ck_assert_int_eq(vit_tape_backward(t, loss), VIT_OK);
    }
    size_t rows = (size_t)B * 17, wide = (size_t)(cfg.mlp > cfg.dim ? cfg.mlp : cfg.dim);
    vit_mha mha = {.batch = B, .n_q = 17, .n_k = 17, .d_model = cfg.dim, .heads = cfg.heads,
                   .has_bias = 1};
    size_t values = step_bytes(&cfg, B);
    size_t bound = values + 4 * rows * wide * sizeof(vit_real)
                 + vit_mha_work_size(&mha) * sizeof(vit_real) + 64 * 1024;
    size_t have = vit_tape_bytes(t);
    printf("tape bytes: %zu, values and saved %zu, bound %zu\n", have, values, bound);
    ck_assert_msg(have <= bound, "the tape holds %zu bytes, more than the %zu the shapes need",
                  have, bound);
    ck_assert_msg(have >= values, "the tape holds %zu bytes, less than its values (%zu)?", have,
                  values);
    free(images);
    vit_tape_free(t);
    vit_model_free(m);
}
END_TEST

static Suite *model_suite(void)
{
    Suite *s = suite_create("model");
    TCase *tg = tcase_create("gradient");
    tcase_set_timeout(tg, 120);
    tcase_add_loop_test(tg, test_model_gradient, 0, 7);
    tcase_add_test(tg, test_forward_shapes_and_maps);
    tcase_add_test(tg, test_forward_eval_threads);
    tcase_add_test(tg, test_lsa_and_overlap_model);
    tcase_add_loop_test(tg, test_train_grads_slices, 0, 3);
    tcase_add_test(tg, test_train_grads_pieces);
    tcase_add_test(tg, test_train_grads_pieces_auto);
    tcase_add_test(tg, test_train_grads_extras);
    tcase_add_loop_test(tg, test_train_grads_ready, 0, 4);
    tcase_add_loop_test(tg, test_nograd_forward_is_bitwise, 0, 4);
    tcase_add_loop_test(tg, test_recompute_is_bitwise, 0, 2);
    tcase_add_test(tg, test_tape_memory_bound);
    suite_add_tcase(s, tg);
    TCase *tc = tcase_create("config_layout");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_param_count_and_groups);
    tcase_add_test(tc, test_macs_by_hand);
    tcase_add_test(tc, test_config_file_is_default);
    tcase_add_test(tc, test_config_round_trip);
    tcase_add_test(tc, test_config_format_shortest);
    tcase_add_test(tc, test_config_augment_ranges);
    tcase_add_test(tc, test_config_bad_text);
    tcase_add_test(tc, test_config_repeated_key);
    suite_add_tcase(s, tc);
    TCase *tk = tcase_create("checkpoint");
    tcase_set_timeout(tk, 60);
    tcase_add_test(tk, test_run_save_load);
    tcase_add_test(tk, test_resume_shape_mismatch);
    suite_add_tcase(s, tk);
    return s;
}

int main(void)
{
    vit_set_threads(1);
    SRunner *sr = srunner_create(model_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/*
 * convmlp - a user's own architecture in one file: a small convolutional
 * network (not a transformer) written on the tape and described to the
 * library as a vit_arch (vit/arch.h), so that vit_trainer trains it with
 * everything it does for the ViT.  examples/example_arch.c registers and
 * trains it; tests/test_mixed.c checks its bf16 step.
 *
 * The network, stage by stage (the widths are its own config keys, so
 * `arch = convmlp` and `width1 = 24` in a config file work like the ViT's
 * keys; docs/extending.md walks through it):
 *   images [B, H, W, C]
 *     -> 3x3 convolution (stride 1, padding 1), GELU        [B, H, W, width1]
 *     -> 2x2 convolution (stride 2), GELU                   [B, H/2, W/2, width2]
 *     -> mean over the H/2 x W/2 positions                  [B, width2]
 *     -> linear, GELU                                       [B, hidden]
 *     -> linear head                                        logits [B, classes]
 * Every row of its tensor table has a shape of its own stage.
 */
#include "convmlp.h"

#include <stddef.h>
#include <stdio.h>

/* ---- the architecture: one config struct, one key table ------------------ */

typedef struct convmlp_config {
    int width1, width2, hidden;
} convmlp_config;

static const vit_arch_key convmlp_keys[] = {
    {"width1", VIT_KEY_INT, offsetof(convmlp_config, width1), 1, 4096, "16",
     "channels of the 3x3 convolution", NULL, NULL},
    {"width2", VIT_KEY_INT, offsetof(convmlp_config, width2), 1, 4096, "32",
     "channels of the 2x2 stride-2 convolution", NULL, NULL},
    {"hidden", VIT_KEY_INT, offsetof(convmlp_config, hidden), 1, 65536, "64",
     "width of the MLP after the pooling", NULL, NULL},
};

/* The tensors, in layout (and checkpoint) order. */
enum { CONV1_W, CONV1_B, CONV2_W, CONV2_B, FC_W, FC_B, HEAD_W, HEAD_B, NTENSORS };

static int convmlp_check(const vit_config *cfg)
{
    if (cfg->image_height % 2 || cfg->image_width % 2)
        return vit_set_error(VIT_EINVAL, "convmlp: its stride-2 stage needs an even image side, "
                             "not %dx%d", cfg->image_height, cfg->image_width);
    return VIT_OK;
}

static int convmlp_build(const vit_config *cfg, vit_params *p, void **state)
{
    const convmlp_config *a = vit_config_arch_data(cfg);
    const int C = cfg->channels, K = cfg->classes;
    const double std = cfg->init_std;
    *state = NULL; /* the indices are the enum above: nothing to keep */
    struct { const char *name; int ndim, d0, d1, init, decay; } rows[NTENSORS] = {
        {"conv1.w", 2, 9 * C, a->width1, VIT_INIT_NORMAL, 1},
        {"conv1.b", 1, a->width1, 0, VIT_INIT_ZERO, 0},
        {"conv2.w", 2, 4 * a->width1, a->width2, VIT_INIT_NORMAL, 1},
        {"conv2.b", 1, a->width2, 0, VIT_INIT_ZERO, 0},
        {"fc.w", 2, a->width2, a->hidden, VIT_INIT_NORMAL, 1},
        {"fc.b", 1, a->hidden, 0, VIT_INIT_ZERO, 0},
        {"head.w", 2, a->hidden, K, VIT_INIT_NORMAL, 1},
        {"head.b", 1, K, 0, VIT_INIT_ZERO, 0},
    };
    for (int i = 0; i < NTENSORS; i++) {
        int shape[2] = {rows[i].d0, rows[i].d1};
        int ix = vit_params_add(p, rows[i].name, rows[i].ndim, shape, rows[i].init,
                                rows[i].init == VIT_INIT_NORMAL ? std : 0, rows[i].decay);
        if (ix < 0)
            return ix;
    }
    return VIT_OK;
}

/* A convolution as a patch embedding (vit/embeddings.h) whose [B, N, D]
 * output is read back as the [B, H', W', D] map it is. */
static vit_tensor *conv(const vit_arch_run *r, vit_tensor *x, int k, int stride, int pad, int w,
                        int b, int out)
{
    const vit_tensor *in = x;
    vit_patch_shape ps = {.batch = r->batch, .height = in ? in->shape[1] : 0,
                          .width = in ? in->shape[2] : 0, .channels = in ? in->shape[3] : 0,
                          .patch = k, .dim = out, .stride = stride, .pad = pad};
    int gh = 0, gw = 0;
    vit_patch_grid(&ps, &gh, &gw);
    vit_tensor *y = vit_op_gelu(r->tape, vit_op_patch_embed(r->tape, &ps, x, vit_arch_param(r, w),
                                                            vit_arch_param(r, b)));
    int shape[4] = {r->batch, gh, gw, out};
    return vit_op_reshape(r->tape, y, 4, shape);
}

static vit_tensor *convmlp_forward(const vit_arch_run *r)
{
    const convmlp_config *a = vit_config_arch_data(r->cfg);
    vit_tensor *x = conv(r, r->images, 3, 1, 1, CONV1_W, CONV1_B, a->width1);
    x = conv(r, x, 2, 2, 0, CONV2_W, CONV2_B, a->width2);
    int tokens[3] = {r->batch, (r->cfg->image_height / 2) * (r->cfg->image_width / 2), a->width2};
    x = vit_op_mean_tokens(r->tape, vit_op_reshape(r->tape, x, 3, tokens), 0); /* [B, width2] */
    x = vit_op_gelu(r->tape, vit_op_linear(r->tape, x, vit_arch_param(r, FC_W),
                                           vit_arch_param(r, FC_B)));
    return vit_op_linear(r->tape, x, vit_arch_param(r, HEAD_W), vit_arch_param(r, HEAD_B));
}

static void convmlp_describe(const vit_config *cfg, vit_arch_info *info)
{
    const convmlp_config *a = vit_config_arch_data(cfg);
    size_t H = (size_t)cfg->image_height, W = (size_t)cfg->image_width;
    info->macs = H * W * 9 * (size_t)cfg->channels * (size_t)a->width1
               + (H / 2) * (W / 2) * 4 * (size_t)a->width1 * (size_t)a->width2
               + (size_t)a->width2 * (size_t)a->hidden + (size_t)a->hidden * (size_t)cfg->classes;
    /* no residual stages (drop_path is refused), no attention maps */
}

/* Exported in PyTorch's layout: Conv2d weights [out, in, k, k], Linear
 * weights transposed, biases as they are. */
static int convmlp_export(const vit_config *cfg, int i, const vit_param_tensor *t,
                          vit_arch_export *e)
{
    (void)cfg;
    static const char *const names[NTENSORS] = {"conv1.weight", "conv1.bias", "conv2.weight",
                                                "conv2.bias",   "fc.weight",  "fc.bias",
                                                "head.weight",  "head.bias"};
    snprintf(e->name, sizeof e->name, "%s", names[i]);
    if (i == CONV1_W || i == CONV2_W) {
        e->op = VIT_EXPORT_CONV;
        e->ndim = 4;
        e->kernel = i == CONV1_W ? 3 : 2;
    } else if (t->ndim == 2) {
        e->op = VIT_EXPORT_TRANSPOSE;
    }
    return VIT_OK;
}

/* Its bf16 step (precision = bf16): the weight matrices its products read,
 * each [rows, cols] as build made it, packed once per step.  conv1 reads
 * the images, which get no gradient: its weight is read as it is only; the
 * others also transposed, for their input's gradient.  (Without this hook
 * the library refuses bf16 for convmlp; auto trains it in fp32.) */
static int convmlp_bf16_weights(const vit_config *cfg, const void *state, const vit_params *p,
                                vit_arch_bf16 *set)
{
    (void)cfg;
    (void)state;
    static const int weights[] = {CONV1_W, CONV2_W, FC_W, HEAD_W};
    for (int i = 0; i < 4; i++) {
        const vit_param_tensor *t = vit_params_tensor(p, weights[i]);
        int rc = vit_arch_bf16_add(set, weights[i], 0, t->shape[0], t->shape[1], t->shape[1],
                                   weights[i] == CONV1_W ? VIT_ARCH_BF16_AS_IS
                                                         : VIT_ARCH_BF16_BOTH);
        if (rc != VIT_OK)
            return rc;
    }
    return VIT_OK;
}

static const vit_arch convmlp = {
    .name = "convmlp",
    .summary = "two convolutions, mean pooling and an MLP (examples/example_arch.c)",
    .keys = convmlp_keys,
    .nkeys = 3,
    .config_size = sizeof(convmlp_config),
    .check = convmlp_check,
    .build = convmlp_build,
    .forward = convmlp_forward,
    .describe = convmlp_describe,
    .export_tensor = convmlp_export,
    .export_layout = "example.convmlp",
    .bf16_weights = convmlp_bf16_weights,
};

const vit_arch *convmlp_arch(void) { return &convmlp; }


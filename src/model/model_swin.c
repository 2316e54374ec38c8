/*
 * The Swin Transformer (Liu et al. 2021), the built-in architecture "swin"
 * (vit/arch.h): its keys and recipe rule, its tensors, its forward on the
 * tape, and torchvision's names for them, laid out like torchvision's
 * SwinTransformer (v1) so that an export loads there.
 *
 * Network: optionally a convolutional stem (stem.h: a 3x3 convolution of
 * `stem` channels and GELU, then optionally a 4x4 one at stride 2 of
 * `stem2` channels and GELU, the ViT's); patch embedding (a P x P
 * convolution at stride P over the image or the stem's last map, as a
 * linear map of each patch, then LayerNorm); stages s = 0..S-1 of depths[s]
 * blocks of width dim * 2^s and heads[s] heads; a block is
 *     x = x + proj(WindowAttention(LN1(x)))      (shifted every other block)
 *     x = x + fc2(GELU(fc1(LN2(x))))
 * with a learned relative position bias per head ((2Mh-1)(2Mw-1) table, the
 * window Mh rows by Mw columns: square unless window_w differs); between
 * stages patch merging (the 2 x 2 neighbours concatenated in torchvision's
 * order, LayerNorm over 4C, a linear map 4C -> 2C without bias); then
 * LayerNorm, the mean over the tokens, the head.
 *
 * Tokens are [B, gh*gw, C], numbered row by row over the grid: the memory
 * layout of torchvision's [B, H, W, C].  Block j of a stage shifts its
 * windows by Mh/2 rows and Mw/2 columns when j is odd, on each axis that
 * the window does not cover (torchvision drops the shift per axis: a
 * 7 x 14 grid in windows of 7 x 7 shifts 0 rows and 3 columns).  Every
 * grid's rows must be a multiple of Mh and its columns of Mw and, before a
 * merge, even (torchvision would pad; we refuse).
 *
 * Parameters (in this order; C_s = dim * 2^s, H_s heads, Mh x Mw the window,
 * R = mlp_ratio, K classes, Cin the image's channels, or stem2's or
 * stem's with a stem):
 *   stem.w [9*C, stem]  stem.b [stem]            (stem > 0 only)
 *   stem2.w [16*stem, stem2]  stem2.b [stem2]    (stem2 > 0 only)
 *   patch.w [P*P*Cin, C_0]  patch.b [C_0]  patch.ln.g, patch.ln.b [C_0]
 *   s.j.{ln1.g, ln1.b [C_s], rel [(2Mh-1)(2Mw-1), H_s], qkv.w [C_s, 3C_s],
 *        qkv.b [3C_s], proj.w [C_s, C_s], proj.b [C_s],
 *        ln2.g, ln2.b [C_s], fc1.w [C_s, R C_s], fc1.b [R C_s],
 *        fc2.w [R C_s, C_s], fc2.b [C_s]}          block j of stage s
 *   s.merge.{w [4C_s, 2C_s], ln.g, ln.b [4C_s]}    after stage s < S-1
 *   ln.g, ln.b [C_{S-1}]  head.w [C_{S-1}, K]  head.b [K]
 * Linear weights are [in, out] (y = x W), PyTorch's transposed.  The order
 * is that of torchvision's state_dict, so an export keeps it.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch_internal.h"
#include "tape_internal.h"
#include "window_internal.h"
#include "error.h"
#include "mixed.h"
#include "stem.h"
#include "vit/arch.h"
#include "vit/attention.h"
#include "vit/embeddings.h"
#include "vit/model.h"

#define SWIN_LN_EPS 1e-5 /* torchvision's LayerNorm eps */

#define SWIN_MAX_STAGES 4

/* The arch's config (a vit_config's arch_cfg: the keys' fields), with the
 * data's shape and init_std, which swin_of copies from the vit_config. */
typedef struct swin_cfg {
    int image_height, image_width, channels, classes;
    int patch;      /* P: the patch embedding's kernel and stride */
    int window;     /* Mh: attention windows of Mh rows ... */
    int window_w;   /* Mw: ... by Mw columns (the key follows window) */
    int dim;        /* C: stage 0's width; stage s has C * 2^s */
    int stages;     /* S, 1..SWIN_MAX_STAGES */
    int depths[SWIN_MAX_STAGES]; /* blocks per stage, >= 1 */
    int heads[SWIN_MAX_STAGES];  /* heads per stage, dividing its width */
    int mlp_ratio;  /* MLP hidden width = mlp_ratio * width */
    int stem, stem2; /* the convolutional stem's channels (stem.h), 0: none */
    double init_std;  /* std of the truncated normal linear weights (0.02) */
} swin_cfg;

typedef struct swin swin;

/* A block's tensors, in layout order. */
enum { B_LN1_G, B_LN1_B, B_REL, B_QKV_W, B_QKV_B, B_PROJ_W, B_PROJ_B, B_LN2_G, B_LN2_B,
       B_FC1_W, B_FC1_B, B_FC2_W, B_FC2_B, B_ROWS };
/* The tensors outside the blocks. */
enum { E_STEM_W, E_STEM_B, E_STEM2_W, E_STEM2_B, /* with a stem only */
       E_PATCH_W, E_PATCH_B, E_PATCH_LN_G, E_PATCH_LN_B, E_LN_G, E_LN_B, E_HEAD_W, E_HEAD_B,
       E_ROWS };
enum { M_W, M_LN_G, M_LN_B, M_ROWS };

struct swin {
    swin_cfg cfg;
    vit_params *P;           /* the model's tensors (build adds them) */
    int end[E_ROWS];
    int merge[SWIN_MAX_STAGES][M_ROWS];
    int (*blocks)[B_ROWS];  /* every block of every stage, in order */
};

/* ---- config ------------------------------------------------------------ */

static vit_stem stem_of(const swin_cfg *c)
{
    return (vit_stem){.height = c->image_height, .width = c->image_width,
                      .channels = c->channels, .stem = c->stem, .stem2 = c->stem2};
}

/* What the patches are cut from (the image or the stem's last map). */
static void patch_input(const swin_cfg *c, int *h, int *w, int *ch)
{
    vit_stem st = stem_of(c);
    vit_stem_map(&st, h, w, ch);
}

static void swin_stage_grid(const swin_cfg *c, int s, int *gh, int *gw)
{
    int h, w, ch;
    patch_input(c, &h, &w, &ch);
    *gh = h / c->patch >> s;
    *gw = w / c->patch >> s;
}

static int width_of(const swin_cfg *c, int s) { return c->dim << s; }

/* torchvision's shift along an axis of len tokens whose window side is M
 * (Mh for the rows, Mw for the columns): M/2 on odd blocks unless one
 * window covers that axis.  Each axis decides alone (a 7 x 14 grid in
 * windows of 7 x 7 shifts 0 rows and 3 columns), as torchvision's
 * shifted_window_attention sets shift_size[0] and [1] separately from
 * window_size[0] // 2 and window_size[1] // 2. */
static int shift_of(int j, int len, int M)
{
    return (j % 2 && M < len) ? M / 2 : 0;
}

/* The window as text: "7" when square, "8x7" (rows x columns) when not. */
static const char *window_text(const swin_cfg *c, char *buf, size_t cap)
{
    if (c->window == c->window_w)
        snprintf(buf, cap, "%d", c->window);
    else
        snprintf(buf, cap, "%dx%d", c->window, c->window_w);
    return buf;
}

static int swin_config_check(const swin_cfg *c)
{
    const char *fn = "swin config";
    if (!c)
        return vit_fail(VIT_EINVAL, "%s: NULL", fn);
    if (c->image_height < 1 || c->image_width < 1 || c->channels < 1 || c->classes < 2)
        return vit_fail(VIT_EINVAL, "%s: images %dx%dx%d with %d classes (need sizes >= 1 and "
                        ">= 2 classes)", fn, c->image_height, c->image_width, c->channels,
                        c->classes);
    if (c->stem < 0 || c->stem2 < 0)
        return vit_fail(VIT_EINVAL, "%s: stem %d, stem2 %d (each >= 0)", fn, c->stem, c->stem2);
    vit_stem st = stem_of(c);
    TRY(vit_stem_check(&st));
    int mh, mw, mc;
    vit_stem_map(&st, &mh, &mw, &mc);
    if (c->patch < 1 || mh % c->patch || mw % c->patch)
        return vit_fail(VIT_EINVAL, "%s: patch %d does not divide the %dx%d %s", fn, c->patch,
                        mh, mw, c->stem2 > 0 ? "feature map (stem2 halves the image)" : "images");
    if (c->stages < 1 || c->stages > SWIN_MAX_STAGES)
        return vit_fail(VIT_EINVAL, "%s: %d stages (1..%d)", fn, c->stages, SWIN_MAX_STAGES);
    if (c->window < 1 || c->window_w < 1 || c->dim < 1 || c->mlp_ratio < 1)
        return vit_fail(VIT_EINVAL, "%s: window %d, window_w %d, dim %d, mlp_ratio %d (each "
                        "must be >= 1)", fn, c->window, c->window_w, c->dim, c->mlp_ratio);
    char win[32];
    window_text(c, win, sizeof win);
    if (!(c->init_std >= 0 && isfinite(c->init_std)))
        return vit_fail(VIT_EINVAL, "%s: init_std %g (finite, >= 0)", fn, c->init_std);
    for (int s = 0; s < c->stages; s++) {
        int gh, gw, C = width_of(c, s);
        swin_stage_grid(c, s, &gh, &gw);
        if (c->depths[s] < 1 || c->heads[s] < 1 || C % c->heads[s])
            return vit_fail(VIT_EINVAL, "%s: stage %d has depth %d and %d heads for width %d "
                            "(depth >= 1, heads dividing the width)", fn, s, c->depths[s],
                            c->heads[s], C);
        if (gh < 1 || gw < 1 || gh % c->window || gw % c->window_w)
            return vit_fail(VIT_EINVAL, "%s: stage %d's %dx%d token grid is not a multiple of "
                            "window %s (rows of %d, columns of %d)", fn, s, gh, gw, win,
                            c->window, c->window_w);
        if (s + 1 < c->stages && (gh % 2 || gw % 2))
            return vit_fail(VIT_EINVAL, "%s: stage %d's %dx%d grid is odd: patch merging needs "
                            "it even", fn, s, gh, gw);
    }
    return VIT_OK;
}

/* The rule's line for config c: what its grid, window and stages are. */
static void say_why(const swin_cfg *c, char *why, size_t cap)
{
    if (!why || !cap)
        return;
    int gh, gw, g0h, g0w;
    swin_stage_grid(c, 0, &g0h, &g0w);
    swin_stage_grid(c, c->stages - 1, &gh, &gw);
    char merged[48] = "";
    if (c->stages > 1)
        snprintf(merged, sizeof merged, " (%dx%d after merging)", gh, gw);
    char map[48] = ""; /* the map the patches are cut from, when not the image */
    if (c->stem2 > 0) {
        int mh, mw, mc;
        patch_input(c, &mh, &mw, &mc);
        snprintf(map, sizeof map, " of stem2's %dx%d map", mh, mw);
    }
    char win[32];
    snprintf(why, cap, "patch %d makes a %dx%d grid%s (at most 16x16), window %s divides "
             "it, %d stage%s%s, widths %d..%d, depths %d", c->patch, g0h, g0w, map,
             window_text(c, win, sizeof win),
             c->stages, c->stages > 1 ? "s" : "", merged, c->dim, width_of(c, c->stages - 1),
             c->depths[0]);
    for (int s = 1, n = (int)strlen(why); s < c->stages && n < (int)cap; s++, n = (int)strlen(why))
        snprintf(why + n, cap - (size_t)n, "+%d", c->depths[s]);
}

/* The window side for an axis of len tokens when no square window of 8..4
 * divides both: the largest of 8..4 dividing len, else len itself (one
 * window across that axis: a 2-token axis, or 9, 11, 13, 15). */
static int axis_window(int len)
{
    for (int m = 8; m >= 4; m--)
        if (len % m == 0)
            return m;
    return len;
}

/* The rule: patch 2 if it gives a grid of at most 16 x 16, else the
 * smallest patch that does (with stem2, whose stride 2 already halves the
 * image, of its map and from patch 1: the same grid); the window square,
 * the largest of 8..4 dividing both sides of the grid (7 for 14 x 14), and
 * when none does, chosen per axis (axis_window: 8x7 for 16 x 14, one
 * window over a square grid that 8..4 do not divide, as before); as many
 * stages (at most 3) as the grid halves into multiples of the window's
 * sides;
 * width 32 doubling per stage, one head per 32 channels; depths 2 then 6
 * (most blocks where the tokens are few), 2 for a single stage; MLP ratio
 * 2; the stem as given (swin_rule_stem decides it before).  At 28 x 28
 * without a stem that is 16 M multiply-adds an image, about 1.6 times the
 * ViT's Fashion-MNIST default (10 M), so the recipe's compute budget gives
 * it ~46 epochs; with the stem 18.2 M and 41 epochs. */
static int swin_config_pick(swin_cfg *c, int height, int width, int channels, int classes,
                            int stem, int stem2, char *why, size_t cap)
{
    memset(c, 0, sizeof *c);
    *c = (swin_cfg){.image_height = height, .image_width = width, .channels = channels,
                           .classes = classes, .dim = 32, .mlp_ratio = 2, .stem = stem,
                           .stem2 = stem2, .init_std = 0.02};
    int mh, mw, mc;
    patch_input(c, &mh, &mw, &mc);
    for (int p = stem2 > 0 ? 1 : 2; p <= 16 && !c->patch; p++)
        if (mh % p == 0 && mw % p == 0 && mh / p <= 16 && mw / p <= 16)
            c->patch = p;
    if (!c->patch && mh <= 16 && mw <= 16)
        c->patch = 1;
    if (!c->patch)
        return vit_fail(VIT_EINVAL, "swin recipe: no patch of 1..16 divides %dx%d %s into "
                        "a grid of at most 16x16", mh, mw, stem2 > 0 ? "maps (stem2's)"
                        : "images");
    int gh = mh / c->patch, gw = mw / c->patch;
    for (int m = 8; m >= 4 && !c->window; m--)
        if (gh % m == 0 && gw % m == 0)
            c->window = c->window_w = m;
    if (!c->window) {
        c->window = axis_window(gh);
        c->window_w = axis_window(gw);
    }
    c->stages = 1;
    while (c->stages < 3 && gh % 2 == 0 && gw % 2 == 0 && (gh / 2) % c->window == 0 &&
           (gw / 2) % c->window_w == 0) {
        c->stages++;
        gh /= 2;
        gw /= 2;
    }
    static const int depths[3][3] = {{2}, {2, 6}, {2, 2, 4}};
    for (int s = 0; s < SWIN_MAX_STAGES; s++) { /* and 2 blocks past its stages */
        c->depths[s] = s < c->stages ? depths[c->stages - 1][s] : 2;
        c->heads[s] = width_of(c, s) / 32;
    }
    say_why(c, why, cap);
    return VIT_OK;
}

static size_t swin_macs(const swin_cfg *c)
{
    int gh, gw, mh, mw, mc;
    swin_stage_grid(c, 0, &gh, &gw);
    patch_input(c, &mh, &mw, &mc);
    vit_stem st = stem_of(c);
    size_t n = (size_t)gh * gw;
    size_t macs = vit_stem_macs(&st) + n * c->patch * c->patch * mc * c->dim;
    for (int s = 0; s < c->stages; s++) {
        size_t C = (size_t)width_of(c, s), T = (size_t)c->window * c->window_w;
        swin_stage_grid(c, s, &gh, &gw);
        n = (size_t)gh * gw;
        /* qkv, proj, fc1, fc2; scores and the weighted sum: 2 T C per token */
        macs += c->depths[s] * n * (4 * C * C + 2 * C * C * c->mlp_ratio + 2 * T * C);
        if (s + 1 < c->stages)
            macs += n / 4 * 4 * C * 2 * C;
    }
    return macs + (size_t)width_of(c, c->stages - 1) * c->classes;
}

/* ---- layout ------------------------------------------------------------ */

static int add(swin *m, const char *name, int ndim, int d0, int d1, int init, double scale,
               int decay)
{
    int shape[2] = {d0, d1};
    return vit_params_add(m->P, name, ndim, shape, init, scale, decay);
}

#define TRYIX(dst, call)                                                       \
    do {                                                                       \
        int ix_ = (call);                                                      \
        if (ix_ < 0)                                                           \
            return ix_;                                                        \
        (dst) = ix_;                                                           \
    } while (0)

/* torchvision's init: linear weights truncated normal (std 0.02) and zero
 * biases, the relative position tables likewise, LayerNorms 1 and 0, the
 * patch convolution PyTorch's default (uniform within 1/sqrt(fan_in)), and
 * so the stem's convolutions, which torchvision would make as Conv2d too.
 * Decay on the weight matrices only. */
static int layout(swin *m)
{
    const swin_cfg *c = &m->cfg;
    int mh, mw, Cin;
    patch_input(c, &mh, &mw, &Cin);
    double sd = c->init_std, fan = 1.0 / sqrt((double)c->patch * c->patch * Cin);
    int C0 = c->dim, N = VIT_INIT_NORMAL, U = VIT_INIT_UNIFORM;
    if (c->stem > 0) { /* first: torchvision's features.0.stem (torch_name) */
        double f1 = 1.0 / sqrt(9.0 * c->channels), f2 = 1.0 / sqrt(16.0 * c->stem);
        TRYIX(m->end[E_STEM_W], add(m, "stem.w", 2, 9 * c->channels, c->stem, U, f1, 1));
        TRYIX(m->end[E_STEM_B], add(m, "stem.b", 1, c->stem, 0, U, f1, 0));
        if (c->stem2 > 0) {
            TRYIX(m->end[E_STEM2_W], add(m, "stem2.w", 2, 16 * c->stem, c->stem2, U, f2, 1));
            TRYIX(m->end[E_STEM2_B], add(m, "stem2.b", 1, c->stem2, 0, U, f2, 0));
        }
    }
    TRYIX(m->end[E_PATCH_W], add(m, "patch.w", 2, c->patch * c->patch * Cin, C0, U, fan, 1));
    TRYIX(m->end[E_PATCH_B], add(m, "patch.b", 1, C0, 0, U, fan, 0));
    TRYIX(m->end[E_PATCH_LN_G], add(m, "patch.ln.g", 1, C0, 0, VIT_INIT_ONE, 0, 0));
    TRYIX(m->end[E_PATCH_LN_B], add(m, "patch.ln.b", 1, C0, 0, VIT_INIT_ZERO, 0, 0));
    int b = 0, R = (2 * c->window - 1) * (2 * c->window_w - 1);
    for (int s = 0; s < c->stages; s++) {
        int C = width_of(c, s), H = c->heads[s], F = c->mlp_ratio * C;
        for (int j = 0; j < c->depths[s]; j++, b++) {
            int *ix = m->blocks[b];
            char name[64];
#define ROW(id, row, nd, d0, d1, init, scale, decay)                           \
    do {                                                                       \
        snprintf(name, sizeof name, "%d.%d.%s", s, j, row);                    \
        TRYIX(ix[id], add(m, name, nd, d0, d1, init, scale, decay));           \
    } while (0)
            ROW(B_LN1_G, "ln1.g", 1, C, 0, VIT_INIT_ONE, 0, 0);
            ROW(B_LN1_B, "ln1.b", 1, C, 0, VIT_INIT_ZERO, 0, 0);
            ROW(B_REL, "rel", 2, R, H, N, 0.02, 0);
            ROW(B_QKV_W, "qkv.w", 2, C, 3 * C, N, sd, 1);
            ROW(B_QKV_B, "qkv.b", 1, 3 * C, 0, VIT_INIT_ZERO, 0, 0);
            ROW(B_PROJ_W, "proj.w", 2, C, C, N, sd, 1);
            ROW(B_PROJ_B, "proj.b", 1, C, 0, VIT_INIT_ZERO, 0, 0);
            ROW(B_LN2_G, "ln2.g", 1, C, 0, VIT_INIT_ONE, 0, 0);
            ROW(B_LN2_B, "ln2.b", 1, C, 0, VIT_INIT_ZERO, 0, 0);
            ROW(B_FC1_W, "fc1.w", 2, C, F, N, sd, 1);
            ROW(B_FC1_B, "fc1.b", 1, F, 0, VIT_INIT_ZERO, 0, 0);
            ROW(B_FC2_W, "fc2.w", 2, F, C, N, sd, 1);
            ROW(B_FC2_B, "fc2.b", 1, C, 0, VIT_INIT_ZERO, 0, 0);
#undef ROW
        }
        if (s + 1 < c->stages) {
            char name[64];
            snprintf(name, sizeof name, "%d.merge.w", s);
            TRYIX(m->merge[s][M_W], add(m, name, 2, 4 * C, 2 * C, N, sd, 1));
            snprintf(name, sizeof name, "%d.merge.ln.g", s);
            TRYIX(m->merge[s][M_LN_G], add(m, name, 1, 4 * C, 0, VIT_INIT_ONE, 0, 0));
            snprintf(name, sizeof name, "%d.merge.ln.b", s);
            TRYIX(m->merge[s][M_LN_B], add(m, name, 1, 4 * C, 0, VIT_INIT_ZERO, 0, 0));
        }
    }
    int CL = width_of(c, c->stages - 1);
    TRYIX(m->end[E_LN_G], add(m, "ln.g", 1, CL, 0, VIT_INIT_ONE, 0, 0));
    TRYIX(m->end[E_LN_B], add(m, "ln.b", 1, CL, 0, VIT_INIT_ZERO, 0, 0));
    TRYIX(m->end[E_HEAD_W], add(m, "head.w", 2, CL, c->classes, N, sd, 1));
    TRYIX(m->end[E_HEAD_B], add(m, "head.b", 1, c->classes, 0, VIT_INIT_ZERO, 0, 0));
    return VIT_OK;
}

static void swin_free(swin *m)
{
    if (!m)
        return;
    free(m->blocks);
    free(m);
}

/* The state of cfg (checked) with its tensors added to P (open). */
static swin *swin_build(const swin_cfg *cfg, vit_params *P)
{
    if (swin_config_check(cfg) != VIT_OK)
        return NULL;
    swin *m = calloc(1, sizeof *m);
    int nb = 0;
    for (int s = 0; s < cfg->stages; s++)
        nb += cfg->depths[s];
    if (!m || !(m->blocks = calloc((size_t)nb, sizeof *m->blocks)))
        goto oom;
    m->cfg = *cfg;
    m->P = P;
    if (layout(m) != VIT_OK) {
        swin_free(m);
        return NULL;
    }
    return m;
oom:
    swin_free(m);
    vit_fail(VIT_ENOMEM, "swin: out of memory");
    return NULL;
}

/* ---- forward ----------------------------------------------------------- */

/* r + drop_path(x W + b): without scales the one fused op. */
static vit_tensor *residual(vit_tape *tape, vit_tensor *x, vit_tensor *W, vit_tensor *b,
                            vit_tensor *r, const vit_real *scale)
{
    if (!scale)
        return vit_op_linear_add(tape, x, W, b, r);
    return vit_op_add(tape, r, vit_op_drop_path(tape, vit_op_linear(tape, x, W, b), scale));
}

/* Where the forward takes parameter tensor i from. */
typedef vit_tensor *(*leaf_fn)(const void *ctx, int i);

/* LN(x) W + b.  In mixed precision the layer norm's output, which the
 * product reads only as bf16 operands, is kept in bf16 (vit_op_block's
 * way: tape_internal.h), whatever recompute says.  Else with recompute it
 * is not kept but remade from x in the backward (vit_tape_ln_linear: n x
 * in reals less a block, one more layer norm pass); else the two ops,
 * which keep it in float.  All give the same float32 values, bit for bit
 * (tests/test_swin.c). */
static vit_tensor *ln_linear(vit_tape *tape, int recompute, vit_tensor *x, vit_tensor *g,
                             vit_tensor *be, vit_tensor *W, vit_tensor *b)
{
    if (recompute && !vit_mixed_on())
        return vit_tape_ln_linear(tape, x, g, be, SWIN_LN_EPS, W, b, 0);
    vit_tensor *h = vit_tape_layernorm_kept(tape, x, g, be, SWIN_LN_EPS, VIT_KEEP_BF16);
    return vit_op_linear(tape, h, W, b);
}

/* x + drop_path(fc2(GELU(fc1(LN(x))))) (drop NULL: no drop path), as
 * ln_linear keeps LN(x).  In mixed precision without drop path the MLP is
 * one op keeping only its pre-activation in bf16 (vit_tape_mlp_kept, as
 * vit_op_block's); with it, GELU's output is kept in bf16.  In float32
 * vit_tape_mlp_kept is vit_op_linear_gelu then vit_op_linear_add: the same
 * ops as residual(). */
static vit_tensor *mlp(vit_tape *tape, int recompute, vit_tensor *x, vit_tensor *g,
                       vit_tensor *be, vit_tensor *W1, vit_tensor *b1, vit_tensor *W2,
                       vit_tensor *b2, const vit_real *drop)
{
    if (recompute && !vit_mixed_on()) {
        vit_tensor *h = vit_tape_ln_linear(tape, x, g, be, SWIN_LN_EPS, W1, b1, 1);
        return residual(tape, h, W2, b2, x, drop);
    }
    vit_tensor *h = vit_tape_layernorm_kept(tape, x, g, be, SWIN_LN_EPS, VIT_KEEP_BF16);
    if (!drop)
        return vit_tape_mlp_kept(tape, h, W1, b1, W2, b2, x);
    h = vit_tape_linear_gelu_kept(tape, h, W1, b1, VIT_KEEP_BF16);
    return residual(tape, h, W2, b2, x, drop);
}

/* Block b's attention maps (vit_arch_run.maps, maps_to) into dst [B, H, N,
 * N]: the softmax weights of the block's window attention, which the op
 * keeps only for its backward (and not in evaluation), made again by the
 * same kernel from the same qkv [B, N, 3D] and bias [H, T, T] (so the
 * same numbers), then spread from the kernel's [B, H, nW, T, T] (windows
 * and their positions in the SHIFTED frame, vit/attention.h) over the
 * grid: query token i's row holds its weights at the keys' ORIGINAL
 * token numbers (the cyclic shift undone), 0 for every token outside
 * its window (and across a wrapped border, which the region mask gives
 * 0).  Only when maps are asked for; the network's values do not depend
 * on it.  VIT_OK or an error (recorded in the tape's status). */
static int block_maps(vit_tape *tape, const vit_tensor *qkv, const vit_tensor *bias,
                      const vit_window_opts *wo, vit_real *dst)
{
    const int B = qkv->shape[0], D3 = qkv->shape[2], D = D3 / 3, H = wo->heads;
    const int gh = wo->grid_h, gw = wo->grid_w, Mh = wo->window_h, Mw = wo->window_w;
    const int N = gh * gw, T = Mh * Mw, nW = N / T;
    const size_t rows = (size_t)B * H * N; /* one row of T weights per query and head */
    vit_real *probs = malloc(rows * T * sizeof *probs);
    vit_real *out = malloc((size_t)B * N * D * sizeof *out);
    int *tok = malloc((size_t)nW * T * sizeof *tok);
    const vit_window_attn w = {.batch = B, .heads = H, .grid_h = gh, .grid_w = gw,
                               .window_h = Mh, .window_w = Mw, .shift_h = wo->shift_h,
                               .shift_w = wo->shift_w, .d_k = D / H, .d_v = D / H,
                               .scale = wo->scale, .bias = bias ? bias->data : NULL,
                               .bias_heads = bias ? bias->shape[0] : 0, .ld_q = D3, .ld_k = D3,
                               .ld_v = D3, .probs = probs};
    int rc = !probs || !out || !tok
                 ? vit_fail(VIT_ENOMEM, "swin: out of memory for the attention maps of a "
                            "%dx%d grid", gh, gw)
                 : vit_window_attn_forward(&w, out, NULL, qkv->data, qkv->data + D,
                                           qkv->data + 2 * D);
    if (rc == VIT_OK) {
        for (int wi = 0; wi < nW; wi++) /* the kernel's own window layout */
            vit_window_tokens(&w, wi, tok + (size_t)wi * T, NULL);
        memset(dst, 0, rows * N * sizeof *dst);
        for (size_t bh = 0; bh < (size_t)B * H; bh++)
            for (int wi = 0; wi < nW; wi++) {
                const int *t = tok + (size_t)wi * T;
                const vit_real *pw = probs + (bh * nW + wi) * T * T;
                for (int i = 0; i < T; i++) {
                    vit_real *row = dst + (bh * N + t[i]) * N;
                    for (int j = 0; j < T; j++)
                        row[t[j]] = pw[(size_t)i * T + j];
                }
            }
    }
    free(tok);
    free(out);
    free(probs);
    if (rc != VIT_OK)
        vit_tape_fail(tape, rc);
    return rc;
}

/* The network on tape: img [batch, H, W, C] -> logits [batch, classes].
 * drop: NULL, or stochastic depth's scales, block b's attention branch
 * scaled by drop[2b stride + i] for image i, its MLP branch by
 * drop[(2b + 1) stride + i].  recompute: the recipe's (vit_arch_run's):
 * 1 remakes the layer norms' outputs (ln_linear) and the window
 * attention's weights (from their log-sum-exps) in the backward instead of
 * keeping them.  maps, maps_to: vit_arch_run's (NULL both: no maps, no
 * work for them), one layer per block in order (block_maps). */
static vit_tensor *run(const swin *m, vit_tape *tape, leaf_fn leaf, const void *lctx,
                       vit_tensor *img, int batch, const vit_real *drop, int stride,
                       int recompute, const vit_real **maps, vit_real *const *maps_to)
{
    const swin_cfg *c = &m->cfg;
#define L(ix) leaf(lctx, (ix))
    if (c->stem > 0) { /* [B, H, W, stem], then [B, H/2, W/2, stem2]: what the patches read */
        vit_stem st = stem_of(c);
        img = vit_stem_layer(tape, vit_stem_shape(&st), batch, img, L(m->end[E_STEM_W]),
                             L(m->end[E_STEM_B]));
        if (c->stem2 > 0)
            img = vit_stem_layer(tape, vit_stem2_shape(&st), batch, img, L(m->end[E_STEM2_W]),
                                 L(m->end[E_STEM2_B]));
    }
    vit_patch_shape ps = {.batch = batch, .patch = c->patch, .dim = c->dim,
                          .stride = c->patch};
    patch_input(c, &ps.height, &ps.width, &ps.channels);
    vit_tensor *x = vit_op_patch_embed(tape, &ps, img, L(m->end[E_PATCH_W]),
                                       L(m->end[E_PATCH_B]));
    x = vit_op_layernorm(tape, x, L(m->end[E_PATCH_LN_G]), L(m->end[E_PATCH_LN_B]), SWIN_LN_EPS);
    int b = 0;
    for (int s = 0; s < c->stages; s++) {
        int gh, gw, H = c->heads[s];
        swin_stage_grid(c, s, &gh, &gw);
        for (int j = 0; j < c->depths[s]; j++, b++) {
            const int *ix = m->blocks[b];
            const vit_real *d_attn = drop ? drop + (size_t)2 * b * stride : NULL;
            const vit_real *d_mlp = drop ? drop + (size_t)(2 * b + 1) * stride : NULL;
            vit_tensor *qkv = ln_linear(tape, recompute, x, L(ix[B_LN1_G]), L(ix[B_LN1_B]),
                                        L(ix[B_QKV_W]), L(ix[B_QKV_B]));
            vit_tensor *bias = vit_op_relpos_bias(tape, L(ix[B_REL]), c->window, c->window_w);
            vit_window_opts wo = {.heads = H, .grid_h = gh, .grid_w = gw,
                                  .window_h = c->window, .window_w = c->window_w,
                                  .shift_h = shift_of(j, gh, c->window),
                                  .shift_w = shift_of(j, gw, c->window_w),
                                  .keep_weights = !recompute};
            if ((maps || maps_to) && qkv && bias) {
                size_t n = (size_t)batch * H * gh * gw * gh * gw;
                vit_real *dst = maps_to ? maps_to[b] : vit_tape_alloc(tape, n * sizeof *dst);
                if (maps)
                    maps[b] = NULL;
                if (!dst || block_maps(tape, qkv, bias, &wo, dst) != VIT_OK)
                    return NULL;
                if (maps)
                    maps[b] = dst;
            }
            /* its output is read back only as the projection's bf16 operand */
            vit_tensor *a = vit_tape_window_attn_kept(tape, qkv, bias, &wo, VIT_KEEP_BF16);
            x = residual(tape, a, L(ix[B_PROJ_W]), L(ix[B_PROJ_B]), x, d_attn);
            x = mlp(tape, recompute, x, L(ix[B_LN2_G]), L(ix[B_LN2_B]), L(ix[B_FC1_W]),
                    L(ix[B_FC1_B]), L(ix[B_FC2_W]), L(ix[B_FC2_B]), d_mlp);
        }
        if (s + 1 < c->stages) {
            x = vit_op_patch_merge(tape, x, gh, gw);
            x = vit_tape_layernorm_kept(tape, x, L(m->merge[s][M_LN_G]),
                                        L(m->merge[s][M_LN_B]), SWIN_LN_EPS, VIT_KEEP_BF16);
            x = vit_op_linear(tape, x, L(m->merge[s][M_W]), NULL);
        }
    }
    x = vit_op_layernorm(tape, x, L(m->end[E_LN_G]), L(m->end[E_LN_B]), SWIN_LN_EPS);
    x = vit_op_mean_tokens(tape, x, 0);
    return vit_op_linear(tape, x, L(m->end[E_HEAD_W]), L(m->end[E_HEAD_B]));
#undef L
}

/* ---- bf16 ---------------------------------------------------------------- */

/* The weight matrices of the bf16 step (vit_arch.bf16_weights): each
 * linear weight W [in, out] as itself (y = x W) and transposed (dx = dy
 * W^T), the patch weights only as themselves (the images get no
 * gradient).  The window attention's products are not among them: they
 * multiply activations (and stay float32 at Swin's widths,
 * tape_ops_window.c). */
static int swin_bf16_weights(const vit_config *cfg, const void *state, const vit_params *P,
                             vit_arch_bf16 *set)
{
    (void)cfg;
    (void)P;
    const swin *m = state;
    const swin_cfg *c = &m->cfg;
#define BOTH(ix, in, o) TRY(vit_arch_bf16_add(set, ix, 0, in, o, o, VIT_ARCH_BF16_BOTH))
    int mh, mw, Cin;
    patch_input(c, &mh, &mw, &Cin);
    if (c->stem > 0) { /* as the ViT's: each map after the first wants its gradient */
        TRY(vit_arch_bf16_add(set, m->end[E_STEM_W], 0, 9 * c->channels, c->stem, c->stem,
                              VIT_ARCH_BF16_AS_IS));
        if (c->stem2 > 0)
            BOTH(m->end[E_STEM2_W], 16 * c->stem, c->stem2);
        BOTH(m->end[E_PATCH_W], c->patch * c->patch * Cin, c->dim);
    } else {
        TRY(vit_arch_bf16_add(set, m->end[E_PATCH_W], 0, c->patch * c->patch * Cin, c->dim,
                              c->dim, VIT_ARCH_BF16_AS_IS));
    }
    int b = 0;
    for (int s = 0; s < c->stages; s++) {
        int C = width_of(c, s), F = c->mlp_ratio * C;
        for (int j = 0; j < c->depths[s]; j++, b++) {
            const int *ix = m->blocks[b];
            BOTH(ix[B_QKV_W], C, 3 * C);
            BOTH(ix[B_PROJ_W], C, C);
            BOTH(ix[B_FC1_W], C, F);
            BOTH(ix[B_FC2_W], F, C);
        }
        if (s + 1 < c->stages)
            BOTH(m->merge[s][M_W], 4 * C, 2 * C);
    }
    BOTH(m->end[E_HEAD_W], width_of(c, c->stages - 1), c->classes);
#undef BOTH
    return VIT_OK;
}

/* ---- torchvision's names ----------------------------------------------- */

/* Our row names and torchvision's, with how its tensor is made of ours
 * (enum vit_export_op, vit/arch.h). */
typedef struct torch_row {
    const char *ours, *theirs;
    int op;
} torch_row;

static const torch_row block_rows[] = { /* "S.J.<ours>": features.(2S+1).J.<theirs> */
    {"ln1.g", "norm1.weight", VIT_EXPORT_COPY}, {"ln1.b", "norm1.bias", VIT_EXPORT_COPY},
    {"rel", "attn.relative_position_bias_table", VIT_EXPORT_COPY},
    {"qkv.w", "attn.qkv.weight", VIT_EXPORT_TRANSPOSE}, {"qkv.b", "attn.qkv.bias", VIT_EXPORT_COPY},
    {"proj.w", "attn.proj.weight", VIT_EXPORT_TRANSPOSE},
    {"proj.b", "attn.proj.bias", VIT_EXPORT_COPY},
    {"ln2.g", "norm2.weight", VIT_EXPORT_COPY}, {"ln2.b", "norm2.bias", VIT_EXPORT_COPY},
    {"fc1.w", "mlp.0.weight", VIT_EXPORT_TRANSPOSE}, {"fc1.b", "mlp.0.bias", VIT_EXPORT_COPY},
    {"fc2.w", "mlp.3.weight", VIT_EXPORT_TRANSPOSE}, {"fc2.b", "mlp.3.bias", VIT_EXPORT_COPY},
};
static const torch_row merge_rows[] = { /* "S.merge.<ours>": features.(2S+2).<theirs> */
    {"w", "reduction.weight", VIT_EXPORT_TRANSPOSE}, {"ln.g", "norm.weight", VIT_EXPORT_COPY},
    {"ln.b", "norm.bias", VIT_EXPORT_COPY},
};
/* The stem, which torchvision's SwinTransformer lacks: ours, a Sequential
 * (Conv2d 3x3, GELU, Conv2d 4x4 stride 2, GELU) named "stem" in front of
 * the patch embedding's features[0] (docs/architectures.md,
 * tools/torch_check_swin.py), as timm's hybrid backbone is the ViT's. */
static const torch_row end_rows[] = {
    {"stem.w", "features.0.stem.0.weight", VIT_EXPORT_CONV},
    {"stem.b", "features.0.stem.0.bias", VIT_EXPORT_COPY},
    {"stem2.w", "features.0.stem.2.weight", VIT_EXPORT_CONV},
    {"stem2.b", "features.0.stem.2.bias", VIT_EXPORT_COPY},
    {"patch.w", "features.0.0.weight", VIT_EXPORT_CONV},
    {"patch.b", "features.0.0.bias", VIT_EXPORT_COPY},
    {"patch.ln.g", "features.0.2.weight", VIT_EXPORT_COPY},
    {"patch.ln.b", "features.0.2.bias", VIT_EXPORT_COPY},
    {"ln.g", "norm.weight", VIT_EXPORT_COPY}, {"ln.b", "norm.bias", VIT_EXPORT_COPY},
    {"head.w", "head.weight", VIT_EXPORT_TRANSPOSE}, {"head.b", "head.bias", VIT_EXPORT_COPY},
};

static const torch_row *find_row(const torch_row *rows, size_t n, const char *ours)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].ours, ours) == 0)
            return &rows[i];
    return NULL;
}

/* torchvision's name of our tensor `ours` in out[cap] and its op: VIT_OK,
 * or VIT_EINVAL for a name that is not one of the Swin's. */
static int torch_name(const char *ours, char *out, size_t cap, int *op)
{
    int S, J, n = 0;
    const torch_row *r = NULL;
#define ROWS(a) a, sizeof a / sizeof *a
    if (sscanf(ours, "%d.%d.%n", &S, &J, &n) == 2 && n &&
        (r = find_row(ROWS(block_rows), ours + n)))
        snprintf(out, cap, "features.%d.%d.%s", 2 * S + 1, J, r->theirs);
    else if (n = 0, sscanf(ours, "%d.merge.%n", &S, &n) == 1 && n &&
             (r = find_row(ROWS(merge_rows), ours + n)))
        snprintf(out, cap, "features.%d.%s", 2 * S + 2, r->theirs);
    else if ((r = find_row(ROWS(end_rows), ours)))
        snprintf(out, cap, "%s", r->theirs);
    else
        return vit_fail(VIT_EINVAL, "swin: no torchvision name for tensor %s", ours);
#undef ROWS
    *op = r->op;
    return VIT_OK;
}

/* ---- the architecture (vit/arch.h) ------------------------------------- */

/* The arch's config struct inside a vit_config is a swin_cfg whose
 * data-shape and init fields the library's own config supplies (swin_of). */
#define KEY(name, field, hi, def, help)                                        \
    {name, VIT_KEY_INT, offsetof(swin_cfg, field), 1, hi, def, help, NULL, NULL}
static const vit_arch_key swin_keys[] = {
    KEY("patch", patch, 64, "2", "patch side in pixels of the image, or of the stem's last map "
        "(a P x P convolution at stride P)"),
    KEY("window", window, 64, "7", "attention windows' rows (of M x M tokens unless window_w "
        "is given); divide every grid's rows"),
    /* follows window: a config or checkpoint without it is square, and a
     * square config's text is as before the key */
    {"window_w", VIT_KEY_INT, offsetof(swin_cfg, window_w), 1, 64, "7", "attention windows' "
     "columns (not given: window's, square windows); divide every grid's columns", NULL,
     "window"},
    KEY("embed_dim", dim, 4096, "32", "stage 1's width; each stage doubles it"),
    KEY("stages", stages, SWIN_MAX_STAGES, "2", "stages, patch merging between them"),
    KEY("depth_1", depths[0], 256, "2", "blocks of stage 1 (plain and shifted windows alternate)"),
    KEY("depth_2", depths[1], 256, "6", "blocks of stage 2"),
    KEY("depth_3", depths[2], 256, "2", "blocks of stage 3"),
    KEY("depth_4", depths[3], 256, "2", "blocks of stage 4"),
    KEY("heads_1", heads[0], 1024, "1", "attention heads of stage 1 (divide its width)"),
    KEY("heads_2", heads[1], 1024, "2", "attention heads of stage 2"),
    KEY("heads_3", heads[2], 1024, "4", "attention heads of stage 3"),
    KEY("heads_4", heads[3], 1024, "8", "attention heads of stage 4"),
    KEY("mlp_ratio", mlp_ratio, 64, "2", "MLP hidden width over the block's width"),
    /* the ViT's two stem keys, meaning the same (stem.h); 0 allowed */
    {"stem", VIT_KEY_INT, offsetof(swin_cfg, stem), 0, 4096, "0", "channels of a 3x3 "
     "convolution + GELU before the patches (0: patches of the image itself)", NULL, NULL},
    {"stem2", VIT_KEY_INT, offsetof(swin_cfg, stem2), 0, 4096, "0", "channels of a second stem "
     "convolution, 4x4 at stride 2 + GELU: the patches are cut from its half-size map (0: none; "
     "needs stem)", NULL, NULL},
};
#undef KEY
enum { SWIN_KEYS = (int)(sizeof swin_keys / sizeof *swin_keys), SWIN_STAGE_KEY0 = 5,
       SWIN_STEM_KEY0 = SWIN_KEYS - 2 };

/* The Swin of a vit_config: its keys, the data's shape and init_std. */
static swin_cfg swin_of(const vit_config *cfg)
{
    swin_cfg c;
    memcpy(&c, vit_config_arch_data(cfg), sizeof c);
    c.image_height = cfg->image_height, c.image_width = cfg->image_width;
    c.channels = cfg->channels, c.classes = cfg->classes, c.init_std = cfg->init_std;
    return c;
}

/* A depth_s or heads_s for a stage past `stages`, given with a value other
 * than its default, would be ignored: refused instead. */
static int swin_check(const vit_config *cfg)
{
    swin_cfg c = swin_of(cfg);
    for (int k = SWIN_STAGE_KEY0; k < SWIN_STAGE_KEY0 + 2 * SWIN_MAX_STAGES; k++) {
        const vit_arch_key *key = &swin_keys[k];
        int stage = key->key[strlen(key->key) - 1] - '1';
        int v = *(const int *)((const char *)&c + key->offset);
        if (stage >= c.stages && vit_config_given(cfg, key->key) == 1 && v != atoi(key->def))
            return vit_fail(VIT_EINVAL, "%s: %d for a stage the model does not have (stages "
                            "= %d)", key->key, v, c.stages);
    }
    return swin_config_check(&c);
}

/* The stem the rule gives a large set: the ViT recipe's values
 * (vit/recipe.h: VIT_RECIPE_STEM, VIT_RECIPE_STEM2, VIT_RECIPE_STEM2_COUNT;
 * test_swin checks they agree), written here because the model layer
 * sits below the recipe.  On Fashion-MNIST (60,000 images of 28x28) the
 * Swin with them learns more per multiply-add: 8 epochs, 89.39% against
 * 88.40%, training accuracy ahead at every epoch, for 11.6% more
 * multiply-adds (docs/benchmarks-log.md, 2026-12-07). */
enum { SWIN_RULE_STEM = 16, SWIN_RULE_STEM2 = 32, SWIN_RULE_STEM_COUNT = 10000 };

/* 1 if the rule gives cfg the two stem layers: none of patch, stem and
 * stem2 given (each changes what the others mean), train_count images or
 * more, even sides (stem2 halves them), and a plain patch of 2, so that
 * patch 1 of stem2's map keeps the same grid and the full-size first
 * map stays small (images up to 32x32: the size it was measured near). */
static int swin_rule_stem(const vit_config *cfg, int train_count)
{
    if (vit_config_given(cfg, "patch") != 0 || vit_config_given(cfg, "stem") != 0 ||
        vit_config_given(cfg, "stem2") != 0 || train_count < SWIN_RULE_STEM_COUNT ||
        cfg->image_height % 2 || cfg->image_width % 2)
        return 0;
    swin_cfg plain;
    return swin_config_pick(&plain, cfg->image_height, cfg->image_width, cfg->channels,
                            cfg->classes, 0, 0, NULL, 0) == VIT_OK && plain.patch == 2;
}

/* The recipe's values (swin_config_pick) for the keys not given. */
static int swin_adapt(vit_config *cfg, int train_count, char *why, size_t cap)
{
    swin_cfg pick, *c = vit_config_arch_data_mut(cfg);
    /* Neither stem key given: the rule's two layers or none (not what an
     * earlier adapt of this config left). */
    const int stem = swin_rule_stem(cfg, train_count);
    if (vit_config_given(cfg, "stem") == 0 && vit_config_given(cfg, "stem2") == 0)
        c->stem = stem ? SWIN_RULE_STEM : 0, c->stem2 = stem ? SWIN_RULE_STEM2 : 0;
    TRY(swin_config_pick(&pick, cfg->image_height, cfg->image_width, cfg->channels,
                         cfg->classes, c->stem, c->stem2, NULL, 0));
    int ruled = stem;
    for (int k = 0; k < SWIN_STEM_KEY0; k++) { /* the stem: swin_rule_stem's */
        const vit_arch_key *key = &swin_keys[k];
        int stage = k >= SWIN_STAGE_KEY0 && k < SWIN_STAGE_KEY0 + 2 * SWIN_MAX_STAGES
                        ? key->key[strlen(key->key) - 1] - '1' : -1;
        /* window_w not given follows a given window (set with it: square) */
        if (key->follows && vit_config_given(cfg, key->follows) == 1)
            continue;
        if (stage < c->stages && vit_config_given(cfg, key->key) == 0) {
            memcpy((char *)c + key->offset, (const char *)&pick + key->offset, sizeof(int));
            ruled = 1;
        }
    }
    if (why && cap)
        why[0] = '\0';
    if (ruled) {
        swin_cfg full = swin_of(cfg);
        say_why(&full, why, cap);
        size_t n = why ? strlen(why) : 0;
        if (stem && n < cap)
            snprintf(why + n, cap - n, ", stem %d and stem2 %d before the patches (%d images "
                     "or more)", SWIN_RULE_STEM, SWIN_RULE_STEM2, SWIN_RULE_STEM_COUNT);
    }
    return VIT_OK;
}

static int swin_arch_build(const vit_config *cfg, vit_params *p, void **state)
{
    swin_cfg c = swin_of(cfg);
    swin *m = swin_build(&c, p);
    *state = m;
    return m ? VIT_OK : vit_tape_status(NULL);
}

static void swin_release(void *state) { swin_free(state); }

static vit_tensor *arch_leaf(const void *run, int i) { return vit_arch_param(run, i); }

static vit_tensor *swin_forward(const vit_arch_run *r)
{
    return run(r->state, r->tape, arch_leaf, r, r->images, r->batch,
               r->train ? r->drop_scale : NULL, r->drop_stride, r->recompute, r->maps,
               r->maps_to);
}

/* Maps are offered while the first stage's grid has at most this many
 * tokens: a block's are heads N^2 reals an image (Swin-T at 224 x 224,
 * 56 x 56 tokens and 3 heads: 118 MB for each of its first two blocks). */
#define SWIN_MAPS_MAX_TOKENS 4096

/* One layer of maps per block, stage by stage (swin_attn_layer). */
static void swin_describe(const vit_config *cfg, vit_arch_info *info)
{
    swin_cfg c = swin_of(cfg);
    info->macs = swin_macs(&c);
    for (int s = 0; s < c.stages; s++)
        info->drop_layers += c.depths[s];
    int gh, gw;
    swin_stage_grid(&c, 0, &gh, &gw);
    if ((long long)gh * gw <= SWIN_MAPS_MAX_TOKENS)
        info->attn_layers = info->drop_layers;
}

/* Block `layer`'s maps: [B, heads_s, N_s, N_s] over its stage's grid of
 * N_s tokens, no class token (block_maps); labelled "stage S block J",
 * ", shifted" for a block whose windows shift, S and J counting from 1
 * as the keys' stages do (depth_1, heads_1). */
static void swin_attn_layer(const vit_config *cfg, int layer, vit_arch_attn *a)
{
    swin_cfg c = swin_of(cfg);
    int s = 0, j = layer;
    while (s + 1 < c.stages && j >= c.depths[s])
        j -= c.depths[s++];
    int gh, gw;
    swin_stage_grid(&c, s, &gh, &gw);
    a->heads = c.heads[s];
    a->grid_h = gh;
    a->grid_w = gw;
    a->queries = a->keys = gh * gw;
    a->stage = s;
    int shifted = shift_of(j, gh, c.window) || shift_of(j, gw, c.window_w);
    snprintf(a->label, sizeof a->label, "stage %d block %d%s", s + 1, j + 1,
             shifted ? ", shifted" : "");
}

/* torchvision's name and layout; our layout is its state_dict's order. */
static int swin_export_tensor(const vit_config *cfg, int i, const vit_param_tensor *t,
                              vit_arch_export *e)
{
    const swin_cfg *c = vit_config_arch_data(cfg);
    TRY(torch_name(t->name, e->name, sizeof e->name, &e->op));
    e->ndim = e->op == VIT_EXPORT_CONV ? 4 : e->op == VIT_EXPORT_TRANSPOSE ? 2 : t->ndim;
    const vit_stem st = stem_of(c); /* the stem's kernels are its layers' patches */
    e->kernel = strcmp(t->name, "stem.w") == 0    ? vit_stem_shape(&st).patch
              : strcmp(t->name, "stem2.w") == 0 ? vit_stem2_shape(&st).patch : c->patch;
    e->order = i;
    return VIT_OK;
}

const vit_arch vit_arch_swin_def = {
    .name = "swin",
    .summary = "Swin Transformer (torchvision's v1 layout): shifted windows with a relative "
               "position bias, patch merging between stages",
    .keys = swin_keys,
    .nkeys = SWIN_KEYS,
    .config_size = sizeof(swin_cfg),
    .check = swin_check,
    .adapt = swin_adapt,
    .build = swin_arch_build,
    .release = swin_release,
    .forward = swin_forward,
    .describe = swin_describe,
    .attn_layer = swin_attn_layer,
    .export_tensor = swin_export_tensor,
    .export_layout = "torchvision.SwinTransformer",
    .bf16_weights = swin_bf16_weights,
};

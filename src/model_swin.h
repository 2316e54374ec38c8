/* Internal: the Swin Transformer (Liu et al. 2021) on the tape, laid out
 * like torchvision's SwinTransformer (v1) so that its export loads there.
 *
 * Network: patch embedding (a P x P convolution at stride P, as a linear
 * map of each patch, then LayerNorm); stages s = 0..S-1 of depths[s]
 * blocks of width dim * 2^s and heads[s] heads; a block is
 *     x = x + proj(WindowAttention(LN1(x)))      (shifted every other block)
 *     x = x + fc2(GELU(fc1(LN2(x))))
 * with a learned relative position bias per head ((2M-1)^2 table); between
 * stages patch merging (the 2 x 2 neighbours concatenated in torchvision's
 * order, LayerNorm over 4C, a linear map 4C -> 2C without bias); then
 * LayerNorm, the mean over the tokens, the head.
 *
 * Tokens are [B, gh*gw, C], numbered row by row over the grid: the memory
 * layout of torchvision's [B, H, W, C].  Block j of a stage shifts its
 * windows by M/2 when j is odd and the window is smaller than the grid
 * (torchvision drops the shift when one window covers the grid).
 *
 * Every grid must be a multiple of the window and, before a merge, even
 * (torchvision would pad; we refuse). */
#ifndef VIT_SRC_MODEL_SWIN_H
#define VIT_SRC_MODEL_SWIN_H

#include <stddef.h>

#include "vit/params.h"
#include "vit/rng.h"
#include "vit/tape.h"

#define VIT_SWIN_MAX_STAGES 4

typedef struct vit_swin_config {
    int image_height, image_width, channels, classes;
    int patch;      /* P: the patch embedding's kernel and stride */
    int window;     /* M: attention windows of M x M tokens */
    int dim;        /* C: stage 0's width; stage s has C * 2^s */
    int stages;     /* S, 1..VIT_SWIN_MAX_STAGES */
    int depths[VIT_SWIN_MAX_STAGES]; /* blocks per stage, >= 1 */
    int heads[VIT_SWIN_MAX_STAGES];  /* heads per stage, dividing its width */
    int mlp_ratio;  /* MLP hidden width = mlp_ratio * width */
    double init_std;  /* std of the truncated normal linear weights (0.02) */
} vit_swin_config;

/* The recipe's Swin for images of height x width x channels: patch,
 * window, widths and depths chosen from the size, and a one-line reason
 * in why[cap] (may be NULL).  VIT_OK, or VIT_EINVAL when no patch and
 * window fit (the message says why). */
int vit_swin_config_pick(vit_swin_config *cfg, int height, int width, int channels, int classes,
                         char *why, size_t cap);

/* VIT_OK, or VIT_EINVAL naming the first bad value. */
int vit_swin_config_check(const vit_swin_config *cfg);

/* Grid (rows, columns) of stage s. */
void vit_swin_stage_grid(const vit_swin_config *cfg, int s, int *gh, int *gw);

/* Multiply-adds of one image's forward (the linear maps and attention). */
size_t vit_swin_macs(const vit_swin_config *cfg);

typedef struct vit_swin vit_swin;

/* A model of cfg (checked) with its parameters laid out (zero): NULL with
 * vit_last_error on a bad config or out of memory. */
vit_swin *vit_swin_new(const vit_swin_config *cfg);
void vit_swin_free(vit_swin *m);

const vit_swin_config *vit_swin_config_of(const vit_swin *m);

/* The named parameters (layout, values, grads, groups, init). */
vit_params *vit_swin_params(vit_swin *m);

/* The forward of images [batch, H, W, C] on tape: logits [batch, classes].
 * Parameters become leaves over vit_params' buffers, with gradients when
 * the tape is in grad mode.  drop: NULL, or stochastic depth's per-image
 * scales (vit_drop_path_scales): block b's attention branch is scaled by
 * drop[2b stride + i] for image i, its MLP branch by drop[(2b+1) stride + i]
 * (blocks counted over all stages).  NULL on error (the tape's status and
 * vit_last_error). */
vit_tensor *vit_swin_forward(vit_swin *m, vit_tape *tape, const vit_real *images, int batch,
                             const vit_real *drop, int stride);

/* ---- torchvision's names and layouts ----------------------------------- */

/* One tensor as torchvision's SwinTransformer names and shapes it. */
typedef struct vit_swin_torch_tensor {
    char name[64];
    int ndim;
    int shape[4];
    size_t size;
    int param;  /* our tensor (vit_params index) it is made of */
    int op;     /* enum vit_export_op (vit/arch.h) */
} vit_swin_torch_tensor;

/* Number of tensors in torchvision's state_dict of this model (without its
 * relative_position_index buffers); fills t[i] for i < that when t is not
 * NULL. */
int vit_swin_torch_tensors(const vit_swin *m, vit_swin_torch_tensor *t);

/* Writes torch tensor t's values (t->size floats, torchvision's layout) from
 * our parameters, or reads them into our parameters (to_ours nonzero). */
void vit_swin_torch_copy(vit_swin *m, const vit_swin_torch_tensor *t, float *torch_values,
                         int to_ours);

#endif

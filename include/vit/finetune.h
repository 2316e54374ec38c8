/*
 * vit/finetune.h - starting a model from trained weights: a timm
 * VisionTransformer safetensors file as published (vit_timm_load), and a
 * trained model adapted to another image size, channel count or class
 * count (vit_model_adapt), with the pieces it is made of (the position
 * embeddings' bicubic resampling, the input normalisation folded into the
 * patch embedding).  docs/finetune.md shows the command-line use.
 *
 * Errors follow vit/core.h: VIT_OK or a negative VIT_E* code with a message
 * in vit_last_error() naming the file or tensor and the problem.  Thread
 * safety: reentrant; a model is used by one thread at a time (vit/model.h).
 */
#ifndef VIT_FINETUNE_H
#define VIT_FINETUNE_H

#include "vit/core.h"
#include "vit/model.h"
#include "vit/rng.h"

VIT_BEGIN_DECLS

/* ImageNet's per-channel mean and std (RGB), the input normalisation of
 * timm's ViTs: they read (x - mean) / std of images x in [0, 1]. */
#define VIT_IMAGENET_MEAN {0.485, 0.456, 0.406}
#define VIT_IMAGENET_STD {0.229, 0.224, 0.225}

/* One row of the table of timm's ViT architectures whose layout we read:
 * the name as timm spells it and what its file's shapes cannot tell (the
 * heads), with the shapes it must have. */
typedef struct vit_timm_arch {
    const char *name; /* e.g. "vit_tiny_patch16_224" */
    int dim, depth, heads, mlp, patch, image; /* image: the side in pixels */
} vit_timm_arch;

/* Row i of the table (0-based; vit_tiny/small/base, patch 8/16/32, 224 and
 * 384, and deit_tiny/small/base), NULL past the end.  Static. */
const vit_timm_arch *vit_timm_arch_at(int i);

/* The row named name, or NULL. */
const vit_timm_arch *vit_timm_arch_find(const char *name);

/* Reads a timm VisionTransformer's safetensors file (its state_dict as the
 * safetensors package or timm's hub writes it: F32 tensors under timm's
 * names, metadata {"format": "pt"} or none; any other metadata is not
 * read) into a new model, *model (the caller's, vit_model_free).
 *
 * The config comes from the shapes: dim, channels and patch from
 * patch_embed.proj.weight [D, C, P, P], depth from the blocks, mlp from
 * blocks.0.mlp.fc1.weight [M, D], classes from head.weight [K, D], the grid
 * from pos_embed [1, 1 + N, D] (N = g*g: a square image of g*P pixels; an
 * arch gives the image size of other grids).  The heads come from arch
 * (a row of the table, whose every shape must then agree) or, with arch
 * NULL, from heads (> 0).  pool = cls, ln_eps = 1e-6 (timm's LayerNorm),
 * the recipe vit_config_default's (tta none).  A file without head.weight
 * (timm's num_classes = 0) is refused.
 *
 * Every tensor is matched by name and shape; each missing, misshapen or
 * unexpected tensor is a line of the one VIT_EFORMAT message.  Refused by
 * name, with what timm option made them: dist_token / head_dist (deit's
 * distilled models), reg_token (registers), norm_pre (pre_norm), fc_norm
 * (global_pool "avg": timm normalises after the average, we before),
 * blocks.L.ls1/ls2 (layer scale), blocks.L.attn.q_norm/k_norm (qk_norm),
 * attn_pool (map pooling), a pos_embed without the class token's row
 * (no_embed_class) and a file without cls_token (class_token = False).
 * Returns VIT_OK; VIT_EINVAL for a NULL path or model, an unknown arch
 * (the message lists the table) or neither arch nor heads; VIT_EIO;
 * VIT_EFORMAT; VIT_ENUM for a non-finite value; VIT_ENOMEM.  On failure
 * *model is NULL. */
int vit_timm_load(const char *path, const char *arch, int heads, vit_model **model);

/* Resamples position embeddings to another grid as timm's
 * resample_abs_pos_embed does: the first `prefix` rows (the class token's)
 * kept, the grid rows src[prefix + y*gw + x, d] (gh x gw, row by row)
 * interpolated as PyTorch's F.interpolate(mode="bicubic",
 * align_corners=False, antialias=False) of the [1, D, gh, gw] image to
 * nh x nw: source coordinate (i + 0.5) * g/n - 0.5, Keys' cubic with
 * a = -0.75, indices clamped to the border.
 * src [prefix + gh*gw, dim] -> dst [prefix + nh*nw, dim] (overwritten; not
 * overlapping src).  Returns VIT_OK, or VIT_EINVAL for NULL pointers,
 * prefix < 0 or sizes < 1.  Pure; any thread. */
int vit_pos_resample(const vit_real *src, int prefix, int gh, int gw, int dim, vit_real *dst,
                     int nh, int nw);

/* Folds an input normalisation into the model's first layer, so that the
 * model reads images x in [0, 1] and computes what it computed on
 * (x - mean[c]) / std[c]: patch.w's (or with a stem stem.w's) rows of
 * channel c divided by std[c], and W^T (mean / std) subtracted from the
 * bias.  mean and std hold the model's channels values (std > 0).  Exact
 * up to rounding for a model whose first layer pads nothing (patch_pad = 0
 * and no stem; a zero pad is not the normalised zero); VIT_EINVAL
 * otherwise, or for NULL pointers. */
int vit_model_fold_input_norm(vit_model *m, const double *mean, const double *std);

/* What of the source vit_model_adapt keeps. */
typedef struct vit_adapt_opts {
    int keep_head;   /* 1: the head is kept (the classes must agree); 0: a
                        new head, drawn as vit_model_init draws it */
} vit_adapt_opts;

/* Copies the architecture of src's config (patch, dim, depth, heads, mlp,
 * pool, patch_stride, patch_pad, lsa, stem, stem2, local_conv, ln_eps,
 * image_norm, data_norm with data_mean and data_std: the input its
 * weights were trained on, kept, never recomputed; for another
 * architecture its arch and keys) over *dst, whose image size, channels,
 * classes and recipe stay.  Statistics of 1 channel are repeated for each
 * of dst's channels (as vit_model_adapt repeats the weights).  Cannot fail;
 * neither may be NULL. */
void vit_config_take_arch(vit_config *dst, const vit_config *src);

/* A new model for target (its architecture src's: vit_config_take_arch;
 * its image size, channels and classes those of the new data) with src's
 * weights adapted, tensor by tensor by name (any architecture):
 *   - a ViT's position embeddings resampled (vit_pos_resample) when the
 *     grid differs;
 *   - the first layer (the one tensor [taps * C, out] whose rows scale
 *     with the channels: patch.w, or stem.w with a stem) from 3 channels to 1
 *     by summing the channels' weights (timm's adapt_input_conv), from 1
 *     to 3 by repeating them scaled by 1/3 (so a gray image given as three
 *     equal channels computes what it did); other channel changes refused;
 *   - the head (head.*) kept with o->keep_head (the classes must agree), otherwise
 *     new: drawn from rng as vit_model_init draws it (truncated normal of
 *     target's init_std, zero bias);
 *   - every other tensor copied; one whose shape differs from src's
 *     otherwise (an architecture whose tensors depend on the image size
 *     in another way) is refused, naming it and both shapes.
 * *out is the caller's.  note (cap bytes, may be NULL) receives one line
 * saying what was adapted, e.g. "pos 14x14 -> 7x7 bicubic; 3 -> 1
 * channels (summed); new head (10 classes)".  Returns VIT_OK; VIT_EINVAL
 * for NULL pointers, a target whose architecture is not src's or that src's
 * keys do not fit (Swin's windows that do not tile target's grid: "the
 * swin model of the source does not fit HxW images: ..."), a channel
 * change other than 3 <-> 1, a change from 3 channels of a src with
 * data_norm (its per-channel statistics have no 1-channel equivalent), or
 * keep_head with other classes; VIT_ENOMEM.
 * src is only read. */
int vit_model_adapt(const vit_model *src, const vit_config *target, const vit_adapt_opts *o,
                    vit_rng *rng, vit_model **out, char *note, size_t cap);

VIT_END_DECLS

#endif

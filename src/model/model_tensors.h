/* Internal: the ViT's tensors, described once (model_tensors.c).
 *
 * One row per tensor, in the order the model lays its parameters out (and
 * a checkpoint stores them); the rows of a block repeat for each block under
 * the name "blocks.L.<row name>".  From the rows come the parameter layout
 * and init of vit_model (model.c), vit_config_param_count, the weight-decay
 * groups (through each tensor's decay flag), the timm/safetensors mapping
 * (safetensors.c), vit_config_macs and the checkpoint format 1..3 reading of
 * the fused attention projection (run_io.c).  A new tensor is a new row
 * (and the forward code that reads it). */
#ifndef VIT_SRC_MODEL_TENSORS_H
#define VIT_SRC_MODEL_TENSORS_H

#include <stddef.h>

#include "vit/model.h"
#include "vit/params.h"

/* Row ids, in layout order: the embeddings (the convolutional stem's one or
 * two layers, if any, and the patches), one block, the end. */
enum vit_mt_id {
    VIT_MT_STEM_W, VIT_MT_STEM_B, VIT_MT_STEM2_W, VIT_MT_STEM2_B, VIT_MT_PATCH_W, VIT_MT_PATCH_B,
    VIT_MT_CLS, VIT_MT_POS,
    VIT_MT_LOCAL_W, VIT_MT_LOCAL_B,
    VIT_MT_LN1_G, VIT_MT_LN1_B, VIT_MT_W_QKV, VIT_MT_W_O, VIT_MT_B_QKV, VIT_MT_B_O, VIT_MT_TAU,
    VIT_MT_LN2_G, VIT_MT_LN2_B, VIT_MT_W1, VIT_MT_B1, VIT_MT_W2, VIT_MT_B2,
    VIT_MT_LN_G, VIT_MT_LN_B, VIT_MT_HEAD_W, VIT_MT_HEAD_B,
    VIT_MT_ROWS,
    VIT_MT_FIRST_BLOCK = VIT_MT_LOCAL_W, /* rows [FIRST_BLOCK, FIRST_END) repeat per block */
    VIT_MT_FIRST_END = VIT_MT_LN_G
};

/* A dimension, as a function of the config: */
enum vit_mt_dim {
    VIT_MT_D,       /* dim */
    VIT_MT_3D,      /* 3 dim (the fused Q/K/V) */
    VIT_MT_MLP,     /* mlp */
    VIT_MT_CLASSES, /* classes */
    VIT_MT_TOKENS,  /* patches + 1 (vit_patch_count of vit_config_patch_shape) */
    VIT_MT_PIXELS,  /* patch * patch * channels (the last stem layer's with a stem): one
                       patch's values */
    VIT_MT_HEADS,   /* heads */
    VIT_MT_STEM,    /* stem: the stem's channels */
    VIT_MT_STEM_PIXELS, /* 9 * channels: one 3x3 window of the image */
    VIT_MT_STEM2,   /* stem2: the second stem layer's channels */
    VIT_MT_STEM2_PIXELS, /* 16 * stem: one 4x4 window of the stem's feature map */
    VIT_MT_TAPS     /* 9: the taps of local_conv's 3x3 window */
};

/* What a tensor's init scale is (vit_params_add's scale): */
enum vit_mt_scale {
    VIT_MT_NO_SCALE,  /* 0: VIT_INIT_ZERO and VIT_INIT_ONE */
    VIT_MT_INIT_STD,  /* the config's init_std */
    VIT_MT_INV_SQRT_DK /* 1/sqrt(dim/heads), the fixed attention scale */
};

/* When a row is part of the model: */
enum vit_mt_when { VIT_MT_ALWAYS, VIT_MT_IF_LSA, VIT_MT_IF_STEM, VIT_MT_IF_STEM2,
                   VIT_MT_IF_LOCAL };

/* How many times per image a weight matrix [in, out] multiplies a vector
 * (its multiply-adds per image are that times its size): */
enum vit_mt_uses { VIT_MT_NO_MACS, VIT_MT_PER_PATCH, VIT_MT_PER_TOKEN, VIT_MT_PER_IMAGE,
                   VIT_MT_PER_PIXEL, VIT_MT_PER_HALF_PIXEL /* of the H/2 x W/2 map */ };

/* How a timm file tensor is made of ours: */
enum vit_mt_timm_op {
    VIT_MT_COPY,      /* the same values, shape padded with leading 1s to timm_ndim */
    VIT_MT_TRANSPOSE, /* ours [r, q] (y = x W) is PyTorch's [q, r] (y = x W^T) */
    VIT_MT_CONV       /* patch.w [(py P + px) C + ch, D] is Conv2d's [D, C, P, P] */
};

/* Checkpoint formats 1..3 stored a tensor as three parts: */
enum vit_mt_legacy {
    VIT_MT_LEGACY_NONE,
    VIT_MT_LEGACY_QKV_W, /* W_QKV [D, 3D] was w_q, w_k, w_v [D, D]: row i of W_QKV is
                            row i of each in turn */
    VIT_MT_LEGACY_QKV_B  /* b_QKV [3D] was b_q, b_k, b_v [D], consecutive */
};

typedef struct vit_mt_row {
    const char *name;    /* ours, e.g. "patch.w"; a block's without "blocks.L." */
    int ndim, dim[2];    /* enum vit_mt_dim each */
    int init;            /* enum vit_init */
    int scale;           /* enum vit_mt_scale */
    int decay;           /* 1: AdamW's weight decay applies */
    int when;            /* enum vit_mt_when */
    int uses;            /* enum vit_mt_uses */
    const char *timm;    /* the file's name: timm's (a block's without "blocks.L."), or
                            for lsa's tau, which timm lacks, a name of ours */
    int timm_rank;       /* order in timm's state_dict among the rows of its part */
    int timm_op;         /* enum vit_mt_timm_op */
    int timm_ndim;       /* timm's rank (>= ndim) */
    int legacy;          /* enum vit_mt_legacy */
    const char *legacy_parts[3]; /* the format 1..3 names, like `name` */
} vit_mt_row;

/* Row id (enum vit_mt_id), 0 .. VIT_MT_ROWS-1; NULL outside. */
const vit_mt_row *vit_mt_row_at(int id);

/* One tensor of one config: a row, with its block. */
typedef struct vit_mt {
    int id, layer;    /* row; block 0 .. depth-1, or -1 outside the blocks */
    const vit_mt_row *row;
    char name[VIT_PARAMS_NAME_MAX + 1];      /* "blocks.L." + row name in a block */
    char timm[VIT_PARAMS_NAME_MAX + 1];      /* likewise, the file's name */
    int ndim, shape[2];
    size_t size;
    double scale;     /* vit_params_add's */
    int pos;          /* the walk's state (vit_mt_next) */
} vit_mt;

/* Walks the tensors of cfg (valid: vit_config_check) in layout order:
 * set t->pos = 0, then each call fills *t with the next tensor and returns
 * 1, or returns 0 after the last. */
int vit_mt_next(const vit_config *cfg, vit_mt *t);

/* Whether row id is part of cfg's model. */
int vit_mt_applies(const vit_config *cfg, int id);

/* The ViT's multiply-adds per image (vit_config_macs of a checked ViT config). */
size_t vit_mt_macs(const vit_config *cfg);

/* A dimension (enum vit_mt_dim) of cfg's model. */
int vit_mt_dim(const vit_config *cfg, int dim);

#endif

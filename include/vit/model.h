/*
 * vit/model.h - the Vision Transformer: its configuration (a small text
 * file, see models/digits-tiny.cfg) and the model itself, written as forward
 * code on the tape.
 *
 *   images [B, H, W, C]
 *     -> patch embedding (P x P patches, linear)        tokens [B, N, D]
 *     -> prepend the class token, add position embeddings   [B, N+1, D]
 *     -> depth x pre-norm block:
 *          x = x + MHA(LN1(x));  x = x + W2 GELU(W1 LN2(x) + b1) + b2
 *     -> final layer norm -> class token (or mean of patch tokens)  [B, D]
 *     -> linear head                                   logits [B, classes]
 *
 * All parameters live in one flat buffer and their gradients in another laid
 * out alike; named views (vit_model_tensor) describe the layout, which is
 * also the order tensors are stored in a checkpoint.
 */
#ifndef VIT_MODEL_H
#define VIT_MODEL_H

#include "vit/core.h"
#include "vit/optim.h"
#include "vit/rng.h"
#include "vit/layernorm.h"
#include "vit/tape.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { VIT_POOL_CLS = 0, VIT_POOL_MEAN = 1 };

/* The model's shape and the training recipe, both read from one text config
 * of `key = value` lines ('#' starts a comment).  Keys are the field names
 * below; vit_config_set() accepts the same keys, which is how command-line
 * flags override the file. */
typedef struct vit_config {
    /* model */
    int image_height, image_width, channels; /* set from the data at train time */
    int classes;                             /* likewise */
    int patch;      /* P: patch side in pixels; divides the image size */
    int dim;        /* D: token width */
    int depth;      /* number of blocks */
    int heads;      /* attention heads; divides dim */
    int mlp;        /* hidden width of the MLP */
    int pool;       /* VIT_POOL_CLS or VIT_POOL_MEAN ("cls" / "mean" in text) */
    /* training recipe */
    int epochs;
    int batch;
    double lr;           /* peak learning rate */
    double min_lr;       /* learning rate at the end of the cosine */
    double warmup;       /* warm-up length in epochs */
    double weight_decay; /* AdamW decoupled decay on weight matrices */
    double beta1, beta2, eps;
    double smoothing;    /* label smoothing */
    int shift;           /* random translation of up to this many pixels */
    double init_std;     /* std of the truncated-normal weight init */
    unsigned long long seed;
} vit_config;

/* Fills *cfg with the built-in defaults (the digits-tiny shape and recipe). */
void vit_config_default(vit_config *cfg);

/* Sets one field from text, e.g. ("dim", "64").  VIT_EINVAL with a message
 * naming the key for an unknown key or a value that does not parse or is out
 * of range. */
int vit_config_set(vit_config *cfg, const char *key, const char *value);

/* Reads a config file over *cfg (fields not in the file keep their value).
 * Errors name the file and line. */
int vit_config_load(vit_config *cfg, const char *path);

/* Parses config text (same syntax as the file); `origin` names it in errors. */
int vit_config_parse(vit_config *cfg, const char *text, const char *origin);

/* Writes every field as config text into buf (NUL-terminated).  Returns the
 * length, or a negative code if cap is too small. */
int vit_config_format(const vit_config *cfg, char *buf, size_t cap);

/* Checks the model fields for consistency (positive sizes, patch divides the
 * image, heads divide dim); VIT_EINVAL naming the field otherwise. */
int vit_config_check(const vit_config *cfg);

/* Key and help text of config field i (0-based), for tools that list the
 * keys; NULL past the last field. */
const char *vit_config_key_help(int i, const char **key);

/* Number of model parameters for a config (0 if the config is invalid). */
size_t vit_config_param_count(const vit_config *cfg);

typedef struct vit_model vit_model;

/* A model for cfg with zeroed parameters; NULL with vit_last_error on error. */
vit_model *vit_model_new(const vit_config *cfg);

void vit_model_free(vit_model *m);

/* The config the model was made with. */
const vit_config *vit_model_config(const vit_model *m);

/* ViT-style initialisation: weights ~ truncated normal(0, init_std), biases
 * and the class token 0, layer-norm gains 1, position embeddings
 * ~ truncated normal(0, init_std). */
void vit_model_init(vit_model *m, vit_rng *rng);

/* Flat parameter and gradient buffers, vit_model_param_count() reals each. */
vit_real *vit_model_params(vit_model *m);
vit_real *vit_model_grads(vit_model *m);
size_t vit_model_param_count(const vit_model *m);

/* Sets all gradients to zero. */
void vit_model_zero_grads(vit_model *m);

/* Weight-decay groups: weight matrices decay; biases, layer-norm parameters,
 * position embeddings and the class token do not. */
const vit_param_group *vit_model_groups(const vit_model *m, int *count);

/* Named parameter tensors in layout order, for checkpoints and export. */
typedef struct vit_model_tensor {
    const char *name;  /* e.g. "blocks.0.attn.w_q" */
    int ndim;
    int shape[VIT_TENSOR_MAX_DIMS];
    size_t offset;     /* into the flat buffers */
    size_t size;
} vit_model_tensor;

int vit_model_tensor_count(const vit_model *m);
const vit_model_tensor *vit_model_tensor_at(const vit_model *m, int i);

/* Records the forward pass for images [batch, H, W, C] on the tape (after
 * the caller's vit_tape_reset) and returns the logits [batch, classes].  The
 * images buffer must stay valid until the backward.  With grads = 0 the
 * parameters are constants (evaluation: no gradient buffers, less work).
 * Returns NULL on error (message in vit_last_error). */
vit_tensor *vit_model_forward(vit_model *m, vit_tape *tape, const vit_real *images,
                              int batch, int grads);

/* The attention maps [batch, heads, T, T] of block `layer` from the last
 * forward on `tape` (valid until its reset), T = patches + 1 (token 0 is the
 * class token); NULL if out of range. */
const vit_real *vit_model_attention_maps(const vit_model *m, int layer);

#ifdef __cplusplus
}
#endif

#endif

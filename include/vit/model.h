/*
 * vit/model.h - the configuration (a small text file, see
 * models/digits-tiny.cfg) and the model: a network of any architecture
 * (vit/arch.h) with its parameters, its forward on the tape and a training
 * batch split across threads.  The built-in architecture, the default, is
 * the Vision Transformer (src/model/model_vit.c):
 *
 *   images [B, H, W, C]
 *     -> with stem > 0: 3x3 convolution (stride 1, padding 1), GELU  [B, H, W, stem]
 *     -> with stem2 > 0: 4x4 convolution (stride 2, padding 1), GELU  [B, H/2, W/2, stem2]
 *     -> patch embedding (P x P patches, stride S, padding Z, linear)  [B, N, D]
 *     -> prepend the class token, add position embeddings   [B, N+1, D]
 *     -> depth x pre-norm block (vit_op_block, vit/block.h):
 *          x = x + MHA(LN1(x));  x = x + W2 GELU(W1 LN2(x) + b1) + b2
 *          (MHA with a no-self mask and a learnable per-head scale with lsa)
 *     -> final layer norm -> class token (or mean of patch tokens)  [B, D]
 *     -> linear head                                   logits [B, classes]
 *
 * All parameters live in one flat buffer and their gradients in another laid
 * out alike; named views (vit_model_tensor) describe the layout, which is
 * also the order tensors are stored in a checkpoint.
 *
 * Ownership: a vit_model owns its parameter, gradient and scratch buffers
 * (pointers returned by the accessors below stay valid until
 * vit_model_free).  Thread safety: a model and the tape it records on are
 * used by one thread at a time; the config functions are reentrant.
 * The accessors take a valid (non-NULL) model: they do not check it.
 */
#ifndef VIT_MODEL_H
#define VIT_MODEL_H

#include "vit/core.h"
#include "vit/arch.h"
#include "vit/bf16.h"
#include "vit/embeddings.h"
#include "vit/optim.h"
#include "vit/params.h"
#include "vit/rng.h"
#include "vit/layernorm.h"
#include "vit/tape.h"
#include "vit/train_config.h"

VIT_BEGIN_DECLS

enum { VIT_POOL_CLS = 0, VIT_POOL_MEAN = 1 };

/* Test-time augmentation of evaluation (config key tta, "none" / "shift9"
 * / "auto" / "shift9flip" in text): VIT_TTA_NONE scores one pass per
 * image; VIT_TTA_SHIFT9 averages the class probabilities of nine passes,
 * the image itself and its eight one-pixel translations (dy, dx in -1, 0,
 * 1; zeros shifted in, as the training shift augmentation does:
 * vit_translate in vit/augment.h); VIT_TTA_SHIFT9_FLIP averages eighteen,
 * those nine and the nine of the image mirrored left-right
 * (vit_flip_horizontal), for models trained with flips (the same image
 * seen both ways; never for digits or text).  VIT_TTA_AUTO ("auto") is the
 * trainer's choice at the end of a run (vit_train_result in vit/train.h):
 * shift9 (shift9flip for a model trained with flip = 1) becomes the
 * headline only if it scores higher than one pass on the validation set;
 * without one, one pass is the headline and the test-time-augmented test
 * figure is reported beside it.  The recipe's key (vit_train_config.tta in
 * vit/train_config.h) says which a run uses; vit_evaluate_tta and
 * vit_predict_tta (vit/train.h) take it as an argument, auto as none. */
enum { VIT_TTA_NONE = 0, VIT_TTA_SHIFT9 = 1, VIT_TTA_AUTO = 2, VIT_TTA_SHIFT9_FLIP = 3 };

/* "none", "shift9", "auto" or "shift9flip" (the config text of tta); "?"
 * for another value.  A static string. */
const char *vit_tta_name(int tta);

/* The number of forward passes an image costs under tta: 1 (none, auto),
 * 9 (shift9) or 18 (shift9flip); 0 for an unknown value. */
int vit_tta_passes(int tta);

/* Most shared (not architecture) keys a vit_config has: the size of its
 * `given` flags. */
#define VIT_CONFIG_KEYS_MAX 64

/* Most channels an image has (vit_config.channels' range). */
#define VIT_CHANNELS_MAX 4

/* One value per channel (vit_config.data_mean, data_std): v[0 .. n-1]; n
 * = 0 is none (the entries past n are not read). */
typedef struct vit_channel_values {
    int n;
    double v[VIT_CHANNELS_MAX];
} vit_channel_values;

/* What the network is: the data's shape, its architecture (vit/arch.h) and
 * the architecture's keys, and the initialisation of its tensors; how it is
 * trained is a vit_train_config (vit/train_config.h).  Both are read from
 * one text config of `key = value` lines ('#' starts a comment): keys are
 * the field names below (image_height .. classes, init_std), `arch` ("vit"
 * when absent), the architecture's own keys (for the ViT, the fields patch
 * .. ln_eps below) and the recipe's keys (vit_train_config's fields);
 * vit_config_set() accepts the network's, which is how command-line flags
 * override the file.  Every key knows whether it was given
 * (vit_config_given), so that nothing needs a sentinel value. */
typedef struct vit_config {
    /* the data's shape */
    int image_height, image_width, channels; /* set from the data at train time */
    int classes;                             /* likewise */
    /* the ViT's keys (arch "vit"; unused with another architecture) */
    int patch;      /* P: patch side in pixels; divides the image size */
    int dim;        /* D: token width */
    int depth;      /* number of blocks */
    int heads;      /* attention heads; divides dim */
    int mlp;        /* hidden width of the MLP */
    int pool;       /* VIT_POOL_CLS or VIT_POOL_MEAN ("cls" / "mean" in text) */
    int patch_stride; /* S: patch stride, 1 .. P; 0 means P (no overlap) */
    int patch_pad;  /* Z: zero padding around the image for the patches, 0 .. P-1;
                       (H + 2Z - P) and (W + 2Z - P) must be multiples of S */
    int lsa;        /* 1: locality self-attention (Lee, Lee & Song 2021): no
                       token attends itself (a no-self mask) and each layer
                       learns a per-head score scale blocks.L.attn.tau [heads],
                       initialised to 1/sqrt(dim/heads), not decayed */
    int stem;       /* 0: the patches are cut from the image itself.  > 0: a
                       convolutional stem of this many channels first: a 3x3
                       convolution at stride 1 over the image padded by 1
                       (stem.w [9 C, stem], stem.b [stem]) and GELU, whose
                       H x W x stem feature map the patches are cut from
                       (patch.w [P P stem, D]): each token then starts from
                       local features, not raw pixels */
    int stem2;      /* 0: none.  > 0 (needs stem > 0 and an even H and W):
                       a second stem convolution of this many channels, 4x4
                       at stride 2 over the stem's feature map padded by 1
                       (stem2.w [16 stem, stem2], stem2.b [stem2]) and GELU:
                       the patches are cut from its H/2 x W/2 x stem2 map
                       (patch.w [P P stem2, D]), so patch, patch_stride
                       and patch_pad count that map's pixels (patch 2 there
                       covers 4x4 pixels of the image) */
    int local_conv; /* 1: every block starts with vit_op_local_conv
                       (vit/local_conv.h): the patch tokens plus a 3x3
                       depthwise convolution of them over their grid
                       (blocks.L.local.w [9, dim], blocks.L.local.b [dim],
                       before ln1.g), the class token unchanged; 0: none */
    double ln_eps;  /* the layer norms' epsilon (every block's two and the
                       final one): 1e-5 (PyTorch's default, ours); 1e-6 for
                       weights from timm's ViTs, which were trained with it */
    int image_norm;      /* 1: each image is standardised before the network,
                            each channel by its own mean and std over the
                            image's pixels (vit_image_norm), in training,
                            scoring, prediction and export alike: for data
                            whose colours carry no class; 0: none (its
                            config text has no line then) */
    int data_norm;       /* 1: each channel is normalised before the network
                            by the training set's statistics, (x - data_mean[c])
                            / data_std[c] (vit_data_norm), in training,
                            scoring, prediction and export alike; the trainer
                            computes them once from its training images
                            (vit_channel_stats) unless given, and
                            they are stored with the model.  Not with
                            image_norm (vit_config_check refuses both).
                            0: none (its config text has no line then) */
    vit_channel_values data_mean; /* data_norm's per-channel mean (n = 0: not
                                     yet known; config key data_mean, a
                                     comma-separated list) */
    vit_channel_values data_std;  /* and std, each > 0 (key data_std) */
    double init_std;     /* std of the truncated-normal weight init: part of
                            the tensor table (vit_model_tensor.scale) */
    /* the architecture (vit/arch.h): set with vit_config_set(cfg, "arch",
       NAME) or vit_config_set_arch, not by hand */
    const vit_arch *arch;   /* NULL or vit_arch_vit(): the ViT */
    union {                 /* its config struct, at its keys' offsets */
        unsigned char bytes[VIT_ARCH_CONFIG_MAX];
        double align_real;
        long long align_int;
        void *align_ptr;
    } arch_cfg;
    unsigned char arch_given[VIT_ARCH_KEYS_MAX]; /* 1: its key i was given */
    unsigned char given[VIT_CONFIG_KEYS_MAX];    /* 1: shared key i was given */
} vit_config;

/* The floor under each channel's variance in vit_image_norm: a flat
 * channel is left near zero rather than blown up. */
#define VIT_IMAGE_NORM_EPS 1e-4

/* Per-image standardisation (vit_config.image_norm): y = (x - m) /
 * sqrt(v + VIT_IMAGE_NORM_EPS) for each of count images x [pixels,
 * channels] (channels interleaved, as vit_dataset holds them), m and v the
 * mean and (biased) variance of that channel over the image's pixels,
 * summed in double.  y (overwritten) may be x itself.  Returns VIT_OK, or
 * VIT_EINVAL (message naming the argument) for a NULL pointer or a count,
 * pixels or channels below 1.  Thread-safe on distinct y. */
int vit_image_norm(vit_real *y, const vit_real *x, int count, int pixels, int channels);

/* Normalisation by fixed per-channel statistics (vit_config.data_norm):
 * y = (x - mean[c]) / std[c], computed in double, for each of count
 * images x [pixels, channels] (channels interleaved).  mean and std hold
 * `channels` values, std > 0 (not checked here: vit_config_check checks a
 * model's).  y (overwritten) may be x itself.  Returns VIT_OK, or
 * VIT_EINVAL (message naming the argument) for a NULL pointer or a count,
 * pixels or channels below 1.  Thread-safe on distinct y. */
int vit_data_norm(vit_real *y, const vit_real *x, int count, int pixels, int channels,
                  const double *mean, const double *std);

/* The statistics vit_data_norm applies, of count images [pixels, channels]
 * (channels interleaved; a training set's, vit_dataset.images): mean[c]
 * and std[c] = sqrt(var[c] + VIT_IMAGE_NORM_EPS), var[c] the (biased)
 * variance of channel c over every pixel of every image; sums in double
 * in image order, two passes, so the figures depend on the images alone
 * (every rank of a data-parallel run gets the same).  The floor keeps a
 * flat channel (an opaque alpha) finite.  mean and std (the caller's,
 * `channels` values each) are overwritten.  Returns VIT_OK, or VIT_EINVAL
 * naming the argument for a NULL pointer or a count, pixels or channels
 * below 1 (or channels above VIT_CHANNELS_MAX); VIT_ENUM for a non-finite
 * pixel.  Reentrant. */
int vit_channel_stats(const vit_real *images, int count, int pixels, int channels, double *mean,
                      double *std);

/* Fills (overwrites) *cfg with the built-in network (the digits-tiny
 * shape, the ViT) and no key given.  cfg must not be NULL.  Cannot fail. */
void vit_config_default(vit_config *cfg);

/* Sets one key of the network from text, e.g. ("dim", "64"), and marks it
 * given; the strings are only read.  Returns VIT_OK, or VIT_EINVAL with a
 * message naming the key for a NULL argument, an unknown key, a key of the
 * recipe (vit_train_config_set's; the message says so), or a value that
 * does not parse or is out of range (then *cfg is unchanged).  For a known key (one vit_config_key_help
 * lists) and a non-NULL value the message is always "KEY: PROBLEM", KEY
 * as given, e.g. "dim: expected an integer, got 'x'": a caller that
 * names the setting its own way (a command-line flag) prints its name and
 * the message from byte strlen(key) + 2 on. */
int vit_config_set(vit_config *cfg, const char *key, const char *value);

/* Sets one key of either kind: a network key into *cfg as vit_config_set,
 * a recipe key into *tc as vit_train_config_set (tc may be NULL: a recipe
 * key is then refused, naming it).  The shared setter of the parser below,
 * for a caller that takes keys of both kinds (a tool's --set KEY=VALUE).
 * Errors as those two; an unknown key: "unknown config key 'KEY'". */
int vit_config_set_any(vit_config *cfg, vit_train_config *tc, const char *key,
                       const char *value);

/* Reads a config file: its network keys over *cfg and its recipe keys
 * over *tc (keys not in the file keep their value).  tc may be NULL: a
 * file for the network alone, where a recipe key is an error naming it.
 * Each key may appear once: a key given twice is refused (the later line
 * would otherwise silently win), and the message names both lines, e.g.
 * "run.cfg:7: patch_stride is set twice (first on line 3)".
 * Returns VIT_OK; VIT_EINVAL for a NULL argument; VIT_EIO if the file
 * cannot be opened or read; VIT_EFORMAT for a line that is not
 * `key = value`, an unknown key, a value that does not parse or is out of
 * range (the message of vit_config_set after the file and line), a key
 * given twice, an overlong line or file, or a NUL byte.  Errors name the
 * file and line; on error *cfg and *tc may hold the lines before it. */
int vit_config_load(vit_config *cfg, vit_train_config *tc, const char *path);

/* Parses NUL-terminated config text (same syntax and rules as the file,
 * each key at most once) over *cfg and *tc (tc may be NULL, as above); `origin` names it in errors ("config"
 * if NULL).  Errors as for vit_config_load, without VIT_EIO.  The config
 * text stored in checkpoints is read with it, so a checkpoint whose config
 * repeats a key is refused too (vit_config_format never writes one). */
int vit_config_parse(vit_config *cfg, vit_train_config *tc, const char *text,
                     const char *origin);

/* Writes every key of the network and, when tc is not NULL, of the recipe
 * as config text into the caller's buf[cap] (overwritten, NUL-terminated):
 * the data's shape, `arch` (not for the ViT), the architecture's keys
 * (but a key that follows another, vit_arch_key.follows, and equals it), then
 * the recipe's (init_std among them, where it stood before the split, so
 * that the text checkpoints store is as it was).  vit_config_parse reads
 * it back to equal structs.  Returns the length (without the NUL), or
 * VIT_EINVAL for a NULL cfg or buf or a cap too small. */
int vit_config_format(const vit_config *cfg, const vit_train_config *tc, char *buf, size_t cap);

/* Checks the network for consistency (sizes in range, patch divides the
 * image, heads divide dim; the recipe: vit_train_config_check); VIT_OK, or VIT_EINVAL naming
 * the field (also for a NULL cfg).  Reads only. */
int vit_config_check(const vit_config *cfg);

/* A patch side for height x width images, for when the caller has none
 * (e.g. the data's images are larger than those a config was tuned for):
 * the patch must divide both sides (vit_config_check), and the grid of
 * height/P x width/P patches decides the tokens and so the cost.
 *   - Of the sides P dividing both height and width that leave a grid of
 *     at least 2x2, the smallest with height/P <= max_grid and
 *     width/P <= max_grid: the finest grid within the limit.
 *   - If none fits the limit, the largest such P: the fewest tokens
 *     there are (the grid is then over the limit; *fits says so).
 *   - Images with a side below 2 have no such P: 1 is used.
 * Sets *patch and, if not NULL, *fits (1 when the grid is within
 * max_grid x max_grid) and why: one line (cap bytes, NUL-terminated,
 * truncated to fit) saying why, e.g. for 28x28 and max_grid 8 (P = 4):
 * "7x7 patches of 28x28, the finest grid within 8x8".
 * Returns VIT_OK; VIT_EINVAL (nothing set) for a NULL patch, a side
 * outside 1 .. 100000 or max_grid < 1.  Pure; any thread. */
int vit_config_pick_patch(int height, int width, int max_grid, int *patch, int *fits, char *why,
                          size_t cap);

/* Key and help text of config key i (0-based) of the network's shared keys
 * and the ViT's, in the order of a ViT's config text (the recipe's:
 * vit_train_config_key_help), for tools that list the
 * keys: returns the help and sets *key (when key is not NULL); both are
 * static strings.  NULL (and *key untouched) outside 0 .. count-1.
 * Another architecture's keys are its vit_arch.keys (vit/arch.h). */
const char *vit_config_key_help(int i, const char **key);

/* Number of model parameters for a config of any architecture (0, with a
 * message, if the config is invalid or NULL).  Pure; any thread. */
size_t vit_config_param_count(const vit_config *cfg);

/* Multiply-adds of one image's forward pass (what the model's matrix
 * products do; layer norms, softmax, GELU, bias and residual adds are not
 * counted): for another architecture than the ViT what its describe hook
 * says (vit/arch.h); for the ViT, with N patches (vit_patch_count of vit_config_patch_shape, so
 * overlapping patches count as the model makes them), T = N + 1 tokens and
 * D = dim:
 *   stem (stem > 0)        H*W * 9*C * stem
 *   stem2 (stem2 > 0)      H/2*W/2 * 16*stem * stem2
 *   patch embedding        N * P*P*C' * D   (C' = stem2 if stem2 > 0, else
 *                                            stem if stem > 0, else C)
 *   per block              T * (D*3D + D*D + 2*D*mlp)   (Q/K/V, output, MLP)
 *                        + 2 * T*T * D                  (Q K^T and P V)
 *   head                   D * classes
 * The count of vit_model_forward for one image; the training step's last
 * block with pool = cls computes less (see vit_model_train_grads).  The
 * default config (digits-tiny: 4x4 grid, D 64, depth 4, mlp 128) gives
 * 2,393,216.  Returns 0, with a message, if cfg is NULL or invalid
 * (vit_config_check).  Pure; any thread. */
size_t vit_config_macs(const vit_config *cfg);

/* The patch-embedding shape a config describes, for one image (batch 1):
 * the size and channels of what the patches are cut from (the image; the
 * stem's H x W x stem feature map when stem > 0; stem2's H/2 x W/2 x stem2
 * when stem2 > 0 too), patch, dim, patch_stride and patch_pad.  Does not
 * check the config (vit_patch_count / vit_patch_grid on the result do).
 * cfg must not be NULL. */
vit_patch_shape vit_config_patch_shape(const vit_config *cfg);

/* The stem's convolution as a patch shape, for one image (batch 1): 3x3
 * kernel, stride 1, padding 1 over the H x W x channels image, dim = stem
 * (its H*W outputs are the feature map, [H, W, stem]).  Meaningful only
 * for stem > 0.  cfg must not be NULL. */
vit_patch_shape vit_config_stem_shape(const vit_config *cfg);

/* The second stem convolution as a patch shape, for one image (batch 1):
 * 4x4 kernel, stride 2, padding 1 over the H x W x stem feature map, dim =
 * stem2 (its H/2 * W/2 outputs are the map the patches are cut from,
 * [H/2, W/2, stem2]).  Meaningful only for stem2 > 0.  cfg must not be
 * NULL. */
vit_patch_shape vit_config_stem2_shape(const vit_config *cfg);

typedef struct vit_model vit_model;

/* A model for cfg (copied) with zeroed parameters and gradients, owned by
 * the caller (vit_model_free).  NULL with vit_last_error on error:
 * VIT_EINVAL for a NULL or inconsistent cfg (vit_config_check), VIT_ENOMEM. */
vit_model *vit_model_new(const vit_config *cfg);

/* Frees the model and every buffer it owns.  NULL is allowed. */
void vit_model_free(vit_model *m);

/* The precision the model's training step runs in (vit_model_train_grads):
 * VIT_PRECISION_FP32 (a new model's) or VIT_PRECISION_BF16, as
 * vit_model_set_precision resolved it.  0 (FP32) for a NULL m. */
int vit_model_precision(const vit_model *m);

/* Sets the precision of the model's later training steps (the recipe's
 * precision, vit/train_config.h), resolved by vit_precision_resolve
 * (vit/bf16.h).  bf16 is implemented for the architectures that declare
 * their weight matrices (vit_arch.bf16_weights, vit/arch.h): the built-in
 * ViT and Swin, and a registered one that offers it.  Their products (the
 * linear layers, patch embeddings, and the ViT's attention products where
 * heads are >= 64 wide over >= 64 keys) take bf16 inputs with float32
 * sums, the declared weights packed once per step from the float32 master
 * weights; Swin's window attention, every softmax, layer norm, reduction,
 * the loss and the optimizer stay float32.  For an architecture without
 * the hook (the library cannot tell which of its tensors are weight
 * matrices, nor whether it trains within bf16's rounding) bf16 is
 * VIT_EINVAL, naming the architecture, whatever the CPU, and auto resolves
 * to fp32.  Turning bf16 on calls the hook (once).  Returns what it
 * resolved to (VIT_PRECISION_FP32 or _BF16); VIT_EINVAL for a NULL m, a
 * precision that is not one of VIT_PRECISION_* or bf16 for an architecture
 * without the hook; the hook's error (a declaration vit_arch_bf16_add
 * refused, VIT_ENOMEM); on an error the model keeps its precision.  Not
 * while the model trains. */
int vit_model_set_precision(vit_model *m, int precision);

/* Activation checkpointing of the model's later training steps (the
 * recipe's recompute): 1 keeps only each block's input and recomputes the
 * block in the backward (the ViT; Swin remakes its blocks' layer-norm
 * outputs and window weights instead), 0 (a new model's) keeps every
 * activation.
 * VIT_OK; VIT_EINVAL for a NULL m or a value other than 0 and 1.  Not
 * while the model trains.  vit_model_recompute reads it (0 for NULL). */
int vit_model_set_recompute(vit_model *m, int recompute);
int vit_model_recompute(const vit_model *m);

/* Training's pieces (the recipe's micro_batch).  vit_model_train_grads
 * gives each thread a slice of the batch and runs the slice's forward and
 * backward in pieces of at most `images` images, one after another on the
 * thread's tape, their gradients added up: the same gradient up to
 * rounding, with the memory of one piece's activations instead of the
 * slice's, and no recomputation.  0 (a new model's) is automatic: at the
 * first training step of at least 3 images a thread, the model is probed
 * (a forward and backward of 1 and of 3 of the batch's images on new tapes,
 * vit_tape_used_bytes) and pieces take as many images as fit in 24 MiB of
 * tape; the probe depends on the model, its precision and recompute (a
 * change of either probes again), not on the images, so runs of the same
 * model, batch and threads sum in the same order and stay bitwise
 * repeatable.  A slice of fewer images than a piece runs whole.
 * VIT_OK; VIT_EINVAL for a NULL m or a negative images.  Not while the
 * model trains.  vit_model_micro_batch reads the images a piece in effect:
 * the value set, else the automatic choice once made (0 before it, and for
 * NULL). */
int vit_model_set_micro_batch(vit_model *m, int images);
int vit_model_micro_batch(const vit_model *m);

/* The model's architecture (vit/arch.h: the ViT unless its config says
 * otherwise), and what it described of the model (multiply-adds, drop-path
 * stages, attention maps); owned by the model.  NULL for a NULL m. */
const vit_arch *vit_model_arch(const vit_model *m);
const vit_arch_info *vit_model_info(const vit_model *m);

/* The config the model was made with (owned by the model). */
const vit_config *vit_model_config(const vit_model *m);

/* ViT-style initialisation: weights ~ truncated normal(0, init_std), biases
 * and the class token 0, layer-norm gains 1, position embeddings
 * ~ truncated normal(0, init_std).  Overwrites every parameter, drawing from
 * (and advancing) the caller's rng.  Cannot fail. */
void vit_model_init(vit_model *m, vit_rng *rng);

/* Flat parameter and gradient buffers, vit_model_param_count() reals each,
 * laid out as vit_model_tensor_at describes.  Owned by the model; the caller
 * may read and write them (an optimizer updates params in place). */
vit_real *vit_model_params(vit_model *m);
vit_real *vit_model_grads(vit_model *m);
size_t vit_model_param_count(const vit_model *m);

/* Sets all gradients to zero (call before each backward: it accumulates). */
void vit_model_zero_grads(vit_model *m);

/* Weight-decay groups: weight matrices decay; biases, layer-norm parameters,
 * position embeddings and the class token do not.  Returns an array owned by
 * the model, covering [0, param_count) as vit_adamw_step needs; *count (if
 * count is not NULL) gets its length. */
const vit_param_group *vit_model_groups(const vit_model *m, int *count);

/* Named parameter tensors in layout order, for checkpoints and export: the
 * model lays out its parameters with a vit_params (vit/params.h), and these
 * are its descriptions (name, e.g. "blocks.0.attn.w_qkv", shape, offset into
 * the flat buffers, size, init, decay). */
typedef vit_param_tensor vit_model_tensor;

/* Number of named tensors, and tensor i of them (owned by the model; NULL
 * for a NULL m or i outside 0 .. count-1). */
int vit_model_tensor_count(const vit_model *m);
const vit_model_tensor *vit_model_tensor_at(const vit_model *m, int i);

/* Records the forward pass for images [batch, H, W, C] (batch first,
 * channels last) on the tape (after the caller's vit_tape_reset) and returns
 * the logits [batch, classes], a tensor owned by the tape.  The images
 * buffer (the caller's, only read) must stay valid until the backward.  With
 * grads != 0 the parameters are leaves whose grad is the model's gradient
 * buffer, so vit_tape_backward accumulates into vit_model_grads(m); with
 * grads = 0 they are constants (evaluation: no gradient buffers, less work)
 * and the batch runs in pieces of 64 images spread over the threads
 * (vit_threads()), each thread's pieces on a tape of its own: the caller's,
 * then tapes owned by the model (those of vit_model_train_grads, created on
 * first use, freed with it), so a model, like a tape, serves one thread at
 * a time.  A piece's ops then run on its thread alone; they compute the
 * same bits as when split across threads (tests/test_model.c checks the
 * logits and maps of three threads against one's).  With grads = 0 it also
 * keeps the attention maps vit_model_attention_maps shows: a ViT's cost
 * nothing extra, but a Swin makes its dense per-block maps for this (its
 * window attention a second time, heads x N^2 values per block and
 * image), so score large batches with vit_evaluate_tta (vit/train.h),
 * which asks for no maps.  Returns NULL on error (message in
 * vit_last_error): VIT_EINVAL for a NULL m, tape or images or batch < 1,
 * VIT_ENOMEM, or a kernel's error. */
vit_tensor *vit_model_forward(vit_model *m, vit_tape *tape, const vit_real *images,
                              int batch, int grads);

/* One training batch's loss and gradients, the batch cut into one
 * contiguous slice per thread (vit_threads(), at most batch), each slice run
 * forward and backward on its own tape at the same time.
 *
 * images [batch, H, W, C], labels [batch] (0 .. classes-1) -> the model's
 * gradient buffer OVERWRITTEN with d(mean loss)/d(params), *loss = the mean
 * cross-entropy (label smoothing as vit_op_cross_entropy), *correct (may be
 * NULL) = rows whose largest logit is their label.
 *
 * For a tiny model this is the only way to keep two cores busy: a slice
 * runs every kernel on one thread, with no fork/join per op.  The slices'
 * gradients are added in slice order, so the result is bitwise the same for
 * a fixed thread count and equals, up to rounding, the one-tape forward and
 * backward of the whole batch (vit_model_forward).  With a head on the
 * class token (pool = cls) the last block computes that token alone: every
 * token's keys and values, the query, attention and MLP of token 0 (the
 * other rows would receive no gradient), so that block costs a fraction of
 * the full one and the result differs from the one tape's by rounding on
 * any thread count; with the mean pool, one thread gives exactly the one
 * tape's numbers.  Tapes and one gradient buffer per extra slice are owned
 * by the model (created on first use, freed with it); activation memory is
 * at most one tape's.  Afterwards vit_model_attention_maps() has nothing to
 * show (NULL).
 *
 * Returns VIT_OK; VIT_EINVAL for NULL pointers or batch < 1; VIT_ENOMEM;
 * or a kernel's error from the first failing slice (VIT_ENUM for a
 * non-finite score or loss), with its message. */
int vit_model_train_grads(vit_model *m, const vit_real *images, const int *labels, int batch,
                          vit_real smoothing, double *loss, int *correct);

/* What a training step may add to vit_model_train_grads (NULL fields: as
 * without them). */
typedef struct vit_train_extras {
    const vit_real *targets;    /* [batch, classes] soft targets (mixup, cutmix:
                                   vit_augment_batch in vit/augment.h), the
                                   loss then vit_op_cross_entropy_soft and
                                   smoothing unused (fold it into the
                                   targets); labels still count *correct */
    const vit_real *drop_scale; /* [depth, 2, batch] stochastic depth: block
                                   l's attention branch scaled per sample by
                                   drop_scale[(2l) batch + i], its MLP branch
                                   by drop_scale[(2l + 1) batch + i]
                                   (vit_block_opts.drop_attn, drop_mlp) */
    /* Called on the calling thread only (the one that may call MPI), during
     * the backward, as soon as values [offset, offset + count) of the
     * gradient buffer (vit_model_grads) are final, each value once, about
     * the last block's first (vit_tape_on_leaf_grad); e.g.
     * vit_dist_buckets_ready, to sum them over the ranks while the backward
     * goes on.  On one slice a report is a parameter tensor (or a fused
     * run of them) as its backward ends.  On several slices
     * (vit_threads() > 1) a report is a chunk of 2048 values (the last one
     * shorter) once every slice has made all of it final, added up over
     * the slices then, in slice order (so the gradients are bitwise those
     * of the step without reports); in any order.  Once its own slice is
     * done the calling thread waits for the others' chunks, calling
     * grads_ready(ctx, 0, 0) (nothing new) about every millisecond
     * meanwhile: a chance to move work in flight on.  Blocks under
     * recompute report from their recomputation.  Values never reported
     * are final when the call returns.  NULL: no reports. */
    void (*grads_ready)(void *ctx, size_t offset, size_t count);
    void *ready_ctx;
} vit_train_extras;

/* vit_model_train_grads with extras ex (may be NULL: exactly
 * vit_model_train_grads).  The buffers ex points at are read during the
 * call only.  Errors as vit_model_train_grads. */
int vit_model_train_grads_ex(vit_model *m, const vit_real *images, const int *labels, int batch,
                             vit_real smoothing, const vit_train_extras *ex, double *loss,
                             int *correct);

/* The attention maps of layer `layer` (0 .. vit_model_info(m)->attn_layers
 * - 1) from the model's last forward (memory of the tape it ran on, valid
 * until that tape's reset), [batch, heads, queries, keys] as
 * vit_model_attention_layer(m, layer) says; row q of head h is query q's
 * distribution over the keys.  The ViT's layers are its blocks, T = patches
 * + 1 queries and keys (token 0 the class token).  A Swin's are its blocks
 * in order, stage by stage, each [batch, heads_s, N_s, N_s] over its
 * stage's grid of N_s tokens (no class token): a query's weights over the
 * tokens of its window at their ORIGINAL grid positions (a shifted
 * block's cyclic shift undone), 0 outside it; the maps are made only by
 * this kind of forward (vit_model_forward), not in training or scoring.
 * Read only; NULL for a NULL m, layer out of range, a model long enough
 * that its layers run the tiled attention core (vit_sdpa_use_tiled), which
 * keeps no maps, or a Swin whose first grid has more than 4096 tokens.
 * Scoring keeps none either: NULL after vit_predict_tta, vit_evaluate_tta,
 * vit_export_logits_csv and the trainer's evaluations, which read only the
 * logits. */
const vit_real *vit_model_attention_maps(const vit_model *m, int layer);

/* The shape and token grid of layer `layer`'s maps (vit_arch_attn,
 * vit/arch.h: heads, queries, keys, grid_h x grid_w, first, cls, stage,
 * label), as the architecture described them when the model was made;
 * owned by the model.  NULL for a NULL m or layer outside 0 ..
 * vit_model_info(m)->attn_layers - 1.  (New in 0.3.0.) */
const vit_arch_attn *vit_model_attention_layer(const vit_model *m, int layer);

VIT_END_DECLS

#endif

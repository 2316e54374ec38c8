/*
 * vit/arch.h - the architecture seam: what a network must tell the library
 * so that vit_model, the trainer, checkpoints, evaluation and TTA,
 * export/import, vit_attn, vit_bench and every tool can run it.
 *
 * A new architecture is one file: a static vit_arch (below) with
 *   - its own config keys: a table of vit_arch_key rows (key, type, range,
 *     default as text, help) describing the fields of the arch's own config
 *     struct, parsed by the library's one config parser (vit_config_set /
 *     _parse / _load) into that struct's storage in the vit_config
 *     (cfg->arch_cfg), every key knowing whether it was given
 *     (vit_config_given: no sentinel values);
 *   - build: its parameter tensors added to a vit_params (vit/params.h)
 *     from its config and the data's shape (cfg->image_height, image_width,
 *     channels, classes); rows may differ from stage to stage;
 *   - forward: the network on the tape, images [B, H, W, C] -> logits
 *     [B, classes], with the training extras it can use;
 *   - describe: its multiply-adds per image, how many residual stages
 *     stochastic depth may drop, how many attention maps it offers (or
 *     none), and attn_layer: each map's shape and token grid;
 *   - optionally export_tensor: each tensor's name and layout in an exported
 *     file (copy, transpose, Conv2d reshape), adapt: its keys the user
 *     did not give, fitted to the data (as the ViT's patch is), and
 *     bf16_weights: its weight matrices, for a bf16 training step.
 * then vit_arch_register(&my_arch) before the first config names it, and
 * `arch = NAME` in a config (or `--arch NAME` to vit_train) selects it.
 * docs/extending.md works one through; examples/convmlp.c is one.
 *
 * A vit_config (vit/model.h) carries the selection and the storage:
 *     const vit_arch *arch;            NULL or vit_arch_vit(): the ViT
 *     (aligned bytes) arch_cfg;        the arch's own config struct
 *     unsigned char arch_given[..];    per arch key: 1 when given
 * set through vit_config_set(cfg, "arch", NAME) / vit_config_set_arch and
 * the arch's keys; vit_config_format writes `arch = NAME` and the arch's
 * keys (nothing for the ViT: its text is as before), so a checkpoint's
 * stored config text records the architecture and its config.
 *
 * The built-in architecture "vit" (the Vision Transformer of vit/model.h)
 * is the default: a config, checkpoint or export without `arch` is a ViT,
 * so every file written before the seam reads as it did.  For that reason
 * alone its keys (patch .. local_conv) stay fields of vit_config itself;
 * every other architecture's live in cfg->arch_cfg.
 *
 * Threads: the registry is written by vit_arch_register only, which must
 * not run at the same time as anything that reads it (register at start-up);
 * an arch's hooks may run on several threads at once (see each).
 */
#ifndef VIT_ARCH_H
#define VIT_ARCH_H

#include <stddef.h>

#include "vit/core.h"
#include "vit/params.h"
#include "vit/tape.h"

VIT_BEGIN_DECLS

typedef struct vit_config vit_config; /* vit/model.h */

/* ---- config keys ---------------------------------------------------------- */

/* The type of a key's field in the arch's config struct. */
enum vit_key_type {
    VIT_KEY_INT = 0,  /* int; the range [lo, hi] is checked */
    VIT_KEY_REAL = 1, /* double, finite; the range [lo, hi] is checked */
    VIT_KEY_ENUM = 2  /* int: the index of the value's text in `names` */
};

/* One key of an architecture's config: its text name, where its value lives
 * (offset into the arch's config struct, e.g. offsetof(my_cfg, width)), its
 * range, default and a one-line help for tools that list the keys. */
typedef struct vit_arch_key {
    const char *key;           /* [a-z0-9_]+; not a key of the shared table
                                  (vit_config_key_help) nor "arch" */
    int type;                  /* enum vit_key_type */
    size_t offset;             /* of an int (INT, ENUM) or a double (REAL) */
    double lo, hi;             /* allowed range, inclusive (INT, REAL) */
    const char *def;           /* the default, as text the key accepts */
    const char *help;          /* one line */
    const char *const *names;  /* ENUM: the accepted texts, NULL-terminated;
                                  the value stored is the index; else NULL */
    const char *follows;       /* NULL, or an earlier INT key of the same
                                  range whose value this INT key takes while
                                  it is not given (vit_config_given): setting
                                  that key (vit_config_set, config text,
                                  checkpoints) sets this one too, and
                                  vit_config_format leaves this key out when
                                  the two are equal, so text written before
                                  the key existed reads as it did and keeps
                                  its bytes.  Swin's window_w follows
                                  window.  (New in 0.3.0.) */
} vit_arch_key;

/* Most keys an architecture may have, and the bytes of its config struct
 * that a vit_config carries (cfg->arch_cfg). */
#define VIT_ARCH_KEYS_MAX 64
#define VIT_ARCH_CONFIG_MAX 1024

/* ---- building and running -------------------------------------------------- */

/* What a forward is asked to do; filled by vit_model, read by the arch's
 * forward (which may run on several threads at once, each with its own
 * tape and grads: it must treat state and cfg as read-only). */
typedef struct vit_arch_run {
    const vit_config *cfg;   /* the model's config: data shape, init_std
                                and, through vit_config_arch_data(cfg),
                                the arch's own keys */
    void *state;             /* what build made (may be NULL) */
    vit_params *params;      /* the model's tensors, allocated */
    vit_tape *tape;          /* record on it (grad mode as the caller set it) */
    vit_tensor *images;      /* [batch, H, W, C], a constant leaf */
    int batch;
    vit_real *grads;         /* where the parameters' gradients go, laid out as
                                vit_params_grads (the model's buffer or one
                                thread's); NULL: parameters are constants.
                                Make parameter leaves with vit_arch_param. */
    int train;               /* 1: a training step: the extras below apply
                                (stochastic depth); 0: evaluation, export
                                checks, vit_model_forward */
    int recompute;           /* 1: activation checkpointing (training, the
                                recipe's recompute: vit_model_set_recompute):
                                keep less, remake it in the backward; what
                                is the arch's choice (it may ignore it) */
    int loss_only;           /* 1: only the logits' gradient matters (nobody
                                reads maps or inner activations): the arch may
                                skip work that reaches the logits through
                                nothing (the ViT's last block computes the
                                class token alone); results may then differ
                                from loss_only = 0 by rounding */
    const vit_real *drop_scale; /* NULL, or stochastic depth: residual stage l
                                (0 .. vit_arch_info.drop_layers-1) scales its
                                first branch for image i by drop_scale[(2l)
                                drop_stride + i], its second by drop_scale[(2l
                                + 1) drop_stride + i] (vit_block_opts'
                                drop_attn, drop_mlp); only with train = 1 */
    int drop_stride;
    const vit_real **maps;   /* NULL, or [attn_layers]: set maps[l] to layer l's
                                attention probabilities on the tape
                                ([batch, heads, queries, keys] as the arch's
                                attn_layer hook says of layer l), NULL where
                                there are none */
    vit_real *const *maps_to; /* NULL, or [attn_layers]: copy layer l's
                                probabilities there instead (the caller
                                releases the tape's memory after a piece).
                                Both NULL (training, scoring): make none,
                                and spend nothing on them */
} vit_arch_run;

/* A leaf on run->tape over parameter tensor i of run->params, its gradient
 * going to run->grads at the tensor's offset (a constant when run->grads is
 * NULL).  NULL on error, recorded in the tape's status so that the ops fed
 * it fail too: VIT_EINVAL for a NULL run or i out of range, VIT_ENOMEM. */
vit_tensor *vit_arch_param(const vit_arch_run *run, int i);

/* A 1-D leaf over `count` consecutive tensors from i (as
 * vit_params_leaf_range), gradient as vit_arch_param. */
vit_tensor *vit_arch_param_range(const vit_arch_run *run, int i, int count);

/* What the library asks of a config beside its tensors. */
typedef struct vit_arch_info {
    size_t macs;         /* multiply-adds of one image's forward (matrix
                            products; the convention of vit_config_macs) */
    int drop_layers;     /* residual stages stochastic depth may drop (the
                            trainer's drop_path: stage l at rate drop_path
                            (l + 1) / drop_layers); 0: drop_path is refused */
    /* Attention maps for vit_attn and vit_model_attention_maps: how many
     * layers have one; 0: none (vit_attn says so).  Each layer's shape is
     * the arch's attn_layer hook's (vit_arch_attn below).  (Until 0.3.0
     * the fields attn_heads, attn_queries, attn_keys, attn_grid_h,
     * attn_grid_w, attn_first and attn_cls gave one shape for every
     * layer.) */
    int attn_layers;
} vit_arch_info;

/* Most bytes of a vit_arch_attn's label, its NUL included. */
#define VIT_ARCH_ATTN_LABEL 48

/* One layer's attention maps, as the arch's attn_layer hook describes them
 * and vit_model_attention_layer (vit/model.h) hands them on.  The layer's
 * map is [batch, heads, queries, keys] (row-major): row q of head h is
 * query token q's weights over the keys.  Its tokens are a grid_h x
 * grid_w grid over the whole image, row by row (a cell covers image_height
 * / grid_h by image_width / grid_w pixels), after `first` tokens that are
 * not on it (a class token):
 *     query first + r grid_w + c and key first + r grid_w + c are the
 *     token of grid row r, column c.
 * Layers may differ in every field: a hierarchical model's grid shrinks
 * from stage to stage (Swin: 14x14, then 7x7 after patch merging) and its
 * head count grows. */
typedef struct vit_arch_attn {
    int heads;          /* maps of the layer, one per head, >= 1 */
    int queries, keys;  /* rows and columns of each: >= first + grid_h grid_w */
    int grid_h, grid_w; /* the layer's token grid, >= 1 each */
    int first;          /* tokens before the grid (0, or 1 with a class
                           token at 0) */
    int cls;            /* 1: query 0 is a class token worth drawing
                           (needs first >= 1); 0: none */
    int stage;          /* the stage the layer belongs to, 0-based, for a
                           model whose grids change (Swin); 0 otherwise */
    char label[VIT_ARCH_ATTN_LABEL]; /* "" or a short name of the layer for
                           drawings and listings (a Swin's: "stage 1
                           block 2, shifted", counting from 1 as its
                           keys do); "": the tools call it by its
                           number */
} vit_arch_attn;

/* How a tensor goes into an exported file (vit_export, vit/safetensors.h)
 * and comes back (vit_import). */
enum vit_export_op {
    VIT_EXPORT_COPY = 0,      /* the same values; the file's shape is ours with
                                 leading 1s up to ndim (e.g. [D] as [1, 1, D]) */
    VIT_EXPORT_TRANSPOSE = 1, /* ours [r, q] (y = x W) as PyTorch's [q, r] */
    VIT_EXPORT_CONV = 2       /* ours [(ky k + kx) C + c, out] as Conv2d's
                                 [out, C, k, k] (vit_op_patch_embed's layout);
                                 kernel = k */
};

typedef struct vit_arch_export {
    char name[VIT_PARAMS_NAME_MAX + 1]; /* the file's name of the tensor */
    int op;                             /* enum vit_export_op */
    int ndim;                           /* the file's rank: COPY >= ours, TRANSPOSE 2, CONV 4 */
    int kernel;                         /* CONV: k */
    int order;                          /* file order: by (order, layout index) */
} vit_arch_export;

/* ---- bf16: the weight matrices a training step packs ------------------------ */

/* In a bf16 training step (vit_model_set_precision, vit/model.h; the
 * recipe's precision = bf16 or auto) the matrix products of the library's
 * layer ops on the tape (vit_op_linear, vit_op_patch_embed, vit_op_block
 * and the attention projections; the attention core's where vit/bf16.h
 * says) take bf16 inputs with float32 sums, and a
 * product whose op(B) is one of the model's weight matrices reads it from a
 * copy converted ("packed") once per step, after the optimizer's update,
 * instead of converting it again in every product of every batch slice.
 * An architecture offers bf16 by saying which matrices those are (its
 * vit_arch.bf16_weights hook, which calls vit_arch_bf16_add once per matrix
 * into the set the library hands it); one without the hook has no bf16 step.
 * The set belongs to the library. */
typedef struct vit_arch_bf16 vit_arch_bf16;

/* How the products read a declared matrix W: as it is (y = x W: a linear
 * layer's or a patch embedding's forward), transposed (dx = dy W^T: the
 * gradient of that layer's input; not for a first layer whose input is the
 * images, which get no gradient), or both.  The weight's own gradient
 * (dW = x^T dy) reads no weight. */
enum vit_arch_bf16_use {
    VIT_ARCH_BF16_AS_IS = 1,
    VIT_ARCH_BF16_TRANSPOSED = 2,
    VIT_ARCH_BF16_BOTH = 3
};

/* Declares one weight matrix W [rows, cols] into set: the values of the
 * model's parameter tensor `tensor` (its index in the vit_params build
 * filled) from value `offset` of that tensor on, row i at offset + i ld
 * (ld >= cols; cols for a whole [rows, cols] tensor, more for a column
 * block of a wider one), read by the products as `use` says (enum
 * vit_arch_bf16_use).  A product finds its pack by the exact operand (the
 * address, transposition, shape and row stride it is called with): declare
 * W as the op is given it (vit_op_linear's W [in, out]: rows in, cols out;
 * vit_op_patch_embed's [k k C, dim]).  A matrix no product reads costs a
 * pack per step and changes nothing; a product whose weight is not declared
 * still runs in bf16, converting it per call (the same numbers, slower).
 * Only inside the arch's bf16_weights hook, on its thread.  VIT_OK;
 * VIT_EINVAL (with a message naming the architecture and the tensor) for a
 * NULL set, a tensor out of range, rows, cols below 1, ld below cols, a use
 * that is not one of the enum's, or a matrix that runs past the tensor's
 * values; VIT_ENOMEM. */
int vit_arch_bf16_add(vit_arch_bf16 *set, int tensor, size_t offset, int rows, int cols, int ld,
                      int use);

/* An architecture.  Static storage: the library keeps the pointer. */
typedef struct vit_arch {
    const char *name;     /* [a-z0-9_]+, e.g. "vit", "swin"; the config's arch */
    const char *summary;  /* one line for tools that list architectures */

    /* Config: the fields of the arch's own struct (at most
     * VIT_ARCH_CONFIG_MAX bytes), one vit_arch_key each (at most
     * VIT_ARCH_KEYS_MAX). */
    const vit_arch_key *keys;
    int nkeys;
    size_t config_size;

    /* Consistency of the arch's keys with each other and with the data's
     * shape (cfg->image_height, image_width, channels, classes): VIT_OK, or
     * VIT_EINVAL with a message (vit_set_error, vit/core.h) that names
     * the key and the problem.  Ranges are checked before it.  NULL:
     * nothing more to check.  Pure; any thread. */
    int (*check)(const vit_config *cfg);

    /* Optional (NULL: nothing): sets the keys the user did not give
     * (vit_config_given(cfg, key) == 0) to suit the data's shape and count
     * (set in cfg: image_height, image_width, channels, classes), e.g. a
     * patch side that divides the images, and writes why in one line to
     * why[cap] ("" when nothing changed; why may be NULL with cap 0).
     * vit_train calls it for a new run (not a resume), and vit_recipe_pick
     * on its copy, to cost the epochs with the model it will train.
     * VIT_OK or an error with a message. */
    int (*adapt)(vit_config *cfg, int train_count, char *why, size_t cap);

    /* Adds the model's tensors to p (open, empty) with vit_params_add, in
     * the order a checkpoint stores them, from cfg (checked), and may make
     * *state (what forward needs: tensor indices, masks...), freed by
     * release.  VIT_OK or an error (p's error, VIT_ENOMEM). */
    int (*build)(const vit_config *cfg, vit_params *p, void **state);
    void (*release)(void *state); /* NULL: state is not freed */

    /* The forward on run->tape: run->images -> logits [run->batch, classes],
     * a tensor on the tape; NULL on error (the tape's status and
     * vit_last_error say which).  Runs on several threads at once (one
     * tape each). */
    vit_tensor *(*forward)(const vit_arch_run *run);

    /* Fills *info (zeroed by the caller) for cfg (checked).  Pure. */
    void (*describe)(const vit_config *cfg, vit_arch_info *info);

    /* Needed when describe says attn_layers > 0 (else unused; NULL):
     * fills *a (zeroed by the caller) with the shape of layer `layer`'s
     * maps (0 .. attn_layers - 1) for cfg (checked): what the forward
     * writes through vit_arch_run.maps / maps_to.  vit_model_new calls it
     * once per layer and refuses a model whose hook is missing or
     * describes a shape that does not hold (VIT_EINVAL naming the arch,
     * the layer and the field).  Pure; any thread.  (New in 0.3.0.) */
    void (*attn_layer)(const vit_config *cfg, int layer, vit_arch_attn *a);

    /* Optional (NULL: every tensor under its own name, copied, in layout
     * order): how tensor i of the model (t, as build added it) goes into an
     * exported file.  VIT_OK or an error. */
    int (*export_tensor)(const vit_config *cfg, int i, const vit_param_tensor *t,
                         vit_arch_export *e);
    const char *export_layout; /* the file's "layout" metadata, e.g.
                                  "timm.VisionTransformer"; NULL: the name */

    /* Optional: the arch's bf16 step (see vit_arch_bf16 above).  NULL: it
     * has none: precision bf16 is VIT_EINVAL for it (whatever the CPU) and
     * auto resolves to fp32 (vit_model_set_precision).  Else, for a model
     * of cfg (checked), the state build made and its allocated tensors p,
     * it declares its weight matrices with vit_arch_bf16_add(set, ...) (none
     * is allowed: every product then converts its weight per call), and
     * returns VIT_OK or the first error (vit_arch_bf16_add's, or its own
     * with a message); on an error the model keeps its precision.  By
     * offering bf16 the arch accepts that its training step's products
     * round their inputs to bf16 (u = 2^-8 relative, vit/bf16.h); its
     * vit_op_custom ops still see float values, evaluation and export stay
     * float32.  Called by vit_model_set_precision when a model turns bf16
     * (once, not per step), on the caller's thread; it must not keep set or
     * change p's values.  The built-in vit and swin use it too. */
    int (*bf16_weights)(const vit_config *cfg, const void *state, const vit_params *p,
                        vit_arch_bf16 *set);
} vit_arch;

/* ---- the registry ---------------------------------------------------------- */

/* The built-in Vision Transformer ("vit"), the default architecture. */
const vit_arch *vit_arch_vit(void);

/* Adds arch to the registry (the pointer is kept: static storage).
 * VIT_OK; VIT_EINVAL (with the reason) for a NULL arch or hook (build,
 * forward, describe), a name that is not [a-z0-9_]+ or already taken, more
 * than VIT_ARCH_KEYS_MAX keys, a config_size above VIT_ARCH_CONFIG_MAX, a
 * key that clashes with a shared key or another of its own, a key whose
 * offset does not fit config_size or whose default its own parser refuses;
 * VIT_ENOMEM past 64 architectures.  Not thread-safe (start-up). */
int vit_arch_register(const vit_arch *arch);

/* The architecture named name (built-in or registered), or NULL (also for
 * a NULL name), with no message. */
const vit_arch *vit_arch_find(const char *name);

/* The number of architectures known, and the i-th (0 is "vit"; NULL
 * outside 0 .. count-1): for tools that list them. */
int vit_arch_count(void);
const vit_arch *vit_arch_at(int i);

/* ---- an arch's config inside a vit_config ---------------------------------- */

/* The architecture cfg selects: cfg->arch, or the ViT when that is NULL.
 * NULL for a NULL cfg. */
const vit_arch *vit_config_arch(const vit_config *cfg);

/* The arch's own config struct inside cfg (cfg->arch_cfg; for the built-in
 * ViT, cfg itself, whose fields patch .. local_conv are its keys), for an
 * arch's hooks: `const my_cfg *a = vit_config_arch_data(cfg);`.  NULL for a
 * NULL cfg. */
const void *vit_config_arch_data(const vit_config *cfg);
void *vit_config_arch_data_mut(vit_config *cfg);

/* Selects arch for cfg (NULL: the ViT) with every one of its keys at its
 * default and none given, as `arch = NAME` does.  VIT_OK; VIT_EINVAL (cfg
 * unchanged) for a NULL cfg or an arch that is not registered (its config
 * text would not read back). */
int vit_config_set_arch(vit_config *cfg, const vit_arch *arch);

/* 1 if key was given (by vit_config_set, a config line or a flag) since
 * cfg was made by vit_config_default (or the arch selected), 0 if it holds
 * its default, VIT_EINVAL (negative) for a NULL argument or a key that is
 * neither shared nor the selected arch's.  Replaces sentinel values
 * (patch 0, stride -1). */
int vit_config_given(const vit_config *cfg, const char *key);

VIT_END_DECLS

#endif

/*
 * vit/params.h - named parameter tensors in one flat buffer.
 *
 * A model written on the tape keeps its trainable values in one flat buffer
 * (and its gradients in a second one laid out alike), so that AdamW, the
 * gradient norm, a gradient all-reduce and a checkpoint see one array.  A
 * vit_params does the bookkeeping: add the tensors by name with their shape,
 * initialisation and weight-decay flag, allocate, then ask for offsets,
 * pointers, tape leaves and the AdamW groups.
 *
 *     vit_params *p = vit_params_new();
 *     int w = vit_params_add(p, "fc.w", 2, (int[]){784, 10}, VIT_INIT_NORMAL, 0.02, 1);
 *     int b = vit_params_add(p, "fc.b", 1, (int[]){10}, VIT_INIT_ZERO, 0, 0);
 *     if (w < 0 || b < 0 || vit_params_alloc(p) != VIT_OK) ... vit_last_error() ...
 *     vit_params_init(p, &rng);
 *     vit_adamw_init(&opt, vit_params_count(p), ...);
 *     per step:
 *         vit_tape_reset(tape); vit_params_zero_grads(p);
 *         y = vit_op_linear(tape, x, vit_params_leaf(p, tape, w, 1), vit_params_leaf(p, tape, b, 1));
 *         ... vit_tape_backward(tape, loss);
 *         int ng; const vit_param_group *g = vit_params_groups(p, &ng);
 *         vit_adamw_step(&opt, vit_params_values(p), vit_params_grads(p), g, ng, lr);
 *     vit_params_save(p, "model.params", "my model, width 64");   (and, into a p
 *     vit_params_load(p, "model.params", NULL);                     built alike)
 *
 * Layout: tensors are stored in the order they were added, each contiguous
 * and row-major, with no gaps: tensor i starts where tensor i-1 ends
 * (offset 0 for the first).  This is the layout vit_model uses for the
 * ViT, so the same list of tensors gives the same offsets.
 *
 * Lifecycle: a vit_params is first open (vit_params_add may be called),
 * then allocated (vit_params_alloc: buffers exist, the layout is fixed).
 * Offsets, sizes, the count and the groups are known as soon as a tensor is
 * added; the value and gradient buffers only after vit_params_alloc.
 *
 * Errors: functions returning int return VIT_OK (or an index >= 0) on
 * success and a negative VIT_E* code on failure, with a one-line message
 * in vit_last_error() naming the function, the tensor and the problem;
 * a failed call leaves the object as it was.  Accessors returning a pointer
 * return NULL for a bad argument (NULL object, index out of range, buffers
 * not allocated yet) without a message, unless their comment says otherwise.
 *
 * Ownership: the vit_params owns its names, tensor descriptions, groups and
 * both buffers; every pointer it hands out stays valid until
 * vit_params_free (descriptions and groups: until the next vit_params_add,
 * which may move them).  Tape leaves belong to the tape (valid until its
 * next reset) but point into the vit_params' buffers.
 *
 * Threads: a vit_params is used by one thread at a time while it is being
 * built, initialised or its gradients zeroed.  Once allocated, functions
 * taking a const vit_params * and vit_params_leaf / vit_params_leaf_range
 * only read it, so several threads may call them at once (e.g. one tape per
 * thread), provided no two tapes run a backward into the same gradient
 * buffer at the same time: leaves made with with_grad = 0 are safe to share.
 */
#ifndef VIT_PARAMS_H
#define VIT_PARAMS_H

#include <stddef.h>
#include "vit/core.h"
#include "vit/optim.h"
#include "vit/rng.h"
#include "vit/tape.h"

VIT_BEGIN_DECLS

/* How vit_params_init fills a tensor.  The values 0, 1, 2 are the codes
 * vit_model has always used internally for zero, one and truncated normal. */
enum vit_init {
    VIT_INIT_ZERO = 0,    /* every value 0 (biases, class token, layer-norm shifts) */
    VIT_INIT_ONE = 1,     /* every value 1 (layer-norm gains) */
    VIT_INIT_NORMAL = 2,  /* truncated normal: z from vit_rng_normal, redrawn
                           * while |z| > 2, value (vit_real)(z * scale): std
                           * `scale` before the cut at +-2 std, like timm's
                           * trunc_normal_(std=scale, a=-2*scale, b=2*scale) */
    VIT_INIT_UNIFORM = 3, /* uniform in [-scale, scale): (2u - 1) * scale with
                           * u from vit_rng_uniform (PyTorch's nn.Linear default
                           * is scale = 1/sqrt(fan_in)) */
    VIT_INIT_CONST = 4    /* every value (vit_real)scale, e.g. a learnable
                           * attention scale starting at 1/sqrt(d_k); draws
                           * nothing */
};

/* Longest tensor name in bytes (without the NUL): the checkpoint's limit
 * (VIT_CKPT_NAME_MAX - 1 of vit/checkpoint.h), so that every tensor can be
 * saved under its own name. */
#define VIT_PARAMS_NAME_MAX 63

/* Description of one named tensor: a read-only view owned by the
 * vit_params.  Its first five fields mirror vit_model_tensor. */
typedef struct vit_param_tensor {
    const char *name;                /* NUL-terminated, 1..VIT_PARAMS_NAME_MAX bytes */
    int ndim;                        /* 1..VIT_TENSOR_MAX_DIMS */
    int shape[VIT_TENSOR_MAX_DIMS];  /* outermost first; entries past ndim are 0 */
    size_t offset;                   /* first value in the flat buffers */
    size_t size;                     /* product of shape */
    int init;                        /* an enum vit_init */
    double scale;                    /* std (NORMAL), bound (UNIFORM) or value (CONST); 0 for ZERO and ONE */
    int decay;                       /* 1 when AdamW's weight decay applies, else 0 */
} vit_param_tensor;

typedef struct vit_params vit_params;

/* A new, empty, open vit_params owned by the caller (release it with
 * vit_params_free).  NULL, with VIT_ENOMEM in vit_last_error, if out of
 * memory. */
vit_params *vit_params_new(void);

/* Frees p with its names, descriptions, groups and buffers (pointers into
 * them and tape leaves over them become invalid).  NULL is allowed. */
void vit_params_free(vit_params *p);

/* Appends tensor `name` of shape[ndim] (copied) at the end of the layout,
 * to be filled by vit_params_init according to `init` (an enum vit_init)
 * and `scale` (the std of VIT_INIT_NORMAL, the bound of VIT_INIT_UNIFORM,
 * the value of VIT_INIT_CONST; ignored and stored as 0 for VIT_INIT_ZERO
 * and VIT_INIT_ONE), decayed by
 * AdamW when decay != 0 (stored as 1).  The name is copied.  Only while p
 * is open (before vit_params_alloc).  Cost: O(number of tensors) for the
 * uniqueness check.
 * Returns the tensor's index (0 for the first, then 1, 2, ...), or
 * VIT_EINVAL for a NULL p, name or shape, p already allocated, a name that
 * is empty, longer than VIT_PARAMS_NAME_MAX or already used, ndim outside
 * 1..VIT_TENSOR_MAX_DIMS, a dimension < 1, an unknown init, or a scale that
 * is negative or not finite (NORMAL, UNIFORM) or not finite (CONST); VIT_ENOMEM when the tensor's
 * size or the total would overflow size_t (or the byte size of a buffer) or
 * memory runs out.  On failure p is unchanged. */
int vit_params_add(vit_params *p, const char *name, int ndim, const int *shape, int init,
                   double scale, int decay);

/* Allocates the value and gradient buffers, vit_params_count(p) reals each,
 * zeroed, each starting on a 64-byte boundary, and closes p to further
 * vit_params_add.  Returns VIT_OK; VIT_EINVAL for a NULL p, a p already
 * allocated or one without tensors; VIT_ENOMEM when memory runs out (then p
 * stays open and unallocated). */
int vit_params_alloc(vit_params *p);

/* Total number of values: the sum of every tensor's size (0 for NULL p).
 * Valid before vit_params_alloc. */
size_t vit_params_count(const vit_params *p);

/* Number of tensors added (0 for NULL p). */
int vit_params_tensor_count(const vit_params *p);

/* Description of tensor i (0 .. tensor_count - 1), or NULL for a NULL p or
 * i out of range.  Owned by p; valid until the next vit_params_add. */
const vit_param_tensor *vit_params_tensor(const vit_params *p, int i);

/* Index of the tensor named `name`, or -1 when there is none (also for a
 * NULL p or name; no message).  O(number of tensors). */
int vit_params_find(const vit_params *p, const char *name);

/* The flat value and gradient buffers (vit_params_count(p) reals each),
 * owned by p: the caller may read and write them (AdamW updates the values
 * in place, the tape's backward accumulates into the gradients).  NULL
 * before vit_params_alloc or for a NULL p. */
vit_real *vit_params_values(vit_params *p);
vit_real *vit_params_grads(vit_params *p);

/* Tensor i's values or gradients: pointers into the flat buffers at its
 * offset (size reals).  NULL before vit_params_alloc, for a NULL p or for
 * i out of range. */
vit_real *vit_params_value_of(vit_params *p, int i);
vit_real *vit_params_grad_of(vit_params *p, int i);

/* Overwrites every value, tensor by tensor in layout order, by its init,
 * drawing from (and advancing) the caller's rng: one vit_rng_normal per
 * VIT_INIT_NORMAL value plus one per redraw, one vit_rng_uniform per
 * VIT_INIT_UNIFORM value, nothing for ZERO and ONE.  For the ViT's layout
 * and the same rng state this gives bitwise the values of vit_model_init.
 * Gradients are not touched.  Returns VIT_OK, or VIT_EINVAL (nothing
 * drawn, nothing written) for a NULL p or rng or p not allocated. */
int vit_params_init(vit_params *p, vit_rng *rng);

/* AdamW groups: consecutive tensors with the same decay flag merged into
 * one vit_param_group, so the groups are in layout order, cover
 * [0, vit_params_count(p)) exactly without overlap, and alternate in decay
 * (as vit_adamw_step needs).  Returns an array owned by p (valid until the
 * next vit_params_add) and stores its length in *count when count is not
 * NULL; NULL with *count = 0 for a NULL p or a p without tensors.  Valid
 * before vit_params_alloc. */
const vit_param_group *vit_params_groups(const vit_params *p, int *count);

/* Sets every gradient to 0 (call before each backward: it accumulates).
 * Does nothing for a NULL p or before vit_params_alloc. */
void vit_params_zero_grads(vit_params *p);

/* A leaf on `tape` over tensor i, with its shape, its values as data and,
 * when with_grad != 0, its slice of the gradient buffer as grad (else NULL:
 * a constant, as for evaluation).  The tensor struct belongs to the tape
 * (valid until its next reset); the storage stays p's.  NULL on error, with
 * the error also recorded in the tape's status (vit_tape_status) when tape
 * is not NULL, so that the ops fed this leaf fail too: VIT_EINVAL for a NULL
 * p or tape, p not allocated, or i out of range; VIT_ENOMEM from the tape. */
vit_tensor *vit_params_leaf(vit_params *p, vit_tape *tape, int i, int with_grad);

/* A 1-D leaf over the `count` consecutive tensors first .. first+count-1,
 * flattened into one vector of the sum of their sizes (they are contiguous
 * in the layout), e.g. the flat weight vector vit_op_mha takes.  Otherwise
 * as vit_params_leaf; errors also for count < 1, a range reaching past the
 * last tensor, or a total size above INT_MAX (a tape dimension is an int). */
vit_tensor *vit_params_leaf_range(vit_params *p, vit_tape *tape, int first, int count,
                                  int with_grad);

/* ---- Files ------------------------------------------------------------- */

/* Saves every tensor's values to path, under its name and shape, with the
 * caller's note (free text, e.g. the model's own description; NULL for
 * none).  The file is a checkpoint (vit/checkpoint.h: step 0, the note as
 * its config text, one tensor per parameter tensor in layout order), so
 * vit_ckpt_read reads it too; values are stored as float32 (the float64
 * build rounds to nearest).  Gradients are not saved.  Written atomically
 * (vit/atomic_file.h): a temporary beside path, flushed, fsync'd and
 * renamed over it, so path holds the old file or the whole new one.
 * Returns VIT_OK; VIT_EINVAL for a NULL p or path or p not allocated;
 * VIT_ENUM for a value not finite as float32 (naming the tensor); VIT_EIO
 * (naming path and the system's reason) or VIT_ENOMEM, path then
 * unchanged.  Reads p only: safe beside other readers. */
int vit_params_save(const vit_params *p, const char *path, const char *note);

/* Overwrites p's values with those saved in path (vit_params_save, or any
 * checkpoint holding exactly p's tensors).  The file must hold exactly
 * the tensors of p, by name, each with p's rank and every dimension (the
 * order does not matter); otherwise nothing is written and VIT_EFORMAT
 * names each difference: "'fc.w' is [10, 784] in the file, [784, 10] in
 * the model", "'fc.b' is missing from the file", "'head.w' is in the file
 * but not in the model" (as many as the message holds, then "...").  If
 * note is not NULL, *note receives a malloc'd copy of the saved note (""
 * for none; the caller frees it), NULL on failure.  Gradients are not
 * touched.  Returns VIT_OK; VIT_EINVAL for a NULL p or path or p not
 * allocated; the errors of vit_ckpt_read (VIT_EIO, VIT_EFORMAT for a
 * damaged file, VIT_ENUM, VIT_ENOMEM) with its message.  On failure p is
 * unchanged.  One thread at a time per p. */
int vit_params_load(vit_params *p, const char *path, char **note);

VIT_END_DECLS

#endif

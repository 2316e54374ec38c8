/*
 * vit/tape.h - a reverse-mode tape that composes the kernels into models.
 *
 * A model is written as forward code only: each vit_op_* call runs a kernel's
 * forward, records what its backward needs, and returns the output tensor.
 * vit_tape_backward() then replays the backward kernels in reverse order,
 * accumulating gradients into every tensor that has a grad buffer.
 *
 * Memory: every tensor an op creates (values, gradients, saved
 * intermediates, op records) comes from one arena owned by the tape.
 * vit_tape_reset() starts a new step and reuses that memory: after the first
 * step the arena is one block of the high-water size and a step allocates
 * nothing.  Tensors returned by ops are valid until the next reset or free.
 *
 * Gradients: a tensor has a grad buffer when some input of the op that made
 * it has one (leaves decide: parameters get the caller's gradient storage,
 * data inputs pass grad = NULL).  Op-created grads start at zero.
 *
 * Errors: ops return NULL on failure and the tape remembers the first error
 * (vit_tape_status); any op given a NULL input returns NULL at once, so a
 * forward pass can be written without checking every line and checked once
 * at the end.  vit_last_error() holds the message.
 *
 * Thread safety: a tape (and the tensors it made) belongs to one thread at
 * a time; separate tapes may record and run backward on different threads
 * at once, provided they do not share gradient buffers.
 *
 * Layout: tensors are row-major over their shape; where a batch dimension
 * exists it is the first one ([B, T, D], [B, C]).
 */
#ifndef VIT_TAPE_H
#define VIT_TAPE_H

#include "vit/core.h"
#include "vit/attention.h"
#include "vit/embeddings.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VIT_TENSOR_MAX_DIMS 4

typedef struct vit_tensor {
    vit_real *data;  /* values, row-major over shape */
    vit_real *grad;  /* same layout, or NULL when no gradient flows here */
    int ndim;
    int shape[VIT_TENSOR_MAX_DIMS];
    size_t size;     /* product of shape */
} vit_tensor;

typedef struct vit_tape vit_tape;

/* A new, empty tape, owned by the caller (release it with vit_tape_free);
 * NULL (with vit_last_error) if out of memory. */
vit_tape *vit_tape_new(void);

/* Frees the tape and everything its ops allocated (every tensor it
 * returned becomes invalid; leaf storage stays the caller's).  NULL is
 * allowed. */
void vit_tape_free(vit_tape *tape);

/* Forgets the recorded ops and tensors and clears the error, keeping the
 * memory for the next step.  Tensors from before the reset become invalid.
 * Cannot fail; NULL is allowed (does nothing). */
void vit_tape_reset(vit_tape *tape);

/* VIT_OK, or the first error code since the last reset (VIT_EINVAL for a
 * NULL tape). */
int vit_tape_status(const vit_tape *tape);

/* Bytes the arena holds (for memory reports); 0 for NULL. */
size_t vit_tape_bytes(const vit_tape *tape);

/* Number of ops recorded since the last reset; 0 for NULL. */
int vit_tape_op_count(const vit_tape *tape);

/* Wraps caller storage as a leaf tensor: data (and grad, or NULL for a
 * constant input) must hold the product of shape values and stay valid until
 * the next reset.  The tape never frees them; shape (ndim values, each >= 1,
 * ndim 1..4) is copied.  The backward ACCUMULATES into grad, so zero it
 * before the step.  The returned
 * tensor struct belongs to the tape.  NULL on error (VIT_EINVAL for a NULL
 * tape, data or shape, a bad ndim or a dimension < 1; VIT_ENOMEM), which is
 * also recorded in the tape's status. */
vit_tensor *vit_tape_leaf(vit_tape *tape, vit_real *data, vit_real *grad,
                          int ndim, const int *shape);

/* ---- Ops.  Shapes: the last dimension is the feature dimension; leading
 * dimensions are flattened into rows where the kernel works on rows.
 * Every op: runs the kernel's forward now, returns a new tensor owned by the
 * tape (data written, grad zeroed, or grad NULL when no input has one), and
 * returns NULL without doing anything if the tape already holds an error or
 * an input is NULL.  On a shape mismatch it returns NULL with VIT_EINVAL
 * (the message names the op and the shapes); kernel errors (VIT_ENUM for a
 * non-finite value, ...) and VIT_ENOMEM are passed through the same way.
 * Inputs are read, never modified. ---- */

/* y[..., out] = x[..., in] W[in, out] + b[out] (b may be NULL); W must be
 * 2-D and b hold out values. */
vit_tensor *vit_op_linear(vit_tape *tape, vit_tensor *x, vit_tensor *W, vit_tensor *b);

/* Layer norm over the last dimension; gamma, beta: [d]; eps > 0.  Output
 * has x's shape. */
vit_tensor *vit_op_layernorm(vit_tape *tape, vit_tensor *x, vit_tensor *gamma,
                             vit_tensor *beta, vit_real eps);

/* Elementwise exact GELU; output has x's shape. */
vit_tensor *vit_op_gelu(vit_tape *tape, vit_tensor *x);

/* Elementwise a + b (identical shapes, else VIT_EINVAL): the residual
 * connection. */
vit_tensor *vit_op_add(vit_tape *tape, vit_tensor *a, vit_tensor *b);

/* Multi-head attention layer (vit/attention.h).  cfg is copied; its mask and
 * score-bias pointers must stay valid until backward.  params: the flat
 * parameter tensor of vit_mha_param_count(cfg) values.  x_q [B, n_q, d_model],
 * x_kv [B, n_k, d_kv] (pass x_q again for self-attention).  If probs is not
 * NULL it receives a pointer to the attention maps [B, H, n_q, n_k], valid
 * until the next reset.  The score bias, if any, gets no gradient through
 * the tape; use vit_mha_backward directly to learn it. */
vit_tensor *vit_op_mha(vit_tape *tape, const vit_mha *cfg, vit_tensor *params,
                       vit_tensor *x_q, vit_tensor *x_kv, vit_real **probs);

/* Patch embedding of images [B, H, W, C] (a leaf, usually without grad) with
 * W [P*P*C, D] and b [D] (may be NULL): tokens [B, N, D]. */
vit_tensor *vit_op_patch_embed(vit_tape *tape, const vit_patch_shape *shape,
                               vit_tensor *img, vit_tensor *W, vit_tensor *b);

/* Prepends a class token cls [D] to x [B, N, D] (3-D, else VIT_EINVAL):
 * [B, N+1, D]. */
vit_tensor *vit_op_cls_prepend(vit_tape *tape, vit_tensor *x, vit_tensor *cls);

/* x [B, T, D] + pos [T, D] (pos shared by the batch; its grad receives
 * the sum over the batch): [B, T, D]. */
vit_tensor *vit_op_pos_add(vit_tape *tape, vit_tensor *x, vit_tensor *pos);

/* Token `index` (0 <= index < T, else VIT_EINVAL) of each item of
 * x [B, T, D]: [B, D]. */
vit_tensor *vit_op_token(vit_tape *tape, vit_tensor *x, int index);

/* Mean over tokens first..T-1 (0 <= first < T) of x [B, T, D]: [B, D]. */
vit_tensor *vit_op_mean_tokens(vit_tape *tape, vit_tensor *x, int first);

/* Mean softmax cross-entropy of logits [B, C] (2-D, else VIT_EINVAL)
 * against labels[B] in 0..C-1 (copied), with label smoothing in [0, 1): a
 * scalar tensor (shape [1]).  *probs, if not NULL, receives a pointer to the
 * softmax [B, C], owned by the tape and valid until the next reset. */
vit_tensor *vit_op_cross_entropy(vit_tape *tape, vit_tensor *logits, const int *labels,
                                 vit_real smoothing, vit_real **probs);

/* Runs the backward of every recorded op in reverse order, starting from
 * d(loss)/d(loss) = 1, accumulating into every grad buffer (op-made and
 * leaf).  loss must be a one-element tensor with a grad buffer made on this
 * tape.  Run it at most once per reset: the intermediate gradients are not
 * cleared, so a second run would give wrong results.  Returns VIT_OK; VIT_EINVAL for a NULL tape or a bad loss; the
 * tape's status if the forward failed; or the first kernel error. */
int vit_tape_backward(vit_tape *tape, vit_tensor *loss);

#ifdef __cplusplus
}
#endif

#endif

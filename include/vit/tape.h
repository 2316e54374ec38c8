/*
 * vit/tape.h - a reverse-mode tape that composes the kernels into models,
 * and the way to extend it with ops of your own.
 *
 * A model is written as forward code only: each vit_op_* call runs a kernel's
 * forward, records what its backward needs, and returns the output tensor.
 * vit_tape_backward() then replays the backward kernels in reverse order.
 *
 * Memory: every tensor an op creates (values, saved intermediates, op
 * records) comes from one arena owned by the tape.  vit_tape_reset() starts
 * a new step and reuses that memory: after the first step the arena is one
 * block of the high-water size actually used and a step allocates nothing.
 * Tensors returned by ops are valid until the next reset or free.
 *
 * Gradients: a tensor requires a gradient (requires_grad) when it is a leaf
 * given a grad buffer, or when some input of the op that made it requires
 * one.  Leaves' gradients are the caller's storage and the backward
 * ACCUMULATES into them.  An op-made tensor has no gradient buffer during
 * the forward (grad is NULL: nothing is zeroed or held for it); the backward
 * allocates it when an op first writes it (that first write overwrites,
 * later ones accumulate) and recycles its memory as soon as the op that made
 * the tensor has run its own backward, so only the gradients still in
 * flight take memory.  vit_tape_retain_grad() keeps one for reading after
 * the backward.
 *
 * No-grad mode (vit_tape_set_grad(tape, 0)): the same ops compute the same
 * values, bitwise, but record nothing for a backward and keep no saved
 * intermediates; their outputs require no gradient.  Evaluation and
 * inference use it, with vit_tape_mark()/vit_tape_release() to run a long
 * batch in pieces through the same memory.
 *
 * Extending: vit_op_custom() records an op whose forward and backward are
 * the caller's functions; vit_op_checkpoint() records a whole sub-graph that
 * keeps only its inputs and is recomputed during the backward.
 *
 * Errors: ops return NULL on failure and the tape remembers the first error
 * (vit_tape_status); any op given a NULL input returns NULL at once, so a
 * forward pass can be written without checking every line and checked once
 * at the end.  vit_last_error() holds the message.
 *
 * Thread safety: a tape (and the tensors it made) belongs to one thread at
 * a time; separate tapes may record and run backward on different threads
 * at once, provided they do not share leaf gradient buffers.
 *
 * Layout: tensors are row-major over their shape; where a batch dimension
 * exists it is the first one ([B, T, D], [B, C]).
 */
#ifndef VIT_TAPE_H
#define VIT_TAPE_H

#include "vit/core.h"
#include "vit/attention.h"
#include "vit/embeddings.h"

VIT_BEGIN_DECLS

#define VIT_TENSOR_MAX_DIMS 4

typedef struct vit_tensor {
    vit_real *data;    /* values, row-major over shape */
    vit_real *grad;    /* leaf: the caller's buffer or NULL; op-made: NULL
                        * except between the backward's first write and the
                        * recycling (or for good after vit_tape_retain_grad) */
    int ndim;
    int shape[VIT_TENSOR_MAX_DIMS];
    size_t size;       /* product of shape */
    int requires_grad; /* a gradient flows into this tensor (read only) */
} vit_tensor;

typedef struct vit_tape vit_tape;

/* ---- The tape ---------------------------------------------------------- */

/* A new, empty tape in grad mode, owned by the caller (release it with
 * vit_tape_free); NULL (with vit_last_error) if out of memory. */
vit_tape *vit_tape_new(void);

/* Frees the tape and everything its ops allocated (every tensor it
 * returned becomes invalid; leaf storage stays the caller's).  NULL is
 * allowed. */
void vit_tape_free(vit_tape *tape);

/* Forgets the recorded ops and tensors, clears the error and allows a new
 * backward, keeping the memory (arena, gradient pool, attention scratch) for
 * the next step and the grad mode as it is.  Tensors from before the reset
 * become invalid.  Cannot fail; NULL is allowed (does nothing). */
void vit_tape_reset(vit_tape *tape);

/* VIT_OK, or the first error code since the last reset (VIT_EINVAL for a
 * NULL tape). */
int vit_tape_status(const vit_tape *tape);

/* Records `code` as the tape's error if it has none yet, and returns code:
 * lets code outside the ops (a custom forward, a model's checks) stop the
 * forward like a failing op would.  With a NULL tape it only returns code. */
int vit_tape_fail(vit_tape *tape, int code);

/* Bytes the tape holds for the next step: arena, gradient pool, attention
 * scratch and op records, with those of the tape vit_op_checkpoint
 * recomputes on (for memory reports); 0 for NULL. */
size_t vit_tape_bytes(const vit_tape *tape);

/* Bytes the recording since the last vit_tape_reset used at its most: the
 * arena's high-water mark (not its capacity, which a longer recording
 * before may have left larger), with the gradient pool, attention scratch
 * and op records as vit_tape_bytes counts them.  On a new tape after one
 * forward and backward it is what that step needs (vit_model_set_micro_batch
 * sizes its pieces by it).  0 for NULL. */
size_t vit_tape_used_bytes(const vit_tape *tape);

/* Number of ops recorded since the last reset; 0 for NULL. */
int vit_tape_op_count(const vit_tape *tape);

/* Grad mode.  vit_tape_set_grad(tape, 0) switches recording off: later ops
 * compute the same values but record no backward, keep no saved
 * intermediates and return tensors with requires_grad = 0 and grad NULL
 * (leaves keep whatever grad the caller gives them, unused).  Nonzero
 * switches it back on.  Returns the previous mode (1 or 0), or VIT_EINVAL
 * for a NULL tape, so that a caller can restore it.  Not changed by reset.
 * vit_tape_grad_enabled: the current mode (0 for NULL). */
int vit_tape_set_grad(vit_tape *tape, int enabled);
int vit_tape_grad_enabled(const vit_tape *tape);

/* Marks and releases: vit_tape_mark returns the arena's current position;
 * vit_tape_release(tape, mark) frees everything allocated since (tensors,
 * their data, custom allocations), which must all be dead by then.  Only
 * allowed when no op was recorded since the mark (the usual case: the
 * no-grad forward of one piece of a batch, whose result was copied out).
 * Returns VIT_OK; VIT_EINVAL for a NULL tape, a mark beyond the current
 * position, or ops recorded since the mark.  A mark is good until the next
 * reset. */
size_t vit_tape_mark(const vit_tape *tape);
int vit_tape_release(vit_tape *tape, size_t mark);

/* n bytes of arena memory, 64-byte aligned and uninitialised, valid until
 * the next reset (or a release below its mark): for a custom op's saved
 * buffers and similar.  NULL on error (VIT_EINVAL for a NULL tape or a
 * tape holding an error, VIT_ENOMEM), recorded in the tape's status. */
void *vit_tape_alloc(vit_tape *tape, size_t n);

/* A tensor of the given shape from the arena (data uninitialised, no
 * gradient, no op behind it), valid until the next reset: e.g. a constant
 * input the caller fills, or an output a no-grad forward copies into.  NULL
 * on error (VIT_EINVAL for a bad shape as in vit_tape_leaf, VIT_ENOMEM),
 * recorded in the tape's status. */
vit_tensor *vit_tape_tensor(vit_tape *tape, int ndim, const int *shape);

/* Wraps caller storage as a leaf tensor: data (and grad, or NULL for a
 * constant input) must hold the product of shape values and stay valid until
 * the next reset.  The tape never frees them; shape (ndim values, each >= 1,
 * ndim 1..4) is copied.  The backward ACCUMULATES into grad, so zero it
 * before the step.  The returned tensor struct belongs to the tape.  NULL
 * on error (VIT_EINVAL for a NULL tape, data or shape, a bad ndim or a
 * dimension < 1; VIT_ENOMEM), which is also recorded in the tape's status. */
vit_tensor *vit_tape_leaf(vit_tape *tape, vit_real *data, vit_real *grad,
                          int ndim, const int *shape);

/* Keeps the gradient of op-made tensor x (requires_grad, made on this tape)
 * after the backward instead of recycling it: x->grad then holds d/dx of
 * the backward's objective until the next reset (all zeros if nothing
 * reached x).  Returns VIT_OK; VIT_EINVAL for a NULL argument, a leaf, a
 * tensor without requires_grad, or a call after the backward (its gradient
 * is gone by then). */
int vit_tape_retain_grad(vit_tape *tape, vit_tensor *x);

/* Runs the backward of every recorded op in reverse order, starting from
 * d(loss)/d(loss) = 1; loss must be a one-element tensor made on this tape
 * that requires a gradient.  Accumulates into every leaf gradient buffer.
 * Once per reset: a second call without vit_tape_reset is refused.  Returns
 * VIT_OK; VIT_EINVAL for a NULL tape, a bad loss or a second backward; the
 * tape's status if the forward failed; VIT_ENOMEM; or the first kernel (or
 * custom backward) error. */
int vit_tape_backward(vit_tape *tape, vit_tensor *loss);

/* The same, started from any tensor y made on this tape with a
 * caller-supplied gradient dy (y->size values, read only; copied before
 * use): the backward computes the vector-Jacobian product of dy, e.g. the
 * gradient of sum(dy * y), or of s * loss for a one-element y and dy = {s}.
 * Errors as vit_tape_backward, and VIT_EINVAL for a NULL dy. */
int vit_tape_backward_from(vit_tape *tape, vit_tensor *y, const vit_real *dy);

/* Called during a backward when the gradient of leaf (a vit_tape_leaf
 * made with a grad buffer) is final: right after the backward of the first
 * recorded op that reads it, on the thread running the backward.  ctx is
 * vit_tape_on_leaf_grad's.  fn must not use the tape. */
typedef void (*vit_tape_leaf_fn)(void *ctx, vit_tensor *leaf);

/* From the next backward on, reports each leaf with a gradient buffer
 * through fn as soon as its gradient is final (once per backward, in the
 * backward's order: the leaves read last in the forward come first), e.g.
 * to send a parameter's gradient while the backward goes on.  A leaf that
 * a vit_op_checkpoint's fn makes is reported from the recomputation's
 * backward, after its first reader there (fn then gets the scratch tape's
 * leaf: the same data and grad as the forward's); a leaf no op reads is
 * not reported.  "Final" assumes that no two leaves share a gradient
 * buffer (one leaf per parameter; a parameter read in several places is
 * one leaf read by several ops).  Kept across resets; fn NULL stops the
 * reports.  The numbers the backward computes are the same with or
 * without it.  Returns VIT_OK, or VIT_EINVAL for a NULL tape. */
int vit_tape_on_leaf_grad(vit_tape *tape, vit_tape_leaf_fn fn, void *ctx);

/* ---- Ops.  Shapes: the last dimension is the feature dimension; leading
 * dimensions are flattened into rows where the kernel works on rows.
 * Every op: runs the kernel's forward now and returns a new tensor owned by
 * the tape, requiring a gradient when some input does (in grad mode);
 * returns NULL without doing anything if the tape already holds an error or
 * an input is NULL.  Shapes are strict: every op checks each input's rank
 * and every dimension it documents (a tensor holding the right number of
 * values in another layout, say a [B, N, C] for a [B, H, W, C] image or a
 * [H, N, N, 1] bias, is refused); on a mismatch it returns NULL with
 * VIT_EINVAL and a message naming the op, the argument, the expected
 * layout and the given shape ("vit_op_pos_add: pos must be [T, D] =
 * [3, 4], got [1, 3, 4]"); kernel errors (VIT_ENUM for a
 * non-finite value, ...) and VIT_ENOMEM are passed through the same way.
 * Inputs are read, never modified. ---- */

/* y[..., out] = x[..., in] W[in, out] + b[out] (b may be NULL); W must be
 * 2-D and b hold out values. */
vit_tensor *vit_op_linear(vit_tape *tape, vit_tensor *x, vit_tensor *W, vit_tensor *b);

/* y = GELU(x W + b): the MLP's first layer with its bias and activation
 * in one pass after the GEMM (b may be NULL; shapes as vit_op_linear).  For
 * the backward it keeps GELU'(x W + b), computed in the same pass as GELU
 * (one value per output, as many as the pre-activation the two ops keep),
 * and its backward forms GELU's gradient in dy's buffer in one pass that
 * also sums the bias gradient.  Equal to vit_op_gelu(vit_op_linear(x, W,
 * b)) but for rounding. */
vit_tensor *vit_op_linear_gelu(vit_tape *tape, vit_tensor *x, vit_tensor *W, vit_tensor *b);

/* y = r + x W + b: a linear layer added onto a residual r [..., out] (the
 * leading dimensions of x) in one pass; b may be NULL.  The linear's own
 * output is never stored, which saves one activation per residual branch
 * over vit_op_add(r, vit_op_linear(x, W, b)) (the sums round differently). */
vit_tensor *vit_op_linear_add(vit_tape *tape, vit_tensor *x, vit_tensor *W, vit_tensor *b,
                              vit_tensor *r);

/* Layer norm over the last dimension; gamma, beta: [d]; eps > 0.  Output
 * has x's shape. */
vit_tensor *vit_op_layernorm(vit_tape *tape, vit_tensor *x, vit_tensor *gamma,
                             vit_tensor *beta, vit_real eps);

/* y = LN(a + b) over the last dimension, with *sum set to the tensor a + b
 * (the residual stream, which the model reads on): vit_op_add then
 * vit_op_layernorm in one pass over the rows (a row of the sum is
 * normalised while it is in cache).  a and b have identical shapes; gamma,
 * beta: [d]; eps > 0; sum non-NULL (else VIT_EINVAL).  The gradients are
 * exactly those of the two ops.  *sum is NULL when NULL is returned. */
vit_tensor *vit_op_add_layernorm(vit_tape *tape, vit_tensor *a, vit_tensor *b, vit_tensor *gamma,
                                 vit_tensor *beta, vit_real eps, vit_tensor **sum);

/* Elementwise exact GELU; output has x's shape. */
vit_tensor *vit_op_gelu(vit_tape *tape, vit_tensor *x);

/* Elementwise a + b (identical shapes, else VIT_EINVAL): the residual
 * connection. */
vit_tensor *vit_op_add(vit_tape *tape, vit_tensor *a, vit_tensor *b);

/* Elementwise a * b (identical shapes, else VIT_EINVAL); a and b may be the
 * same tensor. */
vit_tensor *vit_op_mul(vit_tape *tape, vit_tensor *a, vit_tensor *b);

/* s * x elementwise (s finite, else VIT_EINVAL). */
vit_tensor *vit_op_scale(vit_tape *tape, vit_tensor *x, vit_real s);

/* Softmax over the last dimension; output has x's shape. */
vit_tensor *vit_op_softmax(vit_tape *tape, vit_tensor *x);

/* The same values as x under another shape (ndim 1..4, same product, else
 * VIT_EINVAL): no copy, the output's data is x's data.  Its gradient is
 * handed to x without a copy when x has none yet. */
vit_tensor *vit_op_reshape(vit_tape *tape, vit_tensor *x, int ndim, const int *shape);

/* Concatenation along tokens: n tensors [B, T_i, D] (same B and D, else
 * VIT_EINVAL; 1 <= n <= 16) -> [B, sum T_i, D], x[0]'s tokens first. */
vit_tensor *vit_op_concat_tokens(vit_tape *tape, int n, vit_tensor *const *x);

/* A gather (permutation, selection or repetition) of tokens:
 * out[b, i, :] = x[b, idx[i], :] for x [B, N, C] (3-D) and i < n:
 * [B, n, C].  idx (n >= 1 entries, each in 0..N-1, else VIT_EINVAL naming
 * the first bad one; repeats allowed) is copied.  The backward
 * scatter-adds: x's gradient row idx[i] receives dy's row i, repeated
 * indices summed, rows nobody reads nothing.  Undoes a permutation with
 * its inverse index; Swin's cyclic shift is the gather of the rolled
 * grid. */
vit_tensor *vit_op_gather_tokens(vit_tape *tape, vit_tensor *x, const int *idx, int n);

/* Swin's patch merging before its LayerNorm and reduction: x
 * [B, grid_h*grid_w, C] (tokens row by row; sides even, else VIT_EINVAL)
 * -> [B, (grid_h/2)*(grid_w/2), 4C], output token (i, j) the
 * concatenation of the tokens at (2i, 2j), (2i+1, 2j), (2i, 2j+1),
 * (2i+1, 2j+1): torchvision's SwinTransformer order (x0 = x[0::2, 0::2],
 * x1 = x[1::2, 0::2], x2 = x[0::2, 1::2], x3 = x[1::2, 1::2], cat on
 * channels), so that vit_op_layernorm over 4C and vit_op_linear
 * [4C, 2C] follow as there.  A vit_op_gather_tokens and a vit_op_reshape
 * (two ops on the tape); errors name vit_op_patch_merge. */
vit_tensor *vit_op_patch_merge(vit_tape *tape, vit_tensor *x, int grid_h, int grid_w);

/* Embedding lookup: rows ids[0..n-1] of table [V, D] (2-D), each id in
 * 0..V-1 (else VIT_EINVAL naming it).  ids (copied) are viewed with shape
 * id_shape[id_ndim] (id_ndim 1..3, product n); the output has that shape
 * plus [D], e.g. ids [B, T] -> [B, T, D].  The backward scatter-adds into
 * the table's gradient (repeated ids sum). */
vit_tensor *vit_op_embedding(vit_tape *tape, vit_tensor *table, const int *ids,
                             int id_ndim, const int *id_shape);

/* Mean over the valid tokens of x [B, T, D]: key_valid [B, T] (copied;
 * nonzero = a real token, 0 = padding, the convention of the attention
 * masks; NULL = all valid) -> [B, D].  An item without a valid token gets
 * zeros. */
vit_tensor *vit_op_masked_mean(vit_tape *tape, vit_tensor *x, const unsigned char *key_valid);

/* Multi-head attention layer (vit/attention.h).  cfg is copied; its mask and
 * score-bias pointers must stay valid until backward.  params: the flat
 * parameter tensor of vit_mha_param_count(cfg) values.  x_q [B, n_q, d_model],
 * x_kv [B, n_k, d_kv] (pass x_q again for self-attention).  If probs is not
 * NULL it receives a pointer to the attention maps [B, H, n_q, n_k], valid
 * until the next reset (NULL for a layer that runs the tiled core).  A
 * score bias given in cfg is a constant here; vit_op_mha_bias learns it. */
vit_tensor *vit_op_mha(vit_tape *tape, const vit_mha *cfg, vit_tensor *params,
                       vit_tensor *x_q, vit_tensor *x_kv, vit_real **probs);

/* vit_op_mha with the additive score bias taken from the tensor `bias`
 * [cfg->bias_heads, n_q, n_k] (bias_heads 1 or H, else VIT_EINVAL; cfg->bias
 * is ignored) so that it gets a gradient like any input: a learnable
 * relative-position bias, say. */
vit_tensor *vit_op_mha_bias(vit_tape *tape, const vit_mha *cfg, vit_tensor *params,
                            vit_tensor *x_q, vit_tensor *x_kv, vit_tensor *bias,
                            vit_real **probs);

/* What vit_op_window_attn needs besides its tensors. */
typedef struct vit_window_opts {
    int heads;      /* H; divides D */
    int grid_h;     /* token rows */
    int grid_w;     /* token columns; N = grid_h * grid_w */
    int window_h;   /* Mh: window rows, 1..256, divides grid_h (until 0.3.0
                       one `window` M for both axes) */
    int window_w;   /* Mw: window columns, 1..256, divides grid_w (Mw = Mh:
                       square windows); T = Mh * Mw */
    int shift_h;    /* 0 <= shift_h < Mh: Swin's cyclic shift of the rows */
    int shift_w;    /* 0 <= shift_w < Mw: and of the columns (Swin: 0, or
                       Mh/2 and Mw/2; until 0.3.0 one `shift` for both) */
    vit_real scale; /* score scale; 0 means 1/sqrt(D/H) */
    int keep_weights; /* 0: the op keeps the rows' log-sum-exps [B, H, N]
                         and remakes the weights in the backward (less
                         memory); 1: it keeps the weights [B, H, N, T]
                         themselves instead (vit_window_attn.probs: no
                         second Q K^T in the backward, faster).  The
                         gradients of the two agree up to rounding. */
} vit_window_opts;

/* Swin's (shifted) window self-attention from a fused projection:
 * qkv [B, N, 3*D] holds Q, K and V side by side (columns 0, D, 2D, as
 * vit_op_linear with W [d_model, 3*D] makes them; head h uses columns
 * h*D/H .. of each), N = grid_h * grid_w tokens numbered row by row.  Each
 * token attends only to the tokens of its window of Mh rows by Mw columns
 * (positions p = py*Mw + px inside it, T = Mh*Mw); with shifts the
 * windows are those of the grid rolled by -shift_h rows and -shift_w
 * columns, and tokens that come from opposite borders do not attend each
 * other (the region mask): exactly vit_mha's core with mask.allowed from
 * vit_mask_window(grid_h, grid_w, Mh, Mw, shift_h, shift_w), at a cost
 * linear in N.
 * bias: NULL, or an additive score bias by window position pair,
 * [H, T, T] (one per head) or [1, T, T] (shared), shared by every window
 * and item: Swin's relative position bias after its lookup
 * (vit_op_relpos_bias), whose gradient (summed over items and windows)
 * flows like any input's.  Output [B, N, D], heads concatenated (the
 * input of the output projection).  opts is copied.  The kernel
 * (vit_window_attn_*, vit/attention.h) reads Q, K, V inside qkv and adds
 * their gradients there: no copies.  The op keeps the log-sum-exps
 * [B, H, N] for its backward, or with opts->keep_weights the weights
 * [B, H, N, T] instead.  Every rank and dimension is checked:
 * VIT_EINVAL naming the argument and the expected and given shapes for a
 * qkv not [B, N, 3*D] with D a multiple of H, a bias not [1 or H, T, T],
 * and for bad opts (NULL, a size < 1, a window side above 256, grid_h not
 * a multiple of Mh or grid_w of Mw, shift_h outside [0, Mh) or shift_w
 * outside [0, Mw), a non-finite scale); VIT_ENUM for a non-finite
 * score. */
vit_tensor *vit_op_window_attn(vit_tape *tape, vit_tensor *qkv, vit_tensor *bias,
                               const vit_window_opts *opts);

/* Swin's relative position bias: the learnable table
 * [(2Mh-1)*(2Mw-1), H] (2-D; Mh = window_h rows and Mw = window_w columns,
 * each 1..256) gathered into the score bias [H, T, T] (T = Mh*Mw) of a
 * window of Mh x Mw, ready for vit_op_window_attn (or vit_op_mha_bias).
 * Positions p = y*Mw + x row-major (0 <= y < Mh, 0 <= x < Mw); pair (i, j)
 * reads row (y_i - y_j + Mh - 1) * (2Mw - 1) + (x_i - x_j + Mw - 1) of the
 * table, as torchvision's relative_position_index for window_size
 * [Mh, Mw] (its relative_position_bias_table has this layout).  The
 * backward scatter-adds into the table's gradient: each entry receives
 * the sum over the pairs at its offset.  VIT_EINVAL (naming the op, the
 * argument and the shapes) for a window side out of range or a table not
 * [(2Mh-1)*(2Mw-1), H].  (Until 0.3.0 one side M: table [(2M-1)^2, H].) */
vit_tensor *vit_op_relpos_bias(vit_tape *tape, vit_tensor *table, int window_h, int window_w);

/* Patch embedding of images [B, H, W, C] (4-D; a leaf, usually without
 * grad) with W [P*P*C, D] (2-D) and b [D] (1-D, may be NULL): tokens
 * [B, N, D]. */
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

/* vit_op_cross_entropy with rows left out and weighted
 * (vit_cross_entropy_masked_forward, vit/loss.h): a row whose label is
 * `ignore` counts for nothing (padding, positions that are not answers);
 * weights [B] (copied; NULL: all 1) weigh the others; the loss is their
 * weighted mean, 0 when no row counts.  logits [B, C] 2-D, else
 * VIT_EINVAL; labels [B] copied; *probs as for vit_op_cross_entropy. */
vit_tensor *vit_op_cross_entropy_masked(vit_tape *tape, vit_tensor *logits, const int *labels,
                                        const vit_real *weights, int ignore, vit_real smoothing,
                                        vit_real **probs);

/* Mean softmax cross-entropy of logits [B, C] (2-D, else VIT_EINVAL)
 * against soft targets [B, C] (copied; finite, >= 0; e.g. mixup's mixed
 * labels with label smoothing folded in, vit_augment_batch in
 * vit/augment.h): a scalar tensor [1], vit_soft_cross_entropy_forward
 * (vit/loss.h).  With targets (1 - s) one-hot + s / C it equals
 * vit_op_cross_entropy with smoothing s.  *probs as for
 * vit_op_cross_entropy. */
vit_tensor *vit_op_cross_entropy_soft(vit_tape *tape, vit_tensor *logits, const vit_real *targets,
                                      vit_real **probs);

/* Stochastic depth's per-sample scaling of a residual branch: x [B, ...]
 * (ndim >= 1) -> y with y[b, ...] = scale[b] * x[b, ...]; scale [B] is
 * copied (usually 0 for a dropped sample, 1 / (1 - rate) for a kept one:
 * vit_drop_path_scales in vit/block.h).  Its backward is dx += scale[b]
 * dy[b, ...].  VIT_EINVAL for a NULL scale or a non-finite entry. */
vit_tensor *vit_op_drop_path(vit_tape *tape, vit_tensor *x, const vit_real *scale);

/* ---- Custom ops -------------------------------------------------------- */

/* What a custom op's forward and backward are given. */
typedef struct vit_op_call {
    void *ctx;                 /* the op's own copy of the caller's context
                                * (ctx_size bytes in the arena; the forward may
                                * write to it, e.g. pointers to saved buffers) */
    int n_in;
    vit_tensor *const *in;     /* the inputs (read only) */
    vit_tensor *out;           /* forward: write out->data; backward: read it */
    vit_tape *tape;            /* for vit_tape_alloc (saved buffers) */
    const vit_real *dout;      /* backward only: d/d out, out->size values */
    vit_real *const *din;      /* backward only: din[i] receives d/d in[i],
                                * in[i]->size values: always ADD (+=), the tape
                                * hands a new buffer over zeroed; NULL when
                                * in[i] needs no gradient */
} vit_op_call;

/* A custom forward or backward: VIT_OK, or a negative VIT_E* code that
 * stops the forward or the backward and becomes the tape's status.  The
 * message in vit_last_error() then names the op: "NAME forward: " before
 * the message of a vit_* call that failed inside the callback, or "NAME
 * forward returned -5 (VIT_ENUM)" if none did.  Inputs are never NULL in a
 * callback (the op refuses a NULL input first). */
typedef int (*vit_op_fn)(const vit_op_call *call);

/* Records an op of the caller's: inputs in[0..n_in-1] (1 <= n_in <= 16),
 * output shape (ndim 1..4), a forward (may be NULL: the caller then writes
 * the returned tensor's data itself right after the call) and a backward
 * (may be NULL only if no input requires a gradient; it runs only when one
 * does).  ctx_size bytes of ctx (may be 0 and NULL) are copied to the arena
 * and handed to both calls as call->ctx, so a stack struct is fine; saved
 * buffers the backward needs come from vit_tape_alloc in the forward.  In
 * no-grad mode only the forward runs.  `name` (a static string) names the
 * op in errors.  Returns the output, or NULL on error as every op. */
vit_tensor *vit_op_custom(vit_tape *tape, const char *name, int n_in, vit_tensor *const *in,
                          int ndim, const int *shape, vit_op_fn forward, vit_op_fn backward,
                          const void *ctx, size_t ctx_size);

/* ---- Recomputation (activation checkpointing) --------------------------- */

/* A sub-graph: records ops on `tape` from the inputs in[0..n_in-1] and
 * returns its output (or NULL on error).  It must compute the same values
 * each time it runs (no random draws of its own) and may read ctx. */
typedef vit_tensor *(*vit_graph_fn)(vit_tape *tape, vit_tensor *const *in, void *ctx);

/* Runs fn once in no-grad mode and keeps only its inputs and output; during
 * the backward it runs fn again on a scratch tape with gradients and
 * backpropagates through that recording.  Gradients are bitwise those of
 * calling fn directly on the tape; peak memory holds one sub-graph's
 * activations instead of all of them.  Leaves fn makes (parameters) get
 * their gradients as usual.  ctx_size bytes of ctx are copied (as for
 * vit_op_custom); 1 <= n_in <= 16.  In no-grad mode it runs fn once and
 * keeps only the output, releasing what fn allocated on the tape (how a
 * long no-grad forward holds one block's activations at a time).  Pointers
 * into the tape that fn hands out (attention maps) die with its run: copy
 * what you need inside fn.  When fn runs again for the backward, the
 * values of its output are not computed if its last op's backward does not
 * read them (vit_op_linear_add ends a block that way): fn must not read
 * its own output's values.
 * Returns fn's output (a copy on this tape), or NULL on error. */
vit_tensor *vit_op_checkpoint(vit_tape *tape, vit_graph_fn fn, int n_in, vit_tensor *const *in,
                              const void *ctx, size_t ctx_size);

VIT_END_DECLS

#endif

/* Internal: what the op files (src/tape_ops_*.c) share with the tape's
 * engine (src/tape/tape.c, src/tape/tape_tensors.c).
 *
 * An op is a vit_op_def (its name, its backward and, for an op whose
 * forward may wait, that forward) and a function vit_op_NAME that checks
 * the shapes, makes the output (vit_tape_output), runs the forward kernel
 * and ends with vit_tape_record.  vit_op_custom and vit_op_checkpoint record
 * themselves the same way: the engine knows no op by name.
 *
 * The gradient helpers below are how a backward reaches its inputs'
 * gradients: an op-made tensor has none until the first op that writes it
 * borrows one from the tape's pool, and that first write overwrites.
 */
#ifndef VIT_SRC_TAPE_INTERNAL_H
#define VIT_SRC_TAPE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "vit/attention.h"
#include "vit/tape.h"

/* Most inputs of one op (vit_op_custom, vit_op_checkpoint,
 * vit_op_concat_tokens). */
#define VIT_TAPE_MAX_INPUTS 16

typedef struct vit_op_rec vit_op_rec;

/* Flags of a vit_op_def. */
enum {
    /* The op's forward is def->forward, run by vit_tape_record, and may
     * wait: while a checkpoint's sub-graph is recomputed for the backward,
     * it runs only when another op reads the output, so the last op of a
     * block whose backward reads only its inputs never computes it. */
    VIT_OP_LAZY = 1
};

typedef struct vit_op_def {
    const char *name;
    /* Adds the op's part of the gradient into its inputs' gradients
     * (vit_tape_grad_*), reading rec->out->grad; VIT_OK or an error. */
    int (*backward)(vit_tape *t, const vit_op_rec *rec);
    int (*forward)(const vit_op_rec *rec); /* VIT_OP_LAZY ops only */
    unsigned flags;
} vit_op_def;

/* One recorded op.  The pointers are the tape's (arena) until its reset. */
struct vit_op_rec {
    const vit_op_def *def;
    vit_tensor *out;
    vit_tensor **in;   /* n_in inputs; NULL where an optional one is absent */
    int n_in;
    void *ctx;         /* the op's own state (saved buffers, its shape) */
};

/* The common tail of every op, the only way onto the tape's list.  rc: the
 * forward kernel's return code (an error is recorded and NULL returned);
 * VIT_OK for a VIT_OP_LAZY op, whose forward this runs (now, or later in a
 * recomputation).  y: the output (from vit_tape_output or vit_tape_header);
 * in[0..n-1] the inputs (NULL for an absent optional one).  When y
 * requires a gradient, records the op with a copy of ctx_size bytes of ctx
 * (its backward's state; 0 and NULL for none); when it does not, nothing
 * is kept (a lazy forward then runs at once on ctx itself).  Returns y, or
 * NULL with the tape's error set. */
vit_tensor *vit_tape_record(vit_tape *t, const vit_op_def *def, int rc, vit_tensor *y, int n,
                            vit_tensor *const *in, const void *ctx, size_t ctx_size);

/* An op's entry check: a usable tape without an error and non-NULL
 * in[0..n-1] (1 when fine; 0 with the error recorded).  Runs a forward
 * that waits, since this op may read its output. */
int vit_tape_begin(vit_tape *t, const char *name, int n, vit_tensor *const *in);

/* The same for a caller's input list (vit_op_custom, vit_op_checkpoint):
 * 1 <= n_in <= VIT_TAPE_MAX_INPUTS, in non-NULL, ctx non-NULL when
 * ctx_size is not 0. */
int vit_tape_begin_list(vit_tape *t, const char *name, int n_in, vit_tensor *const *in,
                        const void *ctx, size_t ctx_size);

/* Records code as the tape's error and returns NULL, for `return
 * vit_tape_error(t, vit_fail(VIT_EINVAL, "..."));`. */
vit_tensor *vit_tape_error(vit_tape *t, int code);

/* Whether an op on in[0..n-1] records: grad mode and an input (NULL ones
 * skipped) that requires a gradient. */
int vit_tape_wants_grad(const vit_tape *t, int n, vit_tensor *const *in);

/* A new op output with values from the arena (uninitialised) and no
 * gradient buffer; requires a gradient when requires_grad and the tape is
 * in grad mode.  NULL on error (bad shape, out of memory; recorded). */
vit_tensor *vit_tape_output(vit_tape *t, int ndim, const int *shape, int requires_grad);

/* The float intermediates of mixed precision that are rounded into bf16
 * (or expanded from it) for the backward are made this many bytes at a
 * time, not a whole batch slice's: each piece is still in the core's cache
 * when it is rounded or read, and the scratch and the gradient pool hold
 * a piece (src/tape/tape_ops_attention.c, src/tape/tape_ops_linear.c,
 * src/tape/tape_ops_mlp.c). */
#define VIT_TAPE_PIECE_BYTES ((size_t)2 << 20)

/* Rows of width floats per piece of n rows: about VIT_TAPE_PIECE_BYTES,
 * at least 16, at most n (682 rows of the large model's MLP of width 768). */
static inline int vit_tape_piece_rows(int n, int width)
{
    size_t rows = VIT_TAPE_PIECE_BYTES / ((size_t)width * sizeof(float));
    return rows < 16 ? 16 : rows > (size_t)n ? n : (int)rows;
}

/* How an op's output is kept for the backward (vit_tape_output_kept). */
enum {
    VIT_KEEP_FLOAT = 0, /* its float values, in the arena (vit_tape_output) */
    VIT_KEEP_BF16 = 1,  /* mixed precision: its values rounded to bf16 */
    VIT_KEEP_NONE = 2   /* mixed precision: nothing (no backward reads them) */
};

/* vit_tape_output, except in mixed precision (vit_mixed_on) with the tape
 * in grad mode, where for keep VIT_KEEP_BF16 or VIT_KEEP_NONE the float
 * values go to one of two buffers of the tape taking turns (no arena
 * memory), and vit_tape_record keeps their bf16 rounding in the arena
 * (VIT_KEEP_BF16; rounded to nearest even by vit_bf16_from_floats) or
 * nothing.  For callers that know every reader of the output (src/tape/block.c):
 * its float values must be read only before the second kept output after
 * it is made, and by backwards only through vit_tape_values.  An op that
 * reads its input as a bf16 GEMM operand anyway loses nothing: its
 * backward's product reads the same bf16 values. */
vit_tensor *vit_tape_output_kept(vit_tape *t, int ndim, const int *shape, int requires_grad,
                                 int keep);

/* x's values for a backward: x->data, or for an output kept as bf16 its
 * values back as float (exact) in a pool buffer that *lease holds until
 * vit_tape_lease_end.  NULL on failure (out of memory; recorded), or for
 * an output kept as nothing (an error: VIT_EINVAL recorded). */
const vit_real *vit_tape_values(vit_tape *t, const vit_tensor *x, void **lease);

/* x's values kept in bf16 (an output kept as VIT_KEEP_BF16 in mixed
 * precision), for a backward that reads them as a bf16 GEMM operand
 * (vit_mgemm_a16), or NULL: then read x's float values. */
const uint16_t *vit_tape_half(const vit_tensor *x);

/* For an op that rounds its bf16-kept output y itself (in its own pass,
 * with vit_bf16_from_floats: the same bits): the arena buffer to write,
 * which vit_tape_record then leaves as it is; NULL when y is not kept in
 * bf16 (or on error, recorded). */
uint16_t *vit_tape_half_new(vit_tape *t, vit_tensor *y);

/* The same without values (data NULL, the caller points it at some) and
 * without requires_grad: a view (vit_op_reshape).  size is the product of
 * the (checked) shape. */
vit_tensor *vit_tape_header(vit_tape *t, int ndim, const int *shape, size_t size);

/* Checks ndim (1..4) and shape[0..ndim-1] (each >= 1) and sets *size to
 * their product; VIT_OK or the error, recorded and named after fn. */
int vit_tape_shape_size(vit_tape *t, const char *fn, int ndim, const int *shape, size_t *size);

/* Strict shape check of an op's argument x: rank ndim and every dimension
 * dims[i] (-1: any), else VIT_EINVAL recorded with the message
 * "fn: arg must be LAYOUT = [d0, *, ...], got [..]" (layout: the
 * expected shape in words, e.g. "[B, N, 3*D]").  VIT_OK when it matches. */
int vit_tape_check_shape(vit_tape *t, const char *fn, const char *arg, const vit_tensor *x,
                         const char *layout, int ndim, const int *dims);

/* n reals of arena memory, valid until the reset (NULL on error). */
vit_real *vit_tape_reals(vit_tape *t, size_t n);

/* Memory for an intermediate the op keeps for its backward: the arena in
 * grad mode; in no-grad mode one scratch buffer the next op reuses, since
 * nobody reads it again. */
vit_real *vit_tape_saved(vit_tape *t, size_t n);

/* The tape's scratch buffer of at least n reals (kept across steps), for
 * work a backward does not keep; shared by every op, whose backwards run
 * one at a time.  NULL on error (recorded). */
vit_real *vit_tape_scratch(vit_tape *t, size_t n);

/* ---- Gradients, for backwards.  On failure (out of memory) each returns
 * NULL, or the error code, with the tape's status set.  For an x that
 * requires no gradient the first two return NULL (also for a NULL x, an
 * absent optional input) and the others do nothing. ---- */

/* x's gradient buffer to write into.  *fresh is set when it was just lent:
 * its contents are garbage and the first write must overwrite them. */
vit_real *vit_tape_grad_out(vit_tape *t, vit_tensor *x, int *fresh);

/* The same for kernels that only accumulate: a fresh buffer is zeroed. */
vit_real *vit_tape_grad_acc(vit_tape *t, vit_tensor *x);

/* src (x->size values) into x's gradient: copied when fresh, else added. */
int vit_tape_grad_add(vit_tape *t, vit_tensor *x, const vit_real *src);

/* Hands y's gradient buffer to x when x has none yet, both have the same
 * size and the buffer is the pool's to give (y not retained): x's gradient
 * is then y's, to compute in place.  Returns 1 if it did. */
int vit_tape_grad_take(vit_tensor *x, vit_tensor *y);

/* y's gradient into x's: handed over by vit_tape_grad_take when `give`
 * (the op's last read of it), else by vit_tape_grad_add. */
int vit_tape_grad_pass(vit_tape *t, vit_tensor *x, vit_tensor *y, int give);

/* y->size reals y's op may overwrite in its backward: y's gradient itself
 * when the pool lent it and y is not retained (that op is its last reader),
 * else a pool buffer that *lease holds until vit_tape_lease_end (which
 * does nothing for a NULL lease).  NULL on failure. */
vit_real *vit_tape_dy_writable(vit_tape *t, vit_tensor *y, void **lease);
void vit_tape_lease_end(void *lease);

/* n reals of the pool (uninitialised) that *lease holds until
 * vit_tape_lease_end, for a backward's work; NULL on failure (recorded). */
vit_real *vit_tape_lease(vit_tape *t, size_t n, void **lease);

/* ---- Shared between op files (src/tape/tape_ops_elementwise.c). ---- */

/* vit_op_add's definition: vit_op_add_layernorm records the add itself. */
extern const vit_op_def vit_tape_add_def;

/* The entry check of an op on a and b of identical shapes (1 when fine; 0
 * with the error recorded, the message naming `name`). */
int vit_tape_binary_check(vit_tape *t, const char *name, vit_tensor *a, vit_tensor *b);

/* x's last dimension (the feature dimension), and its rows: the product of
 * the others. */
static inline int vit_tape_last_dim(const vit_tensor *x) { return x->shape[x->ndim - 1]; }
static inline int vit_tape_rows(const vit_tensor *x)
{
    return (int)(x->size / (size_t)vit_tape_last_dim(x));
}

/* ---- Ops whose output vit_op_block (src/tape/block.c) and the Swin
 * (src/model/model_swin.c) keep in bf16: the
 * public ops with the output kept as keep says (vit_tape_output_kept; for
 * vit_tape_add_layernorm_kept the layer norm's output, the sum stays
 * float). ---- */
vit_tensor *vit_tape_layernorm_kept(vit_tape *t, vit_tensor *x, vit_tensor *gamma,
                                    vit_tensor *beta, vit_real eps, int keep);
vit_tensor *vit_tape_add_layernorm_kept(vit_tape *t, vit_tensor *a, vit_tensor *b,
                                        vit_tensor *gamma, vit_tensor *beta, vit_real eps,
                                        vit_tensor **sum, int keep);
vit_tensor *vit_tape_mha_kept(vit_tape *t, const vit_mha *cfg, vit_tensor *params,
                              vit_tensor *x_q, vit_tensor *x_kv, vit_real **probs, int keep);
vit_tensor *vit_tape_mha_bias_kept(vit_tape *t, const vit_mha *cfg, vit_tensor *params,
                                   vit_tensor *x_q, vit_tensor *x_kv, vit_tensor *bias,
                                   vit_real **probs, int keep);
vit_tensor *vit_tape_linear_gelu_kept(vit_tape *t, vit_tensor *x, vit_tensor *W, vit_tensor *b,
                                      int keep);
vit_tensor *vit_tape_window_attn_kept(vit_tape *t, vit_tensor *qkv, vit_tensor *bias,
                                      const vit_window_opts *opts, int keep);

/* y = LN(x) W + b, or GELU(LN(x) W + b) with gelu nonzero (b may be
 * NULL): vit_op_layernorm then vit_op_linear or vit_op_linear_gelu, with
 * the same gradients, but the layer norm's output [n, in] is not kept: the
 * backward remakes it from x (which must keep its float values) and the
 * row statistics.  Without a record or in mixed precision it is those two
 * ops.  Errors as theirs, named "vit_tape_ln_linear". */
vit_tensor *vit_tape_ln_linear(vit_tape *t, vit_tensor *x, vit_tensor *gamma, vit_tensor *beta,
                               vit_real eps, vit_tensor *W, vit_tensor *b, int gelu);

/* y [n, m] = r [n, m] + b [m] row by row (b NULL: a copy of r); the start
 * of vit_op_linear_add's forward and of the MLP's, before their product
 * adds onto y.  No argument checks. */
void vit_tape_rows_plus_bias(vit_real *y, const vit_real *r, const vit_real *b, int n, int m);

/* y = r + GELU(x W1 + b1) W2 + b2 (b1, b2 may be NULL): vit_op_block's MLP
 * onto the residual stream r.  In mixed precision with a record, one op
 * that keeps only the pre-activation in bf16 (src/tape/tape_ops_mlp.c);
 * otherwise vit_tape_linear_gelu_kept (GELU kept in bf16) and
 * vit_op_linear_add, whose errors it reports. */
vit_tensor *vit_tape_mlp_kept(vit_tape *t, vit_tensor *x, vit_tensor *W1, vit_tensor *b1,
                              vit_tensor *W2, vit_tensor *b2, vit_tensor *r);

#endif

/*
 * vit/attention.h - scaled dot-product attention, softmax(Q K^T * s + B) V,
 * single- and multi-head, self- and cross-attention, with masks, an
 * additive score bias and a fixed or learnable (per-head) scale s, forward
 * and backward.
 *
 * Two levels:
 *  - vit_sdpa_*: the attention core on already projected Q, K, V.
 *  - vit_mha_*:  a multi-head layer with the projections W_Q, W_K, W_V, W_O.
 *
 * Layouts (row-major, batch first; the rows of q, k and v may be further
 * apart than their widths, see vit_sdpa's ld_q, ld_k, ld_v):
 *   q     [B, n_q, H*d_k]   head h uses columns h*d_k .. h*d_k + d_k - 1
 *   k     [B, n_k, H*d_k]
 *   v     [B, n_k, H*d_v]
 *   out   [B, n_q, H*d_v]   heads concatenated in the same way
 *   probs [B, H, n_q, n_k]  the attention maps: row i of head h is the
 *                           distribution of query i over the keys
 *
 * MASK CONVENTION.  Our masks say what is ALLOWED, and the fields are named
 * so: `allowed[i*n_k + j] != 0` means query i may attend to key j, and
 * `key_valid[b*n_k + j] != 0` means key j of item b is a real token (0 marks
 * padding).  This is the convention of PyTorch's scaled_dot_product_attention
 * and the opposite of nn.MultiheadAttention's attn_mask / key_padding_mask,
 * where True forbids: pass the logical NOT of such a mask.
 * A forbidden score becomes -infinity before the softmax, so its weight is
 * exactly 0 and every row still sums to 1.  A query row with EVERY key
 * forbidden has no distribution: its weights and its output are all zeros
 * (not NaN) and it passes no gradient.
 *
 * See core.h for ownership, accumulation and error rules.  In short: every
 * buffer belongs to the caller and is not kept after a call (the shape
 * structs' mask and bias pointers are only read during the call); forwards
 * overwrite their outputs, backwards accumulate (+=) into gradients and skip
 * NULL ones; failures return a negative VIT_E* code with a message in
 * vit_last_error().  All functions are reentrant: distinct calls may run on
 * different threads as long as they do not share output or scratch buffers.
 */
#ifndef VIT_ATTENTION_H
#define VIT_ATTENTION_H

#include "vit/core.h"

VIT_BEGIN_DECLS

/* Which query-key pairs may interact; every field is optional (zero / NULL
 * means no restriction from that field).  The three restrictions combine:
 * a pair is allowed only if every given field allows it. */
typedef struct vit_attn_mask {
    const unsigned char *allowed; /* [n_q, n_k], or [B, n_q, n_k] if allowed_per_item */
    int allowed_per_item;         /* nonzero: one matrix per batch item */
    const unsigned char *key_valid; /* [B, n_k]: 0 marks a padding key */
    int causal;                   /* nonzero: query i may attend key j only if j <= i */
} vit_attn_mask;

/* Shape and options of the attention core. */
typedef struct vit_sdpa {
    int batch;       /* B */
    int heads;       /* H */
    int n_q;         /* query tokens */
    int n_k;         /* key/value tokens */
    int d_k;         /* query/key width per head */
    int d_v;         /* value width per head */
    vit_real scale;  /* score scale; 0 means 1/sqrt(d_k) */
    vit_attn_mask mask;
    /* Additive score bias B, e.g. Swin's relative position bias after its
     * table lookup: [bias_heads, n_q, n_k], shared by the batch.  bias_heads
     * is 1 (one bias for all heads) or H.  NULL for none. */
    const vit_real *bias;
    int bias_heads;
    /* Per-head score scale [H], e.g. the learnable softmax temperature of
     * locality self-attention: head h's scores are head_scale[h] q.k + B.
     * NULL for none (then `scale` applies to every head); when given,
     * `scale` must be 0 and every entry finite.  Either way the scale is
     * the alpha of the score GEMM, not a pass of its own.  Its gradient
     * comes from vit_sdpa_backward_scale. */
    const vit_real *head_scale;
    /* Row strides, in reals, of q and dq (ld_q), k and dk (ld_k), v and dv
     * (ld_v): 0 means dense (H*d_k, H*d_k, H*d_v); otherwise at least that.
     * With them the core reads slices of one fused projection in place,
     * e.g. Q, K, V as columns 0, D and 2D of a [B*n, 3D] buffer, each with
     * stride 3D (vit_mha does), without copying them out.  out and dout are
     * always dense [B, n_q, H*d_v]. */
    int ld_q, ld_k, ld_v;
} vit_sdpa;

/* Forward.  From q [B, n_q, H*d_k], k [B, n_k, H*d_k], v [B, n_k, H*d_v]
 * writes out [B, n_q, H*d_v] and probs [B, H, n_q, n_k] (both overwritten;
 * probs is needed by the backward).  out must not alias q, k, v or probs.
 * Errors: VIT_EINVAL for a NULL a or buffer, a size < 1, out aliasing an
 * input, a non-finite scale, a head_scale with a nonzero scale or a
 * non-finite entry, or bias_heads not 1 or H with a bias;
 * VIT_ENOMEM when the sizes overflow (or, in mixed precision, a bf16
 * product's scratch cannot be had); VIT_ENUM for a non-finite score
 * s q.k + bias (checked before masking, so NaN or infinity in a masked
 * position is reported too), naming item, head, query and key.
 * In mixed precision (vit_bf16_thread_mixed on the calling thread) the
 * products take bf16 inputs with float32 sums where the heads are at least
 * 64 wide with at least 64 keys (vit/bf16.h); the softmax stays float32. */
int vit_sdpa_forward(const vit_sdpa *a, vit_real *out, vit_real *probs,
                     const vit_real *q, const vit_real *k, const vit_real *v);

/* Number of vit_real a backward needs as scratch: n_q * n_k (0 for a NULL
 * a or a size < 1; no message).  Cannot fail otherwise. */
size_t vit_sdpa_work_size(const vit_sdpa *a);

/* Backward.  From dout [B, n_q, H*d_v] and the forward's q, k, v, probs
 * (and the same *a), accumulates (+=) dq, dk, dv (layouts as q, k, v) and
 * dbias [bias_heads, n_q, n_k], summed over the batch; any of them may be
 * NULL.  A non-NULL dbias needs bias_heads 1 or H even when bias is NULL (it
 * is then the gradient at a zero bias).  The softmax Jacobian is
 * applied in O(n_k) per row: dS = P .* (dP - rowsum(dP .* P)).
 * work: vit_sdpa_work_size(a) reals of caller scratch (contents ignored and
 * clobbered), or NULL to have the call allocate and free its own.
 * Gradient buffers must not overlap each other or the inputs.
 * Errors: VIT_EINVAL as for the forward (NULL dout, probs, q, k or v
 * included) or a dbias with bad bias_heads; VIT_ENOMEM if work is NULL and
 * the allocation fails (or, in mixed precision, a bf16 product's scratch
 * cannot be had).  On error the gradients are unspecified.  Mixed
 * precision as for the forward: the four products in bf16, dS in float32. */
int vit_sdpa_backward(const vit_sdpa *a, vit_real *dq, vit_real *dk, vit_real *dv,
                      vit_real *dbias, const vit_real *dout, const vit_real *probs,
                      const vit_real *q, const vit_real *k, const vit_real *v,
                      vit_real *work);

/* vit_sdpa_backward that also accumulates (+=) the gradient of the score
 * scale into dscale (NULL: not wanted, and the call is vit_sdpa_backward):
 * with a->head_scale, dscale [H] and
 *   dscale[h] += sum over items b and pairs (i, j) of dS_bh[i,j] (q_i . k_j),
 * the product taken BEFORE the scale (S = s Q K^T + B, so dL/ds =
 * sum dS .* Q K^T); without it, dscale [1] receives the sum over the heads
 * as well: the gradient with respect to the one scale a->scale (or the
 * default 1/sqrt(d_k)) that every head shares.  The per-pair sums are
 * added in (item, head) order, so the result does not depend on the thread
 * count.  Costs one more product of the size of Q K^T per pair.  Errors as
 * vit_sdpa_backward, plus VIT_ENOMEM if the per-pair sums ([B*H] doubles)
 * cannot be allocated. */
int vit_sdpa_backward_scale(const vit_sdpa *a, vit_real *dq, vit_real *dk, vit_real *dv,
                            vit_real *dbias, vit_real *dscale, const vit_real *dout,
                            const vit_real *probs, const vit_real *q, const vit_real *k,
                            const vit_real *v, vit_real *work);

/* ---- Masks ---------------------------------------------------------- */

/* Writes (overwrites) allowed[n_q, n_k], row-major (row i = query i):
 * 1 where j <= i (causal), else 0.  The caller owns allowed.
 * Returns VIT_OK, or VIT_EINVAL for a NULL allowed or n_q or n_k < 1. */
int vit_mask_causal(unsigned char *allowed, int n_q, int n_k);

/* Writes (overwrites) allowed[n_q, n_k]: 1 everywhere except the diagonal
 * i == j, so that no query attends its own key (the self-mask of locality
 * self-attention, Lee, Lee & Song 2021).  A query row i >= n_k has no
 * diagonal entry and is all ones.  The caller owns allowed.
 * Returns VIT_OK, or VIT_EINVAL for a NULL allowed, n_q or n_k < 1, or
 * n_k == 1 (every query with a diagonal would then attend nothing). */
int vit_mask_no_self(unsigned char *allowed, int n_q, int n_k);

/* Swin-style window mask for self-attention on a grid_h x grid_w token grid
 * (tokens numbered row by row): allowed[N, N], N = grid_h*grid_w, is 1 where
 * two tokens fall in the same window of Mh rows by Mw columns (square
 * windows: Mh = Mw).  With shifts (Swin uses Mh/2 and Mw/2, rounded down)
 * the windows are those of the grid cyclically shifted by shift_h rows and
 * shift_w columns towards the origin (Swin's roll(x, (-shift_h, -shift_w))),
 * and two tokens in one shifted window may interact only if they were also
 * neighbours before the shift (Swin's region mask, per axis), so no token
 * attends across a wrapped border.  The two shifts are separate because
 * torchvision drops the shift only on an axis that one window covers: a
 * 7 x 14 grid in windows of 7 x 7 shifts 0 rows and 3 columns.  grid_h must
 * be a multiple of Mh and grid_w of Mw; 0 <= shift_h < Mh, 0 <= shift_w < Mw.
 * allowed is overwritten and owned by the caller.  (Until 0.3.0 one window
 * side M and one `shift` served both axes.)
 * Returns VIT_OK, or VIT_EINVAL (naming the argument) for a NULL allowed, a
 * size < 1, grid_h not a multiple of Mh or grid_w of Mw, or a shift outside
 * its axis's range. */
int vit_mask_window(unsigned char *allowed, int grid_h, int grid_w, int Mh, int Mw,
                    int shift_h, int shift_w);

/* Number of nonzero entries of an n_q x n_k mask (0, with a message in
 * vit_last_error, for a NULL mask or a non-positive size).  Reads only. */
size_t vit_mask_count(const unsigned char *allowed, int n_q, int n_k);

/* ---- Multi-head attention layer ------------------------------------- */

/* Shape and options of a multi-head attention layer.
 *
 * Y = Concat(head_1..head_H) W_O + b_O,
 * head_h = Attention(X_q W_Q^(h) + b_Q^(h), X_kv W_K^(h) + b_K^(h), X_kv W_V^(h) + b_V^(h))
 *
 * with d_k = d_v = d_model / H.  Self-attention passes the same buffer as
 * x_q and x_kv (n_k = n_q, d_kv = d_model).
 *
 * Parameters live in ONE flat buffer, gradients in another laid out alike.
 * The input projections come first, side by side in the rows of the
 * matrices that multiply each input, so that one GEMM computes them:
 *   d_kv = d_model (self-attention, and cross-attention between inputs of
 *   one width):
 *     W_QKV [d_model, 3 d_model] = [W_Q | W_K | W_V]   (row i of W_QKV is
 *                                  row i of W_Q, then of W_K, then of W_V)
 *   d_kv != d_model:
 *     W_Q [d_model, d_model] | W_KV [d_kv, 2 d_model] = [W_K | W_V]
 * then
 *   W_O [d_model, d_model] | b_Q [d_model] | b_K | b_V | b_O  (biases only
 *   if has_bias) | tau [H]  (only if learn_scale)
 * so the count is 4 d^2 without biases and 4 d^2 + 4 d with them for
 * self-attention (1,048,576 and 1,050,624 for d = 512), plus H with
 * learn_scale.  Self-attention (x_q and x_kv the same buffer) then projects
 * with ONE GEMM of x by W_QKV, and its backward makes one pass over x:
 * dx = dQKV W_QKV^T and dW_QKV = x^T dQKV, one GEMM each.  (Checkpoint
 * format 4 stores this layout; vit_run_load converts older files, which
 * held W_Q, W_K, W_V one after the other.)
 *
 * LEARNABLE TEMPERATURE.  With learn_scale, head h's scores are
 * tau[h] q.k: tau is the multiplier itself (not its log, not its inverse),
 * one per head, and its natural initial value is 1/sqrt(d_k), so that the
 * layer starts as the fixed-scale one.  This is the parameterisation of
 * the reference code of locality self-attention (Lee, Lee & Song 2021,
 * "Vision Transformer for Small-Size Datasets": a per-head
 * nn.Parameter(dim_head ** -0.5 * ones(heads)) multiplying Q K^T; the
 * paper writes softmax(R / tau), the same family).  Its gradient is
 * sum dS .* Q K^T (vit_sdpa_backward_scale).
 *
 * PyTorch's nn.MultiheadAttention computes x W^T, so with E = d_model:
 *   in_proj_weight = [W_Q^T; W_K^T; W_V^T] = W_QKV^T     (3E x E)
 *   in_proj_bias   = [b_Q; b_K; b_V]
 *   out_proj.weight = W_O^T, out_proj.bias = b_O
 * Columns h*d_k .. h*d_k+d_k-1 of W_Q feed head h, matching PyTorch's head
 * split.  (For cross-attention with kdim != embed_dim PyTorch uses separate
 * q_proj_weight, k_proj_weight, v_proj_weight: the transposes of ours.)
 */
typedef struct vit_mha {
    int batch;       /* B */
    int n_q;         /* query tokens per item */
    int n_k;         /* key/value tokens per item */
    int d_model;     /* query input width = output width */
    int d_kv;        /* key/value input width; 0 means d_model */
    int heads;       /* H, must divide d_model */
    int has_bias;    /* nonzero: b_Q, b_K, b_V, b_O present */
    vit_real scale;  /* 0 means 1/sqrt(d_model / heads); must be 0 with learn_scale */
    vit_attn_mask mask;
    const vit_real *bias;   /* additive score bias, as in vit_sdpa */
    int bias_heads;
    int learn_scale; /* nonzero: tau [H] at the end of params scales the scores */
} vit_mha;

/* Pointers into a flat parameter (or gradient) buffer.  The input
 * projections are not separate [d, d] matrices: W_Q, W_K and W_V are column
 * blocks of the joint input matrices (hence the _cols names), so their rows
 * are row_stride_q (W_Q) and row_stride_kv (W_K, W_V) reals apart: element
 * (i, j) of W_K is w_k_cols[i * row_stride_kv + j].  With d_kv = d_model,
 * row_stride_q = row_stride_kv = 3 d_model and w_q_cols is W_QKV [d, 3d]
 * itself (w_k_cols = w_q_cols + d_model, w_v_cols = w_k_cols + d_model);
 * otherwise w_q_cols is W_Q [d, d] with row_stride_q = d_model, and
 * w_k_cols is W_KV [d_kv, 2d] with row_stride_kv = 2 d_model.  W_O is dense
 * (stride d_model), and b_Q, b_K, b_V (and b_K, b_V) are consecutive. */
typedef struct vit_mha_views {
    vit_real *w_q_cols, *w_k_cols, *w_v_cols; /* column blocks, see above */
    vit_real *w_o;
    vit_real *b_q, *b_k, *b_v, *b_o; /* NULL without biases */
    vit_real *tau;                   /* [H], NULL without learn_scale */
    int row_stride_q;                /* reals between rows of w_q_cols */
    int row_stride_kv;               /* reals between rows of w_k_cols, w_v_cols */
} vit_mha_views;

/* Checks the shape; VIT_OK, VIT_EINVAL with a message (a NULL m, a size
 * < 1, heads not dividing d_model, a non-finite scale, a nonzero scale
 * with learn_scale, bad bias_heads,
 * batch * n exceeding INT_MAX) or VIT_ENOMEM (buffer sizes overflow).
 * Reads only. */
int vit_mha_check(const vit_mha *m);

/* Number of parameters: 2 d^2 + 2 d_kv d, plus 4 d with biases, plus H with
 * learn_scale (0, with a message, for an invalid shape). */
size_t vit_mha_param_count(const vit_mha *m);

/* Splits a flat buffer of vit_mha_param_count(m) reals into named views
 * (pointers into flat, which stays the caller's; nothing is copied).
 * *views is overwritten.  Returns VIT_OK, or VIT_EINVAL for an invalid
 * shape or a NULL flat or views. */
int vit_mha_views_of(const vit_mha *m, vit_real *flat, vit_mha_views *views);

/* Number of reals the forward saves for the backward (the "cache"):
 * Q [B,n_q,d], K [B,n_k,d], V [B,n_k,d] (for self-attention side by side in
 * the rows of one [B*n, 3d] block, as the fused GEMM writes them), context
 * [B,n_q,d] and the maps probs [B,H,n_q,n_k].  Long layers (vit_sdpa_use_tiled true for the
 * layer's core: above VIT_SDPA_TILED_THRESHOLD score entries per head, or
 * as VIT_SDPA_TILED forces) run the memory-efficient tiled core instead and
 * keep only the rows' log-sum-exp [B,H,n_q] in place of the maps, so the
 * cache and the backward's work grow linearly in the tokens.  The caller
 * allocates and owns the cache.  0, with a message, for an invalid shape. */
size_t vit_mha_cache_size(const vit_mha *m);

/* The attention maps inside a cache: [B, H, n_q, n_k] (row i of head h of
 * item b is query i's distribution over the keys).  A pointer into cache,
 * valid as long as the cache is; NULL, with a message, for an invalid shape,
 * a NULL cache, or a layer that runs the tiled core (which keeps no maps). */
vit_real *vit_mha_probs(const vit_mha *m, vit_real *cache);

/* Forward.  y [B, n_q, d_model] (overwritten, must not alias inputs);
 * x_q [B, n_q, d_model]; x_kv [B, n_k, d_kv] (the same pointer as x_q for
 * self-attention: then, with n_q = n_k, one GEMM projects Q, K and V and
 * the cache holds them fused; the backward must be given the same
 * pointers to read it so); params: the flat buffer of
 * vit_mha_param_count(m) reals (read only); cache: vit_mha_cache_size(m)
 * reals (overwritten; keep it, unchanged, for the backward).
 * Errors: VIT_EINVAL for an invalid shape (vit_mha_check), a NULL buffer,
 * y aliasing x_q or x_kv, or a non-finite tau; VIT_ENUM for a non-finite
 * attention score (as vit_sdpa_forward). */
int vit_mha_forward(const vit_mha *m, const vit_real *params, vit_real *y,
                    const vit_real *x_q, const vit_real *x_kv, vit_real *cache);

/* Scratch for the backward, in reals (0, with a message, for an invalid
 * shape). */
size_t vit_mha_work_size(const vit_mha *m);

/* Backward.  From dy [B, n_q, d_model] and the forward's params, x_q, x_kv
 * and cache, accumulates (+=) grads (flat, laid out like params, summed over
 * the batch; with learn_scale its last H entries receive dL/dtau, summed
 * over the batch in item order), dx_q [B, n_q, d_model], dx_kv [B, n_k, d_kv] and dbias
 * [bias_heads, n_q, n_k] (any may be NULL; for self-attention pass the same
 * buffer for dx_q and dx_kv and it receives both contributions).
 * work: vit_mha_work_size(m) reals of caller scratch (clobbered), or NULL to
 * have the call allocate and free its own.  Gradient buffers must not
 * overlap params, dy, the inputs or the cache.
 * Errors: VIT_EINVAL for an invalid shape, a NULL params, dy, x_q, x_kv or
 * cache, or a dbias with bad bias_heads; VIT_ENOMEM if work is NULL and the
 * allocation fails. */
int vit_mha_backward(const vit_mha *m, const vit_real *params, vit_real *grads,
                     vit_real *dx_q, vit_real *dx_kv, vit_real *dbias,
                     const vit_real *dy, const vit_real *x_q, const vit_real *x_kv,
                     const vit_real *cache, vit_real *work);

/* ---- Memory-efficient (tiled) attention core ------------------------- */

/* The same attention as vit_sdpa_forward/backward (same vit_sdpa, masks,
 * bias, scale, layouts of q, k, v and out, same errors), computed in tiles
 * of queries x keys with an online softmax, so that memory grows linearly
 * in the sequence length: instead of probs [B, H, n_q, n_k] the forward
 * keeps only each query row's log-sum-exp
 *   lse [B, H, n_q],  lse = log sum_j exp(s q_i.k_j + bias_ij) over the
 *                     allowed keys j (-infinity for a fully masked row),
 * and the backward recomputes the weights tile by tile from q, k and lse.
 * The price is arithmetic: the backward does 5 products of the size of
 * Q K^T where the standard one does 4 (7 when it splits the sequence across
 * threads because there are fewer (item, head) pairs than threads can share
 * evenly, or a dbias is shared by several pairs), and the exponentials
 * twice.  Results agree with the standard path to rounding, and do not
 * depend on the thread count: every output element is summed in the same
 * order whatever the split.  The loops run on the library's threads over
 * (item, head, query tile), and in the backward over (item, head) pairs or
 * key tiles.
 *
 * Which path to use: vit_sdpa_use_tiled() below. */

/* n_q * n_k above which vit_sdpa_use_tiled picks the tiled path. */
#define VIT_SDPA_TILED_THRESHOLD (256L * 256L)

/* Nonzero when the tiled path should be used for shape *a: when the
 * environment variable VIT_SDPA_TILED is "1" (always), never when it is
 * "0", and otherwise (unset or any other value) when
 * n_q * n_k > VIT_SDPA_TILED_THRESHOLD, i.e. from 257 x 257 tokens on:
 * below that the [n_q, n_k] maps are small and the standard path is
 * faster.  For a tape or model that picks its attention path per layer;
 * vit_mha_forward/backward themselves always use the standard path.
 * 0 for a NULL a or a size < 1.  Reads the environment on every call; does
 * not record errors. */
int vit_sdpa_use_tiled(const vit_sdpa *a);

/* Sets the tile sizes of the tiled path: tile_q query rows by tile_k keys
 * (each in 1 .. 4096, or 0 for the default 128 x 256; tiles are clipped to
 * n_q, n_k and need not divide them).  A tuning and testing knob: results
 * change only by rounding.  Returns VIT_OK or VIT_EINVAL (nothing changed)
 * for a size out of range.  NOT thread-safe, like vit_set_threads: one
 * process-wide setting read by every tiled call; the work size depends on
 * it. */
int vit_sdpa_tiled_set_tiles(int tile_q, int tile_k);

/* Number of vit_real of scratch a tiled forward or backward needs:
 * T * (2 * tq * tk + 2 * tq) with tq x tk the tile clipped to the
 * sequence and T the thread count (vit_set_threads) at the time of the
 * call: about T * 256 KB in float32 by default, independent of n.  Ask again
 * after changing the thread count or the tiles.  0 for a NULL a or a
 * size < 1 (no message). */
size_t vit_sdpa_tiled_work_size(const vit_sdpa *a);

/* Forward.  From q [B, n_q, H*d_k], k [B, n_k, H*d_k], v [B, n_k, H*d_v]
 * writes out [B, n_q, H*d_v] (as vit_sdpa_forward) and lse [B, H, n_q]
 * (both overwritten; keep them for the backward).  A fully masked row gets
 * zeros in out and -infinity in lse.  out must not alias q, k, v or lse.
 * work: vit_sdpa_tiled_work_size(a) reals of caller scratch (clobbered), or
 * NULL to have the call allocate and free its own.
 * Errors: as vit_sdpa_forward (VIT_EINVAL for a NULL a, out, lse, q, k or
 * v, a size < 1, out aliasing an input, a non-finite scale, bad
 * bias_heads; VIT_ENOMEM for overflowing sizes or a failed allocation;
 * VIT_ENUM for a non-finite score, masked or not, naming item, head, query
 * and key). */
int vit_sdpa_tiled_forward(const vit_sdpa *a, vit_real *out, vit_real *lse,
                           const vit_real *q, const vit_real *k, const vit_real *v,
                           vit_real *work);

/* Backward.  From dout [B, n_q, H*d_v] and the forward's out, lse, q, k, v
 * (and the same *a), accumulates (+=) dq, dk, dv and dbias [bias_heads,
 * n_q, n_k] exactly as vit_sdpa_backward does (any may be NULL; a non-NULL
 * dbias needs bias_heads 1 or H even without a bias).  Per tile it
 * recomputes P = exp(S - lse) and uses D_i = dout_i . out_i for the softmax
 * Jacobian: dS = P .* (dP - D).  work as for the forward.  Gradient buffers
 * must not overlap each other or the inputs.
 * Errors: VIT_EINVAL as for the forward (NULL dout, out, lse, q, k or v
 * included) or a dbias with bad bias_heads; VIT_ENOMEM if work is NULL and
 * the allocation fails (or, in mixed precision, a bf16 product's scratch
 * cannot be had).  On error the gradients are unspecified.  Mixed
 * precision as for the forward: the four products in bf16, dS in float32. */
int vit_sdpa_tiled_backward(const vit_sdpa *a, vit_real *dq, vit_real *dk, vit_real *dv,
                            vit_real *dbias, const vit_real *dout, const vit_real *out,
                            const vit_real *lse, const vit_real *q, const vit_real *k,
                            const vit_real *v, vit_real *work);

/* vit_sdpa_tiled_backward that also accumulates (+=) the gradient of the
 * score scale into dscale ([H] with a->head_scale, else [1]; NULL: not
 * wanted), as vit_sdpa_backward_scale defines it.  The per-block sums are
 * added in (item, head, key tile, query tile) order whatever the thread
 * count, so the result does not depend on it; they agree with the standard
 * path to rounding.  Errors as vit_sdpa_tiled_backward, plus VIT_ENOMEM if
 * the per-block sums cannot be allocated. */
int vit_sdpa_tiled_backward_scale(const vit_sdpa *a, vit_real *dq, vit_real *dk, vit_real *dv,
                                  vit_real *dbias, vit_real *dscale, const vit_real *dout,
                                  const vit_real *out, const vit_real *lse, const vit_real *q,
                                  const vit_real *k, const vit_real *v, vit_real *work);

/* ---- Windowed self-attention (Swin) ------------------------------------ */

/* Self-attention restricted to windows of Mh rows by Mw columns (square
 * windows: Mh = Mw) of a grid_h x grid_w token grid, computing scores only
 * inside each window: cost linear in the number of tokens N = grid_h *
 * grid_w (N * T scores, T = Mh * Mw, not N^2).  The result equals vit_sdpa
 * with mask.allowed from
 * vit_mask_window(grid_h, grid_w, Mh, Mw, shift_h, shift_w) (same shift and
 * region rules: nothing attends across a wrapped border) and the window
 * bias spread over the window pairs.
 *
 * Layouts: q, k [B, N, H*d_k], v and out [B, N, H*d_v], tokens numbered row
 * by row in the ORIGINAL grid, as for vit_sdpa.  Windows are numbered row
 * by row over the SHIFTED grid, nW = (grid_h/Mh) * (grid_w/Mw), and inside
 * a window positions p = py*Mw + px (T = Mh*Mw of them, 0 <= py < Mh,
 * 0 <= px < Mw) are row-major in the shifted frame: position (py, px) of
 * window (wy, wx) is the token at original row (wy*Mh + py + shift_h) mod
 * grid_h, column (wx*Mw + px + shift_w) mod grid_w.
 *   lse   [B, H, nW, T]      position p of a window: the log-sum-exp of
 *                            its scores over the window's T tokens (those
 *                            of its region), all the backward needs to
 *                            remake the weights from q, k and the bias
 *   bias  [bias_heads, T, T] additive bias by position pair, shared by all
 *                            windows and items (Swin's relative position
 *                            bias after its table lookup); bias_heads 1 or
 *                            H, NULL for none. */
typedef struct vit_window_attn {
    int batch;      /* B */
    int heads;      /* H */
    int grid_h;     /* token rows */
    int grid_w;     /* token columns */
    int window_h;   /* Mh: window rows; must divide grid_h (until 0.3.0 one
                     * `window` M served both axes) */
    int window_w;   /* Mw: window columns; must divide grid_w (Mw = Mh:
                     * square windows); T = Mh * Mw, at most 65536 */
    int shift_h;    /* rows of cyclic shift, 0 <= shift_h < Mh */
    int shift_w;    /* columns of cyclic shift, 0 <= shift_w < Mw (Swin: 0,
                     * or Mh/2 and Mw/2 every other block, on each axis
                     * that one window does not cover; until 0.3.0 one
                     * `shift`) */
    int d_k;        /* query/key width per head */
    int d_v;        /* value width per head */
    vit_real scale; /* 0 means 1/sqrt(d_k); fixed (no learnable per-head scale
                     * here: Swin does not use one; vit_sdpa's head_scale
                     * with a window mask is the learnable route) */
    const vit_real *bias;
    int bias_heads;
    /* Row strides, in reals, of q and dq (ld_q), k and dk (ld_k), v and dv
     * (ld_v): 0 means dense (H*d_k, H*d_k, H*d_v), otherwise at least
     * that, as vit_sdpa's.  With them the kernel reads Q, K, V as columns
     * 0, D and 2D of one fused projection [B, N, 3D] (each with stride 3D)
     * and writes their gradients there, without copies (vit_op_window_attn
     * does).  out and dout are always dense [B, N, H*d_v]. */
    int ld_q, ld_k, ld_v;
    /* NULL, or the caller's [B, H, nW, T] rows of T weights (B * H * N * T
     * reals, T = Mh*Mw: vit_window_attn_lse_size times T): the forward writes
     * (overwrites) each window's softmax weights there, and the backward,
     * given the same pointer, reads them instead of remaking them from lse
     * (no second Q K^T, exponential or bias pass; T reals per token and
     * head instead of one).  The two backwards agree up to rounding: the
     * forward's weights are exp(s - max) / sum, the remade ones
     * exp(s - lse). */
    vit_real *probs;
} vit_window_attn;

/* Reals of lse: B * H * N, one per query row (0, with a message, for an
 * invalid shape).  (Until 0.3.0 the forward kept the weights themselves,
 * B * H * N * T reals, from vit_window_attn_probs_size.) */
size_t vit_window_attn_lse_size(const vit_window_attn *w);

/* Forward.  Writes (overwrites) out [B, N, H*d_v] and lse [B, H, nW, T]
 * from q, k, v; lse may be NULL when w->probs is given (the weights kept:
 * the backward then does not read lse).  out must not alias q, k, v, lse
 * or w->probs.
 * Allocates and frees a little scratch (a few windows' worth per thread).
 * Runs on the library's threads over (item, head, window).
 * Errors: VIT_EINVAL (naming the field and the sizes) for a NULL w or
 * buffer, a size < 1, grid_h not a multiple of window_h or grid_w of
 * window_w, a window of more than 65536 tokens, shift_h outside
 * [0, window_h) or shift_w outside [0, window_w), a non-finite scale, bad
 * bias_heads, an ld_* neither 0 nor at least its row width, out aliasing
 * an input; VIT_ENOMEM for overflowing sizes or a failed allocation;
 * VIT_ENUM for a non-finite score inside a window (masked or not), naming
 * item, head, query and key tokens. */
int vit_window_attn_forward(const vit_window_attn *w, vit_real *out, vit_real *lse,
                            const vit_real *q, const vit_real *k, const vit_real *v);

/* Backward.  From dout [B, N, H*d_v] and the forward's lse, q, k, v and
 * the same *w (its bias included: without w->probs the weights are remade
 * per window as exp(s q.k + bias - lse), one product of the size of Q K^T
 * more than keeping them costs; with it, they are read from there and lse
 * is not read and may be NULL), accumulates (+=) dq, dk (layout of q), dv (layout of v) and dbias
 * [bias_heads, T, T] (summed over items and windows); any may be NULL; a
 * non-NULL dbias needs bias_heads 1 or H.  Gradient buffers must not
 * overlap each other or the inputs (dq, dk, dv interleaved in one fused
 * [B, N, 3D] buffer through the ld_* strides is fine: no element is
 * shared).  Threads: over up to 16 groups of (item, head) pairs, a number
 * that does not depend on the thread count; with a dbias each group sums
 * into its own partial (a little scratch: groups * bias_heads * T * T
 * reals), added to dbias in group order, so the result is the same
 * whatever the thread count.
 * Errors: VIT_EINVAL as for the forward
 * (NULL dout, q, k or v, or lse without w->probs, included) or a dbias with bad bias_heads;
 * VIT_ENOMEM if the scratch cannot be allocated. */
int vit_window_attn_backward(const vit_window_attn *w, vit_real *dq, vit_real *dk,
                             vit_real *dv, vit_real *dbias, const vit_real *dout,
                             const vit_real *lse, const vit_real *q, const vit_real *k,
                             const vit_real *v);

VIT_END_DECLS

#endif

/* Internal: what the standard, tiled and windowed attention files share. */
#ifndef VIT_SRC_ATTENTION_INTERNAL_H
#define VIT_SRC_ATTENTION_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include "vit/attention.h"

/* a*b*c in size_t; 0 (with VIT_ENOMEM recorded) on overflow. */
int vit_mul3_size(size_t *out, size_t a, size_t b, size_t c);

/* Validates the shape of an attention core (the rules and messages of
 * vit_sdpa_forward/backward and their tiled twins, prefixed with fn) and
 * resolves the default scale 1/sqrt(d_k) into *scale.  Sizes are each
 * <= 2^30 (vit_check_dim); the products handed to BLAS as int (H*d_k,
 * H*d_v, B*H) are checked against INT_MAX, every buffer size against
 * size_t. */
int vit_sdpa_validate(const char *fn, const vit_sdpa *a, vit_real *scale);

/* The score scale of head h: a->head_scale[h] when given, else the
 * validated scale. */
static inline vit_real vit_sdpa_scale_of(const vit_sdpa *a, vit_real scale, int h)
{
    return a->head_scale ? a->head_scale[h] : scale;
}

/* The row strides of q, k and v (vit_sdpa's ld_q, ld_k, ld_v, 0 meaning
 * dense); gradients share them.  out and dout are dense (H*d_v). */
static inline int vit_sdpa_ld_q(const vit_sdpa *a) { return a->ld_q ? a->ld_q : a->heads * a->d_k; }
static inline int vit_sdpa_ld_k(const vit_sdpa *a) { return a->ld_k ? a->ld_k : a->heads * a->d_k; }
static inline int vit_sdpa_ld_v(const vit_sdpa *a) { return a->ld_v ? a->ld_v : a->heads * a->d_v; }

/* sum over i < ni, j < nj of ds[i*nj + j] (q_i . k_j), q_i = q + i*ldq,
 * k_j = k + j*ldk, d values each: one block's share of the gradient of its
 * score scale (vit_sdpa_backward_scale).  The products q_i . k_j in
 * vit_real by the direct kernels (direct: vit_pair_direct took d and nj)
 * or a GEMM, their weighted sum in double. */
double vit_attn_scale_grad(int direct, const vit_real *ds, const vit_real *q, const vit_real *k,
                           int ni, int nj, int d, int ldq, int ldk);

/* dscale (NULL: nothing) += the per-pair parts [B*H*per_pair] (per_pair
 * consecutive parts per (item, head) pair), summed in (item, head, part)
 * order: into dscale[h] with a->head_scale, all into dscale[0] without. */
void vit_attn_add_scale_grads(const vit_sdpa *a, vit_real *dscale, const double *parts,
                              int per_pair);

/* Rows s[rows, nk] (contiguous; finite, or -infinity where a mask forbids)
 * in place -> their softmax; a row with nothing allowed becomes zeros.
 * Vectorised (fastmath's exp in float32); each row sums in double.  The
 * standard and the windowed cores share it (src/kernels/attention.c). */
void vit_attn_softmax_block(vit_real *s, int rows, int nk);

/* dS = P .* (dP - rowsum(dP .* P)) for rows i0..i1-1 of [*, nk], in place
 * over dP; each row's sum in double, vectorised (src/kernels/attention.c). */
void vit_attn_softmax_grad_rows(const vit_real *p, vit_real *ds, int nk, int i0, int i1);

/* s[n] -> exp(s[n] - shift) in place, every s[j] - shift <= 0 or -inf
 * (a forbidden key: 0); the tiled core's, shared with the window kernel. */
void vit_attn_exp_shifted(vit_real *s, int n, vit_real shift);

/* s[n] += bias[n] (NULL: none), then the flat index of the first score
 * that is not finite, or -1 (src/kernels/attention.c). */
long vit_attn_add_bias_check(vit_real *s, const vit_real *bias, size_t n);

/* Argument checks the attention cores share (messages prefixed with fn). */

/* q, k, v, the inputs every core reads, are non-NULL. */
int vit_attn_check_qkv(const char *fn, const vit_real *q, const vit_real *k, const vit_real *v);

/* A forward's pointers: out and its second output (named second_name:
 * "probs" or "lse") non-NULL, q, k, v non-NULL, and out distinct from all
 * four (the cores read q, k, v while writing out). */
int vit_attn_check_forward(const char *fn, const vit_real *out, const vit_real *second,
                           const char *second_name, const vit_real *q, const vit_real *k,
                           const vit_real *v);

/* A bias gradient (NULL for none) needs bias_heads 1 or heads. */
int vit_attn_check_dbias(const char *fn, const vit_real *dbias, int bias_heads, int heads);

/* The mask fields as seen by query row i of item b: its allowed row (or
 * NULL), the item's key_valid row (or NULL), and the last key index the
 * causal rule admits. */
typedef struct {
    const unsigned char *allowed;
    const unsigned char *valid;
    int last;
} vit_row_mask;

vit_row_mask vit_mask_row(const vit_sdpa *a, int b, int i);

/* Whether that row may attend key j. */
static inline int vit_row_allows(const vit_row_mask *r, int j)
{
    return j <= r->last && (!r->allowed || r->allowed[j]) && (!r->valid || r->valid[j]);
}

/* Lowers *slot to v if v is smaller.  The parallel loops record the flat
 * index of the first non-finite score they meet this way, so that the
 * earliest one wins whatever the order the threads found theirs in. */
static inline void vit_atomic_min(atomic_ullong *slot, unsigned long long v)
{
    unsigned long long cur = atomic_load(slot);
    while (v < cur && !atomic_compare_exchange_weak(slot, &cur, v))
        ;
}

#endif

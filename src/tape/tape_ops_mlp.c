/*
 * A block's MLP as one tape op in mixed precision, forward beside backward
 * (internal, for vit_op_block): y = r + GELU(x W1 + b1) W2 + b2.
 * Shapes: x [n, d] (leading dimensions flattened into rows), W1 [d, m],
 * b1 [m], W2 [m, e], b2 [e], r and y [n, e] (y takes r's shape).
 *
 * Why one op: as two (vit_tape_linear_gelu_kept, vit_op_linear_add) the
 * hidden layer h = GELU(v), v = x W1 + b1, is a tensor between them, so
 * the tape keeps h and GELU'(v) in bf16 (4 n m bytes), the forward makes
 * h's float values for the whole slice and the backward h's gradient for
 * the whole slice (4 n m bytes each).  Here the tape keeps v in bf16 only
 * (2 n m bytes) and both passes run over blocks of rows whose float
 * width-m values are about VIT_TAPE_PIECE_BYTES: h and its gradient exist
 * a block at a time, in the scratch.  The backward makes h again from v's
 * bf16 bits, the same bits as the forward's operand of the second product,
 * beside GELU'(v): both are read from a table of the 65,536 bf16 values
 * (vit_bias_gelu_forward_v16, vit_gelu_backward_v16), so that making h
 * twice costs less than computing the exact GELU once did.  Measured on
 * the large model's slice (2080 x 192, width 768, one thread): forward and
 * backward 0.94 times the two ops' time.
 */
#include <stdint.h>
#include <string.h>

#include "activations_internal.h"
#include "error.h"
#include "mixed.h"
#include "tape_internal.h"
#include "threads.h"

#ifndef VIT_DOUBLE
/* What the backward keeps: v = x W1 + b1 rounded to bf16 [n, m]. */
typedef struct mlp_ctx {
    uint16_t *v16;
} mlp_ctx;

/* The scratch for one block: rows * m floats, then twice as many bf16
 * (h16, then du16 in the backward), then rows * e bf16 (dy16, the
 * backward's), each 64-byte aligned. */
static float *block_scratch(vit_tape *t, int rows, int m, int e, uint16_t **h16, uint16_t **du16,
                            uint16_t **dy16)
{
    size_t floats = ((size_t)rows * m + 31) / 32 * 32, fe = ((size_t)rows * e + 31) / 32 * 32;
    float *f = vit_tape_scratch(t, 2 * floats + fe / 2);
    *h16 = f ? (uint16_t *)(f + floats) : NULL;
    *du16 = *h16 ? *h16 + floats : NULL;
    if (dy16)
        *dy16 = *du16 ? *du16 + floats : NULL;
    return f;
}

/* in: x, W1, b1 (or NULL), W2, b2 (or NULL), r.  Block by block of rows:
 * dh = dy W2^T, then h again and du = dh GELU'(v) over dh (db1 += its
 * column sums), dW2 += h^T dy, dW1 += x^T du, dx (= or +=) du W1^T, the
 * last two with du rounded to bf16 by the GELU's pass, while it is in
 * cache, and the first two with the block of dy rounded once (dy16): each
 * product would round its operand the same way, reading it again; db2 +=
 * dy's column sums in the pass that rounds it (at the end without dW2).
 * Then dr = dy (handed over: the last read). */
static int back_mlp(vit_tape *t, const vit_op_rec *rec)
{
    const mlp_ctx *c = rec->ctx;
    vit_tensor *x = rec->in[0], *W1 = rec->in[1], *W2 = rec->in[3];
    const float *dy = rec->out->grad;
    int n = vit_tape_rows(x), d = W1->shape[0], m = W1->shape[1], e = W2->shape[1], fresh = 0;
    float *dW1 = vit_tape_grad_acc(t, W1);
    float *db1 = rec->in[2] ? vit_tape_grad_acc(t, rec->in[2]) : NULL;
    float *dW2 = vit_tape_grad_acc(t, W2);
    float *db2 = rec->in[4] ? vit_tape_grad_acc(t, rec->in[4]) : NULL;
    float *dx = vit_tape_grad_out(t, x, &fresh);
    if (vit_tape_status(t))
        return vit_tape_status(t);
    const uint16_t *xh = vit_tape_half(x); /* x kept in bf16: read as it is */
    int rows = vit_tape_piece_rows(n, m); /* of hidden values */
    uint16_t *h16, *du16, *dy16;
    float *du = block_scratch(t, rows, m, e, &h16, &du16, &dy16);
    if (!du)
        return vit_tape_status(t);
    for (int r0 = 0; r0 < n; r0 += rows) {
        int nr = n - r0 < rows ? n - r0 : rows;
        const float *dyr = dy + (size_t)r0 * e;
        if (dW2) { /* dy's block rounded once, for dh and dW2, db2's sums in the pass */
            vit_mixed_round_colsums(dy16, db2, dyr, nr, e);
            vit_mgemm_a16(CblasNoTrans, CblasTrans, nr, m, e, dy16, e, W2->data, e, 0, du, m);
        } else {
            vit_mgemm(CblasNoTrans, CblasTrans, nr, m, e, 1, dyr, e, W2->data, e, 0, du, m);
        }
        vit_gelu_backward_v16(du, db1, c->v16 + (size_t)r0 * m, h16, dx ? du16 : NULL, nr, m);
        if (dW2)
            vit_mgemm_a16_b16(CblasTrans, m, e, nr, h16, m, dy16, e, 1, dW2, e);
        if (dW1 && xh && dx) /* du16 made by the GELU's pass */
            vit_mgemm_a16_b16(CblasTrans, d, m, nr, xh + (size_t)r0 * d, d, du16, m, 1, dW1, m);
        else if (dW1 && xh)
            vit_mgemm_a16(CblasTrans, CblasNoTrans, d, m, nr, xh + (size_t)r0 * d, d, du, m, 1,
                          dW1, m);
        else if (dW1)
            vit_mgemm(CblasTrans, CblasNoTrans, d, m, nr, 1, x->data + (size_t)r0 * d, d, du, m,
                      1, dW1, m);
        if (dx)
            vit_mgemm_a16(CblasNoTrans, CblasTrans, nr, d, m, du16, m, W1->data, m,
                          fresh ? 0 : 1, dx + (size_t)r0 * d, d);
    }
    if (db2 && !dW2)
        vit_column_sums(db2, dy, n, e);
    return vit_tape_status(t) ? vit_tape_status(t) : vit_tape_grad_pass(t, rec->in[5], rec->out, 1);
}

static const vit_op_def mlp_def = {"vit_op_block (MLP)", back_mlp, NULL, 0};

/* The forward, block by block of rows: u = x W1 in the scratch, v16 and
 * h16 from it (vit_bias_gelu_forward_v16), y = r + b2 + h W2. */
static vit_tensor *mlp_mixed(vit_tape *t, vit_tensor *const in[6])
{
    vit_tensor *x = in[0], *W1 = in[1], *b1 = in[2], *W2 = in[3], *b2 = in[4], *r = in[5];
    int n = vit_tape_rows(x), d = W1->shape[0], m = W1->shape[1], e = W2->shape[1];
    vit_tensor *y = vit_tape_output(t, r->ndim, r->shape, 1);
    size_t bytes;
    mlp_ctx c = {NULL};
    if (!y)
        return NULL;
    if (!vit_mul_size(&bytes, (size_t)n * m, sizeof *c.v16)
        || !(c.v16 = vit_tape_alloc(t, bytes)))
        return vit_tape_error(t, VIT_ENOMEM);
    const uint16_t *xh = vit_tape_half(x); /* x kept in bf16: read as it is */
    int rows = vit_tape_piece_rows(n, m); /* of hidden values */
    uint16_t *h16, *unused;
    float *u = block_scratch(t, rows, m, e, &h16, &unused, NULL);
    if (!u)
        return NULL;
    for (int r0 = 0; r0 < n; r0 += rows) {
        int nr = n - r0 < rows ? n - r0 : rows;
        if (xh)
            vit_mgemm_a16(CblasNoTrans, CblasNoTrans, nr, m, d, xh + (size_t)r0 * d, d, W1->data,
                          m, 0, u, m);
        else
            vit_mgemm(CblasNoTrans, CblasNoTrans, nr, m, d, 1, x->data + (size_t)r0 * d, d,
                      W1->data, m, 0, u, m);
        vit_bias_gelu_forward_v16(u, b1 ? b1->data : NULL, nr, m, c.v16 + (size_t)r0 * m, h16);
        float *yr = y->data + (size_t)r0 * e;
        const float *rr = r->data + (size_t)r0 * e;
        vit_tape_rows_plus_bias(yr, rr, b2 ? b2->data : NULL, nr, e);
        vit_mgemm_a16(CblasNoTrans, CblasNoTrans, nr, e, m, h16, m, W2->data, e, 1, yr, e);
    }
    return vit_tape_record(t, &mlp_def, VIT_OK, y, 6, in, &c, sizeof c);
}

/* Whether the shapes agree (else the two public ops name the problem). */
static int mlp_shapes_ok(const vit_tensor *x, const vit_tensor *W1, const vit_tensor *b1,
                         const vit_tensor *W2, const vit_tensor *b2, const vit_tensor *r)
{
    return W1->ndim == 2 && W2->ndim == 2 && vit_tape_last_dim(x) == W1->shape[0]
        && W2->shape[0] == W1->shape[1] && (!b1 || (b1->ndim == 1 && b1->shape[0] == W1->shape[1]))
        && (!b2 || (b2->ndim == 1 && b2->shape[0] == W2->shape[1])) && r->ndim == x->ndim
        && vit_tape_last_dim(r) == W2->shape[1]
        && !memcmp(r->shape, x->shape, (size_t)(x->ndim - 1) * sizeof *x->shape);
}
#endif

vit_tensor *vit_tape_mlp_kept(vit_tape *t, vit_tensor *x, vit_tensor *W1, vit_tensor *b1,
                              vit_tensor *W2, vit_tensor *b2, vit_tensor *r)
{
#ifndef VIT_DOUBLE
    vit_tensor *in[6] = {x, W1, b1, W2, b2, r};
    if (x && W1 && W2 && r && vit_mixed_on() && vit_tape_wants_grad(t, 6, in)
        && mlp_shapes_ok(x, W1, b1, W2, b2, r)) {
        if (!vit_tape_begin(t, mlp_def.name, 2, in) || !vit_tape_begin(t, mlp_def.name, 1, in + 3)
            || !vit_tape_begin(t, mlp_def.name, 1, in + 5))
            return NULL;
        return mlp_mixed(t, in);
    }
#endif
    vit_tensor *h = vit_tape_linear_gelu_kept(t, x, W1, b1, VIT_KEEP_BF16);
    return vit_op_linear_add(t, h, W2, b2, r);
}

/*
 * Token permutations on the tape, forward beside backward:
 * vit_op_gather_tokens, out[b, i, :] = x[b, idx[i], :] (x [B, N, C],
 * idx [n], out [B, n, C]) with its scatter-add backward, and
 * vit_op_patch_merge, Swin's 2x2 merge of a token grid into
 * [B, (H/2)*(W/2), 4C] as a gather and a reshape.  The rows are copied
 * and summed by the embedding kernels (vit/embeddings.h), one item at a
 * time: an item's x is the "table" its gather reads.
 */
#include <string.h>

#include "error.h"
#include "tape_internal.h"
#include "vit/embeddings.h"

/* What the backward keeps: the index (the caller's, copied). */
typedef struct gather_ctx {
    int *idx;
    int n;
} gather_ctx;

/* dx[b, idx[i], :] += dy[b, i, :]: repeated indices sum, in index order. */
static int back_gather(vit_tape *t, const vit_op_rec *r)
{
    const gather_ctx *c = r->ctx;
    const vit_tensor *x = r->in[0];
    vit_real *dx = vit_tape_grad_acc(t, r->in[0]);
    if (!dx)
        return vit_tape_status(t);
    const int B = x->shape[0], N = x->shape[1], C = x->shape[2];
    for (int b = 0; b < B; b++) {
        int rc = vit_embedding_backward(dx + (size_t)b * N * C,
                                        r->out->grad + (size_t)b * c->n * C, c->idx,
                                        (size_t)c->n, N, C);
        if (rc != VIT_OK)
            return rc;
    }
    return VIT_OK;
}

static const vit_op_def gather_def = {"vit_op_gather_tokens", back_gather, NULL, 0};

/* The gather, named fn in its messages (vit_op_patch_merge calls it). */
static vit_tensor *gather_named(vit_tape *t, const char *fn, vit_tensor *x, const int *idx,
                                int n)
{
    if (!vit_tape_begin(t, fn, 1, &x))
        return NULL;
    if (vit_tape_check_shape(t, fn, "x", x, "[B, N, C]", 3, (int[]){-1, -1, -1}))
        return NULL;
    if (!idx || n < 1)
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "%s: %s", fn,
                                          !idx ? "idx is NULL" : "n must be at least 1"));
    const int B = x->shape[0], N = x->shape[1], C = x->shape[2];
    for (int i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= N)
            return vit_tape_error(t, vit_fail(VIT_EINVAL,
                "%s: idx[%d] = %d is not a token of x (0..%d)", fn, i, idx[i], N - 1));
    vit_tensor *y = vit_tape_output(t, 3, (int[]){B, n, C}, vit_tape_wants_grad(t, 1, &x));
    int *keep = y ? vit_tape_alloc(t, (size_t)n * sizeof *keep) : NULL;
    if (!keep)
        return NULL;
    memcpy(keep, idx, (size_t)n * sizeof *keep);
    int rc = VIT_OK;
    for (int b = 0; b < B && rc == VIT_OK; b++)
        rc = vit_embedding_forward(y->data + (size_t)b * n * C, x->data + (size_t)b * N * C, keep,
                                   (size_t)n, N, C);
    gather_ctx c = {keep, n};
    return vit_tape_record(t, &gather_def, rc, y, 1, &x, &c, sizeof c);
}

vit_tensor *vit_op_gather_tokens(vit_tape *t, vit_tensor *x, const int *idx, int n)
{
    return gather_named(t, gather_def.name, x, idx, n);
}

/* Output token (i, j) of the half grid takes, in this order, the tokens at
 * rows and columns (2i, 2j), (2i+1, 2j), (2i, 2j+1), (2i+1, 2j+1):
 * torchvision's x0, x1, x2, x3 (x[0::2, 0::2], x[1::2, 0::2],
 * x[0::2, 1::2], x[1::2, 1::2]) concatenated on the channels, which the
 * reshape of the gathered [B, 4 * N/4, C] to [B, N/4, 4C] gives. */
vit_tensor *vit_op_patch_merge(vit_tape *t, vit_tensor *x, int grid_h, int grid_w)
{
    static const char fn[] = "vit_op_patch_merge";
    if (!vit_tape_begin(t, fn, 1, &x))
        return NULL;
    if (grid_h < 2 || grid_w < 2 || grid_h % 2 || grid_w % 2 || grid_h > 1 << 15
        || grid_w > 1 << 15)
        return vit_tape_error(t, vit_fail(VIT_EINVAL,
            "%s: the grid must have even sides of at least 2 (up to 32768), got %d x %d", fn,
            grid_h, grid_w));
    const int N = grid_h * grid_w;
    if (vit_tape_check_shape(t, fn, "x", x, "[B, grid_h*grid_w, C]", 3, (int[]){-1, N, -1}))
        return NULL;
    int *idx = vit_tape_alloc(t, (size_t)N * sizeof *idx);
    if (!idx)
        return NULL;
    const int hw = grid_w / 2;
    for (int o = 0; o < N / 4; o++) {
        const int r = 2 * (o / hw), c = 2 * (o % hw);
        idx[4 * o + 0] = r * grid_w + c;
        idx[4 * o + 1] = (r + 1) * grid_w + c;
        idx[4 * o + 2] = r * grid_w + c + 1;
        idx[4 * o + 3] = (r + 1) * grid_w + c + 1;
    }
    vit_tensor *g = gather_named(t, fn, x, idx, N);
    return g ? vit_op_reshape(t, g, 3, (int[]){x->shape[0], N / 4, 4 * x->shape[2]}) : NULL;
}

/*
 * vit_op_relpos_bias: Swin's relative position bias, a learnable table
 * gathered into the per-head score bias of one M x M window, forward
 * beside backward.  Shapes (vit/tape.h): table [(2M-1)^2, H] -> bias
 * [H, T, T], T = M*M, window positions p = y*M + x row-major.  Pair
 * (i, j) reads table row (y_i - y_j + M - 1) * (2M - 1) + (x_i - x_j + M - 1)
 * (torchvision's relative_position_index), so that every pair at the same
 * offset shares one value per head.
 */
#include "error.h"
#include "tape_internal.h"

/* The table row of position pair (i, j) of an M x M window, i = yi*M + xi
 * and j = yj*M + xj; the loops below step through the pairs in order
 * (i, then j) with the coordinates as counters, not divisions. */
static int relpos_row(int M, int yi, int xi, int yj, int xj)
{
    return (yi - yj + M - 1) * (2 * M - 1) + (xi - xj + M - 1);
}

/* bias [H, T, T] = table [(2M-1)^2, H] gathered by pair. */
static void relpos_forward(vit_real *bias, const vit_real *table, int M, int H)
{
    const size_t TT = (size_t)M * M * M * M;
    size_t ij = 0; /* i * T + j */
    for (int yi = 0; yi < M; yi++)
        for (int xi = 0; xi < M; xi++)
            for (int yj = 0; yj < M; yj++)
                for (int xj = 0; xj < M; xj++, ij++) {
                    const vit_real *row = table + (size_t)relpos_row(M, yi, xi, yj, xj) * H;
                    for (int h = 0; h < H; h++) bias[h * TT + ij] = row[h];
                }
}

/* dtable [(2M-1)^2, H] += dbias [H, T, T] scattered back: each table entry
 * sums the pairs at its offset (in pair order, whatever the threads). */
static void relpos_backward(vit_real *dtable, const vit_real *dbias, int M, int H)
{
    const size_t TT = (size_t)M * M * M * M;
    size_t ij = 0;
    for (int yi = 0; yi < M; yi++)
        for (int xi = 0; xi < M; xi++)
            for (int yj = 0; yj < M; yj++)
                for (int xj = 0; xj < M; xj++, ij++) {
                    vit_real *row = dtable + (size_t)relpos_row(M, yi, xi, yj, xj) * H;
                    for (int h = 0; h < H; h++) row[h] += dbias[h * TT + ij];
                }
}

typedef struct relpos_ctx {
    int window, heads;
} relpos_ctx;

static int back_relpos(vit_tape *t, const vit_op_rec *r)
{
    const relpos_ctx *c = r->ctx;
    vit_real *dtable = vit_tape_grad_acc(t, r->in[0]);
    if (vit_tape_status(t))
        return vit_tape_status(t);
    relpos_backward(dtable, r->out->grad, c->window, c->heads);
    return VIT_OK;
}

static const vit_op_def relpos_def = {"vit_op_relpos_bias", back_relpos, NULL, 0};

vit_tensor *vit_op_relpos_bias(vit_tape *t, vit_tensor *table, int window)
{
    static const char fn[] = "vit_op_relpos_bias";
    if (!vit_tape_begin(t, fn, 1, &table))
        return NULL;
    if (window < 1 || window > 256)
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "%s: window must be 1..256, got %d", fn,
                                          window));
    const int rows = (2 * window - 1) * (2 * window - 1), T = window * window;
    if (vit_tape_check_shape(t, fn, "table", table, "[(2*window-1)^2, heads]", 2,
                             (int[]){rows, -1}))
        return NULL;
    const int H = table->shape[1];
    vit_tensor *y = vit_tape_output(t, 3, (int[]){H, T, T}, vit_tape_wants_grad(t, 1, &table));
    if (!y)
        return NULL;
    relpos_forward(y->data, table->data, window, H);
    relpos_ctx c = {window, H};
    return vit_tape_record(t, &relpos_def, VIT_OK, y, 1, &table, &c, sizeof c);
}

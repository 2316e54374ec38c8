/*
 * vit_op_relpos_bias: Swin's relative position bias, a learnable table
 * gathered into the per-head score bias of one window of Mh rows by Mw
 * columns, forward beside backward.  Shapes (vit/tape.h): table
 * [(2Mh-1)*(2Mw-1), H] -> bias [H, T, T], T = Mh*Mw, window positions
 * p = y*Mw + x row-major.  Pair (i, j) reads table row
 * (y_i - y_j + Mh - 1) * (2Mw - 1) + (x_i - x_j + Mw - 1) (torchvision's
 * relative_position_index for window_size [Mh, Mw]), so that every pair at
 * the same offset shares one value per head.
 */
#include <stdio.h>

#include "error.h"
#include "tape_internal.h"

/* The table row of position pair (i, j) of an Mh x Mw window,
 * i = yi*Mw + xi and j = yj*Mw + xj; the loops below step through the
 * pairs in order (i, then j) with the coordinates as counters, not
 * divisions. */
static int relpos_row(int Mh, int Mw, int yi, int xi, int yj, int xj)
{
    return (yi - yj + Mh - 1) * (2 * Mw - 1) + (xi - xj + Mw - 1);
}

/* bias [H, T, T] = table [(2Mh-1)*(2Mw-1), H] gathered by pair. */
static void relpos_forward(vit_real *bias, const vit_real *table, int Mh, int Mw, int H)
{
    const size_t T = (size_t)Mh * Mw, TT = T * T;
    size_t ij = 0; /* i * T + j */
    for (int yi = 0; yi < Mh; yi++)
        for (int xi = 0; xi < Mw; xi++)
            for (int yj = 0; yj < Mh; yj++)
                for (int xj = 0; xj < Mw; xj++, ij++) {
                    const vit_real *row =
                        table + (size_t)relpos_row(Mh, Mw, yi, xi, yj, xj) * H;
                    for (int h = 0; h < H; h++) bias[h * TT + ij] = row[h];
                }
}

/* dtable [(2Mh-1)*(2Mw-1), H] += dbias [H, T, T] scattered back: each
 * table entry sums the pairs at its offset (in pair order, whatever the
 * threads). */
static void relpos_backward(vit_real *dtable, const vit_real *dbias, int Mh, int Mw, int H)
{
    const size_t T = (size_t)Mh * Mw, TT = T * T;
    size_t ij = 0;
    for (int yi = 0; yi < Mh; yi++)
        for (int xi = 0; xi < Mw; xi++)
            for (int yj = 0; yj < Mh; yj++)
                for (int xj = 0; xj < Mw; xj++, ij++) {
                    vit_real *row = dtable + (size_t)relpos_row(Mh, Mw, yi, xi, yj, xj) * H;
                    for (int h = 0; h < H; h++) row[h] += dbias[h * TT + ij];
                }
}

typedef struct relpos_ctx {
    int window_h, window_w, heads;
} relpos_ctx;

static int back_relpos(vit_tape *t, const vit_op_rec *r)
{
    const relpos_ctx *c = r->ctx;
    vit_real *dtable = vit_tape_grad_acc(t, r->in[0]);
    if (vit_tape_status(t))
        return vit_tape_status(t);
    relpos_backward(dtable, r->out->grad, c->window_h, c->window_w, c->heads);
    return VIT_OK;
}

static const vit_op_def relpos_def = {"vit_op_relpos_bias", back_relpos, NULL, 0};

vit_tensor *vit_op_relpos_bias(vit_tape *t, vit_tensor *table, int window_h, int window_w)
{
    static const char fn[] = "vit_op_relpos_bias";
    if (!vit_tape_begin(t, fn, 1, &table))
        return NULL;
    if (window_h < 1 || window_h > 256)
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "%s: window_h must be 1..256, got %d", fn,
                                          window_h));
    if (window_w < 1 || window_w > 256)
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "%s: window_w must be 1..256, got %d", fn,
                                          window_w));
    const int rows = (2 * window_h - 1) * (2 * window_w - 1), T = window_h * window_w;
    char want[96];
    snprintf(want, sizeof want, "[(2*window_h-1)*(2*window_w-1), heads] (window %d x %d)",
             window_h, window_w);
    if (vit_tape_check_shape(t, fn, "table", table, want, 2, (int[]){rows, -1}))
        return NULL;
    const int H = table->shape[1];
    vit_tensor *y = vit_tape_output(t, 3, (int[]){H, T, T}, vit_tape_wants_grad(t, 1, &table));
    if (!y)
        return NULL;
    relpos_forward(y->data, table->data, window_h, window_w, H);
    relpos_ctx c = {window_h, window_w, H};
    return vit_tape_record(t, &relpos_def, VIT_OK, y, 1, &table, &c, sizeof c);
}

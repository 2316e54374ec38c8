/* From images to tokens: patch embedding (im2col + GEMM), class-token
 * prepend and learned position embeddings, and from ids to tokens: the
 * embedding table lookup, forward and backward. */
#include "vit/embeddings.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "error.h"
#include "mixed.h"

/* ---- Patch embedding ------------------------------------------------- */

/* Validates a shape, recording a message under fn's name.  Besides positive
 * sizes and divisibility, the GEMM's int arguments must not overflow:
 * B*N rows and P*P*C columns. */
static int check_shape(const char *fn, const vit_patch_shape *s)
{
    TRY(vit_check_ptr(fn, "shape", s));
    TRY(vit_check_dim(fn, "batch", s->batch));
    TRY(vit_check_dim(fn, "height", s->height));
    TRY(vit_check_dim(fn, "width", s->width));
    TRY(vit_check_dim(fn, "channels", s->channels));
    TRY(vit_check_dim(fn, "patch", s->patch));
    TRY(vit_check_dim(fn, "dim", s->dim));
    const int P = s->patch, S = s->stride ? s->stride : P, Z = s->pad;
    if (S < 1 || S > P)
        return vit_fail(VIT_EINVAL, "%s: stride %d must be in 1..patch (%d); a larger one "
                        "would skip pixels", fn, s->stride, P);
    if (Z < 0 || Z >= P)
        return vit_fail(VIT_EINVAL, "%s: padding %d must be in 0..patch-1 (%d)", fn, Z, P - 1);
    if (S == P && Z == 0) {
        if (s->height % P != 0 || s->width % P != 0)
            return vit_fail(VIT_EINVAL, "%s: image %dx%d is not a multiple of patch %d", fn,
                            s->height, s->width, P);
    } else {
        long long eh = (long long)s->height + 2LL * Z - P, ew = (long long)s->width + 2LL * Z - P;
        if (eh < 0 || ew < 0)
            return vit_fail(VIT_EINVAL, "%s: patch %d is larger than the padded %lldx%lld image",
                            fn, P, eh + P, ew + P);
        if (eh % S != 0 || ew % S != 0)
            return vit_fail(VIT_EINVAL, "%s: patch %d with stride %d and padding %d does not "
                            "tile the %dx%d image exactly ((size + 2*padding - patch) must be "
                            "a multiple of the stride)", fn, P, S, Z, s->height, s->width);
    }
    long long n = (long long)((s->height + 2 * Z - P) / S + 1) * ((s->width + 2 * Z - P) / S + 1);
    long long k = (long long)s->patch * s->patch * s->channels;
    if (n * s->batch > INT_MAX || k > INT_MAX ||
        (long long)s->height * s->width * s->channels * s->batch > INT_MAX)
        return vit_fail(VIT_EINVAL, "%s: shape too large", fn);
    return VIT_OK;
}

/* The grid of a validated shape. */
static void grid_of(const vit_patch_shape *s, int *gh, int *gw)
{
    const int P = s->patch, S = s->stride ? s->stride : P, Z = s->pad;
    *gh = (s->height + 2 * Z - P) / S + 1;
    *gw = (s->width + 2 * Z - P) / S + 1;
}

/* Whether patches overlap or pad: the general (im2col / col2im) path. */
static int general(const vit_patch_shape *s)
{
    return (s->stride && s->stride != s->patch) || s->pad != 0;
}

int vit_patch_count(const vit_patch_shape *s)
{
    /* Validation records a message even though this function only returns
     * 0; the caller asked about a shape, so that explanation is useful. */
    if (check_shape("vit_patch_count", s) != VIT_OK)
        return 0;
    int gh, gw;
    grid_of(s, &gh, &gw);
    return gh * gw;
}

int vit_patch_grid(const vit_patch_shape *s, int *grid_h, int *grid_w)
{
    static const char fn[] = "vit_patch_grid";
    TRY(vit_check_ptr(fn, "grid_h", grid_h));
    TRY(vit_check_ptr(fn, "grid_w", grid_w));
    *grid_h = *grid_w = 0;
    TRY(check_shape(fn, s));
    grid_of(s, grid_h, grid_w);
    return VIT_OK;
}

/* General im2col: patch (gy, gx) of image b is row (b*gh + gy)*gw + gx of
 * cols; its (py, px, c) entry is pixel (gy*S - Z + py, gx*S - Z + px, c),
 * or 0 in the padding.  Each patch row is one clipped memcpy. */
static void im2col_general(const vit_patch_shape *s, vit_real *cols, const vit_real *img)
{
    const int P = s->patch, C = s->channels, S = s->stride ? s->stride : P, Z = s->pad;
    int gh, gw;
    grid_of(s, &gh, &gw);
    const size_t img_row = (size_t)s->width * C, pc = (size_t)P * C;
    vit_real *dst = cols;
    for (int bi = 0; bi < s->batch; bi++) {
        const vit_real *im = img + (size_t)bi * s->height * img_row;
        for (int gy = 0; gy < gh; gy++)
            for (int gx = 0; gx < gw; gx++)
                for (int py = 0; py < P; py++, dst += pc) {
                    const int y = gy * S - Z + py, x0 = gx * S - Z;
                    const int lo = x0 < 0 ? -x0 : 0;
                    const int hi = x0 + P > s->width ? s->width - x0 : P; /* px < hi */
                    if (y < 0 || y >= s->height || hi <= lo) {
                        memset(dst, 0, pc * sizeof *dst);
                        continue;
                    }
                    memset(dst, 0, (size_t)lo * C * sizeof *dst);
                    memcpy(dst + (size_t)lo * C, im + (size_t)y * img_row + (size_t)(x0 + lo) * C,
                           (size_t)(hi - lo) * C * sizeof *dst);
                    memset(dst + (size_t)hi * C, 0, (size_t)(P - hi) * C * sizeof *dst);
                }
    }
}

/* General col2im: dimg += the patch rows of dcols [B*N, P*P*C] added back
 * to the pixels they were copied from (padding entries dropped), patches
 * in row order, so a pixel covered by several patches sums them in a fixed
 * order. */
static void col2im_general(const vit_patch_shape *s, vit_real *dimg, const vit_real *dcols)
{
    const int P = s->patch, C = s->channels, S = s->stride ? s->stride : P, Z = s->pad;
    int gh, gw;
    grid_of(s, &gh, &gw);
    const size_t img_row = (size_t)s->width * C, pc = (size_t)P * C;
    const vit_real *src = dcols;
    for (int bi = 0; bi < s->batch; bi++) {
        vit_real *im = dimg + (size_t)bi * s->height * img_row;
        for (int gy = 0; gy < gh; gy++)
            for (int gx = 0; gx < gw; gx++)
                for (int py = 0; py < P; py++, src += pc) {
                    const int y = gy * S - Z + py, x0 = gx * S - Z;
                    const int lo = x0 < 0 ? -x0 : 0;
                    const int hi = x0 + P > s->width ? s->width - x0 : P;
                    if (y < 0 || y >= s->height || hi <= lo) continue;
                    vit_real *row = im + (size_t)y * img_row + (size_t)(x0 + lo) * C;
                    const vit_real *sr = src + (size_t)lo * C;
                    for (int i = 0; i < (hi - lo) * C; i++) row[i] += sr[i];
                }
    }
}

/* img [B, H, W, C] -> cols [B*N, P*P*C], y [B, N, D] = cols W + b
 *
 * Row r = b*N + gy*(W/P) + gx of cols is patch (gy, gx) of image b.  For a
 * fixed patch row py, the P*C values (px, c) are contiguous in both the
 * image and the patch vector, so im2col is one memcpy per (patch, py). */
int vit_patch_embed_forward(const vit_patch_shape *s, vit_real *y, vit_real *cols,
                            const vit_real *img, const vit_real *W, const vit_real *b)
{
    static const char fn[] = "vit_patch_embed_forward";
    TRY(check_shape(fn, s));
    TRY(vit_check_ptr(fn, "y", y));
    TRY(vit_check_ptr(fn, "cols", cols));
    TRY(vit_check_ptr(fn, "img", img));
    TRY(vit_check_ptr(fn, "W", W));

    const int P = s->patch, C = s->channels, D = s->dim;
    int gh, gw;
    grid_of(s, &gh, &gw);
    const int rows = s->batch * gh * gw, K = P * P * C;
    const size_t pc = (size_t)P * C, img_row = (size_t)s->width * C;

    vit_real *dst = cols;
    if (general(s))
        im2col_general(s, cols, img);
    else
    for (int bi = 0; bi < s->batch; bi++) {
        const vit_real *im = img + (size_t)bi * s->height * img_row;
        for (int gy = 0; gy < gh; gy++)
            for (int gx = 0; gx < gw; gx++)
                for (int py = 0; py < P; py++) {
                    const vit_real *src = im + (size_t)(gy * P + py) * img_row + (size_t)gx * pc;
                    memcpy(dst, src, pc * sizeof *dst);
                    dst += pc;
                }
    }

    vit_real beta = 0;
    if (b) {
        for (int r = 0; r < rows; r++)
            memcpy(y + (size_t)r * D, b, (size_t)D * sizeof *y);
        beta = 1;
    }
    if (vit_mixed_on()) /* bf16 inputs (mixed.h) */
        vit_mgemm(CblasNoTrans, CblasNoTrans, rows, D, K, 1, cols, K, W, D, beta, y, D);
    else
        vit_gemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, K,
                 1, cols, K, W, D, beta, y, D);
    return VIT_OK;
}

/* dy [B, N, D]; cols [B*N, P*P*C], W [P*P*C, D]
 *   -> dW [P*P*C, D] +=, db [D] +=, dimg [B, H, W, C] +=
 *
 * dimg is col2im(dy W^T): one product into a [B*N, P*P*C] scratch, then
 * each patch row added back to the pixels it was copied from.  (Per image
 * row, the patches of a grid row are a [gw, P*C] block of the image, so
 * without overlap the product could write into the image directly; but
 * that is B * gh * P products of a few rows each, and their calls cost
 * more than the scratch: the image gets a gradient only behind a
 * convolutional stem, whose feature map is large.) */
int vit_patch_embed_backward(const vit_patch_shape *s, vit_real *dimg, vit_real *dW,
                             vit_real *db, const vit_real *dy, const vit_real *cols,
                             const vit_real *W)
{
    static const char fn[] = "vit_patch_embed_backward";
    TRY(check_shape(fn, s));
    TRY(vit_check_ptr(fn, "dy", dy));
    if (dW)
        TRY(vit_check_ptr(fn, "cols", cols));
    if (dimg)
        TRY(vit_check_ptr(fn, "W", W));

    const int P = s->patch, C = s->channels, D = s->dim;
    int gh, gw;
    grid_of(s, &gh, &gw);
    const int rows = s->batch * gh * gw, K = P * P * C;
    vit_real *dcols = NULL;
    if (dimg) { /* allocated first: on failure nothing is touched */
        size_t n = (size_t)rows * (size_t)K;
        if (!(dcols = malloc(n * sizeof *dcols)))
            return vit_fail(VIT_ENOMEM, "%s: cannot allocate %zu reals for col2im", fn, n);
    }

    if (dW && vit_mixed_on()) /* dW[K, D] += cols[rows, K]^T dy[rows, D] */
        vit_mgemm(CblasTrans, CblasNoTrans, K, D, rows, 1, cols, K, dy, D, 1, dW, D);
    else if (dW)
        vit_gemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, D, rows,
                 1, cols, K, dy, D, 1, dW, D);
    if (db)
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < D; j++)
                db[j] += dy[(size_t)r * D + j];
    if (dcols) { /* dcols[rows, K] = dy[rows, D] W[K, D]^T, then col2im */
        if (vit_mixed_on())
            vit_mgemm(CblasNoTrans, CblasTrans, rows, K, D, 1, dy, D, W, D, 0, dcols, K);
        else
            vit_gemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, K, D, 1, dy, D, W, D, 0,
                     dcols, K);
        col2im_general(s, dimg, dcols);
        free(dcols);
    }
    return VIT_OK;
}

/* ---- Class token ----------------------------------------------------- */

static int check_bnd(const char *fn, int batch, int n, int d)
{
    TRY(vit_check_dim(fn, "batch", batch));
    TRY(vit_check_dim(fn, "n", n));
    TRY(vit_check_dim(fn, "d", d));
    return VIT_OK;
}

/* x [B, N, D], cls [D] -> y [B, N+1, D] */
int vit_cls_prepend_forward(vit_real *y, const vit_real *x, const vit_real *cls,
                            int batch, int n, int d)
{
    static const char fn[] = "vit_cls_prepend_forward";
    TRY(vit_check_ptr(fn, "y", y));
    TRY(vit_check_ptr(fn, "x", x));
    TRY(vit_check_ptr(fn, "cls", cls));
    TRY(check_bnd(fn, batch, n, d));
    if (y == x)
        return vit_fail(VIT_EINVAL, "%s: y must not alias x", fn);
    const size_t tok = (size_t)d * sizeof *y;
    for (int b = 0; b < batch; b++) {
        vit_real *yb = y + (size_t)b * (n + 1) * d;
        memcpy(yb, cls, tok);
        memcpy(yb + d, x + (size_t)b * n * d, (size_t)n * tok);
    }
    return VIT_OK;
}

/* dy [B, N+1, D] -> dx [B, N, D] +=, dcls [D] += */
int vit_cls_prepend_backward(vit_real *dx, vit_real *dcls, const vit_real *dy,
                             int batch, int n, int d)
{
    static const char fn[] = "vit_cls_prepend_backward";
    TRY(vit_check_ptr(fn, "dy", dy));
    TRY(check_bnd(fn, batch, n, d));
    for (int b = 0; b < batch; b++) {
        const vit_real *dyb = dy + (size_t)b * (n + 1) * d;
        if (dcls)
            for (int j = 0; j < d; j++)
                dcls[j] += dyb[j];
        if (dx) {
            vit_real *dxb = dx + (size_t)b * n * d;
            for (size_t i = 0; i < (size_t)n * d; i++)
                dxb[i] += dyb[d + i];
        }
    }
    return VIT_OK;
}

/* ---- Position embedding ---------------------------------------------- */

/* x [B, T, D], pos [T, D] -> y [B, T, D] */
int vit_pos_add_forward(vit_real *y, const vit_real *x, const vit_real *pos,
                        int batch, int t, int d)
{
    static const char fn[] = "vit_pos_add_forward";
    TRY(vit_check_ptr(fn, "y", y));
    TRY(vit_check_ptr(fn, "x", x));
    TRY(vit_check_ptr(fn, "pos", pos));
    TRY(check_bnd(fn, batch, t, d));
    const size_t td = (size_t)t * d;
    for (int b = 0; b < batch; b++)
        for (size_t i = 0; i < td; i++)
            y[b * td + i] = x[b * td + i] + pos[i];
    return VIT_OK;
}

/* dy [B, T, D] -> dx [B, T, D] +=, dpos [T, D] += */
int vit_pos_add_backward(vit_real *dx, vit_real *dpos, const vit_real *dy,
                         int batch, int t, int d)
{
    static const char fn[] = "vit_pos_add_backward";
    TRY(vit_check_ptr(fn, "dy", dy));
    TRY(check_bnd(fn, batch, t, d));
    const size_t td = (size_t)t * d;
    for (int b = 0; b < batch; b++)
        for (size_t i = 0; i < td; i++) {
            vit_real g = dy[b * td + i];
            if (dx)
                dx[b * td + i] += g;
            if (dpos)
                dpos[i] += g;
        }
    return VIT_OK;
}

/* ---- Embedding lookup ------------------------------------------------ */

/* The checks both directions share: sizes, then every id, before anything
 * is written (the backward must not half-accumulate into dtable). */
static int check_lookup(const char *fn, const int *ids, size_t n, int vocab, int dim)
{
    TRY(vit_check_ptr(fn, "ids", ids));
    if (n == 0)
        return vit_fail(VIT_EINVAL, "%s: n must be positive, got 0", fn);
    TRY(vit_check_dim(fn, "vocab", vocab));
    TRY(vit_check_dim(fn, "dim", dim));
    size_t total;
    if (!vit_mul_size(&total, n, (size_t)dim))
        return vit_fail(VIT_ENOMEM, "%s: n = %zu times dim = %d overflows", fn, n, dim);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return vit_fail(VIT_EINVAL, "%s: ids[%zu] = %d is outside 0 .. vocab-1 = %d", fn, i,
                            ids[i], vocab - 1);
    return VIT_OK;
}

/* table [vocab, dim], ids [n] -> y [n, dim] */
int vit_embedding_forward(vit_real *y, const vit_real *table, const int *ids, size_t n,
                          int vocab, int dim)
{
    static const char fn[] = "vit_embedding_forward";
    TRY(vit_check_ptr(fn, "y", y));
    TRY(vit_check_ptr(fn, "table", table));
    TRY(check_lookup(fn, ids, n, vocab, dim));
    const size_t row = (size_t)dim * sizeof *y;
    for (size_t i = 0; i < n; i++)
        memcpy(y + i * dim, table + (size_t)ids[i] * dim, row);
    return VIT_OK;
}

/* dy [n, dim], ids [n] -> dtable [vocab, dim] += */
int vit_embedding_backward(vit_real *dtable, const vit_real *dy, const int *ids, size_t n,
                           int vocab, int dim)
{
    static const char fn[] = "vit_embedding_backward";
    TRY(vit_check_ptr(fn, "dy", dy));
    TRY(check_lookup(fn, ids, n, vocab, dim));
    if (!dtable)
        return VIT_OK;
    for (size_t i = 0; i < n; i++) {
        vit_real *dst = dtable + (size_t)ids[i] * dim;
        const vit_real *src = dy + i * dim;
        for (int j = 0; j < dim; j++)
            dst[j] += src[j];
    }
    return VIT_OK;
}

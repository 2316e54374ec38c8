/* Mean over the real (unpadded) tokens of each item: forward and backward. */
#include "vit/pool.h"

#include <string.h>

#include "error.h"


static int check_btd(const char *fn, int B, int T, int D)
{
    TRY(vit_check_dim(fn, "B", B));
    TRY(vit_check_dim(fn, "T", T));
    TRY(vit_check_dim(fn, "D", D));
    size_t bt, btd;
    if (!vit_mul_size(&bt, (size_t)B, (size_t)T) || !vit_mul_size(&btd, bt, (size_t)D))
        return vit_fail(VIT_ENOMEM, "%s: B*T*D = %d*%d*%d overflows", fn, B, T, D);
    return VIT_OK;
}

/* Real tokens of item b: key_valid[b, :] (NULL = all real). */
static int count_valid(const unsigned char *key_valid, int b, int T)
{
    if (!key_valid)
        return T;
    const unsigned char *kv = key_valid + (size_t)b * T;
    int n = 0;
    for (int t = 0; t < T; t++)
        n += kv[t] != 0;
    return n;
}

static int is_valid(const unsigned char *key_valid, int b, int T, int t)
{
    return !key_valid || key_valid[(size_t)b * T + t] != 0;
}

/* x [B, T, D], key_valid [B, T] -> y [B, D], count [B] */
int vit_masked_mean_forward(vit_real *y, vit_real *count, const vit_real *x,
                            const unsigned char *key_valid, int B, int T, int D)
{
    static const char fn[] = "vit_masked_mean_forward";
    TRY(vit_check_ptr(fn, "y", y));
    TRY(vit_check_ptr(fn, "x", x));
    TRY(check_btd(fn, B, T, D));
    for (int b = 0; b < B; b++) {
        int n = count_valid(key_valid, b, T);
        if (count)
            count[b] = (vit_real)n;
        vit_real *yb = y + (size_t)b * D;
        memset(yb, 0, (size_t)D * sizeof *yb);
        if (n == 0) /* all padding: no mean, y stays 0 */
            continue;
        /* Sum, then one multiply by 1/n: a single rounding for the scale. */
        for (int t = 0; t < T; t++) {
            if (!is_valid(key_valid, b, T, t))
                continue;
            const vit_real *xt = x + ((size_t)b * T + t) * D;
            for (int j = 0; j < D; j++)
                yb[j] += xt[j];
        }
        const vit_real inv = (vit_real)1 / (vit_real)n;
        for (int j = 0; j < D; j++)
            yb[j] *= inv;
    }
    return VIT_OK;
}

/* dy [B, D], key_valid [B, T] -> dx [B, T, D] += */
int vit_masked_mean_backward(vit_real *dx, const vit_real *dy, const unsigned char *key_valid,
                             int B, int T, int D)
{
    static const char fn[] = "vit_masked_mean_backward";
    TRY(vit_check_ptr(fn, "dy", dy));
    TRY(check_btd(fn, B, T, D));
    if (!dx)
        return VIT_OK;
    for (int b = 0; b < B; b++) {
        int n = count_valid(key_valid, b, T);
        if (n == 0) /* all padding: y was the constant 0 */
            continue;
        const vit_real inv = (vit_real)1 / (vit_real)n;
        const vit_real *dyb = dy + (size_t)b * D;
        for (int t = 0; t < T; t++) {
            if (!is_valid(key_valid, b, T, t))
                continue;
            vit_real *dxt = dx + ((size_t)b * T + t) * D;
            for (int j = 0; j < D; j++)
                dxt[j] += dyb[j] * inv;
        }
    }
    return VIT_OK;
}

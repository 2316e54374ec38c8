/*
 * Boolean "allowed" masks for vit_attn_mask: causal, no-self (locality
 * self-attention), Swin windows (plain and shifted), and counting.  See include/vit/attention.h.
 */
#include "vit/attention.h"

#include "error.h"

/* allowed[n_q, n_k] = (j <= i). */
int vit_mask_causal(unsigned char *allowed, int n_q, int n_k)
{
    static const char fn[] = "vit_mask_causal";
    int rc;
    if ((rc = vit_check_ptr(fn, "allowed", allowed)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "n_q", n_q)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "n_k", n_k)) != VIT_OK) return rc;
    size_t n;
    if (!vit_mul_size(&n, (size_t)n_q, (size_t)n_k)) return VIT_ENOMEM;
    for (int i = 0; i < n_q; i++)
        for (int j = 0; j < n_k; j++)
            allowed[(size_t)i * n_k + j] = j <= i;
    return VIT_OK;
}

/* allowed[n_q, n_k] = (i != j): locality self-attention's self-mask. */
int vit_mask_no_self(unsigned char *allowed, int n_q, int n_k)
{
    static const char fn[] = "vit_mask_no_self";
    int rc;
    if ((rc = vit_check_ptr(fn, "allowed", allowed)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "n_q", n_q)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "n_k", n_k)) != VIT_OK) return rc;
    if (n_k == 1)
        return vit_fail(VIT_EINVAL, "%s: with n_k = 1 query 0 would attend no key", fn);
    size_t n;
    if (!vit_mul_size(&n, (size_t)n_q, (size_t)n_k)) return VIT_ENOMEM;
    for (int i = 0; i < n_q; i++)
        for (int j = 0; j < n_k; j++)
            allowed[(size_t)i * n_k + j] = i != j;
    return VIT_OK;
}

/* Where a token of one axis lands in Swin's shifted frame, given that
 * axis's own shift.  Swin rolls the feature map by -shift, so the token at position r sits at
 * (r - shift) mod len; windows are then cut every M positions.  Its region
 * mask labels the shifted positions [0, len-M), [len-M, len-shift),
 * [len-shift, len), M the window's side along this axis: the last window
 * of a shifted axis holds tokens from both
 * ends of the original axis, and the labels keep those two groups apart.
 * Without a shift every position is in region 0. */
typedef struct {
    int window, region;
} axis_pos;

static axis_pos shifted_axis(int r, int len, int M, int shift)
{
    int s = (r - shift + len) % len;
    axis_pos p;
    p.window = s / M;
    p.region = shift == 0 ? 0 : (s < len - M ? 0 : s < len - shift ? 1 : 2);
    return p;
}

/* allowed[N, N], N = grid_h*grid_w, tokens numbered row by row in the
 * ORIGINAL (unshifted) grid: 1 where two tokens share the shifted window of
 * Mh x Mw and the region along both axes (rows shifted by shift_h,
 * columns by shift_w). */
int vit_mask_window(unsigned char *allowed, int grid_h, int grid_w, int Mh, int Mw,
                    int shift_h, int shift_w)
{
    static const char fn[] = "vit_mask_window";
    int rc;
    if ((rc = vit_check_ptr(fn, "allowed", allowed)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "grid_h", grid_h)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "grid_w", grid_w)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "Mh", Mh)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "Mw", Mw)) != VIT_OK) return rc;
    if (grid_h % Mh != 0)
        return vit_fail(VIT_EINVAL, "%s: grid_h %d (grid %d x %d) is not a multiple of the "
                        "window's Mh = %d (window %d x %d)", fn, grid_h, grid_h, grid_w, Mh, Mh,
                        Mw);
    if (grid_w % Mw != 0)
        return vit_fail(VIT_EINVAL, "%s: grid_w %d (grid %d x %d) is not a multiple of the "
                        "window's Mw = %d (window %d x %d)", fn, grid_w, grid_h, grid_w, Mw, Mh,
                        Mw);
    if (shift_h < 0 || shift_h >= Mh)
        return vit_fail(VIT_EINVAL, "%s: shift_h must be in [0, Mh = %d), got %d", fn, Mh,
                        shift_h);
    if (shift_w < 0 || shift_w >= Mw)
        return vit_fail(VIT_EINVAL, "%s: shift_w must be in [0, Mw = %d), got %d", fn, Mw,
                        shift_w);
    size_t n, nn;
    if (!vit_mul_size(&n, (size_t)grid_h, (size_t)grid_w) || !vit_mul_size(&nn, n, n))
        return VIT_ENOMEM;

    for (size_t t = 0; t < n; t++) {
        axis_pos ty = shifted_axis((int)(t / (size_t)grid_w), grid_h, Mh, shift_h);
        axis_pos tx = shifted_axis((int)(t % (size_t)grid_w), grid_w, Mw, shift_w);
        for (size_t u = 0; u < n; u++) {
            axis_pos uy = shifted_axis((int)(u / (size_t)grid_w), grid_h, Mh, shift_h);
            axis_pos ux = shifted_axis((int)(u % (size_t)grid_w), grid_w, Mw, shift_w);
            allowed[t * n + u] = ty.window == uy.window && tx.window == ux.window &&
                                 ty.region == uy.region && tx.region == ux.region;
        }
    }
    return VIT_OK;
}

size_t vit_mask_count(const unsigned char *allowed, int n_q, int n_k)
{
    static const char fn[] = "vit_mask_count";
    if (vit_check_ptr(fn, "allowed", allowed) != VIT_OK) return 0;
    if (vit_check_dim(fn, "n_q", n_q) != VIT_OK) return 0;
    if (vit_check_dim(fn, "n_k", n_k) != VIT_OK) return 0;
    size_t n, count = 0;
    if (!vit_mul_size(&n, (size_t)n_q, (size_t)n_k)) return 0;
    for (size_t i = 0; i < n; i++) count += allowed[i] != 0;
    return count;
}

/*
 * examples/article.c - the article's four experiments on the public vit API;
 * see article.h for what each returns.
 */
#include "article.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vit/attention.h"

static char article_msg[512];

const char *article_error(void) { return article_msg; }

/* Records "fn: message" and returns code. */
static int fail(int code, const char *fn, const char *fmt, ...)
{
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(article_msg, sizeof article_msg, "%s: %s", fn, what);
    return code;
}

/* A library call failed: keep its message (it names the library function). */
static int lib_fail(int code, const char *fn)
{
    return fail(code, fn, "%s", vit_last_error());
}

/* ---- Shared pieces --------------------------------------------------------- */

/* r [n, n]: Gaussian columns, each made orthogonal to the ones before it and
 * normalized.  Modified Gram-Schmidt subtracts the projections one at a
 * time from the running vector, which loses less orthogonality than the
 * classical form; for 16 x 16 either is far below float64 rounding. */
int article_orthogonal(vit_rng *rng, int n, vit_real *r)
{
    static const char fn[] = "article_orthogonal";
    if (!rng || !r) return fail(VIT_EINVAL, fn, "rng and r must not be NULL");
    if (n < 1) return fail(VIT_EINVAL, fn, "n must be positive, got %d", n);
    double *a = malloc((size_t)n * n * sizeof *a);
    if (!a) return fail(VIT_ENOMEM, fn, "out of memory");
    for (int i = 0; i < n * n; i++) a[i] = vit_rng_normal(rng);
    for (int c = 0; c < n; c++) {
        for (int p = 0; p < c; p++) {
            double dot = 0.0;
            for (int i = 0; i < n; i++) dot += a[i * n + p] * a[i * n + c];
            for (int i = 0; i < n; i++) a[i * n + c] -= dot * a[i * n + p];
        }
        double norm = 0.0;
        for (int i = 0; i < n; i++) norm += a[i * n + c] * a[i * n + c];
        norm = sqrt(norm);
        if (!(norm > 1e-12)) {
            free(a);
            return fail(VIT_EINVAL, fn, "column %d is degenerate", c);
        }
        for (int i = 0; i < n; i++) a[i * n + c] /= norm;
    }
    for (int i = 0; i < n * n; i++) r[i] = (vit_real)a[i];
    free(a);
    return VIT_OK;
}

void article_squares_image(vit_rng *rng, double noise, vit_real *img)
{
    for (int y = 0; y < ARTICLE_IMAGE; y++)
        for (int x = 0; x < ARTICLE_IMAGE; x++) {
            int in1 = y >= 2 && y < 14 && x >= 2 && x < 14;
            int in2 = y >= 18 && y < 30 && x >= 18 && x < 30;
            img[y * ARTICLE_IMAGE + x] = (vit_real)((in1 || in2) + noise * vit_rng_normal(rng));
        }
}

void article_patches(const vit_real *img, vit_real *x)
{
    const int P = ARTICLE_PATCH;
    for (int t = 0; t < ARTICLE_TOKENS; t++) {
        int pr = t / ARTICLE_GRID, pc = t % ARTICLE_GRID;
        vit_real *row = x + t * ARTICLE_DIM;
        double mean = 0.0;
        for (int a = 0; a < P; a++)
            for (int b = 0; b < P; b++) {
                row[a * P + b] = img[(pr * P + a) * ARTICLE_IMAGE + pc * P + b];
                mean += row[a * P + b];
            }
        mean /= ARTICLE_DIM;
        for (int i = 0; i < ARTICLE_DIM; i++) row[i] = (vit_real)(row[i] - mean);
    }
}

/* Fills w [n*n] with N(0, 1) * s. */
static void gaussian(vit_rng *rng, vit_real *w, size_t n, double s)
{
    for (size_t i = 0; i < n; i++) w[i] = (vit_real)(s * vit_rng_normal(rng));
}

/* Self-attention layer over the 64 tokens, no biases, default scale. */
static vit_mha tokens_layer(int heads)
{
    vit_mha m;
    memset(&m, 0, sizeof m);
    m.batch = 1;
    m.n_q = m.n_k = ARTICLE_TOKENS;
    m.d_model = ARTICLE_DIM;
    m.heads = heads;
    return m;
}

/* ---- 1. Squares -------------------------------------------------------------- */

int article_squares_run(uint64_t seed, double noise, article_squares *out)
{
    static const char fn[] = "article_squares_run";
    const int n = ARTICLE_TOKENS, d = ARTICLE_DIM;
    if (!out) return fail(VIT_EINVAL, fn, "out must not be NULL");
    memset(out, 0, sizeof *out);

    vit_rng rng;
    vit_rng_seed(&rng, seed);
    vit_real img[ARTICLE_IMAGE * ARTICLE_IMAGE], x[ARTICLE_TOKENS * ARTICLE_DIM];
    vit_real y[ARTICLE_TOKENS * ARTICLE_DIM], r[ARTICLE_DIM * ARTICLE_DIM];
    article_squares_image(&rng, noise, img);
    article_patches(img, x);
    int rc = article_orthogonal(&rng, d, r);
    if (rc) return rc;

    vit_mha m = tokens_layer(1);
    vit_real *params = malloc(vit_mha_param_count(&m) * sizeof *params);
    vit_real *cache = malloc(vit_mha_cache_size(&m) * sizeof *cache);
    if (!params || !cache) {
        rc = fail(VIT_ENOMEM, fn, "out of memory");
        goto done;
    }
    vit_mha_views w;
    if ((rc = vit_mha_views_of(&m, params, &w))) {
        rc = lib_fail(rc, fn);
        goto done;
    }
    /* W_Q = W_K = 2R, so (x W_Q)(x W_K)^T / sqrt(16) = x x^T; W_O = I keeps
     * the layer a bare attention head. */
    for (int i = 0; i < d * d; i++)
        w.w_q_cols[i / d * w.row_stride_q + i % d] = w.w_k_cols[i / d * w.row_stride_kv + i % d]
            = 2 * r[i];
    for (int i = 0; i < d; i++) /* W_V is a column block of W_QKV: row by row */
        gaussian(&rng, w.w_v_cols + (size_t)i * w.row_stride_kv, (size_t)d, 1.0 / sqrt((double)d));
    for (int i = 0; i < d * d; i++) w.w_o[i] = (vit_real)(i / d == i % d);
    if ((rc = vit_mha_forward(&m, params, y, x, x, cache))) {
        rc = lib_fail(rc, fn);
        goto done;
    }

    const vit_real *probs = vit_mha_probs(&m, cache);
    out->query = 0 * ARTICLE_GRID + 1;
    for (int i = 0; i < n * d; i++) out->tokens[i] = x[i];
    for (int j = 0; j < n; j++) out->map[j] = probs[out->query * n + j];
    /* Top six by repeated selection of the largest weight not yet taken. */
    unsigned char taken[ARTICLE_TOKENS] = {0};
    for (int t = 0; t < 6; t++) {
        int best = -1;
        for (int j = 0; j < n; j++)
            if (!taken[j] && (best < 0 || out->map[j] > out->map[best])) best = j;
        taken[best] = 1;
        out->top[t] = best;
    }
    out->far_edge = out->map[4 * ARTICLE_GRID + 5] + out->map[4 * ARTICLE_GRID + 6];
    out->near_edge = out->map[0 * ARTICLE_GRID + 1] + out->map[0 * ARTICLE_GRID + 2];
done:
    free(params);
    free(cache);
    return rc;
}

/* ---- 2. Heads ------------------------------------------------------------------ */

/* Weight of query q outside its window, summed over heads, and the largest
 * single such weight over all queries. */
static void outside_mass(const vit_real *probs, const unsigned char *allowed, int heads,
                         int q, double *mass_q, double *largest)
{
    const int n = ARTICLE_TOKENS;
    *mass_q = 0.0;
    *largest = 0.0;
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                if (allowed[i * n + j]) continue;
                double p = probs[((size_t)h * n + i) * n + j];
                if (i == q) *mass_q += p;
                if (fabs(p) > *largest) *largest = fabs(p);
            }
}

int article_heads_run(uint64_t seed, double noise, article_heads *out)
{
    static const char fn[] = "article_heads_run";
    const int n = ARTICLE_TOKENS, d = ARTICLE_DIM, H = 4, q = 1;
    if (!out) return fail(VIT_EINVAL, fn, "out must not be NULL");
    memset(out, 0, sizeof *out);

    vit_rng rng;
    vit_rng_seed(&rng, seed);
    vit_real img[ARTICLE_IMAGE * ARTICLE_IMAGE], x[ARTICLE_TOKENS * ARTICLE_DIM];
    vit_real xp[ARTICLE_TOKENS * ARTICLE_DIM];
    vit_real y[ARTICLE_TOKENS * ARTICLE_DIM], yp[ARTICLE_TOKENS * ARTICLE_DIM];
    unsigned char all[ARTICLE_TOKENS * ARTICLE_TOKENS], win[ARTICLE_TOKENS * ARTICLE_TOKENS];
    article_squares_image(&rng, noise, img);
    article_patches(img, x);

    vit_mha m = tokens_layer(H);
    size_t np = vit_mha_param_count(&m), nc = vit_mha_cache_size(&m);
    vit_real *params = malloc(np * sizeof *params);
    vit_real *cache = malloc(nc * sizeof *cache);
    int rc = VIT_OK;
    if (!params || !cache) {
        rc = fail(VIT_ENOMEM, fn, "out of memory");
        goto done;
    }
    gaussian(&rng, params, np, 1.0 / sqrt((double)d)); /* W_Q | W_K | W_V | W_O */
    out->params = np;
    out->out_rows = m.batch * m.n_q;
    out->out_cols = m.d_model;
    out->map_heads = m.heads;
    out->map_rows = m.n_q;
    out->map_cols = m.n_k;

    /* A window as large as the grid is global attention: the same mask
     * function counts both. */
    if ((rc = vit_mask_window(all, ARTICLE_GRID, ARTICLE_GRID, ARTICLE_GRID, ARTICLE_GRID, 0,
                              0)) ||
        (rc = vit_mask_window(win, ARTICLE_GRID, ARTICLE_GRID, 4, 4, 0, 0))) {
        rc = lib_fail(rc, fn);
        goto done;
    }
    out->entries_global = vit_mask_count(all, n, n);
    out->entries_window = vit_mask_count(win, n, n);

    if ((rc = vit_mha_forward(&m, params, y, x, x, cache))) {
        rc = lib_fail(rc, fn);
        goto done;
    }
    double unused;
    outside_mass(vit_mha_probs(&m, cache), win, H, q, &out->outside_global, &unused);

    /* Shuffle the tokens: row i of the shuffled input is token perm[i]. */
    int perm[ARTICLE_TOKENS];
    for (int i = 0; i < n; i++) perm[i] = i;
    vit_rng_shuffle(&rng, perm, n);
    for (int i = 0; i < n; i++) memcpy(xp + i * d, x + perm[i] * d, (size_t)d * sizeof *x);
    if ((rc = vit_mha_forward(&m, params, yp, xp, xp, cache))) {
        rc = lib_fail(rc, fn);
        goto done;
    }
    for (int i = 0; i < n; i++)
        for (int c = 0; c < d; c++) {
            double diff = fabs((double)yp[i * d + c] - y[perm[i] * d + c]);
            if (diff > out->perm_max_diff) out->perm_max_diff = diff;
        }

    /* Four windows of 4 x 4 patches. */
    m.mask.allowed = win;
    if ((rc = vit_mha_forward(&m, params, y, x, x, cache))) {
        rc = lib_fail(rc, fn);
        goto done;
    }
    const vit_real *probs = vit_mha_probs(&m, cache);
    outside_mass(probs, win, H, q, &out->outside_window, &out->outside_max);
    for (int r = 0; r < H * n; r++) {
        double sum = 0.0;
        for (int j = 0; j < n; j++) sum += probs[(size_t)r * n + j];
        if (fabs(sum - 1.0) > out->row_sum_err) out->row_sum_err = fabs(sum - 1.0);
    }
done:
    free(params);
    free(cache);
    return rc;
}

/* ---- 3. Scaling ----------------------------------------------------------------- */

/* t [count, 16, 4]: image i's 2 x 2 patch (pr, pc) as token pr*4 + pc, pixel
 * (a, b) of the patch at position a*2 + b; back on the file's 0..16 scale,
 * then standardized per position over all images and patches. */
static void digit_tokens(const vit_dataset *ds, int count, double *t)
{
    for (int i = 0; i < count; i++)
        for (int p = 0; p < 16; p++)
            for (int s = 0; s < 4; s++) {
                int y = 2 * (p / 4) + s / 2, x = 2 * (p % 4) + s % 2;
                t[((size_t)i * 16 + p) * 4 + s] = 16.0 * ds->images[(size_t)i * 64 + y * 8 + x];
            }
    for (int s = 0; s < 4; s++) {
        double sum = 0.0, sq = 0.0, rows = 16.0 * count;
        for (size_t r = 0; r < (size_t)count * 16; r++) sum += t[r * 4 + s];
        double mean = sum / rows;
        for (size_t r = 0; r < (size_t)count * 16; r++)
            sq += (t[r * 4 + s] - mean) * (t[r * 4 + s] - mean);
        double sd = sqrt(sq / rows);
        if (sd == 0) sd = 1; /* a position that never varies stays at zero */
        for (size_t r = 0; r < (size_t)count * 16; r++) t[r * 4 + s] = (t[r * 4 + s] - mean) / sd;
    }
}

/* Sum over the rows of probs [rows, n] of the largest weight and of
 * ||diag(p) - p p^T||_F, the softmax Jacobian of that row. */
static void softmax_stats(const vit_real *probs, int rows, int n, double *max_sum,
                          double *jac_sum)
{
    for (int r = 0; r < rows; r++) {
        const vit_real *p = probs + (size_t)r * n;
        double mx = 0.0, f2 = 0.0;
        for (int i = 0; i < n; i++) {
            if (p[i] > mx) mx = p[i];
            for (int j = 0; j < n; j++) {
                double jij = (i == j ? p[i] : 0.0) - (double)p[i] * p[j];
                f2 += jij * jij;
            }
        }
        *max_sum += mx;
        *jac_sum += sqrt(f2);
    }
}

int article_scaling_run(const vit_dataset *digits, int n_images, uint64_t seed,
                        article_scaling *out)
{
    static const char fn[] = "article_scaling_run";
    const int T = 16, dks[ARTICLE_NDK] = {4, 16, 64, 256, 1024};
    if (!digits || !out) return fail(VIT_EINVAL, fn, "digits and out must not be NULL");
    if (!digits->images || digits->height != 8 || digits->width != 8 || digits->channels != 1)
        return fail(VIT_EINVAL, fn, "digits: expected 8 x 8 x 1 images, got %d x %d x %d",
                    digits->height, digits->width, digits->channels);
    if (n_images < 1 || n_images > digits->count)
        return fail(VIT_EINVAL, fn, "n_images must be in [1, %d], got %d", digits->count,
                    n_images);
    memset(out, 0, sizeof *out);
    out->images = n_images;
    out->tokens = T;

    const int dmax = dks[ARTICLE_NDK - 1];
    double *t = malloc((size_t)n_images * T * 4 * sizeof *t);
    vit_real *gq = malloc((size_t)4 * dmax * sizeof *gq), *gk = malloc((size_t)4 * dmax * sizeof *gk);
    vit_real *q = malloc((size_t)T * dmax * sizeof *q), *k = malloc((size_t)T * dmax * sizeof *k);
    int rc = VIT_OK;
    if (!t || !gq || !gk || !q || !k) {
        rc = fail(VIT_ENOMEM, fn, "out of memory");
        goto done;
    }
    digit_tokens(digits, n_images, t);

    vit_rng rng;
    vit_rng_seed(&rng, seed);
    /* The values play no part in the weights: one zero column suffices. */
    vit_real v[16] = {0}, o[16], probs[16 * 16];
    for (int di = 0; di < ARTICLE_NDK; di++) {
        const int dk = dks[di];
        double s_sum = 0.0, s_sq = 0.0, mr = 0.0, ms = 0.0, jr = 0.0, js = 0.0;
        vit_sdpa raw, scaled;
        memset(&raw, 0, sizeof raw);
        raw.batch = raw.heads = 1;
        raw.n_q = raw.n_k = T;
        raw.d_k = dk;
        raw.d_v = 1;
        scaled = raw;
        raw.scale = 1;   /* plain q.k */
        scaled.scale = 0; /* the library's default, 1/sqrt(d_k) */
        for (int img = 0; img < n_images; img++) {
            /* Fresh projections per image; with standardized inputs and
             * std 1/2 over 4 inputs, q and k entries have variance ~1. */
            gaussian(&rng, gq, (size_t)4 * dk, 0.5);
            gaussian(&rng, gk, (size_t)4 * dk, 0.5);
            const double *ti = t + (size_t)img * T * 4;
            for (int i = 0; i < T; i++)
                for (int c = 0; c < dk; c++) {
                    double sq_ = 0.0, sk_ = 0.0;
                    for (int s = 0; s < 4; s++) {
                        sq_ += ti[i * 4 + s] * gq[s * dk + c];
                        sk_ += ti[i * 4 + s] * gk[s * dk + c];
                    }
                    q[i * dk + c] = (vit_real)sq_;
                    k[i * dk + c] = (vit_real)sk_;
                }
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++) {
                    double dot = 0.0;
                    for (int c = 0; c < dk; c++) dot += (double)q[i * dk + c] * k[j * dk + c];
                    s_sum += dot;
                    s_sq += dot * dot;
                }
            if ((rc = vit_sdpa_forward(&raw, o, probs, q, k, v))) {
                rc = lib_fail(rc, fn);
                goto done;
            }
            softmax_stats(probs, T, T, &mr, &jr);
            if ((rc = vit_sdpa_forward(&scaled, o, probs, q, k, v))) {
                rc = lib_fail(rc, fn);
                goto done;
            }
            softmax_stats(probs, T, T, &ms, &js);
        }
        double entries = (double)n_images * T * T, rows = (double)n_images * T;
        double mean = s_sum / entries;
        out->d_k[di] = dk;
        out->logit_std[di] = sqrt(fmax(s_sq / entries - mean * mean, 0.0));
        out->max_raw[di] = mr / rows;
        out->max_scaled[di] = ms / rows;
        out->jac_raw[di] = jr / rows;
        out->jac_scaled[di] = js / rows;
    }
done:
    free(t);
    free(gq);
    free(gk);
    free(q);
    free(k);
    return rc;
}

/* ---- 4. Cost ---------------------------------------------------------------------- */

/* Allowed entries of the window mask on a grid x grid token grid. */
static int window_count(const char *fn, int grid, int M, int shift, size_t *count)
{
    size_t n = (size_t)grid * grid;
    unsigned char *mask = malloc(n * n);
    if (!mask) return fail(VIT_ENOMEM, fn, "out of memory for a %zu x %zu mask", n, n);
    int rc = vit_mask_window(mask, grid, grid, M, M, shift, shift);
    if (rc)
        rc = lib_fail(rc, fn);
    else
        *count = vit_mask_count(mask, (int)n, (int)n);
    free(mask);
    return rc;
}

int article_cost_run(article_cost *out)
{
    static const char fn[] = "article_cost_run";
    if (!out) return fail(VIT_EINVAL, fn, "out must not be NULL");
    memset(out, 0, sizeof *out);
    int rc;

    /* ViT: 224 x 224 in 16 x 16 patches; one window over the whole grid. */
    out->image = 224;
    out->vit_patch = 16;
    int vg = out->image / out->vit_patch;
    out->vit_tokens = vg * vg;
    if ((rc = window_count(fn, vg, vg, 0, &out->vit_entries))) return rc;

    /* One token per pixel: a 50,176^2 mask would take 2.5 GB, so count by
     * arithmetic, in 64 bits (the entries overflow 32). */
    out->pixel_tokens = (int64_t)out->image * out->image;
    out->pixel_entries = (uint64_t)out->pixel_tokens * (uint64_t)out->pixel_tokens;
    out->pixel_bytes = out->pixel_entries * 4u;
    out->pixel_vs_patch = (double)out->pixel_entries / (double)out->vit_entries;

    /* Swin: 4 x 4 patches give a 56 x 56 grid, windows of 7 x 7. */
    out->swin_patch = 4;
    out->swin_window = 7;
    int sg = out->image / out->swin_patch;
    out->swin_tokens = sg * sg;
    if ((rc = window_count(fn, sg, sg, 0, &out->swin_global)) ||
        (rc = window_count(fn, sg, out->swin_window, 0, &out->swin_windowed)) ||
        (rc = window_count(fn, sg, out->swin_window, out->swin_window / 2, &out->swin_shifted)))
        return rc;
    out->swin_ratio = (double)out->swin_global / (double)out->swin_windowed;
    return VIT_OK;
}

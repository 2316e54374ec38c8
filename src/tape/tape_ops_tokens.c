/*
 * Tape ops that make, move and pool tokens, each forward beside its
 * backward: the embeddings (vit_op_patch_embed, vit_op_cls_prepend,
 * vit_op_pos_add, vit_op_embedding), token selection and pooling
 * (vit_op_token, vit_op_mean_tokens, vit_op_masked_mean) and the shape
 * ops (vit_op_reshape, vit_op_concat_tokens).  Tokens are [B, T, D].
 */
#include <string.h>

#include "error.h"
#include "tape_internal.h"
#include "vit/embeddings.h"
#include "vit/pool.h"

/* ---- Patch embedding: img [B, H, W, C] -> [B, N, D] ------------------- */

/* What the backward keeps: the patch shape and the patches as rows
 * (im2col), [B * N, P * P * C]. */
typedef struct patch_ctx {
    vit_patch_shape shape;
    vit_real *cols;
} patch_ctx;

/* in: img, W [P*P*C, D], b [D] (or NULL); all accumulated. */
static int back_patch(vit_tape *t, const vit_op_rec *r)
{
    const patch_ctx *c = r->ctx;
    vit_real *dimg = vit_tape_grad_acc(t, r->in[0]), *dW = vit_tape_grad_acc(t, r->in[1]);
    vit_real *db = r->in[2] ? vit_tape_grad_acc(t, r->in[2]) : NULL;
    if (vit_tape_status(t))
        return vit_tape_status(t);
    return vit_patch_embed_backward(&c->shape, dimg, dW, db, r->out->grad, c->cols,
                                    r->in[1]->data);
}

static const vit_op_def patch_def = {"vit_op_patch_embed", back_patch, NULL, 0};

vit_tensor *vit_op_patch_embed(vit_tape *t, const vit_patch_shape *s, vit_tensor *img,
                               vit_tensor *W, vit_tensor *b)
{
    vit_tensor *in[3] = {img, W, b};
    if (!vit_tape_begin(t, patch_def.name, 2, in))
        return NULL;
    int n = s ? vit_patch_count(s) : 0;
    if (n <= 0)
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "vit_op_patch_embed: invalid patch shape"));
    size_t pdim = (size_t)s->patch * s->patch * s->channels;
    const char *fn = patch_def.name;
    if (pdim > INT32_MAX)
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "%s: patch too large", fn));
    if (vit_tape_check_shape(t, fn, "img", img, "[batch, height, width, channels]", 4,
                             (int[]){s->batch, s->height, s->width, s->channels})
        || vit_tape_check_shape(t, fn, "W", W, "[patch*patch*channels, dim]", 2,
                                (int[]){(int)pdim, s->dim})
        || (b && vit_tape_check_shape(t, fn, "b", b, "[dim]", 1, &s->dim)))
        return NULL;
    int shape[3] = {s->batch, n, s->dim};
    vit_tensor *y = vit_tape_output(t, 3, shape, vit_tape_wants_grad(t, 3, in));
    vit_real *cols = y ? vit_tape_saved(t, (size_t)s->batch * n * pdim) : NULL;
    if (!cols)
        return NULL;
    int rc = vit_patch_embed_forward(s, y->data, cols, img->data, W->data, b ? b->data : NULL);
    patch_ctx c = {*s, cols};
    return vit_tape_record(t, &patch_def, rc, y, 3, in, &c, sizeof c);
}

/* ---- Class token: x [B, N, D], cls [D] -> [B, N+1, D] ------------------ */

/* dx += dy's tokens 1..N; dcls += the sum over the batch of token 0's. */
static int back_cls(vit_tape *t, const vit_op_rec *r)
{
    const vit_tensor *x = r->in[0];
    vit_real *dx = vit_tape_grad_acc(t, r->in[0]), *dcls = vit_tape_grad_acc(t, r->in[1]);
    if (vit_tape_status(t))
        return vit_tape_status(t);
    return vit_cls_prepend_backward(dx, dcls, r->out->grad, x->shape[0], x->shape[1],
                                    x->shape[2]);
}

static const vit_op_def cls_def = {"vit_op_cls_prepend", back_cls, NULL, 0};

vit_tensor *vit_op_cls_prepend(vit_tape *t, vit_tensor *x, vit_tensor *cls)
{
    vit_tensor *in[2] = {x, cls};
    if (!vit_tape_begin(t, cls_def.name, 2, in))
        return NULL;
    if (vit_tape_check_shape(t, cls_def.name, "x", x, "[B, N, D]", 3, (int[]){-1, -1, -1})
        || vit_tape_check_shape(t, cls_def.name, "cls", cls, "[D]", 1, &x->shape[2]))
        return NULL;
    int shape[3] = {x->shape[0], x->shape[1] + 1, x->shape[2]};
    vit_tensor *y = vit_tape_output(t, 3, shape, vit_tape_wants_grad(t, 2, in));
    if (!y)
        return NULL;
    int rc = vit_cls_prepend_forward(y->data, x->data, cls->data, x->shape[0], x->shape[1],
                                     x->shape[2]);
    return vit_tape_record(t, &cls_def, rc, y, 2, in, NULL, 0);
}

/* ---- Position embedding: x [B, T, D] + pos [T, D] ---------------------- */

/* dpos += the sum of dy over the batch; dx = dy, handed over or added like
 * a residual's. */
static int back_pos(vit_tape *t, const vit_op_rec *r)
{
    const vit_tensor *x = r->in[0];
    vit_real *dpos = vit_tape_grad_acc(t, r->in[1]);
    if (vit_tape_status(t))
        return vit_tape_status(t);
    int rc = vit_pos_add_backward(NULL, dpos, r->out->grad, x->shape[0], x->shape[1],
                                  x->shape[2]);
    return rc ? rc : vit_tape_grad_pass(t, r->in[0], r->out, 1);
}

static const vit_op_def pos_def = {"vit_op_pos_add", back_pos, NULL, 0};

vit_tensor *vit_op_pos_add(vit_tape *t, vit_tensor *x, vit_tensor *pos)
{
    vit_tensor *in[2] = {x, pos};
    if (!vit_tape_begin(t, pos_def.name, 2, in))
        return NULL;
    if (vit_tape_check_shape(t, pos_def.name, "x", x, "[B, T, D]", 3, (int[]){-1, -1, -1})
        || vit_tape_check_shape(t, pos_def.name, "pos", pos, "[T, D]", 2, x->shape + 1))
        return NULL;
    vit_tensor *y = vit_tape_output(t, 3, x->shape, vit_tape_wants_grad(t, 2, in));
    if (!y)
        return NULL;
    int rc = vit_pos_add_forward(y->data, x->data, pos->data, x->shape[0], x->shape[1],
                                 x->shape[2]);
    return vit_tape_record(t, &pos_def, rc, y, 2, in, NULL, 0);
}

/* ---- Embedding lookup: table [V, D], ids [n] -> [ids' shape..., D] ----- */

typedef struct embedding_ctx {
    int *ids; /* the caller's, copied */
} embedding_ctx;

/* dtable's rows ids[i] += dy's row i (repeated ids sum). */
static int back_embedding(vit_tape *t, const vit_op_rec *r)
{
    const embedding_ctx *c = r->ctx;
    const vit_tensor *tab = r->in[0];
    vit_real *dtab = vit_tape_grad_acc(t, r->in[0]);
    return dtab ? vit_embedding_backward(dtab, r->out->grad, c->ids,
                                         r->out->size / (size_t)tab->shape[1], tab->shape[0],
                                         tab->shape[1])
                : vit_tape_status(t);
}

static const vit_op_def embedding_def = {"vit_op_embedding", back_embedding, NULL, 0};

vit_tensor *vit_op_embedding(vit_tape *t, vit_tensor *table, const int *ids, int id_ndim,
                             const int *id_shape)
{
    const char *fn = embedding_def.name;
    if (!vit_tape_begin(t, fn, 1, &table))
        return NULL;
    if (table->ndim != 2 || !ids || id_ndim < 1 || id_ndim > 3 || !id_shape)
        return vit_tape_error(t, vit_fail(VIT_EINVAL,
            "%s: table must be [V, D], ids non-NULL and id_shape 1..3 dimensions", fn));
    int shape[VIT_TENSOR_MAX_DIMS];
    memcpy(shape, id_shape, (size_t)id_ndim * sizeof *shape);
    shape[id_ndim] = table->shape[1];
    size_t n;
    if (vit_tape_shape_size(t, fn, id_ndim, id_shape, &n))
        return NULL;
    vit_tensor *y = vit_tape_output(t, id_ndim + 1, shape, vit_tape_wants_grad(t, 1, &table));
    int *keep = y ? vit_tape_alloc(t, n * sizeof *keep) : NULL;
    if (!keep)
        return NULL;
    memcpy(keep, ids, n * sizeof *keep);
    int rc = vit_embedding_forward(y->data, table->data, keep, n, table->shape[0],
                                   table->shape[1]);
    embedding_ctx c = {keep};
    return vit_tape_record(t, &embedding_def, rc, y, 1, &table, &c, sizeof c);
}

/* ---- Masked mean: x [B, T, D], key_valid [B, T] -> [B, D] -------------- */

typedef struct masked_mean_ctx {
    unsigned char *key_valid; /* the caller's, copied; NULL: all valid */
} masked_mean_ctx;

/* dx += dy / (valid tokens of the item) at each valid token. */
static int back_masked_mean(vit_tape *t, const vit_op_rec *r)
{
    const masked_mean_ctx *c = r->ctx;
    const vit_tensor *x = r->in[0];
    vit_real *dx = vit_tape_grad_acc(t, r->in[0]);
    return dx ? vit_masked_mean_backward(dx, r->out->grad, c->key_valid, x->shape[0],
                                         x->shape[1], x->shape[2])
              : vit_tape_status(t);
}

static const vit_op_def masked_mean_def = {"vit_op_masked_mean", back_masked_mean, NULL, 0};

vit_tensor *vit_op_masked_mean(vit_tape *t, vit_tensor *x, const unsigned char *key_valid)
{
    const char *fn = masked_mean_def.name;
    if (!vit_tape_begin(t, fn, 1, &x))
        return NULL;
    if (vit_tape_check_shape(t, fn, "x", x, "[B, T, D]", 3, (int[]){-1, -1, -1}))
        return NULL;
    int B = x->shape[0], T = x->shape[1], D = x->shape[2];
    int shape[2] = {B, D};
    vit_tensor *y = vit_tape_output(t, 2, shape, vit_tape_wants_grad(t, 1, &x));
    unsigned char *keep = NULL;
    if (!y || (key_valid && !(keep = vit_tape_alloc(t, (size_t)B * T))))
        return NULL;
    if (keep)
        memcpy(keep, key_valid, (size_t)B * T);
    int rc = vit_masked_mean_forward(y->data, NULL, x->data, keep, B, T, D);
    masked_mean_ctx c = {keep};
    return vit_tape_record(t, &masked_mean_def, rc, y, 1, &x, &c, sizeof c);
}

/* ---- Token selection and mean: x [B, T, D] -> [B, D] ------------------- */

/* i >= 0 selects token i; i < 0 means the mean over tokens -i-1 to T-1.
 * One pair of functions serves both since they differ only in the weight
 * each token gets. */
typedef struct token_ctx {
    int i;
} token_ctx;

static void token_weights(const vit_tensor *x, int i, int *first, int *last, vit_real *w)
{
    if (i >= 0) {
        *first = *last = i;
        *w = 1;
    } else {
        *first = -i - 1;
        *last = x->shape[1] - 1;
        *w = (vit_real)1 / (vit_real)(*last - *first + 1);
    }
}

/* dx[b, k] += w dy[b] for each selected token k. */
static int back_token(vit_tape *t, const vit_op_rec *r)
{
    const token_ctx *c = r->ctx;
    const vit_tensor *x = r->in[0];
    vit_real *g = vit_tape_grad_acc(t, r->in[0]);
    if (!g)
        return vit_tape_status(t);
    int B = x->shape[0], T = x->shape[1], D = x->shape[2], first, last;
    vit_real w;
    token_weights(x, c->i, &first, &last, &w);
    for (int b = 0; b < B; b++)
        for (int k = first; k <= last; k++) {
            vit_real *dx = g + ((size_t)b * T + k) * D;
            const vit_real *dy = r->out->grad + (size_t)b * D;
            for (int j = 0; j < D; j++)
                dx[j] += w * dy[j];
        }
    return VIT_OK;
}

static const vit_op_def token_def = {"vit_op_token", back_token, NULL, 0};
static const vit_op_def mean_tokens_def = {"vit_op_mean_tokens", back_token, NULL, 0};

static vit_tensor *token_op(vit_tape *t, const vit_op_def *def, vit_tensor *x, int i)
{
    const char *name = def->name;
    if (!vit_tape_begin(t, name, 1, &x))
        return NULL;
    int lo = i >= 0 ? i : -i - 1;
    if (vit_tape_check_shape(t, name, "x", x, "[B, T, D]", 3, (int[]){-1, -1, -1}))
        return NULL;
    if (lo >= x->shape[1])
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "%s: token %d is not below T = %d", name,
                                          lo, x->shape[1]));
    int B = x->shape[0], T = x->shape[1], D = x->shape[2], first, last;
    int shape[2] = {B, D};
    vit_tensor *y = vit_tape_output(t, 2, shape, vit_tape_wants_grad(t, 1, &x));
    if (!y)
        return NULL;
    vit_real w;
    token_weights(x, i, &first, &last, &w);
    for (int b = 0; b < B; b++) {
        vit_real *yb = y->data + (size_t)b * D;
        memset(yb, 0, (size_t)D * sizeof *yb);
        for (int k = first; k <= last; k++) {
            const vit_real *xk = x->data + ((size_t)b * T + k) * D;
            for (int j = 0; j < D; j++)
                yb[j] += w * xk[j];
        }
    }
    token_ctx c = {i};
    return vit_tape_record(t, def, VIT_OK, y, 1, &x, &c, sizeof c);
}

vit_tensor *vit_op_token(vit_tape *t, vit_tensor *x, int index)
{
    if (index < 0) {
        vit_fail(VIT_EINVAL, "vit_op_token: index %d is negative", index);
        return t ? vit_tape_error(t, VIT_EINVAL) : NULL;
    }
    return token_op(t, &token_def, x, index);
}

vit_tensor *vit_op_mean_tokens(vit_tape *t, vit_tensor *x, int first)
{
    if (first < 0) {
        vit_fail(VIT_EINVAL, "vit_op_mean_tokens: first %d is negative", first);
        return t ? vit_tape_error(t, VIT_EINVAL) : NULL;
    }
    return token_op(t, &mean_tokens_def, x, -first - 1);
}

/* ---- Reshape: the same values under another shape (no copy) ------------ */

/* dx = dy, handed over without a copy when x has no gradient yet. */
static int back_reshape(vit_tape *t, const vit_op_rec *r)
{
    return vit_tape_grad_pass(t, r->in[0], r->out, 1);
}

static const vit_op_def reshape_def = {"vit_op_reshape", back_reshape, NULL, 0};

vit_tensor *vit_op_reshape(vit_tape *t, vit_tensor *x, int ndim, const int *shape)
{
    const char *fn = reshape_def.name;
    if (!vit_tape_begin(t, fn, 1, &x))
        return NULL;
    size_t size;
    if (vit_tape_shape_size(t, fn, ndim, shape, &size))
        return NULL;
    if (size != x->size)
        return vit_tape_error(t, vit_fail(VIT_EINVAL,
            "%s: the new shape holds %zu values, x holds %zu", fn, size, x->size));
    vit_tensor *y = vit_tape_header(t, ndim, shape, size);
    if (!y)
        return NULL;
    y->data = x->data;
    y->requires_grad = vit_tape_wants_grad(t, 1, &x);
    return vit_tape_record(t, &reshape_def, VIT_OK, y, 1, &x, NULL, 0);
}

/* ---- Concatenation along tokens: x_k [B, T_k, D] -> [B, sum T_k, D] ---- */

/* dx_k = dy's slice of x_k's tokens (copied when fresh, else added). */
static int back_concat(vit_tape *t, const vit_op_rec *r)
{
    const vit_tensor *y = r->out;
    int B = y->shape[0], T = y->shape[1], D = y->shape[2], t0 = 0;
    for (int k = 0; k < r->n_in; k++) {
        const vit_tensor *x = r->in[k];
        int Tk = x->shape[1], fresh;
        vit_real *dx = vit_tape_grad_out(t, r->in[k], &fresh);
        if (!dx && x->requires_grad)
            return vit_tape_status(t);
        for (int b = 0; dx && b < B; b++) {
            const vit_real *src = y->grad + ((size_t)b * T + t0) * D;
            vit_real *dst = dx + (size_t)b * Tk * D;
            if (fresh)
                memcpy(dst, src, (size_t)Tk * D * sizeof *dst);
            else
                for (size_t j = 0; j < (size_t)Tk * D; j++)
                    dst[j] += src[j];
        }
        t0 += Tk;
    }
    return VIT_OK;
}

static const vit_op_def concat_def = {"vit_op_concat_tokens", back_concat, NULL, 0};

vit_tensor *vit_op_concat_tokens(vit_tape *t, int n, vit_tensor *const *x)
{
    const char *fn = concat_def.name;
    if (t && (n < 1 || n > VIT_TAPE_MAX_INPUTS || !x))
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "%s: n = %d must be 1..%d with x non-NULL",
                                          fn, n, VIT_TAPE_MAX_INPUTS));
    if (!vit_tape_begin(t, fn, n, x))
        return NULL;
    int T = 0;
    for (int k = 0; k < n; k++) {
        if (x[k]->ndim != 3 || x[k]->shape[0] != x[0]->shape[0] || x[k]->shape[2] != x[0]->shape[2])
            return vit_tape_error(t, vit_fail(VIT_EINVAL,
                "%s: x[%d] must be [B, T, D] with x[0]'s B = %d and D = %d", fn, k,
                x[0]->shape[0], x[0]->ndim == 3 ? x[0]->shape[2] : 0));
        T += x[k]->shape[1];
    }
    int B = x[0]->shape[0], D = x[0]->shape[2];
    int shape[3] = {B, T, D};
    vit_tensor *y = vit_tape_output(t, 3, shape, vit_tape_wants_grad(t, n, x));
    if (!y)
        return NULL;
    for (int k = 0, t0 = 0; k < n; t0 += x[k]->shape[1], k++)
        for (int b = 0; b < B; b++)
            memcpy(y->data + ((size_t)b * T + t0) * D, x[k]->data + (size_t)b * x[k]->shape[1] * D,
                   (size_t)x[k]->shape[1] * D * sizeof(vit_real));
    return vit_tape_record(t, &concat_def, VIT_OK, y, n, x, NULL, 0);
}

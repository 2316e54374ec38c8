/*
 * The reverse-mode tape: an arena for tensors and saved intermediates, a
 * list of op records, and a backward pass that walks the list in reverse.
 *
 * Each op is a pair of plain functions: vit_op_X() checks shapes, allocates
 * its output from the arena, calls the kernel's forward and records an
 * op_rec; back_X() calls the kernel's backward from that record.
 */
#include "vit/tape.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "tape_internal.h"
#include "vit/activations.h"
#include "vit/layernorm.h"
#include "vit/linear.h"
#include "vit/loss.h"

/* ---- Arena ----------------------------------------------------------- */

#define ARENA_ALIGN 64
#define ARENA_FIRST_CHUNK (1u << 20)

typedef struct chunk {
    struct chunk *next;
    size_t cap, used;
    unsigned char *base; /* aligned start of the usable bytes */
} chunk;

typedef struct op_rec op_rec;
typedef int (*back_fn)(op_rec *op);

struct op_rec {
    back_fn backward;
    vit_tensor *out;
    vit_tensor *in[4];
    vit_real *saved[3];
    int *labels;
    vit_real f;
    int i;
    union {
        vit_mha mha;
        vit_patch_shape patch;
    } cfg;
};

struct vit_tape {
    chunk *chunks;       /* newest first */
    size_t total_cap;    /* sum of chunk capacities */
    op_rec *ops;
    int nops, cap_ops;
    int status;
};

static chunk *chunk_new(size_t cap)
{
    /* One malloc holds the header and the bytes; over-allocate to align. */
    chunk *c = malloc(sizeof *c + cap + ARENA_ALIGN);
    if (!c)
        return NULL;
    uintptr_t p = (uintptr_t)(c + 1);
    p = (p + ARENA_ALIGN - 1) & ~(uintptr_t)(ARENA_ALIGN - 1);
    c->base = (unsigned char *)p;
    c->cap = cap;
    c->used = 0;
    c->next = NULL;
    return c;
}

static int tape_fail(vit_tape *t, int code)
{
    if (t->status == VIT_OK)
        t->status = code;
    return code;
}

/* Bump allocation; a new chunk when the current one is full.  reset() folds
 * the chunks into one of the high-water size, so steady state is one block. */
static void *arena_alloc(vit_tape *t, size_t bytes)
{
    bytes = (bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    chunk *c = t->chunks;
    if (!c || c->cap - c->used < bytes) {
        size_t cap = bytes > ARENA_FIRST_CHUNK ? bytes : ARENA_FIRST_CHUNK;
        if (c && cap < c->cap)
            cap = c->cap; /* grow geometrically-ish within a step */
        chunk *n = chunk_new(cap);
        if (!n) {
            vit_fail(VIT_ENOMEM, "vit_tape: out of memory allocating %zu bytes", cap);
            tape_fail(t, VIT_ENOMEM);
            return NULL;
        }
        n->next = c;
        t->chunks = n;
        t->total_cap += cap;
        c = n;
    }
    void *p = c->base + c->used;
    c->used += bytes;
    return p;
}

static vit_real *arena_reals(vit_tape *t, size_t n)
{
    size_t bytes;
    if (!vit_mul_size(&bytes, n, sizeof(vit_real))) {
        tape_fail(t, VIT_ENOMEM);
        return NULL;
    }
    return arena_alloc(t, bytes);
}

vit_tape *vit_tape_new(void)
{
    vit_tape *t = calloc(1, sizeof *t);
    if (!t)
        vit_fail(VIT_ENOMEM, "vit_tape_new: out of memory");
    return t;
}

void vit_tape_free(vit_tape *t)
{
    if (!t)
        return;
    for (chunk *c = t->chunks, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    free(t->ops);
    free(t);
}

void vit_tape_reset(vit_tape *t)
{
    if (!t)
        return;
    if (t->chunks && t->chunks->next) {
        /* Several chunks: replace them by one that holds them all. */
        size_t total = t->total_cap;
        for (chunk *c = t->chunks, *n; c; c = n) {
            n = c->next;
            free(c);
        }
        t->chunks = chunk_new(total);
        t->total_cap = t->chunks ? total : 0;
    }
    if (t->chunks)
        t->chunks->used = 0;
    t->nops = 0;
    t->status = VIT_OK;
}

int vit_tape_fail(vit_tape *t, int code) { return t ? tape_fail(t, code) : code; }

int vit_tape_status(const vit_tape *t) { return t ? t->status : VIT_EINVAL; }

size_t vit_tape_bytes(const vit_tape *t) { return t ? t->total_cap : 0; }

int vit_tape_op_count(const vit_tape *t) { return t ? t->nops : 0; }

/* ---- Tensors and op records ------------------------------------------ */

static vit_tensor *tensor_new(vit_tape *t, int ndim, const int *shape, int with_grad)
{
    size_t size = 1;
    for (int d = 0; d < ndim; d++)
        if (!vit_mul_size(&size, size, (size_t)shape[d])) {
            tape_fail(t, VIT_ENOMEM);
            return NULL;
        }
    vit_tensor *x = arena_alloc(t, sizeof *x);
    vit_real *data = x ? arena_reals(t, size) : NULL;
    vit_real *grad = (data && with_grad) ? arena_reals(t, size) : NULL;
    if (!data || (with_grad && !grad))
        return NULL;
    if (grad)
        memset(grad, 0, size * sizeof *grad);
    x->data = data;
    x->grad = grad;
    x->ndim = ndim;
    memset(x->shape, 0, sizeof x->shape);
    memcpy(x->shape, shape, (size_t)ndim * sizeof *shape);
    x->size = size;
    return x;
}

vit_tensor *vit_tape_tensor(vit_tape *t, int ndim, const int *shape)
{
    if (!t || t->status != VIT_OK)
        return NULL;
    return tensor_new(t, ndim, shape, 0);
}

vit_real *vit_tape_reals(vit_tape *t, size_t n)
{
    if (!t || t->status != VIT_OK)
        return NULL;
    return arena_reals(t, n);
}

vit_tensor *vit_tape_leaf(vit_tape *t, vit_real *data, vit_real *grad, int ndim,
                          const int *shape)
{
    if (!t) {
        vit_fail(VIT_EINVAL, "vit_tape_leaf: tape is NULL");
        return NULL;
    }
    if (!data || !shape || ndim < 1 || ndim > VIT_TENSOR_MAX_DIMS) {
        vit_fail(VIT_EINVAL, "vit_tape_leaf: %s", !data ? "data is NULL"
                 : !shape ? "shape is NULL" : "ndim must be 1..4");
        tape_fail(t, VIT_EINVAL);
        return NULL;
    }
    size_t size = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] <= 0) {
            vit_fail(VIT_EINVAL, "vit_tape_leaf: shape[%d] = %d must be positive", d, shape[d]);
            tape_fail(t, VIT_EINVAL);
            return NULL;
        }
        if (!vit_mul_size(&size, size, (size_t)shape[d])) {
            tape_fail(t, VIT_ENOMEM);
            return NULL;
        }
    }
    vit_tensor *x = arena_alloc(t, sizeof *x);
    if (!x)
        return NULL;
    x->data = data;
    x->grad = grad;
    x->ndim = ndim;
    memset(x->shape, 0, sizeof x->shape);
    memcpy(x->shape, shape, (size_t)ndim * sizeof *shape);
    x->size = size;
    return x;
}

static op_rec *op_push(vit_tape *t, back_fn fn, vit_tensor *out)
{
    if (t->nops == t->cap_ops) {
        int cap = t->cap_ops ? 2 * t->cap_ops : 64;
        op_rec *ops = realloc(t->ops, (size_t)cap * sizeof *ops);
        if (!ops) {
            vit_fail(VIT_ENOMEM, "vit_tape: out of memory recording an op");
            tape_fail(t, VIT_ENOMEM);
            return NULL;
        }
        t->ops = ops;
        t->cap_ops = cap;
    }
    op_rec *op = &t->ops[t->nops++];
    memset(op, 0, sizeof *op);
    op->backward = fn;
    op->out = out;
    return op;
}

/* Common entry check: a usable tape, no earlier error, non-NULL inputs. */
static int op_begin(vit_tape *t, const char *name, int n, vit_tensor *const *in)
{
    if (!t) {
        vit_fail(VIT_EINVAL, "%s: tape is NULL", name);
        return 0;
    }
    if (t->status != VIT_OK)
        return 0;
    for (int i = 0; i < n; i++)
        if (!in[i]) {
            vit_fail(VIT_EINVAL, "%s: input %d is NULL", name, i);
            tape_fail(t, VIT_EINVAL);
            return 0;
        }
    return 1;
}

static vit_tensor *op_error(vit_tape *t, int code)
{
    tape_fail(t, code);
    return NULL;
}

/* The common tail of an op: the kernel's return code rc, then the op's
 * record with its inputs (up to three, NULL for none).  NULL, with the
 * tape's error set, if the kernel failed or the record could not grow. */
static op_rec *op_finish(vit_tape *t, int rc, back_fn fn, vit_tensor *y, vit_tensor *a,
                         vit_tensor *b, vit_tensor *c)
{
    if (rc) {
        op_error(t, rc);
        return NULL;
    }
    op_rec *op = op_push(t, fn, y);
    if (!op)
        return NULL;
    op->in[0] = a;
    op->in[1] = b;
    op->in[2] = c;
    return op;
}

static int wants_grad(vit_tensor *a, vit_tensor *b, vit_tensor *c)
{
    return (a && a->grad) || (b && b->grad) || (c && c->grad);
}

static int last_dim(const vit_tensor *x) { return x->shape[x->ndim - 1]; }

/* Rows of x when its last dimension is the feature dimension. */
static int rows_of(const vit_tensor *x) { return (int)(x->size / (size_t)last_dim(x)); }

#define GRAD(x) ((x) ? (x)->grad : NULL)

/* ---- linear ---------------------------------------------------------- */

static int back_linear(op_rec *op)
{
    vit_tensor *x = op->in[0], *W = op->in[1], *b = op->in[2];
    return vit_linear_backward(x->grad, W->grad, GRAD(b), op->out->grad, x->data, W->data,
                               rows_of(x), W->shape[0], W->shape[1]);
}

vit_tensor *vit_op_linear(vit_tape *t, vit_tensor *x, vit_tensor *W, vit_tensor *b)
{
    vit_tensor *in[2] = {x, W};
    if (!op_begin(t, "vit_op_linear", 2, in))
        return NULL;
    if (W->ndim != 2 || last_dim(x) != W->shape[0] || (b && (int)b->size != W->shape[1]))
        return op_error(t, vit_fail(VIT_EINVAL,
            "vit_op_linear: x width %d, W [%d, %d], b %zu do not agree", last_dim(x),
            W->shape[0], W->ndim > 1 ? W->shape[1] : 0, b ? b->size : 0));
    int shape[VIT_TENSOR_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = W->shape[1];
    vit_tensor *y = tensor_new(t, x->ndim, shape, wants_grad(x, W, b));
    if (!y)
        return NULL;
    int rc = vit_linear_forward(y->data, x->data, W->data, b ? b->data : NULL, rows_of(x),
                                W->shape[0], W->shape[1]);
    return op_finish(t, rc, back_linear, y, x, W, b) ? y : NULL;
}

/* ---- layernorm ------------------------------------------------------- */

static int back_layernorm(op_rec *op)
{
    vit_tensor *x = op->in[0], *g = op->in[1], *b = op->in[2];
    return vit_layernorm_backward(x->grad, g->grad, b->grad, op->out->grad, x->data,
                                  op->saved[0], op->saved[1], g->data, rows_of(x), last_dim(x));
}

vit_tensor *vit_op_layernorm(vit_tape *t, vit_tensor *x, vit_tensor *gamma, vit_tensor *beta,
                             vit_real eps)
{
    vit_tensor *in[3] = {x, gamma, beta};
    if (!op_begin(t, "vit_op_layernorm", 3, in))
        return NULL;
    int d = last_dim(x), n = rows_of(x);
    if ((int)gamma->size != d || (int)beta->size != d)
        return op_error(t, vit_fail(VIT_EINVAL,
            "vit_op_layernorm: gamma (%zu) and beta (%zu) must match the width %d",
            gamma->size, beta->size, d));
    vit_tensor *y = tensor_new(t, x->ndim, x->shape, wants_grad(x, gamma, beta));
    vit_real *mean = y ? arena_reals(t, (size_t)n) : NULL;
    vit_real *rstd = mean ? arena_reals(t, (size_t)n) : NULL;
    if (!rstd)
        return NULL;
    int rc = vit_layernorm_forward(y->data, mean, rstd, x->data, gamma->data, beta->data, n, d, eps);
    op_rec *op = op_finish(t, rc, back_layernorm, y, x, gamma, beta);
    if (!op)
        return NULL;
    op->saved[0] = mean; op->saved[1] = rstd;
    return y;
}

/* ---- GELU, add ------------------------------------------------------- */

static int back_gelu(op_rec *op)
{
    vit_tensor *x = op->in[0];
    return vit_gelu_backward(x->grad, op->out->grad, x->data, x->size);
}

vit_tensor *vit_op_gelu(vit_tape *t, vit_tensor *x)
{
    if (!op_begin(t, "vit_op_gelu", 1, &x))
        return NULL;
    vit_tensor *y = tensor_new(t, x->ndim, x->shape, x->grad != NULL);
    if (!y)
        return NULL;
    int rc = vit_gelu_forward(y->data, x->data, x->size);
    return op_finish(t, rc, back_gelu, y, x, NULL, NULL) ? y : NULL;
}

static int back_add(op_rec *op)
{
    return vit_residual_backward(op->in[0]->grad, op->in[1]->grad, op->out->grad, op->out->size);
}

vit_tensor *vit_op_add(vit_tape *t, vit_tensor *a, vit_tensor *b)
{
    vit_tensor *in[2] = {a, b};
    if (!op_begin(t, "vit_op_add", 2, in))
        return NULL;
    if (a->size != b->size || a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof a->shape))
        return op_error(t, vit_fail(VIT_EINVAL, "vit_op_add: operand shapes differ (%zu vs %zu values)",
                                    a->size, b->size));
    vit_tensor *y = tensor_new(t, a->ndim, a->shape, wants_grad(a, b, NULL));
    if (!y)
        return NULL;
    int rc = vit_residual_forward(y->data, a->data, b->data, a->size);
    return op_finish(t, rc, back_add, y, a, b, NULL) ? y : NULL;
}

/* ---- multi-head attention -------------------------------------------- */

static int back_mha(op_rec *op)
{
    vit_tensor *p = op->in[0], *xq = op->in[1], *xkv = op->in[2];
    const vit_mha *m = &op->cfg.mha;
    /* Scratch from a one-off malloc would cost every step; the cache slot
     * saved[1] was sized for it in the forward. */
    return vit_mha_backward(m, p->data, p->grad, xq->grad, xkv->grad, NULL, op->out->grad,
                            xq->data, xkv->data, op->saved[0], op->saved[1]);
}

vit_tensor *vit_op_mha(vit_tape *t, const vit_mha *cfg, vit_tensor *params, vit_tensor *x_q,
                       vit_tensor *x_kv, vit_real **probs)
{
    vit_tensor *in[3] = {params, x_q, x_kv};
    if (!op_begin(t, "vit_op_mha", 3, in))
        return NULL;
    if (!cfg)
        return op_error(t, vit_fail(VIT_EINVAL, "vit_op_mha: cfg is NULL"));
    int rc = vit_mha_check(cfg);
    if (rc)
        return op_error(t, rc);
    int d_kv = cfg->d_kv ? cfg->d_kv : cfg->d_model;
    if (params->size != vit_mha_param_count(cfg)
        || x_q->size != (size_t)cfg->batch * cfg->n_q * cfg->d_model
        || x_kv->size != (size_t)cfg->batch * cfg->n_k * d_kv)
        return op_error(t, vit_fail(VIT_EINVAL,
            "vit_op_mha: params (%zu), x_q (%zu) or x_kv (%zu) do not match the layer shape",
            params->size, x_q->size, x_kv->size));
    int shape[3] = {cfg->batch, cfg->n_q, cfg->d_model};
    vit_tensor *y = tensor_new(t, 3, shape, wants_grad(params, x_q, x_kv));
    vit_real *cache = y ? arena_reals(t, vit_mha_cache_size(cfg)) : NULL;
    if (!cache)
        return NULL;
    vit_real *work = NULL;
    if (y->grad && !(work = arena_reals(t, vit_mha_work_size(cfg))))
        return NULL;
    rc = vit_mha_forward(cfg, params->data, y->data, x_q->data, x_kv->data, cache);
    op_rec *op = op_finish(t, rc, back_mha, y, params, x_q, x_kv);
    if (!op)
        return NULL;
    op->saved[0] = cache; op->saved[1] = work;
    op->cfg.mha = *cfg;
    if (probs)
        *probs = vit_mha_probs(cfg, cache);
    return y;
}

/* ---- embeddings ------------------------------------------------------ */

static int back_patch(op_rec *op)
{
    vit_tensor *img = op->in[0], *W = op->in[1], *b = op->in[2];
    return vit_patch_embed_backward(&op->cfg.patch, img->grad, W->grad, GRAD(b), op->out->grad,
                                    op->saved[0], W->data);
}

vit_tensor *vit_op_patch_embed(vit_tape *t, const vit_patch_shape *s, vit_tensor *img,
                               vit_tensor *W, vit_tensor *b)
{
    vit_tensor *in[2] = {img, W};
    if (!op_begin(t, "vit_op_patch_embed", 2, in))
        return NULL;
    int n = s ? vit_patch_count(s) : 0;
    if (n <= 0)
        return op_error(t, vit_fail(VIT_EINVAL, "vit_op_patch_embed: invalid patch shape"));
    size_t pdim = (size_t)s->patch * s->patch * s->channels;
    if (img->size != (size_t)s->batch * s->height * s->width * s->channels
        || W->size != pdim * (size_t)s->dim || (b && b->size != (size_t)s->dim))
        return op_error(t, vit_fail(VIT_EINVAL,
            "vit_op_patch_embed: image (%zu values) or weights (%zu) do not match the shape",
            img->size, W->size));
    int shape[3] = {s->batch, n, s->dim};
    vit_tensor *y = tensor_new(t, 3, shape, wants_grad(img, W, b));
    vit_real *cols = y ? arena_reals(t, (size_t)s->batch * n * pdim) : NULL;
    if (!cols)
        return NULL;
    int rc = vit_patch_embed_forward(s, y->data, cols, img->data, W->data, b ? b->data : NULL);
    op_rec *op = op_finish(t, rc, back_patch, y, img, W, b);
    if (!op)
        return NULL;
    op->saved[0] = cols;
    op->cfg.patch = *s;
    return y;
}

static int back_cls(op_rec *op)
{
    vit_tensor *x = op->in[0], *cls = op->in[1];
    return vit_cls_prepend_backward(x->grad, cls->grad, op->out->grad, x->shape[0], x->shape[1],
                                    x->shape[2]);
}

vit_tensor *vit_op_cls_prepend(vit_tape *t, vit_tensor *x, vit_tensor *cls)
{
    vit_tensor *in[2] = {x, cls};
    if (!op_begin(t, "vit_op_cls_prepend", 2, in))
        return NULL;
    if (x->ndim != 3 || cls->size != (size_t)x->shape[2])
        return op_error(t, vit_fail(VIT_EINVAL,
            "vit_op_cls_prepend: x must be [B, N, D] and cls [D]"));
    int shape[3] = {x->shape[0], x->shape[1] + 1, x->shape[2]};
    vit_tensor *y = tensor_new(t, 3, shape, wants_grad(x, cls, NULL));
    if (!y)
        return NULL;
    int rc = vit_cls_prepend_forward(y->data, x->data, cls->data, x->shape[0], x->shape[1],
                                     x->shape[2]);
    return op_finish(t, rc, back_cls, y, x, cls, NULL) ? y : NULL;
}

static int back_pos(op_rec *op)
{
    vit_tensor *x = op->in[0], *pos = op->in[1];
    return vit_pos_add_backward(x->grad, pos->grad, op->out->grad, x->shape[0], x->shape[1],
                                x->shape[2]);
}

vit_tensor *vit_op_pos_add(vit_tape *t, vit_tensor *x, vit_tensor *pos)
{
    vit_tensor *in[2] = {x, pos};
    if (!op_begin(t, "vit_op_pos_add", 2, in))
        return NULL;
    if (x->ndim != 3 || pos->size != (size_t)x->shape[1] * x->shape[2])
        return op_error(t, vit_fail(VIT_EINVAL,
            "vit_op_pos_add: x must be [B, T, D] and pos [T, D]"));
    vit_tensor *y = tensor_new(t, 3, x->shape, wants_grad(x, pos, NULL));
    if (!y)
        return NULL;
    int rc = vit_pos_add_forward(y->data, x->data, pos->data, x->shape[0], x->shape[1], x->shape[2]);
    return op_finish(t, rc, back_pos, y, x, pos, NULL) ? y : NULL;
}

/* ---- token selection and pooling ------------------------------------- */

/* Token op: i >= 0 selects token i; i < 0 means the mean over tokens from
 * -i-1 to T-1.  One pair of functions serves both since they differ only in
 * the weight each token gets. */
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

static int back_token(op_rec *op)
{
    vit_tensor *x = op->in[0];
    int B = x->shape[0], T = x->shape[1], D = x->shape[2], first, last;
    vit_real w;
    token_weights(x, op->i, &first, &last, &w);
    for (int b = 0; b < B; b++)
        for (int k = first; k <= last; k++) {
            vit_real *dx = x->grad + ((size_t)b * T + k) * D;
            const vit_real *dy = op->out->grad + (size_t)b * D;
            for (int j = 0; j < D; j++)
                dx[j] += w * dy[j];
        }
    return VIT_OK;
}

static vit_tensor *token_op(vit_tape *t, const char *name, vit_tensor *x, int i)
{
    if (!op_begin(t, name, 1, &x))
        return NULL;
    int lo = i >= 0 ? i : -i - 1;
    if (x->ndim != 3 || lo >= x->shape[1])
        return op_error(t, vit_fail(VIT_EINVAL, "%s: x must be [B, T, D] with token %d < T", name, lo));
    int B = x->shape[0], T = x->shape[1], D = x->shape[2], first, last;
    int shape[2] = {B, D};
    vit_tensor *y = tensor_new(t, 2, shape, x->grad != NULL);
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
    op_rec *op = op_push(t, back_token, y);
    if (!op)
        return NULL;
    op->in[0] = x;
    op->i = i;
    return y;
}

vit_tensor *vit_op_token(vit_tape *t, vit_tensor *x, int index)
{
    if (index < 0) {
        vit_fail(VIT_EINVAL, "vit_op_token: index %d is negative", index);
        return t ? op_error(t, VIT_EINVAL) : NULL;
    }
    return token_op(t, "vit_op_token", x, index);
}

vit_tensor *vit_op_mean_tokens(vit_tape *t, vit_tensor *x, int first)
{
    if (first < 0) {
        vit_fail(VIT_EINVAL, "vit_op_mean_tokens: first %d is negative", first);
        return t ? op_error(t, VIT_EINVAL) : NULL;
    }
    return token_op(t, "vit_op_mean_tokens", x, -first - 1);
}

/* ---- loss ------------------------------------------------------------ */

static int back_xent(op_rec *op)
{
    vit_tensor *z = op->in[0];
    return vit_cross_entropy_backward(z->grad, op->saved[0], op->labels, z->shape[0], z->shape[1],
                                      op->f, op->out->grad[0]);
}

vit_tensor *vit_op_cross_entropy(vit_tape *t, vit_tensor *logits, const int *labels,
                                 vit_real smoothing, vit_real **probs)
{
    if (!op_begin(t, "vit_op_cross_entropy", 1, &logits))
        return NULL;
    if (logits->ndim != 2 || !labels)
        return op_error(t, vit_fail(VIT_EINVAL,
            "vit_op_cross_entropy: logits must be [B, C] and labels non-NULL"));
    int B = logits->shape[0], C = logits->shape[1];
    int one = 1;
    vit_tensor *y = tensor_new(t, 1, &one, logits->grad != NULL);
    vit_real *p = y ? arena_reals(t, (size_t)B * C) : NULL;
    int *lab = p ? arena_alloc(t, (size_t)B * sizeof *lab) : NULL;
    if (!lab)
        return NULL;
    memcpy(lab, labels, (size_t)B * sizeof *lab);
    int rc = vit_cross_entropy_forward(y->data, p, logits->data, lab, B, C, smoothing);
    op_rec *op = op_finish(t, rc, back_xent, y, logits, NULL, NULL);
    if (!op)
        return NULL;
    op->saved[0] = p;
    op->labels = lab;
    op->f = smoothing;
    if (probs)
        *probs = p;
    return y;
}

/* ---- backward -------------------------------------------------------- */

int vit_tape_backward(vit_tape *t, vit_tensor *loss) { return vit_tape_backward_seed(t, loss, 1); }

int vit_tape_backward_seed(vit_tape *t, vit_tensor *loss, vit_real seed)
{
    if (!t)
        return vit_fail(VIT_EINVAL, "vit_tape_backward: tape is NULL");
    if (t->status != VIT_OK)
        return vit_fail(t->status, "vit_tape_backward: the forward pass failed (%s)",
                        vit_status_name(t->status));
    if (!loss || loss->size != 1 || !loss->grad)
        return tape_fail(t, vit_fail(VIT_EINVAL,
            "vit_tape_backward: loss must be a one-element tensor with a gradient"));
    loss->grad[0] = seed;
    for (int i = t->nops - 1; i >= 0; i--) {
        op_rec *op = &t->ops[i];
        if (!op->out->grad)
            continue; /* nothing upstream needs a gradient */
        int rc = op->backward(op);
        if (rc)
            return tape_fail(t, rc);
    }
    return VIT_OK;
}

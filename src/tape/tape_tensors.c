/*
 * The tape's tensors and their gradients (the engine's second file, beside
 * src/tape/tape.c): op outputs, views and leaves, and the pool that lends
 * gradient buffers during the backward, with the helpers op backwards
 * write their inputs' gradients through (src/tape/tape_internal.h).
 */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "mixed.h"
#include "tape_engine.h"
#include "vit/bf16.h"

static gblock *pool_take(vit_tape *t, size_t n);

/* ---- Tensors ----------------------------------------------------------- */

int vit_tape_shape_size(vit_tape *t, const char *fn, int ndim, const int *shape, size_t *size)
{
    if (!shape || ndim < 1 || ndim > VIT_TENSOR_MAX_DIMS)
        return vit_tape_fail(t, vit_fail(VIT_EINVAL, "%s: %s", fn,
                                         !shape ? "shape is NULL" : "ndim must be 1..4"));
    *size = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] <= 0)
            return vit_tape_fail(t, vit_fail(VIT_EINVAL, "%s: shape[%d] = %d must be positive",
                                             fn, d, shape[d]));
        if (!vit_mul_size(size, *size, (size_t)shape[d]))
            return vit_tape_fail(t, VIT_ENOMEM);
    }
    return VIT_OK;
}

vit_tensor *vit_tape_header(vit_tape *t, int ndim, const int *shape, size_t size)
{
    node *x = vit_tape_arena(t, sizeof *x);
    if (!x)
        return NULL;
    memset(x, 0, sizeof *x);
    x->t.ndim = ndim;
    memcpy(x->t.shape, shape, (size_t)ndim * sizeof *shape);
    x->t.size = size;
    return &x->t;
}

vit_tensor *vit_tape_output(vit_tape *t, int ndim, const int *shape, int requires_grad)
{
    size_t size;
    if (vit_tape_shape_size(t, "vit_tape", ndim, shape, &size))
        return NULL;
    vit_tensor *x = vit_tape_header(t, ndim, shape, size);
    if (!x || !(x->data = vit_tape_reals(t, size)))
        return NULL;
    x->requires_grad = requires_grad && t->grad;
    return x;
}

vit_tensor *vit_tape_output_kept(vit_tape *t, int ndim, const int *shape, int requires_grad,
                                 int keep)
{
    if (keep == VIT_KEEP_FLOAT || !t->grad || !vit_mixed_on())
        return vit_tape_output(t, ndim, shape, requires_grad);
    size_t size, bytes;
    if (vit_tape_shape_size(t, "vit_tape", ndim, shape, &size))
        return NULL;
    vit_tensor *x = vit_tape_header(t, ndim, shape, size);
    if (!x)
        return NULL;
    int k = t->ring_next;
    if (size > t->ring_cap[k]) {
        vit_real *p = NULL;
        if (!vit_mul_size(&bytes, size, sizeof *p)
            || posix_memalign((void **)&p, VIT_TAPE_ALIGN, bytes)) {
            vit_fail(VIT_ENOMEM, "vit_tape: out of memory for %zu reals of kept values", size);
            vit_tape_fail(t, VIT_ENOMEM);
            return NULL;
        }
        free(t->ring[k]);
        t->ring[k] = p;
        t->ring_cap[k] = size;
    }
    t->ring_next = 1 - k;
    x->data = t->ring[k];
    x->requires_grad = requires_grad;
    vit_tape_node(x)->kept = (unsigned char)keep;
    return x;
}

const uint16_t *vit_tape_half(const vit_tensor *x)
{
    return ((const node *)x)->half;
}

uint16_t *vit_tape_half_new(vit_tape *t, vit_tensor *y)
{
    node *n = vit_tape_node(y);
    size_t bytes;
    if (n->kept != VIT_KEEP_BF16)
        return NULL;
    if (!vit_mul_size(&bytes, y->size, sizeof *n->half)
        || !(n->half = vit_tape_arena(t, bytes))) {
        vit_tape_fail(t, VIT_ENOMEM);
        return NULL;
    }
    return n->half;
}

const vit_real *vit_tape_values(vit_tape *t, const vit_tensor *x, void **lease)
{
    const node *n = (const node *)x;
    *lease = NULL;
    if (!n->kept)
        return x->data;
    if (!n->half) {
        vit_fail(VIT_EINVAL, "vit_tape: a backward read the values of an output kept as none");
        vit_tape_fail(t, VIT_EINVAL);
        return NULL;
    }
#ifdef VIT_DOUBLE
    return NULL; /* never kept: no mixed precision in the float64 library */
#else
    gblock *b = pool_take(t, x->size);
    if (!b)
        return NULL;
    *lease = b;
    vit_bf16_to_floats(b->p, n->half, x->size);
    return b->p;
#endif
}

vit_tensor *vit_tape_tensor(vit_tape *t, int ndim, const int *shape)
{
    if (!t) {
        vit_fail(VIT_EINVAL, "vit_tape_tensor: tape is NULL");
        return NULL;
    }
    size_t size;
    if (t->status != VIT_OK || vit_tape_shape_size(t, "vit_tape_tensor", ndim, shape, &size))
        return NULL;
    return vit_tape_output(t, ndim, shape, 0);
}

vit_tensor *vit_tape_leaf(vit_tape *t, vit_real *data, vit_real *grad, int ndim,
                          const int *shape)
{
    if (!t) {
        vit_fail(VIT_EINVAL, "vit_tape_leaf: tape is NULL");
        return NULL;
    }
    if (!data)
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "vit_tape_leaf: data is NULL"));
    size_t size;
    if (vit_tape_shape_size(t, "vit_tape_leaf", ndim, shape, &size))
        return NULL;
    vit_tensor *x = vit_tape_header(t, ndim, shape, size);
    if (!x)
        return NULL;
    x->data = data;
    x->grad = grad;
    x->requires_grad = grad != NULL;
    vit_tape_node(x)->leaf = 1;
    t->grad_leaves += grad != NULL;
    return x;
}

int vit_tape_retain_grad(vit_tape *t, vit_tensor *x)
{
    if (!t || !x)
        return vit_fail(VIT_EINVAL, "vit_tape_retain_grad: %s is NULL", !t ? "tape" : "x");
    if (t->backward_done)
        return vit_fail(VIT_EINVAL, "vit_tape_retain_grad: the backward has run; retain "
                        "gradients before it");
    node *n = vit_tape_node(x);
    if (n->leaf || !x->requires_grad)
        return vit_fail(VIT_EINVAL, "vit_tape_retain_grad: x is %s", n->leaf
                        ? "a leaf (its gradient is the caller's buffer)"
                        : "a tensor that requires no gradient");
    n->retain = 1;
    return VIT_OK;
}

/* ---- Gradient pool ---------------------------------------------------- */

/* Lends the smallest free buffer of at least n reals, or makes one. */
static gblock *pool_take(vit_tape *t, size_t n)
{
    gblock *best = NULL;
    for (gblock *b = t->pool; b; b = b->next)
        if (!b->busy && b->cap >= n && (!best || b->cap < best->cap))
            best = b;
    size_t bytes;
    if (!best && !vit_mul_size(&bytes, n, sizeof(vit_real))) {
        vit_tape_fail(t, VIT_ENOMEM);
        return NULL;
    }
    if (!best) {
        best = calloc(1, sizeof *best);
        if (!best || posix_memalign((void **)&best->p, VIT_TAPE_ALIGN, bytes)) {
            free(best);
            vit_fail(VIT_ENOMEM, "vit_tape_backward: out of memory for a %zu-value gradient", n);
            vit_tape_fail(t, VIT_ENOMEM);
            return NULL;
        }
        best->cap = n;
        best->next = t->pool;
        t->pool = best;
    }
    best->busy = 1;
    return best;
}

vit_real *vit_tape_grad_out(vit_tape *t, vit_tensor *x, int *fresh)
{
    *fresh = 0;
    if (!x || !x->requires_grad)
        return NULL;
    node *n = vit_tape_node(x);
    if (x->grad || n->leaf)
        return x->grad;
    gblock *b = pool_take(t, x->size);
    if (!b)
        return NULL;
    n->gb = b;
    x->grad = b->p;
    *fresh = 1;
    return x->grad;
}

vit_real *vit_tape_grad_acc(vit_tape *t, vit_tensor *x)
{
    int fresh;
    vit_real *g = vit_tape_grad_out(t, x, &fresh);
    if (g && fresh)
        memset(g, 0, x->size * sizeof *g);
    return g;
}

int vit_tape_grad_take(vit_tensor *x, vit_tensor *y)
{
    node *a = vit_tape_node(x), *b = vit_tape_node(y);
    if (a->leaf || x->grad || !x->requires_grad || !b->gb || b->retain || x->size != y->size)
        return 0;
    a->gb = b->gb;
    x->grad = y->grad;
    b->gb = NULL;
    y->grad = NULL;
    return 1;
}

int vit_tape_grad_add(vit_tape *t, vit_tensor *x, const vit_real *src)
{
    if (!x->requires_grad)
        return VIT_OK;
    int fresh;
    vit_real *g = vit_tape_grad_out(t, x, &fresh);
    if (!g)
        return t->status;
    if (fresh)
        memcpy(g, src, x->size * sizeof *g);
    else
        for (size_t i = 0; i < x->size; i++)
            g[i] += src[i];
    return VIT_OK;
}

int vit_tape_grad_pass(vit_tape *t, vit_tensor *x, vit_tensor *y, int give)
{
    if (give && vit_tape_grad_take(x, y))
        return VIT_OK;
    return vit_tape_grad_add(t, x, y->grad);
}

vit_real *vit_tape_dy_writable(vit_tape *t, vit_tensor *y, void **lease)
{
    node *n = vit_tape_node(y);
    *lease = NULL;
    if (n->gb && !n->retain)
        return y->grad;
    gblock *b = pool_take(t, y->size);
    *lease = b;
    return b ? b->p : NULL;
}

vit_real *vit_tape_lease(vit_tape *t, size_t n, void **lease)
{
    gblock *b = pool_take(t, n);
    *lease = b;
    return b ? b->p : NULL;
}

void vit_tape_lease_end(void *lease)
{
    if (lease)
        ((gblock *)lease)->busy = 0;
}

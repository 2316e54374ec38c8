/*
 * The reverse-mode tape: an arena for tensors and saved intermediates, a
 * list of op records, a pool that lends gradient buffers during the
 * backward, and the backward pass that walks the list in reverse.
 *
 * Each op is a pair of plain functions: vit_op_X() checks shapes, allocates
 * its output from the arena, calls the kernel's forward and records an
 * op_rec; back_X() calls the kernel's backward from that record.
 *
 * Gradients of op-made tensors live only while they are in flight: the
 * first backward that writes one borrows a buffer from the pool (and
 * overwrites it, or zeroes it for kernels that can only accumulate); the
 * buffer goes back to the pool right after the tensor's own op has run its
 * backward, which is the last reader.  So the backward holds the gradients
 * crossing one point of the graph, not one per activation.
 */
#include "vit/tape.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "activations_internal.h"
#include "layernorm_internal.h"
#include "blas.h"
#include "error.h"
#include "threads.h"
#include "vit/activations.h"
#include "vit/layernorm.h"
#include "vit/linear.h"
#include "vit/loss.h"
#include "vit/pool.h"

/* ---- Arena ----------------------------------------------------------- */

#define ARENA_ALIGN 64
#define ARENA_FIRST_CHUNK (1u << 20)
#define MAX_INPUTS 16

/* Chunks in allocation order; `cur` is the one being filled.  Chunks after
 * cur are empty (a release moved back over them), and are reused before a
 * new one is made. */
typedef struct chunk {
    struct chunk *next;
    size_t cap, used;
    unsigned char *base; /* aligned start of the usable bytes */
} chunk;

/* A gradient buffer lent by the pool. */
typedef struct gblock {
    struct gblock *next;
    size_t cap; /* in reals */
    int busy;
    vit_real *p;
} gblock;

/* The tape's own view of a tensor: every vit_tensor it hands out is the
 * first member of a node, so a vit_tensor * from this tape is a node *. */
typedef struct node {
    vit_tensor t;
    gblock *gb;        /* the pool buffer behind t.grad, or NULL */
    unsigned char leaf, retain;
} node;

typedef struct op_rec op_rec;
typedef int (*back_fn)(vit_tape *t, op_rec *op);

typedef struct custom_rec {
    const char *name;
    vit_op_fn backward;
    vit_graph_fn graph;
    void *ctx;
} custom_rec;

typedef int (*fwd_fn)(op_rec *op);

struct op_rec {
    back_fn backward;
    fwd_fn forward;      /* set by ops whose forward can wait (see pending) */
    node *out;
    node **in;
    int n_in;
    vit_real *saved[3];
    int *ints;
    vit_real f;
    int i;
    union {
        vit_mha mha;
        vit_patch_shape patch;
        custom_rec custom;
    } cfg;
};

struct vit_tape {
    chunk *chunks, *cur;
    size_t high;          /* most arena bytes in use at once since the reset */
    op_rec *ops;
    int nops, cap_ops;
    int status;
    int grad;             /* grad mode */
    int backward_done;
    long grad_leaves;     /* leaves made with a gradient buffer */
    gblock *pool;
    /* One scratch buffer for what nobody keeps past an op: no-grad
     * intermediates, the attention backward's work (shared by every
     * layer), a checkpoint's output on its way out.  These never overlap:
     * a no-grad forward runs no backward. */
    vit_real *scratch;
    size_t scratch_cap;
    vit_tape *sub;        /* recomputation tape of vit_op_checkpoint */
    /* While a checkpoint's sub-graph is recomputed, the forward of its last
     * op waits (pending = 1 + its index) until another op reads its output:
     * none does, and the backward needs only its inputs. */
    int recomputing, pending;
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

static size_t arena_pos(const vit_tape *t)
{
    size_t pos = 0;
    for (const chunk *c = t->chunks; c; c = c->next) {
        pos += c->used;
        if (c == t->cur)
            break;
    }
    return pos;
}

/* Bump allocation in the current chunk, else the next empty one that fits,
 * else a new chunk at the end.  reset() folds the chunks into one of the
 * high-water size, so steady state is one block. */
static void *arena_alloc(vit_tape *t, size_t bytes)
{
    bytes = (bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    chunk *c = t->cur;
    while (c && c->cap - c->used < bytes)
        c = c->next;
    if (!c) {
        chunk *last = t->chunks;
        while (last && last->next)
            last = last->next;
        size_t cap = bytes > ARENA_FIRST_CHUNK ? bytes : ARENA_FIRST_CHUNK;
        if (last && cap < last->cap)
            cap = last->cap; /* grow geometrically-ish within a step */
        c = chunk_new(cap);
        if (!c) {
            vit_fail(VIT_ENOMEM, "vit_tape: out of memory allocating %zu bytes", cap);
            tape_fail(t, VIT_ENOMEM);
            return NULL;
        }
        if (last)
            last->next = c;
        else
            t->chunks = c;
    }
    t->cur = c;
    void *p = c->base + c->used;
    c->used += bytes;
    size_t pos = arena_pos(t);
    if (pos > t->high)
        t->high = pos;
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

/* A growable malloc'd buffer of at least n reals (kept across steps). */
static vit_real *grow(vit_tape *t, vit_real **buf, size_t *cap, size_t n)
{
    if (n > *cap) {
        vit_real *p = NULL;
        size_t bytes;
        if (!vit_mul_size(&bytes, n, sizeof *p) || posix_memalign((void **)&p, ARENA_ALIGN, bytes)) {
            vit_fail(VIT_ENOMEM, "vit_tape: out of memory for %zu reals of scratch", n);
            tape_fail(t, VIT_ENOMEM);
            return NULL;
        }
        free(*buf);
        *buf = p;
        *cap = n;
    }
    return *buf;
}

/* Memory for an intermediate an op keeps for its backward: from the arena
 * in grad mode; in no-grad mode from one scratch buffer that the next op
 * reuses, since nothing will read it again. */
static vit_real *saved_reals(vit_tape *t, size_t n)
{
    return t->grad ? arena_reals(t, n) : grow(t, &t->scratch, &t->scratch_cap, n);
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
        tape_fail(t, VIT_ENOMEM);
        return NULL;
    }
    if (!best) {
        best = calloc(1, sizeof *best);
        if (!best || posix_memalign((void **)&best->p, ARENA_ALIGN, bytes)) {
            free(best);
            vit_fail(VIT_ENOMEM, "vit_tape_backward: out of memory for a %zu-value gradient", n);
            tape_fail(t, VIT_ENOMEM);
            return NULL;
        }
        best->cap = n;
        best->next = t->pool;
        t->pool = best;
    }
    best->busy = 1;
    return best;
}

static void grad_drop(node *x)
{
    if (x->gb) {
        x->gb->busy = 0;
        x->gb = NULL;
        x->t.grad = NULL;
    }
}

/* The gradient buffer of input x to write into, or NULL when x needs none.
 * *fresh is set when the buffer was just lent: its contents are garbage
 * and the caller's first write must overwrite it. */
static vit_real *grad_out(vit_tape *t, node *x, int *fresh)
{
    *fresh = 0;
    if (!x || !x->t.requires_grad)
        return NULL;
    if (x->t.grad || x->leaf)
        return x->t.grad;
    gblock *b = pool_take(t, x->t.size);
    if (!b)
        return NULL;
    x->gb = b;
    x->t.grad = b->p;
    *fresh = 1;
    return x->t.grad;
}

/* The same for kernels that can only accumulate: a fresh buffer is zeroed. */
static vit_real *grad_acc(vit_tape *t, node *x)
{
    int fresh;
    vit_real *g = grad_out(t, x, &fresh);
    if (g && fresh)
        memset(g, 0, x->t.size * sizeof *g);
    return g;
}

/* Hands y's gradient buffer to x when x has none yet, x and y have the
 * same size and the buffer is the pool's to give (y not retained): the
 * caller then computes x's gradient in place.  Returns 1 if it did. */
static int grad_take(node *x, node *y)
{
    if (x->leaf || x->t.grad || !x->t.requires_grad || !y->gb || y->retain
        || x->t.size != y->t.size)
        return 0;
    x->gb = y->gb;
    x->t.grad = y->t.grad;
    y->gb = NULL;
    y->t.grad = NULL;
    return 1;
}

/* src (x->t.size values) into x's gradient: copied when x's buffer is
 * fresh, added otherwise.  Nothing to do when x needs no gradient. */
static int grad_add(vit_tape *t, node *x, const vit_real *src)
{
    if (!x->t.requires_grad)
        return VIT_OK;
    int fresh;
    vit_real *g = grad_out(t, x, &fresh);
    if (!g)
        return t->status;
    if (fresh)
        memcpy(g, src, x->t.size * sizeof *g);
    else
        for (size_t i = 0; i < x->t.size; i++)
            g[i] += src[i];
    return VIT_OK;
}

/* dy into x's gradient by grad_add or, if `give` (the caller's last read
 * of dy), handed over by grad_take. */
static int grad_pass(vit_tape *t, node *x, node *y, int give)
{
    if (give && grad_take(x, y))
        return VIT_OK;
    return grad_add(t, x, y->t.grad);
}

/* ---- The tape ---------------------------------------------------------- */

vit_tape *vit_tape_new(void)
{
    vit_tape *t = calloc(1, sizeof *t);
    if (!t)
        vit_fail(VIT_ENOMEM, "vit_tape_new: out of memory");
    else
        t->grad = 1;
    return t;
}

static void free_chunks(chunk *c)
{
    for (chunk *n; c; c = n) {
        n = c->next;
        free(c);
    }
}

void vit_tape_free(vit_tape *t)
{
    if (!t)
        return;
    free_chunks(t->chunks);
    for (gblock *b = t->pool, *n; b; b = n) {
        n = b->next;
        free(b->p);
        free(b);
    }
    free(t->ops);
    free(t->scratch);
    vit_tape_free(t->sub);
    free(t);
}

void vit_tape_reset(vit_tape *t)
{
    if (!t)
        return;
    if (t->chunks && t->chunks->next) {
        /* Several chunks: one that holds the step's high-water mark. */
        free_chunks(t->chunks);
        t->chunks = chunk_new(t->high);
    }
    if (t->chunks)
        t->chunks->used = 0;
    t->cur = t->chunks;
    t->high = 0;
    for (gblock *b = t->pool; b; b = b->next)
        b->busy = 0;
    t->nops = 0;
    t->pending = 0;
    t->status = VIT_OK;
    t->backward_done = 0;
    t->grad_leaves = 0;
}

int vit_tape_fail(vit_tape *t, int code) { return t ? tape_fail(t, code) : code; }

int vit_tape_status(const vit_tape *t) { return t ? t->status : VIT_EINVAL; }

size_t vit_tape_bytes(const vit_tape *t)
{
    if (!t)
        return 0;
    size_t n = t->cap_ops * sizeof *t->ops + t->scratch_cap * sizeof(vit_real);
    for (const chunk *c = t->chunks; c; c = c->next)
        n += c->cap;
    for (const gblock *b = t->pool; b; b = b->next)
        n += b->cap * sizeof(vit_real);
    return n + vit_tape_bytes(t->sub);
}

int vit_tape_op_count(const vit_tape *t) { return t ? t->nops : 0; }

int vit_tape_set_grad(vit_tape *t, int enabled)
{
    if (!t)
        return vit_fail(VIT_EINVAL, "vit_tape_set_grad: tape is NULL");
    int old = t->grad;
    t->grad = enabled != 0;
    return old;
}

int vit_tape_grad_enabled(const vit_tape *t) { return t ? t->grad : 0; }

size_t vit_tape_mark(const vit_tape *t) { return t ? arena_pos(t) : 0; }

/* Arena position of p, a pointer into one of the chunks (SIZE_MAX if none). */
static size_t ptr_pos(const vit_tape *t, const void *p)
{
    const unsigned char *q = p;
    size_t base = 0;
    for (const chunk *c = t->chunks; c; c = c->next) {
        if (q >= c->base && q < c->base + c->cap)
            return base + (size_t)(q - c->base);
        base += c->used;
    }
    return SIZE_MAX;
}

int vit_tape_release(vit_tape *t, size_t mark)
{
    if (!t)
        return vit_fail(VIT_EINVAL, "vit_tape_release: tape is NULL");
    size_t pos = arena_pos(t);
    if (mark > pos)
        return vit_fail(VIT_EINVAL, "vit_tape_release: mark %zu is beyond the arena's position %zu",
                        mark, pos);
    /* A record made since the mark would point into the released memory
     * (each record's input list comes from the arena). */
    if (t->nops && ptr_pos(t, t->ops[t->nops - 1].in) >= mark)
        return vit_fail(VIT_EINVAL, "vit_tape_release: ops were recorded since the mark");
    size_t base = 0;
    for (chunk *c = t->chunks; c; c = c->next) {
        if (mark <= base + c->used) {
            c->used = mark - base;
            t->cur = c;
            for (chunk *n = c->next; n; n = n->next)
                n->used = 0;
            break;
        }
        base += c->used;
    }
    return VIT_OK;
}

void *vit_tape_alloc(vit_tape *t, size_t n)
{
    if (!t) {
        vit_fail(VIT_EINVAL, "vit_tape_alloc: tape is NULL");
        return NULL;
    }
    if (t->status != VIT_OK) {
        vit_fail(t->status, "vit_tape_alloc: the tape holds an error (%s)",
                 vit_status_name(t->status));
        return NULL;
    }
    return arena_alloc(t, n ? n : 1);
}

/* ---- Tensors and op records ------------------------------------------ */

/* Checks a shape and gives its product; VIT_OK or an error (recorded). */
static int shape_size(vit_tape *t, const char *fn, int ndim, const int *shape, size_t *size)
{
    if (!shape || ndim < 1 || ndim > VIT_TENSOR_MAX_DIMS)
        return tape_fail(t, vit_fail(VIT_EINVAL, "%s: %s", fn,
                                     !shape ? "shape is NULL" : "ndim must be 1..4"));
    *size = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] <= 0)
            return tape_fail(t, vit_fail(VIT_EINVAL, "%s: shape[%d] = %d must be positive", fn, d,
                                         shape[d]));
        if (!vit_mul_size(size, *size, (size_t)shape[d]))
            return tape_fail(t, VIT_ENOMEM);
    }
    return VIT_OK;
}

static node *node_new(vit_tape *t, int ndim, const int *shape, size_t size)
{
    node *x = arena_alloc(t, sizeof *x);
    if (!x)
        return NULL;
    memset(x, 0, sizeof *x);
    x->t.ndim = ndim;
    memcpy(x->t.shape, shape, (size_t)ndim * sizeof *shape);
    x->t.size = size;
    return x;
}

/* An op's output: values from the arena, no gradient buffer (the backward
 * lends one when it gets there). */
static node *tensor_new(vit_tape *t, int ndim, const int *shape, int requires_grad)
{
    size_t size;
    if (shape_size(t, "vit_tape", ndim, shape, &size))
        return NULL;
    node *x = node_new(t, ndim, shape, size);
    if (!x || !(x->t.data = arena_reals(t, size)))
        return NULL;
    x->t.requires_grad = requires_grad && t->grad;
    return x;
}

vit_tensor *vit_tape_tensor(vit_tape *t, int ndim, const int *shape)
{
    if (!t) {
        vit_fail(VIT_EINVAL, "vit_tape_tensor: tape is NULL");
        return NULL;
    }
    if (t->status != VIT_OK)
        return NULL;
    size_t size;
    if (shape_size(t, "vit_tape_tensor", ndim, shape, &size))
        return NULL;
    node *x = tensor_new(t, ndim, shape, 0);
    return x ? &x->t : NULL;
}

vit_tensor *vit_tape_leaf(vit_tape *t, vit_real *data, vit_real *grad, int ndim,
                          const int *shape)
{
    if (!t) {
        vit_fail(VIT_EINVAL, "vit_tape_leaf: tape is NULL");
        return NULL;
    }
    if (!data) {
        tape_fail(t, vit_fail(VIT_EINVAL, "vit_tape_leaf: data is NULL"));
        return NULL;
    }
    size_t size;
    if (shape_size(t, "vit_tape_leaf", ndim, shape, &size))
        return NULL;
    node *x = node_new(t, ndim, shape, size);
    if (!x)
        return NULL;
    x->t.data = data;
    x->t.grad = grad;
    x->t.requires_grad = grad != NULL;
    x->leaf = 1;
    t->grad_leaves += grad != NULL;
    return &x->t;
}

int vit_tape_retain_grad(vit_tape *t, vit_tensor *x)
{
    if (!t || !x)
        return vit_fail(VIT_EINVAL, "vit_tape_retain_grad: %s is NULL", !t ? "tape" : "x");
    node *n = (node *)x;
    if (t->backward_done)
        return vit_fail(VIT_EINVAL, "vit_tape_retain_grad: the backward has run; retain "
                        "gradients before it");
    if (n->leaf || !x->requires_grad)
        return vit_fail(VIT_EINVAL, "vit_tape_retain_grad: x is %s", n->leaf
                        ? "a leaf (its gradient is the caller's buffer)"
                        : "a tensor that requires no gradient");
    n->retain = 1;
    return VIT_OK;
}

static op_rec *op_push(vit_tape *t, back_fn fn, node *out, int n_in)
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
    node **in = arena_alloc(t, (size_t)n_in * sizeof *in);
    if (!in)
        return NULL;
    op_rec *op = &t->ops[t->nops++];
    memset(op, 0, sizeof *op);
    op->backward = fn;
    op->out = out;
    op->in = in;
    op->n_in = n_in;
    return op;
}

/* Runs the forward that waits, if any: a new op may read its output. */
static int flush_pending(vit_tape *t)
{
    if (!t->pending)
        return VIT_OK;
    op_rec *op = &t->ops[t->pending - 1];
    t->pending = 0;
    int rc = op->forward(op);
    return rc ? tape_fail(t, rc) : VIT_OK;
}

/* Common entry check: a usable tape, no earlier error, non-NULL inputs. */
static int op_begin(vit_tape *t, const char *name, int n, vit_tensor *const *in)
{
    if (!t) {
        vit_fail(VIT_EINVAL, "%s: tape is NULL", name);
        return 0;
    }
    if (t->status != VIT_OK || flush_pending(t) != VIT_OK)
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

/* Whether an op's output needs a record: grad mode and an input that
 * requires a gradient. */
static int wants_grad(vit_tape *t, int n, vit_tensor *const *in)
{
    if (!t->grad)
        return 0;
    for (int i = 0; i < n; i++)
        if (in[i] && in[i]->requires_grad)
            return 1;
    return 0;
}

/* The common tail of an op: the kernel's return code rc, then (when the
 * output requires a gradient) the op's record with its inputs.  Returns
 * the record, a dummy non-NULL pointer when nothing is recorded, or NULL
 * with the tape's error set. */
static op_rec no_record;

static op_rec *op_finish(vit_tape *t, int rc, back_fn fn, node *y, int n,
                         vit_tensor *const *in)
{
    if (rc) {
        op_error(t, rc);
        return NULL;
    }
    if (!y->t.requires_grad)
        return &no_record;
    op_rec *op = op_push(t, fn, y, n);
    if (!op)
        return NULL;
    for (int i = 0; i < n; i++)
        op->in[i] = (node *)in[i];
    return op;
}

static int last_dim(const vit_tensor *x) { return x->shape[x->ndim - 1]; }

/* Rows of x when its last dimension is the feature dimension. */
static int rows_of(const vit_tensor *x) { return (int)(x->size / (size_t)last_dim(x)); }

#define IN(k) (&op->in[k]->t)
#define DY (op->out->t.grad)

/* ---- linear ---------------------------------------------------------- */

static int back_linear(vit_tape *t, op_rec *op)
{
    const vit_tensor *x = IN(0), *W = IN(1);
    int n = rows_of(x), in = W->shape[0], out = W->shape[1], fresh;
    vit_real *dx = grad_out(t, op->in[0], &fresh);
    if (!dx && x->requires_grad)
        return t->status;
    if (dx) /* dx[n, in] (= or +=) dy[n, out] W[in, out]^T */
        vit_pgemm(CblasNoTrans, CblasTrans, n, in, out, 1, DY, out, W->data, out, fresh ? 0 : 1,
                  dx, in);
    vit_real *dW = grad_acc(t, op->in[1]);
    vit_real *db = op->in[2] ? grad_acc(t, op->in[2]) : NULL;
    if (!dW && !db)
        return t->status;
    return vit_linear_backward(NULL, dW, db, DY, x->data, W->data, n, in, out);
}

vit_tensor *vit_op_linear(vit_tape *t, vit_tensor *x, vit_tensor *W, vit_tensor *b)
{
    vit_tensor *in[3] = {x, W, b};
    if (!op_begin(t, "vit_op_linear", 2, in))
        return NULL;
    if (W->ndim != 2 || last_dim(x) != W->shape[0] || (b && (int)b->size != W->shape[1]))
        return op_error(t, vit_fail(VIT_EINVAL,
            "vit_op_linear: x width %d, W [%d, %d], b %zu do not agree", last_dim(x),
            W->shape[0], W->ndim > 1 ? W->shape[1] : 0, b ? b->size : 0));
    int shape[VIT_TENSOR_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = W->shape[1];
    node *y = tensor_new(t, x->ndim, shape, wants_grad(t, 3, in));
    if (!y)
        return NULL;
    int rc = vit_linear_forward(y->t.data, x->data, W->data, b ? b->data : NULL, rows_of(x),
                                W->shape[0], W->shape[1]);
    return op_finish(t, rc, back_linear, y, 3, in) ? &y->t : NULL;
}

/* in: x, W, b (or NULL), r.  Every read of dy before r may take it. */
static int back_linear_add(vit_tape *t, op_rec *op)
{
    int rc = back_linear(t, op);
    return rc ? rc : grad_pass(t, op->in[3], op->out, 1);
}

/* y = r + b row by row, then one GEMM adds x W onto it. */
static void linear_add(vit_tensor *y, const vit_tensor *x, const vit_tensor *W,
                       const vit_tensor *b, const vit_tensor *r)
{
    int n = rows_of(x), k = W->shape[0], m = W->shape[1];
    for (int i = 0; i < n; i++) {
        vit_real *yi = y->data + (size_t)i * m;
        const vit_real *ri = r->data + (size_t)i * m;
        if (b)
            for (int j = 0; j < m; j++)
                yi[j] = ri[j] + b->data[j];
        else
            memcpy(yi, ri, (size_t)m * sizeof *yi);
    }
    vit_pgemm(CblasNoTrans, CblasNoTrans, n, m, k, 1, x->data, k, W->data, m, 1, y->data, m);
}

static int fwd_linear_add(op_rec *op)
{
    linear_add(&op->out->t, IN(0), IN(1), op->in[2] ? IN(2) : NULL, IN(3));
    return VIT_OK;
}

vit_tensor *vit_op_linear_add(vit_tape *t, vit_tensor *x, vit_tensor *W, vit_tensor *b,
                              vit_tensor *r)
{
    static const char fn[] = "vit_op_linear_add";
    vit_tensor *in[4] = {x, W, b, r};
    if (!op_begin(t, fn, 2, in) || !op_begin(t, fn, 1, in + 3))
        return NULL;
    if (W->ndim != 2 || last_dim(x) != W->shape[0] || (b && (int)b->size != W->shape[1])
        || r->ndim != x->ndim || last_dim(r) != W->shape[1]
        || memcmp(r->shape, x->shape, (size_t)(x->ndim - 1) * sizeof *x->shape))
        return op_error(t, vit_fail(VIT_EINVAL,
            "%s: x width %d, W [%d, %d], b %zu and r (%zu values, width %d) do not agree", fn,
            last_dim(x), W->shape[0], W->ndim > 1 ? W->shape[1] : 0, b ? b->size : 0, r->size,
            last_dim(r)));
    node *y = tensor_new(t, r->ndim, r->shape, wants_grad(t, 4, in));
    if (!y)
        return NULL;
    op_rec *op = op_finish(t, VIT_OK, back_linear_add, y, 4, in);
    if (!op)
        return NULL;
    if (op == &no_record) {
        linear_add(&y->t, x, W, b, r);
        return &y->t;
    }
    op->forward = fwd_linear_add;
    if (t->recomputing)
        t->pending = t->nops;
    else
        fwd_linear_add(op);
    return &y->t;
}

/* ---- linear + bias + GELU (the MLP's first layer) --------------------- */

/* in: x, W, b (or NULL); saved[0]: GELU'(u) of the pre-activation
 * u = x W + b, which the forward computed beside GELU(u).  The GELU's
 * gradient overwrites dy's buffer in place when the pool lent it (else a
 * buffer borrowed for the op), then dW, db and dx read it. */
static int back_linear_gelu(vit_tape *t, op_rec *op)
{
    const vit_tensor *x = IN(0), *W = IN(1);
    int n = rows_of(x), in = W->shape[0], out = W->shape[1], fresh;
    vit_real *db = op->in[2] ? grad_acc(t, op->in[2]) : NULL;
    vit_real *dW = grad_acc(t, op->in[1]);
    if (t->status)
        return t->status;
    gblock *tmp = NULL;
    vit_real *du = DY;
    if (!op->out->gb || op->out->retain) {
        tmp = pool_take(t, op->out->t.size);
        if (!tmp)
            return t->status;
        du = tmp->p;
    }
    vit_bias_gelu_backward(du, db, DY, op->saved[0], n, out);
    if (dW) /* dW[in, out] += x[n, in]^T du[n, out] */
        vit_pgemm(CblasTrans, CblasNoTrans, in, out, n, 1, x->data, in, du, out, 1, dW, out);
    vit_real *dx = grad_out(t, op->in[0], &fresh);
    if (dx) /* dx[n, in] (= or +=) du[n, out] W[in, out]^T */
        vit_pgemm(CblasNoTrans, CblasTrans, n, in, out, 1, du, out, W->data, out, fresh ? 0 : 1,
                  dx, in);
    if (tmp)
        tmp->busy = 0;
    return t->status;
}

vit_tensor *vit_op_linear_gelu(vit_tape *t, vit_tensor *x, vit_tensor *W, vit_tensor *b)
{
    static const char fn[] = "vit_op_linear_gelu";
    vit_tensor *in[3] = {x, W, b};
    if (!op_begin(t, fn, 2, in))
        return NULL;
    if (W->ndim != 2 || last_dim(x) != W->shape[0] || (b && (int)b->size != W->shape[1]))
        return op_error(t, vit_fail(VIT_EINVAL, "%s: x width %d, W [%d, %d], b %zu do not agree",
            fn, last_dim(x), W->shape[0], W->ndim > 1 ? W->shape[1] : 0, b ? b->size : 0));
    int shape[VIT_TENSOR_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = W->shape[1];
    int grad = wants_grad(t, 3, in), n = rows_of(x), k = W->shape[0], m = W->shape[1];
    node *y = tensor_new(t, x->ndim, shape, grad);
    /* Without a record nothing is kept: GELU in place.  With one, u ends
     * up holding GELU'(x W + b) (vit_bias_gelu_forward). */
    vit_real *u = !y ? NULL : grad ? saved_reals(t, y->t.size) : y->t.data;
    if (!u)
        return NULL;
    vit_pgemm(CblasNoTrans, CblasNoTrans, n, m, k, 1, x->data, k, W->data, m, 0, u, m);
    vit_bias_gelu_forward(y->t.data, u, b ? b->data : NULL, n, m);
    op_rec *op = op_finish(t, VIT_OK, back_linear_gelu, y, 3, in);
    if (!op)
        return NULL;
    if (op != &no_record)
        op->saved[0] = u;
    return &y->t;
}

/* ---- layernorm ------------------------------------------------------- */

static int back_layernorm(vit_tape *t, op_rec *op)
{
    const vit_tensor *x = IN(0), *g = IN(1);
    vit_real *dx = grad_acc(t, op->in[0]), *dg = grad_acc(t, op->in[1]);
    vit_real *db = grad_acc(t, op->in[2]);
    if (t->status)
        return t->status;
    return vit_layernorm_backward(dx, dg, db, DY, x->data, op->saved[0], op->saved[1], g->data,
                                  rows_of(x), last_dim(x));
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
    node *y = tensor_new(t, x->ndim, x->shape, wants_grad(t, 3, in));
    vit_real *mean = y ? saved_reals(t, 2 * (size_t)n) : NULL;
    if (!mean)
        return NULL;
    int rc = vit_layernorm_forward(y->t.data, mean, mean + n, x->data, gamma->data, beta->data, n,
                                   d, eps);
    op_rec *op = op_finish(t, rc, back_layernorm, y, 3, in);
    if (!op)
        return NULL;
    op->saved[0] = mean;
    op->saved[1] = mean + n;
    return &y->t;
}

static int back_add(vit_tape *t, op_rec *op);
static int binary_check(vit_tape *t, const char *name, vit_tensor *a, vit_tensor *b);

/* Two records, the add's then the layer norm's, as vit_op_add followed by
 * vit_op_layernorm would make (their backwards are unchanged); only the
 * forward is one kernel. */
vit_tensor *vit_op_add_layernorm(vit_tape *t, vit_tensor *a, vit_tensor *b, vit_tensor *gamma,
                                 vit_tensor *beta, vit_real eps, vit_tensor **sum)
{
    static const char fn[] = "vit_op_add_layernorm";
    if (sum)
        *sum = NULL;
    if (!binary_check(t, fn, a, b))
        return NULL;
    vit_tensor *lnin[2] = {gamma, beta};
    if (!op_begin(t, fn, 2, lnin))
        return NULL;
    int d = last_dim(a), n = rows_of(a);
    if (!sum || (int)gamma->size != d || (int)beta->size != d || !(eps > 0) || !isfinite(eps))
        return op_error(t, vit_fail(VIT_EINVAL,
            "%s: gamma (%zu) and beta (%zu) must match the width %d, eps (%g) be positive "
            "and sum non-NULL", fn, gamma->size, beta->size, d, (double)eps));
    vit_tensor *in[2] = {a, b};
    node *s = tensor_new(t, a->ndim, a->shape, wants_grad(t, 2, in));
    if (!s || !op_finish(t, VIT_OK, back_add, s, 2, in))
        return NULL;
    vit_tensor *lin[3] = {&s->t, gamma, beta};
    node *y = tensor_new(t, a->ndim, a->shape, wants_grad(t, 3, lin));
    vit_real *mean = y ? saved_reals(t, 2 * (size_t)n) : NULL;
    if (!mean)
        return NULL;
    vit_add_layernorm_forward(s->t.data, y->t.data, mean, mean + n, a->data, b->data,
                              gamma->data, beta->data, n, d, eps);
    op_rec *op = op_finish(t, VIT_OK, back_layernorm, y, 3, lin);
    if (!op)
        return NULL;
    if (op != &no_record) {
        op->saved[0] = mean;
        op->saved[1] = mean + n;
    }
    *sum = &s->t;
    return &y->t;
}

/* ---- elementwise: GELU, add, mul, scale, softmax ----------------------- */

/* The first write of x's gradient overwrites, in dy's own buffer when it
 * can be handed over (the MLP's widest gradient is then held once). */
static int back_gelu(vit_tape *t, op_rec *op)
{
    const vit_tensor *x = IN(0);
    const vit_real *dy = DY;
    int fresh;
    if (grad_take(op->in[0], op->out)) {
        vit_gelu_backward_set(x->grad, dy, x->data, x->size);
        return VIT_OK;
    }
    vit_real *dx = grad_out(t, op->in[0], &fresh);
    if (!dx)
        return t->status;
    if (fresh)
        vit_gelu_backward_set(dx, dy, x->data, x->size);
    else
        return vit_gelu_backward(dx, dy, x->data, x->size);
    return VIT_OK;
}

vit_tensor *vit_op_gelu(vit_tape *t, vit_tensor *x)
{
    if (!op_begin(t, "vit_op_gelu", 1, &x))
        return NULL;
    node *y = tensor_new(t, x->ndim, x->shape, wants_grad(t, 1, &x));
    if (!y)
        return NULL;
    int rc = vit_gelu_forward(y->t.data, x->data, x->size);
    return op_finish(t, rc, back_gelu, y, 1, &x) ? &y->t : NULL;
}

static int same_shape(const vit_tensor *a, const vit_tensor *b)
{
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape);
}

/* The second operand first: the first (the residual stream) may then take
 * dy's buffer without a copy. */
static int back_add(vit_tape *t, op_rec *op)
{
    int rc = grad_pass(t, op->in[1], op->out, 0);
    return rc ? rc : grad_pass(t, op->in[0], op->out, 1);
}

static int binary_check(vit_tape *t, const char *name, vit_tensor *a, vit_tensor *b)
{
    vit_tensor *in[2] = {a, b};
    if (!op_begin(t, name, 2, in))
        return 0;
    if (!same_shape(a, b)) {
        op_error(t, vit_fail(VIT_EINVAL, "%s: operand shapes differ (%zu vs %zu values)", name,
                             a->size, b->size));
        return 0;
    }
    return 1;
}

/* An elementwise op of two same-shape tensors: the kernel's forward, then
 * the record. */
static vit_tensor *binary_op(vit_tape *t, const char *name, vit_tensor *a, vit_tensor *b,
                             int (*fwd)(vit_real *, const vit_real *, const vit_real *, size_t),
                             back_fn back)
{
    if (!binary_check(t, name, a, b))
        return NULL;
    vit_tensor *in[2] = {a, b};
    node *y = tensor_new(t, a->ndim, a->shape, wants_grad(t, 2, in));
    if (!y)
        return NULL;
    int rc = fwd(y->t.data, a->data, b->data, a->size);
    return op_finish(t, rc, back, y, 2, in) ? &y->t : NULL;
}

vit_tensor *vit_op_add(vit_tape *t, vit_tensor *a, vit_tensor *b)
{
    return binary_op(t, "vit_op_add", a, b, vit_residual_forward, back_add);
}

static int back_mul(vit_tape *t, op_rec *op)
{
    vit_real *da = grad_acc(t, op->in[0]);
    vit_real *db = grad_acc(t, op->in[1]);
    if (t->status)
        return t->status;
    return vit_mul_backward(da, db, DY, IN(0)->data, IN(1)->data, IN(0)->size);
}

vit_tensor *vit_op_mul(vit_tape *t, vit_tensor *a, vit_tensor *b)
{
    return binary_op(t, "vit_op_mul", a, b, vit_mul_forward, back_mul);
}

static int back_scale(vit_tape *t, op_rec *op)
{
    vit_real *dx = grad_acc(t, op->in[0]);
    return dx ? vit_scale_backward(dx, DY, op->f, IN(0)->size) : t->status;
}

vit_tensor *vit_op_scale(vit_tape *t, vit_tensor *x, vit_real s)
{
    if (!op_begin(t, "vit_op_scale", 1, &x))
        return NULL;
    if (!isfinite(s))
        return op_error(t, vit_fail(VIT_EINVAL, "vit_op_scale: s = %g is not finite", (double)s));
    node *y = tensor_new(t, x->ndim, x->shape, wants_grad(t, 1, &x));
    if (!y)
        return NULL;
    int rc = vit_scale_forward(y->t.data, x->data, s, x->size);
    op_rec *op = op_finish(t, rc, back_scale, y, 1, &x);
    if (!op)
        return NULL;
    op->f = s;
    return &y->t;
}

static int back_softmax(vit_tape *t, op_rec *op)
{
    vit_real *dx = grad_acc(t, op->in[0]);
    const vit_tensor *y = &op->out->t;
    return dx ? vit_softmax_backward(dx, DY, y->data, rows_of(y), last_dim(y)) : t->status;
}

vit_tensor *vit_op_softmax(vit_tape *t, vit_tensor *x)
{
    if (!op_begin(t, "vit_op_softmax", 1, &x))
        return NULL;
    node *y = tensor_new(t, x->ndim, x->shape, wants_grad(t, 1, &x));
    if (!y)
        return NULL;
    int rc = vit_softmax_forward(y->t.data, x->data, rows_of(x), last_dim(x));
    return op_finish(t, rc, back_softmax, y, 1, &x) ? &y->t : NULL;
}

/* ---- reshape and concatenation ----------------------------------------- */

static int back_reshape(vit_tape *t, op_rec *op) { return grad_pass(t, op->in[0], op->out, 1); }

vit_tensor *vit_op_reshape(vit_tape *t, vit_tensor *x, int ndim, const int *shape)
{
    if (!op_begin(t, "vit_op_reshape", 1, &x))
        return NULL;
    size_t size;
    if (shape_size(t, "vit_op_reshape", ndim, shape, &size))
        return NULL;
    if (size != x->size)
        return op_error(t, vit_fail(VIT_EINVAL,
            "vit_op_reshape: the new shape holds %zu values, x holds %zu", size, x->size));
    node *y = node_new(t, ndim, shape, size);
    if (!y)
        return NULL;
    y->t.data = x->data;
    y->t.requires_grad = wants_grad(t, 1, &x);
    return op_finish(t, VIT_OK, back_reshape, y, 1, &x) ? &y->t : NULL;
}

/* y [B, T, D] from pieces x_i [B, T_i, D]; dir 1 copies x into y, 0 adds
 * y's slices into the x's gradients. */
static int back_concat(vit_tape *t, op_rec *op)
{
    const vit_tensor *y = &op->out->t;
    int B = y->shape[0], T = y->shape[1], D = y->shape[2], t0 = 0;
    for (int k = 0; k < op->n_in; k++) {
        const vit_tensor *x = IN(k);
        int Tk = x->shape[1], fresh;
        vit_real *dx = grad_out(t, op->in[k], &fresh);
        if (!dx && x->requires_grad)
            return t->status;
        for (int b = 0; dx && b < B; b++) {
            const vit_real *src = DY + ((size_t)b * T + t0) * D;
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

vit_tensor *vit_op_concat_tokens(vit_tape *t, int n, vit_tensor *const *x)
{
    static const char fn[] = "vit_op_concat_tokens";
    if (t && (n < 1 || n > MAX_INPUTS || !x))
        return op_error(t, vit_fail(VIT_EINVAL, "%s: n = %d must be 1..%d with x non-NULL", fn, n,
                                    MAX_INPUTS));
    if (!op_begin(t, fn, n, x))
        return NULL;
    int T = 0;
    for (int k = 0; k < n; k++) {
        if (x[k]->ndim != 3 || x[k]->shape[0] != x[0]->shape[0] || x[k]->shape[2] != x[0]->shape[2])
            return op_error(t, vit_fail(VIT_EINVAL,
                "%s: x[%d] must be [B, T, D] with x[0]'s B = %d and D = %d", fn, k,
                x[0]->shape[0], x[0]->ndim == 3 ? x[0]->shape[2] : 0));
        T += x[k]->shape[1];
    }
    int B = x[0]->shape[0], D = x[0]->shape[2];
    int shape[3] = {B, T, D};
    node *y = tensor_new(t, 3, shape, wants_grad(t, n, x));
    if (!y)
        return NULL;
    for (int k = 0, t0 = 0; k < n; t0 += x[k]->shape[1], k++)
        for (int b = 0; b < B; b++)
            memcpy(y->t.data + ((size_t)b * T + t0) * D, x[k]->data + (size_t)b * x[k]->shape[1] * D,
                   (size_t)x[k]->shape[1] * D * sizeof(vit_real));
    return op_finish(t, VIT_OK, back_concat, y, n, x) ? &y->t : NULL;
}

/* ---- embedding lookup and masked mean ----------------------------------- */

static int back_embedding(vit_tape *t, op_rec *op)
{
    const vit_tensor *tab = IN(0);
    vit_real *dtab = grad_acc(t, op->in[0]);
    return dtab ? vit_embedding_backward(dtab, DY, op->ints, op->out->t.size / (size_t)tab->shape[1],
                                         tab->shape[0], tab->shape[1])
                : t->status;
}

vit_tensor *vit_op_embedding(vit_tape *t, vit_tensor *table, const int *ids, int id_ndim,
                             const int *id_shape)
{
    static const char fn[] = "vit_op_embedding";
    if (!op_begin(t, fn, 1, &table))
        return NULL;
    if (table->ndim != 2 || !ids || id_ndim < 1 || id_ndim > 3 || !id_shape)
        return op_error(t, vit_fail(VIT_EINVAL,
            "%s: table must be [V, D], ids non-NULL and id_shape 1..3 dimensions", fn));
    int shape[VIT_TENSOR_MAX_DIMS];
    memcpy(shape, id_shape, (size_t)id_ndim * sizeof *shape);
    shape[id_ndim] = table->shape[1];
    size_t n;
    if (shape_size(t, fn, id_ndim, id_shape, &n))
        return NULL;
    node *y = tensor_new(t, id_ndim + 1, shape, wants_grad(t, 1, &table));
    int *keep = y ? arena_alloc(t, n * sizeof *keep) : NULL;
    if (!keep)
        return NULL;
    memcpy(keep, ids, n * sizeof *keep);
    int rc = vit_embedding_forward(y->t.data, table->data, keep, n, table->shape[0], table->shape[1]);
    op_rec *op = op_finish(t, rc, back_embedding, y, 1, &table);
    if (!op)
        return NULL;
    op->ints = keep;
    return &y->t;
}

static int back_masked_mean(vit_tape *t, op_rec *op)
{
    const vit_tensor *x = IN(0);
    vit_real *dx = grad_acc(t, op->in[0]);
    return dx ? vit_masked_mean_backward(dx, DY, (const unsigned char *)op->ints, x->shape[0],
                                         x->shape[1], x->shape[2])
              : t->status;
}

vit_tensor *vit_op_masked_mean(vit_tape *t, vit_tensor *x, const unsigned char *key_valid)
{
    static const char fn[] = "vit_op_masked_mean";
    if (!op_begin(t, fn, 1, &x))
        return NULL;
    if (x->ndim != 3)
        return op_error(t, vit_fail(VIT_EINVAL, "%s: x must be [B, T, D]", fn));
    int B = x->shape[0], T = x->shape[1], D = x->shape[2];
    int shape[2] = {B, D};
    node *y = tensor_new(t, 2, shape, wants_grad(t, 1, &x));
    unsigned char *keep = NULL;
    if (!y || (key_valid && !(keep = arena_alloc(t, (size_t)B * T))))
        return NULL;
    if (keep)
        memcpy(keep, key_valid, (size_t)B * T);
    int rc = vit_masked_mean_forward(y->t.data, NULL, x->data, keep, B, T, D);
    op_rec *op = op_finish(t, rc, back_masked_mean, y, 1, &x);
    if (!op)
        return NULL;
    op->ints = (int *)(void *)keep;
    return &y->t;
}

/* ---- multi-head attention -------------------------------------------- */

/* in: params, x_q, x_kv and, for vit_op_mha_bias, the bias. */
static int back_mha(vit_tape *t, op_rec *op)
{
    const vit_mha *m = &op->cfg.mha;
    vit_real *dp = grad_acc(t, op->in[0]);
    vit_real *dq = grad_acc(t, op->in[1]);
    vit_real *dkv = op->in[2] == op->in[1] ? dq : grad_acc(t, op->in[2]);
    vit_real *dbias = op->n_in > 3 ? grad_acc(t, op->in[3]) : NULL;
    /* One scratch for every layer: the backwards run one at a time. */
    vit_real *work = grow(t, &t->scratch, &t->scratch_cap, vit_mha_work_size(m));
    if (t->status || !work)
        return t->status;
    return vit_mha_backward(m, IN(0)->data, dp, dq, dkv, dbias, DY, IN(1)->data, IN(2)->data,
                            op->saved[0], work);
}

static vit_tensor *mha_op(vit_tape *t, const char *fn, const vit_mha *cfg, int n,
                          vit_tensor *const *in, vit_real **probs)
{
    if (!op_begin(t, fn, n, in))
        return NULL;
    if (!cfg)
        return op_error(t, vit_fail(VIT_EINVAL, "%s: cfg is NULL", fn));
    int rc = vit_mha_check(cfg);
    if (rc)
        return op_error(t, rc);
    const vit_tensor *params = in[0], *x_q = in[1], *x_kv = in[2];
    int d_kv = cfg->d_kv ? cfg->d_kv : cfg->d_model;
    if (params->size != vit_mha_param_count(cfg)
        || x_q->size != (size_t)cfg->batch * cfg->n_q * cfg->d_model
        || x_kv->size != (size_t)cfg->batch * cfg->n_k * d_kv)
        return op_error(t, vit_fail(VIT_EINVAL,
            "%s: params (%zu), x_q (%zu) or x_kv (%zu) do not match the layer shape", fn,
            params->size, x_q->size, x_kv->size));
    int shape[3] = {cfg->batch, cfg->n_q, cfg->d_model};
    node *y = tensor_new(t, 3, shape, wants_grad(t, n, in));
    if (!y)
        return NULL;
    /* The maps a caller asks for outlive the op even in no-grad mode. */
    size_t nc = vit_mha_cache_size(cfg);
    vit_real *cache = probs && !t->grad ? arena_reals(t, nc) : saved_reals(t, nc);
    if (!cache)
        return NULL;
    rc = vit_mha_forward(cfg, params->data, y->t.data, x_q->data, x_kv->data, cache);
    op_rec *op = op_finish(t, rc, back_mha, y, n, in);
    if (!op)
        return NULL;
    op->saved[0] = cache;
    op->cfg.mha = *cfg;
    if (probs) {
        vit_sdpa core = {.batch = cfg->batch, .heads = cfg->heads, .n_q = cfg->n_q,
                         .n_k = cfg->n_k, .d_k = cfg->d_model / cfg->heads,
                         .d_v = cfg->d_model / cfg->heads};
        *probs = vit_sdpa_use_tiled(&core) ? NULL : vit_mha_probs(cfg, cache);
    }
    return &y->t;
}

vit_tensor *vit_op_mha(vit_tape *t, const vit_mha *cfg, vit_tensor *params, vit_tensor *x_q,
                       vit_tensor *x_kv, vit_real **probs)
{
    vit_tensor *in[3] = {params, x_q, x_kv};
    return mha_op(t, "vit_op_mha", cfg, 3, in, probs);
}

vit_tensor *vit_op_mha_bias(vit_tape *t, const vit_mha *cfg, vit_tensor *params,
                            vit_tensor *x_q, vit_tensor *x_kv, vit_tensor *bias, vit_real **probs)
{
    static const char fn[] = "vit_op_mha_bias";
    vit_tensor *in[4] = {params, x_q, x_kv, bias};
    if (!op_begin(t, fn, 4, in))
        return NULL;
    if (!cfg)
        return op_error(t, vit_fail(VIT_EINVAL, "%s: cfg is NULL", fn));
    if ((cfg->bias_heads != 1 && cfg->bias_heads != cfg->heads)
        || bias->size != (size_t)cfg->bias_heads * cfg->n_q * cfg->n_k)
        return op_error(t, vit_fail(VIT_EINVAL,
            "%s: bias holds %zu values; [bias_heads, n_q, n_k] with bias_heads %d (1 or %d) "
            "needs %zu", fn, bias->size, cfg->bias_heads, cfg->heads,
            (size_t)cfg->bias_heads * cfg->n_q * cfg->n_k));
    vit_mha m = *cfg;
    m.bias = bias->data;
    return mha_op(t, fn, &m, 4, in, probs);
}

/* ---- embeddings ------------------------------------------------------ */

static int back_patch(vit_tape *t, op_rec *op)
{
    vit_real *dimg = grad_acc(t, op->in[0]), *dW = grad_acc(t, op->in[1]);
    vit_real *db = op->in[2] ? grad_acc(t, op->in[2]) : NULL;
    if (t->status)
        return t->status;
    return vit_patch_embed_backward(&op->cfg.patch, dimg, dW, db, DY, op->saved[0], IN(1)->data);
}

vit_tensor *vit_op_patch_embed(vit_tape *t, const vit_patch_shape *s, vit_tensor *img,
                               vit_tensor *W, vit_tensor *b)
{
    vit_tensor *in[3] = {img, W, b};
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
    node *y = tensor_new(t, 3, shape, wants_grad(t, 3, in));
    vit_real *cols = y ? saved_reals(t, (size_t)s->batch * n * pdim) : NULL;
    if (!cols)
        return NULL;
    int rc = vit_patch_embed_forward(s, y->t.data, cols, img->data, W->data, b ? b->data : NULL);
    op_rec *op = op_finish(t, rc, back_patch, y, 3, in);
    if (!op)
        return NULL;
    op->saved[0] = cols;
    op->cfg.patch = *s;
    return &y->t;
}

static int back_cls(vit_tape *t, op_rec *op)
{
    const vit_tensor *x = IN(0);
    vit_real *dx = grad_acc(t, op->in[0]), *dcls = grad_acc(t, op->in[1]);
    if (t->status)
        return t->status;
    return vit_cls_prepend_backward(dx, dcls, DY, x->shape[0], x->shape[1], x->shape[2]);
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
    node *y = tensor_new(t, 3, shape, wants_grad(t, 2, in));
    if (!y)
        return NULL;
    int rc = vit_cls_prepend_forward(y->t.data, x->data, cls->data, x->shape[0], x->shape[1],
                                     x->shape[2]);
    return op_finish(t, rc, back_cls, y, 2, in) ? &y->t : NULL;
}

static int back_pos(vit_tape *t, op_rec *op)
{
    const vit_tensor *x = IN(0);
    vit_real *dpos = grad_acc(t, op->in[1]);
    if (t->status)
        return t->status;
    /* d x = dy: handed over or added like a residual's. */
    int rc = vit_pos_add_backward(NULL, dpos, DY, x->shape[0], x->shape[1], x->shape[2]);
    return rc ? rc : grad_pass(t, op->in[0], op->out, 1);
}

vit_tensor *vit_op_pos_add(vit_tape *t, vit_tensor *x, vit_tensor *pos)
{
    vit_tensor *in[2] = {x, pos};
    if (!op_begin(t, "vit_op_pos_add", 2, in))
        return NULL;
    if (x->ndim != 3 || pos->size != (size_t)x->shape[1] * x->shape[2])
        return op_error(t, vit_fail(VIT_EINVAL,
            "vit_op_pos_add: x must be [B, T, D] and pos [T, D]"));
    node *y = tensor_new(t, 3, x->shape, wants_grad(t, 2, in));
    if (!y)
        return NULL;
    int rc = vit_pos_add_forward(y->t.data, x->data, pos->data, x->shape[0], x->shape[1],
                                 x->shape[2]);
    return op_finish(t, rc, back_pos, y, 2, in) ? &y->t : NULL;
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

static int back_token(vit_tape *t, op_rec *op)
{
    const vit_tensor *x = IN(0);
    vit_real *g = grad_acc(t, op->in[0]);
    if (!g)
        return t->status;
    int B = x->shape[0], T = x->shape[1], D = x->shape[2], first, last;
    vit_real w;
    token_weights(x, op->i, &first, &last, &w);
    for (int b = 0; b < B; b++)
        for (int k = first; k <= last; k++) {
            vit_real *dx = g + ((size_t)b * T + k) * D;
            const vit_real *dy = DY + (size_t)b * D;
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
    node *y = tensor_new(t, 2, shape, wants_grad(t, 1, &x));
    if (!y)
        return NULL;
    vit_real w;
    token_weights(x, i, &first, &last, &w);
    for (int b = 0; b < B; b++) {
        vit_real *yb = y->t.data + (size_t)b * D;
        memset(yb, 0, (size_t)D * sizeof *yb);
        for (int k = first; k <= last; k++) {
            const vit_real *xk = x->data + ((size_t)b * T + k) * D;
            for (int j = 0; j < D; j++)
                yb[j] += w * xk[j];
        }
    }
    op_rec *op = op_finish(t, VIT_OK, back_token, y, 1, &x);
    if (!op)
        return NULL;
    op->i = i;
    return &y->t;
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

static int back_xent(vit_tape *t, op_rec *op)
{
    const vit_tensor *z = IN(0);
    vit_real *dz = grad_acc(t, op->in[0]);
    return dz ? vit_cross_entropy_backward(dz, op->saved[0], op->ints, z->shape[0], z->shape[1],
                                           op->f, DY[0])
              : t->status;
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
    node *y = tensor_new(t, 1, &one, wants_grad(t, 1, &logits));
    /* The probabilities are the op's output too (probs), so they stay. */
    vit_real *p = y ? arena_reals(t, (size_t)B * C) : NULL;
    int *lab = p ? arena_alloc(t, (size_t)B * sizeof *lab) : NULL;
    if (!lab)
        return NULL;
    memcpy(lab, labels, (size_t)B * sizeof *lab);
    int rc = vit_cross_entropy_forward(y->t.data, p, logits->data, lab, B, C, smoothing);
    op_rec *op = op_finish(t, rc, back_xent, y, 1, &logits);
    if (!op)
        return NULL;
    op->saved[0] = p;
    op->ints = lab;
    op->f = smoothing;
    if (probs)
        *probs = p;
    return &y->t;
}

/* ---- custom ops -------------------------------------------------------- */

/* Runs a caller's forward or backward.  A failure always leaves a message
 * naming the op: the callback's own (set through any vit_* call that
 * failed inside it), prefixed, or "returned VIT_E..." when it set none.
 * A positive return is not a status: VIT_EINVAL.  On success the previous
 * message is left as it was. */
static int call_user(vit_op_fn f, const vit_op_call *call, const char *name, const char *what)
{
    char before[512];
    snprintf(before, sizeof before, "%s", vit_last_error());
    vit_fail(VIT_OK, "%s", "");
    int rc = f(call);
    if (rc == VIT_OK) {
        vit_fail(VIT_OK, "%s", before);
        return VIT_OK;
    }
    int code = rc < 0 ? rc : VIT_EINVAL;
    if (*vit_last_error())
        return vit_fail(code, "%s %s: %s", name, what, vit_last_error());
    return vit_fail(code, "%s %s returned %d (%s)", name, what, rc, vit_status_name(rc));
}

static int back_custom(vit_tape *t, op_rec *op)
{
    vit_real *din[MAX_INPUTS];
    for (int k = 0; k < op->n_in; k++)
        din[k] = grad_acc(t, op->in[k]);
    if (t->status)
        return t->status;
    vit_tensor *in[MAX_INPUTS];
    for (int k = 0; k < op->n_in; k++)
        in[k] = IN(k);
    vit_op_call call = {.ctx = op->cfg.custom.ctx, .n_in = op->n_in, .in = in,
                        .out = &op->out->t, .tape = t, .dout = DY, .din = din};
    return call_user(op->cfg.custom.backward, &call, op->cfg.custom.name, "backward");
}

/* Checks of a caller's input list, shared by custom ops and checkpoints. */
static int inputs_ok(vit_tape *t, const char *fn, int n_in, vit_tensor *const *in,
                     const void *ctx, size_t ctx_size)
{
    if (!t) {
        vit_fail(VIT_EINVAL, "%s: tape is NULL", fn);
        return 0;
    }
    if (t->status != VIT_OK)
        return 0;
    if (n_in < 1 || n_in > MAX_INPUTS || !in || (ctx_size && !ctx)) {
        op_error(t, vit_fail(VIT_EINVAL, "%s: n_in = %d must be 1..%d with in non-NULL%s", fn,
                             n_in, MAX_INPUTS, ctx_size && !ctx ? ", and ctx is NULL" : ""));
        return 0;
    }
    return op_begin(t, fn, n_in, in);
}

static void *ctx_copy(vit_tape *t, const void *ctx, size_t ctx_size)
{
    if (!ctx_size)
        return NULL;
    void *p = arena_alloc(t, ctx_size);
    if (p)
        memcpy(p, ctx, ctx_size);
    return p;
}

vit_tensor *vit_op_custom(vit_tape *t, const char *name, int n_in, vit_tensor *const *in,
                          int ndim, const int *shape, vit_op_fn forward, vit_op_fn backward,
                          const void *ctx, size_t ctx_size)
{
    const char *fn = name ? name : "vit_op_custom";
    if (!inputs_ok(t, fn, n_in, in, ctx, ctx_size))
        return NULL;
    size_t size;
    if (shape_size(t, fn, ndim, shape, &size))
        return NULL;
    int grad = wants_grad(t, n_in, in);
    if (grad && !backward)
        return op_error(t, vit_fail(VIT_EINVAL,
            "%s: an input requires a gradient but the backward is NULL", fn));
    node *y = tensor_new(t, ndim, shape, grad);
    void *c = y ? ctx_copy(t, ctx, ctx_size) : NULL;
    if (!y || (ctx_size && !c))
        return NULL;
    if (forward) {
        vit_op_call call = {.ctx = c, .n_in = n_in, .in = in, .out = &y->t, .tape = t};
        int rc = call_user(forward, &call, fn, "forward");
        if (rc != VIT_OK)
            return op_error(t, rc);
        if (t->status != VIT_OK)
            return NULL;
    }
    op_rec *op = op_finish(t, VIT_OK, back_custom, y, n_in, in);
    if (!op)
        return NULL;
    op->cfg.custom = (custom_rec){.name = fn, .backward = backward, .ctx = c};
    return &y->t;
}

/* ---- recomputation ------------------------------------------------------ */

/* Runs the sub-graph again with gradients on the tape's scratch tape, whose
 * inputs stand for the op's inputs, and backpropagates dy through it. */
static int back_checkpoint(vit_tape *t, op_rec *op)
{
    if (!t->sub && !(t->sub = vit_tape_new()))
        return tape_fail(t, VIT_ENOMEM);
    vit_tape *s = t->sub;
    vit_tape_reset(s);
    s->grad = 1;
    vit_tensor *in[MAX_INPUTS];
    unsigned char shared[MAX_INPUTS];
    for (int k = 0; k < op->n_in; k++) {
        const vit_tensor *x = IN(k);
        node *p = node_new(s, x->ndim, x->shape, x->size);
        if (!p)
            return tape_fail(t, s->status);
        p->t.data = x->data;
        /* Not a leaf: its gradient is lent and overwritten like an
         * activation's, as in a run without the checkpoint.  If x already
         * has a gradient (a leaf's, or one in flight from ops after this
         * one), the recomputation accumulates straight into it, in the
         * order of a run without the checkpoint: summing apart first and
         * adding the sum would round differently. */
        p->t.requires_grad = x->requires_grad;
        p->retain = 1;
        shared[k] = x->requires_grad && x->grad;
        if (shared[k])
            p->t.grad = x->grad;
        in[k] = &p->t;
    }
    s->recomputing = 1;
    vit_tensor *y = op->cfg.custom.graph(s, in, op->cfg.custom.ctx);
    s->recomputing = 0;
    int rc = y ? vit_tape_backward_from(s, y, DY) : s->status ? s->status : VIT_EINVAL;
    if (rc)
        return rc;
    for (int k = 0; k < op->n_in; k++) {
        node *p = (node *)in[k];
        if (!p->t.requires_grad || shared[k])
            continue;
        /* Nothing in the sub-graph reached the input: zeros (if fresh). */
        if (!p->t.grad ? !grad_acc(t, op->in[k]) : grad_add(t, op->in[k], p->t.grad) != VIT_OK)
            return t->status;
    }
    return VIT_OK;
}

/* No-grad mode: fn's output copied out, everything fn allocated released. */
static vit_tensor *run_released(vit_tape *t, vit_graph_fn fn, vit_tensor *const *in, void *c)
{
    size_t mark = arena_pos(t);
    vit_tensor *y = fn(t, in, c);
    if (!y)
        return t->status ? NULL : op_error(t, vit_fail(VIT_EINVAL, "vit_op_checkpoint: fn returned NULL"));
    int ndim = y->ndim, shape[VIT_TENSOR_MAX_DIMS];
    memcpy(shape, y->shape, sizeof shape);
    vit_real *park = grow(t, &t->scratch, &t->scratch_cap, y->size);
    if (!park)
        return NULL;
    memcpy(park, y->data, y->size * sizeof *park);
    vit_tape_release(t, mark);
    node *out = tensor_new(t, ndim, shape, 0);
    if (out)
        memcpy(out->t.data, park, out->t.size * sizeof *park);
    return out ? &out->t : NULL;
}

vit_tensor *vit_op_checkpoint(vit_tape *t, vit_graph_fn fn, int n_in, vit_tensor *const *in,
                              const void *ctx, size_t ctx_size)
{
    static const char name[] = "vit_op_checkpoint";
    if (!inputs_ok(t, name, n_in, in, ctx, ctx_size))
        return NULL;
    if (!fn)
        return op_error(t, vit_fail(VIT_EINVAL, "%s: fn is NULL", name));
    void *c = ctx_copy(t, ctx, ctx_size);
    if (ctx_size && !c)
        return NULL;
    if (!t->grad)
        return run_released(t, fn, in, c);
    /* The first run is in no-grad mode on the scratch tape, whose arena the
     * recomputation reuses: only the output is copied to this tape. */
    if (!t->sub && !(t->sub = vit_tape_new()))
        return op_error(t, VIT_ENOMEM);
    vit_tape *s = t->sub;
    vit_tape_reset(s);
    s->grad = 0;
    vit_tensor *y = fn(s, in, c);
    if (!y)
        return op_error(t, s->status ? s->status
                                     : vit_fail(VIT_EINVAL, "%s: fn returned NULL", name));
    int grad = wants_grad(t, n_in, in) || s->grad_leaves > 0;
    node *out = tensor_new(t, y->ndim, y->shape, grad);
    if (!out)
        return NULL;
    memcpy(out->t.data, y->data, y->size * sizeof *y->data);
    op_rec *op = op_finish(t, VIT_OK, back_checkpoint, out, n_in, in);
    if (!op)
        return NULL;
    op->cfg.custom = (custom_rec){.name = name, .graph = fn, .ctx = c};
    return &out->t;
}

/* ---- backward -------------------------------------------------------- */

int vit_tape_backward(vit_tape *t, vit_tensor *loss)
{
    static const vit_real one = 1;
    if (t && loss && loss->size != 1)
        return tape_fail(t, vit_fail(VIT_EINVAL,
            "vit_tape_backward: loss must be a one-element tensor (it has %zu values)", loss->size));
    return vit_tape_backward_from(t, loss, &one);
}

int vit_tape_backward_from(vit_tape *t, vit_tensor *y, const vit_real *dy)
{
    if (!t)
        return vit_fail(VIT_EINVAL, "vit_tape_backward: tape is NULL");
    if (t->status != VIT_OK)
        return vit_fail(t->status, "vit_tape_backward: the forward pass failed (%s)",
                        vit_status_name(t->status));
    if (t->backward_done)
        return vit_fail(VIT_EINVAL, "vit_tape_backward: this tape already ran its backward; "
                        "vit_tape_reset it and record the forward again");
    if (!y || !dy)
        return tape_fail(t, vit_fail(VIT_EINVAL, "vit_tape_backward: %s is NULL", !y ? "y" : "dy"));
    node *root = (node *)y;
    if (!y->requires_grad || root->leaf)
        return tape_fail(t, vit_fail(VIT_EINVAL, "vit_tape_backward: the starting tensor %s",
                                     root->leaf ? "is a leaf (no op to run)"
                                                : "requires no gradient (no input of its op "
                                                  "has one, or it was made in no-grad mode)"));
    if (t->pending && t->ops[t->pending - 1].out == root)
        t->pending = 0; /* its values are read by nobody */
    else if (flush_pending(t) != VIT_OK)
        return t->status;
    t->backward_done = 1;
    if (grad_add(t, root, dy) != VIT_OK)
        return t->status;
    for (int i = t->nops - 1; i >= 0; i--) {
        op_rec *op = &t->ops[i];
        if (!op->out->t.grad)
            continue; /* nothing downstream reached this op */
        int rc = op->backward(t, op);
        if (rc)
            return tape_fail(t, rc);
        if (!op->out->retain)
            grad_drop(op->out);
    }
    /* Retained tensors nothing reached read as zeros. */
    for (int i = 0; i < t->nops; i++) {
        node *o = t->ops[i].out;
        if (o->retain && !o->t.grad && grad_acc(t, o) == NULL)
            return t->status;
    }
    return VIT_OK;
}

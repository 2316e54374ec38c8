/*
 * The reverse-mode tape's engine: an arena for tensors and saved
 * intermediates, the list of op records, the backward pass that walks the
 * list in reverse, no-grad mode and recomputation (vit_op_checkpoint).  The
 * tensors and the pool lending their gradients are in src/tape/tape_tensors.c.
 *
 * The ops live in src/tape_ops_*.c, by area.  Each is a vit_op_def (name,
 * backward, flags) and a function that runs the forward kernel and ends
 * with vit_tape_record (src/tape/tape_internal.h), the one way onto the list:
 * the engine calls a record's backward, and a lazy op's forward, through
 * its def, and knows no op and no kernel.
 *
 * Gradients of op-made tensors live only while they are in flight: the
 * first backward that writes one borrows a buffer from the pool (and
 * overwrites it, or zeroes it for kernels that can only accumulate); the
 * buffer goes back to the pool right after the tensor's own op has run its
 * backward, which is the last reader.  So the backward holds the gradients
 * crossing one point of the graph, not one per activation.
 */
/* MAP_ANONYMOUS (chunk_new) is not in the POSIX 2008 the build asks for. */
#define _DEFAULT_SOURCE
#include "vit/tape.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "error.h"
#include "tape_engine.h"
#include "tape_internal.h"
#include "vit/bf16.h"

#define ARENA_FIRST_CHUNK (1u << 20)

/* Arena chunks in allocation order; `cur` is the one being filled.  Chunks
 * after cur are empty (a release moved back over them), and are reused
 * before a new one is made. */
struct chunk {
    struct chunk *next;
    size_t cap, used;
    unsigned char *base; /* aligned start of the usable bytes */
};

/* Records code as the tape's error if it has none yet; returns code. */
static int tape_fail(vit_tape *t, int code)
{
    if (t->status == VIT_OK)
        t->status = code;
    return code;
}

vit_tensor *vit_tape_error(vit_tape *t, int code)
{
    tape_fail(t, code);
    return NULL;
}

/* ---- Arena ----------------------------------------------------------- */

/* Under AddressSanitizer the chunks stay malloc's, whose redzones catch a
 * write past a chunk's end; a map has none. */
#if defined(__SANITIZE_ADDRESS__)
#define CHUNK_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CHUNK_MALLOC 1
#endif
#endif

static chunk *chunk_new(size_t cap)
{
    /* Straight from the kernel, not malloc: a chunk is megabytes and lives
     * until a reset folds it, and freeing one through malloc raises glibc's
     * mmap threshold to its size, after which such blocks come from the
     * heap and a step's peak grows with its fragments (30 MB on the large
     * benchmark after the pieces' probe: docs/design.md). */
    size_t len = sizeof(chunk) + cap + VIT_TAPE_ALIGN;
#ifdef CHUNK_MALLOC
    void *m = malloc(len);
    if (!m)
        return NULL;
#else
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
#endif
    chunk *c = m;
    uintptr_t p = (uintptr_t)(c + 1);
    p = (p + VIT_TAPE_ALIGN - 1) & ~(uintptr_t)(VIT_TAPE_ALIGN - 1);
    *c = (chunk){.cap = cap, .base = (unsigned char *)p};
    return c;
}

static void free_chunks(chunk *c)
{
    for (chunk *n; c; c = n) {
        n = c->next;
#ifdef CHUNK_MALLOC
        free(c);
#else
        munmap(c, sizeof(chunk) + c->cap + VIT_TAPE_ALIGN);
#endif
    }
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
void *vit_tape_arena(vit_tape *t, size_t bytes)
{
    bytes = (bytes + VIT_TAPE_ALIGN - 1) & ~(size_t)(VIT_TAPE_ALIGN - 1);
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
        if (!(c = chunk_new(cap))) {
            vit_fail(VIT_ENOMEM, "vit_tape: out of memory allocating %zu bytes", cap);
            tape_fail(t, VIT_ENOMEM);
            return NULL;
        }
        *(last ? &last->next : &t->chunks) = c;
    }
    t->cur = c;
    void *p = c->base + c->used;
    c->used += bytes;
    size_t pos = arena_pos(t);
    if (pos > t->high)
        t->high = pos;
    return p;
}

vit_real *vit_tape_reals(vit_tape *t, size_t n)
{
    size_t bytes;
    if (!vit_mul_size(&bytes, n, sizeof(vit_real))) {
        tape_fail(t, VIT_ENOMEM);
        return NULL;
    }
    return vit_tape_arena(t, bytes);
}

static void *arena_copy(vit_tape *t, const void *src, size_t bytes)
{
    if (!bytes)
        return NULL;
    void *p = vit_tape_arena(t, bytes);
    if (p)
        memcpy(p, src, bytes);
    return p;
}

vit_real *vit_tape_scratch(vit_tape *t, size_t n)
{
    if (n > t->scratch_cap) {
        vit_real *p = NULL;
        size_t bytes;
        if (!vit_mul_size(&bytes, n, sizeof *p)
            || posix_memalign((void **)&p, VIT_TAPE_ALIGN, bytes)) {
            vit_fail(VIT_ENOMEM, "vit_tape: out of memory for %zu reals of scratch", n);
            tape_fail(t, VIT_ENOMEM);
            return NULL;
        }
        free(t->scratch);
        t->scratch = p;
        t->scratch_cap = n;
    }
    return t->scratch;
}

vit_real *vit_tape_saved(vit_tape *t, size_t n)
{
    return t->grad ? vit_tape_reals(t, n) : vit_tape_scratch(t, n);
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
    free(t->ring[0]);
    free(t->ring[1]);
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
    t->nops = t->pending = 0;
    t->status = VIT_OK;
    t->backward_done = 0;
    t->grad_leaves = 0;
}

int vit_tape_fail(vit_tape *t, int code) { return t ? tape_fail(t, code) : code; }

int vit_tape_status(const vit_tape *t) { return t ? t->status : VIT_EINVAL; }

/* What t and the tape it recomputes on hold, counting the arena as its
 * chunks' capacity, or with used as its high-water mark since the reset. */
static size_t tape_bytes(const vit_tape *t, int used)
{
    if (!t)
        return 0;
    size_t n = t->cap_ops * sizeof *t->ops
             + (t->scratch_cap + t->ring_cap[0] + t->ring_cap[1]) * sizeof(vit_real);
    if (used)
        n += t->high;
    else
        for (const chunk *c = t->chunks; c; c = c->next)
            n += c->cap;
    for (const gblock *b = t->pool; b; b = b->next)
        n += b->cap * sizeof(vit_real);
    return n + tape_bytes(t->sub, used);
}

size_t vit_tape_bytes(const vit_tape *t) { return tape_bytes(t, 0); }
size_t vit_tape_used_bytes(const vit_tape *t) { return tape_bytes(t, 1); }

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
    return vit_tape_arena(t, n ? n : 1);
}

/* ---- Records ----------------------------------------------------------- */

static int run_forward(vit_tape *t, const vit_op_rec *op)
{
    int rc = op->def->forward(op);
    return rc ? tape_fail(t, rc) : VIT_OK;
}

/* Runs the forward that waits, if any: a new op may read its output. */
static int flush_pending(vit_tape *t)
{
    if (!t->pending)
        return VIT_OK;
    const vit_op_rec *op = &t->ops[t->pending - 1];
    t->pending = 0;
    return run_forward(t, op);
}

static vit_op_rec *op_push(vit_tape *t, const vit_op_def *def, vit_tensor *y, int n,
                           vit_tensor *const *in, const void *ctx, size_t ctx_size)
{
    if (t->nops == t->cap_ops) {
        int cap = t->cap_ops ? 2 * t->cap_ops : 64;
        vit_op_rec *ops = realloc(t->ops, (size_t)cap * sizeof *ops);
        if (!ops) {
            vit_fail(VIT_ENOMEM, "vit_tape: out of memory recording an op");
            tape_fail(t, VIT_ENOMEM);
            return NULL;
        }
        t->ops = ops;
        t->cap_ops = cap;
    }
    vit_tensor **args = vit_tape_arena(t, (size_t)n * sizeof *args);
    void *c = args ? arena_copy(t, ctx, ctx_size) : NULL;
    if (!args || (ctx_size && !c))
        return NULL;
    memcpy(args, in, (size_t)n * sizeof *args);
    vit_op_rec *op = &t->ops[t->nops++];
    *op = (vit_op_rec){.def = def, .out = y, .in = args, .n_in = n, .ctx = c};
    return op;
}

vit_tensor *vit_tape_record(vit_tape *t, const vit_op_def *def, int rc, vit_tensor *y, int n,
                            vit_tensor *const *in, const void *ctx, size_t ctx_size)
{
    if (rc)
        return vit_tape_error(t, rc);
#ifndef VIT_DOUBLE
    node *kn = vit_tape_node(y);
    if (kn->kept == VIT_KEEP_BF16 && !kn->half) {
        /* The one place a kept output is rounded (vit_tape_output_kept). */
        size_t bytes;
        if (!vit_mul_size(&bytes, y->size, sizeof *kn->half)
            || !(kn->half = vit_tape_arena(t, bytes)))
            return vit_tape_error(t, VIT_ENOMEM);
        vit_bf16_from_floats(kn->half, y->data, y->size);
    }
#endif
    int lazy = (def->flags & VIT_OP_LAZY) != 0;
    if (!y->requires_grad) {
        if (!lazy)
            return y;
        /* Nothing recorded: the forward runs now, from a record of its own. */
        vit_tensor *args[VIT_TAPE_MAX_INPUTS];
        memcpy(args, in, (size_t)n * sizeof *args);
        vit_op_rec now = {.def = def, .out = y, .in = args, .n_in = n, .ctx = (void *)ctx};
        return run_forward(t, &now) ? NULL : y;
    }
    vit_op_rec *op = op_push(t, def, y, n, in, ctx, ctx_size);
    if (!op || !lazy)
        return op ? y : NULL;
    if (t->recomputing) {
        t->pending = t->nops;
        return y;
    }
    return run_forward(t, op) ? NULL : y;
}

int vit_tape_begin(vit_tape *t, const char *name, int n, vit_tensor *const *in)
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

int vit_tape_begin_list(vit_tape *t, const char *name, int n_in, vit_tensor *const *in,
                        const void *ctx, size_t ctx_size)
{
    if (!t) {
        vit_fail(VIT_EINVAL, "%s: tape is NULL", name);
        return 0;
    }
    if (t->status != VIT_OK)
        return 0;
    if (n_in < 1 || n_in > VIT_TAPE_MAX_INPUTS || !in || (ctx_size && !ctx)) {
        vit_tape_error(t, vit_fail(VIT_EINVAL, "%s: n_in = %d must be 1..%d with in non-NULL%s",
                                   name, n_in, VIT_TAPE_MAX_INPUTS,
                                   ctx_size && !ctx ? ", and ctx is NULL" : ""));
        return 0;
    }
    return vit_tape_begin(t, name, n_in, in);
}

int vit_tape_wants_grad(const vit_tape *t, int n, vit_tensor *const *in)
{
    if (!t->grad)
        return 0;
    for (int i = 0; i < n; i++)
        if (in[i] && in[i]->requires_grad)
            return 1;
    return 0;
}

/* ---- Recomputation ------------------------------------------------------ */

typedef struct checkpoint_ctx {
    vit_graph_fn fn;
    void *ctx; /* the caller's, copied */
} checkpoint_ctx;

/* Stand-ins on the scratch tape s for the checkpoint's inputs.  Not leaves:
 * an input's gradient is lent and overwritten like an activation's, as in
 * a run without the checkpoint.  If x already has a gradient (a leaf's, or
 * one in flight from ops after the checkpoint), the recomputation
 * accumulates straight into it (shared), in the order of a run without the
 * checkpoint: summing apart first and adding the sum would round
 * differently. */
static int stand_ins(vit_tape *s, const vit_op_rec *op, vit_tensor **in, unsigned char *shared)
{
    for (int k = 0; k < op->n_in; k++) {
        const vit_tensor *x = op->in[k];
        vit_tensor *p = vit_tape_header(s, x->ndim, x->shape, x->size);
        if (!p)
            return s->status;
        p->data = x->data;
        p->requires_grad = x->requires_grad;
        vit_tape_node(p)->retain = 1;
        shared[k] = x->requires_grad && x->grad;
        if (shared[k])
            p->grad = x->grad;
        in[k] = p;
    }
    return VIT_OK;
}

/* Runs the sub-graph again with gradients on the tape's scratch tape, whose
 * inputs stand for the op's inputs, and backpropagates dy through it. */
static int back_checkpoint(vit_tape *t, const vit_op_rec *op)
{
    const checkpoint_ctx *c = op->ctx;
    if (!t->sub && !(t->sub = vit_tape_new()))
        return tape_fail(t, VIT_ENOMEM);
    vit_tape *s = t->sub;
    vit_tape_reset(s);
    s->grad = 1;
    vit_tensor *in[VIT_TAPE_MAX_INPUTS];
    unsigned char shared[VIT_TAPE_MAX_INPUTS];
    if (stand_ins(s, op, in, shared))
        return tape_fail(t, s->status);
    s->recomputing = 1;
    vit_tensor *y = c->fn(s, in, c->ctx);
    s->recomputing = 0;
    /* The leaves fn makes (a block's parameters) are final after their
     * first reader's backward in the sub-graph: reported as this tape's. */
    s->on_leaf = t->on_leaf;
    s->on_leaf_ctx = t->on_leaf_ctx;
    int rc = y ? vit_tape_backward_from(s, y, op->out->grad) : s->status ? s->status : VIT_EINVAL;
    s->on_leaf = NULL;
    s->on_leaf_ctx = NULL;
    if (rc)
        return rc;
    for (int k = 0; k < op->n_in; k++) {
        vit_tensor *p = in[k];
        if (!p->requires_grad || shared[k])
            continue;
        /* Nothing in the sub-graph reached the input: zeros (if fresh). */
        if (!p->grad ? !vit_tape_grad_acc(t, op->in[k])
                     : vit_tape_grad_add(t, op->in[k], p->grad) != VIT_OK)
            return t->status;
    }
    return VIT_OK;
}

static const vit_op_def checkpoint_def = {"vit_op_checkpoint", back_checkpoint, NULL, 0};

/* No-grad mode: fn's output copied out, everything fn allocated released. */
static vit_tensor *run_released(vit_tape *t, vit_graph_fn fn, vit_tensor *const *in, void *c)
{
    size_t mark = arena_pos(t);
    vit_tensor *y = fn(t, in, c);
    if (!y)
        return t->status ? NULL : vit_tape_error(t, vit_fail(VIT_EINVAL,
                                                 "vit_op_checkpoint: fn returned NULL"));
    int ndim = y->ndim, shape[VIT_TENSOR_MAX_DIMS];
    memcpy(shape, y->shape, sizeof shape);
    vit_real *park = vit_tape_scratch(t, y->size);
    if (!park)
        return NULL;
    memcpy(park, y->data, y->size * sizeof *park);
    vit_tape_release(t, mark);
    vit_tensor *out = vit_tape_output(t, ndim, shape, 0);
    if (out)
        memcpy(out->data, park, out->size * sizeof *park);
    return out;
}

vit_tensor *vit_op_checkpoint(vit_tape *t, vit_graph_fn fn, int n_in, vit_tensor *const *in,
                              const void *ctx, size_t ctx_size)
{
    const char *name = checkpoint_def.name;
    if (!vit_tape_begin_list(t, name, n_in, in, ctx, ctx_size))
        return NULL;
    if (!fn)
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "%s: fn is NULL", name));
    checkpoint_ctx c = {fn, arena_copy(t, ctx, ctx_size)};
    if (ctx_size && !c.ctx)
        return NULL;
    if (!t->grad)
        return run_released(t, fn, in, c.ctx);
    /* The first run is in no-grad mode on the scratch tape, whose arena the
     * recomputation reuses: only the output is copied to this tape. */
    if (!t->sub && !(t->sub = vit_tape_new()))
        return vit_tape_error(t, VIT_ENOMEM);
    vit_tape *s = t->sub;
    vit_tape_reset(s);
    s->grad = 0;
    vit_tensor *y = fn(s, in, c.ctx);
    if (!y)
        return vit_tape_error(t, s->status ? s->status
                                           : vit_fail(VIT_EINVAL, "%s: fn returned NULL", name));
    int grad = vit_tape_wants_grad(t, n_in, in) || s->grad_leaves > 0;
    vit_tensor *out = vit_tape_output(t, y->ndim, y->shape, grad);
    if (!out)
        return NULL;
    memcpy(out->data, y->data, y->size * sizeof *y->data);
    return vit_tape_record(t, &checkpoint_def, VIT_OK, out, n_in, in, &c, sizeof c);
}

/* ---- Backward -------------------------------------------------------- */

/* Gives x's gradient back to the pool once x's op has run its backward. */
static void grad_drop(node *x)
{
    if (x->gb) {
        x->gb->busy = 0;
        x->gb = NULL;
        x->t.grad = NULL;
    }
}

int vit_tape_backward(vit_tape *t, vit_tensor *loss)
{
    static const vit_real one = 1;
    if (t && loss && loss->size != 1)
        return tape_fail(t, vit_fail(VIT_EINVAL,
            "vit_tape_backward: loss must be a one-element tensor (it has %zu values)", loss->size));
    return vit_tape_backward_from(t, loss, &one);
}

/* The checks before a backward from y; VIT_OK or the error (recorded). */
static int backward_check(vit_tape *t, vit_tensor *y, const vit_real *dy)
{
    if (t->status != VIT_OK)
        return vit_fail(t->status, "vit_tape_backward: the forward pass failed (%s)",
                        vit_status_name(t->status));
    if (t->backward_done)
        return vit_fail(VIT_EINVAL, "vit_tape_backward: this tape already ran its backward; "
                        "vit_tape_reset it and record the forward again");
    if (!y || !dy)
        return tape_fail(t, vit_fail(VIT_EINVAL, "vit_tape_backward: %s is NULL", !y ? "y" : "dy"));
    int leaf = vit_tape_node(y)->leaf;
    if (!y->requires_grad || leaf)
        return tape_fail(t, vit_fail(VIT_EINVAL, "vit_tape_backward: the starting tensor %s",
                                     leaf ? "is a leaf (no op to run)"
                                          : "requires no gradient (no input of its op has "
                                            "one, or it was made in no-grad mode)"));
    return VIT_OK;
}

/* Every leaf with a gradient: the index of the first op reading it (the
 * last whose backward adds to its gradient), for report_leaves. */
static void mark_first_uses(vit_tape *t)
{
    for (int i = t->nops - 1; i >= 0; i--)
        for (int k = 0; k < t->ops[i].n_in; k++) {
            vit_tensor *x = t->ops[i].in[k];
            if (x && x->grad && vit_tape_node(x)->leaf)
                vit_tape_node(x)->first_use = i;
        }
}

/* After op i's backward (or its skip): the leaves it was the first reader
 * of have their final gradient; each is reported once. */
static void report_leaves(vit_tape *t, vit_op_rec *op, int i)
{
    for (int k = 0; k < op->n_in; k++) {
        vit_tensor *x = op->in[k];
        if (x && x->grad && vit_tape_node(x)->leaf && vit_tape_node(x)->first_use == i) {
            vit_tape_node(x)->first_use = -1;
            t->on_leaf(t->on_leaf_ctx, x);
        }
    }
}

int vit_tape_on_leaf_grad(vit_tape *t, vit_tape_leaf_fn fn, void *ctx)
{
    if (!t)
        return vit_fail(VIT_EINVAL, "vit_tape_on_leaf_grad: tape is NULL");
    t->on_leaf = fn;
    t->on_leaf_ctx = fn ? ctx : NULL;
    return VIT_OK;
}

int vit_tape_backward_from(vit_tape *t, vit_tensor *y, const vit_real *dy)
{
    if (!t)
        return vit_fail(VIT_EINVAL, "vit_tape_backward: tape is NULL");
    int rc = backward_check(t, y, dy);
    if (rc)
        return rc;
    if (t->pending && t->ops[t->pending - 1].out == y)
        t->pending = 0; /* its values are read by nobody */
    else if (flush_pending(t) != VIT_OK)
        return t->status;
    t->backward_done = 1;
    if (vit_tape_grad_add(t, y, dy) != VIT_OK)
        return t->status;
    if (t->on_leaf)
        mark_first_uses(t);
    for (int i = t->nops - 1; i >= 0; i--) {
        vit_op_rec *op = &t->ops[i];
        if (op->out->grad) { /* else nothing downstream reached this op */
            if ((rc = op->def->backward(t, op)))
                return tape_fail(t, rc);
            node *o = vit_tape_node(op->out);
            if (!o->retain)
                grad_drop(o);
        }
        if (t->on_leaf)
            report_leaves(t, op, i);
    }
    /* Retained tensors nothing reached read as zeros. */
    for (int i = 0; i < t->nops; i++) {
        vit_tensor *o = t->ops[i].out;
        if (vit_tape_node(o)->retain && !o->grad && !vit_tape_grad_acc(t, o))
            return t->status;
    }
    return VIT_OK;
}

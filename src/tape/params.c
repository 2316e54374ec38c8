/*
 * Named parameter tensors in one flat buffer (vit/params.h): the layout,
 * init and weight-decay groups that src/model/model.c keeps for the ViT, for any
 * model written on the tape.
 */
#include "vit/params.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "vit/tape.h"
#include "vit/checkpoint.h"

_Static_assert(VIT_PARAMS_NAME_MAX == VIT_CKPT_NAME_MAX - 1,
               "tensor names must fit a checkpoint");

#define BUF_ALIGN 64

typedef struct entry {
    vit_param_tensor t;
    char name[VIT_PARAMS_NAME_MAX + 1];
} entry;

_Static_assert(sizeof(entry) >= sizeof(vit_param_group), "grow() bounds both arrays by entry");

struct vit_params {
    entry *tensors;
    int ntensors, cap;
    vit_param_group *groups;  /* cap entries; ngroups used */
    int ngroups;
    size_t count;             /* values in the layout so far */
    vit_real *values, *grads; /* NULL until vit_params_alloc */
};

vit_params *vit_params_new(void)
{
    vit_params *p = calloc(1, sizeof *p);
    if (!p)
        vit_fail(VIT_ENOMEM, "vit_params_new: out of memory");
    return p;
}

void vit_params_free(vit_params *p)
{
    if (!p)
        return;
    free(p->tensors);
    free(p->groups);
    free(p->values);
    free(p->grads);
    free(p);
}

/* Room for one more tensor and group.  The descriptions point into their
 * own entries, so a move re-aims them at once: if the second realloc fails,
 * p is still whole (its cap, the smaller of the two arrays, unchanged). */
static int grow(vit_params *p, const char *name)
{
    if (p->ntensors < p->cap)
        return VIT_OK;
    size_t bytes; /* an entry is larger than a group: this bounds both */
    int cap = p->cap <= INT_MAX / 2 ? (p->cap ? 2 * p->cap : 16) : 0;
    if (!cap || !vit_mul_size(&bytes, (size_t)cap, sizeof(entry)))
        return vit_fail(VIT_ENOMEM, "vit_params_add: tensor \"%s\": too many tensors", name);
    entry *t = realloc(p->tensors, bytes);
    if (t) {
        p->tensors = t;
        for (int i = 0; i < p->ntensors; i++)
            t[i].t.name = t[i].name;
    }
    vit_param_group *g = t ? realloc(p->groups, (size_t)cap * sizeof *g) : NULL;
    if (!g)
        return vit_fail(VIT_ENOMEM, "vit_params_add: tensor \"%s\": out of memory", name);
    p->groups = g;
    p->cap = cap;
    return VIT_OK;
}

/* Checks everything about one new tensor but its name's uniqueness and
 * computes its size; VIT_OK or the error, with the message. */
static int check_tensor(const vit_params *p, const char *name, int ndim, const int *shape,
                        int init, double scale, size_t *size)
{
    static const char *fn = "vit_params_add";
    if (!p || !name || !shape)
        return vit_fail(VIT_EINVAL, "%s: %s is NULL", fn, !p ? "p" : !name ? "name" : "shape");
    size_t len = strlen(name);
    if (len == 0)
        return vit_fail(VIT_EINVAL, "%s: the tensor name is empty", fn);
    if (len > VIT_PARAMS_NAME_MAX)
        return vit_fail(VIT_EINVAL, "%s: tensor \"%.*s...\": name longer than %d bytes", fn,
                        VIT_PARAMS_NAME_MAX, name, VIT_PARAMS_NAME_MAX);
    if (p->values)
        return vit_fail(VIT_EINVAL, "%s: tensor \"%s\": added after vit_params_alloc", fn, name);
    if (ndim < 1 || ndim > VIT_TENSOR_MAX_DIMS)
        return vit_fail(VIT_EINVAL, "%s: tensor \"%s\": ndim must be 1..%d, got %d", fn, name,
                        VIT_TENSOR_MAX_DIMS, ndim);
    size_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1)
            return vit_fail(VIT_EINVAL, "%s: tensor \"%s\": shape[%d] = %d must be positive", fn,
                            name, d, shape[d]);
        if (!vit_mul_size(&n, n, (size_t)shape[d]))
            return vit_fail(VIT_ENOMEM, "%s: tensor \"%s\": size overflows size_t", fn, name);
    }
    /* Both buffers are allocated with their byte size rounded up to BUF_ALIGN. */
    if (n > (SIZE_MAX - BUF_ALIGN) / sizeof(vit_real) - p->count)
        return vit_fail(VIT_ENOMEM, "%s: tensor \"%s\": %zu values after %zu overflow the "
                        "buffer size", fn, name, n, p->count);
    if (init < VIT_INIT_ZERO || init > VIT_INIT_CONST)
        return vit_fail(VIT_EINVAL, "%s: tensor \"%s\": unknown init %d", fn, name, init);
    if (init == VIT_INIT_CONST && !isfinite(scale))
        return vit_fail(VIT_EINVAL, "%s: tensor \"%s\": constant %g is not finite", fn, name,
                        scale);
    if ((init == VIT_INIT_NORMAL || init == VIT_INIT_UNIFORM) && !(scale >= 0 && isfinite(scale)))
        return vit_fail(VIT_EINVAL, "%s: tensor \"%s\": scale must be finite and >= 0, got %g",
                        fn, name, scale);
    *size = n;
    return VIT_OK;
}

int vit_params_add(vit_params *p, const char *name, int ndim, const int *shape, int init,
                   double scale, int decay)
{
    size_t size = 0;
    int rc = check_tensor(p, name, ndim, shape, init, scale, &size);
    if (rc != VIT_OK)
        return rc;
    int dup = vit_params_find(p, name);
    if (dup >= 0)
        return vit_fail(VIT_EINVAL, "vit_params_add: tensor \"%s\": name already used by "
                        "tensor %d", name, dup);
    if ((rc = grow(p, name)) != VIT_OK)
        return rc;
    entry *e = &p->tensors[p->ntensors];
    memset(e, 0, sizeof *e);
    memcpy(e->name, name, strlen(name) + 1);
    e->t.name = e->name;
    e->t.ndim = ndim;
    memcpy(e->t.shape, shape, (size_t)ndim * sizeof *shape);
    e->t.offset = p->count;
    e->t.size = size;
    e->t.init = init;
    e->t.scale = init == VIT_INIT_NORMAL || init == VIT_INIT_UNIFORM || init == VIT_INIT_CONST
                     ? scale : 0;
    e->t.decay = decay != 0;
    /* Extend the last group, or open one when the decay flag changes. */
    vit_param_group *g = p->ngroups ? &p->groups[p->ngroups - 1] : NULL;
    if (g && g->decay == e->t.decay) {
        g->count += size;
    } else {
        g = &p->groups[p->ngroups++];
        *g = (vit_param_group){.offset = p->count, .count = size, .decay = e->t.decay};
    }
    p->count += size;
    return p->ntensors++;
}

int vit_params_alloc(vit_params *p)
{
    if (!p)
        return vit_fail(VIT_EINVAL, "vit_params_alloc: p is NULL");
    if (p->values)
        return vit_fail(VIT_EINVAL, "vit_params_alloc: already allocated (%zu values)", p->count);
    if (p->ntensors == 0)
        return vit_fail(VIT_EINVAL, "vit_params_alloc: no tensors were added");
    /* vit_params_add kept this sum from overflowing. */
    size_t bytes = (p->count * sizeof(vit_real) + BUF_ALIGN - 1) / BUF_ALIGN * BUF_ALIGN;
    vit_real *v = aligned_alloc(BUF_ALIGN, bytes);
    vit_real *g = v ? aligned_alloc(BUF_ALIGN, bytes) : NULL;
    if (!g) {
        free(v);
        return vit_fail(VIT_ENOMEM, "vit_params_alloc: out of memory for 2 x %zu values",
                        p->count);
    }
    memset(v, 0, bytes);
    memset(g, 0, bytes);
    p->values = v;
    p->grads = g;
    return VIT_OK;
}

size_t vit_params_count(const vit_params *p) { return p ? p->count : 0; }
int vit_params_tensor_count(const vit_params *p) { return p ? p->ntensors : 0; }

const vit_param_tensor *vit_params_tensor(const vit_params *p, int i)
{
    if (!p || i < 0 || i >= p->ntensors)
        return NULL;
    return &p->tensors[i].t;
}

int vit_params_find(const vit_params *p, const char *name)
{
    if (!p || !name)
        return -1;
    for (int i = 0; i < p->ntensors; i++)
        if (strcmp(p->tensors[i].name, name) == 0)
            return i;
    return -1;
}

vit_real *vit_params_values(vit_params *p) { return p ? p->values : NULL; }
vit_real *vit_params_grads(vit_params *p) { return p ? p->grads : NULL; }

vit_real *vit_params_value_of(vit_params *p, int i)
{
    const vit_param_tensor *t = vit_params_tensor(p, i);
    return t && p->values ? p->values + t->offset : NULL;
}

vit_real *vit_params_grad_of(vit_params *p, int i)
{
    const vit_param_tensor *t = vit_params_tensor(p, i);
    return t && p->grads ? p->grads + t->offset : NULL;
}

/* One value of a tensor initialised with `init`.  The normal is timm's
 * trunc_normal_ by rejection, z drawn again while |z| > 2, and the product
 * is taken in double then rounded once, as vit_model_init does it. */
static vit_real init_value(vit_rng *rng, int init, double scale)
{
    switch (init) {
    case VIT_INIT_ONE:
        return (vit_real)1;
    case VIT_INIT_NORMAL: {
        double z;
        do
            z = vit_rng_normal(rng);
        while (fabs(z) > 2.0);
        return (vit_real)(z * scale);
    }
    case VIT_INIT_UNIFORM:
        return (vit_real)((2.0 * vit_rng_uniform(rng) - 1.0) * scale);
    case VIT_INIT_CONST:
        return (vit_real)scale;
    default:
        return (vit_real)0;
    }
}

int vit_params_init(vit_params *p, vit_rng *rng)
{
    if (!p || !rng)
        return vit_fail(VIT_EINVAL, "vit_params_init: %s is NULL", !p ? "p" : "rng");
    if (!p->values)
        return vit_fail(VIT_EINVAL, "vit_params_init: called before vit_params_alloc");
    for (int i = 0; i < p->ntensors; i++) {
        const vit_param_tensor *t = &p->tensors[i].t;
        vit_real *v = p->values + t->offset;
        for (size_t j = 0; j < t->size; j++)
            v[j] = init_value(rng, t->init, t->scale);
    }
    return VIT_OK;
}

const vit_param_group *vit_params_groups(const vit_params *p, int *count)
{
    if (count)
        *count = p ? p->ngroups : 0;
    return p && p->ngroups ? p->groups : NULL;
}

void vit_params_zero_grads(vit_params *p)
{
    if (p && p->grads)
        memset(p->grads, 0, p->count * sizeof *p->grads);
}

/* A leaf over the values from offset on, with the given shape. */
static vit_tensor *leaf_at(vit_params *p, vit_tape *tape, size_t offset, int ndim,
                           const int *shape, int with_grad)
{
    return vit_tape_leaf(tape, p->values + offset, with_grad ? p->grads + offset : NULL, ndim,
                         shape);
}

/* VIT_OK when p, tape and the tensor range [first, first + count) are
 * usable; otherwise the message, the tape's status set when there is a
 * tape, and the code. */
static int check_leaf(const vit_params *p, vit_tape *tape, const char *fn, int first, int count)
{
    int rc = VIT_OK;
    if (!p || !tape)
        rc = vit_fail(VIT_EINVAL, "%s: %s is NULL", fn, !p ? "p" : "tape");
    else if (!p->values)
        rc = vit_fail(VIT_EINVAL, "%s: called before vit_params_alloc", fn);
    else if (count < 1)
        rc = vit_fail(VIT_EINVAL, "%s: count must be positive, got %d", fn, count);
    else if (first < 0 || first >= p->ntensors || count > p->ntensors - first)
        rc = vit_fail(VIT_EINVAL, "%s: tensors %d..%ld are outside 0..%d", fn, first,
                      (long)first + (count - 1), p->ntensors - 1);
    if (rc != VIT_OK && tape)
        vit_tape_fail(tape, rc);
    return rc;
}

vit_tensor *vit_params_leaf(vit_params *p, vit_tape *tape, int i, int with_grad)
{
    if (check_leaf(p, tape, "vit_params_leaf", i, 1) != VIT_OK)
        return NULL;
    const vit_param_tensor *t = &p->tensors[i].t;
    return leaf_at(p, tape, t->offset, t->ndim, t->shape, with_grad);
}

vit_tensor *vit_params_leaf_range(vit_params *p, vit_tape *tape, int first, int count,
                                  int with_grad)
{
    static const char *fn = "vit_params_leaf_range";
    if (check_leaf(p, tape, fn, first, count) != VIT_OK)
        return NULL;
    const vit_param_tensor *a = &p->tensors[first].t, *b = &p->tensors[first + count - 1].t;
    size_t n = b->offset + b->size - a->offset;
    if (n > INT_MAX) {
        vit_tape_fail(tape, vit_fail(VIT_EINVAL, "%s: tensors \"%s\"..\"%s\" hold %zu values, "
                                     "more than a tape dimension (%d)", fn, a->name, b->name,
                                     n, INT_MAX));
        return NULL;
    }
    int shape[1] = {(int)n};
    return leaf_at(p, tape, a->offset, 1, shape, with_grad);
}

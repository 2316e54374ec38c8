/*
 * vit_params_save / vit_params_load (vit/params.h): a user model's
 * parameters as a file in the checkpoint format (vit/checkpoint.h), one
 * tensor per parameter tensor under its name, written whole or not at all
 * through the library's one writer (atomic_file_internal.h), and read back only into
 * tensors of the same names and shapes.
 */
#include "vit/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atomic_file_internal.h"
#include "checkpoint_internal.h"
#include "error.h"
#include "vit/checkpoint.h"

int vit_params_save(const vit_params *p, const char *path, const char *note)
{
    static const char fn[] = "vit_params_save";
    int rc;
    if ((rc = vit_check_ptr(fn, "p", p)) || (rc = vit_check_ptr(fn, "path", path)))
        return rc;
    const int n = vit_params_tensor_count(p);
    const vit_real *values = vit_params_values((vit_params *)p);
    if (!values)
        return vit_fail(VIT_EINVAL, "%s: '%s': the parameters are not allocated "
                        "(vit_params_alloc)", fn, path);
    vit_ckpt_tensor *t = calloc((size_t)n, sizeof *t);
    if (!t)
        return vit_fail(VIT_ENOMEM, "%s: '%s': out of memory", fn, path);
    for (int i = 0; i < n; i++) {
        const vit_param_tensor *d = vit_params_tensor(p, i);
        snprintf(t[i].name, sizeof t[i].name, "%s", d->name);
        t[i].ndim = d->ndim;
        for (int k = 0; k < d->ndim; k++) t[i].dims[k] = d->shape[k];
        t[i].data = (vit_real *)values + d->offset;
    }
    vit_ckpt c;
    memset(&c, 0, sizeof c);
    c.config = (char *)note;
    c.ntensors = n;
    c.tensors = t;
    FILE *f;
    char *tmp;
    rc = vit_atomic_begin(fn, path, &f, &tmp);
    if (rc == VIT_OK) {
        rc = vit_ckpt_stream(f, &c, path);
        if (rc != VIT_OK) /* the writer's message names vit_ckpt_write */
            rc = vit_fail(rc, "%s: '%s': %s", fn, path, vit_last_error());
        rc = vit_atomic_end(fn, f, tmp, path, rc, NULL);
    }
    free(t);
    return rc;
}

/* "[2, 3]" into buf. */
static void shape_text(char *buf, size_t cap, int ndim, const long long *dims)
{
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int k = 0; k < ndim && at < cap; k++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", k ? ", " : "", dims[k]);
    if (at < cap)
        snprintf(buf + at, cap - at, "]");
}

/* Appends one mismatch to the message (while it fits; the rest counted). */
typedef struct {
    char text[400];
    size_t len;
    int count, shown;
} mismatches;

static void add_mismatch(mismatches *m, const char *what)
{
    m->count++;
    size_t need = strlen(what) + 2;
    if (m->len + need + 24 >= sizeof m->text)
        return;
    m->len += (size_t)snprintf(m->text + m->len, sizeof m->text - m->len, "%s%s",
                               m->shown ? "; " : "", what);
    m->shown++;
}

/* Every difference of names and shapes between the file c and p. */
static void compare(const vit_params *p, const vit_ckpt *c, mismatches *m)
{
    char line[200], a[64], b[64];
    for (int i = 0; i < vit_params_tensor_count(p); i++) {
        const vit_param_tensor *d = vit_params_tensor(p, i);
        const vit_ckpt_tensor *t = vit_ckpt_find(c, d->name);
        long long want[VIT_TENSOR_MAX_DIMS];
        for (int k = 0; k < d->ndim; k++) want[k] = d->shape[k];
        if (!t) {
            snprintf(line, sizeof line, "'%s' is missing from the file", d->name);
            add_mismatch(m, line);
            continue;
        }
        int same = t->ndim == d->ndim;
        for (int k = 0; same && k < d->ndim; k++) same = t->dims[k] == want[k];
        if (!same) {
            shape_text(a, sizeof a, t->ndim, t->dims);
            shape_text(b, sizeof b, d->ndim, want);
            snprintf(line, sizeof line, "'%s' is %s in the file, %s in the model", d->name, a, b);
            add_mismatch(m, line);
        }
    }
    for (int i = 0; i < c->ntensors; i++)
        if (vit_params_find(p, c->tensors[i].name) < 0) {
            snprintf(line, sizeof line, "'%s' is in the file but not in the model",
                     c->tensors[i].name);
            add_mismatch(m, line);
        }
}

int vit_params_load(vit_params *p, const char *path, char **note)
{
    static const char fn[] = "vit_params_load";
    int rc;
    if (note)
        *note = NULL;
    if ((rc = vit_check_ptr(fn, "p", p)) || (rc = vit_check_ptr(fn, "path", path)))
        return rc;
    vit_real *values = vit_params_values(p);
    if (!values)
        return vit_fail(VIT_EINVAL, "%s: '%s': the parameters are not allocated "
                        "(vit_params_alloc)", fn, path);
    vit_ckpt c;
    if ((rc = vit_ckpt_read(path, &c)) != VIT_OK)
        return vit_fail(rc, "%s: %s", fn, vit_last_error());
    mismatches m;
    memset(&m, 0, sizeof m);
    compare(p, &c, &m);
    if (m.count) {
        rc = vit_fail(VIT_EFORMAT, "%s: '%s' does not match the model (%d difference%s): %s%s",
                      fn, path, m.count, m.count == 1 ? "" : "s", m.text,
                      m.shown < m.count ? "; ..." : "");
        vit_ckpt_free(&c);
        return rc;
    }
    char *copy = NULL;
    if (note) {
        const char *text = c.config ? c.config : "";
        copy = malloc(strlen(text) + 1);
        if (!copy) {
            vit_ckpt_free(&c);
            return vit_fail(VIT_ENOMEM, "%s: '%s': out of memory", fn, path);
        }
        strcpy(copy, text);
    }
    for (int i = 0; i < vit_params_tensor_count(p); i++) {
        const vit_param_tensor *d = vit_params_tensor(p, i);
        const vit_ckpt_tensor *t = vit_ckpt_find(&c, d->name);
        memcpy(values + d->offset, t->data, d->size * sizeof *values);
    }
    vit_ckpt_free(&c);
    if (note)
        *note = copy;
    return VIT_OK;
}

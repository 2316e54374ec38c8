/* A model's logits as CSV for tools/torch_check_export.py; see export.h. */
#include "export.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(char *err, size_t cap, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int fail(char *err, size_t cap, const char *fmt, ...)
{
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ---- atomic files ------------------------------------------------------ */

/* Opens a temporary file beside path; *tmp (malloc'd) is its name. */
static FILE *atomic_open(const char *path, char **tmp, char *err, size_t cap)
{
    size_t len = strlen(path);
    *tmp = malloc(len + 8);
    if (!*tmp) {
        fail(err, cap, "%s: out of memory", path);
        return NULL;
    }
    memcpy(*tmp, path, len);
    memcpy(*tmp + len, ".XXXXXX", 8);
    int fd = mkstemp(*tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        fail(err, cap, "%s: cannot create a temporary file beside it: %s", path, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(*tmp);
        }
        free(*tmp);
        *tmp = NULL;
    }
    return f;
}

/* Finishes the file: everything on disk before the rename makes it visible
 * at path, so a reader never sees half a file.  On failure, removes it. */
static int atomic_commit(FILE *f, int write_failed, const char *path, char *tmp, char *err,
                         size_t cap)
{
    int rc = 0;
    if (write_failed || fflush(f) || fsync(fileno(f)) || fchmod(fileno(f), 0644))
        rc = fail(err, cap, "%s: write failed: %s", path, strerror(errno));
    if (fclose(f) && rc == 0)
        rc = fail(err, cap, "%s: write failed: %s", path, strerror(errno));
    if (rc == 0 && rename(tmp, path))
        rc = fail(err, cap, "%s: cannot rename the temporary file to it: %s", path, strerror(errno));
    if (rc)
        unlink(tmp);
    free(tmp);
    return rc;
}

/* ---- logits ------------------------------------------------------------ */

int export_logits_csv(vit_model *m, const vit_dataset *ds, const char *path, double *accuracy,
                      char *err, size_t cap)
{
    if (!m || !ds || !path)
        return fail(err, cap, "export_logits_csv: %s is NULL", !m ? "model" : !ds ? "data" : "path");
    const vit_config *c = vit_model_config(m);
    if (ds->height != c->image_height || ds->width != c->image_width ||
        ds->channels != c->channels || ds->count <= 0)
        return fail(err, cap, "%s: data are %d images of %dx%dx%d, the model expects %dx%dx%d",
                    path, ds->count, ds->height, ds->width, ds->channels, c->image_height,
                    c->image_width, c->channels);
    vit_tape *tape = vit_tape_new();
    if (!tape)
        return fail(err, cap, "%s: out of memory", path);
    char *tmp;
    FILE *f = atomic_open(path, &tmp, err, cap);
    if (!f) {
        vit_tape_free(tape);
        return -1;
    }
    int K = c->classes, correct = 0, bad = 0, rc = 0;
    size_t img = (size_t)ds->height * ds->width * ds->channels;
    fprintf(f, "index,label,pred");
    for (int k = 0; k < K; k++)
        fprintf(f, ",logit_%d", k);
    fprintf(f, "\n");
    for (int lo = 0; lo < ds->count && rc == 0; lo += 128) {
        int b = ds->count - lo < 128 ? ds->count - lo : 128;
        vit_tape_reset(tape);
        vit_tensor *y = vit_model_forward(m, tape, ds->images + (size_t)lo * img, b, 0);
        if (!y || vit_tape_status(tape)) {
            rc = fail(err, cap, "%s: forward failed: %s", path, vit_last_error());
            break;
        }
        for (int i = 0; i < b; i++) {
            const vit_real *z = y->data + (size_t)i * K;
            int pred = 0;
            for (int k = 1; k < K; k++)
                if (z[k] > z[pred])
                    pred = k;
            correct += pred == ds->labels[lo + i];
            fprintf(f, "%d,%d,%d", lo + i, ds->labels[lo + i], pred);
            for (int k = 0; k < K; k++)
                fprintf(f, ",%.9g", (double)z[k]);
            bad |= fprintf(f, "\n") < 0;
        }
    }
    vit_tape_free(tape);
    if (rc) {
        fclose(f);
        unlink(tmp);
        free(tmp);
        return rc;
    }
    if (atomic_commit(f, bad, path, tmp, err, cap))
        return -1;
    if (accuracy)
        *accuracy = (double)correct / ds->count;
    return 0;
}

/* A model's logits over a data set as CSV; see vit/export.h. */
#include "vit/export.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "model_internal.h"
#include "vit/atomic_file.h"
#include "vit/tape.h"

/* Significant digits that read back as the same vit_real. */
#ifdef VIT_DOUBLE
enum { LOGIT_DIGITS = 17 };
#else
enum { LOGIT_DIGITS = 9 };
#endif

/* Images per forward pass: bounds the tape's memory whatever ds->count. */
enum { EXPORT_BATCH = 128 };

static int check_args(vit_model *m, const vit_dataset *ds, const char *path)
{
    if (!m || !ds || !path)
        return vit_fail(VIT_EINVAL, "vit_export_logits_csv: %s is NULL",
                        !m ? "model" : !ds ? "data" : "path");
    const vit_config *c = vit_model_config(m);
    if (ds->height != c->image_height || ds->width != c->image_width ||
        ds->channels != c->channels || ds->count <= 0 || !ds->images || !ds->labels)
        return vit_fail(VIT_EINVAL,
                        "%s: data are %d images of %dx%dx%d, the model expects %dx%dx%d", path,
                        ds->count, ds->height, ds->width, ds->channels, c->image_height,
                        c->image_width, c->channels);
    return VIT_OK;
}

/* The rows of images lo .. lo+b-1 from their logits z [b, K]; adds the
 * rows whose largest logit is their label to *correct.  Returns nonzero
 * when a write failed. */
static int write_rows(FILE *f, const vit_dataset *ds, const vit_real *z, int lo, int b, int K,
                      int *correct)
{
    int bad = 0;
    for (int i = 0; i < b; i++, z += K) {
        int pred = 0;
        for (int k = 1; k < K; k++)
            if (z[k] > z[pred])
                pred = k;
        *correct += pred == ds->labels[lo + i];
        bad |= fprintf(f, "%d,%d,%d", lo + i, ds->labels[lo + i], pred) < 0;
        for (int k = 0; k < K; k++)
            bad |= fprintf(f, ",%.*g", LOGIT_DIGITS, (double)z[k]) < 0;
        bad |= fputc('\n', f) == EOF;
    }
    return bad;
}

/* Everything between opening the temporary file and closing it. */
static int write_csv(vit_model *m, const vit_dataset *ds, const char *path, FILE *f,
                     vit_tape *tape, int *correct)
{
    int K = vit_model_config(m)->classes, bad = fprintf(f, "index,label,pred") < 0;
    for (int k = 0; k < K; k++)
        bad |= fprintf(f, ",logit_%d", k) < 0;
    bad |= fputc('\n', f) == EOF;
    size_t img = (size_t)ds->height * ds->width * ds->channels;
    for (int lo = 0; lo < ds->count && !bad; lo += EXPORT_BATCH) {
        int b = ds->count - lo < EXPORT_BATCH ? ds->count - lo : EXPORT_BATCH;
        vit_tape_reset(tape);
        /* the logits alone: no attention maps kept (a Swin would make them) */
        vit_tensor *y = vit_model_logits(m, tape, ds->images + (size_t)lo * img, b);
        int rc = vit_tape_status(tape);
        if (!y && rc == VIT_OK)
            rc = VIT_EINVAL; /* an argument the forward refused */
        if (rc != VIT_OK)
            return vit_fail(rc, "%s: forward failed: %s", path, vit_last_error());
        bad |= write_rows(f, ds, y->data, lo, b, K, correct);
    }
    if (bad)
        return vit_fail(VIT_EIO, "%s: write failed: %s", path, strerror(errno));
    return VIT_OK;
}

int vit_export_logits_csv(vit_model *m, const vit_dataset *ds, const char *path,
                          double *accuracy)
{
    TRY(check_args(m, ds, path));
    vit_tape *tape = vit_tape_new();
    if (!tape)
        return vit_fail(VIT_ENOMEM, "%s: out of memory", path);
    FILE *f;
    char *tmp;
    int rc = vit_atomic_open(path, &f, &tmp), correct = 0;
    if (rc == VIT_OK)
        rc = vit_atomic_close(f, tmp, path, write_csv(m, ds, path, f, tape, &correct));
    vit_tape_free(tape);
    if (rc == VIT_OK && accuracy)
        *accuracy = (double)correct / ds->count;
    return rc;
}

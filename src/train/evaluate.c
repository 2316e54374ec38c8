/*
 * Inference and scoring: class probabilities of images (one pass, or the
 * mean over nine shifted copies, or eighteen with their mirror images), and
 * accuracy, loss and confusion matrix
 * over a data set.
 */
#include "vit/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "argmax.h"
#include "error.h"
#include "model_internal.h"
#include "train_internal.h"
#include "vit/augment.h"

int vit_check_data_shape(const vit_config *c, const vit_dataset *ds, const char *what)
{
    if (!ds || !ds->images || !ds->labels || ds->count <= 0)
        return vit_fail(VIT_EINVAL, "%s set is empty", what);
    if (ds->height != c->image_height || ds->width != c->image_width || ds->channels != c->channels)
        return vit_fail(VIT_EINVAL, "%s images are %dx%dx%d but the model expects %dx%dx%d", what,
                        ds->height, ds->width, ds->channels, c->image_height, c->image_width,
                        c->channels);
    if (ds->classes > c->classes)
        return vit_fail(VIT_EINVAL, "%s set has %d classes but the model has %d", what, ds->classes,
                        c->classes);
    return VIT_OK;
}

/* ---- evaluation ------------------------------------------------------- */

/* probs[b, K] (overwritten) = the row-wise softmax of logits z[b, K]. */
static void softmax_rows(const vit_real *z, int b, int K, vit_real *probs)
{
    for (int r = 0; r < b; r++) {
        const vit_real *zr = z + (size_t)r * K;
        vit_real *pr = probs + (size_t)r * K;
        vit_real mx = zr[vit_argmax(zr, K)];
        double sum = 0;
        for (int k = 0; k < K; k++)
            sum += (double)(pr[k] = (vit_real)exp((double)(zr[k] - mx)));
        for (int k = 0; k < K; k++)
            pr[k] = (vit_real)(pr[k] / sum);
    }
}

/* One forward of b images on tape, its softmax into probs[b, K]. */
static int predict_pass(vit_model *m, vit_tape *tape, const vit_real *images, int b, vit_real *probs)
{
    vit_tape_reset(tape);
    vit_tensor *z = vit_model_logits(m, tape, images, b);
    if (!z)
        return vit_tape_status(tape) ? vit_tape_status(tape) : VIT_EINVAL;
    softmax_rows(z->data, b, vit_model_config(m)->classes, probs);
    return VIT_OK;
}

/* The nine shifts of VIT_TTA_SHIFT9, the identity first. */
static const int tta_shifts[9][2] = {{0, 0},  {-1, -1}, {-1, 0}, {-1, 1}, {0, -1},
                                     {0, 1},  {1, -1},  {1, 0},  {1, 1}};

/* View v (0 .. vit_tta_passes - 1) of image src into dst: shift v % 9 of
 * the image, mirrored first for v >= 9 (the mirror, then the shift, so
 * that the mirrored views are the same nine shifts of the mirror image). */
static void tta_view(vit_real *dst, vit_real *mirror, const vit_real *src, int H, int W, int C,
                     int v)
{
    if (v >= 9) {
        vit_flip_horizontal(mirror, src, H, W, C);
        src = mirror;
    }
    vit_translate(dst, src, H, W, C, tta_shifts[v % 9][0], tta_shifts[v % 9][1]);
}

int vit_predict_tta(vit_model *m, vit_tape *tape, const vit_real *images, int count, int tta,
                    vit_real *probs)
{
    if (!m || !tape || !images || !probs || count <= 0)
        return vit_fail(VIT_EINVAL, "vit_predict: bad argument");
    if (tta == VIT_TTA_AUTO) /* the trainer's choice; a model scores one pass */
        tta = VIT_TTA_NONE;
    int views = vit_tta_passes(tta);
    if (views == 0)
        return vit_fail(VIT_EINVAL, "vit_predict: unknown test-time augmentation %d", tta);
    const vit_config *c = vit_model_config(m);
    int H = c->image_height, W = c->image_width, C = c->channels, K = c->classes;
    size_t img = (size_t)H * W * C;
    const int chunk = 256;
    int rc = VIT_OK;
    if (views == 1) {
        for (int i = 0; i < count && rc == VIT_OK; i += chunk) {
            int b = count - i < chunk ? count - i : chunk;
            rc = predict_pass(m, tape, images + (size_t)i * img, b, probs + (size_t)i * K);
        }
        return rc;
    }
    /* Moved copies of a chunk, one mirror image, one pass's probabilities,
     * their sum. */
    int most = count < chunk ? count : chunk;
    vit_real *moved = malloc((size_t)most * img * sizeof *moved);
    vit_real *mirror = malloc(img * sizeof *mirror);
    vit_real *pass = malloc((size_t)most * K * sizeof *pass);
    double *sum = malloc((size_t)most * K * sizeof *sum);
    if (!moved || !mirror || !pass || !sum)
        rc = vit_fail(VIT_ENOMEM, "vit_predict: out of memory for test-time augmentation");
    for (int i = 0; i < count && rc == VIT_OK; i += chunk) {
        int b = count - i < chunk ? count - i : chunk;
        memset(sum, 0, (size_t)b * K * sizeof *sum);
        for (int v = 0; v < views && rc == VIT_OK; v++) {
            for (int k = 0; k < b; k++)
                tta_view(moved + (size_t)k * img, mirror, images + (size_t)(i + k) * img, H, W, C,
                         v);
            rc = predict_pass(m, tape, moved, b, pass);
            for (size_t j = 0; rc == VIT_OK && j < (size_t)b * K; j++)
                sum[j] += (double)pass[j];
        }
        for (size_t j = 0; rc == VIT_OK && j < (size_t)b * K; j++)
            probs[(size_t)i * K + j] = (vit_real)(sum[j] / views);
    }
    free(moved);
    free(mirror);
    free(pass);
    free(sum);
    return rc;
}

void vit_eval_result_free(vit_eval_result *r)
{
    if (!r)
        return;
    free(r->confusion);
    memset(r, 0, sizeof *r);
}

int vit_evaluate_tta(vit_model *m, vit_tape *tape, const vit_dataset *ds, int batch, int tta,
                     vit_eval_result *r)
{
    if (!m || !tape || !r || batch <= 0)
        return vit_fail(VIT_EINVAL, "vit_evaluate: bad argument");
    memset(r, 0, sizeof *r);
    if (tta == VIT_TTA_AUTO) /* the trainer's choice; a model scores one pass */
        tta = VIT_TTA_NONE;
    if (vit_tta_passes(tta) == 0)
        return vit_fail(VIT_EINVAL, "vit_evaluate: unknown test-time augmentation %d", tta);
    const vit_config *c = vit_model_config(m);
    int rc = vit_check_data_shape(c, ds, "evaluation");
    if (rc)
        return rc;
    int K = c->classes;
    r->confusion = calloc((size_t)K * K, sizeof *r->confusion);
    vit_real *probs = malloc((size_t)batch * K * sizeof *probs);
    if (!r->confusion || !probs) {
        free(probs);
        vit_eval_result_free(r);
        return vit_fail(VIT_ENOMEM, "vit_evaluate: out of memory");
    }
    r->classes = K;
    size_t img = (size_t)c->image_height * c->image_width * c->channels;
    double loss_sum = 0;
    int correct = 0;
    for (int i = 0; i < ds->count && rc == VIT_OK; i += batch) {
        int b = ds->count - i < batch ? ds->count - i : batch;
        rc = vit_predict_tta(m, tape, ds->images + (size_t)i * img, b, tta, probs);
        for (int k = 0; rc == VIT_OK && k < b; k++) {
            int y = ds->labels[i + k], p = vit_argmax(probs + (size_t)k * K, K);
            double py = probs[(size_t)k * K + y];
            loss_sum += -log(py > 1e-300 ? py : 1e-300);
            correct += p == y;
            r->confusion[y * K + p]++;
        }
    }
    free(probs);
    if (rc) {
        vit_eval_result_free(r);
        return rc;
    }
    r->count = ds->count;
    r->loss = loss_sum / ds->count;
    r->accuracy = (double)correct / ds->count;
    if (!isfinite(r->loss)) {
        vit_eval_result_free(r);
        return vit_fail(VIT_ENUM, "vit_evaluate: the loss is not finite");
    }
    return VIT_OK;
}

/*
 * vit/train.h - training and evaluation of a vit_model on a vit_dataset,
 * and model checkpoints (model + optimizer + progress) on top of the
 * generic format in vit/checkpoint.h.
 *
 * Everything vit_train, vit_eval and vit_predict do lives here, so the tools
 * are thin and tests can drive the same code.
 */
#ifndef VIT_TRAIN_H
#define VIT_TRAIN_H

#include <stdio.h>

#include "vit/core.h"
#include "vit/data.h"
#include "vit/model.h"
#include "vit/optim.h"
#include "vit/rng.h"
#include "vit/tape.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Checkpoints of a training run ---------------------------------- */

/* The state a run needs to continue exactly where it stopped. */
typedef struct vit_run_state {
    unsigned long long step;  /* optimizer steps taken */
    unsigned long long epoch; /* epochs completed */
    vit_rng rng;              /* generator state at that point */
} vit_run_state;

/* Writes model parameters (named tensors), the optimizer moments ("adam.m",
 * "adam.v"; the step count t is the run step), the config text, step, epoch and RNG state to path,
 * atomically (temporary file, fsync, rename): an existing file at path is
 * replaced only by a complete new one.  opt may be NULL (weights only). */
int vit_run_save(const char *path, const vit_model *m, const vit_adamw *opt,
                 const vit_run_state *st);

/* Reads a checkpoint: creates *model from the config stored in it and fills
 * its parameters; if opt is not NULL, initialises it and restores the
 * moments (a weights-only checkpoint then gives VIT_EFORMAT); st may be
 * NULL.  Every tensor's name and shape is checked against the model the
 * config describes.  On error nothing is allocated and the message names
 * the file and the problem. */
int vit_run_load(const char *path, vit_model **model, vit_adamw *opt, vit_run_state *st);

/* ---- Evaluation ------------------------------------------------------ */

typedef struct vit_eval_result {
    double loss;      /* mean cross-entropy (no smoothing) */
    double accuracy;  /* fraction correct */
    int count;
    int classes;
    int *confusion;   /* [classes, classes], row = true class, column = predicted; malloc'd */
} vit_eval_result;

/* Scores m on every image of ds in batches of `batch` using tape (reset
 * first; any scratch tape will do).  The data's shape must match the
 * model's config.  Free r->confusion with vit_eval_result_free. */
int vit_evaluate(vit_model *m, vit_tape *tape, const vit_dataset *ds, int batch,
                 vit_eval_result *r);

void vit_eval_result_free(vit_eval_result *r);

/* Class probabilities [count, classes] of images [count, H, W, C]. */
int vit_predict(vit_model *m, vit_tape *tape, const vit_real *images, int count,
                vit_real *probs);

/* ---- Training -------------------------------------------------------- */

typedef struct vit_train_opts {
    const char *out_dir;     /* checkpoints and metrics go here (created) */
    const char *resume;      /* checkpoint to continue from, or NULL */
    int ckpt_every;          /* epochs between checkpoints (>= 1) */
    int val_count;           /* hold out the last val_count training images
                                as a validation set (0: none); the test set
                                is never used for choices */
    int stop_after_epochs;   /* stop (with a checkpoint) once this many epochs
                                are complete, as if interrupted; 0: run to
                                the end */
    int progress;            /* 0 quiet, 1 plain lines, 2 terminal bar */
    int check_replicas;      /* data-parallel jobs: after every epoch, fail
                                unless all ranks hold bitwise identical
                                parameters */
    FILE *log;               /* where progress goes (stdout if NULL) */
} vit_train_opts;

typedef struct vit_train_result {
    double test_accuracy, test_loss;
    double val_accuracy;     /* -1 without a validation set */
    double seconds;          /* wall time of this invocation */
    double images_per_second;
    unsigned long long steps;
    int epochs_done;
    int confusion_classes;
    int *confusion;          /* final test confusion matrix, malloc'd */
} vit_train_result;

/* Trains a model described by cfg (its image and class fields are taken
 * from the data) on train, scoring test after every epoch.  Writes
 * OUT/metrics.csv (epoch, train_loss, train_acc, test_loss, test_acc, lr,
 * seconds), OUT/last.ckpt every ckpt_every epochs and at the end.  With
 * resume, the run continues from the checkpoint (its config wins; cfg's
 * model fields must agree with it) and the result equals an uninterrupted
 * run.  A non-finite loss stops the run with VIT_ENUM and a message naming
 * the step; the last good checkpoint is kept.
 *
 * Data-parallel (vit/dist.h): every rank calls this with the same data and
 * options; each minibatch is split across the ranks, their gradients are
 * summed with one MPI_Allreduce over the flat gradient buffer, and all
 * apply the same AdamW update, so the parameters stay identical.  Rank 0
 * alone prints, writes metrics and checkpoints; evaluation is split and
 * its counts summed. */
int vit_train_run(const vit_config *cfg, const vit_dataset *train, const vit_dataset *test,
                  const vit_train_opts *opts, vit_train_result *res);

void vit_train_result_free(vit_train_result *r);

#ifdef __cplusplus
}
#endif

#endif

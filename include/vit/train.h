/*
 * vit/train.h - training and evaluation of a vit_model on a vit_dataset,
 * and model checkpoints (model + optimizer + progress) on top of the
 * generic format in vit/checkpoint.h.
 *
 * Everything vit_train, vit_eval and vit_predict do lives here, so the tools
 * are thin and tests can drive the same code.
 *
 * Conventions (core.h): images are [count, H, W, C], batch first; functions
 * return VIT_OK or a negative VIT_E* code with a message in
 * vit_last_error(); result structs filled here own malloc'd arrays that
 * their *_free function releases.  Thread safety: a model, tape or
 * optimizer is used by one thread at a time; vit_train_run uses the
 * library's threads itself (vit_set_threads).
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

VIT_BEGIN_DECLS

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
 * replaced only by a complete new one.  opt may be NULL (weights only).
 * Everything is only read.  Returns VIT_OK; VIT_EINVAL for a NULL path, m
 * or st; VIT_ENOMEM; VIT_ENUM for a non-finite value; VIT_EIO (message
 * names the path and the reason) as vit_ckpt_write. */
int vit_run_save(const char *path, const vit_model *m, const vit_adamw *opt,
                 const vit_run_state *st);

/* Reads a checkpoint: creates *model from the config stored in it and fills
 * its parameters; if opt is not NULL, initialises it and restores the
 * moments (a weights-only checkpoint then gives VIT_EFORMAT); st may be
 * NULL.  Every tensor's name and shape is checked against the model the
 * config describes.  The new *model belongs to the caller (vit_model_free),
 * as do opt's moments (vit_adamw_free); *opt and *st are overwritten.
 * Returns VIT_OK; VIT_EINVAL for a NULL path or model; otherwise the codes
 * of vit_ckpt_read, or VIT_EFORMAT for a config or tensor that does not fit.
 * On error nothing is allocated, *model is NULL and the message names the
 * file and the problem. */
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
 * model's config.  *r is overwritten; free r->confusion with
 * vit_eval_result_free.  Returns VIT_OK; VIT_EINVAL for a NULL argument,
 * batch < 1, an empty ds, or images or classes that do not fit the model;
 * VIT_ENOMEM; VIT_ENUM for a non-finite loss.  On error *r holds nothing to
 * free. */
int vit_evaluate(vit_model *m, vit_tape *tape, const vit_dataset *ds, int batch,
                 vit_eval_result *r);

/* Frees r->confusion and zeroes *r; NULL and a zeroed struct are fine. */
void vit_eval_result_free(vit_eval_result *r);

/* Class probabilities (softmax of the logits) into the caller's probs
 * [count, classes] (overwritten) for images [count, H, W, C] of the model's
 * shape, evaluated in chunks on tape (reset each chunk).  Returns VIT_OK;
 * VIT_EINVAL for a NULL argument or count < 1; the forward's error
 * otherwise. */
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
 * from the data) on train, scoring test after every epoch.  cfg, the data
 * sets and opts are only read; *res is overwritten and its confusion
 * matrix is the caller's to free with vit_train_result_free.  Errors:
 * VIT_EINVAL (NULL argument, inconsistent config or data, val_count too
 * large), VIT_EIO (output folder, checkpoint or metrics file), VIT_ENOMEM,
 * VIT_EFORMAT (a resume checkpoint that does not fit), VIT_ENUM (below).  Writes
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

/* Frees r->confusion and sets it to NULL (the other fields stay); NULL and
 * a zeroed struct are fine. */
void vit_train_result_free(vit_train_result *r);

VIT_END_DECLS

#endif

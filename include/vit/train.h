/*
 * vit/train.h - training and evaluation of a vit_model on a vit_dataset,
 * and model checkpoints (model + optimizer + progress) on top of the
 * generic format in vit/checkpoint.h.
 *
 * The training loop is a library object without a user interface: a
 * vit_trainer steps, scores, checkpoints and resumes a run and reports each
 * step, epoch and checkpoint to a callback (vit_train_event); drawing that
 * for a person (bars, tables, ETA lines) is the caller's.  vit_train_run is
 * the whole run in one call.
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

#include <signal.h>

#include "vit/core.h"
#include "vit/data.h"
#include "vit/model.h"
#include "vit/optim.h"
#include "vit/rng.h"
#include "vit/tape.h"

VIT_BEGIN_DECLS

/* ---- Checkpoints of a training run ---------------------------------- */

/* What a run trains on, as its checkpoints record it: how to load it again
 * and a fingerprint that tells another data set from it.  Fixed size, no
 * pointers: copy it freely. */
#define VIT_RUN_DATA_SPEC_MAX 1024
typedef struct vit_run_data {
    char spec[VIT_RUN_DATA_SPEC_MAX]; /* vit_data_load's spec ("digits", a
                                         folder), or "" when not known */
    int train_count, test_count;      /* images; the training count includes
                                         a validation tail (val_count) */
    int height, width, channels, classes;
    unsigned long long labels_hash;   /* FNV-1a (64-bit) of the labels, the
                                         training set's then the test set's,
                                         each as 4 little-endian bytes */
    unsigned long long pixels_hash;   /* FNV-1a of up to 64 images of each set,
                                         evenly spread, every pixel as the
                                         byte round(255 x) of x in [0, 1]: the
                                         same in the float32 and float64
                                         builds */
    vit_data_split split;             /* the split vit_data_load_split
                                         applied to spec (all zero: none,
                                         and in records written before
                                         splits were recorded) */
    char init_from[VIT_RUN_DATA_SPEC_MAX]; /* the weights the run started
                                         from (vit_train_opts.init_from,
                                         absolute when it resolves), or
                                         "" */
    unsigned long long init_hash;     /* FNV-1a (64-bit) of that file's bytes
                                         (0 with init_from "") */
    vit_data_fit fit;                 /* the transform the images got on
                                         load (vit_data_load_opts's
                                         opts->fit, or the rule's shape):
                                         all zero when none was given or
                                         ruled, and in records written
                                         before it was recorded; stored as
                                         "fit = HxWxC" (0 for a part
                                         kept) */
    int val_count;                    /* the validation tail held out of
                                         train_count (vit_train_opts
                                         .val_count): 0 for none, and in
                                         records written before it was
                                         recorded (0.3.0) */
} vit_run_data;

/* Fills *out with the fingerprint of train and test and with spec (NULL:
 * ""; a spec of VIT_RUN_DATA_SPEC_MAX bytes or more, or with a newline, is
 * stored as ""); out->split is zeroed (the caller sets it).  Reads every
 * label and the sampled images.  VIT_EINVAL for a NULL or empty set. */
int vit_run_data_of(const vit_dataset *train, const vit_dataset *test, const char *spec,
                    vit_run_data *out);

/* 1 if a and b have the same fingerprint (counts, shape, classes and both
 * hashes; the specs and splits are not compared: the hashes cover the
 * parts a split made), else 0. */
int vit_run_data_same(const vit_run_data *a, const vit_run_data *b);

/* The fit to load a run's own data with again: the record's shape
 * (height, width, channels), which leaves images of that shape as they
 * are and fits the others as the run did (rec->fit, or the rule, made
 * them that shape); all zero when known is 0. */
vit_data_fit vit_run_data_fit(const vit_run_data *rec, int known);

/* One line for a person: "1437 train + 360 test images of 8x8x1, 10
 * classes (labels 9f3c21d04ab6e7c1, pixels 04aa...)" into buf[cap]
 * (cut to fit); returns buf. */
const char *vit_run_data_describe(const vit_run_data *d, char *buf, size_t cap);

/* The data record of the checkpoint at path into *out, *known = 1; a
 * checkpoint without one (written before format 5, or by vit_run_save
 * without it) gives *known = 0 and *out zeroed.  Reads the file's header
 * alone (vit_ckpt_read_header: not the tensors, no checksum).  Errors as
 * vit_ckpt_read_header, and VIT_EFORMAT for a record that does not parse. */
int vit_run_data_read(const char *path, vit_run_data *out, int *known);

/* The state a run needs to continue exactly where it stopped. */
typedef struct vit_run_state {
    unsigned long long step;  /* optimizer steps taken */
    unsigned long long epoch; /* epochs completed */
    vit_rng rng;              /* generator state at that point */
    /* Inside an epoch (all zero at an epoch boundary): steps done in the
     * current epoch, its running sums (loss * images, correct, images) and
     * the order of the training images it follows, norder values, malloc'd
     * by vit_run_load (free with vit_run_state_free), only read by
     * vit_run_save.  order is NULL when epoch_step is 0. */
    unsigned long long epoch_step;
    double epoch_sums[3];
    int norder;
    int *order;
    /* The names of the model's classes, nclass_names NUL-terminated
     * strings (class_names[k] names label k).  vit_run_save writes them
     * when class_names is not NULL, and nclass_names must then equal the
     * model's classes; NULL writes none.  vit_run_load fills them: the
     * file's names, or "0" .. "K-1" when it holds none (format 1, or
     * written without names); the array and strings are malloc'd and
     * freed by vit_run_state_free. */
    int nclass_names;
    char **class_names;
    /* Weight averaging (config ema > 0): the model a checkpoint holds
     * under the parameters' own names is the average, the classifier that
     * evaluation, prediction and export use; the weights the optimizer
     * trains are these, vit_model_param_count reals laid out like
     * vit_model_params, stored as the tensor VIT_RUN_TRAIN_PARAMS.
     * vit_run_save writes them when train_params is not NULL (only read);
     * vit_run_load fills them, malloc'd (freed by vit_run_state_free),
     * when the file holds them, else sets NULL (no averaging, format 1 or
     * 2, or an imported model). */
    vit_real *train_params;
    /* What the run trains on: vit_run_save writes it when has_data is 1;
     * vit_run_load fills it and sets has_data when the file holds it. */
    int has_data;
    vit_run_data data;
    /* With a validation set: the epoch of the best model so far (0: none)
     * and its validation score (vit_train_opts.save_best's measure; the
     * accuracy without one), stored as the tensor VIT_RUN_BEST (2 values)
     * when best_epoch > 0; vit_run_load fills them, or zeros from a file
     * without it. */
    unsigned long long best_epoch;
    double best_score;
} vit_run_state;

/* The checkpoint tensor of vit_run_state.best_epoch and best_score. */
#define VIT_RUN_BEST "train.best"

/* The checkpoint tensor of vit_run_state.train_params. */
#define VIT_RUN_TRAIN_PARAMS "train.params"

/* Frees st->order, st->class_names and st->train_params and sets them to
 * NULL (and their counts to 0); NULL is fine. */
void vit_run_state_free(vit_run_state *st);

/* Writes model parameters (named tensors), the optimizer moments ("adam.m",
 * "adam.v"; the step count t is the run step), the training weights when
 * st->train_params is not NULL (then m holds the averages), the config
 * text (the model's network and, when tc is not NULL, the training recipe
 * tc: vit_config_format), step, epoch, RNG state, the position inside the epoch and the
 * class names to path,
 * atomically (temporary file, fsync, rename): an existing file at path is
 * replaced only by a complete new one.  opt may be NULL (weights only).
 * Everything is only read.  Returns VIT_OK; VIT_EINVAL for a NULL path, m
 * or st, or class names whose count is not the model's classes or that
 * vit_ckpt_write refuses (empty, 256 bytes or longer); VIT_ENOMEM; VIT_ENUM for a non-finite value; VIT_EIO (message
 * names the path and the reason) as vit_ckpt_write. */
int vit_run_save(const char *path, const vit_model *m, const vit_train_config *tc,
                 const vit_adamw *opt, const vit_run_state *st);

/* Reads a checkpoint: creates *model from the network of the config stored
 * in it and fills its parameters; if tc is not NULL, *tc gets the stored
 * training recipe (the keys the file lacks at their defaults); if opt is not NULL, initialises it and restores the
 * moments (a weights-only checkpoint then gives VIT_EFORMAT); st may be
 * NULL.  Every tensor's name and shape is checked against the model the
 * config describes.  The new *model belongs to the caller (vit_model_free),
 * as do opt's moments (vit_adamw_free) and st->order (vit_run_state_free;
 * NULL unless the checkpoint was taken inside an epoch) and st->class_names
 * (vit_run_state_free), as is st->train_params; *opt and *st are
 * overwritten.  With weight averaging *model gets the averages (the
 * classifier) and st->train_params the weights training continues from.
 * A format-1 checkpoint reads as taken at an epoch boundary, with classes
 * "0" .. "K-1".  A stored config that lacks a key added later (tta, ema:
 * formats 1 and 2) reads it as off, not as today's default.  Class names, when the file holds any, must be as many as the
 * model's classes (else VIT_EFORMAT).
 * Returns VIT_OK; VIT_EINVAL for a NULL path or model; otherwise the codes
 * of vit_ckpt_read, or VIT_EFORMAT for a config or tensor that does not fit.
 * On error nothing is allocated, *model is NULL and the message names the
 * file and the problem. */
int vit_run_load(const char *path, vit_model **model, vit_train_config *tc, vit_adamw *opt,
                 vit_run_state *st);

/* ---- Evaluation ------------------------------------------------------ */

typedef struct vit_eval_result {
    double loss;      /* mean cross-entropy (no smoothing) */
    double accuracy;  /* fraction correct */
    int count;
    int classes;
    int *confusion;   /* [classes, classes], row = true class, column = predicted; malloc'd */
} vit_eval_result;

/* Scores m on every image of ds in batches of `batch` using tape (reset
 * first; any scratch tape will do), each image classified as
 * vit_predict_tta does with test-time augmentation tta (VIT_TTA_NONE,
 * VIT_TTA_SHIFT9 or VIT_TTA_SHIFT9_FLIP, vit/model.h; VIT_TTA_AUTO scores
 * one pass): a run's is its recipe's (vit_train_config.tta), e.g. from
 * vit_run_load.  The data's shape must match the model's config.  *r is
 * overwritten; free r->confusion with vit_eval_result_free.  Returns
 * VIT_OK; VIT_EINVAL for a NULL argument, batch < 1, an empty ds, an
 * unknown tta, or images or classes that do not fit the model;
 * VIT_ENOMEM; VIT_ENUM for a non-finite loss.  On error *r holds nothing
 * to free. */
int vit_evaluate_tta(vit_model *m, vit_tape *tape, const vit_dataset *ds, int batch, int tta,
                     vit_eval_result *r);

/* Frees r->confusion and zeroes *r; NULL and a zeroed struct are fine. */
void vit_eval_result_free(vit_eval_result *r);

/* Class probabilities into the caller's probs [count, classes]
 * (overwritten) for images [count, H, W, C] of the model's shape (only
 * read), evaluated in chunks of up to 256 images on tape (reset each
 * pass), with test-time augmentation tta:
 *   VIT_TTA_NONE (and VIT_TTA_AUTO): the softmax of the logits of one pass;
 *   VIT_TTA_SHIFT9: the mean of the softmaxes of nine passes, over the
 *     image moved by (dy, dx) for dy, dx in {-1, 0, 1} with zeros shifted
 *     in (vit_translate, the training shift augmentation's padding),
 *     summed in double and rounded once; nine times the work, plus
 *     buffers for one chunk's shifted images and probabilities;
 *   VIT_TTA_SHIFT9_FLIP: the mean of eighteen, those nine and the nine
 *     same shifts of the image mirrored left-right; eighteen times the
 *     work.
 * The model is the one scored: vit_evaluate_tta and the trainer's final
 * evaluation use the same setting.  Returns VIT_OK; VIT_EINVAL for a NULL
 * argument, count < 1 or an unknown tta; VIT_ENOMEM; the forward's error
 * otherwise. */
int vit_predict_tta(vit_model *m, vit_tape *tape, const vit_real *images, int count, int tta,
                    vit_real *probs);

/* ---- Training -------------------------------------------------------- */

/* One row of a run's history, as OUT/metrics.csv stores it (one row per
 * epoch; the scores are one pass per image, VIT_TTA_NONE, of the model
 * evaluation scores: with ema the averaged weights).  An epoch scores the
 * validation set when there is one, else the test set: with a validation
 * set the test set is scored once, at the end, on the kept model
 * (vit_train_result), never per epoch (since 0.3.0). */
typedef struct vit_epoch_metrics {
    unsigned long long epoch; /* epochs completed, counted from 1 */
    double train_loss;        /* mean loss of the epoch's training batches */
    double train_acc;         /* their fraction correct */
    double test_loss, test_acc; /* NaN with a validation set (not scored;
                                 metrics.csv leaves the fields empty) */
    double lr;                /* the learning rate of the epoch's last step */
    double seconds;           /* wall time of the run until this row, over
                                 every invocation of a resumed run */
    double val_acc;           /* -1 without a validation set */
    double val_loss;          /* likewise */
} vit_epoch_metrics;

/* vit_train_opts.save_best: which validation score picks the kept model. */
enum { VIT_BEST_NONE = 0, VIT_BEST_ACCURACY = 1, VIT_BEST_LOSS = 2 };

/* One statement of what a resumed run may change (vit_train_run refuses
 * any other difference with it; vit_train --help says it too). */
#define VIT_RESUME_MAY_CHANGE "only epochs, ckpt_minutes and precision may change"

/* A training run in progress (below: vit_trainer_new). */
typedef struct vit_trainer vit_trainer;

/* Where a run stands; vit_trainer_progress and every event give it. */
typedef struct vit_train_progress {
    unsigned long long step;       /* optimizer steps the run has taken */
    unsigned long long epoch;      /* epochs completed */
    unsigned long long epoch_step; /* steps done in epoch `epoch` + 1 (0 at a
                                      boundary; steps_per_epoch in the STEP
                                      event of an epoch's last step) */
    unsigned long long start_step, start_epoch; /* where this invocation began */
    long steps_per_epoch;
    long total_steps;              /* the schedule's length: steps_per_epoch *
                                      epochs, or on other data (other_data)
                                      the steps taken + those left */
    long warmup_steps;             /* the schedule's warm-up: warmup epochs,
                                      at most a tenth of total_steps */
    int epochs;                    /* the run's length (a resume may change it) */
    int batch;                     /* images per step */
    int train_count;               /* training images per epoch (without the
                                      validation tail) */
    double elapsed;                /* seconds since vit_trainer_new */
    double budget_seconds;         /* opts.budget_seconds (0: none) */
    double planned_seconds;        /* with a budget: the run's predicted wall
                                      time (from vit_trainer_new to the end of
                                      the final scores, with their measured
                                      margin) at the latest plan; never past
                                      budget_seconds (plan_cut) */
    double step_seconds;           /* with a budget: the measured seconds of a
                                      step, and of scoring one image once */
    double score_seconds;
    int replans;                   /* plans made after the first (a run
                                      behind its budget is shortened) */
    int stopped;                   /* a stop request ended the run here, and
                                      a checkpoint holds this position */
    int finished;                  /* every epoch is done, or stop_after_epochs
                                      is reached: nothing more to train */
    int plan_cut;                  /* with a budget, at the latest plan: what
                                      gives way when even the least plan does
                                      not fit (planned_seconds then stays
                                      within the budget): VIT_PLAN_WHOLE (0)
                                      nothing; VIT_PLAN_NO_TTA the final
                                      test-time augmented scoring (the
                                      figures will be one pass; also when
                                      it would cost a fifth or more of the
                                      epochs that fit without it, which
                                      the plan then trains instead);
                                      VIT_PLAN_PARTIAL the last epoch
                                      too: the run ends inside it
                                      (result.out_of_budget), total_steps
                                      the steps that fit, where the
                                      cosine reaches min_lr */
} vit_train_progress;

/* vit_train_progress.plan_cut. */
enum { VIT_PLAN_WHOLE = 0, VIT_PLAN_NO_TTA = 1, VIT_PLAN_PARTIAL = 2 };

/* What a run reports to its callback, in the order they happen. */
typedef enum vit_train_event_kind {
    VIT_TRAIN_RESUME_CHANGE = 1, /* in vit_trainer_new: a key this resume changes
                                    (key, old_value, new_value: the config's
                                    text for each; only epochs, ckpt_minutes,
                                    precision) */
    VIT_TRAIN_SET_ASIDE,         /* in vit_trainer_new: with opts.overwrite, the
                                    folder's earlier run (last.ckpt,
                                    metrics.csv) was moved to the folder path */
    VIT_TRAIN_BEGIN,             /* once, at the end of vit_trainer_new, before
                                    any step (at.epoch_step > 0: resumed
                                    inside an epoch) */
    VIT_TRAIN_STEP,              /* after every optimizer step (loss, lr,
                                    images_per_second) */
    VIT_TRAIN_EPOCH,             /* after an epoch is scored and its row is in
                                    metrics.csv (epoch, images_per_second) */
    VIT_TRAIN_CHECKPOINT,        /* after a checkpoint is written (path) */
    VIT_TRAIN_PLAN               /* with opts.budget_seconds: in vit_trainer_new
                                    before BEGIN, the plan (at->epochs,
                                    total_steps, planned_seconds; images_per_
                                    second: the measured training speed), and
                                    after an epoch (or a step) whose end
                                    moves the plan (at->replans counts
                                    those) */,
    VIT_TRAIN_INIT               /* in vit_trainer_new, before BEGIN, with
                                    opts.init_from: path = the file,
                                    new_value = one line saying what the
                                    weights are and how they were adapted
                                    (vit_model_adapt's note, the input
                                    normalisation, the lr factors) */
} vit_train_event_kind;

typedef struct vit_train_event {
    vit_train_event_kind kind;
    vit_trainer *trainer;            /* the run: vit_trainer_config, _model
                                        (not to be stepped or freed from
                                        the callback) */
    const vit_train_progress *at;    /* the position after the event */
    double loss;                     /* STEP: the batch's mean loss */
    double lr;                       /* STEP: the step's learning rate */
    double images_per_second;        /* STEP: this invocation's training
                                        images (steps * batch) per second of
                                        elapsed; EPOCH: the run's (epochs
                                        done * train_count, every invocation)
                                        per second of its wall time
                                        (epoch->seconds: scoring counts) */
    const vit_epoch_metrics *epoch;  /* EPOCH: the row just written */
    const char *path;                /* CHECKPOINT, SET_ASIDE */
    const char *key, *old_value, *new_value; /* RESUME_CHANGE */
} vit_train_event;

/* Called for every event on rank 0 of a data-parallel job (only there);
 * pointers in *ev are valid during the call.  Return 0 to go on; nonzero
 * asks the run to stop as opts.stop does (a checkpoint at the next step
 * boundary, then vit_trainer_fit returns with result.interrupted). */
typedef int (*vit_train_callback)(const vit_train_event *ev, void *user);

typedef struct vit_train_opts {
    const char *out_dir;     /* checkpoints and metrics go here (created) */
    const char *resume;      /* checkpoint to continue from, or NULL */
    int ckpt_every;          /* epochs between checkpoints (>= 1) */
    int val_count;           /* hold out the last val_count training images
                                as a validation set (0: none); the test set
                                is never used for choices.  Recorded in the
                                checkpoints' data record; a resume must
                                give the same (vit_train does, from the
                                record) */
    int stop_after_epochs;   /* stop (with a checkpoint) once this many epochs
                                are complete, as if interrupted; 0: run to
                                the end */
    int check_replicas;      /* data-parallel jobs: after every epoch, fail
                                unless all ranks hold bitwise identical
                                parameters */
    int overwrite;           /* start over in an out_dir that already holds
                                a run: that run's last.ckpt and metrics.csv
                                move to OUT/replaced-N first (event
                                VIT_TRAIN_SET_ASIDE); without it such a
                                folder is refused */
    volatile sig_atomic_t *stop; /* if not NULL: once *stop is nonzero (a
                                signal handler may set it), the run finishes
                                the current step, checkpoints it and returns
                                with result.interrupted set */
    const char *data_spec;   /* how the data was named (vit_data_load's spec),
                                stored in the checkpoints with the data's
                                fingerprint (vit_run_data); NULL: on resume
                                the checkpoint's, else "" */
    int other_data;          /* resume on data whose fingerprint differs from
                                the checkpoint's (refused without it, with
                                VIT_EDATA): the schedule is laid out anew
                                over the steps left at the new steps per
                                epoch */
    vit_data_split data_split; /* the split that made train and test
                                (vit_data_load_split's *used), stored in
                                the checkpoints' data record; all zero:
                                none */
    vit_data_fit data_fit;   /* the transform the images got on load
                                (vit_data_opts.fit, or the rule's shape),
                                stored in the checkpoints' data record;
                                all zero: none */
    double budget_seconds;   /* > 0: a time budget for the run (from
                                vit_trainer_new to the end of the final
                                scores), a ceiling: what an epoch costs is
                                measured first, without training (whole
                                steps of a few batches with the
                                optimizer's update, scoring a few test
                                images once and with the config's
                                test-time augmentation, a checkpoint's
                                writing) and tc's epochs become the most
                                whose steps, epoch scoring, checkpoints
                                and final scores (with their measured
                                margin) end by 95% of it; at least one
                                more than done, at most tc's epochs
                                (progress.plan_cut says what gives way
                                when even that does not fit); the final
                                test-time augmented scores are left out
                                of the plan, their time trained, when
                                they would cost a fifth or more of the
                                epochs that fit without them.  After each
                                epoch the plan is checked against the
                                settled pace (the larger of the mean of
                                the windows after the first and the
                                median of the last three), aiming at
                                97.5% once two such windows are measured:
                                a run predicted to end past 98.5% of the
                                budget is shortened to end by the aim; a
                                longer one (to the aim at the pace plus
                                its measured spread) is made only before
                                the cosine's middle, after a shorter one
                                too; the schedule is laid out anew over
                                the new length (warm-up and cosine,
                                which still ends at min_lr after the last
                                step).  When
                                the final test-time augmented scoring no
                                longer fits what is left, the final figures
                                are one pass (result.tta_skipped).  The
                                planned epochs are the run's (checkpoints
                                keep them): a resume without a budget goes
                                on to them, one with a budget plans its own
                                time, with the checkpoint's epochs (or a
                                larger given epochs) as the most.  Between
                                steps, when one more step, a checkpoint
                                and the final one-pass scoring would pass
                                the budget, the run ends there, inside its
                                epoch (result.out_of_budget).  A plan
                                whose last epoch does not fit whole
                                (plan_cut VIT_PLAN_PARTIAL) lays its
                                cosine out to end at min_lr at the steps
                                that fit before that, and ends there;
                                the last two epochs are checked between
                                their steps too, so a slowdown there
                                comes to such a plan. */
    double warmup_fraction;  /* > 0: the warm-up lasts this fraction of the
                                run's epochs (tc's, or the budget's plan,
                                and each new plan's) instead of tc's
                                warmup, which the checkpoints then record;
                                0: tc's warmup.  vit_train's recipe uses
                                1/28 */
    int save_best;           /* VIT_BEST_NONE (0), VIT_BEST_ACCURACY or
                                VIT_BEST_LOSS: after every epoch whose
                                validation score (one pass) beats every
                                earlier one (accuracy higher, or loss
                                lower), write OUT/best.ckpt (atomically;
                                as last.ckpt, at that epoch's end), and at
                                the end score the test set (once) on that
                                model (result.best_epoch; final.csv's
                                best_epoch); needs val_count > 0
                                (else VIT_EINVAL).  A resume remembers the
                                best so far (the checkpoint records it) */
    int early_stop;          /* > 0: end the run (finished, with last.ckpt
                                written) after this many epochs in a row
                                without a better validation score (by
                                save_best's measure, accuracy when it is
                                VIT_BEST_NONE); needs val_count > 0.  A
                                resume with a larger epochs trains on;
                                0: never */
    /* Fine-tuning (vit/finetune.h, docs/finetune.md).  init_from: a new
       run (not with resume) starts from these weights instead of
       vit_model_init: one of our checkpoints (vit_run_save), one of our
       exports (vit_safetensors_save) or a timm VisionTransformer file as
       published (vit_timm_load).  The architecture is the file's
       (vit_config_take_arch over cfg's), adapted to the data
       (vit_model_adapt: grid, channels, head); the optimizer is fresh;
       the checkpoints' data record names the file and its FNV-1a 64 hash
       (vit_run_data.init_from, init_hash).  NULL: none, and every field
       below must be 0. */
    const char *init_from;
    const char *init_arch;   /* a timm file's arch (vit_timm_arch_find), or
                                NULL: its heads are init_heads */
    int init_heads;          /* a timm file's heads when init_arch is NULL */
    int keep_head;           /* 1: keep the file's head (its classes must be
                                the data's); 0: a new head */
    int init_norm;           /* VIT_INIT_NORM_*: the input normalisation
                                folded into the patch embedding */
    double layer_decay;      /* layer-wise lr decay in (0, 1]: block l of
                                depth steps at lr * layer_decay^(depth - l),
                                the embeddings at layer_decay^(depth + 1),
                                the final norm and head at lr (0: 1, off) */
    int freeze;              /* the embeddings and the first `freeze` blocks
                                keep their weights (0 .. depth) */
    int linear_probe;        /* 1: only the head trains */
    vit_train_callback on_event; /* progress, or NULL */
    void *user;              /* passed to on_event */
} vit_train_opts;

/* vit_train_opts.init_norm: VIT_INIT_NORM_AUTO folds ImageNet's mean and
 * std (VIT_IMAGENET_MEAN, _STD in vit/finetune.h) into a timm file's
 * weights, which were trained on normalised images, so that the model
 * reads the data's [0, 1] pixels as every tool gives them; our own files
 * are used as they are.  _NONE never folds, _IMAGENET always does. */
enum { VIT_INIT_NORM_AUTO = 0, VIT_INIT_NORM_NONE = 1, VIT_INIT_NORM_IMAGENET = 2 };

/* 1 if out_dir already holds a run's checkpoint (out_dir/last.ckpt) that
 * is not the file resume names (resume may be NULL), else 0.  A fresh run,
 * or a resume writing elsewhere than its own folder, would replace it. */
int vit_run_dir_taken(const char *out_dir, const char *resume);

/* The config stored in checkpoint path: its network into *cfg and, when tc
 * is not NULL, its training recipe into *tc (both overwritten), from the
 * file's header alone (vit_ckpt_read_header: not the tensors, no
 * checksum).  Returns VIT_OK or the codes of vit_ckpt_read_header and
 * vit_config_parse. */
int vit_run_config(const char *path, vit_config *cfg, vit_train_config *tc);

typedef struct vit_train_result {
    double test_accuracy, test_loss; /* the final model as vit_evaluate
                                scores it: with its test-time augmentation
                                (tta) and, with ema, the averaged weights */
    double val_accuracy;     /* likewise; -1 without a validation set */
    double test_accuracy_plain, test_loss_plain, val_accuracy_plain;
                             /* the same with one pass per image
                                (VIT_TTA_NONE), as the epoch lines and
                                metrics.csv show (the test figures only
                                without a validation set: with one the
                                test set is scored here alone); equal to
                                the above when tta is none */
    int tta;                 /* the run's config tta (with auto: the one
                                chosen: VIT_TTA_NONE, or VIT_TTA_SHIFT9 or
                                VIT_TTA_SHIFT9_FLIP as the config's flip
                                says) and */
    double ema;              /* ema, to label the figures */
    double seconds;          /* wall time of this invocation */
    double images_per_second;  /* its training images per second of it */
    double run_seconds;      /* wall time of the whole run, every
                                invocation of a resumed one (to the
                                checkpoint it resumed, then this one) */
    double run_images_per_second; /* the run's training images (epochs
                                done x training images) per run_seconds */
    int best_epoch;          /* with opts.save_best: the epoch of the model
                                the final figures score (OUT/best.ckpt);
                                0: the last model */
    double best_score;       /* its validation score (save_best's measure) */
    int early_stopped;       /* 1: opts.early_stop ended the run before its
                                epochs */
    int out_of_budget;       /* 1: the budget ran out inside epoch
                                epochs_done + 1 (at epoch_step): last.ckpt
                                holds that position (a resume goes on from
                                it) and the figures score that model */
    int tta_skipped;         /* the config's tta (VIT_TTA_*) when the
                                budget left no time for it: the final
                                figures are one pass (tta VIT_TTA_NONE);
                                0: not skipped */
    unsigned long long steps;
    int epochs_done;
    int epochs;              /* the run's length in epochs, as its
                                checkpoints record it: tc's epochs (a
                                resume's, with its change), or with
                                opts.budget_seconds the budget's last plan;
                                filled on every VIT_OK return */
    int confusion_classes;
    int *confusion;          /* final test confusion matrix, malloc'd */
    int interrupted;         /* 1: stopped through opts.stop, the callback or
                                vit_trainer_request_stop; the checkpoint
                                holds the position (no scores filled) */
    unsigned long long epoch_step; /* with interrupted or out_of_budget:
                                steps done in the epoch epochs_done + 1
                                (0: at its start) */
    long steps_per_epoch;
    int already_complete;    /* 1: resumed a run that had done all its
                                epochs; nothing trained (no scores filled) */
    int tta_auto;            /* 1: config tta = auto chose tta: shift9 (or
                                shift9flip, with flip) only if its
                                validation accuracy beat one pass */
    double val_accuracy_tta, test_accuracy_tta; /* with tta_auto: the shift9
                                (shift9flip)
                                figures auto measured (validation: when there
                                is a validation set; test: when one pass was
                                kept without one, to report beside it), else
                                -1 */
} vit_train_result;

/* ---- The trainer: a run driven step by step ---------------------------- */

/* A training run in progress: the model, its optimizer and averaged
 * weights, the data order, the output folder and its metrics file.  Made
 * by vit_trainer_new, driven by vit_trainer_step / _epoch / _fit, freed by
 * vit_trainer_free.  One thread drives it (the library's own threads work
 * inside each call: vit_set_threads); vit_trainer_request_stop alone may be
 * called from elsewhere (another thread; a signal handler should set
 * opts.stop instead).  In a data-parallel job every rank makes the same
 * calls in the same order (each of them is collective). */

/* Sets up the run vit_train_run describes (below) without training:
 * builds or resumes the model, checks the data against it, prepares
 * out_dir (refusing a folder that holds another run unless overwrite, and
 * then moving that run aside), and writes OUT/metrics.csv's header and, on
 * resume, the checkpoint's epochs' rows.  cfg, tc, the data sets and opts are
 * only read and must outlive the trainer (the data sets and the strings of
 * opts are not copied).  Events RESUME_CHANGE, SET_ASIDE and BEGIN go to
 * opts->on_event from here.  *out gets the trainer (NULL on error).
 * Errors as vit_train_run's, and VIT_EINVAL for a stop_after_epochs the
 * resumed checkpoint has already reached (nothing is written then). */
int vit_trainer_new(vit_trainer **out, const vit_config *cfg, const vit_train_config *tc,
                    const vit_dataset *train, const vit_dataset *test,
                    const vit_train_opts *opts);

/* One optimizer step (the next minibatch of the epoch; an epoch's first
 * step shuffles the data).  After an epoch's last step, also the epoch's
 * end: the test (and validation) scores, the metrics.csv row, the EPOCH
 * event and the checkpoint every opts.ckpt_every epochs (and at the last
 * epoch).  Between steps a stop request or a due ckpt_minutes checkpoint
 * writes the position inside the epoch; a stop then sets
 * progress.stopped.  Returns VIT_OK; VIT_EINVAL when the run is finished
 * or stopped; VIT_ENUM naming the step when the loss or a gradient is not
 * finite or a gradient's square overflows (the message says which; the
 * last good checkpoint is kept); VIT_EIO, VIT_ENOMEM. */
int vit_trainer_step(vit_trainer *t);

/* Steps until the current epoch ends (its end as in vit_trainer_step) or
 * a stop request; errors as vit_trainer_step. */
int vit_trainer_epoch(vit_trainer *t);

/* Epochs until the run is finished or stopped, then (unless stopped) the
 * final scores, with the config's test-time augmentation and one pass,
 * into *res (overwritten; free with vit_train_result_free).  A resumed run
 * that had done all its epochs sets res->already_complete.  Errors as
 * vit_trainer_step, and the evaluation's. */
int vit_trainer_fit(vit_trainer *t, vit_train_result *res);

/* Scores the model the run evaluates (with ema, the averaged weights) on
 * ds with test-time augmentation tta, split across a data-parallel job's
 * ranks (every rank must call it); *r as vit_evaluate_tta. */
int vit_trainer_evaluate(vit_trainer *t, const vit_dataset *ds, int tta, vit_eval_result *r);

/* Writes OUT/last.ckpt now (inside an epoch too: the position and data
 * order are kept), atomically; event CHECKPOINT.  Errors as vit_run_save. */
int vit_trainer_checkpoint(vit_trainer *t);

/* Asks the run to stop at the next step boundary with a checkpoint
 * (progress.stopped).  Safe from another thread. */
void vit_trainer_request_stop(vit_trainer *t);

/* The run's position (owned by the trainer, updated by each call). */
const vit_train_progress *vit_trainer_progress(const vit_trainer *t);

/* The run's network (a resume's: the checkpoint's; image and class fields
 * from the data; owned by the trainer). */
const vit_config *vit_trainer_config(const vit_trainer *t);

/* The run's training recipe (a resume's: the checkpoint's with the changed
 * epochs or ckpt_minutes; owned by the trainer). */
const vit_train_config *vit_trainer_train_config(const vit_trainer *t);

/* The model evaluation scores and checkpoints hold (with ema, the average
 * of the trained weights; else the trained model).  Owned by the trainer. */
vit_model *vit_trainer_model(vit_trainer *t);

/* Frees the trainer and closes its metrics file; NULL is fine. */
void vit_trainer_free(vit_trainer *t);

/* Trains the network cfg (its image and class fields are taken from the
 * data) with the recipe tc (vit/train_config.h) on train, scoring test after every epoch:
 * vit_trainer_new, vit_trainer_fit and vit_trainer_free in one call.  cfg, tc,
 * the data sets and opts are only read; *res is overwritten and its
 * confusion matrix is the caller's to free with vit_train_result_free.
 * With tc->ema > 0 the run keeps the running average of the parameters
 * (vit_ema_update after every optimizer step, t the run's step): every
 * evaluation scores the average, and checkpoints hold it as the model with
 * the trained weights beside it (vit_run_state.train_params), so the model
 * vit_run_load gives (to vit_evaluate, vit_predict, vit_safetensors_save)
 * is the average and a resume continues both exactly.  Epoch scores are
 * one pass per image; the final ones (res) are with the config's test-time
 * augmentation, and also one pass.  Errors: VIT_EINVAL (NULL argument,
 * inconsistent config or data, val_count too large), VIT_EDATA (a resume
 * on data whose fingerprint differs from the checkpoint's record, without
 * other_data; the message names both), VIT_EIO (output
 * folder, checkpoint or metrics file), VIT_ENOMEM, VIT_EFORMAT (a resume
 * checkpoint that does not fit), VIT_ENUM (below).  Writes
 * OUT/metrics.csv (epoch, train_loss, train_acc, test_loss, test_acc, lr,
 * seconds, and val_acc, val_loss with a validation set, which is then
 * scored after every epoch instead of the test set: test_loss and test_acc
 * are left empty, and the test set is scored once, at the end, on the kept
 * model; vit_epoch_metrics.  A resumed run logged before 0.3.0 keeps its
 * rows, val_loss empty), OUT/last.ckpt every ckpt_every epochs and
 * at the end, and at the end OUT/final.csv: the final figures of res in
 * metrics.csv's format with one row (vit_metrics_read reads it; columns
 * epoch, train_loss (the last epoch's), test_loss, test_acc (res's own,
 * with tta and ema), tta (VIT_TTA_*), ema, test_acc_one_pass,
 * test_loss_one_pass, and val_acc, val_acc_one_pass, best_epoch (the
 * epoch of the model scored, OUT/best.ckpt's with save_best; 0: the last)
 * with a validation set, and last seconds: res->run_seconds, the run's wall
 * time to these figures, resumes included; files before 0.3.0 lack it);
 * a run that trains on (a resume, an overwrite)
 * removes or moves the old one first, so final.csv always describes the
 * run that ended with the last.ckpt beside it.
 * With resume, the run continues from the checkpoint (at an
 * epoch boundary or inside an epoch) and the result equals an
 * uninterrupted run; cfg and tc must then equal the checkpoint's config but for
 * two keys: epochs may grow (the run is extended, the cosine schedule
 * recomputed for the new length) and ckpt_minutes may change; each change
 * is an event VIT_TRAIN_RESUME_CHANGE and is stored in the config of the
 * checkpoints the run writes from then on (so vit_run_config and a later
 * resume see the new values), any other difference is refused with
 * VIT_EINVAL naming the key and both values, as is a val_count that adds
 * or removes the validation set or, where the checkpoint recorded its
 * val_count (vit_run_data, from 0.3.0), changes it.  A resumed run that has done all its
 * epochs trains nothing and sets res->already_complete.  OUT/metrics.csv
 * then keeps the checkpoint's epochs' rows of the metrics.csv next to the
 * checkpoint.  An out_dir that already holds another run
 * (vit_run_dir_taken) is refused with VIT_EINVAL unless overwrite is set.
 * Inside an epoch a checkpoint is also written every tc->ckpt_minutes
 * minutes (0: never), and when a stop is asked for.  A non-finite loss or
 * gradient, or a gradient whose square overflows (vit_adamw_step's
 * VIT_ERANGE), stops the run with VIT_ENUM and a message naming the step
 * and which it was; the last good checkpoint is kept.
 *
 * Data-parallel (vit/dist.h): every rank calls this with the same data and
 * options; each minibatch is split across the ranks, their gradients are
 * summed with one MPI_Allreduce over the flat gradient buffer, and all
 * apply the same AdamW update, so the parameters stay identical.  Rank 0
 * alone reports events, writes metrics and checkpoints; evaluation is
 * split and its counts summed. */
int vit_train_run(const vit_config *cfg, const vit_train_config *tc, const vit_dataset *train,
                  const vit_dataset *test, const vit_train_opts *opts, vit_train_result *res);

/* Frees r->confusion and sets it to NULL (the other fields stay); NULL and
 * a zeroed struct are fine. */
void vit_train_result_free(vit_train_result *r);

VIT_END_DECLS

#endif

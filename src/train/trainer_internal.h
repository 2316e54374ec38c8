/* Internal: the trainer's state (struct vit_trainer, vit/train.h) and
 * what its files share: train.c (steps, epochs, the public calls and the
 * final scores), train_setup.c (setting a run up and freeing it),
 * train_ranks.c (the work shared out over data-parallel ranks) and
 * train_budget.c (the time budget). */
#ifndef VIT_SRC_TRAINER_INTERNAL_H
#define VIT_SRC_TRAINER_INTERNAL_H

#include <stdio.h>
#include <time.h>

#include "budget_plan.h"
#include "run_internal.h"
#include "vit/augment.h"
#include "vit/dist.h"
#include "vit/train.h"

/* Monotonic seconds. */
static inline double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct vit_trainer {
    vit_config cfg;           /* the network (image and class fields from the data) */
    vit_train_config tc;      /* the recipe: a resume's, with its changes */
    vit_train_opts o;
    const vit_dataset *train_all; /* the caller's training set */
    vit_dataset train, val;   /* views of it: the validation set is its tail */
    const vit_dataset *test;
    vit_model *m;             /* the weights the optimizer trains */
    vit_model *init_src;      /* opts.init_from's model until make_model
                                 adapts it (train_init.c) */
    int init_timm;            /* it came from a timm file */
    char init_note[512];      /* what was adapted (vit_trainer_init_note) */
    double *ft_scale;         /* per model tensor: its lr factor (layer
                                 decay, freezing), or NULL for all 1 */
    vit_real *ft_before;      /* the parameters before the step */
    vit_model *avg;           /* with ema > 0: their running average, the
                                 classifier evaluated, saved and exported */
    vit_adamw opt;
    vit_run_state st;
    vit_tape *eval_tape;      /* training steps run on the model's own tapes */
    vit_real *images;
    int *labels, *perm;
    vit_real *targets;        /* [batch, classes] mixed labels (mixup, cutmix) */
    vit_real *drop;           /* [depth, 2, batch] drop-path scales (drop_path) */
    vit_augment_scratch *aug; /* vit_augment_batch's working memory */
    vit_dist_buckets *sum;    /* the gradients' sum over the ranks (NULL: one rank) */
    int mixed;                /* the batch in images is mixed: use targets */
    char **class_names;       /* the training data's, for the checkpoint (not owned) */
    FILE *metrics;
    char ckpt[4200], metrics_path[4200], best_path[4200];
    int early_stopped;        /* opts.early_stop ended the run */
    int out_of_budget;        /* the budget ended the run inside an epoch */
    unsigned long long start_epoch_step; /* where this invocation began */
    double t0;                /* now_seconds() at vit_trainer_new */
    double prior_seconds;     /* of the run's earlier invocations */
    double last_save;         /* now_seconds() of the last checkpoint */
    vit_train_progress at;
    _Atomic int stop_asked;   /* vit_trainer_request_stop, a callback */
    int failed;               /* the error that ended the run, or VIT_OK */
    int complete_at_start;    /* a resume of a run that had done all its epochs */
    double lr;                /* the last step's learning rate */
    int epochs_cap;           /* with a budget: the most epochs a plan may give */
    double pace_t;            /* now_seconds() and the step of the budget's */
    unsigned long long pace_step; /* plan or its last check */
    vit_budget_pace pace;     /* the windows between the budget's checks */
    double ckpt_seconds;      /* with a budget: a checkpoint's writing, measured */
    double final_margin;      /* the final scoring's measured margin (>= 1):
                                 its sample's slower pass over their mean */
    double tta_seconds;       /* the final scoring's cost of one image, all
                                 its test-time augmented views */
    double score_pass;        /* seconds of the last epoch's one-pass scoring
                                 (validation, or test) (0: none yet) */
    vit_eval_result last_test; /* the last epoch's one-pass test scores
                                 (none with a validation set) */
    double last_val;          /* and validation accuracy (-1: none yet) */
    double last_train_loss;   /* the last epoch's mean training loss */
};

/* The model evaluation scores: the average when the run averages. */
static inline vit_model *scored(vit_trainer *t) { return t->avg ? t->avg : t->m; }

/* ---- train.c */

/* Hands ev to the callback (rank 0 only); a nonzero answer asks for a stop. */
void vit_train_emit(vit_trainer *t, vit_train_event *ev);

/* The optimizer's update from the step's gradients (in the model's
 * gradient buffer), the one every training step takes and the budget's
 * measurement times: fine-tuning's per-layer lr factors around AdamW at
 * learning rate lr (vit_train_ft_before/after), then the average (ema) as
 * of update number n (a step passes t->st.step + 1, its own; the caller
 * advances t->st.step).  AdamW's refusal (a gradient not finite or
 * overflowing when squared) is the run's divergence: VIT_ENUM naming the
 * step, the factors not applied, no average taken. */
int vit_train_update(vit_trainer *t, double lr, unsigned long long n);

/* ---- train_init.c: a run started from trained weights (opts.init_from) */

/* At the start of the setup: the options checked, the file read (its kind
 * told by its bytes) into t->init_src and its architecture taken into
 * t->cfg.  VIT_OK at once without init_from. */
int vit_train_init_source(vit_trainer *t);

/* In place of vit_model_init: t->m adapted from t->init_src to t->cfg (the
 * data's size and classes), the file named in t->st.data; then the lr
 * factors of layer_decay, freeze and linear_probe (t->ft_scale). */
int vit_train_init_model(vit_trainer *t);

/* Around each optimizer step: the parameters kept, then each tensor's
 * change scaled by its factor (AdamW's step is linear in lr, decay
 * included, so this is the step at lr * factor).  No-ops without factors. */
void vit_train_ft_before(vit_trainer *t);
void vit_train_ft_after(vit_trainer *t);

/* Frees what train_init.c made. */
void vit_train_init_free(vit_trainer *t);

/* ---- train_setup.c */

/* The schedule for the run's epochs: the steps taken and those left at
 * this steps-per-epoch (epochs * spe for a run on its own data; on other
 * data, or after a budget's new plan, laid out over what is left), the
 * warm-up within a tenth of it, and whether the run is done. */
void vit_train_layout(vit_trainer *t);

/* ---- train_ranks.c */

/* This rank's share [lo, hi) of n items: contiguous, sizes differing by at
 * most one. */
void vit_train_share(int n, int *lo, int *hi);

/* Fills images/labels with items [lo, hi) of the minibatch idx[0..b),
 * augmented as the config says (vit_augment_batch: shift or crop_pad,
 * rotate, scale, flip, mixup, cutmix), and then draws the batch's
 * drop-path scales.  Every draw is for all b items whatever the slice, so
 * every rank of a data-parallel job advances its generator identically and
 * they all agree on the next permutation; with every new key off the draws
 * are the digits' as before.  t->mixed says whether targets hold the
 * batch's mixed labels. */
int vit_train_gather_batch(vit_trainer *t, const int *idx, int b, int lo, int hi);

/* The augmentation's working memory and the buffers of the mixed targets
 * and drop-path scales, when the config asks for them. */
int vit_train_augment_buffers(vit_trainer *t);

/* FNV-1a over the parameter bytes: equal on every rank iff the replicas
 * hold bitwise the same parameters (up to a 2^-64 collision). */
unsigned long long vit_train_params_hash(vit_model *m);

/* Forward and backward of this rank's bl images (already gathered):
 * leaves the gradient of their mean loss in the model's gradient buffer and
 * adds (loss * bl, correct) to red. */
int vit_train_local_step(vit_trainer *r, int bl, double red[2]);

/* The step's gradients on every rank: this rank's local step (as
 * vit_train_local_step) with the ranks' gradients of their mean losses
 * summed into the gradient of the global batch mean (b images, each share
 * weighted by its size bl / b) while its backward runs, bucket by bucket
 * (vit_dist_buckets).  mine: this rank's status so far; if not VIT_OK the
 * rank only joins the sums (the others would wait for it) and mine is
 * returned.  red is not summed here.  One rank: vit_train_local_step. */
int vit_train_summed_step(vit_trainer *r, int mine, int bl, int b, double red[2]);

/* vit_evaluate_tta of the scored model over a data-parallel job: each rank
 * scores its share of ds and the sums are combined, so every rank gets the
 * whole result. */
int vit_train_evaluate_shared(vit_trainer *r, const vit_dataset *ds, int tta, vit_eval_result *ev);

/* ---- train_budget.c */

/* The plan (vit_train_opts.budget_seconds): the costs measured (a whole
 * step with the optimizer's update, a one-pass scoring, the final tta
 * scoring and its margin), cfg's epochs set to the most whose steps,
 * scoring and final scoring end by VIT_BUDGET_AIM_FIRST of the budget
 * (budget_plan.h; the final tta views left out when they cost a fifth of
 * the epochs or more: vit_budget_choose), the schedule laid out; event
 * PLAN (at.plan_cut when the views are left out or even one epoch does
 * not fit). */
int vit_train_plan_budget(vit_trainer *t);

/* After an epoch of a budgeted run (at most every 2% of the budget): the
 * window since the last check (every cost: steps, scoring, checkpoints)
 * added to the pace (vit_budget_pace: the machine may be shared), the
 * final scoring's cost (the sample's at the run's slowdown, its measured
 * margin) and vit_budget_replan decides (shorter when the settled pace
 * passes VIT_BUDGET_CEILING of the budget; longer only before the
 * cosine's middle, at a settled pace plus its spread).  The schedule is
 * laid out anew either way (event PLAN).  Every rank takes rank 0's
 * times.  inside: called between steps of an epoch (a plan of one or two
 * epochs, which no epoch's end could lengthen: see train.c's step_once),
 * the window then steps alone and the epochs' scoring planned apart; 2:
 * between steps, where a plan ending inside the epoch (VIT_PLAN_PARTIAL)
 * has done the steps it laid its cosine over, a window of any length.  A
 * plan that ends inside its epoch lays its cosine out to end at the steps
 * that fit before the backstop between steps (vit_train_budget_out). */
int vit_train_hold_budget(vit_trainer *t, int inside);

/* 1 when the final test-time augmented scoring, at its cost measured at
 * the plan, the run's slowdown since and its measured margin, still ends
 * within the budget (or there is no budget or no tta); else 0:
 * final_scores gives one pass.  Every rank takes rank 0's decision (a
 * collective call). */
int vit_train_final_tta_fits(const vit_trainer *t);

/* Between two steps of a budgeted run: 1 when one more step, the
 * checkpoint written there (as measured) and the final one-pass scoring (the last epoch's, a fifth more; before one, twice the
 * sample's figure; at this stretch's slowdown) and 2% of the budget no
 * longer fit what is left of it (rank 0's clock): the run ends here. */
int vit_train_budget_out(const vit_trainer *t);

/* vit_train_evaluate_shared, and under a budget in chunks (a sixteenth,
 * 64 images at least): once the rest at the pace so far would end past
 * the budget, *gave_up = 1 and *r holds nothing (the caller keeps one
 * pass).  Every rank takes rank 0's decision. */
int vit_train_evaluate_timed(vit_trainer *t, const vit_dataset *ds, int tta, vit_eval_result *r,
                             int *gave_up);

/* The test-time augmentation tta = auto tries: shift9, and with the
 * mirror images too for a model trained on them (flip). */
static inline int vit_train_auto_tta(const vit_train_config *tc)
{
    return tc->flip ? VIT_TTA_SHIFT9_FLIP : VIT_TTA_SHIFT9;
}

#endif

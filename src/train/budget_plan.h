/* The arithmetic of a time budget's plan (train_budget.c), apart from the
 * trainer and the clock: how many epochs fit, when they end, the pace the
 * run keeps (from the windows between the plan's checks) and whether the
 * plan should change after an epoch.  Times are seconds from the run's
 * start. */
#ifndef VIT_BUDGET_PLAN_H
#define VIT_BUDGET_PLAN_H

/* The first plan ends by this share of the budget (its pace is a few
 * batches' measurement); once the pace is measured over settled windows
 * (VIT_BUDGET_SETTLED of them after the first, cold one), by the larger
 * share.  A plan predicted at the settled pace to end past
 * VIT_BUDGET_CEILING of the budget is shortened. */
#define VIT_BUDGET_AIM_FIRST 0.95
#define VIT_BUDGET_AIM_SETTLED 0.975
#define VIT_BUDGET_CEILING 0.985
#define VIT_BUDGET_SETTLED 2
/* The settled pace looks at the median of the last this many windows
 * beside the mean of them all: one slow window moves neither much. */
#define VIT_BUDGET_RECENT 3
/* The final scoring's test-time augmented views are planned only when
 * they cost less than this share of the epochs that fit without them
 * (vit_budget_choose): a run of few epochs (a heavy load, a short budget)
 * trains in their time instead.  Their reserve is the time a plan loses
 * when a slowdown then leaves them out at the end, so it stays small. */
#define VIT_BUDGET_VIEWS_SHARE 0.2

/* The windows between the plan's checks: each one's steps and seconds
 * (every cost of the epochs it spans: steps, scoring, checkpoints).  The
 * first ran cold (caches, tapes) and is kept apart.  Zero it to start. */
typedef struct vit_budget_pace {
    int windows;            /* measured so far */
    double first;           /* the first's seconds a step */
    double steps, seconds;  /* the settled windows' (all after the first) totals */
    double sq;              /* their sum of steps * (seconds a step)^2 */
    double recent[VIT_BUDGET_RECENT]; /* the last settled windows' seconds a
                                         step, the newest at recent[(n - 1) %
                                         VIT_BUDGET_RECENT], n = windows - 1 */
} vit_budget_pace;

/* Adds a window of steps (> 0) that took seconds. */
void vit_budget_pace_add(vit_budget_pace *pc, double steps, double seconds);

/* The seconds a step to plan with: the first window's while it is the only
 * one; then the larger of the settled windows' mean and the median of the
 * last VIT_BUDGET_RECENT of them (of two, their mean): a slowdown that
 * lasts raises the median within two windows, while one slow window
 * (another job's burst) raises only the mean, by its share.  0: none. */
double vit_budget_pace_step(const vit_budget_pace *pc);

/* The settled windows' spread: the standard deviation of their seconds a
 * step (weighted by steps); 0 with fewer than two. */
double vit_budget_pace_spread(const vit_budget_pace *pc);

typedef struct vit_budget_plan {
    double budget;          /* seconds, > 0 */
    double elapsed;         /* seconds already spent */
    long steps_per_epoch;   /* > 0 */
    long epoch_step;        /* steps done in the epoch under way (0: at its start) */
    int epoch;              /* epochs done */
    int epochs;             /* the plan as it stands (its epochs) */
    int cap;                /* the most epochs a plan may give */
    double step;            /* seconds a training step */
    double spread;          /* the pace's measured spread (seconds a step,
                               vit_budget_pace_spread): a longer plan must
                               end by the aim at step + spread */
    double scoring;         /* seconds of scoring after each epoch */
    double final;           /* seconds of the final scoring, tta included */
    double tta;             /* of final, the test-time augmented views'
                               seconds: they may give way (0: none) */
} vit_budget_plan;

/* The most epochs whose rest ends by aim * budget: the current epoch's
 * remaining steps, whole epochs (steps and scoring), and the final
 * scoring; at most cap, and at least one more than done, or (at an
 * epoch's end, epoch_step 0, epoch > 0) the epochs done: the run may end
 * there. */
int vit_budget_fit(const vit_budget_plan *p, double aim);

/* The predicted end (seconds from the start) of a run of `epochs` epochs
 * from p's position, the final scoring included. */
double vit_budget_end(const vit_budget_plan *p, int epochs);

/* The epochs of a plan ending by aim * budget, with the views (*views 1)
 * or without them (*views 0, p->tta's seconds given to epochs instead):
 * with them when they fit (even the least plan ends within the budget with
 * them) and the epochs they cost, against vit_budget_fit without them,
 * are fewer than VIT_BUDGET_VIEWS_SHARE of those.  No views (p->tta 0):
 * vit_budget_fit's, *views 1. */
int vit_budget_choose(const vit_budget_plan *p, double aim, int *views);

/* What gives way in a plan of `epochs`, *end getting its predicted end:
 * VIT_BUDGET_CUT_NONE (nothing: the plan's own end), VIT_BUDGET_CUT_TTA
 * (the final scoring's p->tta seconds of test-time augmented views left
 * out, one pass: when views is 0, a plan chosen without them, or when
 * vit_budget_fit's least plan with them passes the budget) or
 * VIT_BUDGET_CUT_EPOCH (the epoch under way too: the run ends inside it,
 * at the budget).  *end never passes the budget.  The values are
 * vit_train_progress.plan_cut's. */
enum { VIT_BUDGET_CUT_NONE = 0, VIT_BUDGET_CUT_TTA = 1, VIT_BUDGET_CUT_EPOCH = 2 };
int vit_budget_cut(const vit_budget_plan *p, int epochs, int views, double *end);

/* At an epoch's end: the epochs the run should now have, and *views (in:
 * the plan as it stands scores the views, 1, or not, 0; out: the new
 * plan's, vit_budget_choose's when it changes).  settled: the
 * windows measured after the first (p->step the settled pace,
 * vit_budget_pace_step).  A run predicted to end past VIT_BUDGET_CEILING
 * of the budget gets the most epochs that fit the aim, the views left out
 * when they cost too many (vit_budget_choose; never more epochs than it
 * has; one more than done rather than none when that one ends by the
 * ceiling, its views left out if need be: the schedule then still ends at
 * min_lr; else one more when a tenth of it fits before the final one-pass
 * scoring, views out: the trainer ends the run inside it, its cosine laid
 * out to end there, VIT_BUDGET_CUT_EPOCH).  One that would end earlier gets more only while its cosine has
 * not passed its middle (2 * epoch < epochs: the learning rate still high,
 * so a longer cosine still pays), at a pace measured over
 * VIT_BUDGET_SETTLED settled windows, and only as many as end by the aim
 * at the pace plus its spread (the measured margin: the shortening test
 * then needs a lasting rise of more than the spread to undo it); after an
 * earlier shortening too.  Else p->epochs. */
int vit_budget_replan(const vit_budget_plan *p, int settled, int *views);

#endif

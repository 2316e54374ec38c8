/* The arithmetic of a time budget's plan (train_budget.c), apart from the
 * trainer and the clock: how many epochs fit, when they end, and whether
 * the plan should change after an epoch.  Times are seconds from the
 * run's start. */
#ifndef VIT_BUDGET_PLAN_H
#define VIT_BUDGET_PLAN_H

/* The first plan ends by this share of the budget (its pace is a few
 * batches' measurement); once the pace is measured over settled epochs
 * (VIT_BUDGET_SETTLED windows), by the larger share.  A plan predicted to
 * end past VIT_BUDGET_CEILING of the budget is shortened. */
#define VIT_BUDGET_AIM_FIRST 0.95
#define VIT_BUDGET_AIM_SETTLED 0.975
#define VIT_BUDGET_CEILING 0.985
#define VIT_BUDGET_SETTLED 2
/* The final scoring is planned, and at the end started, only with this
 * much more time than its cost as measured: a busy machine's pace wavers,
 * and the budget is a ceiling. */
#define VIT_BUDGET_FINAL_MARGIN 1.2

typedef struct vit_budget_plan {
    double budget;          /* seconds, > 0 */
    double elapsed;         /* seconds already spent */
    long steps_per_epoch;   /* > 0 */
    long epoch_step;        /* steps done in the epoch under way (0: at its start) */
    int epoch;              /* epochs done */
    int epochs;             /* the plan as it stands (its epochs) */
    int cap;                /* the most epochs a plan may give */
    double step;            /* seconds a training step */
    double step_slow;       /* the slowest settled window's seconds a step
                               (0: none): a longer plan must still end by
                               the ceiling at it */
    int shortened;          /* an earlier check at a settled pace shortened
                               the plan: the pace proved unsteady, no
                               longer plan now */
    double scoring;         /* seconds of scoring after each epoch */
    double final;           /* seconds of the final scoring */
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

/* At an epoch's end: the epochs the run should now have.  settled: the
 * number of paces measured so far (p->step the pace ahead).  A run
 * predicted to end past VIT_BUDGET_CEILING of the budget gets the most
 * epochs that fit the aim (never more than it has); one that would end
 * earlier gets more only in the first half of its plan (the learning rate
 * still high, so a longer cosine still pays), only when the pace was
 * measured over settled epochs and no check has shortened the plan (no
 * plan that see-saws), and only as many as still end by the
 * ceiling at the slowest settled window's pace; else p->epochs. */
int vit_budget_replan(const vit_budget_plan *p, int settled);

#endif

/*
 * A time budget's plan as arithmetic (budget_plan.h): the epochs that fit
 * a share of the budget at given costs, their predicted end, and the
 * decision after each epoch.  No clock and no trainer, so that the
 * planning can be tested with given paces.
 */

#include <math.h>

#include "budget_plan.h"

static double epoch_seconds(const vit_budget_plan *p)
{
    return (double)p->steps_per_epoch * p->step + p->scoring;
}

int vit_budget_fit(const vit_budget_plan *p, double aim)
{
    double left = aim * p->budget - p->elapsed - p->final;
    double e = epoch_seconds(p);
    /* The epoch under way counts whole, its steps done given back. */
    double n = e > 0 ? floor((left + (double)p->epoch_step * p->step) / e) : p->cap;
    double lo = (double)p->epoch + (p->epoch == 0 || p->epoch_step > 0), hi = p->cap;
    double want = (double)p->epoch + n;
    return (int)(want < lo ? lo : want > hi ? hi : want);
}

double vit_budget_end(const vit_budget_plan *p, int epochs)
{
    double steps = (double)(epochs - p->epoch) * (double)p->steps_per_epoch - (double)p->epoch_step;
    return p->elapsed + steps * p->step + (double)(epochs - p->epoch) * p->scoring + p->final;
}

int vit_budget_replan(const vit_budget_plan *p, int settled)
{
    int E = p->epochs;
    double aim = settled >= VIT_BUDGET_SETTLED ? VIT_BUDGET_AIM_SETTLED : VIT_BUDGET_AIM_FIRST;
    int want = vit_budget_fit(p, aim);
    if (vit_budget_end(p, E) > VIT_BUDGET_CEILING * p->budget)
        return want < E ? want : E;
    /* Longer: while the cosine has not passed its middle (lr above the
     * mean of its ends), at a pace measured over settled epochs. */
    if (settled < VIT_BUDGET_SETTLED || p->shortened || 2 * p->epoch >= E || want <= E)
        return E;
    /* A shared machine's pace wavers: the plan must hold at its slowest
     * settled window too, or it would be shortened again (to end right
     * at an epoch, its learning rate short of the cosine's end). */
    if (p->step_slow > p->step) {
        vit_budget_plan slow = *p;
        slow.step = p->step_slow;
        int most = vit_budget_fit(&slow, VIT_BUDGET_CEILING);
        want = want < most ? want : most;
    }
    return want > E ? want : E;
}

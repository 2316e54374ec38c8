/*
 * A time budget's plan as arithmetic (budget_plan.h): the pace from the
 * windows between checks, the epochs that fit a share of the budget at
 * given costs, their predicted end, and the decision after each epoch.
 * No clock and no trainer, so that the planning can be tested with given
 * paces.
 */

#include <math.h>

#include "budget_plan.h"

void vit_budget_pace_add(vit_budget_pace *pc, double steps, double seconds)
{
    if (!(steps > 0))
        return;
    double x = seconds / steps;
    if (pc->windows++ == 0) {
        pc->first = x;
        return;
    }
    pc->steps += steps;
    pc->seconds += seconds;
    pc->sq += steps * x * x;
    pc->recent[(pc->windows - 2) % VIT_BUDGET_RECENT] = x;
}

/* The median of the last settled windows' paces (of two, their mean). */
static double recent_median(const vit_budget_pace *pc)
{
    int n = pc->windows - 1 < VIT_BUDGET_RECENT ? pc->windows - 1 : VIT_BUDGET_RECENT;
    double a = pc->recent[0], b = pc->recent[1], c = pc->recent[2];
    if (n == 1)
        return a;
    if (n == 2)
        return 0.5 * (a + b);
    double lo = a < b ? a : b, hi = a < b ? b : a;
    return c < lo ? lo : c > hi ? hi : c;
}

double vit_budget_pace_step(const vit_budget_pace *pc)
{
    if (pc->windows <= 1)
        return pc->windows ? pc->first : 0;
    double mean = pc->seconds / pc->steps, med = recent_median(pc);
    return med > mean ? med : mean;
}

double vit_budget_pace_spread(const vit_budget_pace *pc)
{
    if (pc->windows < 3)
        return 0;
    double mean = pc->seconds / pc->steps, var = pc->sq / pc->steps - mean * mean;
    return var > 0 ? sqrt(var) : 0;
}

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

/* p without its views: their seconds out of the final scoring. */
static vit_budget_plan without_views(const vit_budget_plan *p)
{
    vit_budget_plan q = *p;
    q.final -= q.tta;
    q.tta = 0;
    return q;
}

int vit_budget_choose(const vit_budget_plan *p, double aim, int *views)
{
    int with = vit_budget_fit(p, aim);
    *views = 1;
    if (!(p->tta > 0))
        return with;
    vit_budget_plan q = without_views(p);
    int without = vit_budget_fit(&q, aim);
    /* The epochs the views cost, against the run's whole length. */
    if (vit_budget_end(p, with) <= p->budget
        && without - with < VIT_BUDGET_VIEWS_SHARE * without)
        return with;
    *views = 0;
    return without;
}

int vit_budget_cut(const vit_budget_plan *p, int epochs, int views, double *end)
{
    int cut = VIT_BUDGET_CUT_NONE;
    *end = vit_budget_end(p, epochs);
    if ((!views || *end > p->budget) && p->tta > 0) {
        cut = VIT_BUDGET_CUT_TTA;
        *end -= p->tta;
    }
    if (*end > p->budget) {
        cut = VIT_BUDGET_CUT_EPOCH;
        *end = p->budget;
    }
    return cut;
}

int vit_budget_replan(const vit_budget_plan *p, int settled, int *views)
{
    int E = p->epochs, v;
    double aim = settled >= VIT_BUDGET_SETTLED ? VIT_BUDGET_AIM_SETTLED : VIT_BUDGET_AIM_FIRST;
    vit_budget_plan now = *views ? *p : without_views(p); /* the plan as it stands */
    if (vit_budget_end(&now, E) > VIT_BUDGET_CEILING * p->budget) {
        int want = vit_budget_choose(p, aim, &v);
        vit_budget_plan chosen = v ? *p : without_views(p);
        /* Cut to end at once, the last epoch's learning rate would stay
         * short of the cosine's end: one epoch more when it ends by the
         * ceiling (the backstops between steps hold the budget; it may be
         * the plan's own last one, chosen without its views), else a part
         * of one when a tenth of its steps fits before the final one-pass
         * scoring: the trainer ends the run inside it, its cosine laid out
         * to end at min_lr there. */
        if (want == p->epoch && p->epoch_step == 0 && E > p->epoch) {
            vit_budget_plan q = without_views(p);
            double left = VIT_BUDGET_CEILING * p->budget - q.elapsed - q.final;
            if (vit_budget_end(&chosen, p->epoch + 1) <= VIT_BUDGET_CEILING * p->budget)
                want = p->epoch + 1;
            else if (left >= 0.1 * (double)p->steps_per_epoch * p->step) {
                want = p->epoch + 1;
                v = 0;
            }
        }
        *views = v;
        return want < E ? want : E;
    }
    /* Longer: while the cosine has not passed its middle (lr above the
     * mean of its ends), at a settled pace, to end by the aim at that pace
     * plus its spread. */
    if (settled < VIT_BUDGET_SETTLED || 2 * p->epoch >= E)
        return E;
    vit_budget_plan hi = *p;
    hi.step = p->step + p->spread;
    int want = vit_budget_choose(&hi, aim, &v);
    if (want <= E)
        return E;
    *views = v;
    return want;
}

/* The time budget's plan as arithmetic (src/train/budget_plan.c), with
 * given paces instead of a clock, so that what the plan does with the
 * budget is checked deterministically: the epochs that fit a share of it
 * and no more, the predicted end, and whole runs simulated epoch by epoch
 * (the trainer's vit_train_hold_budget calls vit_budget_replan after each
 * one with the pace it measured): a quiet run uses the budget (ends past
 * 94% of it, within it), one faster than its first measurement is
 * lengthened early, one slower is shortened and still ends within it,
 * none is lengthened in the second half of its plan, and a longer plan
 * still ends by the ceiling at the slowest settled pace seen. */
#include <check.h>
#include <math.h>
#include <stdio.h>

#include "budget_plan.h"

/* Fashion-MNIST's shape at the recipe's model on this class of machine:
 * 938 steps an epoch of 64 images at 2727 img/s, 2 s of one-pass scoring
 * an epoch, 30 s of final test-time augmented scoring. */
static vit_budget_plan fashion(double budget)
{
    return (vit_budget_plan){.budget = budget, .elapsed = 8, .steps_per_epoch = 938,
                             .epoch_step = 0, .epoch = 0, .epochs = 0, .cap = 86,
                             .step = 64.0 / 2727, .scoring = 2,
                             .final = VIT_BUDGET_FINAL_MARGIN * 30};
}

START_TEST(fit_is_the_most_that_ends_by_the_aim)
{
    vit_budget_plan p = fashion(900);
    int e = vit_budget_fit(&p, VIT_BUDGET_AIM_FIRST);
    double epoch = 938 * p.step + 2;
    ck_assert_int_gt(e, 1);
    ck_assert_double_le(vit_budget_end(&p, e), VIT_BUDGET_AIM_FIRST * 900);
    ck_assert_double_gt(vit_budget_end(&p, e + 1), VIT_BUDGET_AIM_FIRST * 900);
    /* The end by hand: the elapsed time, e epochs and the final scoring. */
    ck_assert_double_eq_tol(vit_budget_end(&p, e), 8 + e * epoch + 36, 1e-9);
    /* A tighter aim gives at least as many. */
    ck_assert_int_ge(vit_budget_fit(&p, VIT_BUDGET_AIM_SETTLED), e);
    /* At most the cap, at least one epoch when none fits. */
    p.cap = 5;
    ck_assert_int_eq(vit_budget_fit(&p, VIT_BUDGET_AIM_FIRST), 5);
    p = fashion(20);
    ck_assert_int_eq(vit_budget_fit(&p, VIT_BUDGET_AIM_FIRST), 1);
    /* At an epoch's end, the epochs done: the run may end there. */
    p.epoch = 3;
    p.elapsed = 19;
    ck_assert_int_eq(vit_budget_fit(&p, VIT_BUDGET_AIM_FIRST), 3);
}
END_TEST

START_TEST(fit_counts_the_epoch_under_way)
{
    /* A resume at step 469 of epoch 4 (3 done): that epoch's other half
     * and whole epochs after it. */
    vit_budget_plan p = fashion(900);
    p.epoch = 3;
    p.epoch_step = 469;
    int e = vit_budget_fit(&p, VIT_BUDGET_AIM_FIRST);
    ck_assert_int_ge(e, 4);
    ck_assert_double_le(vit_budget_end(&p, e), VIT_BUDGET_AIM_FIRST * 900);
    ck_assert_double_gt(vit_budget_end(&p, e + 1), VIT_BUDGET_AIM_FIRST * 900);
    double half = 469 * p.step;
    ck_assert_double_eq_tol(vit_budget_end(&p, 4), 8 + half + 2 + 36, 1e-9);
}
END_TEST

/* One run under budget seconds, planned at the first measurement (step
 * seconds a step) and trained at `speed` times it (2: twice as slow),
 * the final scoring at the same speed; each epoch's pace is held against
 * the plan as vit_train_hold_budget does.  *first: the first plan's
 * epochs; *longer: whether a plan after the first added epochs, and
 * *late_longer whether one did so in the second half of the plan as it
 * stood.  Returns the run's end (seconds). */
static double simulate(double budget, double speed, const double *waver, int nwaver, int *first,
                       int *epochs, int *longer, int *late_longer)
{
    vit_budget_plan p = fashion(budget);
    p.epochs = vit_budget_fit(&p, VIT_BUDGET_AIM_FIRST);
    *first = p.epochs;
    *longer = *late_longer = 0;
    double step = p.step, final = 30 * speed, slowest = 0;
    int shortened = 0;
    for (int k = 0; p.epoch < p.epochs; k++) {
        double s = speed * (nwaver ? waver[k % nwaver] : 1);
        double pace = 938 * step * s + 2 * s;
        p.elapsed += pace;
        p.epoch++;
        if (p.epoch == p.epochs)
            break;
        vit_budget_plan now = p;
        now.step = pace / 938;
        if (p.epoch >= 2 && pace > slowest) /* windows after the first */
            slowest = pace;
        now.step_slow = slowest / 938;
        now.scoring = 0;
        now.final = VIT_BUDGET_FINAL_MARGIN * final;
        now.shortened = shortened;
        int want = vit_budget_replan(&now, p.epoch);
        shortened |= want < p.epochs && p.epoch >= VIT_BUDGET_SETTLED;
        if (want > p.epochs) {
            *longer = 1;
            if (2 * p.epoch >= p.epochs)
                *late_longer = 1;
        }
        p.epochs = want;
    }
    *epochs = p.epochs;
    return p.elapsed + final;
}

START_TEST(quiet_run_uses_the_budget)
{
    int first, epochs, longer, late;
    double end = simulate(900, 1, NULL, 0, &first, &epochs, &longer, &late);
    printf("quiet 900 s: first plan %d epochs, run %d, ends at %.1f s (%.1f%%)\n", first, epochs,
           end, end / 9);
    ck_assert_double_le(end, 900);
    ck_assert_double_ge(end, 0.94 * 900);
    ck_assert_int_eq(late, 0);
}
END_TEST

START_TEST(faster_than_measured_is_lengthened_early)
{
    /* 8% faster than the first measurement (its few batches ran cold): the
     * first plan ends near 0.95 / 1.08 of the budget; the run gets more
     * epochs while its cosine is young and ends past 94% of it. */
    int first, epochs, longer, late;
    double end = simulate(900, 1 / 1.08, NULL, 0, &first, &epochs, &longer, &late);
    printf("8%% fast 900 s: first plan %d epochs, run %d, ends at %.1f s (%.1f%%)\n", first,
           epochs, end, end / 9);
    ck_assert_int_eq(longer, 1);
    ck_assert_int_gt(epochs, first);
    ck_assert_int_eq(late, 0);
    ck_assert_double_le(end, 900);
    ck_assert_double_ge(end, 0.94 * 900);
}
END_TEST

START_TEST(slower_than_measured_is_shortened)
{
    /* A competing job from the start: 30% slower. */
    int first, epochs, longer, late;
    double end = simulate(900, 1.3, NULL, 0, &first, &epochs, &longer, &late);
    printf("30%% slow 900 s: first plan %d epochs, run %d, ends at %.1f s (%.1f%%)\n", first,
           epochs, end, end / 9);
    ck_assert_int_lt(epochs, first);
    ck_assert_int_eq(late, 0);
    ck_assert_double_le(end, 900);
    ck_assert_double_ge(end, 0.94 * 900);
}
END_TEST

START_TEST(a_wavering_pace_stays_within)
{
    /* A shared machine: epochs 4% either side of the measured pace, and now
     * and then 12% slow. */
    static const double waver[] = {1.04, 0.96, 1.0, 1.12, 0.96, 1.04, 0.98};
    int first, epochs, longer, late;
    for (int b = 120; b <= 1800; b += 60) {
        double end = simulate(b, 1, waver, 7, &first, &epochs, &longer, &late);
        ck_assert_msg(end <= b, "budget %d s: the run ends at %.1f s", b, end);
        ck_assert_int_eq(late, 0);
    }
}
END_TEST

START_TEST(replan_keeps_a_plan_between_aim_and_ceiling)
{
    /* Predicted to end between the settled aim and the ceiling: kept (no
     * new schedule for a fraction of an epoch either way). */
    vit_budget_plan p = fashion(900);
    p.epoch = 10;
    p.epochs = 30;
    p.scoring = 0;
    p.step = 24.0 / 938;
    double at = 0.5 * (VIT_BUDGET_AIM_SETTLED + VIT_BUDGET_CEILING) * 900;
    p.elapsed = at - 20 * 24.0 - p.final;
    ck_assert_double_eq_tol(vit_budget_end(&p, 30), at, 1e-9);
    ck_assert_int_eq(vit_budget_replan(&p, 5), 30);
    /* Past the ceiling: shortened to end by the aim. */
    p.elapsed += 0.02 * 900;
    int e = vit_budget_replan(&p, 5);
    ck_assert_int_lt(e, 30);
    ck_assert_double_le(vit_budget_end(&p, e), VIT_BUDGET_AIM_SETTLED * 900);
    /* Well inside, early, at a settled pace: lengthened to the aim... */
    p.elapsed -= 0.12 * 900;
    e = vit_budget_replan(&p, 5);
    ck_assert_int_gt(e, 30);
    ck_assert_double_le(vit_budget_end(&p, e), VIT_BUDGET_AIM_SETTLED * 900);
    ck_assert_double_gt(vit_budget_end(&p, e + 1), VIT_BUDGET_AIM_SETTLED * 900);
    /* ...as many as still end by the ceiling at the slowest settled
     * window (here 4% slower), */
    p.step_slow = 1.04 * p.step;
    int held = vit_budget_replan(&p, 5);
    ck_assert_int_gt(held, 30);
    ck_assert_int_le(held, e);
    vit_budget_plan slow = p;
    slow.step = p.step_slow;
    ck_assert_double_le(vit_budget_end(&slow, held), VIT_BUDGET_CEILING * 900);
    ck_assert_double_gt(vit_budget_end(&slow, held + 1), VIT_BUDGET_CEILING * 900);
    /* none when that window would pass it at once, */
    p.step_slow = 1.3 * p.step;
    ck_assert_int_eq(vit_budget_replan(&p, 5), 30);
    p.step_slow = 0;
    /* nor after a check that shortened the plan, */
    p.shortened = 1;
    ck_assert_int_eq(vit_budget_replan(&p, 5), 30);
    p.shortened = 0;
    /* ...nor on one pace measured, */
    ck_assert_int_eq(vit_budget_replan(&p, 1), 30);
    /* nor past the plan's middle, */
    p.epoch = 15;
    p.elapsed += 5 * 24.0;
    ck_assert_int_eq(vit_budget_replan(&p, 5), 30);
    /* nor past the cap. */
    p.epoch = 10;
    p.elapsed -= 5 * 24.0;
    p.cap = 30;
    ck_assert_int_eq(vit_budget_replan(&p, 5), 30);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("budget_plan");
    TCase *tc = tcase_create("plan");
    tcase_add_test(tc, fit_is_the_most_that_ends_by_the_aim);
    tcase_add_test(tc, fit_counts_the_epoch_under_way);
    tcase_add_test(tc, quiet_run_uses_the_budget);
    tcase_add_test(tc, faster_than_measured_is_lengthened_early);
    tcase_add_test(tc, slower_than_measured_is_shortened);
    tcase_add_test(tc, a_wavering_pace_stays_within);
    tcase_add_test(tc, replan_keeps_a_plan_between_aim_and_ceiling);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

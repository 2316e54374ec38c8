/*
 * What a training run shows a person: the progress bar redrawn in place on
 * a terminal (or plain lines to a file or pipe), the model line after the
 * first steps, the epoch table whose columns give way on a narrow
 * terminal, and the lines about a resume.  Driven by the library's
 * training events (vit/train.h); it changes nothing about the run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The width lines must keep: the terminal's width - 1 with the bar, 100
 * columns for a file or pipe. */
static int line_max(const cli_progress *p)
{
    int cols = cli_terminal_columns();
    return p->mode == 2 ? (cols > 0 ? cols : 80) - 1 : 100;
}

/* Seconds as h:mm:ss (0:02:05, 1:03:07): cli.h. */
const char *cli_hms(double s, char *buf, size_t cap)
{
    long t = s > 0 && s < 3.6e9 ? (long)(s + 0.5) : 0;
    snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    return buf;
}

/* The progress line into out, at most max characters long (max < cap):
 * "epoch 3/20 [####......] step 45/90 loss 0.8123 1830 img/s ETA 0:02:05",
 * bar_width 0 without the bar.  Too long for max, the bar shrinks to 5
 * cells, then goes, then the speed, the step counts and the loss go in
 * that order; what is left is cut at max. */
static int progress_text(char *out, size_t cap, int max, const vit_train_progress *at,
                         double loss, double ips, double eta, int bar_width)
{
    long step = (long)at->epoch_step, spe = at->steps_per_epoch;
    char t[32], bar[64] = "", steps[64], lossv[32], speed[32];
    snprintf(steps, sizeof steps, " step %ld/%ld", step, spe);
    snprintf(lossv, sizeof lossv, " loss %.4f", loss);
    snprintf(speed, sizeof speed, " %.0f img/s", ips);
    cli_hms(eta, t, sizeof t);
    int n = 0, dropped = 0;
    for (;;) {
        bar[0] = 0;
        if (bar_width > 0) {
            int fill = (int)(bar_width * step / spe);
            bar[0] = ' ';
            bar[1] = '[';
            for (int i = 0; i < bar_width; i++)
                bar[2 + i] = i < fill ? '#' : '.';
            bar[2 + bar_width] = ']';
            bar[3 + bar_width] = 0;
        }
        n = snprintf(out, cap, "epoch %llu/%d%s%s%s%s ETA %s", at->epoch + 1, at->epochs, bar,
                     dropped < 2 ? steps : "", dropped < 3 ? lossv : "", dropped < 1 ? speed : "",
                     t);
        if (n <= max)
            return n;
        if (bar_width > 5)
            bar_width = n - max < bar_width - 5 ? bar_width - (n - max) : 5;
        else if (bar_width > 0)
            bar_width = 0;
        else if (dropped < 3)
            dropped++;
        else
            break;
    }
    out[max] = 0;
    return max;
}

/* Wipes the bar off its line, so that the next line starts clean. */
static void bar_clear(cli_progress *p)
{
    if (p->bar_len > 0)
        fprintf(p->out, "\r%*s\r", p->bar_len, "");
    p->bar_len = 0;
}

void cli_progress_fresh_line(cli_progress *p, int typed)
{
    if (p->mode != 2)
        return;
    /* A bar on screen, "^C" after it: end that line.  A typed ^C ends
     * the line too when no bar is known to be drawn: the terminal throws
     * away output not yet shown when it echoes ^C (POSIX's flush on
     * INTR, unless NOFLSH), so an epoch row or the wipe of the bar may
     * never have reached the screen, and the "^C" may stand after a bar
     * this program believes gone.  A line with "^C" alone is the price
     * of never writing over what is shown. */
    if (p->bar_len > 0 || typed)
        fputc('\n', p->out);
    p->bar_len = 0;
    fflush(p->out);
}

/* The bar: the line redrawn in place (\r), never wider than the
 * terminal's width - 1 so that it cannot wrap; spaces cover what is left
 * of a longer line before it. */
static void bar_draw(cli_progress *p, const vit_train_progress *at, double loss, double ips,
                     double eta)
{
    char line[512];
    int max = line_max(p);
    max = max < (int)sizeof line - 1 ? max : (int)sizeof line - 1;
    if (max < 1)
        max = 1;
    int n = progress_text(line, sizeof line, max, at, loss, ips, eta, 20);
    int pad = p->bar_len > n && p->bar_len <= max ? p->bar_len - n : 0;
    fprintf(p->out, "\r%s%*s", line, pad, "");
    p->bar_len = n + pad;
    fflush(p->out);
}

/* The epochs as a table: a header once, then a row per epoch, in at most
 * max columns (100 for a file, the width - 1 on a terminal):
 *
 *   epoch  train loss     acc  test loss     acc     time        lr   img/s
 *     3/20     0.8123  0.7412     0.6543  0.8056  0:00:12  1.95e-03    1830
 *
 * With a validation set its loss and accuracy take the test set's columns
 * ("val loss", "acc"): the test set is not for choosing a model, and is
 * shown once, at the end.  Too wide for max, columns give way in this
 * order: img/s, lr, time, train acc, test loss, train loss (the test acc
 * is then headed "test acc", or "val acc"); epoch and that acc stay. */
enum { COL_TRAIN_LOSS, COL_TRAIN_ACC, COL_TEST_LOSS, COL_TEST_ACC, COL_TIME, COL_LR, COL_IPS,
       NCOLS };

static const struct {
    const char *head;
    int width, gives_way; /* 1 gives way first; 0 never */
} epoch_cols[NCOLS] = {
    {"train loss", 10, 6}, {"acc", 6, 4}, {"test loss", 9, 5}, {"acc", 6, 0},
    {"time", 7, 3},        {"lr", 8, 2},  {"img/s", 6, 1},
};

/* Column c's width in the table p->cols describes (test acc widens to
 * "test acc" once test loss is gone). */
static int col_width(const cli_progress *p, int c)
{
    return c == COL_TEST_ACC && !(p->cols & 1 << COL_TEST_LOSS) ? 8 : epoch_cols[c].width;
}

static void epoch_header(cli_progress *p, int epochs)
{
    int digits = snprintf(NULL, 0, "%d", epochs);
    p->epoch_w = 2 * digits + 1 > 5 ? 2 * digits + 1 : 5;
    p->cols = (1 << NCOLS) - 1;
    for (int next = 1;; next++) {
        int n = p->epoch_w, drop = -1;
        for (int c = 0; c < NCOLS; c++) {
            if (p->cols & 1 << c)
                n += 2 + col_width(p, c);
            if (epoch_cols[c].gives_way == next)
                drop = c;
        }
        if (n <= p->header_max || drop < 0)
            break;
        p->cols &= ~(1 << drop);
    }
    char head[256];
    int n = snprintf(head, sizeof head, "%*s", p->epoch_w, "epoch");
    for (int c = 0; c < NCOLS; c++)
        if (p->cols & 1 << c)
            n += snprintf(head + n, sizeof head - (size_t)n, "  %*s", col_width(p, c),
                          c == COL_TEST_ACC && col_width(p, c) == 8 ? (p->with_val ? "val acc"
                                                                                  : "test acc")
                          : c == COL_TEST_LOSS && p->with_val ? "val loss"
                                                              : epoch_cols[c].head);
    fprintf(p->out, "%s\n", head);
    fflush(p->out);
}

/* The header, if due: after the model summary, before the first row. */
static void epoch_header_due(cli_progress *p, int epochs)
{
    if (p->header_due)
        epoch_header(p, epochs);
    p->header_due = 0;
}

static void epoch_row(cli_progress *p, const vit_train_progress *at, const vit_epoch_metrics *m,
                      double ips)
{
    char ep[48], t[32], cell[NCOLS][32];
    snprintf(ep, sizeof ep, "%llu/%d", at->epoch, at->epochs);
    snprintf(cell[COL_TRAIN_LOSS], sizeof cell[0], "%.4f", m->train_loss);
    snprintf(cell[COL_TRAIN_ACC], sizeof cell[0], "%.4f", m->train_acc);
    snprintf(cell[COL_TEST_LOSS], sizeof cell[0], "%.4f", p->with_val ? m->val_loss : m->test_loss);
    snprintf(cell[COL_TEST_ACC], sizeof cell[0], "%.4f", p->with_val ? m->val_acc : m->test_acc);
    snprintf(cell[COL_TIME], sizeof cell[0], "%s", cli_hms(m->seconds, t, sizeof t));
    snprintf(cell[COL_LR], sizeof cell[0], "%.2e", m->lr);
    snprintf(cell[COL_IPS], sizeof cell[0], "%.0f", ips);
    fprintf(p->out, "%*s", p->epoch_w, ep);
    for (int c = 0; c < NCOLS; c++)
        if (p->cols & 1 << c)
            fprintf(p->out, "  %*s", col_width(p, c), cell[c]);
    fputc('\n', p->out);
    fflush(p->out);
}

/* Seconds the scoring still to come will take: after each remaining epoch
 * a pass over the validation (or, without one, the test) images, and at
 * the end, with test-time augmentation, nine more.  Measured once an epoch has been
 * scored (the time between its last step and its row); before that,
 * guessed from the training speed, a forward being about a third of a
 * training step's work.  per_image: seconds per training image. */
static double scoring_left(const cli_progress *p, const vit_train_event *ev, double per_image)
{
    const vit_train_progress *at = ev->at;
    const vit_train_config *c = vit_trainer_train_config(ev->trainer);
    double pass = p->score_seconds > 0 ? p->score_seconds : p->score_images * per_image / 3;
    double epochs_left = (double)at->epochs - (double)at->epoch;
    int views = c->tta != VIT_TTA_NONE && at->plan_cut == VIT_PLAN_WHOLE;
    return pass * (epochs_left + (views ? 9 : 0));
}

/* An ETA within the budget: a budgeted run ends by it (the library's
 * ceiling), whatever the steps' pace says. */
static double budget_eta(const vit_train_progress *at, double eta)
{
    if (at->budget_seconds <= 0)
        return eta;
    double left = at->budget_seconds - at->elapsed;
    left = left > 0 ? left : 0;
    return eta < left ? eta : left;
}

/* Parameters as 950, 81.2k or 1.35M. */
static const char *count_text(size_t n, char *buf, size_t cap)
{
    if (n < 10000)
        snprintf(buf, cap, "%zu", n);
    else if (n < 1000000)
        snprintf(buf, cap, "%.1fk", (double)n / 1e3);
    else
        snprintf(buf, cap, "%.2fM", (double)n / 1e6);
    return buf;
}

/* Once per run, after its first steps (at least 10 of them and a second
 * past the first, or the epoch's end; none when the first epoch's row came
 * first, as with one step an epoch): "model: 81.2k parameters, 50 tokens
 * (7x7 patches of 4), 1830 img/s, ETA 0:02:05".  The speed is that of the
 * steps after the first (which also pays for the first allocations); the
 * ETA is the remaining steps' at that speed.  Too long for the line, the
 * patches go first, then words, then the speed; then it is cut. */
static void model_summary(cli_progress *p, const vit_train_event *ev)
{
    const vit_train_progress *at = ev->at;
    unsigned long long done = at->step - at->start_step;
    double t = now_seconds();
    if (done == 1)
        p->t_first = t;
    if (p->summary_done || !p->header_due) /* never inside the table */
        return;
    if (done < 2 || ((long)at->epoch_step < at->steps_per_epoch
                     && (done < 11 || t - p->t_first < 1.0)))
        return;
    p->summary_done = 1;
    const vit_config *c = vit_trainer_config(ev->trainer);
    const int batch = vit_trainer_train_config(ev->trainer)->batch;
    double per_step = (t - p->t_first) / (double)(done - 1);
    double ips = per_step > 0 ? batch / per_step : 0;
    char n[32], eta[32], grid[64], line[256];
    /* The grid the model tiles (overlapping patches give more tokens than
     * image / patch), with the stride and padding when they overlap. */
    vit_patch_shape ps = vit_config_patch_shape(c);
    int gh = 0, gw = 0;
    const vit_arch *arch = vit_config_arch(c);
    if (arch != vit_arch_vit()) /* its tokens are its own: name it instead */
        snprintf(grid, sizeof grid, " (%s)", arch->name);
    else if (vit_patch_grid(&ps, &gh, &gw) != VIT_OK)
        gh = gw = 0; /* cannot happen: the model was built on this config */
    if (arch != vit_arch_vit())
        ;
    else if ((c->patch_stride == 0 || c->patch_stride == c->patch) && c->patch_pad == 0)
        snprintf(grid, sizeof grid, " (%dx%d patches of %d)", gh, gw, c->patch);
    else
        snprintf(grid, sizeof grid, " (%dx%d patches of %d, stride %d, padding %d)", gh, gw,
                 c->patch, c->patch_stride ? c->patch_stride : c->patch, c->patch_pad);
    double left = (double)(at->total_steps - (long)at->step) * per_step;
    cli_hms(budget_eta(at, left + scoring_left(p, ev, per_step / batch)), eta, sizeof eta);
    count_text(vit_model_param_count(vit_trainer_model(ev->trainer)), n, sizeof n);
    int max = line_max(p);
    int len = arch != vit_arch_vit()
                  ? snprintf(line, sizeof line, "model: %s parameters%s, %.0f img/s, ETA %s", n,
                             grid, ips, eta)
                  : snprintf(line, sizeof line, "model: %s parameters, %d tokens%s, %.0f img/s, "
                             "ETA %s", n, gh * gw + 1, grid, ips, eta);
    if (len > max)
        len = snprintf(line, sizeof line, "model: %s parameters, %d tokens, %.0f img/s, ETA %s", n,
                       gh * gw + 1, ips, eta);
    if (len > max)
        len = snprintf(line, sizeof line, "model: %s params, %d tokens, %.0f img/s, ETA %s", n,
                       gh * gw + 1, ips, eta);
    if (len > max)
        len = snprintf(line, sizeof line, "%s params, %d tokens, ETA %s", n, gh * gw + 1, eta);
    if (len > max)
        line[max > 0 ? max : 0] = 0;
    bar_clear(p);
    fprintf(p->out, "%s\n", line);
    epoch_header_due(p, at->epochs);
    fflush(p->out);
}

/* After a step: the model line when due, then on a terminal the bar every
 * 4 steps, to a file or pipe a plain line at most every p->every seconds
 * (no \r in a log). */
static void on_step(cli_progress *p, const vit_train_event *ev)
{
    const vit_train_progress *at = ev->at;
    p->t_last_step = now_seconds();
    model_summary(p, ev);
    long s1 = (long)at->epoch_step, spe = at->steps_per_epoch;
    double tnow = 0;
    int bar = p->mode == 2 && (s1 % 4 == 0 || s1 == spe);
    int plain = p->mode == 1 && s1 < spe && (tnow = now_seconds()) - p->last_print >= p->every;
    if (!bar && !plain)
        return;
    double steps = (double)(at->step - at->start_step);
    double per_step = steps > 0 ? at->elapsed / steps : 0;
    double eta = budget_eta(at, (double)(at->total_steps - (long)at->step) * per_step
                                    + scoring_left(p, ev, per_step / at->batch));
    if (bar) {
        bar_draw(p, at, ev->loss, ev->images_per_second, eta);
        return;
    }
    char line[256];
    progress_text(line, sizeof line, 100, at, ev->loss, ev->images_per_second, eta, 0);
    fprintf(p->out, "%s\n", line);
    fflush(p->out);
    p->last_print = tnow;
}

/* The warm-up the config asks for, when it is more than a tenth of the
 * run and so shortened (vit_train_progress.warmup_steps). */
static void warmup_note(cli_progress *p, const vit_train_event *ev)
{
    const vit_train_progress *at = ev->at;
    double want = vit_trainer_train_config(ev->trainer)->warmup;
    if ((long)(want * (double)at->steps_per_epoch) <= at->warmup_steps)
        return;
    char line[160];
    int max = line_max(p);
    snprintf(line, sizeof line, "warm-up: %g epochs cut to %.2g, a tenth of the run", want,
             (double)at->warmup_steps / (double)at->steps_per_epoch);
    if (max > 0 && max < (int)sizeof line)
        line[max] = 0;
    fprintf(p->out, "%s\n", line);
}

/* The budget's plan, in one line: "budget 0:15:00: 37 epochs, 34688
 * steps, predicted 0:14:31 with the scoring (measured 2210 img/s)", and
 * after an epoch that moves it, the new plan and why. */
static void on_plan(cli_progress *p, const vit_train_event *ev)
{
    const vit_train_progress *at = ev->at;
    char b[32], e[32];
    cli_hms(at->budget_seconds + p->budget_before + p->budget_after, b, sizeof b);
    cli_hms(at->planned_seconds + p->budget_before, e, sizeof e);
    bar_clear(p);
    const char *cut = at->plan_cut == VIT_PLAN_NO_TTA
                          ? "; the final test-time augmented scoring is left out (it does not "
                            "fit, or would take a fifth of the epochs or more): the figures "
                            "will be one pass"
                      : at->plan_cut == VIT_PLAN_PARTIAL
                          ? "; its last epoch and the final scoring do not fit whole: the run "
                            "will end inside that epoch, its schedule laid out to end at min_lr "
                            "there, its figures one pass"
                          : "";
    if (at->replans == 0)
        fprintf(p->out, "budget %s: %d epochs, %ld steps, predicted %s%s with the scoring "
                "(measured %.0f img/s)%s\n", b, at->epochs, at->total_steps,
                at->plan_cut == VIT_PLAN_PARTIAL ? "at most " : "", e, ev->images_per_second,
                cut);
    else
        fprintf(p->out, "budget %s: at %.0f img/s now %d epochs, %ld steps, predicted %s%s; the "
                "schedule is laid out anew to end at min_lr there%s\n", b, ev->images_per_second,
                at->epochs, at->total_steps, at->plan_cut == VIT_PLAN_PARTIAL ? "at most " : "",
                e, cut);
}

/* epochs: 20 -> 30, said as the run's change. */
static void on_resume_change(cli_progress *p, const vit_train_event *ev)
{
    if (strcmp(ev->key, "epochs") == 0)
        fprintf(p->out, "epochs: %s -> %s: the run is %s; the cosine schedule is recomputed for "
                "%s epochs\n", ev->old_value, ev->new_value,
                atof(ev->new_value) > atof(ev->old_value) ? "extended" : "shortened",
                ev->new_value);
    else
        fprintf(p->out, "%s: %s -> %s\n", ev->key, ev->old_value, ev->new_value);
    fflush(p->out);
}

/* The figures data_norm applies (the training images', or the file's
 * for a resumed or fine-tuned run): said once, as the recipe is. */
static void data_norm_note(cli_progress *p, const vit_train_event *ev)
{
    const vit_config *c = vit_model_config(vit_trainer_model(ev->trainer));
    if (!c || !c->data_norm)
        return;
    fprintf(p->out, "data_norm: each channel as (x - mean) / std before the network, mean");
    for (int k = 0; k < c->data_mean.n; k++)
        fprintf(p->out, "%s%.4g", k ? "," : " ", c->data_mean.v[k]);
    fprintf(p->out, ", std");
    for (int k = 0; k < c->data_std.n; k++)
        fprintf(p->out, "%s%.4g", k ? "," : " ", c->data_std.v[k]);
    fprintf(p->out, " (stored with the model)\n");
}

void cli_progress_init(cli_progress *p, int mode, double every, const char *out_dir, int with_val,
                       int score_images)
{
    memset(p, 0, sizeof *p);
    p->score_images = score_images;
    p->mode = mode;
    p->every = every > 0 ? every : 30;
    p->out_dir = out_dir;
    p->with_val = with_val;
    p->out = stdout;
}

int cli_progress_event(const vit_train_event *ev, void *user)
{
    cli_progress *p = user;
    const vit_train_progress *at = ev->at;
    if (ev->kind == VIT_TRAIN_STEP) /* kept even when quiet: the budget's last line says it */
        p->last_lr = ev->lr;
    if (ev->kind == VIT_TRAIN_RESUME_CHANGE) { /* said even when quiet: the run changes */
        on_resume_change(p, ev);
        return 0;
    }
    if (p->mode == 0)
        return 0;
    switch (ev->kind) {
    case VIT_TRAIN_INIT:
        fprintf(p->out, "init: %s: %s\n", ev->path, ev->new_value);
        break;
    case VIT_TRAIN_SET_ASIDE:
        fprintf(p->out, "%s: the run there (last.ckpt, metrics.csv) moved to %s\n", p->out_dir,
                ev->path);
        break;
    case VIT_TRAIN_BEGIN:
        data_norm_note(p, ev);
        p->header_due = 1;
        p->header_max = line_max(p);
        p->last_print = now_seconds();
        if (at->epoch_step > 0)
            fprintf(p->out, "resuming inside epoch %llu at step %llu of %ld\n", at->epoch + 1,
                    at->epoch_step, at->steps_per_epoch);
        warmup_note(p, ev);
        break;
    case VIT_TRAIN_PLAN:
        on_plan(p, ev);
        break;
    case VIT_TRAIN_STEP:
        on_step(p, ev);
        break;
    case VIT_TRAIN_EPOCH:
        if (p->t_last_step > 0)
            p->score_seconds = now_seconds() - p->t_last_step;
        bar_clear(p);
        epoch_header_due(p, at->epochs);
        epoch_row(p, at, ev->epoch, ev->images_per_second);
        p->last_print = now_seconds();
        break;
    default:
        break;
    }
    fflush(p->out);
    return 0;
}

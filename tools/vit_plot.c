/*
 * vit_plot - draw the training curves of a vit_train run (every loss,
 * accuracy and the learning rate, per epoch) from its metrics.csv into a
 * PNG, with the final figures of final.csv beside it ringed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "figures.h"
#include "vit/vit.h"

static const char *prog = "vit_plot";

#define MAX_TARGETS 16

/* LIST ("90,92.5,94", percentages in (0, 100]) into targets (fractions);
 * the count, or 0 after saying what is wrong. */
static int parse_targets(const char *list, double *targets)
{
    int n = 0;
    const char *p = list;
    for (;;) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || (*end && *end != ',') || !(v > 0 && v <= 100) || n == MAX_TARGETS) {
            fprintf(stderr, "%s: --time-to: expected up to %d percentages in (0, 100] separated "
                    "by commas, got '%s'\n", prog, MAX_TARGETS, list);
            return 0;
        }
        targets[n++] = v / 100;
        if (!*end)
            return n;
        p = end + 1;
    }
}

/* The run's time to each target: the first epoch whose one-pass accuracy
 * (acc, a column of m) reached it, and the wall time at its end (the
 * seconds column: training and that epoch's scoring, resumes included);
 * then the time to the final figure (final.csv's seconds, when it has
 * them).  what names the column for the reader. */
static void print_time_to(const vit_metrics_table *m, const double *acc, const char *what,
                          const double *targets, int nt, const vit_metrics_table *fin)
{
    const double *sec = vit_metrics_column(m, "seconds");
    printf("time to accuracy (%s, one pass, first epoch at or above):\n", what);
    int best = -1;
    for (int i = 0; i < m->rows; i++)
        if (!isnan(acc[i]) && (best < 0 || acc[i] > acc[best]))
            best = i;
    for (int k = 0; k < nt; k++) {
        int at = -1;
        /* The accuracies are written with 6 decimals: compare at that
         * grain, so 94% is reached by a row that says 0.940000. */
        for (int i = 0; i < m->rows && at < 0; i++)
            if (!isnan(acc[i]) && acc[i] >= targets[k] - 5e-7)
                at = i;
        char t[32];
        if (at >= 0 && sec && !isnan(sec[at]))
            printf("  %6.2f%%  epoch %4.0f  %s (%.1f s)\n", 100 * targets[k], m->epoch[at],
                   cli_hms(sec[at], t, sizeof t), sec[at]);
        else if (at >= 0)
            printf("  %6.2f%%  epoch %4.0f  (no seconds column)\n", 100 * targets[k], m->epoch[at]);
        else if (best >= 0)
            printf("  %6.2f%%  not reached (best %.2f%% at epoch %.0f)\n", 100 * targets[k],
                   100 * acc[best], m->epoch[best]);
        else
            printf("  %6.2f%%  not reached (no %s figures)\n", 100 * targets[k], what);
    }
    const double *f_acc = fin ? vit_metrics_column(fin, "test_acc") : NULL;
    const double *f_sec = fin ? vit_metrics_column(fin, "seconds") : NULL;
    const double *f_tta = fin ? vit_metrics_column(fin, "tta") : NULL;
    if (f_acc && f_sec && !isnan(f_acc[0]) && !isnan(f_sec[0])) {
        char t[32];
        int tta = f_tta && !isnan(f_tta[0]) && f_tta[0] != 0;
        printf("  final test accuracy %.2f%%%s%s%s: %s (%.1f s), the whole run\n", 100 * f_acc[0],
               tta ? " (tta " : "", tta ? vit_tta_name((int)f_tta[0]) : "", tta ? ")" : "",
               cli_hms(f_sec[0], t, sizeof t), f_sec[0]);
    }
}

static void usage(void)
{
    printf("usage: vit_plot METRICS.csv [--out curves.png] [--title TEXT] [--time-to LIST] [--force]\n"
           "Draws every column of the metrics.csv that vit_train writes into its --out\n"
           "folder against the epoch, as a PNG (default curves.png; an existing file is\n"
           "replaced only with --force): the losses (top\n"
           "panel), the accuracies (train, and test or, with --val, validation; one\n"
           "pass per image) and the learning rate.  A run with a validation set scores\n"
           "the test set once, at the end (its per-epoch test columns are empty).  When\n"
           "final.csv beside it holds the figures the run reported at its end (with\n"
           "test-time augmentation or averaged weights they differ from the one-pass\n"
           "points), they are ringed in red at the epoch of the model they score: the\n"
           "last, or best.ckpt's with --save-best.  The title defaults to the CSV's path.\n"
           "  --time-to LIST  also print the run's time to each accuracy of LIST\n"
           "               (percentages, e.g. 90,92,93,94): the first epoch whose one-pass\n"
           "               test accuracy (validation with --val) reached it and the run's\n"
           "               wall time at that epoch's end, scoring included; and the time\n"
           "               to the final figure of final.csv\n");
}

/* What the options set. */
typedef struct plot_opts {
    const char *out, *title;
    double targets[MAX_TARGETS];
    int ntargets;
    int force;
} plot_opts;

static int read_option(void *user, const char *a, const char *v)
{
    plot_opts *o = user;
    if (strcmp(a, "--force") == 0)
        o->force = 1;
    else if (strcmp(a, "--out") == 0)
        o->out = v;
    else if (strcmp(a, "--title") == 0)
        o->title = v;
    else if (strcmp(a, "--time-to") == 0) {
        if (!(o->ntargets = parse_targets(v, o->targets)))
            return 2;
    } else
        return cli_unknown_option(prog, a);
    return -1;
}

int main(int argc, char **argv)
{
    cli_ignore_file_size_signal();
    const char *csv = NULL;
    plot_opts o = {.out = "curves.png"};
    static const cli_flag flags[] = {{"--out", 1}, {"--title", 1}, {"--time-to", 1}, {"--force", 0},
                                     {"--help", 0}, {"--version", 0}, {NULL, 0}};
    const char **pos[] = {&csv};
    int exit_rc = cli_options(prog, &argc, &argv, flags, usage, pos, 1, read_option, &o);
    if (exit_rc >= 0)
        return exit_rc;
    const char *out = o.out, *title = o.title;
    const double *targets = o.targets;
    int ntargets = o.ntargets;
    if (!csv) {
        fprintf(stderr, "%s: no metrics file given (see --help)\n", prog);
        return 2;
    }
    if (cli_refuse_existing(prog, "--out", out, o.force))
        return 2;
    vit_metrics_table m, fin = {0};
    if (vit_metrics_read(csv, &m))
        return cli_fail(prog, NULL);
    /* final.csv beside it, if the run finished (a missing one is no error;
     * a broken one is said and left out). */
    char fin_path[4200];
    const char *slash = strrchr(csv, '/');
    snprintf(fin_path, sizeof fin_path, "%.*sfinal.csv", slash ? (int)(slash - csv + 1) : 0, csv);
    int have_fin = access(fin_path, F_OK) == 0;
    if (have_fin && vit_metrics_read(fin_path, &fin)) {
        fprintf(stderr, "%s: %s (not marked)\n", prog, vit_last_error());
        have_fin = 0;
    }
    const double *f_ep = have_fin ? vit_metrics_column(&fin, "epoch") : NULL;
    if (f_ep && f_ep[0] != m.epoch[m.rows - 1]) {
        printf("%s: from epoch %.0f, not the last of %s (%.0f): not marked\n", fin_path, f_ep[0],
               csv, m.epoch[m.rows - 1]);
        have_fin = 0;
    }
    /* The title is drawn at twice the font size: keep it on the canvas. */
    char title_buf[56];
    size_t len = strlen(title ? title : csv);
    snprintf(title_buf, sizeof title_buf, "%s%s", len > 52 ? "..." : "",
             (title ? title : csv) + (len > 52 ? len - 49 : 0));
    draw_canvas canvas;
    fig_curves_layout lay;
    int rc = 1;
    if (fig_curves_draw(&m, have_fin ? &fin : NULL, title_buf, &canvas, &lay))
        cli_fail(prog, NULL);
    else if (draw_save_png(&canvas, out))
        cli_fail(prog, NULL);
    else {
        /* With a validation set the epochs scored it, not the test set. */
        const double *v_acc = vit_metrics_column(&m, "val_acc");
        int val = isnan(m.test_acc[m.rows - 1]) && v_acc && !isnan(v_acc[m.rows - 1]);
        if (val)
            printf("%s: %d epochs, last validation accuracy %.4f (one pass); the test set is "
                   "scored once, at the end\n", csv, m.rows, v_acc[m.rows - 1]);
        else
            printf("%s: %d epochs, last test accuracy %.4f (one pass), last test loss %.4f\n",
                   csv, m.rows, m.test_acc[m.rows - 1], m.test_loss[m.rows - 1]);
        const double *f_acc = have_fin ? vit_metrics_column(&fin, "test_acc") : NULL;
        const double *f_tta = have_fin ? vit_metrics_column(&fin, "tta") : NULL;
        f_tta = f_tta && !isnan(f_tta[0]) ? f_tta : NULL; /* empty: not said */
        const double *f_best = have_fin ? vit_metrics_column(&fin, "best_epoch") : NULL;
        char on[48] = "";
        if (f_best && f_best[0] > 0)
            snprintf(on, sizeof on, " on best.ckpt (epoch %.0f)", f_best[0]);
        if (f_acc)
            printf("%s: final test accuracy %.4f%s%s%s%s, ringed\n", fin_path, f_acc[0],
                   f_tta && f_tta[0] != 0 ? " (tta " : "",
                   f_tta && f_tta[0] != 0 ? vit_tta_name((int)f_tta[0]) : "",
                   f_tta && f_tta[0] != 0 ? ")" : "", on);
        if (ntargets)
            print_time_to(&m, val ? v_acc : m.test_acc, val ? "validation" : "test", targets,
                          ntargets, have_fin ? &fin : NULL);
        for (int c = 0; c < m.cols; c++)
            if (fig_curves_panel_of(m.names[c]) == FIG_PANEL_NONE &&
                strcmp(m.names[c], "epoch") != 0 && strcmp(m.names[c], "seconds") != 0)
                printf("column %s: not plotted (not a loss, accuracy or lr)\n", m.names[c]);
        printf("wrote %s (%dx%d pixels)\n", out, lay.width, lay.height);
        rc = 0;
    }
    draw_canvas_free(&canvas);
    vit_metrics_free(&m);
    vit_metrics_free(&fin);
    return rc;
}

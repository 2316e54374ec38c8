/*
 * vit_plot - draw the training curves of a vit_train run (train and test
 * loss, test accuracy, per epoch) from its metrics.csv into a PNG.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "figures.h"
#include "vit/vit.h"

static const char *prog = "vit_plot";

static void usage(void)
{
    printf("usage: vit_plot METRICS.csv [--out curves.png] [--title TEXT]\n"
           "Draws train loss and test loss (top panel) and test accuracy (bottom\n"
           "panel) against the epoch from the metrics.csv that vit_train writes into\n"
           "its --out folder, as a PNG (default curves.png).  The title defaults to\n"
           "the CSV's path.\n");
}

int main(int argc, char **argv)
{
    cli_ignore_file_size_signal();
    const char *csv = NULL, *out = "curves.png", *title = NULL;
    static const cli_flag flags[] = {{"--out", 1}, {"--title", 1}, {"--help", 0},
                                     {"--version", 0}, {NULL, 0}};
    if (!cli_normalize(prog, &argc, &argv, flags, 0))
        return 2;
    const char **pos[] = {&csv};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = cli_arg(prog, argc, argv, &i, flags, usage, pos, 1, &v);
        if (r == CLI_ARG_TAKEN)
            continue;
        if (r != CLI_ARG_OPTION)
            return r;
        if (strcmp(a, "--out") == 0)
            out = v;
        else if (strcmp(a, "--title") == 0)
            title = v;
        else
            return cli_unknown_option(prog, a);
    }
    if (!csv) {
        fprintf(stderr, "%s: no metrics file given (see --help)\n", prog);
        return 2;
    }
    vit_metrics_table m;
    if (vit_metrics_read(csv, &m))
        return cli_fail(prog, NULL);
    /* The title is drawn at twice the font size: keep it on the canvas. */
    char title_buf[56];
    size_t len = strlen(title ? title : csv);
    snprintf(title_buf, sizeof title_buf, "%s%s", len > 52 ? "..." : "",
             (title ? title : csv) + (len > 52 ? len - 49 : 0));
    draw_canvas canvas;
    fig_curves_layout lay;
    int rc = 1;
    if (fig_curves_draw(&m, title_buf, &canvas, &lay))
        cli_fail(prog, NULL);
    else if (draw_save_png(&canvas, out))
        cli_fail(prog, NULL);
    else {
        printf("%s: %d epochs, last test accuracy %.4f, last test loss %.4f\n", csv, m.rows,
               m.test_acc[m.rows - 1], m.test_loss[m.rows - 1]);
        printf("wrote %s (%dx%d pixels)\n", out, lay.width, lay.height);
        rc = 0;
    }
    draw_canvas_free(&canvas);
    vit_metrics_free(&m);
    return rc;
}

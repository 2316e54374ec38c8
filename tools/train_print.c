/*
 * What vit_train prints about the data before training (per-class counts,
 * a --val tail that misses classes) and about the result after it (the
 * final figures and --tta auto's choice).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "vit/vit.h"
#include "vit_train.h"

void print_class_counts(const vit_dataset *train)
{
    int *n = calloc((size_t)train->classes, sizeof *n), lo = 0, hi = 0, few = 0, at;
    if (n == NULL || vit_dataset_class_counts(train, n) != VIT_OK) {
        free(n);
        return;
    }
    const char *const *nm = (const char *const *)train->class_names;
    char line[80];
    at = snprintf(line, sizeof line, "per class:");
    for (int k = 0; k < train->classes; k++) {
        lo = n[k] < n[lo] ? k : lo;
        hi = n[k] > n[hi] ? k : hi;
        if (at < (int)sizeof line)
            at += snprintf(line + at, sizeof line - (size_t)at, " %s:%d", nm ? nm[k] : "?", n[k]);
    }
    if (at >= (int)sizeof line && n[lo] == n[hi])
        snprintf(line, sizeof line, "per class: %d images each", n[lo]);
    else if (at >= (int)sizeof line)
        snprintf(line, sizeof line, "per class: %d ('%.20s') to %d ('%.20s')", n[lo],
                 nm ? nm[lo] : "?", n[hi], nm ? nm[hi] : "?");
    cli_print_fitted(stdout, line);
    for (int k = 0; k < train->classes; k++)
        few += n[k] < 5;
    if (few)
        printf("warning: %d class%s with under 5 training images, e.g. '%.16s' (%d)\n", few,
               few == 1 ? "" : "es", nm ? nm[lo] : "?", n[lo]);
    if (n[hi] > 10 * n[lo])
        printf("warning: imbalanced classes: '%.12s' %d images, '%.12s' %d\n", nm ? nm[hi] : "?",
               n[hi], nm ? nm[lo] : "?", n[lo]);
    free(n);
}

void warn_val_tail(const vit_dataset *train, int val)
{
    if (val <= 0 || val >= train->count || train->classes < 2)
        return;
    char *seen = calloc((size_t)train->classes, 1);
    if (!seen)
        return;
    int tail = 0, all = 0;
    for (int i = 0; i < train->count; i++) {
        int y = train->labels[i];
        if (y < 0 || y >= train->classes || (seen[y] & (i >= train->count - val ? 2 : 1)))
            continue;
        seen[y] |= i >= train->count - val ? 2 : 1;
    }
    for (int k = 0; k < train->classes; k++) {
        all += seen[k] != 0;
        tail += (seen[k] & 2) != 0;
    }
    free(seen);
    if (2 * tail < all)
        printf("warning: --val %d holds out the last %d training images, which cover %d of the "
               "%d classes (the images are stored class by class); --val-split F holds out a "
               "fraction F of every class\n", val, val, tail, all);
}

void print_tta_auto(const vit_train_result *r, const vit_train_config *tc)
{
    if (!r->tta_auto)
        return;
    const char *tried = vit_tta_name(tc->flip ? VIT_TTA_SHIFT9_FLIP : VIT_TTA_SHIFT9);
    if (r->val_accuracy_tta >= 0)
        printf("tta auto: %s%s (validation: %s %.4f, one pass %.4f)\n",
               r->tta != VIT_TTA_NONE ? tried : "one pass kept",
               r->tta != VIT_TTA_NONE ? " chosen" : "", tried, r->val_accuracy_tta,
               r->val_accuracy_plain);
    else if (r->test_accuracy_tta >= 0)
        printf("tta auto: one pass kept, no validation set to choose by (--val N); test "
               "accuracy with %s %.4f\n", tried, r->test_accuracy_tta);
}

void print_result(const char *acc, const char *labels, const char *timing, const char *path)
{
    int cols = cli_terminal_columns();
    size_t width = cols > 0 ? (size_t)cols - 1 : 100;
    const char *sep = *labels ? "; " : "";
    /* acc + " (" + labels + sep + timing + ")" */
    size_t head = strlen(acc) + 2 + strlen(labels) + strlen(sep) + strlen(timing) + 1;
    if (head + strlen("; checkpoint ") + strlen(path) <= width) {
        printf("%s (%s%s%s); checkpoint %s\n", acc, labels, sep, timing, path);
        return;
    }
    char line[512];
    if (head <= width || !*labels) {
        snprintf(line, sizeof line, "%s (%s%s%s)", acc, labels, sep, timing);
        cli_print_fitted(stdout, line);
        cli_print_item(stdout, "checkpoint", path);
        return;
    }
    snprintf(line, sizeof line, "%s (%s)", acc, labels);
    cli_print_fitted(stdout, line);
    if (strlen(timing) + strlen("; checkpoint ") + strlen(path) <= width) {
        printf("%s; checkpoint %s\n", timing, path);
    } else {
        cli_print_fitted(stdout, timing);
        cli_print_item(stdout, "checkpoint", path);
    }
}

/*
 * vit_eval - score a checkpoint on a data set: loss, accuracy, confusion.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "vit/vit.h"

static const char *prog = "vit_eval";

static void usage(void)
{
    printf("usage: vit_eval CKPT [--data SPEC] [--split test|train] [--threads N]\n"
           "                [--tta none|shift9|shift9flip]\n"
           "Scores a checkpoint written by vit_train on the test (default) or training\n"
           "split of a data set and prints loss, accuracy and the confusion matrix.\n"
           "CKPT may be a run's folder: its best.ckpt when the run kept one, else\n"
           "last.ckpt.\n"
           "The model is scored as it was trained to be used: with the averaged weights\n"
           "of a run with ema, and with the test-time augmentation of its config (tta);\n"
           "--tta overrides that (none: one pass per image; shift9: the mean\n"
           "probabilities over the image and its eight one-pixel shifts; shift9flip:\n"
           "over those nine and the same of the mirror image).  --data: digits\n"
           "or a data folder; without it, the data the checkpoint's run trained on.\n");
}

/* What the options set (tta -1: the model's). */
typedef struct eval_opts {
    const char *data;
    int split_train, threads, tta;
} eval_opts;

static int read_option(void *user, const char *a, const char *v)
{
    eval_opts *o = user;
    if (strcmp(a, "--data") == 0)
        o->data = v;
    else if (strcmp(a, "--split") == 0) {
        if (strcmp(v, "train") && strcmp(v, "test")) {
            fprintf(stderr, "%s: --split: expected test or train, got '%s'\n", prog, v);
            return 2;
        }
        o->split_train = strcmp(v, "train") == 0;
    } else if (strcmp(a, "--tta") == 0) {
        if (!cli_tta(prog, a, v, &o->tta))
            return 2;
    } else if (strcmp(a, "--threads") == 0) {
        if (!cli_int(prog, a, v, 1, 256, &o->threads))
            return 2;
    } else {
        return cli_unknown_option(prog, a);
    }
    return -1;
}

/* Per class: precision (of the images predicted as the class, the share
 * that are), recall (of the class's images, the share predicted as it),
 * F1 (their harmonic mean) and the image count; then the macro average.
 * A class never predicted has precision 0 (printed as "-"), and F1 0. */
static void print_per_class(const vit_eval_result *r, char *const *names)
{
    int K = r->classes;
    double sp = 0, sr = 0, sf = 0;
    printf("class                precision  recall      F1  images\n");
    for (int k = 0; k < K; k++) {
        long row = 0, col = 0, hit = r->confusion[(size_t)k * K + k];
        for (int j = 0; j < K; j++) {
            row += r->confusion[(size_t)k * K + j];
            col += r->confusion[(size_t)j * K + k];
        }
        double p = col ? (double)hit / (double)col : 0, rc = row ? (double)hit / (double)row : 0;
        double f = p + rc > 0 ? 2 * p * rc / (p + rc) : 0;
        char name[24], pt[16] = "-";
        snprintf(name, sizeof name, "%d %s", k, names ? names[k] : "");
        if (col)
            snprintf(pt, sizeof pt, "%.4f", p);
        printf("%-20.20s %9s  %6.4f  %6.4f  %6ld\n", name, pt, rc, f, row);
        sp += p;
        sr += rc;
        sf += f;
    }
    printf("%-20s %9.4f  %6.4f  %6.4f\n", "mean over classes", sp / K, sr / K, sf / K);
}

/* The scoring used, in one line: one pass or which test-time
 * augmentation, chosen by --tta or the model's config, and averaged
 * weights when the run kept them. */
static void print_scoring(int tta, int by_flag, double ema)
{
    const char *how = tta == VIT_TTA_SHIFT9 ? "shift9: the mean of 9 passes an image (the image "
                                              "and its 8 one-pixel shifts)"
                      : tta == VIT_TTA_SHIFT9_FLIP ? "shift9flip: the mean of 18 passes an image "
                                                     "(shift9 and its mirror images)"
                                                   : "one pass an image";
    printf("scoring: %s, %s%s\n", how, by_flag ? "as --tta asks" : "the model's tta",
           ema > 0 ? "; the averaged weights (ema)" : "");
}

int main(int argc, char **argv)
{
    const char *ckpt = NULL;
    eval_opts o = {.tta = -1};
    static const cli_flag flags[] = {{"--data", 1}, {"--split", 1}, {"--threads", 1}, {"--tta", 1},
                                     {"--help", 0}, {"--version", 0}, {NULL, 0}};
    const char **pos[] = {&ckpt};
    int exit_rc = cli_options(prog, &argc, &argv, flags, usage, pos, 1, read_option, &o);
    if (exit_rc >= 0)
        return exit_rc;
    const char *data = o.data;
    int split_train = o.split_train, threads = o.threads, tta = o.tta;
    if (!ckpt) {
        fprintf(stderr, "%s: no checkpoint given (see --help)\n", prog);
        return 2;
    }
    char ckpt_path[PATH_MAX + 16]; /* a run folder's checkpoint */
    if (!(ckpt = cli_run_checkpoint(prog, NULL, ckpt, 0, ckpt_path, sizeof ckpt_path)))
        return 2;
    if (threads)
        vit_set_threads(threads);
    vit_model *m = NULL;
    vit_run_state st;
    vit_train_config tc; /* the run's recipe: its tta, its ema */
    if (vit_run_load(ckpt, &m, &tc, NULL, &st))
        return cli_fail(prog, NULL);
    /* Without --data: the data (and split) the checkpoint's run trained on. */
    vit_data_opts how;
    data = cli_data_of_run(&st.data, st.has_data, data, &how);
    vit_dataset train = {0}, test = {0};
    vit_tape *tape = vit_tape_new();
    vit_eval_result r = {0};
    int rc = 1;
    if (!tape)
        cli_fail(prog, NULL);
    else if (cli_load_data(prog, data, &how, &train, &test))
        ;
    else if (vit_evaluate_tta(m, tape, split_train ? &train : &test, 256,
                              tta >= 0 ? tta : tc.tta, &r))
        cli_fail(prog, ckpt);
    else {
        /* The checkpoint's class names (those the model learned). */
        cli_print_confusion(r.confusion, r.classes,
                            st.nclass_names == r.classes ? st.class_names : NULL);
        int used = tta >= 0 ? tta : tc.tta;
        print_per_class(&r, st.nclass_names == r.classes ? st.class_names : NULL);
        print_scoring(used, tta >= 0, tc.ema);
        printf("%s split: %d images, loss %.4f, accuracy %.4f%s%s%s\n",
               split_train ? "train" : "test", r.count, r.loss, r.accuracy,
               vit_tta_passes(used) > 1 ? " (tta " : "",
               vit_tta_passes(used) > 1 ? vit_tta_name(used) : "",
               vit_tta_passes(used) > 1 ? ")" : "");
        /* The figure the run reported for this model, when it is the one
         * final.csv scored: the same data and scoring give the same. */
        double rep;
        int rep_tta;
        if (!split_train && cli_reported_accuracy(ckpt, (long long)st.epoch, &rep, &rep_tta, NULL))
            printf("the run reported test accuracy %.4f for this model (%s%s, final.csv)\n", rep,
                   rep_tta != VIT_TTA_NONE ? "tta " : "one pass",
                   rep_tta != VIT_TTA_NONE ? vit_tta_name(rep_tta) : "");
        rc = 0;
    }
    vit_eval_result_free(&r);
    vit_tape_free(tape);
    vit_dataset_free(&train);
    vit_dataset_free(&test);
    vit_run_state_free(&st);
    vit_model_free(m);
    return rc;
}

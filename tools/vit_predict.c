/*
 * vit_predict - classify PNG or JPEG files (or every image in folders) with
 * a checkpoint; prints, per file, the most likely classes and their
 * probabilities, or writes them to a CSV file.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "vit/atomic_file.h"
#include "vit/vit.h"

static const char *prog = "vit_predict";

static void usage(void)
{
    printf("usage: vit_predict CKPT PATH... [--fit] [--topk K] [--tta none|shift9|shift9flip]\n"
           "                   [--csv FILE [--force]]\n"
           "Classifies each PNG or JPEG file, and every .png, .jpg and .jpeg file under\n"
           "each folder (recursively, in name order; other files are counted and\n"
           "skipped), with pixel values scaled to [0, 1] and alpha composited over white\n"
           "as in training.  Prints: file class probability, the class by the name the\n"
           "checkpoint holds (the class folder name for class folders; the digit, or the\n"
           "--class-names of training, for digits and IDX).  Images must have the\n"
           "model's size and channels, unless --fit is given or the run fitted its own\n"
           "images (vit_train --image-size or --channels, or a folder of mixed images):\n"
           "then every image is fitted the same way.  CKPT may be a run's folder: its\n"
           "best.ckpt when the run kept one, else last.ckpt.\n"
           "  --fit        convert gray<->RGB (RGB to gray by BT.601 luma) and resize to\n"
           "               the model's size with a bilinear (triangle) filter, widened\n"
           "               when shrinking (vit_image_fit)\n"
           "  --topk K     the K most likely classes, most likely first: file class1 p1\n"
           "               class2 p2 ... (default 1)\n"
           "  --tta MODE   the test-time augmentation (default: the model's, as vit_eval\n"
           "               scores it): none, one pass; shift9, the mean over the image and\n"
           "               its eight one-pixel shifts; shift9flip, those and their mirror\n"
           "               images\n"
           "  --csv FILE   write the predictions to FILE as CSV (RFC 4180: a field with a\n"
           "               comma, quote or line break is quoted, quotes doubled), one\n"
           "               header row, then path,class,probability and, with --topk K,\n"
           "               class_2,probability_2 ... class_K,probability_K; nothing on\n"
           "               stdout but a summary.  An existing FILE is refused unless\n"
           "               --force; the file appears whole or not at all\n"
           "Probabilities: a model trained with label smoothing s (config key smoothing,\n"
           "0.1 by default) is taught to give its class 1 - s + s/K, not 1 (0.91 for 10\n"
           "classes), so even a certain prediction shows about that: compare them with\n"
           "each other rather than read them as odds.\n"
           "Exit status 1 when an image could not be classified (each is said; the\n"
           "others are still printed or written).\n");
}

/* Indices of the k largest probabilities, largest first (ties: lower
 * index first). */
static void top_k(const vit_real *p, int n, int k, int *out)
{
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int c = 0; c < n; c++) {
            int used = 0;
            for (int i = 0; i < j; i++)
                used |= out[i] == c;
            if (!used && (best < 0 || p[c] > p[best]))
                best = c;
        }
        out[j] = best;
    }
}

/* The options. */
typedef struct {
    int fit, k, tta, force;
    const char *csv, *ckpt;
} opts;

/* Reads the options and the paths (into paths[*npaths]); -1 to go on,
 * else the exit status. */
static int parse(int argc, char **argv, opts *o, char **paths, int *npaths)
{
    static const cli_flag flags[] = {{"--help", 0}, {"--version", 0}, {"--fit", 0},
                                     {"--topk", 1}, {"--tta", 1}, {"--csv", 1}, {"--force", 0},
                                     {NULL, 0}};
    for (int i = 1; i < argc; i++) {
        const char *value = NULL, *opt = argv[i];
        if (strncmp(opt, "--", 2) != 0 && strcmp(opt, "-h") != 0) {
            if (o->ckpt == NULL)
                o->ckpt = opt;
            else
                paths[(*npaths)++] = argv[i];
            continue;
        }
        int r = cli_arg(prog, argc, argv, &i, flags, usage, NULL, 0, &value);
        if (r >= 0)
            return r;
        if (strcmp(opt, "--fit") == 0) {
            o->fit = 1;
        } else if (strcmp(opt, "--force") == 0) {
            o->force = 1;
        } else if (strcmp(opt, "--csv") == 0) {
            o->csv = value;
        } else if (strcmp(opt, "--tta") == 0) {
            if (!cli_tta(prog, opt, value, &o->tta))
                return 2;
        } else if (strcmp(opt, "--topk") == 0) {
            char *end;
            long v = strtol(value, &end, 10);
            if (*value == '\0' || *end != '\0' || v < 1 || v > 1000000) {
                fprintf(stderr, "%s: --topk: expected a positive integer, got '%s'\n", prog,
                        value);
                return 2;
            }
            o->k = (int)v;
        } else {
            return cli_unknown_option(prog, opt);
        }
    }
    if (o->ckpt == NULL || *npaths == 0) {
        fprintf(stderr, "%s: %s (see --help)\n", prog,
                o->ckpt ? "no image given (files or folders of images)" : "no checkpoint given");
        return 2;
    }
    if (o->force && !o->csv) {
        fprintf(stderr, "%s: --force applies only with --csv (it allows replacing the file)\n",
                prog);
        return 2;
    }
    if (o->csv && !o->force && access(o->csv, F_OK) == 0) {
        fprintf(stderr, "%s: --csv: %s already exists; pass --force to replace it\n", prog,
                o->csv);
        return 1;
    }
    return -1;
}

/* The CSV's header row for k classes a row. */
static void csv_header(FILE *f, int k)
{
    fputs("path,class,probability", f);
    for (int j = 2; j <= k; j++)
        fprintf(f, ",class_%d,probability_%d", j, j);
    fputs("\r\n", f);
}

/* Classifies every file; rows to out (CSV when csv, else the plain line).
 * The number that failed. */
static int classify(vit_model *m, const vit_run_state *st, const opts *o, char **files, int n,
                    FILE *out, int csv)
{
    const vit_config *c = vit_model_config(m);
    int k = o->k < c->classes ? o->k : c->classes, failures = 0;
    int fit = o->fit || cli_run_fits(st);
    vit_tape *tape = vit_tape_new();
    vit_real *probs = malloc((size_t)c->classes * sizeof *probs);
    int *best = malloc((size_t)k * sizeof *best);
    if (!tape || !probs || !best) {
        failures = n + cli_fail(prog, "out of memory") - 1;
        n = 0;
    }
    if (csv)
        csv_header(out, k);
    for (int i = 0; i < n; i++) {
        vit_real *px = cli_model_image(prog, files[i], c, fit);
        int rc = px == NULL ? 1
                 : vit_predict_tta(m, tape, px, 1, o->tta, probs);
        if (px != NULL && rc != VIT_OK)
            cli_fail(prog, files[i]);
        free(px);
        if (rc != VIT_OK) {
            failures++;
            continue;
        }
        top_k(probs, c->classes, k, best);
        if (csv)
            cli_csv_field(out, files[i]);
        else
            fputs(files[i], out);
        for (int j = 0; j < k; j++) {
            fputc(csv ? ',' : ' ', out);
            if (csv)
                cli_csv_field(out, st->class_names[best[j]]);
            else
                fputs(st->class_names[best[j]], out);
            fprintf(out, "%c%.4f", csv ? ',' : ' ', (double)probs[best[j]]);
        }
        fputs(csv ? "\r\n" : "\n", out);
    }
    free(best);
    free(probs);
    vit_tape_free(tape);
    return failures;
}

int main(int argc, char **argv)
{
    cli_ignore_file_size_signal();
    static const cli_flag all[] = {{"--help", 0}, {"--version", 0}, {"--fit", 0}, {"--topk", 1},
                                   {"--tta", 1}, {"--csv", 1}, {"--force", 0}, {NULL, 0}};
    opts o = {0, 1, -1, 0, NULL, NULL};
    int npaths = 0, n = 0, ignored = 0;
    if (!cli_normalize(prog, &argc, &argv, all, 0))
        return 2;
    if (argc < 2) {
        usage();
        return 2;
    }
    char **paths = calloc((size_t)argc, sizeof *paths), **files = NULL;
    if (paths == NULL)
        return cli_fail(prog, "out of memory");
    int rc = parse(argc, argv, &o, paths, &npaths);
    char ckpt_path[PATH_MAX + 16]; /* a run folder's checkpoint */
    if (rc < 0 && !(o.ckpt = cli_run_checkpoint(prog, NULL, o.ckpt, 0, ckpt_path,
                                                sizeof ckpt_path)))
        rc = 2;
    if (rc < 0 && cli_image_paths(prog, paths, npaths, &files, &n, &ignored))
        rc = 1;
    free(paths);
    if (rc >= 0)
        return rc;
    rc = 0;
    if (n == 0) {
        fprintf(stderr, "%s: no .png, .jpg or .jpeg file found (%d other file%s)\n", prog, ignored,
                ignored == 1 ? "" : "s");
        return 1;
    }
    vit_model *m = NULL;
    vit_run_state st;
    vit_train_config tc; /* the run's recipe: its tta, without --tta */
    if (vit_run_load(o.ckpt, &m, &tc, NULL, &st)) {
        cli_paths_free(files, n);
        return cli_fail(prog, NULL);
    }
    if (o.tta < 0)
        o.tta = tc.tta;
    int failures = 0;
    if (o.csv) {
        FILE *f = NULL;
        char *tmp = NULL;
        rc = vit_atomic_open(o.csv, &f, &tmp);
        if (rc == VIT_OK) {
            failures = classify(m, &st, &o, files, n, f, 1);
            rc = vit_atomic_close(f, tmp, o.csv,
                                  ferror(f) ? vit_set_error(VIT_EIO, "%s: write error", o.csv)
                                            : VIT_OK);
        }
        if (rc)
            cli_fail(prog, NULL);
        else
            printf("%s: %d of %d image%s classified into %s\n", prog, n - failures, n,
                   n == 1 ? "" : "s", o.csv);
    } else {
        failures = classify(m, &st, &o, files, n, stdout, 0);
    }
    if (ignored > 0)
        fprintf(stderr, "%s: %d file%s in the folders not .png, .jpg or .jpeg, skipped\n", prog,
                ignored, ignored == 1 ? "" : "s");
    if (failures > 0 && n > 1)
        fprintf(stderr, "%s: %d of %d image%s could not be classified\n", prog, failures, n,
                n == 1 ? "" : "s");
    cli_paths_free(files, n);
    vit_run_state_free(&st);
    vit_model_free(m);
    return rc || failures ? 1 : 0;
}

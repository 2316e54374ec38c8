/*
 * vit_train - train a Vision Transformer on the digits, IDX files or a PNG
 * folder.  All the work is in the library (vit/train.h); this file only
 * turns flags into a config and options.
 */
/* realpath (XSI) */
#define _XOPEN_SOURCE 700
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "vit/vit.h"
#include "vit_train.h"

/* The path the tool was started by (argv[0]), for the commands it prints. */
static const char *self = "vit_train";

static void usage(FILE *f)
{
    fprintf(f,
        "usage: vit_train [--data digits|DIR] [--config FILE] [--out DIR] [options]\n"
        "\n"
        "Trains a Vision Transformer and scores it on the held-out test set after\n"
        "every epoch.  Writes OUT/metrics.csv and OUT/last.ckpt.  Flags take their\n"
        "value as --key VALUE or --key=VALUE; '-' and '_' are alike in names.\n"
        "\n"
        "  --data SPEC          digits (the shipped 8x8 digits: first 1437 train, last\n"
        "                       360 test), a folder of MNIST IDX files (gray or\n"
        "                       colour), of CIFAR-10/100 binary batches, or of class\n"
        "                       subfolders of PNGs or JPEGs, in train/ and test/ or\n"
        "                       split by --test-split\n"
        "  --config FILE        model and recipe (key = value lines); flags override it\n"
        "  --arch NAME          the architecture (config key arch; default vit): its own\n"
        "                       keys are flags too once it is chosen (docs/extending.md)\n"
        "  --out DIR            output folder (default runs/NAME of the data, or with\n"
        "                       --resume the checkpoint's own folder); a folder that\n"
        "                       already holds a run is refused\n"
        "  --force              start over in a folder that already holds a run\n"
        "  --resume CKPT        continue a run from its checkpoint (taken at an epoch's\n"
        "                       end or inside one), or from a run's folder (its\n"
        "                       last.ckpt).  The run keeps its recipe:\n");
    fprintf(f, "                       %s\n", VIT_RESUME_MAY_CHANGE);
    fprintf(f,
        "                       (--epochs: the cosine schedule is recomputed for the\n"
        "                       new length), and so may --threads; each change is\n"
        "                       printed, any other key that differs from the\n"
        "                       checkpoint's is refused.  A finished run says so and\n"
        "                       trains nothing.  Without --data, the data the run\n"
        "                       trained on (the checkpoint records it); other data\n"
        "                       is refused\n"
        "");
    fputs(
        "  --init-from FILE     a new run from trained weights: one of our checkpoints\n"
        "                       (or a run's folder: its best.ckpt, else last.ckpt)\n"
        "                       or exports, or a timm VisionTransformer safetensors\n"
        "                       file; its architecture, adapted to the data (position\n"
        "                       embeddings resampled, 3 <-> 1 channels, a new head).\n"
        "                       docs/finetune.md\n"
        "  --init-arch NAME     a timm file's architecture (vit_tiny_patch16_224, ...):\n"
        "                       its heads, which the shapes do not tell\n"
        "  --init-heads N       a timm file's heads, for one not in the table\n"
        "  --init-norm MODE     auto (ImageNet mean/std folded into a timm file's patch\n"
        "                       embedding), none or imagenet\n"
        "  --keep-head          keep the file's head (the classes must agree)\n"
        "  --layer-decay X      block l steps at lr * X^(depth - l) (default 1: off)\n"
        "  --freeze N           the embeddings and the first N blocks stay as loaded\n"
        "  --linear-probe       only the head trains\n", f);
    fprintf(f,
        "  --other-data         resume on data other than the run's: the schedule is\n"
        "                       laid out anew over the steps left\n"
        "  --val N              hold out the last N training images for validation\n"
        "  --val-split F        hold out a fraction F of each class of the training\n"
        "                       images for validation (seeded, stratified).  With a\n"
        "                       validation set the epochs score it (val loss, val\n"
        "                       acc), and the test set is scored once, at the end\n"
        "  --test-split F       a folder of class folders without train/ and test/:\n"
        "                       the fraction of each class held out for testing\n"
        "                       (default 0.2; F in (0, 1), with --val-split below 1)\n"
        "  --split-seed N       the seed that picks the held-out images (default 0);\n"
        "                       the split is recorded and a resume keeps it\n");
    fprintf(f,
        "  --image-size HxW     resize every image to H x W on load (N: N x N), with\n"
        "                       the filter of vit_predict --fit; --image-height H\n"
        "                       --image-width W say the same\n"
        "  --channels 1|3       convert every image to gray (luma) or RGB on load.\n"
        "                       Without these a folder of mixed images gets the\n"
        "                       median size (longest side at most 64, sides multiples\n"
        "                       of 8) and RGB if any image is colour, said in one\n"
        "                       line; PNG alpha is composited over white.  The\n"
        "                       transform is recorded: vit_eval, vit_predict,\n"
        "                       vit_attn and vit_export apply it too\n"
        "  --skip-bad           skip image files that cannot be read (counted, the\n"
        "                       first three named) instead of stopping\n"
        "  --class-names FILE   name the classes (one name a line, as many as the\n"
        "                       classes), e.g. for IDX data; stored in the checkpoint\n"
        "  --ckpt-every N       epochs between checkpoints (default 1)\n"
        "  --stop-after N       stop after N epochs, as if interrupted (resume later)\n"
        "  --save-best [loss]   keep OUT/best.ckpt, the model of the epoch with the best\n"
        "                       validation accuracy (or loss) so far, beside\n"
        "                       last.ckpt; the run ends with the test set's figure\n"
        "                       on that model, chosen on validation alone (the test\n"
        "                       set is scored once, then).  Needs --val or --val-split\n"
        "  --early-stop N       end the run after N epochs without a better validation\n"
        "                       score (accuracy, or --save-best loss's loss); last.ckpt\n"
        "                       resumes it.  Needs --val or --val-split\n"
        "  --budget DURATION    end within DURATION (20m, 90s, 1h30m), loading and\n"
        "                       scoring included: the first steps and the final\n"
        "                       scoring are timed, the most epochs that fit planned\n"
        "                       (at most --epochs, or the recipe's) and said in one\n"
        "                       line, then held: a run that falls behind is\n"
        "                       shortened, one ahead lengthened in its first half,\n"
        "                       its schedule laid out anew; the final\n"
        "                       test-time augmentation is skipped (said) when it no\n"
        "                       longer fits\n"
        "  --threads N          threads: one batch slice each, and the library's\n"
        "                       loops (default: every online CPU); results are\n"
        "                       bitwise repeatable for a given N\n"
        "  --seeds LIST         train once per seed (LIST: 1,2,3 or 1-5, at most 64),\n"
        "                       each into OUT/seed-N, then print the mean, standard\n"
        "                       deviation, min and max of the test (and --val)\n"
        "                       accuracies and write them to OUT/seeds.csv\n"
        "  --quiet              print only the final result\n"
        "  --check-replicas     under mpirun: fail unless all ranks hold identical\n"
        "                       parameters after every epoch\n"
        "  --help, --version\n"
        "\n");
    fprintf(f,
        "On a terminal a progress bar fits its width; to a file or pipe, a plain\n"
        "progress line every 30 s (VIT_PROGRESS_SECONDS sets the interval) and one\n"
        "line per epoch, with the validation accuracy under --val.\n"
        "\n"
        "Images larger than the config's (or that its patch does not divide), with no\n"
        "--patch given on the line or in the --config file, get the patch with the\n"
        "finest grid of at most 8x8 patches that divides them, said in one line.  The\n"
        "recipe keys not set on the line or in the --config file (epochs, batch,\n"
        "warmup, shift, flip, stem, colour jitter on colour images) follow the\n"
        "data's size and images (docs/cli.md, \"Recipe\"); those that differ from the\n"
        "defaults are said in one line (the digits keep the defaults).  A model line\n"
        "(parameters, tokens, speed, ETA) follows the first steps.\n"
        "\n"
        "Ctrl-C (SIGINT) or SIGTERM finishes the current step, writes a checkpoint of\n"
        "it (inside an epoch too), prints the command that resumes it and exits 130\n"
        "(SIGTERM: 143); a second Ctrl-C quits at once, keeping the last complete\n"
        "checkpoint.  A long epoch is also checkpointed every --ckpt-minutes.\n"
        "\n"
        "Model and recipe (any config key):\n");
    cli_print_config_keys(f);
}

/* The options besides the config keys (see cli_normalize). */
static const cli_flag flags[] = {
    {"--data", 1}, {"--config", 1}, {"--out", 1}, {"--resume", 1}, {"--val", 1},
    {"--ckpt-every", 1}, {"--stop-after", 1}, {"--threads", 1}, {"--quiet", 0},
    {"--check-replicas", 0}, {"--force", 0}, {"--other-data", 0}, {"--seeds", 1}, {"--budget", 1},
    {"--val-split", 1}, {"--test-split", 1}, {"--split-seed", 1}, {"--help", 0}, {"--version", 0},
    {"--save-best", 0}, {"--early-stop", 1},
    {"--image-size", 1}, {"--skip-bad", 0}, {"--class-names", 1},
    {"--init-from", 1}, {"--init-arch", 1}, {"--init-heads", 1}, {"--init-norm", 1},
    {"--keep-head", 0}, {"--layer-decay", 1}, {"--freeze", 1}, {"--linear-probe", 0},
    {NULL, 0},
};

static int run(int argc, char **argv);

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* When the current run began (the program's start, then each --seeds
 * run's): --budget counts from here, data loading included. */
static double run_start;

/* The first SIGINT or SIGTERM asks the training loop to checkpoint and
 * stop after the current step; a second SIGINT quits at once (a checkpoint
 * being written is a temporary file that is never renamed; the next run
 * removes it). */
static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    if (stop_signal && sig == SIGINT)
        _exit(130);
    stop_signal = sig;
}

static void catch_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* Folder of a checkpoint path ("." when it has none). */
static void folder_of(const char *path, char *out, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, cap, ".");
    else
        snprintf(out, cap, "%.*s", slash == path ? 1 : (int)(slash - path), path);
}

/* --resume's checkpoint: the file given, or a run folder's last.ckpt
 * (NULL after saying why).  One buffer: both passes over the flags
 * resolve the same argument. */
static const char *resume_path(const char *arg)
{
    static char path[PATH_MAX + 16];
    return cli_run_checkpoint(prog, "--resume", arg, 1, path, sizeof path);
}

/* Under mpirun every rank runs the same command; rank 0 alone speaks. */
int main(int argc, char **argv)
{
    cli_ignore_file_size_signal();
    if (argc > 0 && argv[0] && *argv[0])
        self = argv[0];
    run_start = now_seconds();
    if (vit_dist_init(&argc, &argv)) {
        fprintf(stderr, "%s: %s\n", prog, vit_last_error());
        return 1;
    }
    cli_ignore_broken_pipe_under_mpi();
    int rc = run(argc, argv);
    vit_dist_finalize();
    return rc;
}

/* The command that continues the run in out, as the tool was started
 * (argv[0]) and each word quoted where a shell needs it. */
static void resume_command(char *cmd, size_t cap, const char *launcher, const char *data,
                           const char *out, const char *again)
{
    char w[3][4200], ckpt[4200];
    snprintf(ckpt, sizeof ckpt, "%s/last.ckpt", out);
    snprintf(cmd, cap, "%s%s --data %s --resume %s%s", launcher, cli_shell_word(self, w[0], sizeof w[0]),
             cli_shell_word(data, w[1], sizeof w[1]), cli_shell_word(ckpt, w[2], sizeof w[2]), again);
}

/* After a divergence: where the last good state is, and what to try. */
static void say_diverged(const vit_train_config *tc, const char *out)
{
    char ckpt[4200];
    snprintf(ckpt, sizeof ckpt, "%s/last.ckpt", out);
    int kept = access(ckpt, F_OK) == 0;
    if (kept)
        fprintf(stderr, "%s: the last good checkpoint is kept: %s\n", prog, ckpt);
    else
        fprintf(stderr, "%s: it diverged before its first checkpoint; nothing was kept\n", prog);
    fprintf(stderr, "%s: the learning rate %g is likely too high: start over with a lower one, "
            "e.g. --lr %g%s\n", prog, tc->lr, tc->lr / 10, kept ? " --force" : "");
}

/* One run of vit_train_run and what it prints; the exit status.  res, if
 * not NULL, gets the result's figures (no confusion matrix). */
int train_once(const vit_config *cfg, const vit_train_config *tc, const vit_dataset *train,
               const vit_dataset *test,
               const vit_train_opts *op, const shown *look, const char *data, int threads,
               vit_train_result *keep)
{
    vit_train_opts o = *op;
    const char *out = o.out_dir;
    int speak = vit_dist_rank() == 0;
    cli_progress bar;
    cli_progress_init(&bar, look->progress, look->every, out, o.val_count > 0,
                      o.val_count > 0 ? o.val_count : test->count);
    o.on_event = cli_progress_event;
    o.user = &bar;
    if (o.budget_seconds > 0) {
        /* Spent loading, and kept for what follows the run (the last
         * lines, freeing, the process's exit): 1% of it, 0.25 .. 2 s. */
        double after = 0.01 * o.budget_seconds;
        after = after < 0.25 ? 0.25 : after > 2 ? 2 : after;
        bar.budget_before = now_seconds() - run_start;
        bar.budget_after = after;
        o.budget_seconds -= bar.budget_before + after;
        if (o.budget_seconds < 0.1) {
            if (speak)
                fprintf(stderr, "%s: --budget: spent before training began (loading the data)\n",
                        prog);
            return 1;
        }
    }
    vit_train_result res;
    int rc = vit_train_run(cfg, tc, train, test, &o, &res);
    run_start = now_seconds();
    if (rc) {
        if (!speak)
            return 1;
        fprintf(stderr, "%s: %s%s\n", prog, vit_last_error(),
                rc == VIT_EDATA ? "; pass --other-data to continue it on this data" : "");
        if (rc == VIT_ENUM)
            say_diverged(tc, out);
        return 1;
    }
    if (keep) {
        *keep = res;
        keep->confusion = NULL;
    }
    if (!speak) {
        vit_train_result_free(&res);
        return res.interrupted ? 128 + (stop_signal ? stop_signal : SIGTERM) : 0;
    }
    if (res.already_complete) {
        printf("%s: %s is already complete (%d of %d epochs); nothing to train (a larger "
               "--epochs extends it)\n", prog, o.resume, res.epochs_done, res.epochs_done);
        /* The figure it ended with, as final.csv keeps it. */
        double rep;
        int rep_tta, at;
        if (cli_reported_accuracy(o.resume, -1, &rep, &rep_tta, &at))
            printf("its test accuracy: %.4f (%s%s, the model of epoch %d%s; final.csv)\n", rep,
                   rep_tta != VIT_TTA_NONE ? "tta " : "one pass",
                   rep_tta != VIT_TTA_NONE ? vit_tta_name(rep_tta) : "", at,
                   at < res.epochs_done ? ", best.ckpt" : "");
        return 0;
    }
    /* What resumes the run: the same data, threads and validation set. */
    char again[192] = "", launcher[64] = "";
    if (threads > 0)
        snprintf(again, sizeof again, " --threads %d", threads);
    if (o.val_count > 0 && o.data_split.val == 0) /* a split is recorded */
        snprintf(again + strlen(again), sizeof again - strlen(again), " --val %d", o.val_count);
    if (o.save_best != VIT_BEST_NONE)
        snprintf(again + strlen(again), sizeof again - strlen(again), " --save-best%s",
                 o.save_best == VIT_BEST_LOSS ? " loss" : "");
    if (o.early_stop > 0)
        snprintf(again + strlen(again), sizeof again - strlen(again), " --early-stop %d",
                 o.early_stop);
    if (vit_dist_size() > 1)
        snprintf(launcher, sizeof launcher, "mpirun -np %d ", vit_dist_size());
    char resume[4500];
    resume_command(resume, sizeof resume, launcher, data, out, again);
    if (res.interrupted) {
        /* Under mpirun the stop may have come to another rank: this one
         * then stops as if terminated. */
        cli_progress_fresh_line(&bar, stop_signal == SIGINT);
        char what[4400];
        snprintf(what, sizeof what, "%s: %s at epoch %d, step %llu of %ld; checkpoint %s/last.ckpt",
                 prog, stop_signal == SIGINT ? "interrupted" : stop_signal ? "terminated"
                                                             : "stopped (another rank was signalled)",
                 res.epochs_done + 1, res.epoch_step, res.steps_per_epoch, out);
        cli_print_fitted(stderr, what);
        char lead[64];
        snprintf(lead, sizeof lead, "%s: continue with:", prog);
        cli_print_item(stderr, lead, resume);
        return 128 + (stop_signal ? stop_signal : SIGTERM);
    }
    if (look->progress)
        cli_print_confusion(res.confusion, res.confusion_classes,
                            train->classes == res.confusion_classes ? train->class_names : NULL);
    /* Labelled: what the final figure is (averaged weights, test-time
     * augmentation), and then the one-pass figure the epoch lines show. */
    char how[96] = "", plain[32] = "", vplain[32] = "";
    if (res.ema > 0)
        snprintf(how, sizeof how, "ema %g", res.ema);
    if (res.tta != VIT_TTA_NONE) {
        snprintf(how + strlen(how), sizeof how - strlen(how), "%stta %s", *how ? ", " : "",
                 vit_tta_name(res.tta));
        snprintf(plain, sizeof plain, "; one pass %.4f", res.test_accuracy_plain);
        snprintf(vplain, sizeof vplain, "; one pass %.4f", res.val_accuracy_plain);
    }
    /* Which model the figures score: the last, or best.ckpt. */
    char model[96] = "", kept[4200];
    if (res.best_epoch > 0)
        snprintf(model, sizeof model, "best.ckpt, epoch %d of %d", res.best_epoch,
                 res.epochs_done);
    snprintf(kept, sizeof kept, "%s/%s", out, res.best_epoch > 0 ? "best.ckpt" : "last.ckpt");
    if (res.early_stopped)
        printf("early stop: no better validation %s in the %d epochs after epoch %d (%s resumes "
               "the run)\n", o.save_best == VIT_BEST_LOSS ? "loss" : "accuracy", o.early_stop,
               (int)(res.best_epoch > 0 ? res.best_epoch : res.epochs_done - o.early_stop),
               "last.ckpt");
    if (res.out_of_budget)
        printf("budget: it ran out inside epoch %d, at step %llu of %ld, learning rate %.3g "
               "(min_lr %g); the figures score that step's model, and %s/last.ckpt resumes "
               "from it\n", res.epochs_done + 1, res.epoch_step, res.steps_per_epoch,
               bar.last_lr, tc->min_lr, out);
    if (o.save_best != VIT_BEST_NONE && res.best_epoch == 0)
        printf("save-best: no epoch ended, so there is no best.ckpt; the figures score the last "
               "model\n");
    if (res.tta_skipped)
        printf("tta %s skipped: the budget has no time left for it; the figures are one pass\n",
               vit_tta_name(res.tta_skipped));
    if (res.val_accuracy >= 0) {
        char vhow[160];
        snprintf(vhow, sizeof vhow, "%s%s%s%s%s", model, *model && res.tta != VIT_TTA_NONE ? "; " : "",
                 res.tta != VIT_TTA_NONE ? "tta " : "",
                 res.tta != VIT_TTA_NONE ? vit_tta_name(res.tta) : "", res.tta != VIT_TTA_NONE ? vplain : "");
        if (*vhow)
            printf("validation accuracy %.4f (%s)\n", res.val_accuracy, vhow);
        else
            printf("validation accuracy %.4f\n", res.val_accuracy);
    }
    char acc[48], labels[320] = "", timing[96];
    snprintf(acc, sizeof acc, "test accuracy %.4f", res.test_accuracy);
    /* "best.ckpt, epoch E of N; ema, tta; one pass X; chosen on validation" */
    const char *part[4] = {model, how, *plain ? plain + 2 : "",
                           res.best_epoch > 0 ? "chosen on validation" : ""};
    for (int k = 0; k < 4; k++)
        if (*part[k])
            snprintf(labels + strlen(labels), sizeof labels - strlen(labels), "%s%s",
                     *labels ? "; " : "", part[k]);
    /* The whole run's time and speed, a resumed one's earlier part included. */
    snprintf(timing, sizeof timing, "%d epochs, %.1f s, %.0f images/s", res.epochs_done,
             res.run_seconds, res.run_images_per_second);
    print_result(acc, labels, timing, kept);
    print_tta_auto(&res, tc);
    if (o.stop_after_epochs > 0 && res.epochs_done < res.epochs) {
        char what[96];
        snprintf(what, sizeof what, "stopped after epoch %d of %d (--stop-after); continue with:",
                 res.epochs_done, res.epochs);
        cli_print_item(stdout, what, resume);
    }
    vit_train_result_free(&res);
    return 0;
}

/* The flags after --config (the second pass, so that they override the
 * file whatever their order): options into *o, *look, *data, out[out_cap],
 * *threads and the seeds; config keys into *cfg (the network's) and *tc
 * (the recipe's).  -1 to go on, else the exit status (the message is out). */
static int parse_flags(int argc, char **argv, vit_config *cfg, vit_train_config *tc,
                       vit_train_opts *o, shown *look,
                       const char **data, char *out, size_t out_cap, int *threads,
                       unsigned long long *seeds, int *nseeds, split_flags *sf)
{
    o->budget_seconds = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--quiet") == 0) {
            look->progress = 0;
            continue;
        }
        if (strcmp(a, "--check-replicas") == 0) {
            o->check_replicas = 1;
            continue;
        }
        if (strcmp(a, "--other-data") == 0) {
            o->other_data = 1;
            continue;
        }
        if (strcmp(a, "--force") == 0) {
            o->overwrite = 1;
            continue;
        }
        if (strcmp(a, "--keep-head") == 0 || strcmp(a, "--linear-probe") == 0) {
            *(a[2] == 'k' ? &o->keep_head : &o->linear_probe) = 1;
            continue;
        }
        if (strcmp(a, "--save-best") == 0) { /* an optional measure follows */
            o->save_best = VIT_BEST_ACCURACY;
            if (v && (strcmp(v, "loss") == 0 || strcmp(v, "accuracy") == 0 || strcmp(v, "acc") == 0)) {
                o->save_best = v[0] == 'l' ? VIT_BEST_LOSS : VIT_BEST_ACCURACY;
                i++;
            }
            continue;
        }
        if (strcmp(a, "--skip-bad") == 0) {
            sf->skip_bad = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", prog, a);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "%s: %s needs a value\n", prog, a);
            return 2;
        }
        i++;
        int taken = split_flag(a, v, sf);
        if (taken < 0)
            taken = finetune_flag(a, v, o); /* train_finetune.c */
        if (taken >= 0) {
            if (taken)
                return taken;
            continue;
        }
        if (strcmp(a, "--config") == 0)
            continue;
        else if (strcmp(a, "--data") == 0)
            *data = v;
        else if (strcmp(a, "--out") == 0) {
            if (snprintf(out, out_cap, "%s", v) >= (int)out_cap) {
                fprintf(stderr, "%s: --out: path longer than %d bytes\n", prog, (int)out_cap - 1);
                return 2;
            }
        } else if (strcmp(a, "--resume") == 0) {
            if (!(o->resume = resume_path(v)))
                return 2;
        }
        else if (strcmp(a, "--val") == 0) {
            if (!cli_int(prog, a, v, 0, 1 << 30, &o->val_count))
                return 2;
        } else if (strcmp(a, "--ckpt-every") == 0) {
            if (!cli_int(prog, a, v, 1, 1 << 30, &o->ckpt_every))
                return 2;
        } else if (strcmp(a, "--early-stop") == 0) {
            if (!cli_int(prog, a, v, 1, 1 << 30, &o->early_stop))
                return 2;
        } else if (strcmp(a, "--stop-after") == 0) {
            if (!cli_int(prog, a, v, 1, 1 << 30, &o->stop_after_epochs))
                return 2;
        } else if (strcmp(a, "--threads") == 0) {
            if (!cli_int(prog, a, v, 1, 256, threads))
                return 2;
        } else if (strcmp(a, "--seeds") == 0) {
            if (!parse_seeds(v, seeds, nseeds))
                return 2;
        } else if (strcmp(a, "--budget") == 0) {
            if (!cli_duration(prog, a, v, &o->budget_seconds))
                return 2;
        } else if (strcmp(a, "--seed") == 0 && seed_flag_clash(argc, argv)) {
            return 2;
        } else if (!cli_config_flag(prog, cfg, tc, a, v))
            return 2;
    }
    return -1;
}

/* The output folder before anything is loaded: a run there is never
 * replaced without --force (nor a --seeds summary), and --seeds starts new
 * runs only.  -1 to go on, else the exit status (the message is out when
 * say). */
static int check_out_folder(const vit_train_opts *o, const char *out,
                            const unsigned long long *seeds, int nseeds, int say)
{
    say = say && vit_dist_rank() == 0;
    if (nseeds > 0 && o->resume) {
        if (say)
            fprintf(stderr, "%s: --seeds starts new runs; resume each seed's run on its own "
                "(--resume OUT/seed-N/last.ckpt)\n", prog);
        return 2;
    }
    char summary[4200];
    snprintf(summary, sizeof summary, "%s/seeds.csv", out);
    if (nseeds > 0 && !o->overwrite && access(summary, F_OK) == 0) {
        if (say)
            fprintf(stderr, "%s: %s already holds the summary of earlier seeds; pass --force to "
                    "start over, or another --out\n", prog, summary);
        return 1;
    }
    for (int k = 0; k < nseeds; k++) {
        char dir[4200];
        seed_dir(out, seeds[k], dir, sizeof dir);
        if (!o->overwrite && vit_run_dir_taken(dir, NULL)) {
            if (say)
                fprintf(stderr, "%s: %s already holds a run (last.ckpt); pass --force to start "
                        "the seeds over, or another --out\n", prog, dir);
            return 1;
        }
    }
    if (nseeds == 0 && !o->overwrite && vit_run_dir_taken(out, o->resume)) {
        if (say)
            fprintf(stderr, "%s: %s already holds a run (last.ckpt); continue it with --resume "
                    "%s/last.ckpt, or pass --force to start over\n", prog, out, out);
        return 1;
    }
    return -1;
}

/* VIT_PROGRESS_SECONDS: seconds between the plain progress lines written
 * to a file or pipe (tests use a fraction of a second) into *every_out, left
 * as it is when unset; 0 (said) when it is not a number of seconds. */
static int progress_interval(double *every_out)
{
    const char *every = getenv("VIT_PROGRESS_SECONDS");
    if (every && *every) {
        char *end;
        *every_out = strtod(every, &end);
        if (*end || !(*every_out > 0 && *every_out < 1e9)) {
            if (vit_dist_rank() == 0)
                fprintf(stderr, "%s: VIT_PROGRESS_SECONDS: expected a number of seconds > 0, "
                        "got '%s'\n", prog, every);
            return 0;
        }
    }
    return 1;
}

static int run(int argc, char **argv)
{
    vit_config cfg;
    vit_train_config tc;
    vit_config_default(&cfg);
    vit_train_config_default(&tc);
    vit_train_opts o = {.ckpt_every = 1};
    shown look = {.progress = isatty(STDOUT_FILENO) ? 2 : 1};
    const char *data = NULL, *config = NULL, *arch = NULL;
    char out[4096] = "";
    int threads = 0, nseeds = 0, rc;
    unsigned long long seeds[MAX_SEEDS];
    if (!cli_normalize(prog, &argc, &argv, flags, 1))
        return 2;

    /* First pass: --config, so that flags given later override the file
     * whatever their order on the line. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("vit_train %s (%s%s)\n", vit_version(), VIT_REAL_NAME,
                   vit_dist_available() ? ", MPI" : "");
            return 0;
        }
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            config = argv[++i];
        else if (strcmp(argv[i], "--arch") == 0 && i + 1 < argc)
            arch = argv[++i];
        else if (strcmp(argv[i], "--resume") == 0 && i + 1 < argc) {
            if (!(o.resume = resume_path(argv[++i])))
                return 2;
        }
    }
    /* A resumed run starts from its own recipe; flags then say what differs. */
    if (o.resume && vit_run_config(o.resume, &cfg, &tc))
        return cli_fail(prog, NULL);
    /* A patch nobody gave (vit_config_given) is fitted to the data's
     * images below. */
    const int patch_default = cfg.patch;
    const int stride_default = cfg.patch_stride, pad_default = cfg.patch_pad;
    if (config && vit_config_load(&cfg, &tc, config))
        return cli_fail(prog, NULL);
    /* --arch before the other flags, which may be its keys. */
    if (arch && !cli_config_flag(prog, &cfg, &tc, "--arch", arch))
        return 2;

    split_flags sf = {{0, 0, 0}, 0, {0, 0, 0}, 0, NULL, NULL};
    if ((rc = parse_flags(argc, argv, &cfg, &tc, &o, &look, &data, out, sizeof out, &threads, seeds,
                          &nseeds, &sf)) >= 0)
        return rc;
    if ((rc = finetune_check(&o, argc, argv)) >= 0)
        return rc;
    if (threads > 0)
        vit_set_threads(threads);
    /* A resume trains on its run's data (and split) unless --data says
     * otherwise. */
    vit_run_data rec;
    vit_data_opts unused;
    int known = 0;
    if (o.resume && vit_run_data_read(o.resume, &rec, &known))
        return cli_fail(prog, NULL);
    data = o.resume ? cli_data_of_run(&rec, known, data, &unused) : data ? data : "digits";
    /* A resume holds out the validation images the run did, unless --val
     * says otherwise (which the library refuses, naming both); a recorded
     * --val-split gives them itself (train_split.c). */
    int val_given = 0;
    for (int i = 1; i < argc; i++)
        val_given |= strcmp(argv[i], "--val") == 0;
    if (o.resume && known && rec.val_count > 0 && rec.split.val == 0 && !o.other_data &&
        !val_given)
        o.val_count = rec.val_count;
    /* Recorded as an absolute path, so that tools run from elsewhere find
     * it again ("digits" and paths that do not resolve stay as given). */
    char data_abs[PATH_MAX];
    o.data_spec = strcmp(data, "digits") != 0 && realpath(data, data_abs) ? data_abs : data;
    if (!*out && o.resume) {
        folder_of(o.resume, out, sizeof out);
    } else if (!*out && !cli_run_dir(data, out, sizeof out)) {
        fprintf(stderr, "%s: --data: path too long to name the run; give --out\n", prog);
        return 2;
    }
    o.out_dir = out;
    if (!progress_interval(&look.every))
        return 2;
    o.stop = &stop_signal;
    catch_stop_signals();

    /* A folder that will be refused: the options' own errors are checked
     * first (below, with the data), and nothing else is said. */
    if (check_out_folder(&o, out, seeds, nseeds, 0) >= 0)
        look.progress = 0;
    int speak = vit_dist_rank() == 0;
    vit_dataset train = {0}, test = {0};
    int ignored = 0;
    /* The weights' config, read once: their size (finetune_fit) and the
     * model the recipe costs (finetune_recipe). */
    vit_config wcfg;
    const vit_config *ws = o.init_from && finetune_weights_config(o.init_from, &wcfg) ? &wcfg
                                                                                      : NULL;
    finetune_fit(ws, &sf);
    if ((rc = load_data(data, &sf, o.resume && known ? &rec : NULL, o.resume, &o, &train, &test,
                        speak, &ignored)))
        return rc;
    if (o.val_count >= train.count) {
        if (speak)
            fprintf(stderr, "%s: --val %d leaves no training images (of %d)\n", prog, o.val_count,
                    train.count);
        vit_dataset_free(&train);
        vit_dataset_free(&test);
        return 2;
    }
    if (!speak)
        look.progress = 0;
    /* Open MPI gives rank 0 a pseudo-terminal even when mpirun's output
     * goes to a file, so isatty says nothing there: plain lines. */
    if (look.progress == 2 && vit_dist_size() > 1)
        look.progress = 1;
    if (vit_dist_size() > 1)
        cli_no_terminal();
    if (look.progress) {
        char val[32] = "";
        if (o.val_count)
            snprintf(val, sizeof val, ", %d val", o.val_count);
        char line[200], other[80] = "";
        if (ignored > 0)
            snprintf(other, sizeof other, " (%d other file%s ignored: not .png, .jpg or .jpeg)",
                     ignored, ignored == 1 ? "" : "s");
        snprintf(line, sizeof line, "data: %d train%s, %d test images of %dx%dx%d, %d classes%s",
                 train.count - o.val_count, val, test.count, train.height, train.width,
                 train.channels, train.classes, other);
        cli_print_fitted(stdout, line);
        print_class_counts(&train);
        if (o.data_split.val == 0)
            warn_val_tail(&train, o.val_count);
    }
    if (look.progress && vit_dist_size() > 1)
        printf("data-parallel over %d ranks, global batch %d\n", vit_dist_size(), tc.batch);
    const vit_config user = cfg; /* what the file and the flags gave */
    const vit_train_config utc = tc;
    vit_recipe picked = {.patch = cfg.patch};
    if (o.init_from) { /* the weights' architecture (the trainer takes it); the recipe's lr */
        if (finetune_recipe(&cfg, &tc, &utc, &o, ws, &train, o.val_count, look.progress)) {
            vit_dataset_free(&train);
            vit_dataset_free(&test);
            return 1;
        }
    } else if (!o.resume && (apply_recipe(&cfg, &tc, &user, &utc, &train, o.val_count, o.budget_seconds,
                                          look.progress, &picked, &o.warmup_fraction) != 0
                             || adapt_arch(&cfg, &train, o.val_count, look.progress) != 0)) {
        vit_dataset_free(&train);
        vit_dataset_free(&test);
        return 1;
    }
    if (!o.resume && !o.init_from && vit_config_arch(&cfg) == vit_arch_vit()) {
        if (!vit_config_given(&user, "patch"))
            fit_patch(&cfg, &picked, look.progress);
        settle_overlap(&cfg, &user, patch_default, stride_default, pad_default, &train);
    }
    /* precision bf16 or auto: what it comes to here, in one line (a
     * fallback from an explicit bf16 on stderr, whatever --quiet says). */
    if (tc.precision != VIT_PRECISION_FP32 && speak) {
        char why[200];
        int got = vit_precision_resolve(tc.precision, why, sizeof why);
        if (tc.precision == VIT_PRECISION_BF16 && got != VIT_PRECISION_BF16)
            fprintf(stderr, "%s: precision %s\n", prog, why);
        else if (look.progress)
            printf("precision %s\n", why);
    }

    /* The options' own errors come first (a patch that does not divide
     * the images, say), and then whether the folder is free. */
    vit_config probe = cfg;
    probe.image_height = train.height;
    probe.image_width = train.width;
    probe.channels = train.channels;
    probe.classes = train.classes > test.classes ? train.classes : test.classes;
    if (vit_config_check(&probe) != VIT_OK || vit_train_config_check(&tc, &probe) != VIT_OK)
        rc = cli_fail(prog, NULL);
    else if ((rc = check_out_folder(&o, out, seeds, nseeds, 1)) < 0)
        rc = nseeds > 0 ? train_seeds(&cfg, &tc, &train, &test, &o, &look, data, threads, seeds, nseeds)
                    : train_once(&cfg, &tc, &train, &test, &o, &look, data, threads, NULL);
    vit_dataset_free(&train);
    vit_dataset_free(&test);
    return rc;
}

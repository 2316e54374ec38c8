/*
 * vit_train - train a Vision Transformer on the digits, IDX files or a PNG
 * folder.  All the work is in the library (vit/train.h); this file only
 * turns flags into a config and options.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "vit/vit.h"

static const char *prog = "vit_train";

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
        "                       360 test), a folder of MNIST IDX files, or a folder\n"
        "                       with train/ and test/ class subfolders of PNGs\n"
        "  --config FILE        model and recipe (key = value lines); flags override it\n"
        "  --out DIR            output folder (default runs/NAME of the data, or with\n"
        "                       --resume the checkpoint's own folder); a folder that\n"
        "                       already holds a run is refused\n"
        "  --force              start over in a folder that already holds a run\n"
        "  --resume CKPT        continue a run from its checkpoint (taken at an epoch's\n"
        "                       end or inside one).  The run keeps its recipe: only\n"
        "                       --epochs (the run grows or shrinks, the cosine\n"
        "                       schedule recomputed for the new length),\n"
        "                       --ckpt-minutes and --threads may change, and each\n"
        "                       change is printed; any other key that differs from\n"
        "                       the checkpoint's is refused.  A finished run says\n"
        "                       so and trains nothing\n"
        "  --val N              hold out the last N training images for validation\n"
        "  --ckpt-every N       epochs between checkpoints (default 1)\n"
        "  --stop-after N       stop after N epochs, as if interrupted (resume later)\n"
        "  --threads N          threads: one batch slice each, and the library's\n"
        "                       loops (default: every online CPU); results are\n"
        "                       bitwise repeatable for a given N\n"
        "  --quiet              print only the final result\n"
        "  --check-replicas     under mpirun: fail unless all ranks hold identical\n"
        "                       parameters after every epoch\n"
        "  --help, --version\n"
        "\n"
        "On a terminal a progress bar fits its width; to a file or pipe, a plain\n"
        "progress line every 30 s (VIT_PROGRESS_SECONDS sets the interval) and one\n"
        "line per epoch, with the validation accuracy under --val.\n"
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
    {"--check-replicas", 0}, {"--force", 0}, {"--help", 0}, {"--version", 0}, {NULL, 0},
};

static int run(int argc, char **argv);

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

/* Under mpirun every rank runs the same command; rank 0 alone speaks. */
int main(int argc, char **argv)
{
    cli_ignore_file_size_signal();
    if (vit_dist_init(&argc, &argv)) {
        fprintf(stderr, "%s: %s\n", prog, vit_last_error());
        return 1;
    }
    int rc = run(argc, argv);
    vit_dist_finalize();
    return rc;
}

static int run(int argc, char **argv)
{
    vit_config cfg;
    vit_config_default(&cfg);
    vit_train_opts o = {.ckpt_every = 1, .progress = isatty(STDOUT_FILENO) ? 2 : 1};
    const char *data = "digits", *config = NULL;
    char out[4096] = "";
    int threads = 0;
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
        else if (strcmp(argv[i], "--resume") == 0 && i + 1 < argc)
            o.resume = argv[++i];
    }
    /* A resumed run starts from its own recipe; flags then say what differs. */
    if (o.resume && vit_run_config(o.resume, &cfg))
        return cli_fail(prog, NULL);
    if (config && vit_config_load(&cfg, config))
        return cli_fail(prog, NULL);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--quiet") == 0) {
            o.progress = 0;
            continue;
        }
        if (strcmp(a, "--check-replicas") == 0) {
            o.check_replicas = 1;
            continue;
        }
        if (strcmp(a, "--force") == 0) {
            o.overwrite = 1;
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
        if (strcmp(a, "--config") == 0)
            continue;
        else if (strcmp(a, "--data") == 0)
            data = v;
        else if (strcmp(a, "--out") == 0) {
            if (snprintf(out, sizeof out, "%s", v) >= (int)sizeof out) {
                fprintf(stderr, "%s: --out: path longer than %d bytes\n", prog, (int)sizeof out - 1);
                return 2;
            }
        } else if (strcmp(a, "--resume") == 0)
            o.resume = v;
        else if (strcmp(a, "--val") == 0) {
            if (!cli_int(prog, a, v, 0, 1 << 30, &o.val_count))
                return 2;
        } else if (strcmp(a, "--ckpt-every") == 0) {
            if (!cli_int(prog, a, v, 1, 1 << 30, &o.ckpt_every))
                return 2;
        } else if (strcmp(a, "--stop-after") == 0) {
            if (!cli_int(prog, a, v, 1, 1 << 30, &o.stop_after_epochs))
                return 2;
        } else if (strcmp(a, "--threads") == 0) {
            if (!cli_int(prog, a, v, 1, 256, &threads))
                return 2;
        } else if (!cli_config_flag(prog, &cfg, a, v))
            return 2;
    }
    if (threads > 0)
        vit_set_threads(threads);
    if (!*out && o.resume) {
        folder_of(o.resume, out, sizeof out);
    } else if (!*out && !cli_run_dir(data, out, sizeof out)) {
        fprintf(stderr, "%s: --data: path too long to name the run; give --out\n", prog);
        return 2;
    }
    o.out_dir = out;
    if (!o.overwrite && vit_run_dir_taken(out, o.resume)) {
        if (vit_dist_rank() == 0)
            fprintf(stderr, "%s: %s already holds a run (last.ckpt); continue it with --resume "
                    "%s/last.ckpt, or pass --force to start over\n", prog, out, out);
        return 1;
    }
    /* Seconds between the plain progress lines written to a file or pipe
     * (tests use a fraction of a second). */
    const char *every = getenv("VIT_PROGRESS_SECONDS");
    if (every && *every) {
        char *end;
        o.progress_seconds = strtod(every, &end);
        if (*end || !(o.progress_seconds > 0 && o.progress_seconds < 1e9)) {
            if (vit_dist_rank() == 0)
                fprintf(stderr, "%s: VIT_PROGRESS_SECONDS: expected a number of seconds > 0, "
                        "got '%s'\n", prog, every);
            return 2;
        }
    }
    o.stop = &stop_signal;
    catch_stop_signals();

    vit_dataset train = {0}, test = {0};
    if (vit_data_load(data, cli_digits_path(), &train, &test))
        return cli_fail(prog, NULL);
    int speak = vit_dist_rank() == 0;
    if (o.val_count >= train.count) {
        if (speak)
            fprintf(stderr, "%s: --val %d leaves no training images (of %d)\n", prog, o.val_count,
                    train.count);
        vit_dataset_free(&train);
        vit_dataset_free(&test);
        return 2;
    }
    if (!speak)
        o.progress = 0;
    /* Open MPI gives rank 0 a pseudo-terminal even when mpirun's output
     * goes to a file, so isatty says nothing there: plain lines. */
    if (o.progress == 2 && vit_dist_size() > 1)
        o.progress = 1;
    if (o.progress) {
        char val[32] = "";
        if (o.val_count)
            snprintf(val, sizeof val, ", %d val", o.val_count);
        printf("data: %d train%s, %d test images of %dx%dx%d, %d classes\n",
               train.count - o.val_count, val, test.count, train.height, train.width,
               train.channels, train.classes);
    }
    if (o.progress && vit_dist_size() > 1)
        printf("data-parallel over %d ranks, global batch %d\n", vit_dist_size(), cfg.batch);

    vit_train_result res;
    int rc = vit_train_run(&cfg, &train, &test, &o, &res);
    /* The class names outlive the images, for the confusion matrix. */
    vit_dataset names = {.classes = train.classes, .class_names = train.class_names};
    train.class_names = NULL;
    vit_dataset_free(&train);
    vit_dataset_free(&test);
    if (rc) {
        vit_dataset_free(&names);
        if (!speak)
            return 1;
        fprintf(stderr, "%s: %s\n", prog, vit_last_error());
        if (rc == VIT_ENUM)
            fprintf(stderr, "%s: the last good checkpoint is kept in %s/last.ckpt\n", prog, out);
        return 1;
    }
    if (!speak) {
        vit_train_result_free(&res);
        vit_dataset_free(&names);
        return res.interrupted ? 128 + stop_signal : 0;
    }
    if (res.already_complete) {
        printf("%s: %s is already complete (%d of %d epochs); nothing to train (a larger "
               "--epochs extends it)\n", prog, o.resume, res.epochs_done, res.epochs_done);
        vit_dataset_free(&names);
        return 0;
    }
    if (res.interrupted) {
        char again[128] = "";
        if (threads > 0)
            snprintf(again, sizeof again, " --threads %d", threads);
        if (o.val_count > 0)
            snprintf(again + strlen(again), sizeof again - strlen(again), " --val %d", o.val_count);
        fprintf(stderr, "%s: %s at epoch %d, step %llu of %ld; checkpoint %s/last.ckpt\n"
                "%s: continue with: %s --data %s --resume %s/last.ckpt%s\n", prog,
                stop_signal == SIGINT ? "interrupted" : "terminated", res.epochs_done + 1,
                res.epoch_step, res.steps_per_epoch, out, prog, prog, data, out, again);
        vit_dataset_free(&names);
        return 128 + stop_signal;
    }
    if (o.progress)
        cli_print_confusion(res.confusion, res.confusion_classes,
                            names.classes == res.confusion_classes ? names.class_names : NULL);
    vit_dataset_free(&names);
    /* Labelled: what the final figure is (averaged weights, test-time
     * augmentation), and then the one-pass figure the epoch lines show. */
    char how[96] = "", plain[32] = "", vplain[32] = "";
    if (res.ema > 0)
        snprintf(how, sizeof how, "ema %g", res.ema);
    if (res.tta != VIT_TTA_NONE) {
        snprintf(how + strlen(how), sizeof how - strlen(how), "%stta shift9", *how ? ", " : "");
        snprintf(plain, sizeof plain, "; one pass %.4f", res.test_accuracy_plain);
        snprintf(vplain, sizeof vplain, "; one pass %.4f", res.val_accuracy_plain);
    }
    if (*how)
        snprintf(how + strlen(how), sizeof how - strlen(how), "%s", "; ");
    if (res.val_accuracy >= 0) {
        if (res.tta != VIT_TTA_NONE)
            printf("validation accuracy %.4f (tta shift9%s)\n", res.val_accuracy, vplain);
        else
            printf("validation accuracy %.4f\n", res.val_accuracy);
    }
    printf("test accuracy %.4f (%s%s%s%d epochs, %.1f s, %.0f images/s); checkpoint %s/last.ckpt\n",
           res.test_accuracy, how, plain + (*plain ? 2 : 0), *plain ? "; " : "", res.epochs_done,
           res.seconds, res.images_per_second, out);
    vit_train_result_free(&res);
    return 0;
}

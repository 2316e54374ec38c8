/*
 * vit_seq - trains the small causal sequence model of seq_model.h (a model
 * of the user's own on libvit's tape: attention, layer norm, MLP, loss and a
 * custom op outside the ViT) to reverse or sort short digit strings, then
 * prints its autoregressive accuracy on held-out strings.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "seq_model.h"

static const char *prog = "vit_seq";

static void usage(void)
{
    printf("usage: vit_seq [--task reverse|sort] [--len K] [--steps N] [--seed S]\n"
           "               [--threads N] [--quiet]\n"
           "Trains a small causal transformer (token embedding, causal multi-head\n"
           "attention, MLP, output layer; written on libvit's tape from its public API)\n"
           "on K digits followed by a separator, the answer being the digits reversed or\n"
           "sorted.\n"
           "Training uses teacher forcing; the accuracy printed at the end is measured\n"
           "autoregressively (the model reads its own predictions) on 2000 digit strings\n"
           "held out from training.\n"
           "  --task reverse|sort  what to learn (default reverse)\n"
           "  --len K              digits per input, 1..16 (default 5)\n"
           "  --steps N            optimizer steps of 64 sequences (default 500)\n"
           "  --seed S             seed of the initialisation and the data (default 1)\n"
           "  --threads N          BLAS threads\n"
           "  --quiet              print only the accuracy lines\n");
}

int main(int argc, char **argv)
{
    cli_ignore_file_size_signal();
    seq_config cfg;
    seq_config_default(&cfg);
    int quiet = 0, threads = 0;
    static const cli_flag flags[] = {{"--task", 1}, {"--len", 1}, {"--steps", 1}, {"--seed", 1},
                                     {"--threads", 1}, {"--quiet", 0}, {"--help", 0},
                                     {"--version", 0}, {NULL, 0}};
    if (!cli_normalize(prog, &argc, &argv, flags, 0))
        return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = cli_arg(prog, argc, argv, &i, flags, usage, NULL, 0, &v);
        if (r == CLI_ARG_TAKEN)
            continue;
        if (r != CLI_ARG_OPTION)
            return r;
        if (strcmp(a, "--quiet") == 0) {
            quiet = 1;
            continue;
        }
        int seed = 0;
        if (strcmp(a, "--task") == 0) {
            if (strcmp(v, "reverse") == 0)
                cfg.task = SEQ_REVERSE;
            else if (strcmp(v, "sort") == 0)
                cfg.task = SEQ_SORT;
            else {
                fprintf(stderr, "%s: --task: expected reverse or sort, got '%s'\n", prog, v);
                return 2;
            }
        } else if (strcmp(a, "--len") == 0) {
            if (!cli_int(prog, a, v, 1, 16, &cfg.len))
                return 2;
        } else if (strcmp(a, "--steps") == 0) {
            if (!cli_int(prog, a, v, 1, 10000000, &cfg.steps))
                return 2;
        } else if (strcmp(a, "--seed") == 0) {
            if (!cli_int(prog, a, v, 0, 2147483647, &seed))
                return 2;
            cfg.seed = (unsigned long long)seed;
        } else if (strcmp(a, "--threads") == 0) {
            if (!cli_int(prog, a, v, 1, 256, &threads))
                return 2;
        } else {
            return cli_unknown_option(prog, a);
        }
    }
    if (threads)
        vit_set_threads(threads);

    seq_model *m = seq_model_new(&cfg);
    if (!m) {
        fprintf(stderr, "%s: %s\n", prog, vit_last_error());
        return 1;
    }
    if (!quiet)
        printf("task %s, %d digits, %zu parameters, %d steps of %d sequences\n",
               cfg.task == SEQ_REVERSE ? "reverse" : "sort", cfg.len,
               seq_model_param_count(m), cfg.steps, cfg.batch);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double seq_acc = 0, tok_acc = 0;
    int every = cfg.steps >= 10 ? cfg.steps / 10 : 1;
    if (seq_train(m, quiet ? NULL : stdout, every) != VIT_OK
        || seq_evaluate(m, 2000, cfg.seed + 1000003ULL, &seq_acc, &tok_acc) != VIT_OK) {
        fprintf(stderr, "%s: %s\n", prog, vit_last_error());
        seq_model_free(m);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!quiet)
        printf("trained in %.1f s\n",
               (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    double chance = 1;
    for (int i = 0; i < cfg.len; i++)
        chance /= 10; /* guessing each digit */
    printf("held-out sequence accuracy %.4f (every digit right; chance %.0e)\n", seq_acc,
           chance);
    printf("held-out token accuracy %.4f (chance 0.1)\n", tok_acc);
    seq_model_free(m);
    return 0;
}

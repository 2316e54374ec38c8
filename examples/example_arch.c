/*
 * example_arch - your own architecture through the library's trainer: the
 * small convolutional network of examples/convmlp.c (one file: its config
 * keys, tensors, forward, export names and bf16 weights), registered as
 * architecture "convmlp" and trained on the digits with everything the
 * trainer does for the ViT: augmentation, checkpoints and resume,
 * metrics.csv, test-time augmentation, bf16.
 *
 *     example_arch DIGITS_CSV OUT_DIR EPOCHS [--stop-after N] [--resume]
 *                  [--precision fp32|bf16|auto]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vit/vit.h>

#include "convmlp.h"

/* ---- training it ----------------------------------------------------------- */

static int on_event(const vit_train_event *ev, void *user)
{
    (void)user;
    if (ev->kind == VIT_TRAIN_EPOCH)
        printf("epoch %llu: train loss %.4f, test acc %.4f\n", ev->epoch->epoch,
               ev->epoch->train_loss, ev->epoch->test_acc);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: example_arch DIGITS_CSV OUT_DIR EPOCHS [--stop-after N] "
                        "[--resume] [--precision fp32|bf16|auto]\n");
        return 2;
    }
    int stop_after = 0, resume = 0;
    const char *precision = NULL;
    for (int i = 4; i < argc; i++) {
        if (strcmp(argv[i], "--stop-after") == 0 && i + 1 < argc)
            stop_after = atoi(argv[++i]);
        else if (strcmp(argv[i], "--resume") == 0)
            resume = 1;
        else if (strcmp(argv[i], "--precision") == 0 && i + 1 < argc)
            precision = argv[++i];
        else {
            fprintf(stderr, "example_arch: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    /* Registered before any config or checkpoint names it. */
    if (vit_arch_register(convmlp_arch()) != VIT_OK) {
        fprintf(stderr, "example_arch: %s\n", vit_last_error());
        return 1;
    }
    vit_set_threads(1);
    vit_dataset train, test;
    if (vit_data_load_digits(argv[1], 1437, &train, &test) != VIT_OK) {
        fprintf(stderr, "example_arch: %s\n", vit_last_error());
        return 1;
    }
    /* The network ours, the training recipe (vit/train_config.h) the
     * default with a few keys changed: the same text a config file would
     * hold, one parser reading each key into its struct. */
    vit_config cfg;
    vit_train_config tc;
    vit_config_default(&cfg);
    vit_train_config_default(&tc);
    char epochs[64], prec[64];
    snprintf(epochs, sizeof epochs, "epochs = %s\n", argv[3]);
    snprintf(prec, sizeof prec, "precision = %s\n", precision ? precision : "fp32");
    int rc = vit_config_parse(&cfg, &tc, "arch = convmlp\nwidth1 = 16\nlr = 0.01\nwarmup = 1\ninit_std = 0.3\n", "example");
    if (rc == VIT_OK)
        rc = vit_config_parse(&cfg, &tc, epochs, "EPOCHS");
    if (rc == VIT_OK && precision) /* bf16: convmlp's bf16_weights hook */
        rc = vit_config_parse(&cfg, &tc, prec, "--precision");
    char ckpt[4096];
    snprintf(ckpt, sizeof ckpt, "%s/last.ckpt", argv[2]);
    vit_train_opts opts = {.out_dir = argv[2], .ckpt_every = 1, .resume = resume ? ckpt : NULL,
                           .stop_after_epochs = stop_after, .on_event = on_event};
    vit_trainer *t = NULL;
    vit_train_result res = {0};
    if (rc == VIT_OK)
        rc = vit_trainer_new(&t, &cfg, &tc, &train, &test, &opts);
    if (rc == VIT_OK)
        rc = vit_trainer_fit(t, &res);
    if (rc == VIT_OK) {
        const vit_train_progress *at = vit_trainer_progress(t);
        if (at->epoch < (unsigned long long)vit_trainer_train_config(t)->epochs)
            printf("stopped after epoch %llu; checkpoint %s\n", at->epoch, ckpt);
        else
            printf("%s: %zu parameters, test accuracy %.4f (tta %s) after %llu epochs, "
                   "trained in %s\n", vit_model_arch(vit_trainer_model(t))->name,
                   vit_model_param_count(vit_trainer_model(t)), res.test_accuracy,
                   vit_tta_name(vit_trainer_train_config(t)->tta), at->epoch,
                   vit_precision_name(vit_model_precision(vit_trainer_model(t))));
    } else {
        fprintf(stderr, "example_arch: %s\n", vit_last_error());
    }
    vit_train_result_free(&res);
    vit_trainer_free(t);
    vit_dataset_free(&train);
    vit_dataset_free(&test);
    return rc == VIT_OK ? 0 : 1;
}

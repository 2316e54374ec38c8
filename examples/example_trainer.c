/*
 * example_trainer - your own training loop over the library's trainer:
 * early stopping on the validation accuracy, decided in a callback.
 *
 *     example_trainer DIGITS_CSV OUT_DIR [PATIENCE]
 *
 * Trains the default ViT on the digits (the last 200 training images held
 * out for validation) for up to 40 epochs, prints one line per epoch, and
 * stops (with a checkpoint, as a resumable run) once the validation
 * accuracy has not improved for PATIENCE epochs (default 3).  Then it
 * scores the model on the test set itself, once, and says where the run
 * is.
 */
#include <stdio.h>
#include <stdlib.h>

#include <vit/vit.h>

typedef struct early_stop {
    int patience;
    double best;              /* the best validation accuracy so far */
    unsigned long long best_epoch;
} early_stop;

/* The callback: sees every event; here only the epochs matter. */
static int on_event(const vit_train_event *ev, void *user)
{
    early_stop *es = user;
    if (ev->kind != VIT_TRAIN_EPOCH)
        return 0;
    const vit_epoch_metrics *m = ev->epoch;
    /* With a validation set the epochs score it, not the test set (the
     * test figures are NaN): the test set is for the end. */
    printf("epoch %llu: train loss %.4f, val loss %.4f, val acc %.4f\n", m->epoch, m->train_loss,
           m->val_loss, m->val_acc);
    if (m->val_acc > es->best) {
        es->best = m->val_acc;
        es->best_epoch = m->epoch;
    }
    return m->epoch - es->best_epoch >= (unsigned long long)es->patience; /* nonzero: stop */
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: example_trainer DIGITS_CSV OUT_DIR [PATIENCE]\n");
        return 2;
    }
    early_stop es = {.patience = argc > 3 ? atoi(argv[3]) : 3, .best = -1};
    if (es.patience < 1) {
        fprintf(stderr, "example_trainer: PATIENCE must be at least 1\n");
        return 2;
    }
    vit_set_threads(1);
    vit_dataset train, test;
    if (vit_data_load_digits(argv[1], 1437, &train, &test) != VIT_OK) {
        fprintf(stderr, "example_trainer: %s\n", vit_last_error());
        return 1;
    }
    vit_config cfg; /* the network: the default ViT */
    vit_train_config tc; /* how it is trained: the default recipe, 40 epochs */
    vit_config_default(&cfg);
    vit_train_config_default(&tc);
    tc.epochs = 40;
    vit_train_opts opts = {.out_dir = argv[2], .ckpt_every = 1, .val_count = 200,
                           .on_event = on_event, .user = &es};
    vit_trainer *t;
    vit_train_result res = {0};
    int rc = vit_trainer_new(&t, &cfg, &tc, &train, &test, &opts);
    if (rc == VIT_OK)
        rc = vit_trainer_fit(t, &res);
    vit_eval_result ev = {0};
    if (rc == VIT_OK) /* the model as the run left it, scored here */
        rc = vit_trainer_evaluate(t, &test, VIT_TTA_NONE, &ev);
    if (rc == VIT_OK) {
        const vit_train_progress *at = vit_trainer_progress(t);
        if (res.interrupted)
            printf("stopped after epoch %llu: best val acc %.4f at epoch %llu\n", at->epoch, es.best,
                   es.best_epoch);
        printf("test accuracy %.4f after %llu epochs; checkpoint %s/last.ckpt\n", ev.accuracy,
               at->epoch, argv[2]);
    } else {
        fprintf(stderr, "example_trainer: %s\n", vit_last_error());
    }
    vit_eval_result_free(&ev);
    vit_train_result_free(&res);
    vit_trainer_free(t);
    vit_dataset_free(&train);
    vit_dataset_free(&test);
    return rc == VIT_OK ? 0 : 1;
}

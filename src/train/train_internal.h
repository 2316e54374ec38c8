/* Internal: what the trainer (train*.c) shares with scoring (evaluate.c)
 * and with the run folder and its history (run_dir.c). */
#ifndef VIT_SRC_TRAIN_INTERNAL_H
#define VIT_SRC_TRAIN_INTERNAL_H

#include <stdio.h>

#include "vit/train.h"

/* VIT_OK if ds (named `what` in the message: "training", "test") is not
 * empty and its images and classes fit config c; VIT_EINVAL otherwise. */
int vit_check_data_shape(const vit_config *c, const vit_dataset *ds, const char *what);

/* Creates the output folder dir (mkdir -p), proves it writable, and
 * checks that ckpt, the checkpoint path inside it, is free or a regular
 * file; removes temporaries an interrupted write of the checkpoint,
 * metrics.csv, final.csv or clock.txt left there.
 * VIT_EINVAL (path too long), VIT_EIO. */
int vit_run_dir_make(const char *dir, const char *ckpt);

/* Moves the run in dir (last.ckpt and metrics.csv, together) to the first
 * free dir/replaced-N, which gets into moved[cap] (empty on failure).
 * VIT_EIO when no name is free or a move fails. */
int vit_run_dir_set_aside(const char *dir, char *moved, size_t cap);

/* Opens dir/metrics.csv for appending, written anew with the header and,
 * on resume (keep_epochs > 0), the rows of the metrics.csv next to the
 * checkpoint `from` for epochs up to keep_epochs; *seconds gets the
 * seconds of the last kept row (0 without).  with_val: rows end with
 * val_acc,val_loss (a kept row from before val_loss gets it empty); a
 * history that differs in having them is refused (VIT_EINVAL).
 * VIT_EIO when it cannot be written. */
int vit_metrics_open(const char *dir, const char *from, unsigned long long keep_epochs,
                     int with_val, FILE **metrics, double *seconds);

/* Appends m as one row of the metrics file f (at path, for the message),
 * in one write to the file: a killed run leaves the row whole or not at
 * all; a NaN test figure (not scored) is an empty field.  VIT_EIO when the
 * write fails, the file cut back to end with the row before. */
int vit_metrics_append(FILE *f, const char *path, const vit_epoch_metrics *m, int with_val);

/* Writes dir/final.csv whole or not at all (vit_atomic_open): the figures
 * a finished run reports, in metrics.csv's format (vit_metrics_read reads
 * it) with one row:
 *   epoch,train_loss,test_loss,test_acc,tta,ema,test_acc_one_pass,test_loss_one_pass
 * then ,val_acc,val_acc_one_pass,best_epoch with a validation set; test_acc,
 * test_loss and val_acc are res's own (with the run's tta and ema),
 * train_loss the last epoch's mean, tta VIT_TTA_*, best_epoch res's (0:
 * the last model).  VIT_EIO when it cannot be
 * written. */
int vit_metrics_write_final(const char *dir, const vit_train_result *res, double train_loss);

/* The run's wall time at its last checkpoint, which the checkpoint itself
 * does not hold (it would differ between a resumed run and an
 * uninterrupted one): dir/clock.txt, one line "step S seconds T", written
 * whole or not at all.  VIT_EIO when it cannot be written. */
int vit_run_clock_write(const char *dir, unsigned long long step, double seconds);

/* The seconds of the clock.txt beside the checkpoint `from` into *seconds
 * when it names the checkpoint's step; else *seconds is left as it is. */
void vit_run_clock_read(const char *from, unsigned long long step, double *seconds);

/* Removes dir/final.csv, if any (a run that goes on training no longer
 * ends where it said). */
void vit_metrics_drop_final(const char *dir);

#endif

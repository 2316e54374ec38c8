/*
 * vit/metrics.h - the metrics.csv of a training run, read back.
 *
 * vit_train_run writes OUT/metrics.csv (vit/train.h): a header line naming
 * the columns, then one row per epoch, e.g.
 *
 *     epoch,train_loss,train_acc,test_loss,test_acc,lr,seconds
 *     1,0.912345,0.702000,0.512345,0.853000,0.001,2.125
 *
 * vit_metrics_read takes any file of that shape: the columns in any order,
 * every one kept by its header name, so that a reader of another column
 * (lr, seconds, val_acc, val_loss) finds it with vit_metrics_column.  A
 * run with a validation set scores it after every epoch instead of the
 * test set and leaves test_loss and test_acc empty (since 0.3.0; the test
 * set is scored once, at the end: final.csv), e.g.
 *
 *     epoch,train_loss,train_acc,test_loss,test_acc,lr,seconds,val_acc,val_loss
 *     1,0.912345,0.702000,,,0.001,2.125,0.861000,0.498765
 *
 * Errors follow vit/core.h (VIT_E* codes, message in vit_last_error()).
 * Thread safety: reentrant; a table is used by one thread at a time.
 */
#ifndef VIT_METRICS_H
#define VIT_METRICS_H

#include "vit/core.h"

VIT_BEGIN_DECLS

/* A metrics file in memory.  Owned by the caller once filled (release with
 * vit_metrics_free); every pointer points into memory the table owns. */
typedef struct vit_metrics_table {
    int rows;          /* data rows (epochs), at least 1 */
    int cols;          /* columns, as many as the header names */
    char **names;      /* [cols] the header's column names, in file order */
    double *values;    /* [cols, rows] column-major: column c is values + c * rows */
    /* The four columns every metrics.csv has, each [rows] inside values
     * (test_loss and test_acc NaN where empty: a run with a validation
     * set). */
    const double *epoch, *train_loss, *test_loss, *test_acc;
} vit_metrics_table;

/* Most columns (header fields) a metrics file may have. */
enum { VIT_METRICS_MAX_COLS = 64 };

/* Reads the CSV at path into *out (overwritten; its old contents are not
 * freed).  The format: a header line of column names, which must include
 * epoch, train_loss, test_loss and test_acc and may not name a column
 * twice, then one row per epoch with as many fields as the header, each a
 * finite number (strtod's syntax) or empty: a figure not measured, read as
 * NaN (any column but epoch).  Fields are separated by commas;
 * spaces and tabs around a field are ignored; a line may end in "\r\n".
 * Blank lines may only end the file.
 * Returns VIT_OK; VIT_EINVAL for a NULL argument; VIT_EIO when the file
 * cannot be opened or read; VIT_EFORMAT for anything malformed, with one
 * message naming the file, the line and the problem, e.g.
 * "runs/a/metrics.csv:4: field 3 'x' is not a finite number" or
 * "m.csv:1: the header has no column 'test_acc'"; VIT_ENOMEM.  On failure
 * *out is zeroed (a NULL-safe vit_metrics_free target) and nothing is
 * left allocated. */
int vit_metrics_read(const char *path, vit_metrics_table *out);

/* The column named name ([t->rows] values inside the table), or NULL when
 * the header has no such column or an argument is NULL (no message: a
 * missing optional column is not an error).  Cannot fail otherwise. */
const double *vit_metrics_column(const vit_metrics_table *t, const char *name);

/* Releases what vit_metrics_read allocated and zeroes *t.  t may be NULL;
 * a zeroed table is fine.  Cannot fail. */
void vit_metrics_free(vit_metrics_table *t);

VIT_END_DECLS

#endif

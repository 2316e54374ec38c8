/* metrics.csv: the per-epoch table of a training run, written by the
 * trainer as it goes (vit_metrics_open, vit_metrics_append:
 * train_internal.h) and read back by vit_metrics_read (vit/metrics.h). */
#include "vit/metrics.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "atomic_file_internal.h"
#include "error.h"
#include "vit/atomic_file.h"
#include "train_internal.h"

/* The columns every metrics.csv has, in the order of the table's pointers. */
static const char *const required[4] = {"epoch", "train_loss", "test_loss", "test_acc"};

void vit_metrics_free(vit_metrics_table *t)
{
    if (!t)
        return;
    for (int c = 0; t->names && c < t->cols; c++)
        free(t->names[c]);
    free(t->names);
    free(t->values);
    memset(t, 0, sizeof *t);
}

const double *vit_metrics_column(const vit_metrics_table *t, const char *name)
{
    if (!t || !name || !t->names || !t->values)
        return NULL;
    for (int c = 0; c < t->cols; c++)
        if (strcmp(t->names[c], name) == 0)
            return t->values + (size_t)c * (size_t)t->rows;
    return NULL;
}

/* Splits line in place at commas into at most max fields, trimming spaces
 * and tabs around each.  Returns the number of fields found (which may
 * exceed max: the count goes on, the pointers stop). */
static int split_csv(char *line, char **field, int max)
{
    int n = 0;
    for (char *p = line;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        char *end = strchr(p, ',');
        char *q = end ? end : p + strlen(p);
        while (q > p && (q[-1] == ' ' || q[-1] == '\t'))
            q--;
        *q = 0;
        if (n < max)
            field[n] = p;
        n++;
        if (!end)
            return n;
        p = end + 1;
    }
}

static int blank(const char *s) { return s[strspn(s, " \t\r\n")] == 0; }

/* What the reader has so far: rows are kept row-major while the file is
 * read (a row is appended whole) and turned column-major at the end. */
typedef struct reader {
    const char *path;
    int lineno, cols, rows;
    size_t cap_rows;
    double *data; /* [cap_rows, cols] */
    vit_metrics_table *out;
} reader;

/* The header: names every column once, the four required among them. */
static int read_header(reader *r, char **field, int n)
{
    vit_metrics_table *t = r->out;
    if (!(t->names = calloc((size_t)n, sizeof *t->names)))
        return vit_fail(VIT_ENOMEM, "%s: out of memory", r->path);
    t->cols = n;
    for (int i = 0; i < n; i++) {
        if (!*field[i])
            return vit_fail(VIT_EFORMAT, "%s:%d: column %d of the header has no name", r->path,
                            r->lineno, i + 1);
        for (int j = 0; j < i; j++)
            if (strcmp(field[i], field[j]) == 0)
                return vit_fail(VIT_EFORMAT, "%s:%d: the header names column '%s' twice "
                                "(fields %d and %d)", r->path, r->lineno, field[i], j + 1, i + 1);
        if (!(t->names[i] = strdup(field[i])))
            return vit_fail(VIT_ENOMEM, "%s: out of memory", r->path);
    }
    for (int k = 0; k < 4; k++) {
        int found = 0;
        for (int i = 0; i < n; i++)
            found |= strcmp(field[i], required[k]) == 0;
        if (!found)
            return vit_fail(VIT_EFORMAT, "%s:%d: the header has no column '%s' (expected a "
                            "metrics.csv of a training run)", r->path, r->lineno, required[k]);
    }
    r->cols = n;
    return VIT_OK;
}

/* One data row: as many fields as the header, each a finite number or
 * empty (a figure not measured, NaN). */
static int read_row(reader *r, char **field, int n)
{
    if (n != r->cols)
        return vit_fail(VIT_EFORMAT, "%s:%d: %d fields, the header has %d", r->path, r->lineno, n,
                        r->cols);
    if (r->rows == INT_MAX)
        return vit_fail(VIT_ENOMEM, "%s: more than %d rows", r->path, INT_MAX);
    if ((size_t)r->rows == r->cap_rows) {
        size_t cap = r->cap_rows ? 2 * r->cap_rows : 64;
        double *d = cap <= SIZE_MAX / sizeof *d / (size_t)r->cols
                        ? realloc(r->data, cap * (size_t)r->cols * sizeof *d)
                        : NULL;
        if (!d)
            return vit_fail(VIT_ENOMEM, "%s: out of memory", r->path);
        r->data = d;
        r->cap_rows = cap;
    }
    double *row = r->data + (size_t)r->rows * (size_t)r->cols;
    for (int i = 0; i < n; i++) {
        char *end;
        if (!*field[i] && strcmp(r->out->names[i], "epoch") != 0) {
            row[i] = NAN;
            continue;
        }
        row[i] = strtod(field[i], &end);
        if (end == field[i] || *end || !isfinite(row[i]))
            return vit_fail(VIT_EFORMAT, "%s:%d: field %d '%s' is not a finite number", r->path,
                            r->lineno, i + 1, field[i]);
    }
    r->rows++;
    return VIT_OK;
}

/* One line of the file (its end of line still on it). */
static int read_line(reader *r, char *line, int *first_blank)
{
    if (blank(line)) {
        if (!*first_blank)
            *first_blank = r->lineno;
        return VIT_OK;
    }
    if (*first_blank)
        return vit_fail(VIT_EFORMAT, "%s:%d: blank line inside the file", r->path, *first_blank);
    /* The library ends every line it writes: a line without its end is
     * what a cut-off write leaves, possibly in the middle of a number. */
    size_t len = strcspn(line, "\r\n");
    if (!line[len])
        return vit_fail(VIT_EFORMAT, "%s:%d: the line has no end (the file is cut short)",
                        r->path, r->lineno);
    line[len] = 0;
    char *field[VIT_METRICS_MAX_COLS];
    int n = split_csv(line, field, VIT_METRICS_MAX_COLS);
    if (n > VIT_METRICS_MAX_COLS)
        return vit_fail(VIT_EFORMAT, "%s:%d: %d fields, at most %d are supported", r->path,
                        r->lineno, n, VIT_METRICS_MAX_COLS);
    return r->lineno == 1 ? read_header(r, field, n) : read_row(r, field, n);
}

/* Turns the row-major rows into the table's column-major values. */
static int finish(reader *r)
{
    vit_metrics_table *t = r->out;
    size_t rows = (size_t)r->rows, cols = (size_t)r->cols;
    if (!(t->values = malloc(rows * cols * sizeof *t->values)))
        return vit_fail(VIT_ENOMEM, "%s: out of memory", r->path);
    for (size_t i = 0; i < rows; i++)
        for (size_t c = 0; c < cols; c++)
            t->values[c * rows + i] = r->data[i * cols + c];
    t->rows = r->rows;
    const double **named[4] = {&t->epoch, &t->train_loss, &t->test_loss, &t->test_acc};
    for (int k = 0; k < 4; k++)
        *named[k] = vit_metrics_column(t, required[k]);
    return VIT_OK;
}

int vit_metrics_read(const char *path, vit_metrics_table *out)
{
    if (!out)
        return vit_fail(VIT_EINVAL, "vit_metrics_read: out is NULL");
    memset(out, 0, sizeof *out);
    if (!path)
        return vit_fail(VIT_EINVAL, "vit_metrics_read: path is NULL");
    FILE *fp = fopen(path, "r");
    if (!fp)
        return vit_fail(VIT_EIO, "%s: cannot open: %s", path, strerror(errno));
    reader r = {.path = path, .out = out};
    char *line = NULL;
    size_t line_cap = 0;
    int first_blank = 0, rc = VIT_OK;
    while (rc == VIT_OK && getline(&line, &line_cap, fp) >= 0) {
        r.lineno++;
        rc = read_line(&r, line, &first_blank);
    }
    if (rc == VIT_OK && ferror(fp))
        rc = vit_fail(VIT_EIO, "%s: read error: %s", path, strerror(errno));
    else if (rc == VIT_OK && r.cols == 0)
        rc = vit_fail(VIT_EFORMAT, "%s: empty file (expected a header line)", path);
    else if (rc == VIT_OK && r.rows == 0)
        rc = vit_fail(VIT_EFORMAT, "%s: no data rows after the header", path);
    if (rc == VIT_OK)
        rc = finish(&r);
    free(line);
    free(r.data);
    fclose(fp);
    if (rc != VIT_OK)
        vit_metrics_free(out);
    return rc;
}

/* ---- writing ------------------------------------------------------------ */

/* The columns of metrics.csv; val_acc and val_loss, last, only in a run
 * with a validation set (so the columns before them never move).  Such a
 * run scores its test set once, at the end: its rows leave test_loss and
 * test_acc empty (runs before 0.3.0 filled them, and had no val_loss). */
static const char metrics_header[] = "epoch,train_loss,train_acc,test_loss,test_acc,lr,seconds";
#define VAL_COLUMNS ",val_acc,val_loss"

/* Of a row of metrics.csv as written (its end of line on it): the epoch,
 * the seconds (field 7) and the number of commas.  0 when it is not a
 * data row (the header, a cut-off line). */
static int row_fields(const char *line, unsigned long long *epoch, double *seconds, int *commas)
{
    char *end;
    if (!strchr(line, '\n') || *line < '0' || *line > '9')
        return 0;
    *epoch = strtoull(line, &end, 10);
    if (*end != ',')
        return 0;
    *commas = 0;
    const char *sec = NULL;
    for (const char *q = line; *q; q++)
        if (*q == ',' && ++*commas == 6)
            sec = q + 1;
    if (!sec)
        return 0;
    *seconds = strtod(sec, &end);
    return end != sec && isfinite(*seconds);
}

/* Opens OUT/metrics.csv for appending.  On resume, keeps only the rows of
 * epochs the checkpoint covers (a killed run may have logged more), taken
 * from the metrics.csv next to the checkpoint `from` (so rows of another
 * run are never mixed in), by rewriting through a temporary file, into
 * *metrics; *seconds: the seconds already spent.  with_val: the rows end
 * with val_acc and val_loss (a row of a run logged before val_loss gets
 * it empty); a resumed run whose rows differ in having a validation set
 * is refused (its validation set would change what it trains on). */
int vit_metrics_open(const char *dir, const char *from, unsigned long long keep_epochs,
                     int with_val, FILE **metrics, double *seconds)
{
    char path[4200], src[4200];
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    const char *slash = from ? strrchr(from, '/') : NULL;
    if (slash)
        snprintf(src, sizeof src, "%.*s/metrics.csv", (int)(slash - from), from);
    else
        snprintf(src, sizeof src, "metrics.csv");
    *seconds = 0;
    *metrics = NULL;
    FILE *out;
    char *tmp;
    int rc = vit_atomic_begin(NULL, path, &out, &tmp);
    if (rc)
        return rc;
    fprintf(out, "%s%s\n", metrics_header, with_val ? VAL_COLUMNS : "");
    int mixed = 0;
    FILE *in = keep_epochs ? fopen(src, "r") : NULL;
    if (in) {
        char line[512];
        while (fgets(line, sizeof line, in)) {
            /* A row without its end (a write cut off) is not kept: the
             * next row would be glued onto it. */
            if (!strchr(line, '\n'))
                continue;
            unsigned long long ep;
            double secs;
            int commas;
            if (!row_fields(line, &ep, &secs, &commas) || ep > keep_epochs)
                continue;
            if (with_val && commas == 7) { /* val_acc without val_loss: before 0.3.0 */
                line[strcspn(line, "\r\n")] = 0;
                fprintf(out, "%s,\n", line);
            } else {
                mixed |= commas != (with_val ? 8 : 6);
                fputs(line, out);
            }
            *seconds = secs;
        }
        fclose(in);
    }
    if (mixed)
        rc = vit_fail(VIT_EINVAL, "%s: the run was logged %s a validation set and this run "
                      "has %s; a resumed run keeps its val_count", src,
                      with_val ? "without" : "with", with_val ? "one" : "none");
    /* Written whole and renamed over metrics.csv, then kept open: the
     * epochs' rows are appended to it. */
    return vit_atomic_end(NULL, out, tmp, path, rc, metrics);
}

/* ---- training --------------------------------------------------------- */

int vit_metrics_append(FILE *f, const char *path, const vit_epoch_metrics *m, int with_val)
{
    /* The row goes out in one write, so that a killed run leaves it whole
     * or not at all, and a write that fails (a full disk) is cut off again:
     * the file ends with a whole row either way (vit_metrics_read refuses
     * a row without its end).  Nine numbers of at most 317 characters
     * each (%.6f of the largest double) fit.  A test figure not scored
     * (NaN: a run with a validation set) is an empty field. */
    char row[4096], test_loss[320] = "", test_acc[320] = "";
    if (!isnan(m->test_loss))
        snprintf(test_loss, sizeof test_loss, "%.6f", m->test_loss);
    if (!isnan(m->test_acc))
        snprintf(test_acc, sizeof test_acc, "%.6f", m->test_acc);
    int n = snprintf(row, sizeof row, "%llu,%.6f,%.6f,%s,%s,%.8g,%.3f", m->epoch, m->train_loss,
                     m->train_acc, test_loss, test_acc, m->lr, m->seconds);
    if (with_val && n > 0 && (size_t)n < sizeof row)
        n += snprintf(row + n, sizeof row - (size_t)n, ",%.6f,%.6f", m->val_acc, m->val_loss);
    if (n > 0 && (size_t)n < sizeof row - 1) {
        row[n++] = '\n';
        row[n] = 0;
    } else {
        return vit_fail(VIT_EINVAL, "%s: epoch %llu's row is longer than %zu bytes", path,
                        m->epoch, sizeof row - 2);
    }
    /* Straight to the file (what the stream holds was flushed by
     * vit_metrics_open and every row before): a short write goes on where
     * it stopped, an error cuts the file back to where the row began. */
    int fd = fileno(f);
    off_t start = fflush(f) == 0 ? lseek(fd, 0, SEEK_CUR) : (off_t)-1;
    int err = start < 0 ? errno : 0;
    for (int done = 0; !err && done < n;) {
        ssize_t w = write(fd, row + done, (size_t)(n - done));
        if (w > 0)
            done += (int)w;
        else if (w == 0 || errno != EINTR)
            err = w == 0 ? EIO : errno;
    }
    if (!err)
        return VIT_OK;
    if (start >= 0 && ftruncate(fd, start) == 0)
        (void)lseek(fd, start, SEEK_SET);
    return vit_fail(VIT_EIO, "%s: cannot write epoch %llu's row: %s", path, m->epoch,
                    strerror(err));
}

/* ---- final figures ------------------------------------------------------ */

int vit_metrics_write_final(const char *dir, const vit_train_result *res, double train_loss)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/final.csv", dir);
    FILE *f;
    char *tmp;
    int rc = vit_atomic_open(path, &f, &tmp);
    if (rc)
        return rc;
    int val = res->val_accuracy >= 0;
    /* seconds (last, so that readers by position of the older file still
     * find theirs): the run's wall time to these figures, resumes included. */
    fprintf(f, "epoch,train_loss,test_loss,test_acc,tta,ema,test_acc_one_pass,test_loss_one_pass%s"
            ",seconds\n", val ? ",val_acc,val_acc_one_pass,best_epoch" : "");
    fprintf(f, "%d,%.6f,%.6f,%.6f,%d,%.8g,%.6f,%.6f", res->epochs_done, train_loss, res->test_loss,
            res->test_accuracy, res->tta, res->ema, res->test_accuracy_plain,
            res->test_loss_plain);
    if (val)
        fprintf(f, ",%.6f,%.6f,%d", res->val_accuracy, res->val_accuracy_plain, res->best_epoch);
    fprintf(f, ",%.1f\n", res->run_seconds);
    return vit_atomic_close(f, tmp, path, ferror(f) ? vit_fail(VIT_EIO, "%s: write error", path)
                                                    : VIT_OK);
}

void vit_metrics_drop_final(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/final.csv", dir);
    unlink(path);
}

/* ---- the run's clock ---------------------------------------------------- */

int vit_run_clock_write(const char *dir, unsigned long long step, double seconds)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/clock.txt", dir);
    FILE *f;
    char *tmp;
    int rc = vit_atomic_open(path, &f, &tmp);
    if (rc)
        return rc;
    fprintf(f, "step %llu seconds %.3f\n", step, seconds);
    return vit_atomic_close(f, tmp, path, ferror(f) ? vit_fail(VIT_EIO, "%s: write error", path)
                                                    : VIT_OK);
}

void vit_run_clock_read(const char *from, unsigned long long step, double *seconds)
{
    char path[4200];
    const char *slash = from ? strrchr(from, '/') : NULL;
    if (slash)
        snprintf(path, sizeof path, "%.*s/clock.txt", (int)(slash - from), from);
    else
        snprintf(path, sizeof path, "clock.txt");
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    unsigned long long s;
    double t;
    if (fscanf(f, "step %llu seconds %lf", &s, &t) == 2 && s == step && isfinite(t) && t >= 0)
        *seconds = t;
    fclose(f);
}

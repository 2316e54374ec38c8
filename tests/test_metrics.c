/* tests/test_metrics.c - the metrics.csv reader (vit/metrics.h), float32
 * build: the file a training run writes read back value by value, columns
 * found by name in any order, and every malformed file refused with one
 * VIT_EFORMAT message naming the file, the line and the problem, the table
 * left zeroed.  A file cut at any byte either ends at a line end (and reads
 * as the rows before the cut) or is refused.  Files go to a mkdtemp folder. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file_util.h"
#include "vit/vit.h"

static void write_text(const char *rel, const char *text)
{
    fu_write(fu_path(rel), text, strlen(text));
}

/* A run with a validation set, in the columns and number formats of
 * vit_train_run's metrics.csv. */
static const char run_csv[] =
    "epoch,train_loss,train_acc,test_loss,test_acc,lr,seconds,val_acc\n"
    "1,2.101234,0.250000,1.912345,0.330000,0.001,1.250,0.312500\n"
    "2,1.501234,0.500000,1.412345,0.560000,0.00075,2.500,0.562500\n"
    "3,0.901234,0.750000,0.812345,0.790000,0.00025,3.750,0.812500\n";
static const double train_loss[3] = {2.101234, 1.501234, 0.901234},
                    test_loss[3] = {1.912345, 1.412345, 0.812345}, test_acc[3] = {0.33, 0.56, 0.79};

static void assert_zeroed(const vit_metrics_table *t)
{
    ck_assert_int_eq(t->rows, 0);
    ck_assert_int_eq(t->cols, 0);
    ck_assert_ptr_null(t->names);
    ck_assert_ptr_null(t->values);
    ck_assert_ptr_null(t->epoch);
    ck_assert_ptr_null(t->test_acc);
}

START_TEST(reads_a_run)
{
    write_text("run.csv", run_csv);
    vit_metrics_table t;
    ck_assert_msg(vit_metrics_read(fu_path("run.csv"), &t) == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(t.rows, 3);
    ck_assert_int_eq(t.cols, 8);
    static const char *names[8] = {"epoch", "train_loss", "train_acc", "test_loss", "test_acc",
                                   "lr", "seconds", "val_acc"};
    for (int c = 0; c < 8; c++) {
        ck_assert_str_eq(t.names[c], names[c]);
        /* Column-major: column c is values + c * rows. */
        ck_assert_ptr_eq(vit_metrics_column(&t, names[c]), t.values + c * t.rows);
    }
    for (int e = 0; e < 3; e++) {
        ck_assert(t.epoch[e] == e + 1);
        ck_assert(t.train_loss[e] == train_loss[e]);
        ck_assert(t.test_loss[e] == test_loss[e]);
        ck_assert(t.test_acc[e] == test_acc[e]);
        ck_assert(vit_metrics_column(&t, "train_acc")[e] == 0.25 * (e + 1));
        ck_assert(vit_metrics_column(&t, "seconds")[e] == 1.25 * (e + 1));
        ck_assert(vit_metrics_column(&t, "val_acc")[e] == 0.3125 + 0.25 * e);
    }
    ck_assert(vit_metrics_column(&t, "lr")[1] == 0.00075);
    ck_assert_ptr_null(vit_metrics_column(&t, "momentum"));
    ck_assert_ptr_null(vit_metrics_column(&t, NULL));
    ck_assert_ptr_null(vit_metrics_column(NULL, "epoch"));
    vit_metrics_free(&t);
    assert_zeroed(&t);
    vit_metrics_free(&t); /* twice is fine */
    vit_metrics_free(NULL);
}
END_TEST

START_TEST(columns_in_any_order)
{
    /* Another order, an extra column, spaces, CRLF and trailing blank lines. */
    write_text("order.csv", "test_acc, epoch ,note,test_loss,train_loss\r\n"
                            "0.25,1,7,1.5,2.5\r\n0.5, 2 ,8,1.25,2\r\n\r\n\n");
    vit_metrics_table t;
    ck_assert_msg(vit_metrics_read(fu_path("order.csv"), &t) == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(t.rows, 2);
    ck_assert_str_eq(t.names[1], "epoch");
    ck_assert(t.epoch[0] == 1 && t.epoch[1] == 2);
    ck_assert(t.train_loss[0] == 2.5 && t.train_loss[1] == 2);
    ck_assert(t.test_loss[0] == 1.5 && t.test_loss[1] == 1.25);
    ck_assert(t.test_acc[0] == 0.25 && t.test_acc[1] == 0.5);
    ck_assert(vit_metrics_column(&t, "note")[1] == 8);
    vit_metrics_free(&t);
}
END_TEST

/* A run with a validation set as vit_train_run writes it since 0.3.0: the
 * test set is not scored per epoch (its fields empty, read as NaN), and
 * val_loss follows val_acc; epoch 1 is a row of an older run resumed
 * (test figures there, val_loss empty). */
START_TEST(empty_fields_are_nan)
{
    write_text("val.csv", "epoch,train_loss,train_acc,test_loss,test_acc,lr,seconds,val_acc,val_loss\n"
                          "1,2.1,0.25,1.9,0.33,0.001,1.25,0.3125,\n"
                          "2,1.5,0.5,,,0.00075,2.5,0.5625,1.25\n"
                          "3,0.9,0.75, , ,0.00025,3.75,0.8125,0.75\n");
    vit_metrics_table t;
    ck_assert_msg(vit_metrics_read(fu_path("val.csv"), &t) == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(t.rows, 3);
    ck_assert(t.test_acc[0] == 0.33 && t.test_loss[0] == 1.9);
    for (int e = 1; e < 3; e++)
        ck_assert_msg(isnan(t.test_acc[e]) && isnan(t.test_loss[e]), "row %d: %g %g", e + 1,
                      t.test_acc[e], t.test_loss[e]);
    const double *vl = vit_metrics_column(&t, "val_loss");
    ck_assert_ptr_nonnull(vl);
    ck_assert(isnan(vl[0]) && vl[1] == 1.25 && vl[2] == 0.75);
    ck_assert(vit_metrics_column(&t, "val_acc")[2] == 0.8125 && t.epoch[2] == 3);
    vit_metrics_free(&t);
}
END_TEST

/* Reading rel (written from text unless NULL) must fail with code and the
 * message "PATH" + want, exactly, and leave the table zeroed. */
static void expect_error(const char *rel, const char *text, int code, const char *want)
{
    if (text)
        write_text(rel, text);
    vit_metrics_table t;
    memset(&t, 0x5a, sizeof t); /* overwritten, not read */
    int rc = vit_metrics_read(fu_path(rel), &t);
    ck_assert_msg(rc == code, "%s: rc %d, want %d (%s)", rel, rc, code, vit_last_error());
    char full[512];
    snprintf(full, sizeof full, "%s%s", fu_path(rel), want);
    ck_assert_msg(strncmp(vit_last_error(), full, strlen(full)) == 0,
                  "%s: message '%s', want it to start with '%s'", rel, vit_last_error(), full);
    assert_zeroed(&t);
}

/* Malformed files, each VIT_EFORMAT; H stands for a good header line. */
#define H "epoch,train_loss,test_loss,test_acc\n"
static const struct {
    const char *rel, *text, *want;
} bad_files[] = {
    {"num.csv", H "1,2,2,0.1\n2,2,two,0.1\n", ":3: field 3 'two' is not a finite number"},
    {"exp.csv", H "1,2,2,0.1\n2,2,1e,0.1\n", ":3: field 3 '1e' is not a finite number"},
    {"empty_epoch.csv", H ",2,2,0.1\n", ":2: field 1 '' is not a finite number"},
    {"nan.csv", H "1,nan,2,0.1\n", ":2: field 2 'nan' is not a finite number"},
    {"inf.csv", H "1,2,2,1e999\n", ":2: field 4 '1e999' is not a finite number"},
    {"short.csv", H "1,2,2\n", ":2: 3 fields, the header has 4"},
    {"long.csv", H "1,2,2,0.1,5\n", ":2: 5 fields, the header has 4"},
    {"nocol.csv", "epoch,train_loss,test_loss\n1,2,3\n", ":1: the header has no column 'test_acc'"},
    {"noepoch.csv", "step,train_loss,test_loss,test_acc\n1,2,3,4\n",
     ":1: the header has no column 'epoch'"},
    {"twice.csv", "epoch,train_loss,test_loss,test_acc,epoch\n1,2,3,0.4,1\n",
     ":1: the header names column 'epoch' twice (fields 1 and 5)"},
    {"noname.csv", "epoch,train_loss,,test_loss,test_acc\n1,2,3,4,0.5\n",
     ":1: column 3 of the header has no name"},
    {"blank.csv", H "1,2,2,0.1\n\n2,2,2,0.2\n", ":3: blank line inside the file"},
    /* Truncated: the last line lacks its end, mid-row, mid-number, mid-header. */
    {"cut_row.csv", H "1,2,2,0.1\n2,1.5,1.", ":3: the line has no end (the file is cut short)"},
    {"cut_num.csv", H "1,2,2,0.1\n2,1.5,1.25,0.7",
     ":3: the line has no end (the file is cut short)"},
    {"cut_head.csv", "epoch,train_loss,test_l", ":1: the line has no end (the file is cut short)"},
    {"header.csv", H, ": no data rows after the header"},
    {"empty.csv", "", ": empty file (expected a header line)"},
    {"blanks.csv", "\n \n", ": empty file (expected a header line)"},
};
#undef H

START_TEST(refuses_bad_files)
{
    for (size_t i = 0; i < sizeof bad_files / sizeof bad_files[0]; i++)
        expect_error(bad_files[i].rel, bad_files[i].text, VIT_EFORMAT, bad_files[i].want);
    char text[4096];
    /* More columns than supported. */
    char *wide = text;
    wide[0] = 0;
    strcat(wide, "epoch,train_loss,test_loss,test_acc");
    for (int i = 4; i < VIT_METRICS_MAX_COLS + 1; i++) {
        char col[16];
        snprintf(col, sizeof col, ",c%d", i);
        strcat(wide, col);
    }
    strcat(wide, "\n");
    char want[64];
    snprintf(want, sizeof want, ":1: %d fields, at most %d are supported", VIT_METRICS_MAX_COLS + 1,
             VIT_METRICS_MAX_COLS);
    expect_error("wide.csv", wide, VIT_EFORMAT, want);
    expect_error("missing.csv", NULL, VIT_EIO, ": cannot open: ");

    vit_metrics_table t;
    ck_assert_int_eq(vit_metrics_read(NULL, &t), VIT_EINVAL);
    assert_zeroed(&t);
    ck_assert_int_eq(vit_metrics_read(fu_path("num.csv"), NULL), VIT_EINVAL);
}
END_TEST

/* The run's file cut after every byte: a cut at a line end past the first
 * row reads as the rows before it, every other cut is refused. */
START_TEST(every_truncation)
{
    size_t n = strlen(run_csv);
    for (size_t k = 0; k < n; k++) {
        fu_write(fu_path("cut.csv"), run_csv, k);
        int lines = 0;
        for (size_t i = 0; i < k; i++)
            lines += run_csv[i] == '\n';
        int at_end = k > 0 && run_csv[k - 1] == '\n';
        vit_metrics_table t;
        int rc = vit_metrics_read(fu_path("cut.csv"), &t);
        if (at_end && lines >= 2) {
            ck_assert_msg(rc == VIT_OK, "cut at %zu: %s", k, vit_last_error());
            ck_assert_int_eq(t.rows, lines - 1);
            ck_assert(t.test_acc[t.rows - 1] == test_acc[t.rows - 1]);
            vit_metrics_free(&t);
        } else {
            ck_assert_msg(rc == VIT_EFORMAT, "cut at %zu: rc %d", k, rc);
            assert_zeroed(&t);
        }
    }
}
END_TEST

static Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("metrics");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, reads_a_run);
    tcase_add_test(tc, empty_fields_are_nan);
    tcase_add_test(tc, columns_in_any_order);
    tcase_add_test(tc, refuses_bad_files);
    tcase_add_test(tc, every_truncation);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return fu_run_suite(metrics_suite, "/tmp/vit-metrics-XXXXXX"); }

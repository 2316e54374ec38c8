/* The library's one writer (src/core/atomic_file_internal.h) and the one
 * file it leaves appended, metrics.csv (src/train/metrics_csv.c): whole or
 * not at all, nothing left behind, no two writers sharing a temporary, a
 * full disk in the middle of a write.  Private functions: the suite links
 * the static library, where the hidden symbols are reachable. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic_file_internal.h"
#include "file_util.h"
#include "train_internal.h"
#include "vit/atomic_file.h"
#include "vit/core.h"
#include "vit/metrics.h"

/* Each test's own folder (so that counting its entries counts only its
 * files), under the suite's. */
static char dir[128];
static int dir_seq;

static const char *in_dir(const char *name)
{
    static char buf[8][256];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "%s/t%d_%d", fu_suite_dir, (int)getpid(), dir_seq++);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
}

static int file_is(const char *path, const char *text)
{
    size_t n;
    unsigned char *b = fu_read(path, &n);
    int same = n == strlen(text) && memcmp(b, text, n) == 0;
    free(b);
    return same;
}

/* ---- the writer ------------------------------------------------------- */

typedef struct fill_ctx {
    const char *text;
    int fail;      /* return this after writing half the text */
    int unchecked; /* write and say VIT_OK whatever fwrite says */
} fill_ctx;

static int fill(FILE *f, void *ctx)
{
    const fill_ctx *x = ctx;
    size_t n = strlen(x->text);
    if (x->fail) {
        fwrite(x->text, 1, n / 2, f);
        return vit_set_error(x->fail, "fill: gave up halfway");
    }
    if (fwrite(x->text, 1, n, f) != n && !x->unchecked)
        return vit_set_error(VIT_EIO, "fill: short write");
    return VIT_OK;
}

START_TEST(write_replaces_whole)
{
    const char *path = in_dir("a.txt");
    fu_write(path, "old", 3);
    fill_ctx x = {"the new contents", 0, 0};
    ck_assert_msg(vit_atomic_write("who", path, fill, &x) == VIT_OK, "%s", vit_last_error());
    ck_assert(file_is(path, "the new contents"));
    ck_assert_int_eq(fu_count_entries(dir), 1);
}
END_TEST

START_TEST(failed_fill_keeps_old_and_leaves_nothing)
{
    const char *path = in_dir("b.txt");
    fu_write(path, "keep me", 7);
    fill_ctx x = {"a longer text that must never be seen", VIT_ENOMEM, 0};
    ck_assert_int_eq(vit_atomic_write("who", path, fill, &x), VIT_ENOMEM);
    /* the caller's code and message come back as they were */
    ck_assert_str_eq(vit_last_error(), "fill: gave up halfway");
    ck_assert(file_is(path, "keep me"));
    ck_assert_int_eq(fu_count_entries(dir), 1);
    /* the same for a path that did not exist: it still does not */
    ck_assert_int_eq(vit_atomic_write(NULL, in_dir("new.txt"), fill, &x), VIT_ENOMEM);
    ck_assert_int_eq(access(in_dir("new.txt"), F_OK), -1);
    ck_assert_int_eq(fu_count_entries(dir), 1);
}
END_TEST

/* A chmod the user made stays; a new file is readable like any other
 * (mkstemp's own 0600 is not left on it). */
START_TEST(mode_of_replaced_file_kept)
{
    const char *priv = in_dir("private.txt"), *fresh = in_dir("fresh.txt");
    fu_write(priv, "secret", 6);
    ck_assert_int_eq(chmod(priv, 0600), 0);
    fill_ctx x = {"new secret", 0, 0};
    ck_assert_int_eq(vit_atomic_write(NULL, priv, fill, &x), VIT_OK);
    ck_assert_int_eq(vit_atomic_write(NULL, fresh, fill, &x), VIT_OK);
    struct stat s;
    ck_assert_int_eq(stat(priv, &s), 0);
    ck_assert_int_eq(s.st_mode & 0777, 0600);
    ck_assert_int_eq(stat(fresh, &s), 0);
    ck_assert_int_eq(s.st_mode & 0777, 0644);
}
END_TEST

/* A write that fails for want of room (a file-size limit, as on a full
 * disk) where the caller did not check its own writes: the writer finds
 * it, names the file and the reason, and the old file stays. */
START_TEST(full_disk_keeps_old)
{
    const char *path = in_dir("big.bin");
    fu_write(path, "small", 5);
    size_t n = 64 * 1024;
    char *text = malloc(n + 1);
    ck_assert_ptr_nonnull(text);
    memset(text, 'x', n);
    text[n] = 0;
    fill_ctx x = {text, 0, 1};
    struct rlimit was, lim;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &was), 0);
    lim = was;
    lim.rlim_cur = 4096;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = vit_atomic_write(NULL, path, fill, &x);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &was), 0);
    signal(SIGXFSZ, old_handler);
    ck_assert_int_eq(rc, VIT_EIO);
    ck_assert_msg(strstr(vit_last_error(), path) && strstr(vit_last_error(), strerror(EFBIG)),
                  "%s", vit_last_error());
    ck_assert(file_is(path, "small"));
    ck_assert_int_eq(fu_count_entries(dir), 1);
    /* a new file likewise: no file, and the reason is still the write's */
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    old_handler = signal(SIGXFSZ, SIG_IGN);
    rc = vit_atomic_write(NULL, in_dir("new.bin"), fill, &x);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &was), 0);
    signal(SIGXFSZ, old_handler);
    ck_assert_int_eq(rc, VIT_EIO);
    ck_assert_msg(strstr(vit_last_error(), strerror(EFBIG)), "%s", vit_last_error());
    ck_assert_int_eq(fu_count_entries(dir), 1);
    free(text);
}
END_TEST

START_TEST(missing_folder_named)
{
    FILE *f = (FILE *)1;
    char *tmp = (char *)1;
    const char *path = in_dir("no/such/c.txt");
    ck_assert_int_eq(vit_atomic_begin("my_writer", path, &f, &tmp), VIT_EIO);
    ck_assert_ptr_null(f);
    ck_assert_ptr_null(tmp);
    char want[512];
    snprintf(want, sizeof want, "my_writer: '%s': creating a temporary file beside it failed: %s",
             path, strerror(ENOENT));
    ck_assert_str_eq(vit_last_error(), want);
    /* the tools' pair: the same, and NULLs refused by name */
    ck_assert_int_eq(vit_atomic_open(path, &f, &tmp), VIT_EIO);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), path));
    ck_assert_int_eq(vit_atomic_open(NULL, &f, &tmp), VIT_EINVAL);
    ck_assert_str_eq(vit_last_error(), "vit_atomic_open: path is NULL");
    ck_assert_int_eq(vit_atomic_close(NULL, NULL, path, VIT_OK), VIT_EINVAL);
    ck_assert_str_eq(vit_last_error(), "vit_atomic_close: f is NULL");
}
END_TEST

/* Two writers of the same path at once, interleaved: each has its own
 * temporary, both succeed, the later rename wins whole.  (With one fixed
 * temporary name the second would truncate the first's file and the
 * first's rename would take it away from under the second.) */
START_TEST(two_writers_of_one_path)
{
    const char *path = in_dir("same.txt");
    FILE *a, *b;
    char *ta, *tb;
    ck_assert_int_eq(vit_atomic_begin(NULL, path, &a, &ta), VIT_OK);
    ck_assert_int_eq(vit_atomic_begin(NULL, path, &b, &tb), VIT_OK);
    ck_assert_str_ne(ta, tb);
    fputs("from the first writer", a);
    fputs("from the second", b);
    ck_assert_int_eq(vit_atomic_end(NULL, a, ta, path, VIT_OK, NULL), VIT_OK);
    ck_assert(file_is(path, "from the first writer"));
    ck_assert_int_eq(vit_atomic_end(NULL, b, tb, path, VIT_OK, NULL), VIT_OK);
    ck_assert(file_is(path, "from the second"));
    ck_assert_int_eq(fu_count_entries(dir), 1);
}
END_TEST

/* Threads writing files of one folder at the same time, two of them the
 * same path: every write succeeds and every file is whole at the end. */
enum { THREADS = 4, ROUNDS = 10 };

typedef struct job {
    const char *path;
    char text[64];
    int failures;
} job;

static void *writer(void *arg)
{
    job *j = arg;
    fill_ctx x = {j->text, 0, 0};
    for (int r = 0; r < ROUNDS; r++)
        j->failures += vit_atomic_write(NULL, j->path, fill, &x) != VIT_OK;
    return NULL;
}

START_TEST(threads_in_one_folder)
{
    job jobs[THREADS];
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        /* threads 0 and 1 share shared.txt */
        jobs[t].path = t < 2 ? in_dir("shared.txt") : in_dir(t == 2 ? "two.txt" : "three.txt");
        snprintf(jobs[t].text, sizeof jobs[t].text, "written by thread %d, all of it", t);
        jobs[t].failures = 0;
    }
    for (int t = 0; t < THREADS; t++)
        ck_assert_int_eq(pthread_create(&th[t], NULL, writer, &jobs[t]), 0);
    for (int t = 0; t < THREADS; t++)
        ck_assert_int_eq(pthread_join(th[t], NULL), 0);
    for (int t = 0; t < THREADS; t++)
        ck_assert_int_eq(jobs[t].failures, 0);
    ck_assert(file_is(jobs[0].path, jobs[0].text) || file_is(jobs[0].path, jobs[1].text));
    ck_assert(file_is(jobs[2].path, jobs[2].text));
    ck_assert(file_is(jobs[3].path, jobs[3].text));
    ck_assert_int_eq(fu_count_entries(dir), 3);
}
END_TEST

/* What a killed writer leaves is found by its pattern, and only that. */
START_TEST(temporaries_removed_by_pattern)
{
    const char *path = in_dir("last.ckpt");
    fu_write(path, "ckpt", 4);
    fu_write(in_dir("last.ckpt.tmp.Zq81xB"), "", 0);
    fu_write(in_dir("last.ckpt.tmp.long-name"), "", 0);
    fu_write(in_dir("other.tmp.Zq81xB"), "", 0);
    FILE *f;
    char *tmp;
    ck_assert_int_eq(vit_atomic_begin(NULL, path, &f, &tmp), VIT_OK);
    /* the writer's own temporary has the pattern too */
    ck_assert_int_eq(fu_count_entries(dir), 5);
    fclose(f);
    free(tmp);
    vit_atomic_remove_temporaries(path);
    ck_assert_int_eq(fu_count_entries(dir), 3);
    ck_assert_int_eq(access(in_dir("last.ckpt.tmp.long-name"), F_OK), 0);
    ck_assert_int_eq(access(in_dir("other.tmp.Zq81xB"), F_OK), 0);
    ck_assert(file_is(path, "ckpt"));
}
END_TEST

/* keep: the file written whole, then open for appending under its name. */
START_TEST(kept_open_for_appending)
{
    const char *path = in_dir("log.txt");
    fu_write(path, "old log\n", 8);
    FILE *f, *kept = (FILE *)1;
    char *tmp;
    ck_assert_int_eq(vit_atomic_begin(NULL, path, &f, &tmp), VIT_OK);
    fputs("header\n", f);
    ck_assert_int_eq(vit_atomic_end(NULL, f, tmp, path, VIT_OK, &kept), VIT_OK);
    ck_assert_ptr_nonnull(kept);
    ck_assert(file_is(path, "header\n"));
    fputs("row 1\n", kept);
    ck_assert_int_eq(fflush(kept), 0);
    ck_assert(file_is(path, "header\nrow 1\n"));
    ck_assert_int_eq(fclose(kept), 0);
    /* a failure: nothing kept open, the file as it was */
    ck_assert_int_eq(vit_atomic_begin(NULL, path, &f, &tmp), VIT_OK);
    fputs("other\n", f);
    ck_assert_int_eq(vit_atomic_end(NULL, f, tmp, path, VIT_EFORMAT, &kept), VIT_EFORMAT);
    ck_assert_ptr_null(kept);
    ck_assert(file_is(path, "header\nrow 1\n"));
    ck_assert_int_eq(fu_count_entries(dir), 1);
}
END_TEST

/* ---- metrics.csv ------------------------------------------------------ */

static vit_epoch_metrics row(unsigned long long epoch)
{
    vit_epoch_metrics m = {.epoch = epoch, .train_loss = 1.0 / (double)epoch, .train_acc = 0.5,
                           .test_loss = 0.25, .test_acc = 0.75, .lr = 0.001,
                           .seconds = 10.0 * (double)epoch, .val_acc = -1, .val_loss = -1};
    return m;
}

static int metrics_rows(const char *path)
{
    vit_metrics_table t;
    int rc = vit_metrics_read(path, &t);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    int rows = t.rows;
    for (int i = 0; i < rows; i++)
        ck_assert_double_eq(t.epoch[i], i + 1);
    vit_metrics_free(&t);
    return rows;
}

/* A run killed while it wrote a row can leave the row without its end (a
 * power cut, or a kill inside the write): the resume keeps the whole rows
 * only, so the next row does not land on the cut one's line. */
START_TEST(resume_drops_a_cut_row)
{
    const char *csv = in_dir("metrics.csv");
    const char *head = "epoch,train_loss,train_acc,test_loss,test_acc,lr,seconds\n";
    char text[512];
    snprintf(text, sizeof text, "%s%s%s%s", head, "1,1.0,0.5,0.25,0.75,0.001,10.000\n",
             "2,0.5,0.5,0.25,0.75,0.001,20.000\n", "3,0.3,0.5,0.25,0.75,0.001,3");
    fu_write(csv, text, strlen(text));
    FILE *f;
    double seconds;
    /* the checkpoint is at epoch 3; the row for it was cut */
    ck_assert_msg(vit_metrics_open(dir, in_dir("last.ckpt"), 3, 0, &f, &seconds) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_double_eq(seconds, 20.0);
    vit_epoch_metrics m = row(3);
    ck_assert_int_eq(vit_metrics_append(f, csv, &m, 0), VIT_OK);
    fclose(f);
    ck_assert_int_eq(metrics_rows(csv), 3);
    ck_assert_int_eq(fu_count_entries(dir), 1);
}
END_TEST

/* A row that does not fit (a file-size limit, as a full disk) is cut back
 * off: the file ends with the row before and reads; the run's next row,
 * once there is room, follows it with no gap. */
START_TEST(failed_row_cut_back)
{
    const char *csv = in_dir("metrics.csv");
    FILE *f;
    double seconds;
    ck_assert_int_eq(vit_metrics_open(dir, NULL, 0, 0, &f, &seconds), VIT_OK);
    for (unsigned long long e = 1; e <= 2; e++) {
        vit_epoch_metrics m = row(e);
        ck_assert_int_eq(vit_metrics_append(f, csv, &m, 0), VIT_OK);
    }
    struct stat st;
    ck_assert_int_eq(stat(csv, &st), 0);
    off_t two_rows = st.st_size;
    struct rlimit was, lim;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &was), 0);
    lim = was;
    lim.rlim_cur = (rlim_t)two_rows + 10; /* room for part of a row */
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    vit_epoch_metrics m = row(3);
    int rc = vit_metrics_append(f, csv, &m, 0);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &was), 0);
    signal(SIGXFSZ, old_handler);
    ck_assert_int_eq(rc, VIT_EIO);
    ck_assert_msg(strstr(vit_last_error(), "epoch 3") && strstr(vit_last_error(), strerror(EFBIG)),
                  "%s", vit_last_error());
    ck_assert_int_eq(stat(csv, &st), 0);
    ck_assert_int_eq(st.st_size, two_rows);
    ck_assert_int_eq(metrics_rows(csv), 2);
    ck_assert_int_eq(vit_metrics_append(f, csv, &m, 0), VIT_OK);
    fclose(f);
    ck_assert_int_eq(metrics_rows(csv), 3);
    size_t n;
    unsigned char *b = fu_read(csv, &n);
    ck_assert_ptr_null(memchr(b, 0, n)); /* no hole of zeros where the cut row was */
    free(b);
}
END_TEST

static Suite *atomic_suite(void)
{
    Suite *s = suite_create("atomic");
    TCase *tc = tcase_create("atomic");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, write_replaces_whole);
    tcase_add_test(tc, failed_fill_keeps_old_and_leaves_nothing);
    tcase_add_test(tc, mode_of_replaced_file_kept);
    tcase_add_test(tc, full_disk_keeps_old);
    tcase_add_test(tc, missing_folder_named);
    tcase_add_test(tc, two_writers_of_one_path);
    tcase_add_test(tc, threads_in_one_folder);
    tcase_add_test(tc, temporaries_removed_by_pattern);
    tcase_add_test(tc, kept_open_for_appending);
    tcase_add_test(tc, resume_drops_a_cut_row);
    tcase_add_test(tc, failed_row_cut_back);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return fu_run_suite(atomic_suite, "/tmp/vit_test_atomic_XXXXXX"); }

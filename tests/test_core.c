/* The conventions every part of the library and its users share
 * (vit/core.h, vit/atomic_file.h): the public error setter and the one
 * atomic file writer. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "file_util.h"
#include "vit/atomic_file.h"
#include "vit/core.h"
#include "vit/dist.h"
#include "vit/model.h"

START_TEST(set_error_records_and_returns)
{
    ck_assert_int_eq(vit_set_error(VIT_EFORMAT, "my_op: k = %d is odd", 7), VIT_EFORMAT);
    ck_assert_str_eq(vit_last_error(), "my_op: k = 7 is odd");
    /* wrapping the previous message in a new one */
    ck_assert_int_eq(vit_set_error(VIT_EIO, "loading x: %s", vit_last_error()), VIT_EIO);
    ck_assert_str_eq(vit_last_error(), "loading x: my_op: k = 7 is odd");
    /* any code comes back unchanged, even one the library does not define */
    ck_assert_int_eq(vit_set_error(-99, "%s", "other"), -99);
    /* a long message is cut, not overrun */
    char big[2000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    vit_set_error(VIT_EINVAL, "%s", big);
    ck_assert_uint_eq(strlen(vit_last_error()), 511);
}
END_TEST

/* The message of a refused value of key: "KEY: PROBLEM", quoting it. */
static void assert_names_key(const char *key, const char *bad)
{
    const char *msg = vit_last_error();
    size_t k = strlen(key);
    ck_assert_msg(strncmp(msg, key, k) == 0 && strncmp(msg + k, ": ", 2) == 0 && strlen(msg) > k + 2,
                  "%s = '%s': message '%s' does not start with '%s: '", key, bad, msg, key);
    ck_assert_msg(strstr(msg + k + 2, bad) != NULL, "%s: '%s' lacks the value", key, msg);
}

/* vit_config_set's (and vit_train_config_set's) message for a known key's
 * bad value is "KEY: PROBLEM" (vit/model.h), which the tools rely on to
 * name the flag instead: every key of both tables, with a value no kind
 * of field accepts and one that breaks numbers. */
START_TEST(config_set_message_names_key_first)
{
    static const char *const bad[] = {"x", "1x", ""};
    const char *key;
    int n = 0;
    for (int i = 0; vit_config_key_help(i, &key); i++, n++)
        for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
            vit_config c, before;
            vit_config_default(&c);
            before = c;
            ck_assert_int_eq(vit_config_set(&c, key, bad[j]), VIT_EINVAL);
            assert_names_key(key, bad[j]);
            ck_assert(memcmp(&c, &before, sizeof c) == 0);
        }
    ck_assert_int_gt(n, 15);
    int nt = 0;
    for (int i = 0; vit_train_config_key_help(i, &key); i++, nt++)
        for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
            vit_train_config c, before;
            vit_train_config_default(&c);
            before = c;
            ck_assert_int_eq(vit_train_config_set(&c, key, bad[j]), VIT_EINVAL);
            assert_names_key(key, bad[j]);
            ck_assert(memcmp(&c, &before, sizeof c) == 0);
        }
    ck_assert_int_gt(nt, 30);
    /* An unknown key is the other kind of message. */
    vit_config c;
    vit_config_default(&c);
    ck_assert_int_eq(vit_config_set(&c, "colour", "1"), VIT_EINVAL);
    ck_assert_str_eq(vit_last_error(), "unknown config key 'colour'");
}
END_TEST

START_TEST(atomic_file_replaces_whole)
{
    const char *path = fu_path("a.txt");
    fu_write(path, "old", 3);
    ck_assert_int_eq(chmod(path, 0644), 0); /* the new file keeps it, whatever the umask */
    FILE *f;
    char *tmp;
    ck_assert_int_eq(vit_atomic_open(path, &f, &tmp), VIT_OK);
    fputs("new contents", f);
    /* before the close the old file is still there, whole */
    size_t n;
    unsigned char *b = fu_read(path, &n);
    ck_assert_uint_eq(n, 3);
    free(b);
    ck_assert_int_eq(vit_atomic_close(f, tmp, path, VIT_OK), VIT_OK);
    b = fu_read(path, &n);
    ck_assert_uint_eq(n, 12);
    ck_assert_int_eq(memcmp(b, "new contents", 12), 0);
    free(b);
    struct stat s;
    ck_assert_int_eq(stat(path, &s), 0);
    ck_assert_int_eq(s.st_mode & 0777, 0644);
}
END_TEST

START_TEST(atomic_file_failure_keeps_old)
{
    const char *path = fu_path("b.txt");
    fu_write(path, "keep", 4);
    int before = fu_count_entries(fu_suite_dir);
    FILE *f;
    char *tmp;
    ck_assert_int_eq(vit_atomic_open(path, &f, &tmp), VIT_OK);
    fputs("half", f);
    /* the caller's own failure comes back as it was, the old file stays and
     * no temporary is left beside it */
    ck_assert_int_eq(vit_atomic_close(f, tmp, path, VIT_ENUM), VIT_ENUM);
    size_t n;
    unsigned char *b = fu_read(path, &n);
    ck_assert_uint_eq(n, 4);
    ck_assert_int_eq(memcmp(b, "keep", 4), 0);
    free(b);
    ck_assert_int_eq(fu_count_entries(fu_suite_dir), before);
}
END_TEST

START_TEST(atomic_file_missing_folder)
{
    const char *path = fu_path("no/such/folder/c.txt");
    FILE *f = (FILE *)1;
    char *tmp = (char *)1;
    ck_assert_int_eq(vit_atomic_open(path, &f, &tmp), VIT_EIO);
    ck_assert_ptr_null(f);
    ck_assert_ptr_null(tmp);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "no/such/folder/c.txt"));
}
END_TEST

/* The buckets' bookkeeping in a job of one rank (no MPI sums to make):
 * every value scaled exactly once, whether reported or left to finish,
 * and misuse refused by name. */
START_TEST(dist_buckets_scale_each_value_once)
{
    vit_real x[10];
    for (int i = 0; i < 10; i++)
        x[i] = (vit_real)(i + 1);
    /* 3 values a bucket: [7, 10), [4, 7), [1, 4), [0, 1) */
    vit_dist_buckets *b = vit_dist_buckets_new(x, 10, 3 * sizeof *x);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(vit_dist_buckets_finish(b), VIT_EINVAL); /* nothing started */
    ck_assert_int_eq(vit_dist_buckets_start(b, (vit_real)0.5), VIT_OK);
    ck_assert_int_eq(vit_dist_buckets_start(b, (vit_real)0.5), VIT_EINVAL);
    vit_dist_buckets_ready(b, 8, 2); /* bucket 0 not complete: nothing moves */
    ck_assert(x[8] == 9 && x[9] == 10);
    vit_dist_buckets_ready(b, 6, 2); /* completes bucket 0 (and one of bucket 1) */
    ck_assert(x[7] == (vit_real)4 && x[9] == 5 && x[6] == 7);
    vit_dist_buckets_ready(b, 0, 2); /* bucket 3 is done but waits its turn */
    ck_assert(x[0] == 1);
    ck_assert_int_eq(vit_dist_buckets_finish(b), VIT_OK);
    for (int i = 0; i < 10; i++)
        ck_assert_msg(x[i] == (vit_real)(i + 1) / 2, "x[%d] = %g", i, (double)x[i]);
    ck_assert_int_eq(vit_dist_buckets_start(b, 1), VIT_OK);
    vit_dist_buckets_ready(b, 9, 2); /* past the end */
    ck_assert_int_eq(vit_dist_buckets_finish(b), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "outside the buffer of 10"));
    vit_dist_buckets_free(b);
    ck_assert_ptr_null(vit_dist_buckets_new(NULL, 4, 0));
    ck_assert_ptr_null(vit_dist_buckets_new(x, 10, 2)); /* under one value */
    vit_dist_buckets_free(NULL);
}
END_TEST

static Suite *core_suite(void)
{
    Suite *s = suite_create("core");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, set_error_records_and_returns);
    tcase_add_test(tc, config_set_message_names_key_first);
    tcase_add_test(tc, atomic_file_replaces_whole);
    tcase_add_test(tc, dist_buckets_scale_each_value_once);
    tcase_add_test(tc, atomic_file_failure_keeps_old);
    tcase_add_test(tc, atomic_file_missing_folder);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return fu_run_suite(core_suite, "/tmp/vit_test_core_XXXXXX"); }

/* Files and temporary folders for the suites; see file_util.h. */
#include "file_util.h"

#include <check.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void fu_mkdtemp(char *path, size_t cap, const char *templ)
{
    ck_assert_msg((size_t)snprintf(path, cap, "%s", templ) < cap, "template %s too long", templ);
    ck_assert_msg(mkdtemp(path) != NULL, "mkdtemp %s failed", templ);
}

void fu_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return;
    if (!S_ISDIR(st.st_mode)) {
        unlink(path);
        return;
    }
    DIR *d = opendir(path);
    struct dirent *e;
    char sub[1024];
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        fu_remove_tree(sub);
    }
    if (d != NULL)
        closedir(d);
    rmdir(path);
}

unsigned char *fu_read(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    ck_assert_int_ge(len, 0);
    rewind(f);
    unsigned char *b = malloc((size_t)len + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

void fu_write(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

int fu_count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open folder %s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

char fu_suite_dir[64];

const char *fu_path(const char *rel)
{
    static char buf[8][512];
    static int next;
    char *b = buf[next++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", fu_suite_dir, rel);
    return b;
}

int fu_run_suite(Suite *(*make)(void), const char *templ)
{
    if ((size_t)snprintf(fu_suite_dir, sizeof fu_suite_dir, "%s", templ) >= sizeof fu_suite_dir ||
        mkdtemp(fu_suite_dir) == NULL) {
        perror(templ);
        return EXIT_FAILURE;
    }
    SRunner *sr = srunner_create(make());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    fu_remove_tree(fu_suite_dir);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

void fu_edit_header(const char *src, const char *dst, const char *from, const char *to)
{
    size_t n;
    unsigned char *b = fu_read(src, &n);
    size_t hl = 0;
    for (int k = 7; k >= 0; k--)
        hl = hl << 8 | b[k];
    char *h = malloc(hl + 1);
    ck_assert_ptr_nonnull(h);
    memcpy(h, b + 8, hl);
    h[hl] = 0;
    char *at = strstr(h, from);
    ck_assert_msg(at != NULL, "%s: header has no '%s'", src, from);
    size_t nl = hl - strlen(from) + strlen(to);
    unsigned char *o = malloc(8 + nl + (n - 8 - hl));
    ck_assert_ptr_nonnull(o);
    for (int k = 0; k < 8; k++)
        o[k] = (unsigned char)((uint64_t)nl >> (8 * k));
    size_t pre = (size_t)(at - h);
    memcpy(o + 8, h, pre);
    memcpy(o + 8 + pre, to, strlen(to));
    memcpy(o + 8 + pre + strlen(to), at + strlen(from), hl - pre - strlen(from));
    memcpy(o + 8 + nl, b + 8 + hl, n - 8 - hl);
    fu_write(dst, o, 8 + nl + (n - 8 - hl));
    free(o);
    free(h);
    free(b);
}

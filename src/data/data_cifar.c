/* CIFAR-10 and CIFAR-100 in their "binary version" (the one C programs
 * read): fixed-size records of label byte(s) then a 32x32 colour image
 * stored channel-planar (1024 red bytes, 1024 green, 1024 blue, each row by
 * row from the top).  The records are turned into the library's [H, W, C]
 * layout.  A file is read whole (it is at most what its size says, checked
 * to be a whole number of records before anything else), so memory follows
 * the file, never a count read from it. */
#include "vit/data.h"
#include "data_internal.h"
#include "error.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CIFAR_SIDE 32
#define CIFAR_PLANE (CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_IMAGE (3 * CIFAR_PLANE)
#define CIFAR10_BATCHES 5

/* What a layout's files look like. */
typedef struct {
    int label_bytes; /* 1 (CIFAR-10) or 2 (CIFAR-100: coarse, fine) */
    int label_at;    /* which of them is the label used */
    int classes;
    const char *names_file; /* class names, one a line */
} cifar_kind;

/* The size of the regular file path; hint follows "missing" in the message
 * when it does not exist. */
static int file_size(const char *path, long long *size, const char *hint)
{
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT)
        return vit_fail(VIT_EIO, "%s: missing%s", path, hint);
    if (stat(path, &st) != 0)
        return vit_fail(VIT_EIO, "%s: cannot stat (%s)", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return vit_fail(VIT_EIO, "%s: not a regular file", path);
    *size = (long long)st.st_size;
    return VIT_OK;
}

/* The records of one file, as many as its size says. */
static int count_records(const char *path, const cifar_kind *k, int *records)
{
    long long size, rec = k->label_bytes + CIFAR_IMAGE;
    int rc = file_size(path, &size, "");
    if (rc)
        return rc;
    if (size == 0 || size % rec != 0)
        return vit_fail(VIT_EFORMAT, "%s: %lld bytes, not a whole number of %lld-byte records "
                        "(truncated or not a CIFAR%s batch)", path, size, rec,
                        k->label_bytes == 1 ? "-10" : "-100");
    if (size / rec > INT_MAX)
        return vit_fail(VIT_EFORMAT, "%s: too many records", path);
    *records = (int)(size / rec);
    return VIT_OK;
}

/* Appends the records of path to ds from image index at; labels outside
 * 0..classes-1 are refused naming the record. */
static int read_records(const char *path, const cifar_kind *k, int n, vit_dataset *ds, int at)
{
    size_t rec = (size_t)k->label_bytes + CIFAR_IMAGE;
    unsigned char *buf = malloc(rec);
    FILE *fp = fopen(path, "rb");
    int rc = VIT_OK;
    if (fp == NULL || buf == NULL) {
        rc = fp == NULL ? vit_fail(VIT_EIO, "%s: cannot open (%s)", path, strerror(errno))
                        : vit_fail(VIT_ENOMEM, "%s: out of memory", path);
        n = 0;
    }
    for (int i = 0; i < n && rc == VIT_OK; i++) {
        if (fread(buf, 1, rec, fp) != rec) {
            rc = vit_fail(ferror(fp) ? VIT_EIO : VIT_EFORMAT, "%s: %s at record %d", path,
                          ferror(fp) ? "read error" : "shorter than its size said", i);
            break;
        }
        int label = buf[k->label_at];
        if (label >= k->classes) {
            rc = vit_fail(VIT_EFORMAT, "%s: record %d has label %d, expected 0..%d", path, i,
                          label, k->classes - 1);
            break;
        }
        ds->labels[at + i] = label;
        vit_real *dst = ds->images + (size_t)(at + i) * CIFAR_IMAGE;
        const unsigned char *src = buf + k->label_bytes;
        for (int p = 0; p < CIFAR_PLANE; p++)
            for (int ch = 0; ch < 3; ch++)
                dst[3 * p + ch] = (vit_real)src[ch * CIFAR_PLANE + p] / (vit_real)255;
    }
    if (fp != NULL)
        fclose(fp);
    free(buf);
    return rc;
}

/* Reads the files paths[0..n-1], in order, into one set. */
static int read_set(char **paths, int n, const cifar_kind *k, vit_dataset *ds)
{
    int counts[CIFAR10_BATCHES], total = 0, rc = VIT_OK;
    for (int i = 0; i < n && rc == VIT_OK; i++) {
        rc = count_records(paths[i], k, &counts[i]);
        if (rc == VIT_OK && counts[i] > INT_MAX - total)
            rc = vit_fail(VIT_EFORMAT, "%s: too many records", paths[i]);
        if (rc == VIT_OK)
            total += counts[i];
    }
    if (rc == VIT_OK)
        rc = vit_data_internal_alloc(ds, total, CIFAR_SIDE, CIFAR_SIDE, 3, paths[0]);
    for (int i = 0, at = 0; i < n && rc == VIT_OK; at += counts[i], i++)
        rc = read_records(paths[i], k, counts[i], ds, at);
    if (rc == VIT_OK)
        ds->classes = k->classes;
    else
        vit_dataset_free(ds);
    return rc;
}

/* One name a line, surrounding spaces dropped, blank lines skipped; there
 * must be exactly classes of them.  A missing file means numbered classes. */
static int read_names(const char *dir, const cifar_kind *k, char ***out)
{
    char *path = vit_data_internal_join(dir, k->names_file, "");
    char line[256];
    int n = 0, rc = VIT_OK;
    FILE *fp;
    *out = NULL;
    if (path == NULL)
        return vit_fail(VIT_ENOMEM, "%s: out of memory", dir);
    if ((fp = fopen(path, "r")) == NULL) {
        free(path);
        *out = vit_data_internal_numbers(k->classes);
        return *out ? VIT_OK : vit_fail(VIT_ENOMEM, "%s: out of memory", dir);
    }
    char **names = calloc((size_t)k->classes, sizeof *names);
    if (names == NULL)
        rc = vit_fail(VIT_ENOMEM, "%s: out of memory", path);
    while (rc == VIT_OK && fgets(line, sizeof line, fp) != NULL) {
        size_t len = strlen(line);
        char *s = line;
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            rc = vit_fail(VIT_EFORMAT, "%s: line %d is longer than %d bytes", path, n + 1,
                          (int)sizeof line - 2);
            break;
        }
        while (len > 0 && isspace((unsigned char)line[len - 1]))
            line[--len] = '\0';
        while (isspace((unsigned char)*s))
            s++;
        if (*s == '\0')
            continue;
        if (n == k->classes)
            rc = vit_fail(VIT_EFORMAT, "%s: more than %d class names", path, k->classes);
        else if ((names[n++] = strdup(s)) == NULL)
            rc = vit_fail(VIT_ENOMEM, "%s: out of memory", path);
    }
    if (rc == VIT_OK && ferror(fp))
        rc = vit_fail(VIT_EIO, "%s: read error", path);
    if (rc == VIT_OK && n < k->classes)
        rc = vit_fail(VIT_EFORMAT, "%s: %d class names, expected %d", path, n, k->classes);
    fclose(fp);
    free(path);
    if (rc != VIT_OK && names != NULL) {
        for (int i = 0; i < k->classes; i++)
            free(names[i]);
        free(names);
        names = NULL;
    }
    *out = names;
    return rc;
}

/* Both sets and their class names (each set gets its own copy). */
static int load_pair(const char *dir, char **train_paths, int n_train, char *test_path,
                     const cifar_kind *k, vit_dataset *train, vit_dataset *test)
{
    int rc = read_set(train_paths, n_train, k, train);
    if (rc == VIT_OK)
        rc = read_set(&test_path, 1, k, test);
    if (rc == VIT_OK)
        rc = read_names(dir, k, &train->class_names);
    if (rc == VIT_OK)
        rc = read_names(dir, k, &test->class_names);
    if (rc != VIT_OK) {
        vit_dataset_free(train);
        vit_dataset_free(test);
    }
    return rc;
}

int vit_data_load_cifar(const char *dir, int coarse, vit_dataset *train, vit_dataset *test)
{
    static const char *fn = "vit_data_load_cifar";
    static const cifar_kind c10 = {1, 0, 10, "batches.meta.txt"};
    static const cifar_kind c100_fine = {2, 1, 100, "fine_label_names.txt"};
    static const cifar_kind c100_coarse = {2, 0, 20, "coarse_label_names.txt"};
    char *paths[CIFAR10_BATCHES + 1] = {NULL};
    int rc, n = 0;
    long long size;
    if ((rc = vit_data_internal_begin(fn, "dir", dir, train, test)))
        return rc;
    char *probe = vit_data_internal_join(dir, "train.bin", "");
    if (probe == NULL)
        return vit_fail(VIT_ENOMEM, "%s: out of memory", fn);
    struct stat st;
    int is100 = stat(probe, &st) == 0;
    free(probe);
    if (is100) {
        paths[0] = vit_data_internal_join(dir, "train.bin", "");
        paths[1] = vit_data_internal_join(dir, "test.bin", "");
        n = 2;
    } else {
        for (int i = 0; i < CIFAR10_BATCHES; i++) {
            char name[32];
            snprintf(name, sizeof name, "data_batch_%d.bin", i + 1);
            paths[i] = vit_data_internal_join(dir, name, "");
        }
        paths[CIFAR10_BATCHES] = vit_data_internal_join(dir, "test_batch.bin", "");
        n = CIFAR10_BATCHES + 1;
    }
    rc = VIT_OK;
    for (int i = 0; i < n && rc == VIT_OK; i++)
        if (paths[i] == NULL)
            rc = vit_fail(VIT_ENOMEM, "%s: out of memory", fn);
    /* Every file must be there before any is read, so that a partial
     * download is named at once. */
    for (int i = 0; i < n && rc == VIT_OK; i++)
        rc = file_size(paths[i], &size,
                       is100 ? " (CIFAR-100 needs train.bin and test.bin)"
                             : " (CIFAR-10 needs data_batch_1.bin .. data_batch_5.bin and "
                               "test_batch.bin)");
    if (rc == VIT_OK && !is100 && coarse)
        rc = vit_fail(VIT_EINVAL, "%s: %s: CIFAR-10 has no coarse labels", fn, dir);
    if (rc == VIT_OK)
        rc = load_pair(dir, paths, n - 1, paths[n - 1],
                       is100 ? (coarse ? &c100_coarse : &c100_fine) : &c10, train, test);
    for (int i = 0; i < n; i++)
        free(paths[i]);
    return rc;
}

/*
 * Shared helpers of the fuzz harnesses (header-only, static functions).
 *
 * The loaders take paths, not buffers, so each harness writes its input to
 * files in a private scratch folder (under /dev/shm when it exists, so the
 * writes stay in memory) and calls the loader on them.  The folder is made
 * once per process and removed at exit.
 *
 * FUZZ_CHECK states a property the library documents; a violation aborts,
 * which libFuzzer (and the replay driver) report as a crash.
 */
#ifndef VIT_FUZZ_UTIL_H
#define VIT_FUZZ_UTIL_H

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vit/core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: property failed: %s (last error: %s)\n", __FILE__, \
                    __LINE__, #cond, vit_last_error());                               \
            abort();                                                                  \
        }                                                                             \
    } while (0)

/* Every failing call must return a known code and leave a message. */
#define FUZZ_CHECK_FAILURE(rc)                                                 \
    do {                                                                       \
        FUZZ_CHECK((rc) == VIT_EINVAL || (rc) == VIT_ENOMEM || (rc) == VIT_EIO || \
                   (rc) == VIT_EFORMAT || (rc) == VIT_ENUM);                   \
        FUZZ_CHECK(vit_last_error()[0] != '\0');                               \
    } while (0)

static char fuzz_root[256];

/* Removes path and, if it is a folder, everything below it. */
static inline void fuzz_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d != NULL && (e = readdir(d)) != NULL) {
            char sub[1024];
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) < (int)sizeof sub)
                fuzz_remove_tree(sub);
        }
        if (d != NULL)
            closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static inline void fuzz_cleanup(void)
{
    if (fuzz_root[0] != '\0')
        fuzz_remove_tree(fuzz_root);
}

/* The scratch folder of this process, created on first use. */
static inline const char *fuzz_dir(void)
{
    if (fuzz_root[0] == '\0') {
        struct stat st;
        const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) &&
                                   access("/dev/shm", W_OK) == 0
                               ? "/dev/shm"
                               : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        snprintf(fuzz_root, sizeof fuzz_root, "%s/vit-fuzz-XXXXXX", base);
        if (mkdtemp(fuzz_root) == NULL) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz_cleanup);
    }
    return fuzz_root;
}

/* "<scratch>/name" in buf (cap bytes). */
static inline const char *fuzz_path(char *buf, size_t cap, const char *name)
{
    if (snprintf(buf, cap, "%s/%s", fuzz_dir(), name) >= (int)cap)
        abort(); /* the scratch paths are short; this cannot happen */
    return buf;
}

/* Makes the folder "<scratch>/name" (parents must exist). */
static inline void fuzz_mkdir(const char *name)
{
    char p[512];
    fuzz_path(p, sizeof p, name);
    if (mkdir(p, 0755) != 0) {
        struct stat st;
        if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
            perror(p);
            abort();
        }
    }
}

/* Writes size bytes to the file at path, replacing it. */
static inline void fuzz_write_file(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL || (size > 0 && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* Little-endian u16 at p (for the length prefixes that split an input). */
static inline size_t fuzz_le16(const uint8_t *p) { return (size_t)p[0] | (size_t)p[1] << 8; }

#endif

/*
 * A main() for the fuzz harnesses in builds without libFuzzer: runs
 * LLVMFuzzerTestOneInput once on every file named on the command line and
 * on every file inside every folder named there (the seed corpora and the
 * committed regression inputs).  meson test runs it in every build, so the
 * sanitizer and valgrind passes replay the inputs too.  A harness that
 * finds a broken property aborts, which fails the test.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (f == NULL || fstat(fileno(f), &st) != 0) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        if (f != NULL)
            fclose(f);
        return 0;
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    size_t got = buf != NULL ? fread(buf, 1, n, f) : 0;
    fclose(f);
    if (buf == NULL || got != n) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        free(buf);
        return 0;
    }
    /* libFuzzer hands the harness a buffer of exactly the input's size; a
     * copy of that size lets the sanitizers see any read past its end. */
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 1;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file of dir in name order; returns how many, or -1. */
static int run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char **names = NULL;
    int n = 0, cap = 0, done = 0, bad = 0;
    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **p = realloc(names, (size_t)cap * sizeof *p);
            if (p == NULL)
                abort();
            names = p;
        }
        if ((names[n++] = strdup(e->d_name)) == NULL)
            abort();
    }
    closedir(d);
    if (n > 1)
        qsort(names, (size_t)n, sizeof *names, cmp_names);
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (run_file(path))
                done++;
            else
                bad = 1;
        }
        free(names[i]);
    }
    free(names);
    return bad ? -1 : done;
}

int main(int argc, char **argv)
{
    int total = 0, failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (argv[i][0] == '-')
            continue; /* a libFuzzer flag: nothing to do without libFuzzer */
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s does not exist\n", argv[i]);
            failed = 1;
        } else if (S_ISDIR(st.st_mode)) {
            int n = run_dir(argv[i]);
            if (n < 0)
                failed = 1;
            else
                total += n;
            printf("%s: %d inputs\n", argv[i], n < 0 ? 0 : n);
        } else if (run_file(argv[i])) {
            total++;
        } else {
            failed = 1;
        }
    }
    printf("replayed %d inputs without a failed property\n", total);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/*
 * A run's folder: creating it, telling whether it holds another run, and
 * moving such a run aside.  Its history, OUT/metrics.csv, is written by
 * metrics_csv.c.
 */
#include "vit/train.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic_file_internal.h"
#include "error.h"
#include "train_internal.h"
#include "vit/checkpoint.h"

/* Creates the output folder dir (mkdir -p), proves it writable, and checks
 * that ckpt, the checkpoint path inside it, is free or a file. */
int vit_run_dir_make(const char *dir, const char *ckpt)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return vit_fail(VIT_EINVAL, "vit_train_run: out_dir is longer than %d bytes",
                        (int)sizeof path - 1);
    /* mkdir -p */
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(path, 0755) && errno != EEXIST)
            return vit_fail(VIT_EIO, "%s: cannot create folder: %s", path, strerror(errno));
        *p = '/';
    }
    if (mkdir(path, 0755) && errno != EEXIST)
        return vit_fail(VIT_EIO, "%s: cannot create folder: %s", path, strerror(errno));
    /* Prove we can write there before any training time is spent. */
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.write-test-XXXXXX", dir);
    int fd = mkstemp(probe);
    if (fd < 0)
        return vit_fail(VIT_EIO, "%s: output folder is not writable: %s", dir, strerror(errno));
    close(fd);
    unlink(probe);
    /* A checkpoint path that is a folder (or anything but a file) would fail
     * only at the end of the first epoch: say so now. */
    struct stat st;
    if (lstat(ckpt, &st) == 0 && !S_ISREG(st.st_mode))
        return vit_fail(VIT_EIO, "%s: exists and is not a regular file", ckpt);
    /* Only this run writes here, so temporaries of an interrupted write are
     * litter: the checkpoint's and those of the run's other files. */
    vit_ckpt_remove_temporaries(ckpt);
    static const char *const files[] = {"metrics.csv", "final.csv", "clock.txt"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char other[4200];
        if (snprintf(other, sizeof other, "%s/%s", dir, files[i]) < (int)sizeof other)
            vit_atomic_remove_temporaries(other);
    }
    return VIT_OK;
}

int vit_run_dir_taken(const char *out_dir, const char *resume)
{
    char ckpt[4200];
    struct stat have, mine;
    if (!out_dir || snprintf(ckpt, sizeof ckpt, "%s/last.ckpt", out_dir) >= (int)sizeof ckpt)
        return 0;
    if (stat(ckpt, &have) != 0 || !S_ISREG(have.st_mode))
        return 0;
    return !resume || stat(resume, &mine) != 0 || mine.st_dev != have.st_dev
           || mine.st_ino != have.st_ino;
}

/* --force (overwrite) into a folder holding another run: its checkpoint and
 * metrics move to the first free OUT/replaced-N (mkdir reserves the name,
 * so nothing is clobbered) before this run writes anything, so a kill at
 * any moment leaves the old run whole in one place.  Both files are
 * hard-linked there first and only then is OUT/last.ckpt unlinked (the old
 * metrics.csv is replaced by the new run's own); where hard links are not
 * supported they are renamed, the checkpoint first.  moved gets the folder
 * (empty on failure). */
/* The old run's final.csv (its reported figures), best.ckpt (its kept
 * model) and clock.txt (its time), if any, go with it. */
static int move_final(const char *dir, const char *moved)
{
    const char *names[3] = {"final.csv", "best.ckpt", "clock.txt"};
    for (int k = 0; k < 3; k++) {
        char from[4200], to[4400];
        snprintf(from, sizeof from, "%s/%s", dir, names[k]);
        snprintf(to, sizeof to, "%s/%s", moved, names[k]);
        if (access(from, F_OK) == 0 && rename(from, to))
            return vit_fail(VIT_EIO, "%s: cannot move it aside to %s: %s", from, moved,
                            strerror(errno));
    }
    return VIT_OK;
}

int vit_run_dir_set_aside(const char *dir, char *moved, size_t cap)
{
    char ckpt[4200], csv[4200], to_ckpt[4400], to_csv[4400];
    if (!moved || cap == 0)
        return vit_fail(VIT_EINVAL, "vit_run_dir_set_aside: no room for the folder's name");
    snprintf(ckpt, sizeof ckpt, "%s/last.ckpt", dir);
    snprintf(csv, sizeof csv, "%s/metrics.csv", dir);
    int made = 0;
    for (int n = 1; n < 100000 && !made; n++) {
        snprintf(moved, cap, "%s/replaced-%d", dir, n);
        made = mkdir(moved, 0755) == 0;
        if (!made && errno != EEXIST) {
            int rc = vit_fail(VIT_EIO, "%s: cannot create folder: %s", moved, strerror(errno));
            moved[0] = 0;
            return rc;
        }
    }
    if (!made) { /* every name taken: never move into a folder that holds a run */
        moved[0] = 0;
        return vit_fail(VIT_EIO, "%s: replaced-1 .. replaced-99999 all exist; remove some", dir);
    }
    snprintf(to_ckpt, sizeof to_ckpt, "%s/last.ckpt", moved);
    snprintf(to_csv, sizeof to_csv, "%s/metrics.csv", moved);
    int have_csv = access(csv, F_OK) == 0;
    int linked = link(ckpt, to_ckpt) == 0 && (!have_csv || link(csv, to_csv) == 0);
    if (linked) {
        if (unlink(ckpt))
            return vit_fail(VIT_EIO, "%s: cannot remove: %s", ckpt, strerror(errno));
        return move_final(dir, moved);
    }
    unlink(to_ckpt); /* a link that was made, if the second one failed */
    if (rename(ckpt, to_ckpt) || (have_csv && rename(csv, to_csv)))
        return vit_fail(VIT_EIO, "%s: cannot move the run there aside to %s: %s", dir, moved,
                        strerror(errno));
    return move_final(dir, moved);
}

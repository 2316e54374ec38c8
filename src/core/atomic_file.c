/* The one writer of the library's files: a temporary beside the target, the
 * contents, fsync, rename, fsync of the folder (atomic_file_internal.h).
 * vit_atomic_open / vit_atomic_close (vit/atomic_file.h) are the same
 * steps for the tools. */
#include "vit/atomic_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic_file_internal.h"
#include "error.h"

/* "WHO: 'PATH': STEP failed: REASON", or "PATH: STEP failed: REASON". */
static int failed(const char *who, const char *path, const char *step, int err)
{
    const char *why = strerror(err ? err : EIO);
    if (who)
        return vit_fail(VIT_EIO, "%s: '%s': %s failed: %s", who, path, step, why);
    return vit_fail(VIT_EIO, "%s: %s failed: %s", path, step, why);
}

int vit_atomic_begin(const char *who, const char *path, FILE **f, char **tmp)
{
    static const char suffix[] = VIT_ATOMIC_TMP_INFIX "XXXXXX";
    size_t len = strlen(path);
    *f = NULL;
    if (!(*tmp = malloc(len + sizeof suffix)))
        return who ? vit_fail(VIT_ENOMEM, "%s: '%s': out of memory", who, path)
                   : vit_fail(VIT_ENOMEM, "%s: out of memory", path);
    memcpy(*tmp, path, len);
    memcpy(*tmp + len, suffix, sizeof suffix);
    int fd = mkstemp(*tmp);
    if (fd >= 0 && (*f = fdopen(fd, "wb")))
        return VIT_OK;
    int rc = failed(who, path, "creating a temporary file beside it", errno);
    if (fd >= 0) {
        close(fd);
        unlink(*tmp);
    }
    free(*tmp);
    *tmp = NULL;
    return rc;
}

/* Makes the rename durable.  Some file systems cannot fsync a folder and
 * say EINVAL; there is nothing more to do for them.  Returns 0 or errno. */
static int sync_folder(const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t len = !slash ? 1 : slash == path ? 1 : (size_t)(slash - path);
    char *dir = malloc(len + 1);
    if (!dir)
        return ENOMEM;
    memcpy(dir, !slash ? "." : path, len);
    dir[len] = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int err = fd < 0 ? errno : 0;
    free(dir);
    if (fd >= 0) {
        if (fsync(fd) != 0 && errno != EINVAL)
            err = errno;
        close(fd);
    }
    return err;
}

int vit_atomic_end(const char *who, FILE *f, char *tmp, const char *path, int rc, FILE **keep)
{
    /* A stream error the caller did not check: its reason is errno as the
     * failed write left it, taken before anything here can change it. */
    int prior = errno;
    const char *step = NULL;
    int err = 0;
    if (keep)
        *keep = NULL;
    if (rc == VIT_OK) {
        /* mkstemp makes the file 0600: keep the mode of the file replaced
         * (a user's chmod stays), or be readable like any new file.  Best
         * effort: a mode is not worth failing a write for. */
        struct stat st;
        mode_t mode = stat(path, &st) == 0 && S_ISREG(st.st_mode) ? (st.st_mode & 07777) : 0644;
        /* Each step runs only if every one before it worked. */
        if (ferror(f))
            step = "writing", err = prior;
        else if (fflush(f) != 0)
            step = "flushing", err = errno;
        else if (fsync(fileno(f)) != 0)
            step = "fsync", err = errno;
        else
            (void)fchmod(fileno(f), mode);
    }
    if (rc == VIT_OK && !step && keep) {
        if (rename(tmp, path) != 0) {
            step = "renaming the temporary file over it", err = errno;
        } else {
            *keep = f;
            f = NULL;
        }
    }
    if (f && fclose(f) != 0 && rc == VIT_OK && !step)
        step = "closing", err = errno;
    if (rc == VIT_OK && !step && !keep && rename(tmp, path) != 0)
        step = "renaming the temporary file over it", err = errno;
    if (rc != VIT_OK || step) {
        unlink(tmp);
        free(tmp);
        return rc != VIT_OK ? rc : failed(who, path, step, err);
    }
    free(tmp);
    if ((err = sync_folder(path)) != 0) {
        rc = failed(who, path, "fsync of its folder (the new file is in place)", err);
        if (keep) {
            fclose(*keep);
            *keep = NULL;
        }
    }
    return rc;
}

int vit_atomic_write(const char *who, const char *path, vit_atomic_fill fill, void *ctx)
{
    FILE *f;
    char *tmp;
    int rc = vit_atomic_begin(who, path, &f, &tmp);
    return rc != VIT_OK ? rc : vit_atomic_end(who, f, tmp, path, fill(f, ctx), NULL);
}

void vit_atomic_remove_temporaries(const char *path)
{
    if (!path)
        return;
    /* path's folder: ".", "/", or everything before the last slash. */
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int dlen = !slash ? 1 : slash == path ? 1 : (int)(slash - path);
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%.*s", dlen, slash ? path : ".") >= (int)sizeof dir)
        return;
    size_t blen = strlen(base), ilen = strlen(VIT_ATOMIC_TMP_INFIX);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (strlen(n) != blen + ilen + VIT_ATOMIC_TMP_RANDOM || strncmp(n, base, blen) != 0
            || strncmp(n + blen, VIT_ATOMIC_TMP_INFIX, ilen) != 0)
            continue;
        char full[8192];
        if (snprintf(full, sizeof full, "%s/%s", dir, n) < (int)sizeof full)
            unlink(full);
    }
    closedir(d);
}

/* ---- the tools' pair (vit/atomic_file.h) ---- */

int vit_atomic_open(const char *path, FILE **f, char **tmp)
{
    if (f)
        *f = NULL;
    if (tmp)
        *tmp = NULL;
    if (!path || !f || !tmp)
        return vit_fail(VIT_EINVAL, "vit_atomic_open: %s is NULL", !path ? "path" : !f ? "f" : "tmp");
    return vit_atomic_begin(NULL, path, f, tmp);
}

int vit_atomic_close(FILE *f, char *tmp, const char *path, int rc)
{
    if (!f || !tmp || !path) {
        /* still no temporary left behind, nothing open */
        if (f)
            fclose(f);
        if (tmp)
            unlink(tmp);
        free(tmp);
        return vit_fail(VIT_EINVAL, "vit_atomic_close: %s is NULL", !f ? "f" : !tmp ? "tmp" : "path");
    }
    return vit_atomic_end(NULL, f, tmp, path, rc, NULL);
}

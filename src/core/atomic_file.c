/* Writing a file through a temporary beside it and a rename. */
#include "vit/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

int vit_atomic_open(const char *path, FILE **f, char **tmp)
{
    size_t len = strlen(path);
    *f = NULL;
    if (!(*tmp = malloc(len + 8)))
        return vit_fail(VIT_ENOMEM, "%s: out of memory", path);
    memcpy(*tmp, path, len);
    memcpy(*tmp + len, ".XXXXXX", 8);
    int fd = mkstemp(*tmp);
    if (fd >= 0 && (*f = fdopen(fd, "wb")))
        return VIT_OK;
    int rc = vit_fail(VIT_EIO, "%s: cannot create a temporary file beside it: %s", path,
                      strerror(errno));
    if (fd >= 0) {
        close(fd);
        unlink(*tmp);
    }
    free(*tmp);
    *tmp = NULL;
    return rc;
}

int vit_atomic_close(FILE *f, char *tmp, const char *path, int rc)
{
    if (rc == VIT_OK && (fflush(f) || fsync(fileno(f)) || fchmod(fileno(f), 0644)))
        rc = vit_fail(VIT_EIO, "%s: write failed: %s", path, strerror(errno));
    if (fclose(f) && rc == VIT_OK)
        rc = vit_fail(VIT_EIO, "%s: write failed: %s", path, strerror(errno));
    if (rc == VIT_OK && rename(tmp, path))
        rc = vit_fail(VIT_EIO, "%s: cannot rename the temporary file to it: %s", path,
                      strerror(errno));
    if (rc != VIT_OK) {
        unlink(tmp);
    } else {
        /* Makes the rename last; not every file system can sync a folder. */
        char *dir = strdup(path);
        int dfd = dir ? open(dirname(dir), O_RDONLY | O_DIRECTORY) : -1;
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
        free(dir);
    }
    free(tmp);
    return rc;
}

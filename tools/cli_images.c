/* What the tools that take image files share: an image made ready for a
 * model, a CSV field, and the image files of a list of files and folders. */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

vit_real *cli_model_image(const char *prog, const char *path, const vit_config *c, int fit)
{
    vit_real *px = NULL;
    int h, w, ch;
    if (vit_image_load(path, NULL, &px, &h, &w, &ch)) {
        cli_fail(prog, NULL);
        return NULL;
    }
    if (h == c->image_height && w == c->image_width && ch == c->channels)
        return px;
    if (!fit) {
        fprintf(stderr, "%s: %s: image is %dx%dx%d but the model expects %dx%dx%d (--fit "
                "converts and resizes)\n", prog, path, h, w, ch,
                c->image_height, c->image_width, c->channels);
        free(px);
        return NULL;
    }
    vit_data_fit to = {c->image_height, c->image_width, c->channels};
    free(px);
    if (vit_image_load(path, &to, &px, &h, &w, &ch)) {
        cli_fail(prog, NULL);
        return NULL;
    }
    return px;
}

int cli_run_fits(const vit_run_state *st)
{
    return st->has_data && (st->data.fit.height > 0 || st->data.fit.channels > 0);
}

void cli_csv_field(FILE *f, const char *s)
{
    size_t n = strlen(s);
    if (strpbrk(s, ",\"\r\n") == NULL && !(n > 0 && (s[0] == ' ' || s[n - 1] == ' '))) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (const char *p = s; *p; p++) {
        if (*p == '"')
            fputc('"', f);
        fputc(*p, f);
    }
    fputc('"', f);
}

/* A growing list of paths. */
typedef struct {
    char **v;
    int n, cap;
} path_list;

static int push(path_list *l, const char *s)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        char **v = realloc(l->v, (size_t)cap * sizeof *v);
        if (v == NULL)
            return 0;
        l->v = v;
        l->cap = cap;
    }
    if ((l->v[l->n] = strdup(s)) == NULL)
        return 0;
    l->n++;
    return 1;
}

static int is_image_name(const char *s)
{
    const char *dot = strrchr(s, '.');
    return dot && (strcasecmp(dot, ".png") == 0 || strcasecmp(dot, ".jpg") == 0 ||
                   strcasecmp(dot, ".jpeg") == 0);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The image files under dir into l, recursively; 0 with the reason said
 * on failure. */
static int walk(const char *prog, const char *dir, path_list *l, int *ignored, int depth)
{
    path_list names = {NULL, 0, 0};
    DIR *d = opendir(dir);
    struct dirent *e;
    int ok = 1;
    if (d == NULL) {
        fprintf(stderr, "%s: %s: cannot open folder (%s)\n", prog, dir, strerror(errno));
        return 0;
    }
    if (depth > 64) {
        closedir(d);
        fprintf(stderr, "%s: %s: folders nested more than 64 deep\n", prog, dir);
        return 0;
    }
    while (ok && (e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            ok = push(&names, e->d_name);
    closedir(d);
    if (!ok)
        fprintf(stderr, "%s: out of memory\n", prog);
    if (names.n > 1)
        qsort(names.v, (size_t)names.n, sizeof *names.v, cmp_str);
    size_t dl = strlen(dir);
    int slash = dl > 0 && dir[dl - 1] == '/';
    for (int i = 0; ok && i < names.n; i++) {
        size_t len = dl + strlen(names.v[i]) + 2;
        char *full = malloc(len);
        struct stat st;
        if (full == NULL) {
            fprintf(stderr, "%s: out of memory\n", prog);
            ok = 0;
            break;
        }
        snprintf(full, len, "%s%s%s", dir, slash ? "" : "/", names.v[i]);
        if (stat(full, &st) == 0 && S_ISDIR(st.st_mode))
            ok = walk(prog, full, l, ignored, depth + 1);
        else if (stat(full, &st) == 0 && S_ISREG(st.st_mode) && is_image_name(names.v[i]))
            ok = push(l, full) || (fprintf(stderr, "%s: out of memory\n", prog), 0);
        else
            (*ignored)++;
        free(full);
    }
    cli_paths_free(names.v, names.n);
    return ok;
}

int cli_image_paths(const char *prog, char **paths, int npaths, char ***files, int *n,
                    int *ignored)
{
    path_list l = {NULL, 0, 0};
    int ok = 1;
    *ignored = 0;
    for (int i = 0; ok && i < npaths; i++) {
        struct stat st;
        if (stat(paths[i], &st) != 0) {
            fprintf(stderr, "%s: %s: %s\n", prog, paths[i],
                    errno == ENOENT ? "no such file or folder" : strerror(errno));
            ok = 0;
        } else if (S_ISDIR(st.st_mode)) {
            ok = walk(prog, paths[i], &l, ignored, 0);
        } else if (!push(&l, paths[i])) {
            fprintf(stderr, "%s: out of memory\n", prog);
            ok = 0;
        }
    }
    if (!ok) {
        cli_paths_free(l.v, l.n);
        *files = NULL;
        *n = 0;
        return 1;
    }
    *files = l.v;
    *n = l.n;
    return 0;
}

void cli_paths_free(char **files, int n)
{
    for (int i = 0; i < n; i++)
        free(files[i]);
    free(files);
}

/*
 * vit_train's split flags (--val-split, --test-split, --split-seed): read,
 * settled against a resumed run's recorded split, and the data loaded
 * with them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "vit/vit.h"
#include "vit_train.h"

/* --image-size HxW or N (N x N) into f->fit. */
static int size_flag(const char *v, split_flags *f)
{
    char *end;
    long h = strtol(v, &end, 10), w = h;
    if (end != v && (*end == 'x' || *end == 'X')) {
        const char *p = end + 1;
        w = strtol(p, &end, 10);
        if (end == p)
            w = -1;
    }
    if (end == v || *end || *v < '0' || *v > '9' || h < 1 || h > 4096 || w < 1 || w > 4096) {
        fprintf(stderr, "%s: --image-size: expected HxW (e.g. 64x48) or N for NxN, each side "
                "1..4096, got '%s'\n", prog, v);
        return 2;
    }
    f->fit.height = (int)h;
    f->fit.width = (int)w;
    f->given |= 8;
    return 0;
}

/* The transform and the other data flags: 0 taken, 2 said, -1 none. */
static int fit_flag(const char *a, const char *v, split_flags *f)
{
    int side;
    if (strcmp(a, "--image-size") == 0)
        return size_flag(v, f);
    if (strcmp(a, "--class-names") == 0) {
        f->class_names = v;
        return 0;
    }
    if (strcmp(a, "--channels") == 0) {
        if (strcmp(v, "1") && strcmp(v, "3")) {
            fprintf(stderr, "%s: --channels: expected 1 (grayscale) or 3 (RGB), got '%s'\n",
                    prog, v);
            return 2;
        }
        f->fit.channels = atoi(v);
        f->given |= 16;
        return 0;
    }
    int h = strcmp(a, "--image-height") == 0, w = strcmp(a, "--image-width") == 0;
    if (!h && !w)
        return -1;
    if (!cli_int(prog, a, v, 1, 4096, &side))
        return 2;
    *(h ? &f->fit.height : &f->fit.width) = side;
    f->given |= h ? 32 : 64;
    return 0;
}

int split_flag(const char *a, const char *v, split_flags *f)
{
    int taken = fit_flag(a, v, f);
    if (taken >= 0)
        return taken;
    int bit = strcmp(a, "--val-split") == 0 ? 1 : strcmp(a, "--test-split") == 0 ? 2
            : strcmp(a, "--split-seed") == 0 ? 4 : 0;
    char *end;
    if (bit == 4) {
        f->s.seed = strtoull(v, &end, 10);
        if (*v < '0' || *v > '9' || *end) {
            fprintf(stderr, "%s: --split-seed: expected a whole number >= 0, got '%s'\n", prog, v);
            return 2;
        }
    } else if (bit) {
        double x = strtod(v, &end);
        if (end == v || *end || !(x > 0 && x < 1)) {
            fprintf(stderr, "%s: %s: expected a fraction between 0 and 1 (e.g. 0.2), got '%s'\n",
                    prog, a, v);
            return 2;
        }
        *(bit == 1 ? &f->s.val : &f->s.test) = x;
    }
    f->given |= bit;
    return bit ? 0 : -1;
}

/* " --val-split V --test-split T --split-seed S" of a split, fractions
 * left out when 0. */
static const char *split_words(const vit_data_split *s, char *buf, size_t cap)
{
    int n = 0;
    buf[0] = 0;
    if (s->val > 0)
        n += snprintf(buf, cap, " --val-split %g", s->val);
    if (s->test > 0 && n >= 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, " --test-split %g", s->test);
    if (n >= 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, " --split-seed %llu", s->seed);
    return buf;
}

/* The split to load with into *out: the flags given and, on a resume
 * (rec: its record, NULL for none), the run's split for those not given.
 * A given flag that differs from the run's is refused in one line naming
 * both, unless --other-data; so is --val with --val-split.  -1 to go on,
 * else the exit status. */
static int settle_split(const split_flags *f, const vit_data_split *rec, const vit_train_opts *o,
                        vit_data_split *out)
{
    *out = f->s;
    if ((f->given & 1) && o->val_count > 0) {
        fprintf(stderr, "%s: --val %d and --val-split %g: give one of them\n", prog, o->val_count,
                f->s.val);
        return 2;
    }
    if (!rec || o->other_data)
        return -1;
    if (rec->val > 0 && o->val_count > 0) {
        fprintf(stderr, "%s: --val %d: the run %s holds out --val-split %g of each class for "
                "validation; resume it without --val\n", prog, o->val_count, o->resume, rec->val);
        return 2;
    }
    out->val = f->given & 1 ? f->s.val : rec->val;
    out->test = f->given & 2 ? f->s.test : rec->test;
    out->seed = f->given & 4 ? f->s.seed : rec->seed;
    if (out->val == rec->val && out->test == rec->test && out->seed == rec->seed)
        return -1;
    char a[96], b[96];
    if (rec->val > 0 || rec->test > 0)
        fprintf(stderr, "%s: %s: the run %s was split with%s; give its split or none (or "
                "--other-data)\n", prog, split_words(out, a, sizeof a) + 1, o->resume, split_words(rec, b, sizeof b));
    else
        fprintf(stderr, "%s: %s: the run %s was not split; resume it without split flags (or "
                "with --other-data)\n", prog, split_words(out, a, sizeof a) + 1, o->resume);
    return 2;
}

/* The transform to load with into *out: the flags given, and on a resume
 * the run's for those not given; a given one that differs from the run's
 * is refused unless --other-data.  -1 to go on, else the exit status. */
static int settle_fit(const split_flags *f, const vit_run_data *rec, const char *resume,
                      int other_data, vit_data_fit *out)
{
    *out = f->fit;
    int sides = f->given & (32 | 64);
    if (sides && (f->given & 8)) {
        fprintf(stderr, "%s: --image-size and --image-height/--image-width: give one of them\n",
                prog);
        return 2;
    }
    if (sides && sides != (32 | 64)) {
        fprintf(stderr, "%s: --%s alone: give --image-%s too, or --image-size HxW (every image "
                "is resized to that size on load)\n", prog,
                sides == 32 ? "image-height" : "image-width", sides == 32 ? "width" : "height");
        return 2;
    }
    if (!rec || other_data)
        return -1;
    vit_data_fit was = vit_run_data_fit(rec, 1);
    if (!(f->given & (8 | 32 | 64))) {
        out->height = rec->fit.height;
        out->width = rec->fit.width;
    }
    if (!(f->given & 16))
        out->channels = rec->fit.channels;
    int differs = ((f->given & (8 | 32 | 64)) &&
                   (out->height != was.height || out->width != was.width)) ||
                  ((f->given & 16) && out->channels != was.channels);
    if (differs) {
        fprintf(stderr, "%s: %s: the run %s trained on images of %dx%dx%d; resume it without "
                "--image-size and --channels, or with those (or --other-data)\n", prog,
                f->given & 16 && !(f->given & (8 | 32 | 64)) ? "--channels" : "--image-size",
                resume, was.height, was.width, was.channels);
        return 2;
    }
    return -1;
}

static void free_names(char **names, int n)
{
    for (int k = 0; names && k < n; k++)
        free(names[k]);
    free(names);
}

/* A malloc'd copy of n names, NULL when out of memory. */
static char **copy_names(char *const *names, int n)
{
    char **c = calloc((size_t)n + 1, sizeof *c);
    for (int k = 0; c && k < n; k++)
        if ((c[k] = strdup(names[k])) == NULL) {
            free_names(c, k);
            c = NULL;
        }
    return c;
}

/* names (n of them, as many as the classes) on both sets; 0, else 1
 * (said). */
static int put_names(char *const *names, vit_dataset *train, vit_dataset *test)
{
    vit_dataset *sets[2] = {train, test};
    for (int s = 0; s < 2; s++) {
        char **c = copy_names(names, train->classes);
        if (c == NULL) {
            fprintf(stderr, "%s: out of memory\n", prog);
            return 1;
        }
        free_names(sets[s]->class_names, sets[s]->classes);
        sets[s]->class_names = c;
        sets[s]->classes = train->classes;
    }
    return 0;
}

/* --class-names: the names in file path, one a line (surrounding white
 * space dropped, blank lines skipped), as many as the classes, on both
 * sets.  0, else the exit status (said). */
static int read_class_names(const char *path, vit_dataset *train, vit_dataset *test)
{
    FILE *fp = fopen(path, "r");
    char line[512], **names = calloc((size_t)train->classes + 1, sizeof *names);
    int n = 0, rc = 0;
    if (fp == NULL || names == NULL) {
        fprintf(stderr, "%s: --class-names: %s: %s\n", prog, path,
                fp ? "out of memory" : "cannot open");
        rc = 1;
    }
    while (!rc && fgets(line, sizeof line, fp)) {
        char *p = line + strspn(line, " \t\r\n"), *e = p + strlen(p);
        while (e > p && strchr(" \t\r\n", e[-1]))
            *--e = 0;
        if (!*p)
            continue;
        if (e - p > 254) {
            fprintf(stderr, "%s: --class-names: %s: name %d is longer than 254 bytes\n", prog,
                    path, n + 1);
            rc = 2;
        } else if (n < train->classes && (names[n] = strdup(p)) == NULL) {
            fprintf(stderr, "%s: out of memory\n", prog);
            rc = 1;
        }
        n++;
    }
    if (!rc && n != train->classes) {
        fprintf(stderr, "%s: --class-names: %s holds %d name%s, but the data has %d classes\n",
                prog, path, n, n == 1 ? "" : "s", train->classes);
        rc = 2;
    }
    if (fp)
        fclose(fp);
    if (!rc)
        rc = put_names(names, train, test);
    free_names(names, train->classes);
    return rc;
}

/* A resume without --class-names keeps the names its checkpoint holds
 * (those given to the run before), when they are as many as the classes. */
static int keep_run_names(const char *resume, vit_dataset *train, vit_dataset *test)
{
    vit_ckpt c;
    if (vit_ckpt_read_header(resume, &c))
        return cli_fail(prog, NULL);
    int rc = c.nclass_names == train->classes ? put_names(c.class_names, train, test) : 0;
    vit_ckpt_free(&c);
    return rc;
}

/* The one line of what was done to the images, when anything was. */
static void say_images(const vit_data_report *r, const split_flags *f, int from_run)
{
    const vit_data_fit *t = &r->fit;
    int n = r->gray + r->colour;
    char line[1024], why[400] = "";
    if (r->ruled || f->given & (8 | 16 | 32 | 64) || (from_run && (r->resized || r->converted)) ||
        (f->fit_arch && r->resized)) {
        if (r->ruled & 1)
            snprintf(why, sizeof why, "sizes differ: the median, longest side at most %d, "
                     "sides multiples of 8", VIT_DATA_FIT_MAX_SIDE);
        if (r->ruled & 2)
            snprintf(why + strlen(why), sizeof why - strlen(why), "%s%s", *why ? "; " : "",
                     "RGB, as some images are colour");
        if (f->given & (8 | 16 | 32 | 64))
            snprintf(why + strlen(why), sizeof why - strlen(why), "%sas asked", *why ? "; " : "");
        else if (!r->ruled && !f->fit_arch)
            snprintf(why + strlen(why), sizeof why - strlen(why), "as the run did");
        if (f->fit_arch)
            snprintf(why + strlen(why), sizeof why - strlen(why), "%sthe size of the weights' "
                     "%s model, which it keeps: --image-size chooses another", *why ? "; " : "",
                     f->fit_arch);
        snprintf(line, sizeof line, "images: %d read, %dx%d to %dx%d (HxW), %d gray, %d colour; "
                 "%d resized, %d converted, all now %dx%dx%d (%s%s)", n, r->min_h, r->min_w,
                 r->max_h, r->max_w, r->gray, r->colour, r->resized, r->converted, t->height,
                 t->width, t->channels, why,
                 r->ruled ? "; --image-size and --channels choose" : "");
        cli_print_fitted(stdout, line);
    }
    if (r->skipped > 0) {
        snprintf(line, sizeof line, "skipped %d unreadable file%s (--skip-bad): %s%s%s%s%s",
                 r->skipped, r->skipped == 1 ? "" : "s", r->skipped_why[0],
                 r->skipped > 1 ? "; " : "", r->skipped > 1 ? r->skipped_why[1] : "",
                 r->skipped > 2 ? "; " : "", r->skipped > 2 ? r->skipped_why[2] : "");
        cli_print_fitted(stdout, line);
    }
}

int load_data(const char *data, const split_flags *f, const vit_run_data *rec,
              const char *resume, vit_train_opts *o, vit_dataset *train, vit_dataset *test,
              int speak, int *ignored)
{
    vit_data_opts want = {{0, 0, 0}, {0, 0, 0}, f->skip_bad};
    vit_data_report rep;
    *ignored = 0;
    int rc = settle_split(f, rec ? &rec->split : NULL, o, &want.split), tail = 0;
    if (rc < 0)
        rc = settle_fit(f, rec, resume, o->other_data, &want.fit);
    if (rc >= 0)
        return rc;
    rc = 0;
    if (vit_data_load_opts(data, cli_digits_path(), &want, train, test, &tail, &rep)) {
        if (!speak)
            return 1;
        fprintf(stderr, "%s: %s%s\n", prog, vit_last_error(),
                rep.unreadable ? " (--skip-bad skips image files that cannot be read)" : "");
        return 1;
    }
    /* The rule's shape (sides multiples of 8 up to 64) suits every
     * built-in architecture as it is: the ViT's patch sizes divide it and
     * Swin's windows may be rectangular (8x7 for 64x56's 16x14 grid). */
    o->data_split = rep.split;
    *ignored = rep.ignored;
    o->data_fit = want.fit.height || want.fit.channels || rep.ruled ? rep.fit
                                                                    : (vit_data_fit){0, 0, 0};
    if (tail > 0)
        o->val_count = tail;
    if (f->class_names)
        rc = read_class_names(f->class_names, train, test);
    else if (resume && rec)
        rc = keep_run_names(resume, train, test);
    if (rc) {
        vit_dataset_free(train);
        vit_dataset_free(test);
        return rc;
    }
    if (speak && o->data_split.test > 0 && want.split.test == 0 && !rec)
        printf("split: %s has no train/ and test/: %g%% of each class held out for testing "
               "(--test-split %g, --split-seed %llu)\n", data, 100 * o->data_split.test,
               o->data_split.test, o->data_split.seed);
    if (speak)
        say_images(&rep, f, rec && (rec->fit.height || rec->fit.channels));
    return 0;
}

/*
 * vit_train --seeds: the list read, one run per seed in OUT/seed-N, then
 * the spread of their accuracies printed and written to OUT/seeds.csv.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "vit/vit.h"
#include "vit_train.h"

int parse_seeds(const char *text, unsigned long long *seeds, int *n)
{
    const char *p = text;
    *n = 0;
    for (;;) {
        char *end;
        if (*p < '0' || *p > '9')
            break;
        unsigned long long lo = strtoull(p, &end, 10), hi = lo;
        if (*end == '-') {
            p = end + 1;
            if (*p < '0' || *p > '9')
                break;
            hi = strtoull(p, &end, 10);
        }
        if (hi < lo || hi - lo >= MAX_SEEDS)
            break;
        for (unsigned long long v = lo; v <= hi; v++) {
            if (*n == MAX_SEEDS) {
                fprintf(stderr, "%s: --seeds: more than %d seeds\n", prog, MAX_SEEDS);
                return 0;
            }
            for (int k = 0; k < *n; k++)
                if (seeds[k] == v) {
                    fprintf(stderr, "%s: --seeds: seed %llu is listed twice\n", prog, v);
                    return 0;
                }
            seeds[(*n)++] = v;
        }
        if (*end == 0)
            return 1;
        if (*end != ',')
            break;
        p = end + 1;
    }
    fprintf(stderr, "%s: --seeds: expected seeds like 1,2,3 or 1-5, got '%s'\n", prog, text);
    return 0;
}

int seed_flag_clash(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--seeds") == 0) {
            fprintf(stderr, "%s: --seed and --seeds: give one of them\n", prog);
            return 1;
        }
    return 0;
}

void seed_dir(const char *out, unsigned long long seed, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/seed-%llu", out, seed);
}

/* Mean, sample standard deviation (0 for one value), min and max of x[n]. */
static void spread(const double *x, int n, double st[4])
{
    double sum = 0, ss = 0;
    st[2] = st[3] = x[0];
    for (int i = 0; i < n; i++) {
        sum += x[i];
        st[2] = x[i] < st[2] ? x[i] : st[2];
        st[3] = x[i] > st[3] ? x[i] : st[3];
    }
    st[0] = sum / n;
    for (int i = 0; i < n; i++)
        ss += (x[i] - st[0]) * (x[i] - st[0]);
    st[1] = n > 1 ? sqrt(ss / (n - 1)) : 0;
}

static void print_spread(const char *what, const double *x, int n)
{
    double st[4];
    spread(x, n, st);
    printf("%s mean %.4f, sd %.4f, min %.4f, max %.4f\n", what, st[0], st[1], st[2], st[3]);
}

/* OUT/seeds.csv, written whole or not at all (vit_atomic_open): a row per
 * seed, its tta the test-time augmentation its final figures used. */
static int write_seeds_csv(const char *out, const unsigned long long *seeds, int n,
                           const vit_train_result *r)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/seeds.csv", out);
    FILE *f;
    char *tmp;
    int rc = vit_atomic_open(path, &f, &tmp);
    if (rc)
        return cli_fail(prog, NULL);
    if (fprintf(f, "seed,test_acc,test_acc_one_pass,val_acc,val_acc_one_pass,seconds,tta\n") < 0)
        rc = VIT_EIO;
    for (int k = 0; k < n && rc == VIT_OK; k++)
        if (fprintf(f, "%llu,%.6f,%.6f,%.6f,%.6f,%.3f,%s\n", seeds[k], r[k].test_accuracy,
                    r[k].test_accuracy_plain, r[k].val_accuracy, r[k].val_accuracy_plain,
                    r[k].seconds, vit_tta_name(r[k].tta == VIT_TTA_AUTO ? VIT_TTA_NONE : r[k].tta)) < 0)
            rc = VIT_EIO;
    if (rc)
        vit_set_error(rc, "%s: cannot write", path);
    if (vit_atomic_close(f, tmp, path, rc))
        return cli_fail(prog, NULL);
    printf("wrote %s\n", path);
    return 0;
}

/* Appends seed to the list in buf[cap] ("," between), or "..." once
 * when there is no room for it. */
static void add_seed(char *buf, size_t cap, unsigned long long seed)
{
    size_t len = strlen(buf);
    if (len + 24 < cap)
        snprintf(buf + len, cap - len, "%s%llu", len ? "," : "", seed);
    else if (len + 4 < cap && strcmp(buf + len - 3, "...") != 0)
        snprintf(buf + len, cap - len, "...");
}

/* The label of the seeds' final figures, into buf[cap]: "" when no seed's
 * run used test-time augmentation, " (tta shift9)" (or shift9flip) when all did, else
 * " (tta auto)" after a line that gives each seed's own choice (tta auto
 * chose per seed by its validation set). */
static void tta_label(const vit_train_result *r, const unsigned long long *seeds, int n,
                      char *buf, size_t cap)
{
    char on[48] = "", off[48] = "";
    for (int k = 0; k < n; k++)
        add_seed(r[k].tta != VIT_TTA_NONE ? on : off, sizeof on, seeds[k]);
    const char *name = "shift9"; /* the TTA the seeds that used one used */
    for (int k = 0; k < n; k++)
        if (r[k].tta != VIT_TTA_NONE)
            name = vit_tta_name(r[k].tta);
    if (!*on)
        snprintf(buf, cap, "%s", "");
    else if (!*off)
        snprintf(buf, cap, " (tta %s)", name);
    else
        snprintf(buf, cap, "%s", " (tta auto)");
    if (*on && *off)
        printf("tta auto: %s on seeds %s; one pass on %s\n", name, on, off);
}

int train_seeds(const vit_config *cfg, const vit_train_config *tc, const vit_dataset *train,
                const vit_dataset *test,
                const vit_train_opts *op, const shown *look, const char *data,
                int threads, const unsigned long long *seeds, int n)
{
    vit_train_result res[MAX_SEEDS];
    char dir[MAX_SEEDS][4200];
    int speak = vit_dist_rank() == 0;
    for (int k = 0; k < n; k++) {
        vit_train_config c = *tc;
        c.seed = seeds[k];
        vit_train_opts o = *op;
        seed_dir(op->out_dir, seeds[k], dir[k], sizeof dir[k]);
        o.out_dir = dir[k];
        if (speak && look->progress)
            printf("%sseed %llu (%d of %d): %s\n", k ? "\n" : "", seeds[k], k + 1, n, dir[k]);
        int rc = train_once(cfg, &c, train, test, &o, look, data, threads, &res[k]);
        if (rc) {
            if (speak && k + 1 < n)
                fprintf(stderr, "%s: seeds after %llu not run\n", prog, seeds[k]);
            return rc;
        }
    }
    if (!speak)
        return 0;
    double x[MAX_SEEDS], y[MAX_SEEDS];
    char what[160], list[64] = "";
    for (int k = 0; k < n; k++) {
        x[k] = res[k].test_accuracy;
        y[k] = res[k].test_accuracy_plain;
        add_seed(list, sizeof list, seeds[k]);
    }
    char label[32];
    printf("\n%d seeds (%s):\n", n, list);
    tta_label(res, seeds, n, label, sizeof label);
    snprintf(what, sizeof what, "test accuracy%s", label);
    print_spread(what, x, n);
    if (*label)
        print_spread("test accuracy (one pass)", y, n);
    if (res[0].val_accuracy >= 0) {
        for (int k = 0; k < n; k++) {
            x[k] = res[k].val_accuracy;
            y[k] = res[k].val_accuracy_plain;
        }
        snprintf(what, sizeof what, "validation accuracy%s", label);
        print_spread(what, x, n);
        if (*label)
            print_spread("validation accuracy (one pass)", y, n);
    }
    return write_seeds_csv(op->out_dir, seeds, n, res);
}

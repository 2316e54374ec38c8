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

int split_flag(const char *a, const char *v, split_flags *f)
{
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

int load_data(const char *data, const split_flags *f, const vit_data_split *rec,
              vit_train_opts *o, vit_dataset *train, vit_dataset *test, int speak)
{
    vit_data_split want;
    int rc = settle_split(f, rec, o, &want), tail = 0;
    if (rc >= 0)
        return rc;
    if (vit_data_load_split(data, cli_digits_path(), &want, train, test, &o->data_split, &tail))
        return speak ? cli_fail(prog, NULL) : 1;
    if (tail > 0)
        o->val_count = tail;
    if (speak && o->data_split.test > 0 && want.test == 0 && !rec)
        printf("split: %s has no train/ and test/: %g%% of each class held out for testing "
               "(--test-split %g, --split-seed %llu)\n", data, 100 * o->data_split.test,
               o->data_split.test, o->data_split.seed);
    return 0;
}

/* tests/test_data_split.c - vit_dataset_split and vit_data_load_split:
 * per-class counts by the documented rule, every image in exactly one part
 * in the set's order, the same parts for the same seed (and the very images
 * the rule picks, fixed here, so that the float32 and float64 builds -
 * this suite is built against both - and every platform agree), another
 * seed giving other parts, and a folder of class folders without train/
 * and test/ loaded with its default test fraction and a validation tail.
 * The PNGs are written here into a temporary folder. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "file_util.h"
#include "vit/data.h"

/* A 1x1 gray set whose image i holds i / 1024 (exact in both precisions,
 * so an image tells its index) with labels from lab[n]; K classes named
 * "c0", "c1", .... */
static void make_set(vit_dataset *ds, const int *lab, int n, int K)
{
    memset(ds, 0, sizeof *ds);
    ds->count = n;
    ds->height = ds->width = ds->channels = 1;
    ds->classes = K;
    ds->images = malloc((size_t)n * sizeof *ds->images);
    ds->labels = malloc((size_t)n * sizeof *ds->labels);
    ds->class_names = malloc((size_t)K * sizeof *ds->class_names);
    ck_assert(ds->images && ds->labels && ds->class_names);
    for (int i = 0; i < n; i++) {
        ds->images[i] = (vit_real)i / 1024;
        ds->labels[i] = lab[i];
    }
    for (int k = 0; k < K; k++) {
        char name[8];
        snprintf(name, sizeof name, "c%d", k);
        ds->class_names[k] = strdup(name);
    }
}

/* Labels for counts[K] images per class, interleaved (class k at every
 * K-th place while it lasts), so that the set is not sorted by class. */
static int interleave(const int *counts, int K, int *lab)
{
    int n = 0, left[8];
    memcpy(left, counts, (size_t)K * sizeof *left);
    for (int more = 1; more;) {
        more = 0;
        for (int k = 0; k < K; k++)
            if (left[k] > 0) {
                lab[n++] = k;
                left[k]--;
                more = 1;
            }
    }
    return n;
}

static int index_of(const vit_dataset *p, int j) { return (int)lrint(p->images[j] * 1024); }

/* The parts' per-class counts are want[k] = {train, val, test}; every image
 * of ds is in exactly one part, with its label; each part is in ds order
 * and keeps the shape and class names. */
static void expect_parts(const vit_dataset *ds, const vit_dataset parts[3], const int want[][3])
{
    int *seen = calloc((size_t)ds->count, sizeof *seen);
    ck_assert_ptr_nonnull(seen);
    for (int p = 0; p < 3; p++) {
        int got[8] = {0}, last = -1;
        ck_assert_int_eq(parts[p].classes, ds->classes);
        ck_assert_int_eq(parts[p].height * parts[p].width * parts[p].channels, 1);
        for (int j = 0; j < parts[p].count; j++) {
            int i = index_of(&parts[p], j);
            ck_assert_int_lt(last, i); /* ds order */
            last = i;
            ck_assert_int_eq(parts[p].labels[j], ds->labels[i]);
            seen[i]++;
            got[parts[p].labels[j]]++;
        }
        for (int k = 0; k < ds->classes; k++) {
            ck_assert_msg(got[k] == want[k][p], "part %d class %d: %d images, expected %d", p, k,
                          got[k], want[k][p]);
            ck_assert_str_eq(parts[p].class_names[k], ds->class_names[k]);
        }
    }
    for (int i = 0; i < ds->count; i++)
        ck_assert_msg(seen[i] == 1, "image %d is in %d parts", i, seen[i]);
    free(seen);
}

static void free_parts(vit_dataset parts[3])
{
    for (int p = 0; p < 3; p++)
        vit_dataset_free(&parts[p]);
}

START_TEST(stratified_counts)
{
    /* Classes of 10, 7, 2 and 1 images. */
    static const int counts[4] = {10, 7, 2, 1};
    int lab[20];
    vit_dataset ds, parts[3];
    make_set(&ds, lab, interleave(counts, 4, lab), 4);

    /* val 0.2, test 0.3: rounded (10: 2 and 3; 7: 1.4 -> 1 and 2.1 -> 2);
     * 2 images are too few for one in each part (2 < 1 + 2): 0.4 -> 0 and
     * 0.6 -> 1; one image stays for training. */
    vit_data_split s = {0.2, 0.3, 5};
    static const int want_a[4][3] = {{5, 2, 3}, {4, 1, 2}, {1, 0, 1}, {1, 0, 0}};
    ck_assert_int_eq(vit_dataset_split(&ds, &s, &parts[0], &parts[1], &parts[2]), VIT_OK);
    expect_parts(&ds, parts, want_a);
    free_parts(parts);

    /* val 0.1, test 0.1: 1 and 0.7 round to 1, raised to 1 where the class
     * has at least 3 images; the class of 2 keeps both. */
    s = (vit_data_split){0.1, 0.1, 5};
    static const int want_b[4][3] = {{8, 1, 1}, {5, 1, 1}, {2, 0, 0}, {1, 0, 0}};
    ck_assert_int_eq(vit_dataset_split(&ds, &s, &parts[0], &parts[1], &parts[2]), VIT_OK);
    expect_parts(&ds, parts, want_b);
    free_parts(parts);

    /* Only a test part: the class of 2 gives one (2 >= 1 + 1), the class of
     * one keeps it; the validation part is empty. */
    s = (vit_data_split){0, 0.25, 5};
    static const int want_c[4][3] = {{7, 0, 3}, {5, 0, 2}, {1, 0, 1}, {1, 0, 0}};
    ck_assert_int_eq(vit_dataset_split(&ds, &s, &parts[0], &parts[1], &parts[2]), VIT_OK);
    expect_parts(&ds, parts, want_c);
    ck_assert_int_eq(parts[1].count, 0);
    free_parts(parts);
    vit_dataset_free(&ds);

    /* The cap: 0.45 each of 3 images rounds to 1 and 1, leaving one; of 2
     * images to 1 and 1, so val (the larger on a tie) gives its one up. */
    static const int counts2[2] = {3, 2};
    make_set(&ds, lab, interleave(counts2, 2, lab), 2);
    s = (vit_data_split){0.45, 0.45, 1};
    static const int want_d[2][3] = {{1, 1, 1}, {1, 0, 1}};
    ck_assert_int_eq(vit_dataset_split(&ds, &s, &parts[0], &parts[1], &parts[2]), VIT_OK);
    expect_parts(&ds, parts, want_d);
    free_parts(parts);
    vit_dataset_free(&ds);
}
END_TEST

/* The test part's image indices, as "i,j,..." into buf. */
static const char *test_indices(const vit_dataset *ds, const vit_data_split *s, char *buf,
                                size_t cap)
{
    vit_dataset parts[3];
    ck_assert_int_eq(vit_dataset_split(ds, s, &parts[0], &parts[1], &parts[2]), VIT_OK);
    buf[0] = 0;
    for (int j = 0; j < parts[2].count; j++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s%d", j ? "," : "", index_of(&parts[2], j));
    free_parts(parts);
    return buf;
}

START_TEST(seeded)
{
    static const int counts[3] = {12, 9, 6};
    int lab[27];
    vit_dataset ds;
    make_set(&ds, lab, interleave(counts, 3, lab), 3);
    char a[256], b[256], c[256];
    vit_data_split s = {0.2, 0.3, 42};
    test_indices(&ds, &s, a, sizeof a);
    test_indices(&ds, &s, b, sizeof b);
    ck_assert_str_eq(a, b); /* the same seed, the same parts */
    /* The images vit_rng_shuffle (xoshiro256**, integers only) picks for
     * seed 42: fixed, so that a change of the rule or generator, or a
     * build that rounds differently, shows. */
    ck_assert_str_eq(a, "1,2,9,10,11,12,16,24,26");
    s.seed = 43;
    test_indices(&ds, &s, c, sizeof c);
    ck_assert_str_ne(a, c);
    vit_dataset_free(&ds);
}
END_TEST

START_TEST(refused)
{
    static const int lab[4] = {0, 1, 0, 1};
    vit_dataset ds, p[3];
    make_set(&ds, lab, 4, 2);
    vit_data_split bad[4] = {{0.5, 0.5, 0}, {-0.1, 0.2, 0}, {0, 1, 0}, {NAN, 0.2, 0}};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(vit_dataset_split(&ds, &bad[i], &p[0], &p[1], &p[2]), VIT_EINVAL);
        ck_assert_ptr_nonnull(strstr(vit_last_error(), "fraction"));
        ck_assert_int_eq(p[0].count + p[1].count + p[2].count, 0);
    }
    vit_data_split ok = {0.2, 0.2, 0};
    ck_assert_int_eq(vit_dataset_split(&ds, &ok, &p[0], &p[0], &p[2]), VIT_EINVAL);
    ck_assert_int_eq(vit_dataset_split(NULL, &ok, &p[0], &p[1], &p[2]), VIT_EINVAL);
    ds.labels[2] = 7;
    ck_assert_int_eq(vit_dataset_split(&ds, &ok, &p[0], &p[1], &p[2]), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "label 7"));
    vit_dataset_free(&ds);
}
END_TEST

/* A 2x2 gray PNG of value v at rel. */
static void png_at(const char *rel, unsigned char v)
{
    unsigned char px[4] = {v, v, v, v};
    ck_assert_int_eq(vit_png_write(fu_path(rel), px, 2, 2, 1), VIT_OK);
}

START_TEST(flat_folder)
{
    /* Class a: 5 images, b: 4. */
    ck_assert_int_eq(mkdir(fu_path("flat"), 0755), 0);
    ck_assert_int_eq(mkdir(fu_path("flat/a"), 0755), 0);
    ck_assert_int_eq(mkdir(fu_path("flat/b"), 0755), 0);
    char rel[32];
    for (int i = 0; i < 9; i++) {
        snprintf(rel, sizeof rel, "flat/%s/%d.png", i < 5 ? "a" : "b", i);
        png_at(rel, (unsigned char)(10 * i));
    }
    vit_dataset tr, te;
    vit_data_split used;
    int tail = -1;
    /* The default: a fifth of each class (1.0 -> 1, 0.8 -> 1) for testing. */
    ck_assert_int_eq(vit_data_load_split(fu_path("flat"), NULL, NULL, &tr, &te, &used, &tail),
                     VIT_OK);
    ck_assert_int_eq(tr.count, 7);
    ck_assert_int_eq(te.count, 2);
    ck_assert_int_eq(tail, 0);
    ck_assert(used.test == VIT_DATA_TEST_FRACTION && used.val == 0 && used.seed == 0);
    ck_assert_int_eq(te.labels[0], 0);
    ck_assert_int_eq(te.labels[1], 1);
    ck_assert_str_eq(te.class_names[1], "b");
    vit_dataset_free(&tr);
    vit_dataset_free(&te);
    /* vit_data_load is the same default split. */
    vit_dataset tr2, te2;
    ck_assert_int_eq(vit_data_load_split(fu_path("flat"), NULL, NULL, &tr, &te, NULL, NULL), VIT_OK);
    ck_assert_int_eq(vit_data_load(fu_path("flat"), NULL, &tr2, &te2), VIT_OK);
    ck_assert_int_eq(te2.count, te.count);
    ck_assert(memcmp(te.images, te2.images, (size_t)te.count * 4 * sizeof(vit_real)) == 0);
    vit_dataset_free(&tr);
    vit_dataset_free(&te);
    vit_dataset_free(&tr2);
    vit_dataset_free(&te2);

    /* With validation: 1.25 -> 1 of a and 1 of b, at the training set's end. */
    vit_data_split s = {0.25, 0.2, 3};
    ck_assert_int_eq(vit_data_load_split(fu_path("flat"), NULL, &s, &tr, &te, &used, &tail),
                     VIT_OK);
    ck_assert_int_eq(tr.count, 7);
    ck_assert_int_eq(tail, 2);
    ck_assert_int_eq(tr.labels[5], 0);
    ck_assert_int_eq(tr.labels[6], 1);
    ck_assert(used.val == 0.25 && used.test == 0.2 && used.seed == 3);
    vit_dataset_free(&tr);
    vit_dataset_free(&te);

    /* A layout with its own test set refuses a test fraction. */
    ck_assert_int_eq(mkdir(fu_path("pair"), 0755), 0);
    ck_assert_int_eq(mkdir(fu_path("pair/train"), 0755), 0);
    ck_assert_int_eq(mkdir(fu_path("pair/test"), 0755), 0);
    ck_assert_int_eq(mkdir(fu_path("pair/train/a"), 0755), 0);
    ck_assert_int_eq(mkdir(fu_path("pair/test/a"), 0755), 0);
    for (int i = 0; i < 4; i++) {
        snprintf(rel, sizeof rel, "pair/train/a/%d.png", i);
        png_at(rel, (unsigned char)i);
    }
    png_at("pair/test/a/0.png", 9);
    s = (vit_data_split){0, 0.2, 0};
    ck_assert_int_eq(vit_data_load_split(fu_path("pair"), NULL, &s, &tr, &te, &used, &tail),
                     VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "holds its own test set"));
    ck_assert_int_eq(tr.count + te.count, 0);
    /* ... and splits a validation tail off its training set. */
    s = (vit_data_split){0.25, 0, 0};
    ck_assert_int_eq(vit_data_load_split(fu_path("pair"), NULL, &s, &tr, &te, &used, &tail),
                     VIT_OK);
    ck_assert_int_eq(tr.count, 4);
    ck_assert_int_eq(te.count, 1);
    ck_assert_int_eq(tail, 1);
    vit_dataset_free(&tr);
    vit_dataset_free(&te);
}
END_TEST

static Suite *split_suite(void)
{
    Suite *s = suite_create("test_data_split");
    TCase *tc = tcase_create("split");
    tcase_add_test(tc, stratified_counts);
    tcase_add_test(tc, seeded);
    tcase_add_test(tc, refused);
    tcase_add_test(tc, flat_folder);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return fu_run_suite(split_suite, "/tmp/vit_split_XXXXXX"); }

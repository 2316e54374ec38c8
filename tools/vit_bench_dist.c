/*
 * vit_bench_dist - data-parallel training over MPI: how long a step waits
 * for the gradients' sum over the ranks, with the sum after the backward
 * (one blocking MPI_Allreduce) and overlapped with it (vit_dist_buckets, as
 * vit_train does).  Random images, a global batch split across the ranks,
 * --threads slices a rank (1 by default: one rank per core).  Configurations:
 *
 *   digits  8x8x1,    patch 2,  width 64,  depth 4,  4 heads, MLP 128
 *   medium  28x28x1,  patch 4,  width 128, depth 6,  4 heads, MLP 256
 *   large   32x32x3,  patch 4,  width 192, depth 6,  3 heads, MLP 768
 *   vit-ti  224x224x3, patch 16, width 192, depth 12, 3 heads, MLP 768,
 *           1000 classes (ViT-Ti/16, 5.7M parameters)
 *
 *   mpirun -np 2 build/tools/vit_bench_dist --config medium
 *
 * Each repetition times `steps` steps of each mode in turn (interleaved,
 * so a shared machine's load falls on all three alike): "compute" (the
 * step without any sum: what the ranks would take alone), "blocking" and
 * "overlap", after one sum alone (the ranks lined up first: the network's
 * and MPI's time for the gradient, no compute to wait for).  Rank 0
 * prints that, and per mode the median (and fastest) step time, the median
 * time the step spent waiting for the sum (blocking: the whole
 * MPI_Allreduce; overlap: vit_dist_buckets_finish, what the backward did
 * not hide), and exposed communication = (step - compute) / step.
 * --check instead trains `steps` steps blocking and `steps` overlapped
 * from the same start and exits 0 iff the parameters are bitwise equal
 * and every gradient was reported final during the overlapped steps (so
 * that their buckets started before vit_dist_buckets_finish: with
 * --threads 2 and more too).
 * Without MPI it runs as one rank.
 */
#include "cli.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vit/vit.h"

enum { REPS_MAX = 64 };
enum { COMPUTE, BLOCKING, OVERLAP, MODES };
static const char *const mode_names[MODES] = {"compute", "blocking", "overlap"};

typedef struct shape {
    const char *name;
    int img, chans, patch, dim, depth, heads, mlp, classes;
} shape;

static const shape shapes[] = {
    {"digits", 8, 1, 2, 64, 4, 4, 128, 10},
    {"medium", 28, 1, 4, 128, 6, 4, 256, 10},
    {"large", 32, 3, 4, 192, 6, 3, 768, 10},
    {"vit-ti", 224, 3, 16, 192, 12, 3, 768, 1000},
};

typedef struct bench {
    vit_model *m;
    vit_adamw opt;
    vit_dist_buckets *sum;
    vit_real *images;
    int *labels;
    int lo, nb, batch;
    size_t n, reported; /* values reported final in overlapped steps */
} bench;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, cmp);
    return x[n / 2];
}

/* vit_dist_buckets_ready, counting the values reported. */
static void count_ready(void *ctx, size_t offset, size_t count)
{
    bench *B = ctx;
    B->reported += count;
    vit_dist_buckets_ready(B->sum, offset, count);
}

/* One step in mode `mode`; *wait: the seconds spent waiting for the sum. */
static int step(bench *B, int mode, double *wait)
{
    vit_real w = (vit_real)B->nb / (vit_real)B->batch;
    int size = vit_dist_size(), rc = VIT_OK;
    vit_train_extras ex = {0};
    if (mode == OVERLAP && size > 1) {
        ex.grads_ready = count_ready;
        ex.ready_ctx = B;
        rc = vit_dist_buckets_start(B->sum, w);
    }
    const vit_config *c = vit_model_config(B->m);
    size_t img = (size_t)c->image_height * c->image_width * c->channels;
    double loss;
    if (rc == VIT_OK)
        rc = vit_model_train_grads_ex(B->m, B->images + (size_t)B->lo * img, B->labels + B->lo,
                                      B->nb, 0, &ex, &loss, NULL);
    double t0 = now();
    vit_real *g = vit_model_grads(B->m);
    if (mode == OVERLAP && size > 1) {
        int r = vit_dist_buckets_finish(B->sum);
        rc = rc ? rc : r;
    } else if (mode == BLOCKING && size > 1) {
        for (size_t i = 0; i < B->n; i++)
            g[i] *= w;
        if (rc == VIT_OK)
            rc = vit_dist_sum(g, B->n);
    }
    *wait = now() - t0;
    int ngroups;
    const vit_param_group *groups = vit_model_groups(B->m, &ngroups);
    return rc ? rc : vit_adamw_step(&B->opt, vit_model_params(B->m), g, groups, ngroups, 1e-4);
}

static int setup(bench *B, const shape *s, int batch, size_t bucket_bytes)
{
    int rank = vit_dist_rank(), size = vit_dist_size();
    vit_config cfg;
    vit_config_default(&cfg);
    cfg.image_height = cfg.image_width = s->img;
    cfg.channels = s->chans;
    cfg.classes = s->classes;
    cfg.patch = s->patch;
    cfg.patch_stride = 0;
    cfg.patch_pad = 0;
    cfg.dim = s->dim;
    cfg.depth = s->depth;
    cfg.heads = s->heads;
    cfg.mlp = s->mlp;
    memset(B, 0, sizeof *B);
    B->batch = batch;
    B->lo = batch * rank / size;
    B->nb = batch * (rank + 1) / size - B->lo;
    size_t img = (size_t)s->img * s->img * s->chans;
    if (!(B->m = vit_model_new(&cfg)) ||
        !(B->images = malloc((size_t)batch * img * sizeof *B->images)) ||
        !(B->labels = malloc((size_t)batch * sizeof *B->labels)))
        return VIT_ENOMEM;
    B->n = vit_model_param_count(B->m);
    if (vit_adamw_init(&B->opt, B->n, 0.9, 0.999, 1e-8, 0.05) ||
        !(B->sum = vit_dist_buckets_new(vit_model_grads(B->m), B->n, bucket_bytes)))
        return VIT_ENOMEM;
    vit_rng rng;
    vit_rng_seed(&rng, 1234);
    vit_model_init(B->m, &rng);
    for (size_t i = 0; i < (size_t)batch * img; i++)
        B->images[i] = (vit_real)vit_rng_normal(&rng);
    for (int i = 0; i < batch; i++)
        B->labels[i] = (int)vit_rng_below(&rng, (unsigned)s->classes);
    return VIT_OK;
}

static void teardown(bench *B)
{
    vit_dist_buckets_free(B->sum);
    vit_adamw_free(&B->opt);
    free(B->images);
    free(B->labels);
    vit_model_free(B->m);
}

/* The interleaved timing; prints on rank 0. */
static int time_modes(bench *B, const shape *s, int steps, int reps, size_t bucket_bytes)
{
    double t[MODES][REPS_MAX], wt[MODES][REPS_MAX], alone[REPS_MAX], wait;
    for (int r = -1; r < reps; r++) {
        /* The sum alone, the ranks lined up first: the network's and MPI's
         * own time for n values, without the other rank's compute. */
        (void)vit_dist_agree(VIT_OK);
        double t0 = now();
        int rc = vit_dist_sum(vit_model_grads(B->m), B->n);
        if (rc)
            return rc;
        if (r >= 0)
            alone[r] = now() - t0;
        for (int mode = 0; mode < MODES; mode++) {
            double sum_wait = 0;
            (void)vit_dist_agree(VIT_OK);
            t0 = now();
            for (int k = 0; k < (r < 0 ? 2 : steps); k++) {
                int rc = step(B, mode, &wait);
                if (rc)
                    return rc;
                sum_wait += wait;
            }
            if (r >= 0) {
                t[mode][r] = (now() - t0) / steps;
                wt[mode][r] = sum_wait / steps;
            }
        }
    }
    if (vit_dist_rank() != 0)
        return VIT_OK;
    size_t bytes = B->n * sizeof(vit_real), per = bucket_bytes ? bucket_bytes
                                                              : VIT_DIST_BUCKET_BYTES;
    printf("%s: %zu parameters (%.2f MB a sum, %zu bucket(s) of %zu KiB), %d rank(s), "
           "global batch %d, median of %d reps x %d steps\n", s->name, B->n, bytes / 1e6,
           (bytes + per - 1) / per, per / 1024, vit_dist_size(), B->batch, reps, steps);
    double tc = median(t[COMPUTE], reps), a_med = median(alone, reps);
    printf("  sum alone %.2f ms (median; fastest %.2f ms)\n", 1e3 * a_med, 1e3 * alone[0]);
    for (int mode = 0; mode < MODES; mode++) {
        double tm = median(t[mode], reps), wm = median(wt[mode], reps);
        double fast = t[mode][0]; /* sorted by median() */
        printf("  %-8s step %9.2f ms (fastest %9.2f)  waits %8.2f ms", mode_names[mode],
               1e3 * tm, 1e3 * fast, 1e3 * wm);
        if (mode != COMPUTE)
            printf("  exposed communication %5.1f%%", 100 * (tm - tc) / tm);
        printf("\n");
    }
    return VIT_OK;
}

/* --check: blocking and overlapped training from the same start end with
 * bitwise the same parameters. */
static int check_modes(const shape *s, int batch, int steps, size_t bucket_bytes, int threads)
{
    unsigned long long h[2] = {0, 0};
    size_t reported = 0, want = 0;
    for (int k = 0; k < 2; k++) {
        bench B;
        double wait;
        int rc = setup(&B, s, batch, bucket_bytes);
        for (int i = 0; rc == VIT_OK && i < steps; i++)
            rc = step(&B, k ? OVERLAP : BLOCKING, &wait);
        if (k == 1 && vit_dist_size() > 1) {
            reported = B.reported;
            want = (size_t)steps * B.n;
        }
        const unsigned char *p = (const unsigned char *)vit_model_params(B.m);
        h[k] = 1469598103934665603ull;
        for (size_t i = 0; rc == VIT_OK && i < B.n * sizeof(vit_real); i++)
            h[k] = (h[k] ^ p[i]) * 1099511628211ull;
        teardown(&B);
        if (rc)
            return rc;
    }
    if (vit_dist_rank() == 0)
        printf("%s, %d rank(s) of %d thread(s), %d steps: %zu of %zu gradients reported final "
               "during the steps%s; blocking %016llx, overlap %016llx: %s\n", s->name,
               vit_dist_size(), threads, steps, reported, want,
               reported == want ? "" : " (NOT ALL)", h[0], h[1],
               h[0] == h[1] ? "bitwise equal" : "DIFFERENT");
    return h[0] == h[1] && reported == want ? VIT_OK : VIT_ENUM;
}

static int usage(void)
{
    fprintf(stderr, "usage: [mpirun -np N] vit_bench_dist [--config digits|medium|large|vit-ti] "
                    "[--batch N] [--steps N] [--reps N] [--bucket-kb N] [--threads N] [--check]\n");
    return 2;
}

static int run(int argc, char **argv)
{
    int threads = 1, steps = 5, reps = 5, batch = 64, check = 0;
    long bucket_kb = 0;
    const shape *s = &shapes[1];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--check")) {
            check = 1;
            continue;
        }
        if (!v)
            return usage();
        i++;
        if (!strcmp(a, "--config")) {
            s = NULL;
            for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
                if (!strcmp(v, shapes[k].name))
                    s = &shapes[k];
            if (!s) {
                fprintf(stderr, "vit_bench_dist: --config %s: not digits, medium, large or "
                                "vit-ti\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--threads"))
            threads = atoi(v);
        else if (!strcmp(a, "--steps"))
            steps = atoi(v);
        else if (!strcmp(a, "--reps"))
            reps = atoi(v);
        else if (!strcmp(a, "--batch"))
            batch = atoi(v);
        else if (!strcmp(a, "--bucket-kb"))
            bucket_kb = atol(v);
        else
            return usage();
    }
    if (threads < 1 || steps < 1 || reps < 1 || reps > REPS_MAX || batch < vit_dist_size() ||
        bucket_kb < 0 || vit_set_threads(threads)) {
        fprintf(stderr, "vit_bench_dist: --threads, --steps, --reps (at most %d) and --bucket-kb "
                        "must be positive, --batch at least the number of ranks\n", REPS_MAX);
        return 2;
    }
    size_t bucket_bytes = (size_t)bucket_kb * 1024;
    if (check) {
        int r = check_modes(s, batch, steps, bucket_bytes, threads);
        return r == VIT_ENUM ? 3 : r ? 1 : 0;
    }
    bench B;
    int rc = setup(&B, s, batch, bucket_bytes);
    if (rc == VIT_OK)
        rc = time_modes(&B, s, steps, reps, bucket_bytes);
    teardown(&B);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (!cli_gemm_env_ok("vit_bench_dist")) /* a VIT_GEMM it would not take: refused */
        return 2;
    if (vit_dist_init(&argc, &argv)) {
        fprintf(stderr, "vit_bench_dist: %s\n", vit_last_error());
        return 1;
    }
    cli_ignore_broken_pipe_under_mpi();
    int rc = run(argc, argv);
    if (rc == 1) {
        fprintf(stderr, "vit_bench_dist: %s\n", vit_last_error());
        rc = vit_dist_abort_job(1);
    }
    vit_dist_finalize();
    return rc;
}

/*
 * vit_bench_dist - data-parallel training throughput over MPI: the medium
 * benchmark shape (28x28x1, patch 4, width 128, depth 6, 4 heads, MLP 256)
 * on random images, global batch 64 split across the ranks, one allreduce
 * of the flat gradient buffer per step.  Run it on 1 and 2 ranks:
 *
 *   mpirun -np 1 build/tools/vit_bench_dist --threads 1
 *   mpirun -np 2 build/tools/vit_bench_dist --threads 1
 *
 * Rank 0 prints images/s (median of the repetitions) and the bytes each
 * step reduces.  Without MPI it runs as one rank.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vit/vit.h"

enum { BATCH = 64, CLASSES = 10, REPS = 5 };

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

static int bench(int steps)
{
    int rank = vit_dist_rank(), size = vit_dist_size();
    vit_config cfg;
    vit_config_default(&cfg);
    cfg.image_height = cfg.image_width = 28;
    cfg.channels = 1;
    cfg.classes = CLASSES;
    cfg.patch = 4;
    cfg.patch_stride = 0;
    cfg.patch_pad = 0;
    cfg.dim = 128;
    cfg.depth = 6;
    cfg.heads = 4;
    cfg.mlp = 256;
    int lo = BATCH * rank / size, hi = BATCH * (rank + 1) / size, nb = hi - lo;
    vit_model *m = vit_model_new(&cfg);
    vit_tape *tape = vit_tape_new();
    vit_real *images = malloc((size_t)BATCH * 28 * 28 * sizeof *images);
    int labels[BATCH];
    vit_adamw opt = {0};
    if (!m || !tape || !images || vit_adamw_init(&opt, vit_model_param_count(m), 0.9, 0.999, 1e-8, 0.05)) {
        fprintf(stderr, "vit_bench_dist: setup failed: %s\n", vit_last_error());
        return 1;
    }
    vit_rng rng;
    vit_rng_seed(&rng, 1234);
    vit_model_init(m, &rng);
    for (size_t i = 0; i < (size_t)BATCH * 28 * 28; i++)
        images[i] = (vit_real)vit_rng_normal(&rng);
    for (int i = 0; i < BATCH; i++)
        labels[i] = (int)vit_rng_below(&rng, CLASSES);
    int ngroups;
    const vit_param_group *groups = vit_model_groups(m, &ngroups);
    size_t n = vit_model_param_count(m);
    double rates[REPS];
    for (int r = -1; r < REPS; r++) {
        double t0 = now();
        for (int s = 0; s < (r < 0 ? 3 : steps); s++) {
            vit_tape_reset(tape);
            vit_tensor *z = vit_model_forward(m, tape, images + (size_t)lo * 28 * 28, nb, 1);
            vit_tensor *loss = vit_op_cross_entropy(tape, z, labels + lo, 0, NULL);
            vit_model_zero_grads(m);
            if (!loss || vit_tape_backward(tape, loss)) {
                fprintf(stderr, "vit_bench_dist: step failed: %s\n", vit_last_error());
                return vit_dist_abort_job(1);
            }
            vit_real *g = vit_model_grads(m), w = (vit_real)nb / BATCH;
            for (size_t i = 0; size > 1 && i < n; i++)
                g[i] *= w;
            if (vit_dist_sum(g, n) || vit_adamw_step(&opt, vit_model_params(m), g, groups, ngroups, 1e-4)) {
                fprintf(stderr, "vit_bench_dist: step failed: %s\n", vit_last_error());
                return vit_dist_abort_job(1);
            }
        }
        if (r >= 0)
            rates[r] = (double)BATCH * steps / (now() - t0);
    }
    qsort(rates, REPS, sizeof *rates, cmp);
    if (rank == 0)
        printf("medium, %d rank(s), global batch %d: %.1f images/s (range %.1f-%.1f), "
               "%zu bytes reduced per step\n", size, BATCH, rates[REPS / 2], rates[0],
               rates[REPS - 1], size > 1 ? n * sizeof(vit_real) : (size_t)0);
    vit_adamw_free(&opt);
    free(images);
    vit_tape_free(tape);
    vit_model_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    if (vit_dist_init(&argc, &argv)) {
        fprintf(stderr, "vit_bench_dist: %s\n", vit_last_error());
        return 1;
    }
    int threads = 1, steps = 10;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: [mpirun -np N] vit_bench_dist [--threads N] [--steps N]\n");
            vit_dist_finalize();
            return 2;
        }
    }
    if (threads < 1 || steps < 1 || vit_set_threads(threads)) {
        fprintf(stderr, "vit_bench_dist: --threads and --steps must be positive\n");
        vit_dist_finalize();
        return 2;
    }
    int rc = bench(steps);
    vit_dist_finalize();
    return rc;
}

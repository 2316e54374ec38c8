/*
 * vit_bench - training throughput of the library against the same shapes
 * that tools/torch_vit_speed.py times in PyTorch.
 *
 * Each configuration runs in a forked child so that its peak resident
 * memory (VmHWM) is its own.  A training configuration does warm-up steps,
 * then several timed repetitions of full steps (vit_model_train_grads:
 * forward, cross-entropy and backward, one batch slice per thread; then
 * AdamW) on a batch of random images, and reports the median
 * images/s.  GFLOP/s counts 2 FLOP per multiply-add and 3x the forward for a
 * step, from the layer shapes, exactly as the PyTorch script does, so the two
 * figures are comparable.  The library's last block computes the class
 * token alone (the head reads nothing else), so it does less than that
 * count: "run GF/s" is the rate of what it does run.  A large cblas_sgemm
 * gives the machine's GEMM rate in the same run, and %GEMM is the run rate
 * as a fraction of it.
 *
 * With --precision bf16 (or auto, where it resolves to bf16) the steps run
 * in mixed precision (vit/bf16.h) and %GEMM is against a bf16 GEMM
 * (vit_gemm_bf16_packed, same size, the library's threads) instead.
 *
 *   vit_bench [--threads N] [--config NAME] [--steps N] [--reps N] [--quick] [--shapes]
 *             [--precision fp32|bf16|auto]
 *
 * NAME is digits, medium, large, attention, gemm or all (the default), or a
 * config file (FILE.cfg: image_height, image_width, channels, classes and
 * the model, of any architecture: `arch = NAME` and its keys).
 */
#include "cli.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "vit/vit.h"

typedef struct train_shape {
    const char *name;
    int img, chans, patch, dim, depth, heads, mlp;
    const char *file; /* --config FILE.cfg: the model (any architecture) from it */
} train_shape;

static const train_shape shapes[] = {
    {"digits", 8, 1, 2, 64, 4, 4, 128, NULL},
    {"medium", 28, 1, 4, 128, 6, 4, 256, NULL},
    {"large", 32, 3, 4, 192, 6, 3, 768, NULL},
};

enum { BATCH = 64, CLASSES = 10, MAX_REPS = 64 };

typedef struct options {
    int threads, steps, reps, warmup, quick, recompute, list_shapes;
    int micro_batch; /* --micro-batch (0: the model's automatic pieces) */
    int precision; /* as asked (VIT_PRECISION_*); bf16: what it resolved to */
    const char *config;
} options;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Peak resident set of this process in MB, from /proc (VmHWM), or -1. */
static double peak_rss_mb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0)
            kb = atof(line + 6);
    fclose(f);
    return kb < 0 ? -1 : kb / 1024.0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Multiply-adds of one image's forward (vit_config_macs: patch embedding,
 * per block the four projections, the two attention products and the MLP,
 * then the head, as torch_vit_speed.py counts them); with cls_only_last,
 * what the library runs in training instead: its last block computes the
 * keys and values of all T tokens but the query, attention, output
 * projection and MLP of the class token alone, T - 1 tokens fewer for
 * all but the keys and values. */
static double forward_macs(const vit_config *c, int cls_only_last)
{
    double full = (double)vit_config_macs(c);
    if (!cls_only_last || vit_config_arch(c) != vit_arch_vit())
        return full;
    vit_patch_shape ps = vit_config_patch_shape(c);
    double T = vit_patch_count(&ps) + 1, d = c->dim;
    return full - (T - 1) * (2 * d * d + 2 * T * d + 2 * d * c->mlp);
}

/* ---- GEMM rate -------------------------------------------------------- */

#ifdef VIT_HAVE_OPENBLAS_THREADS
void openblas_set_num_threads(int num_threads);
#endif
#ifdef VIT_HAVE_OPENBLAS_CORENAME
char *openblas_get_corename(void);
#endif

static double gemm_gflops(const options *o)
{
    int n = o->quick ? 1024 : 2048;
    float *a = malloc((size_t)n * n * sizeof *a), *b = malloc((size_t)n * n * sizeof *b);
    float *c = malloc((size_t)n * n * sizeof *c);
    if (!a || !b || !c) {
        free(a); free(b); free(c);
        return -1;
    }
    for (size_t i = 0; i < (size_t)n * n; i++) {
        a[i] = (float)((i * 7 % 13) - 6) / 8.0f;
        b[i] = (float)((i * 5 % 11) - 5) / 8.0f;
    }
    /* The library keeps OpenBLAS single-threaded and splits GEMMs itself;
     * the machine's rate is OpenBLAS's own on all the threads asked for. */
#ifdef VIT_HAVE_OPENBLAS_THREADS
    openblas_set_num_threads(o->threads);
#endif
    double rates[MAX_REPS];
    int reps = o->quick ? 3 : 7;
    vit_bf16_packed *pb = NULL;
    if (o->precision == VIT_PRECISION_BF16
        && (vit_bf16_packed_new(&pb) != VIT_OK || vit_bf16_pack_b(pb, 0, n, n, b, n) != VIT_OK)) {
        vit_bf16_packed_free(pb);
        free(a); free(b); free(c);
        return -1;
    }
    for (int r = -1; r < reps; r++) { /* r = -1 warms up */
        double t0 = now();
        if (pb)
            vit_gemm_bf16_packed(0, n, n, n, 1, a, n, pb, 0, c, n);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c,
                        n);
        double dt = now() - t0;
        if (r >= 0)
            rates[r] = 2.0 * n * n * (double)n / dt / 1e9;
    }
    vit_bf16_packed_free(pb);
    free(a); free(b); free(c);
    return median(rates, reps);
}

/* ---- Training step ---------------------------------------------------- */

/* ---- Where the GEMMs went --------------------------------------------- */

static char profile_text[16384];

/* Summarises the GEMM shapes of the profiling pass (steps steps in t
 * seconds): how many shapes and
 * calls each path took and the GEMMs' share of the thread time (the
 * timing itself costs a little); with
 * --shapes, every shape.  Kept as text so it prints below the figures. */
static void gemm_profile(const options *o, int steps, double t)
{
    enum { CAP = 256 };
    vit_gemm_shape sh[CAP];
    size_t n = vit_gemm_shapes(sh, CAP), len = 0;
    if (n > CAP)
        n = CAP;
    /* by path: BLAS, libxsmm, oneDNN */
    double sec[3] = {0}, flop[3] = {0};
    unsigned long long calls[3] = {0};
    int shapes[3] = {0};
    for (size_t i = 0; i < n; i++) {
        int p = sh[i].path == VIT_GEMM_XSMM ? 1 : sh[i].path == VIT_GEMM_DNNL ? 2 : 0;
        sec[p] += sh[i].seconds;
        flop[p] += 2.0 * sh[i].M * (double)sh[i].N * sh[i].K * (double)sh[i].calls;
        calls[p] += sh[i].calls;
        shapes[p]++;
    }
    double thread_time = t * o->threads;
    len += (size_t)snprintf(profile_text + len, sizeof profile_text - len,
        "  GEMM (policy %s): %d shapes/%llu calls per step on BLAS, %d/%llu on libxsmm, "
        "%d/%llu on oneDNN; %.0f%% of the thread time (BLAS %.0f%% at %.0f GFLOP/s, "
        "libxsmm %.0f%% at %.0f, oneDNN %.0f%% at %.0f)\n",
        vit_gemm_path_name(vit_gemm_get_path()), shapes[0], calls[0] / (unsigned)steps,
        shapes[1], calls[1] / (unsigned)steps, shapes[2], calls[2] / (unsigned)steps,
        100 * (sec[0] + sec[1] + sec[2]) / thread_time, 100 * sec[0] / thread_time,
        sec[0] > 0 ? flop[0] / sec[0] * 1e-9 : 0, 100 * sec[1] / thread_time,
        sec[1] > 0 ? flop[1] / sec[1] * 1e-9 : 0, 100 * sec[2] / thread_time,
        sec[2] > 0 ? flop[2] / sec[2] * 1e-9 : 0);
    for (size_t i = 0; o->list_shapes && i < n && len < sizeof profile_text; i++)
        len += (size_t)snprintf(profile_text + len, sizeof profile_text - len,
            "    %5d x %4d x %4d %c%c %s alpha%s beta %2d  %-4s %5llu calls/step %6.1f GFLOP/s\n",
            sh[i].M, sh[i].N, sh[i].K, sh[i].trans_a ? 'T' : 'N', sh[i].trans_b ? 'T' : 'N',
            sh[i].bf16 ? "bf16" : "fp32", sh[i].alpha_one ? "=1" : "!=1", sh[i].beta,
            vit_gemm_path_name(sh[i].path), sh[i].calls / (unsigned)steps,
            sh[i].seconds > 0 ? 2.0 * sh[i].M * (double)sh[i].N * sh[i].K * (double)sh[i].calls
                                    / sh[i].seconds * 1e-9 : 0);
}

static int run_config(const char *name, const vit_config *c, const options *o, double gemm_rate);

static int run_train(const train_shape *s, const options *o, double gemm_rate)
{
    vit_config cfg;
    vit_config_default(&cfg);
    if (s->file) { /* the file's model and image shape, the benchmark's batch */
        vit_train_config unused; /* the benchmark's own batch, precision, recompute */
        vit_train_config_default(&unused);
        if (vit_config_load(&cfg, &unused, s->file) != VIT_OK) {
            fprintf(stderr, "vit_bench: %s\n", vit_last_error());
            return 1;
        }
        return run_config(s->name, &cfg, o, gemm_rate);
    }
    cfg.image_height = cfg.image_width = s->img;
    cfg.channels = s->chans;
    cfg.classes = CLASSES;
    /* Non-overlapping patches, as tools/torch_vit_speed.py builds them
     * (the default recipe's overlap is not the benchmark's shape). */
    cfg.patch = s->patch;
    cfg.patch_stride = 0;
    cfg.patch_pad = 0;
    cfg.dim = s->dim;
    cfg.depth = s->depth;
    cfg.heads = s->heads;
    cfg.mlp = s->mlp;
    cfg.pool = VIT_POOL_CLS;
    return run_config(s->name, &cfg, o, gemm_rate);
}

static int run_config(const char *name, const vit_config *c, const options *o, double gemm_rate)
{
    const vit_config cfg = *c;
    vit_model *m = vit_model_new(&cfg);
    size_t npix = (size_t)BATCH * cfg.image_height * cfg.image_width * cfg.channels;
    vit_real *images = malloc(npix * sizeof *images);
    int labels[BATCH];
    vit_adamw opt;
    memset(&opt, 0, sizeof opt);
    if (!m || !images || vit_model_set_precision(m, o->precision) < 0
        || vit_model_set_recompute(m, o->recompute) != VIT_OK
        || vit_model_set_micro_batch(m, o->micro_batch) != VIT_OK
        || vit_adamw_init(&opt, vit_model_param_count(m), 0.9, 0.999, 1e-8, 0.05) != VIT_OK) {
        fprintf(stderr, "vit_bench: setup failed: %s\n", vit_last_error());
        return 1;
    }
    vit_rng rng;
    vit_rng_seed(&rng, 1234);
    vit_model_init(m, &rng);
    for (size_t i = 0; i < npix; i++)
        images[i] = (vit_real)vit_rng_normal(&rng);
    for (int i = 0; i < BATCH; i++)
        labels[i] = (int)vit_rng_below(&rng, (unsigned)cfg.classes);
    int ngroups;
    const vit_param_group *groups = vit_model_groups(m, &ngroups);

    double rates[MAX_REPS], grad_share[MAX_REPS];
    for (int r = -2; r < o->reps; r++) {
        /* r = -2 warms up; r = -1 is the profiling pass, with every GEMM
         * timed, which the figures leave out. */
        int steps = r == -2 ? o->warmup : o->steps;
        vit_gemm_stats_reset();
        vit_gemm_set_timing(r == -1);
        double t0 = now(), t_grads = 0;
        for (int st = 0; st < steps; st++) {
            double loss, tg = now();
            if (vit_model_train_grads(m, images, labels, BATCH, 0, &loss, NULL) != VIT_OK) {
                fprintf(stderr, "vit_bench: step failed: %s\n", vit_last_error());
                return 1;
            }
            t_grads += now() - tg;
            if (vit_adamw_step(&opt, vit_model_params(m), vit_model_grads(m), groups, ngroups,
                               1e-4) != VIT_OK) {
                fprintf(stderr, "vit_bench: step failed: %s\n", vit_last_error());
                return 1;
            }
        }
        double t = now() - t0;
        vit_gemm_set_timing(0);
        if (r == -1)
            gemm_profile(o, steps, t);
        if (r >= 0) {
            rates[r] = (double)BATCH * steps / t;
            grad_share[r] = t_grads / t;
        }
    }
    double ips = median(rates, o->reps);
    double lo = rates[0], hi = rates[o->reps - 1]; /* sorted by median() */
    double gf = 6.0 * forward_macs(&cfg, 0) * ips / 1e9;
    double run = 6.0 * forward_macs(&cfg, 1) * ips / 1e9;
    printf("%-10s %9.0f %6.0f-%-6.0f %9.1f %9.1f %7.0f%% %9.1f\n", name, ips, lo, hi, gf, run,
           gemm_rate > 0 ? 100.0 * run / gemm_rate : 0.0, peak_rss_mb());
    double share = median(grad_share, o->reps);
    printf("  phases (timed reps, median): forward+loss+backward %.0f%%, AdamW %.0f%%\n",
           100 * share, 100 * (1 - share));
    /* 0: slices under 3 images, which the model runs whole without probing. */
    int slice = (BATCH + o->threads - 1) / o->threads, piece = vit_model_micro_batch(m);
    if (piece <= 0 || piece > slice)
        piece = slice;
    printf("  pieces: %d of at most %d images a thread's slice of %d (%s)\n",
           (slice + piece - 1) / piece, piece, slice,
           o->micro_batch ? "--micro-batch" : "automatic: about 24 MiB of tape each");
    fputs(profile_text, stdout);
    vit_adamw_free(&opt);
    free(images);
    vit_model_free(m);
    return 0;
}

/* ---- Attention alone -------------------------------------------------- */

/* vit_sdpa forward + backward, batch 1, 4 heads of width 64, n tokens, by
 * the standard path (probs [H, n, n] kept for the backward, n * n of work)
 * or the tiled one (only lse [H, n] kept, work independent of n).  With
 * --precision bf16 the standard path's products take bf16 inputs
 * (vit_bf16_thread_mixed); the tiled core has no bf16 path and says so. */
typedef struct attn_arg {
    int n, tiled;
} attn_arg;

static int run_attention(const attn_arg *arg, const options *o)
{
    const int H = 4, dh = 64, n = arg->n;
    vit_sdpa a;
    memset(&a, 0, sizeof a);
    a.batch = 1;
    a.heads = H;
    a.n_q = a.n_k = n;
    a.d_k = a.d_v = dh;
    size_t nx = (size_t)n * H * dh;
    size_t nsave = arg->tiled ? (size_t)H * n : (size_t)H * n * n;
    size_t nwork = arg->tiled ? vit_sdpa_tiled_work_size(&a) : vit_sdpa_work_size(&a);
    vit_real *buf = calloc(8 * nx, sizeof *buf);
    vit_real *saved = malloc(nsave * sizeof *saved); /* probs or lse */
    vit_real *work = malloc(nwork * sizeof *work);
    if (!buf || !saved || !work) {
        fprintf(stderr, "vit_bench: attention n=%d: out of memory\n", n);
        return 1;
    }
    vit_real *q = buf, *k = q + nx, *v = k + nx, *out = v + nx, *dout = out + nx;
    vit_real *dq = dout + nx, *dk = dq + nx, *dv = dk + nx;
    vit_rng rng;
    vit_rng_seed(&rng, 99);
    for (size_t i = 0; i < 5 * nx; i++)
        buf[i] = (vit_real)vit_rng_normal(&rng);
    int reps = o->quick ? 2 : (n >= 4096 ? 3 : 7);
    double times[MAX_REPS];
    const int bf16 = o->precision == VIT_PRECISION_BF16 && !arg->tiled;
    vit_bf16_thread_mixed(bf16);
    for (int r = -1; r < reps; r++) {
        double t0 = now();
        int rc = arg->tiled
            ? vit_sdpa_tiled_forward(&a, out, saved, q, k, v, work) != VIT_OK
              || vit_sdpa_tiled_backward(&a, dq, dk, dv, NULL, dout, out, saved, q, k, v,
                                         work) != VIT_OK
            : vit_sdpa_forward(&a, out, saved, q, k, v) != VIT_OK
              || vit_sdpa_backward(&a, dq, dk, dv, NULL, dout, saved, q, k, v, work) != VIT_OK;
        if (rc) {
            fprintf(stderr, "vit_bench: attention failed: %s\n", vit_last_error());
            return 1;
        }
        if (r >= 0)
            times[r] = now() - t0;
    }
    double t = median(times, reps);
    /* QK^T and PV forward, four products of the same size backward (the
     * tiled backward's recomputed products are not counted). */
    double flops = 6.0 * 2.0 * (double)H * n * (double)n * dh;
    printf("attn %-8s n=%-5d %9.2f ms %9.1f GFLOP/s %9.1f MB  %s\n",
           arg->tiled ? "tiled" : "standard", n, 1e3 * t, flops / t / 1e9, peak_rss_mb(),
           bf16 ? "bf16" : "fp32");
    free(buf);
    free(saved);
    free(work);
    return 0;
}

/* ---- Driver ----------------------------------------------------------- */

/* Runs fn in a child process so that the peak memory it reports is its own.
 * The child's stdout is flushed before it exits. */
typedef int (*bench_fn)(const void *arg, const options *o, double gemm_rate);

static int in_child(bench_fn fn, const void *arg, const options *o, double gemm_rate)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return fn(arg, o, gemm_rate);
    if (pid == 0) {
        int rc = fn(arg, o, gemm_rate);
        fflush(stdout);
        _exit(rc);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) < 0)
        return 1;
    if (WIFSIGNALED(status)) { /* say so: a crash must not pass as a silent exit 1 */
        fprintf(stderr, "vit_bench: the benchmark's process died of signal %d\n",
                WTERMSIG(status));
        return 1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

static int train_fn(const void *arg, const options *o, double g)
{
    return run_train(arg, o, g);
}

static int attn_fn(const void *arg, const options *o, double g)
{
    (void)g;
    return run_attention(arg, o);
}

/* The GEMM rate, measured in a child too (OpenBLAS's buffers for the big
 * matrices must not count in the parent's peak), sent back through a pipe. */
static double gemm_in_child(const options *o)
{
    int fd[2];
    double r = -1;
    fflush(stdout);
    if (pipe(fd) != 0)
        return gemm_gflops(o);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        r = gemm_gflops(o);
        ssize_t w = write(fd[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    if (pid > 0 && read(fd[0], &r, sizeof r) != (ssize_t)sizeof r)
        r = -1;
    close(fd[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    return r;
}

static int usage(FILE *f)
{
    fprintf(f,
        "usage: vit_bench [--threads N] [--config NAME] [--steps N] [--reps N] [--quick]\n"
        "                 [--recompute] [--shapes] [--precision fp32|bf16|auto]\n"
        "                 [--micro-batch N]\n"
        "  NAME: digits, medium, large, attention, gemm or all (default), or a config\n"
        "        file FILE.cfg of any architecture (with image_height, image_width,\n"
        "        channels, classes)\n"
        "  --threads N  threads for our loops and for OpenBLAS (default: all cores)\n"
        "  --steps N    timed training steps per repetition (default 20)\n"
        "  --reps N     timed repetitions; the median is reported (default 5)\n"
        "  --quick      fewer steps and repetitions, smaller GEMM\n"
        "  --recompute  train with recompute = 1: each block recomputed in the backward\n"
        "  --micro-batch N  each thread's slice in pieces of at most N images (the\n"
        "               recipe's micro_batch; default 0: pieces of about 24 MiB of tape)\n"
        "  --shapes     list every GEMM shape of a step, its precision, path (blas, xsmm\n"
        "               or dnnl) and rate\n"
        "  --precision P  the steps' matrix products: fp32 (default), bf16 (bfloat16\n"
        "               inputs, float32 sums; fp32 where the CPU cannot) or auto;\n"
        "               for attention, the standard core's (the tiled one stays fp32)\n"
        "  VIT_GEMM=auto|blas|xsmm in the environment picks the GEMM path (see vit/gemm.h)\n");
    return f == stdout ? 0 : 2;
}

static int parse_int(const char *flag, const char *v, int lo, int hi, int *out)
{
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || x < lo || x > hi) {
        fprintf(stderr, "vit_bench: %s needs an integer in [%d, %d]\n", flag, lo, hi);
        return 0;
    }
    *out = (int)x;
    return 1;
}

int main(int argc, char **argv)
{
    if (!cli_gemm_env_ok("vit_bench")) /* a VIT_GEMM it would not take: refused */
        return 2;
    options o = {0, 20, 5, 5, 0, 0, 0, 0, VIT_PRECISION_FP32, "all"};
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o.threads = ncpu > 0 ? (int)ncpu : 1;
    int steps_set = 0, reps_set = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return usage(stdout);
        if (!strcmp(a, "--quick") || !strcmp(a, "--recompute")) {
            *(a[2] == 'q' ? &o.quick : &o.recompute) = 1;
            continue;
        }
        if (!strcmp(a, "--shapes")) {
            o.list_shapes = 1;
            continue;
        }
        if (!strcmp(a, "--threads")) {
            if (!parse_int(a, v, 1, 256, &o.threads)) return 2;
        } else if (!strcmp(a, "--micro-batch")) {
            if (!parse_int(a, v, 0, 1 << 20, &o.micro_batch)) return 2;
        } else if (!strcmp(a, "--steps")) {
            if (!parse_int(a, v, 1, 100000, &o.steps)) return 2;
            steps_set = 1;
        } else if (!strcmp(a, "--reps")) {
            if (!parse_int(a, v, 1, MAX_REPS, &o.reps)) return 2;
            reps_set = 1;
        } else if (!strcmp(a, "--precision")) {
            vit_train_config pc;
            vit_train_config_default(&pc);
            if (!v || vit_train_config_set(&pc, "precision", v) != VIT_OK) {
                fprintf(stderr, "vit_bench: --precision needs fp32, bf16 or auto\n");
                return 2;
            }
            o.precision = pc.precision;
        } else if (!strcmp(a, "--config")) {
            if (!v) return usage(stderr);
            o.config = v;
        } else {
            fprintf(stderr, "vit_bench: unknown option %s\n", a);
            return usage(stderr);
        }
        i++;
    }
    if (o.quick) {
        if (!steps_set) o.steps = 5;
        if (!reps_set) o.reps = 3;
        o.warmup = 2;
    }
    const char *c = o.config;
    int all = !strcmp(c, "all"), known = all || !strcmp(c, "attention") || !strcmp(c, "gemm");
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        known |= !strcmp(c, shapes[i].name);
    /* A config file: its model, of any architecture (arch = NAME). */
    train_shape from_file = {.name = strrchr(c, '/') ? strrchr(c, '/') + 1 : c, .file = c};
    if (!known && access(c, R_OK) == 0)
        known = 2;
    if (!known) {
        fprintf(stderr, "vit_bench: unknown config %s\n", c);
        return usage(stderr);
    }
    if (vit_set_threads(o.threads) != VIT_OK)
        fprintf(stderr, "vit_bench: %s\n", vit_last_error());

    printf("vit_bench %s (%s), %d thread(s), batch %d, %d reps x %d steps%s\n", vit_version(),
           VIT_REAL_NAME, o.threads, BATCH, o.reps, o.steps, o.recompute ? ", recompute" : "");
    /* Every figure here assumes the cores are ours: say how busy they were. */
    FILE *la = fopen("/proc/loadavg", "r");
    double load = -1;
    if (la) {
        if (fscanf(la, "%lf", &load) != 1)
            load = -1;
        fclose(la);
    }
    if (load >= 0)
        printf("load average %.2f on %ld CPUs%s\n", load, ncpu,
               load > 0.5 ? " (a busy machine: figures are low and noisy)" : "");
#ifdef VIT_HAVE_OPENBLAS_CORENAME
    const char *core = openblas_get_corename();
#else
    const char *core = "?";
#endif
    printf("GEMM path %s (libxsmm %s, oneDNN for bf16 %s), OpenBLAS kernels %s\n",
           vit_gemm_path_name(vit_gemm_get_path()),
           vit_gemm_have_xsmm() ? "built in" : "not built in",
           vit_gemm_have_dnnl() ? "usable" : "not usable", core ? core : "?");
    if (o.precision != VIT_PRECISION_FP32) {
        char why[200];
        o.precision = vit_precision_resolve(o.precision, why, sizeof why);
        printf("precision %s (bf16 path %s)\n", why, vit_bf16_path_name(vit_bf16_get_path()));
    }
    int rc = 0;
    /* The GEMM rate first, in the parent, so the training rows can quote it. */
    double gemm_rate = 0;
    if (strcmp(c, "attention")) {
        gemm_rate = gemm_in_child(&o);
        printf("%s %d^3: %.1f GFLOP/s\n", o.precision == VIT_PRECISION_BF16 ? "bf16 GEMM" : "sgemm",
               o.quick ? 1024 : 2048, gemm_rate);
        rc |= gemm_rate <= 0;
    }
    int header = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        if (!all && strcmp(c, shapes[i].name))
            continue;
        if (!header++)
            printf("%-10s %9s %13s %9s %9s %8s %9s\n", "config", "images/s", "range", "GFLOP/s",
                   "run GF/s", "%GEMM", "peak MB");
        rc |= in_child(train_fn, &shapes[i], &o, gemm_rate);
    }
    if (known == 2) {
        printf("%-10s %9s %13s %9s %9s %8s %9s\n", "config", "images/s", "range", "GFLOP/s",
               "run GF/s", "%GEMM", "peak MB");
        rc |= in_child(train_fn, &from_file, &o, gemm_rate);
    }
    if (all || !strcmp(c, "attention")) {
        static const int ns[] = {256, 1024, 4096};
        for (int i = 0; i < 3; i++)
            for (int tiled = 0; tiled < 2; tiled++) {
                attn_arg arg = {ns[i], tiled};
                rc |= in_child(attn_fn, &arg, &o, 0);
            }
    }
    return rc ? 1 : 0;
}

/*
 * A training step's slices summed piece by piece as their backward makes
 * the gradients final (see slice_sum.h).
 *
 * The buffer is cut into chunks of CHUNK values, each with a count of the
 * values the slices have reported final (an atomic: slices report from
 * their own threads).  A chunk is complete when that count reaches
 * nbufs x its length; the thread whose report completes it adds the
 * slices' chunk into bufs[0] (bufs[0][i] += bufs[s][i] for s = 1 .. nbufs-1,
 * the order of the sum after the step) and queues it.  Its acquire-release
 * increment makes every slice's writes to the chunk visible to it; the
 * queue's lock makes its sum visible to the calling thread, which alone
 * passes chunks on (the report function may call MPI).
 *
 * Waiting: the calling thread, its own slice over, sleeps on a condition
 * variable that a completed chunk or a finished slice signals, with a
 * timeout of 1 ms after which it calls fn(ctx, 0, 0): Open MPI moves a
 * non-blocking sum on only inside MPI calls, and a worker may be kept
 * from its CPU for a while on a busy machine.  Nothing spins.
 */
#include "slice_sum.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "error.h"
#include "threads.h"

/* Values a chunk: 8 KiB of float32.  Small beside a bucket of the sum over
 * the ranks (1 MiB by default), so a bucket is complete at most a few
 * chunks' reports after its last value; and a step's few hundred to
 * thousands of chunks cost a lock each. */
#define CHUNK 2048

struct vit_slice_sum {
    size_t n, nchunks;
    atomic_size_t *got;   /* per chunk: values reported, over all slices */
    size_t *queue;        /* complete chunks, in completion order */
    size_t head, tail;    /* queue[head .. tail) not passed on yet (under lock) */
    int done;             /* workers' slices over (under lock) */
    pthread_mutex_t lock;
    pthread_cond_t wake;  /* a chunk queued or a slice over */
    clockid_t clock;      /* wake's */
    vit_real **bufs;
    int nbufs, cap, concurrent;
    void (*fn)(void *ctx, size_t offset, size_t count);
    void *ctx;
};

vit_slice_sum *vit_slice_sum_new(size_t n)
{
    vit_slice_sum *g = calloc(1, sizeof *g);
    if (!g) {
        vit_fail(VIT_ENOMEM, "vit_model_train_grads: out of memory");
        return NULL;
    }
    g->n = n;
    g->nchunks = (n + CHUNK - 1) / CHUNK;
    g->got = calloc(g->nchunks + 1, sizeof *g->got);
    g->queue = calloc(g->nchunks + 1, sizeof *g->queue);
    pthread_condattr_t at;
    int ok = g->got && g->queue && pthread_condattr_init(&at) == 0;
    if (ok) {
        g->clock = pthread_condattr_setclock(&at, CLOCK_MONOTONIC) == 0 ? CLOCK_MONOTONIC
                                                                        : CLOCK_REALTIME;
        ok = pthread_cond_init(&g->wake, &at) == 0;
        pthread_condattr_destroy(&at);
        if (ok && pthread_mutex_init(&g->lock, NULL) != 0) {
            pthread_cond_destroy(&g->wake);
            ok = 0;
        }
    }
    if (!ok) {
        free(g->got);
        free(g->queue);
        free(g);
        vit_fail(VIT_ENOMEM, "vit_model_train_grads: out of memory for %zu gradient chunks",
                 (n + CHUNK - 1) / CHUNK);
        return NULL;
    }
    return g;
}

void vit_slice_sum_free(vit_slice_sum *g)
{
    if (!g)
        return;
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->wake);
    free(g->got);
    free(g->queue);
    free(g->bufs);
    free(g);
}

int vit_slice_sum_begin(vit_slice_sum *g, vit_real *const *bufs, int nbufs, int concurrent,
                        void (*fn)(void *ctx, size_t offset, size_t count), void *ctx)
{
    if (nbufs > g->cap) {
        vit_real **b = realloc(g->bufs, (size_t)nbufs * sizeof *b);
        if (!b)
            return vit_fail(VIT_ENOMEM, "vit_model_train_grads: out of memory");
        g->bufs = b;
        g->cap = nbufs;
    }
    for (int s = 0; s < nbufs; s++)
        g->bufs[s] = bufs[s];
    for (size_t k = 0; k < g->nchunks; k++)
        atomic_store_explicit(&g->got[k], 0, memory_order_relaxed);
    g->nbufs = nbufs;
    g->concurrent = concurrent;
    g->fn = fn;
    g->ctx = ctx;
    g->head = g->tail = 0;
    g->done = 0;
    return VIT_OK; /* the workers see all this through vit_parallel's start */
}

static size_t chunk_end(const vit_slice_sum *g, size_t k)
{
    return (k + 1) * CHUNK < g->n ? (k + 1) * CHUNK : g->n;
}

/* bufs[0] += bufs[s] over chunks [k0, k1) that are not complete (every
 * chunk when all is set), s = 1 .. nbufs-1 in order. */
static void add_chunks(const vit_slice_sum *g, size_t k0, size_t k1, int all)
{
    vit_real *to = g->bufs[0];
    for (size_t k = k0; k < k1; k++) {
        size_t lo = k * CHUNK, hi = chunk_end(g, k);
        if (!all && atomic_load_explicit(&g->got[k], memory_order_relaxed)
                        >= (size_t)g->nbufs * (hi - lo))
            continue;
        for (int s = 1; s < g->nbufs; s++) {
            const vit_real *from = g->bufs[s];
            for (size_t i = lo; i < hi; i++)
                to[i] += from[i];
        }
    }
}

/* Passes the queue on to fn (calling thread; lock not held). */
static void drain(vit_slice_sum *g)
{
    for (;;) {
        pthread_mutex_lock(&g->lock);
        size_t h = g->head, t = g->tail;
        g->head = t;
        pthread_mutex_unlock(&g->lock);
        if (h == t)
            return;
        for (size_t q = h; q < t; q++) {
            size_t k = g->queue[q], lo = k * CHUNK;
            g->fn(g->ctx, lo, chunk_end(g, k) - lo);
        }
    }
}

void vit_slice_sum_report(vit_slice_sum *g, size_t offset, size_t count, int on_caller)
{
    size_t end = offset + count < g->n ? offset + count : g->n;
    for (size_t i = offset; i < end;) {
        size_t k = i / CHUNK, top = chunk_end(g, k), take = (top < end ? top : end) - i;
        size_t full = (size_t)g->nbufs * (top - k * CHUNK);
        size_t before = atomic_fetch_add_explicit(&g->got[k], take, memory_order_acq_rel);
        if (before < full && before + take >= full) {
            add_chunks(g, k, k + 1, 1);
            pthread_mutex_lock(&g->lock);
            g->queue[g->tail++] = k;
            pthread_cond_signal(&g->wake);
            pthread_mutex_unlock(&g->lock);
        }
        i += take;
    }
    if (on_caller)
        drain(g);
}

void vit_slice_sum_done(vit_slice_sum *g)
{
    pthread_mutex_lock(&g->lock);
    g->done++;
    pthread_cond_signal(&g->wake);
    pthread_mutex_unlock(&g->lock);
}

void vit_slice_sum_serve(vit_slice_sum *g)
{
    pthread_mutex_lock(&g->lock);
    for (;;) {
        if (g->head < g->tail) {
            pthread_mutex_unlock(&g->lock);
            drain(g);
            pthread_mutex_lock(&g->lock);
            continue;
        }
        if (g->done >= g->concurrent - 1)
            break;
        struct timespec until;
        clock_gettime(g->clock, &until);
        until.tv_nsec += 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        if (pthread_cond_timedwait(&g->wake, &g->lock, &until) == ETIMEDOUT) {
            pthread_mutex_unlock(&g->lock);
            g->fn(g->ctx, 0, 0);
            pthread_mutex_lock(&g->lock);
        }
    }
    pthread_mutex_unlock(&g->lock);
}

typedef struct {
    vit_slice_sum *g;
} rest_job;

static void add_rest(void *ctx, size_t lo, size_t hi)
{
    add_chunks(((rest_job *)ctx)->g, lo, hi, 0);
}

void vit_slice_sum_finish(vit_slice_sum *g, int sum)
{
    drain(g);
    if (!sum)
        return;
    rest_job R = {g};
    vit_parallel(vit_threads_for(2.0 * (double)g->n * g->nbufs), g->nchunks, add_rest, &R);
}

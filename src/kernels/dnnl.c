/* bf16 products through oneDNN's matmul primitive (see dnnl.h).
 *
 * Threads.  The library splits its products itself (a training step runs
 * one slice of the batch per thread, op-level work splits rows across the
 * pool of src/kernels/threads.c), so every call here computes its whole
 * product on the calling thread.  Debian's oneDNN runs on OpenMP
 * (libgomp) and sizes its work by omp_get_max_threads() both when a
 * primitive is made and when it runs; around both, this thread's OpenMP
 * thread count is set to 1 and then restored (it is a per-thread setting,
 * so a program's own OpenMP regions are left as they were).  With one
 * thread oneDNN runs the kernel inline: no OpenMP team is started, and
 * nothing spins beside the library's own pool.
 *
 * Primitives.  One per shape (rows, N, Kp, ldc, beta), made at the shape's
 * first call and shared by every thread (oneDNN's primitives may run on
 * several threads at once); each thread keeps a small direct-mapped table
 * in front of the shared list, which takes a lock.  The primitives use a
 * scratchpad the caller provides (a per-thread buffer), not oneDNN's
 * global one.  Each thread has its own stream.  Everything is released at
 * unload (the library's destructor), the threads' streams and buffers when
 * the threads end. */
#include "dnnl.h"

#include <stddef.h>

#if defined(VIT_HAVE_DNNL) && !defined(VIT_DOUBLE)
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

/* ---- the engine ----------------------------------------------------------- */

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static const char *missing = "oneDNN did not start";
static pthread_key_t thread_key;
static int thread_key_ok;

typedef struct {
    dnnl_stream_t stream;
    void *scratch;
    size_t scratch_cap;
} thread_state;

static void thread_state_free(void *v)
{
    thread_state *t = v;
    if (t->stream)
        dnnl_stream_destroy(t->stream);
    free(t->scratch);
    free(t);
}

static void engine_setup(void)
{
    /* oneDNN's bf16 matmul without AVX-512 BF16 or AMX emulates the
     * products or falls back to reference code: slower than libxsmm's
     * kernels or the float32 fallback, so not taken. */
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if (((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16)
        != (unsigned)dnnl_cpu_isa_avx512_core_bf16) {
        missing = "oneDNN finds no AVX-512 BF16 or AMX on this CPU";
        return;
    }
    if (pthread_key_create(&thread_key, thread_state_free) != 0)
        return;
    thread_key_ok = 1;
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
        engine = NULL;
        return;
    }
    missing = NULL;
}

const char *vit_dnnl_missing(void)
{
    pthread_once(&engine_once, engine_setup);
    return missing;
}

static thread_state *my_state(void)
{
    thread_state *t = pthread_getspecific(thread_key);
    if (t)
        return t;
    t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    if (dnnl_stream_create(&t->stream, engine, dnnl_stream_default_flags) != dnnl_success
        || pthread_setspecific(thread_key, t) != 0) {
        thread_state_free(t);
        return NULL;
    }
    return t;
}

/* ---- primitives ---------------------------------------------------------- */

typedef struct prim {
    int rows, N, Kp, ldc, beta;
    dnnl_primitive_t p; /* NULL: oneDNN has no fast kernel for the shape */
    size_t scratch;     /* bytes of scratchpad it needs */
    struct prim *next;
} prim;

static pthread_mutex_t prims_lock = PTHREAD_MUTEX_INITIALIZER;
static prim *prims;

enum { LOOKASIDE = 64 };
static _Thread_local const prim *lookaside[LOOKASIDE];

static int same(const prim *e, int rows, int N, int Kp, int ldc, int beta)
{
    return e->rows == rows && e->N == N && e->Kp == Kp && e->ldc == ldc && e->beta == beta;
}

/* The primitive for the shape in e, or NULL (oneDNN refused it, or picked
 * its reference code).  Called with OpenMP at one thread. */
static dnnl_primitive_t make(prim *e)
{
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t da = {e->rows, e->Kp}, db = {e->Kp, e->N}, dc = {e->rows, e->N};
    dnnl_dims_t sc = {e->ldc, 1};
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t p = NULL;
    dnnl_matmul_desc_t md;
    if (dnnl_memory_desc_init_by_tag(&a, 2, da, dnnl_bf16, dnnl_ab) != dnnl_success
        || dnnl_memory_desc_init_by_tag(&b, 2, db, dnnl_bf16, dnnl_ab) != dnnl_success
        || dnnl_memory_desc_init_by_strides(&c, 2, dc, dnnl_f32, sc) != dnnl_success
        || dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) != dnnl_success
        || dnnl_primitive_attr_create(&attr) != dnnl_success
        || dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)
               != dnnl_success)
        goto out;
    if (e->beta) {
        if (dnnl_post_ops_create(&ops) != dnnl_success
            || dnnl_post_ops_append_sum(ops, 1.0f) != dnnl_success
            || dnnl_primitive_attr_set_post_ops(attr, ops) != dnnl_success)
            goto out;
    }
    if (dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL) != dnnl_success)
        goto out;
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success
        || !impl || strncmp(impl, "ref", 3) == 0)
        goto out;
    const dnnl_memory_desc_t *s = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    e->scratch = s ? dnnl_memory_desc_get_size(s) : 0;
    if (dnnl_primitive_create(&p, pd) != dnnl_success)
        p = NULL;
out:
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (ops)
        dnnl_post_ops_destroy(ops);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return p;
}

static const prim *find(int rows, int N, int Kp, int ldc, int beta)
{
    unsigned h = ((((unsigned)rows * 31u + (unsigned)N) * 31u + (unsigned)Kp) * 31u
                  + (unsigned)ldc) * 2u + (unsigned)beta;
    const prim **slot = &lookaside[h % LOOKASIDE];
    if (*slot && same(*slot, rows, N, Kp, ldc, beta))
        return *slot;
    pthread_mutex_lock(&prims_lock);
    prim *e = prims;
    while (e && !same(e, rows, N, Kp, ldc, beta))
        e = e->next;
    if (!e && (e = calloc(1, sizeof *e)) != NULL) {
        *e = (prim){rows, N, Kp, ldc, beta, NULL, 0, prims};
        e->p = make(e);
        prims = e;
    }
    pthread_mutex_unlock(&prims_lock);
    if (e)
        *slot = e;
    return e;
}

/* ---- the product ----------------------------------------------------------- */

int vit_dnnl_bf16(int rows, int N, int Kp, const uint16_t *A, const uint16_t *B, float *C,
                  int ldc, int beta)
{
    if (vit_dnnl_missing())
        return 0;
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    int ok = 0;
    const prim *e = find(rows, N, Kp, ldc, beta != 0);
    thread_state *t = e && e->p ? my_state() : NULL;
    if (t && t->scratch_cap < e->scratch) {
        free(t->scratch);
        t->scratch = malloc(e->scratch);
        t->scratch_cap = t->scratch ? e->scratch : 0;
    }
    if (t && t->scratch_cap >= e->scratch) {
        const dnnl_memory_desc_t *mds[4];
        dnnl_primitive_desc_t pd;
        dnnl_memory_t mem[4] = {NULL, NULL, NULL, NULL};
        static const int which[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST,
                                     DNNL_ARG_SCRATCHPAD};
        static const dnnl_query_t query[4] = {dnnl_query_src_md, dnnl_query_weights_md,
                                              dnnl_query_dst_md, dnnl_query_scratchpad_md};
        void *data[4] = {(void *)A, (void *)B, C, t->scratch};
        dnnl_exec_arg_t args[4];
        int n = 0;
        ok = dnnl_primitive_get_primitive_desc(e->p, (const_dnnl_primitive_desc_t *)&pd)
             == dnnl_success;
        for (int i = 0; i < 4 && ok; i++) {
            mds[i] = dnnl_primitive_desc_query_md(pd, query[i], 0);
            if (i == 3 && (!mds[i] || dnnl_memory_desc_get_size(mds[i]) == 0))
                break;
            ok = mds[i] && dnnl_memory_create(&mem[i], mds[i], engine, data[i]) == dnnl_success;
            args[n++] = (dnnl_exec_arg_t){which[i], mem[i]};
        }
        ok = ok && dnnl_primitive_execute(e->p, t->stream, n, args) == dnnl_success
             && dnnl_stream_wait(t->stream) == dnnl_success;
        for (int i = 0; i < 4; i++)
            if (mem[i])
                dnnl_memory_destroy(mem[i]);
    }
    omp_set_num_threads(threads);
    return ok;
}

/* At unload: the primitives, the engine and this thread's state (the
 * other threads' went with them, or are still reachable from them). */
__attribute__((destructor)) static void dnnl_teardown(void)
{
    pthread_mutex_lock(&prims_lock);
    while (prims) {
        prim *e = prims;
        prims = e->next;
        if (e->p)
            dnnl_primitive_destroy(e->p);
        free(e);
    }
    pthread_mutex_unlock(&prims_lock);
    for (int i = 0; i < LOOKASIDE; i++)
        lookaside[i] = NULL;
    if (thread_key_ok) {
        thread_state *t = pthread_getspecific(thread_key);
        if (t) {
            pthread_setspecific(thread_key, NULL);
            thread_state_free(t);
        }
    }
    if (engine)
        dnnl_engine_destroy(engine);
    engine = NULL;
    missing = "oneDNN was released (the library is being unloaded)";
}

#else

const char *vit_dnnl_missing(void)
{
#ifdef VIT_DOUBLE
    return "the float64 library has no bf16 GEMM";
#else
    return "this library was built without oneDNN";
#endif
}

int vit_dnnl_bf16(int rows, int N, int Kp, const uint16_t *A, const uint16_t *B, float *C,
                  int ldc, int beta)
{
    (void)rows, (void)N, (void)Kp, (void)A, (void)B, (void)C, (void)ldc, (void)beta;
    return 0;
}

#endif

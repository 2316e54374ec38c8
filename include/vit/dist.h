/*
 * vit/dist.h - data-parallel training over MPI, or a single process.
 *
 * The library is usable with or without MPI.  When it was built with MPI
 * (meson option -Dmpi=enabled/auto and Open MPI found) and the program was
 * launched by mpirun, vit_dist_init() joins the job; otherwise everything
 * here behaves as a job of one rank and costs nothing.  Launching without
 * mpirun never initialises MPI, so a plain `vit_train` works even where
 * MPI refuses singleton starts (e.g. as root).
 *
 * Thread safety: call from the main thread only.  The functions that
 * combine values across ranks are collective: every rank must make the same
 * calls in the same order (with the same n), or the job deadlocks.
 */
#ifndef VIT_DIST_H
#define VIT_DIST_H

#include "vit/core.h"

VIT_BEGIN_DECLS

/* Joins the MPI job if the process was started by mpirun (and MPI support
 * was built); returns VIT_OK otherwise too.  Call once, before training.
 * argc and argv are main's (MPI may read them).  Returns VIT_OK, or VIT_EIO
 * when MPI_Init fails. */
int vit_dist_init(int *argc, char ***argv);

/* Leaves the MPI job (no-op without one).  Cannot fail. */
void vit_dist_finalize(void);

/* This process's rank (0-based) and the number of ranks (1 without MPI).
 * Cannot fail. */
int vit_dist_rank(void);
int vit_dist_size(void);

/* Nonzero if this build has MPI support. */
int vit_dist_available(void);

/* In-place sum over all ranks of x[n] (vit_real), of d[n] (double) and of
 * k[n] (int): the caller's buffer is overwritten with the total on every
 * rank (a flat array; for a model, its whole flat gradient buffer).  No-ops
 * for one rank or n = 0.  The buffer must hold n values (not checked).
 * Collective.  Returns VIT_OK or VIT_EIO naming the MPI error. */
int vit_dist_sum(vit_real *x, size_t n);
int vit_dist_sum_double(double *d, int n);
int vit_dist_sum_int(int *k, int n);

/* The smallest value of code over all ranks (errors are negative, so any
 * rank's failure makes every rank fail together instead of deadlocking).
 * Collective; cannot fail (returns code itself for one rank). */
int vit_dist_agree(int code);

/* 1 if every rank passed the same value, else 0 (always 1 for one rank).
 * Used to prove that replicas hold identical parameters.  Collective. */
int vit_dist_same(unsigned long long value);

/* Ends every rank of a job of several ranks with exit status `status`
 * (MPI_Abort: does not return then).  In a job of one rank it does nothing
 * and returns status, for the caller to exit with: the library never ends
 * the process itself. */
int vit_dist_abort_job(int status);

/* ---- Sums overlapped with the backward ------------------------------------
 *
 * A flat buffer (a model's gradients) summed over the ranks in buckets of
 * VIT_DIST_BUCKET_BYTES while it is still being filled: each bucket's
 * non-blocking all-reduce (MPI_Iallreduce) starts as soon as the caller has
 * reported all of its values final, and vit_dist_buckets_finish waits for
 * them all.  Buckets are cut from the END of the buffer (a model's last
 * block first, as its backward produces them) and started strictly in that
 * order on every rank, whatever order the values are reported in, so the
 * ranks' collectives always match.  Each value is scaled and summed exactly
 * as vit_dist_sum would (x[i] * scale, then the sum over the ranks), so the
 * result does not depend on the timing; the sum's order over the ranks is
 * MPI's for a message of a bucket's size (for 2 ranks any order gives the
 * same bits).  Open MPI advances a started sum only inside MPI calls: every
 * report also tests the ones in flight.
 *
 * Thread safety: one thread (the one that joined MPI) uses a vit_dist_buckets
 * (vit_model_train_grads_ex calls grads_ready on its calling thread alone,
 * whatever the number of slices).
 * Without MPI, or in a job of one rank, everything here only scales. */
#define VIT_DIST_BUCKET_BYTES ((size_t)1 << 20)

typedef struct vit_dist_buckets vit_dist_buckets;

/* Buckets over x [n] (caller-owned, must outlive the buckets) of
 * bucket_bytes each (the first-started one, at the end of x, and the last
 * may be smaller); bucket_bytes 0 means VIT_DIST_BUCKET_BYTES.  NULL on
 * error: VIT_EINVAL (x NULL with n > 0, or a bucket of more than INT_MAX
 * values), VIT_ENOMEM. */
vit_dist_buckets *vit_dist_buckets_new(vit_real *x, size_t n, size_t bucket_bytes);

/* Begins one sum of x: nothing reported yet; each value will be multiplied
 * by scale before it is summed.  Returns VIT_OK, or VIT_EINVAL for NULL or a
 * sum still in flight (finish it first). */
int vit_dist_buckets_start(vit_dist_buckets *b, vit_real scale);

/* Values x[offset .. offset + count) are final: buckets now complete are
 * scaled and started (in order); then the sums in flight are tested
 * (moved on), also for count 0.  Its signature is that of
 * vit_train_extras.grads_ready (ctx: the vit_dist_buckets).  An error
 * (values outside x, an MPI failure) is kept for vit_dist_buckets_finish;
 * reports outside a started sum are ignored.  Collective in effect: every
 * rank must report every value of x before (or by) its finish. */
void vit_dist_buckets_ready(void *b, size_t offset, size_t count);

/* Ends the sum: starts the buckets not started yet (the values never
 * reported count as final now) and waits for all; x then holds the sum of
 * every rank's scaled x.  Collective: every rank must call it for every
 * start, even one whose own values are not to be trusted (a failed step),
 * or the others wait for ever.  Returns VIT_OK, the error a report kept, or
 * VIT_EIO naming the MPI failure. */
int vit_dist_buckets_finish(vit_dist_buckets *b);

/* Frees the buckets (NULL: nothing); a sum in flight is waited for first. */
void vit_dist_buckets_free(vit_dist_buckets *b);

VIT_END_DECLS

#endif

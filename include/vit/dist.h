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

/* Abort the whole job with exit status `status` (plain exit without MPI).
 * Does not return. */
void vit_dist_abort(int status);

VIT_END_DECLS

#endif

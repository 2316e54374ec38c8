/*
 * tests/gradcheck.h - the one finite-difference helper every gradient check
 * uses, and small utilities for building test inputs.
 *
 * Pattern: a test defines a scalar loss L = sum_i w_i * y_i of some kernel's
 * output y with fixed random weights w, so that dL/dy = w is what the test
 * feeds the backward.  gc_check then perturbs each entry of one tensor by
 * +-h, recomputes L through the forward only, and compares the central
 * difference with the analytic gradient.
 */
#ifndef VIT_TESTS_GRADCHECK_H
#define VIT_TESTS_GRADCHECK_H

#include <stddef.h>
#include <stdint.h>
#include "vit/core.h"

/* The loss as a function of the current contents of the checked tensors. */
typedef double (*gc_loss_fn)(void *ctx);

/* Default bar from the issue: max relative error 1e-6, where the relative
 * error of an entry is |a - n| / max(|a|, |n|, GC_ABS_FLOOR). */
#define GC_TOL 1e-6
#define GC_ABS_FLOOR 1e-4
#define GC_STEP 1e-5

/* Compares analytic[n] with central differences of f over the n entries of
 * x (perturbed in place and restored).  Prints one line
 * "gradcheck NAME: n=.. max_rel=.. at [i] (analytic .., numeric ..)"
 * and returns the max relative error.  Needs the float64 build. */
double gc_check(const char *name, vit_real *x, const vit_real *analytic, size_t n,
                gc_loss_fn f, void *ctx);

/* Same with an explicit step and floor. */
double gc_check_ex(const char *name, vit_real *x, const vit_real *analytic, size_t n,
                   gc_loss_fn f, void *ctx, double h, double floor);

/* Deterministic test data: uniform in [-scale, scale] from a 64-bit seed
 * that advances. */
void gc_fill(vit_real *x, size_t n, uint64_t *seed, double scale);
double gc_uniform(uint64_t *seed); /* in [0, 1) */

/* sum_i a_i b_i in double. */
double gc_dot(const vit_real *a, const vit_real *b, size_t n);

/* calloc that aborts the test on failure. */
vit_real *gc_zeros(size_t n);

/* max_i |a_i - b_i| / max(|a_i|, |b_i|, floor). */
double gc_max_rel(const vit_real *a, const vit_real *b, size_t n, double floor);

/* max_i |a_i - b_i|; INFINITY when any difference is NaN. */
double gc_max_abs_diff(const vit_real *a, const vit_real *b, size_t n);

/* 1 when every x_i is finite, else 0. */
int gc_all_finite(const vit_real *x, size_t n);

#endif

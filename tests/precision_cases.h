/*
 * tests/precision_cases.h - a fixed set of kernel computations run by both
 * builds of the library, so that the float32 results can be compared with
 * the float64 ones.
 *
 * precision_cases.c is compiled twice: into precision_dump (against
 * libvit-f64, vit_real = double) and into test_precision (against libvit,
 * vit_real = float).  The inputs are generated from fixed seeds as integers
 * over 2^16 (k/65536, |k| <= 65536), which float32 represents exactly,
 * so both builds start from bit-identical inputs and any difference in the
 * outputs is the kernels' own rounding.
 */
#ifndef VIT_TESTS_PRECISION_CASES_H
#define VIT_TESTS_PRECISION_CASES_H

#include <stddef.h>
#include "vit/core.h"

/* Receives each output or gradient tensor of a case: name is
 * "<case>.<tensor>", v points to n values valid during the call. */
typedef void (*pc_emit_fn)(void *ctx, const char *name, const vit_real *v, size_t n);

/* Number of cases and the name of case i (0 <= i < pc_case_count()). */
int pc_case_count(void);
const char *pc_case_name(int i);

/* Index of the case called name, or -1. */
int pc_case_find(const char *name);

/* Runs case i: forward and backward on its fixed inputs, then emits every
 * output and gradient.  Returns VIT_OK, or the code of the first library
 * call that failed (vit_last_error() has its message), or VIT_ENOMEM. */
int pc_run_case(int i, pc_emit_fn emit, void *ctx);

#endif

/*
 * tests/precision_cases.h - a fixed set of kernel computations run by both
 * builds of the library in one process, so that the float32 results can be
 * compared with the float64 ones.
 *
 * precision_cases.c is compiled twice into test_precision: once with
 * VIT_DOUBLE (calling libvit-f64, vit_real = double, its functions the
 * float64 library's vit_f64_* names) and once without (libvit, float).  The
 * two copies are the two pc_build tables below.  This header names no vit
 * type, so that both copies and the test's main share it.  The inputs are
 * generated from fixed seeds as integers over 2^16 (k/65536, |k| <= 65536),
 * which float32 represents exactly, so both builds start from bit-identical
 * inputs and any difference in the outputs is the kernels' own rounding.
 */
#ifndef VIT_TESTS_PRECISION_CASES_H
#define VIT_TESTS_PRECISION_CASES_H

#include <stddef.h>

/* Receives each output or gradient tensor of a case, widened to double:
 * name is "<case>.<tensor>", v points to n values valid during the call. */
typedef void (*pc_emit_fn)(void *ctx, const char *name, const double *v, size_t n);

typedef struct {
    const char *precision;        /* VIT_REAL_NAME of this copy: "float32", "float64" */
    size_t real_size;             /* sizeof(vit_real) in this copy */
    size_t (*library_real_size)(void); /* vit_real_size of the library it calls */
    const char *(*library_version)(void); /* vit_version of that library */
    int (*case_count)(void);
    const char *(*case_name)(int i); /* NULL outside 0 .. case_count() - 1 */
    /* Runs case i: forward and backward on its fixed inputs, then emits
     * every output and gradient.  Returns 0 (VIT_OK), or the code of the
     * first library call that failed, with "STATUS: message" (that
     * library's vit_status_name and vit_last_error) in err[errlen]. */
    int (*run_case)(int i, pc_emit_fn emit, void *ctx, char *err, size_t errlen);
} pc_build;

extern const pc_build pc_float32, pc_float64;

#endif

/* Internal: the BLAS routines we use, mapped to the s- or d- variant of the
 * build's real type, so kernels are written once. */
#ifndef VIT_SRC_BLAS_H
#define VIT_SRC_BLAS_H

#include <cblas.h>
#include "vit/core.h"

#ifdef VIT_DOUBLE
#define vit_gemm cblas_dgemm
#define vit_gemv cblas_dgemv
#define vit_axpy cblas_daxpy
#define vit_dot cblas_ddot
#else
#define vit_gemm cblas_sgemm
#define vit_gemv cblas_sgemv
#define vit_axpy cblas_saxpy
#define vit_dot cblas_sdot
#endif

#endif

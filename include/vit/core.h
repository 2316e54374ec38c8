/*
 * vit/core.h - the real type, error codes and conventions shared by every
 * part of the vit library.
 *
 * Conventions that hold for every public function unless its comment says
 * otherwise:
 *
 *  - Buffers are plain, contiguous, row-major arrays of vit_real.  Shapes are
 *    written outermost first: [B, T, D] means B*T*D values with D varying
 *    fastest.  When a batch dimension exists it is the first one.
 *  - The caller owns every buffer it passes in.  The library never keeps a
 *    pointer past the return of a kernel call and never frees caller memory.
 *    Opaque objects (vit_tape, vit_model, ...) own what they allocate and
 *    release it in their *_free function.
 *  - Forward kernels overwrite their outputs.  Backward kernels ACCUMULATE
 *    (+=) into every gradient buffer, so that a tensor used twice receives
 *    the sum of both contributions; zero gradient buffers before a step.
 *    A gradient pointer may be NULL when that gradient is not wanted.
 *  - Functions that can fail return int: VIT_OK (0) on success or a negative
 *    VIT_E* code.  The failing call also stores a one-line message naming the
 *    argument and the problem, readable with vit_last_error() on the same
 *    thread.  On failure, outputs are left in an unspecified state but no
 *    caller memory outside the documented outputs is touched.
 *  - Thread safety: kernels are reentrant: several threads may call them at
 *    once as long as no output buffer is shared (inputs may be).  Their only
 *    global state is the thread-local error message and the thread count of
 *    vit_set_threads; a kernel may itself run its loops on that many threads
 *    of the library's own pool, and returns only when they are done.  An opaque object
 *    (vit_tape, vit_model, ...) may be used by one thread at a time.
 *
 * The library is built twice from the same sources, like FFTW's fftw3 and
 * fftw3f: libvit with vit_real = float (training) and libvit-f64 with
 * vit_real = double (gradient checks).  A file that uses libvit-f64
 * includes <vit/f64.h> (or defines VIT_DOUBLE before its first vit header);
 * in it every public function vit_NAME is the symbol vit_f64_NAME, so one
 * program can link both libraries (see below and vit/f64.h).
 */
#ifndef VIT_CORE_H
#define VIT_CORE_H

#include <stddef.h>

/* Every public header puts its declarations between VIT_BEGIN_DECLS and
 * VIT_END_DECLS.  They give the declarations C linkage in C++ and, with GCC
 * and Clang, default symbol visibility.  The libraries are compiled with
 * -fvisibility=hidden, so the functions declared in include/vit/ are exactly
 * what libvit exports.  The helpers the library's files share among
 * themselves (declared in src/) stay hidden and out of the ABI.  A header
 * that leaves out the wrap has its functions hidden too, and
 * tests/test_symbols.sh reports them as declared but not exported. */
#if defined(__GNUC__)
#define VIT_VISIBILITY_PUSH_ _Pragma("GCC visibility push(default)")
#define VIT_VISIBILITY_POP_ _Pragma("GCC visibility pop")
#else
#define VIT_VISIBILITY_PUSH_
#define VIT_VISIBILITY_POP_
#endif
#ifdef __cplusplus
#define VIT_BEGIN_DECLS extern "C" { VIT_VISIBILITY_PUSH_
#define VIT_END_DECLS VIT_VISIBILITY_POP_ }
#else
#define VIT_BEGIN_DECLS VIT_VISIBILITY_PUSH_
#define VIT_END_DECLS VIT_VISIBILITY_POP_
#endif

/* VIT_VERSION_MAJOR, _MINOR, _PATCH and _STRING, from meson.build. */
#include "vit/version.h"

/* The float64 library's names.  With VIT_DOUBLE, vit/f64_names.h (generated
 * from these headers at build time, installed beside them) defines every
 * public function name vit_NAME as vit_f64_NAME, before any declaration:
 * the float64 library is compiled that way, so its symbols are vit_f64_*,
 * and a float64 file's calls are to them.  The float32 library keeps the
 * plain names.  Two libraries that export no common symbol can share one
 * process (FFTW prefixes its float build the same way: fftwf_).
 * Why vit_f64_ rather than a short vitd_ or vitf_: it is the package's
 * and the library's own name (vit-f64, libvit-f64), it says the width
 * rather than leaving "d" to be guessed, and it stays inside the vit_
 * namespace every public name uses.  No public name may itself start with
 * vit_f64_ (the generator refuses it): its float64 name could be another's.
 * Only functions are renamed; types, enums and macros have no linkage and
 * keep their names, which is why one file sees one precision. */
#ifdef VIT_DOUBLE
#include "vit/f64_names.h"
#endif

VIT_BEGIN_DECLS

#ifdef VIT_DOUBLE
typedef double vit_real;
#define VIT_REAL_NAME "float64"
#else
typedef float vit_real;
#define VIT_REAL_NAME "float32"
#endif

/* Error codes (negative; VIT_OK is 0). */
enum vit_status {
    VIT_OK = 0,
    VIT_EINVAL = -1,  /* bad argument: NULL buffer, size out of range, shapes that disagree */
    VIT_ENOMEM = -2,  /* an allocation failed or a size computation would overflow */
    VIT_EIO = -3,     /* reading or writing a file failed */
    VIT_EFORMAT = -4, /* a file's contents are malformed */
    VIT_ENUM = -5,    /* a non-finite value (NaN or infinity) where a finite one is required */
    VIT_ERANGE = -6,  /* a finite value too large to use (a gradient whose square overflows) */
    VIT_EDATA = -7    /* data other than the data a run recorded (vit/train.h: a resume) */
};

/* The message of the last failing call on this thread ("" if none), e.g.
 * "vit_linear_forward: n must be positive, got 0".  Never NULL.  The string
 * is owned by the library (do not free it) and stays valid, unchanged, until
 * the next failing call on the same thread.  Successful calls do not clear
 * it, so read it only after a call returned an error.  Thread-safe: each
 * thread has its own message. */
const char *vit_last_error(void);

/* Records msg (printf-style) as this thread's vit_last_error() message and
 * returns code, so that a custom op, a callback or any user code on top of
 * the library reports errors the way the library does:
 * `return vit_set_error(VIT_EINVAL, "my_op: k = %d is odd", k);`.  The
 * message is cut at 511 bytes; an argument may be vit_last_error() itself
 * (to wrap an earlier message).  code is returned unchanged, whatever it
 * is.  Thread-safe: each thread has its own message. */
int vit_set_error(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Name of a status code, e.g. "VIT_EINVAL"; "VIT_E(unknown)" for a code
 * that is not a vit_status.  A static string (never NULL, never freed).
 * Cannot fail; thread-safe. */
const char *vit_status_name(int status);

/* Size in bytes of vit_real in the library that was linked (4 or 8).  Lets a
 * program check that it was compiled with the same VIT_DOUBLE setting as the
 * library: sizeof(vit_real) == vit_real_size().  Cannot fail; thread-safe. */
size_t vit_real_size(void);

/* Sets the number of threads (1 .. 1024) the library's kernels split their
 * loops and GEMMs across (its own small pool, static partitioning); without
 * a call it is the number of online CPUs.  OpenBLAS's own pool is kept at one thread,
 * since the library splits GEMMs itself.  Results are bitwise reproducible
 * for a fixed thread count.  Returns VIT_OK, or VIT_EINVAL (nothing changed)
 * for n outside 1 .. 1024.
 * NOT thread-safe: the count is one process-wide variable that every kernel
 * reads; call it before training, never while kernels run on other threads. */
int vit_set_threads(int n);

/* The linked library's version, "MAJOR.MINOR.PATCH": the VIT_VERSION_STRING
 * it was built with (compare with the header's to detect a mismatch).  A
 * static string.  Cannot fail; thread-safe. */
const char *vit_version(void);

VIT_END_DECLS

#endif

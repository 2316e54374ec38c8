/* Thread-local error messages and the small argument checks every kernel
 * starts with. */
#include "error.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[512];

int vit_set_error(int code, const char *fmt, ...)
{
    /* Format into a local buffer first: callers may pass vit_last_error()
     * itself as an argument to wrap an earlier message. */
    char msg[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(last_error, msg, sizeof msg);
    return code;
}

const char *vit_last_error(void) { return last_error; }

const char *vit_status_name(int status)
{
    switch (status) {
    case VIT_OK: return "VIT_OK";
    case VIT_EINVAL: return "VIT_EINVAL";
    case VIT_ENOMEM: return "VIT_ENOMEM";
    case VIT_EIO: return "VIT_EIO";
    case VIT_EFORMAT: return "VIT_EFORMAT";
    case VIT_ENUM: return "VIT_ENUM";
    case VIT_ERANGE: return "VIT_ERANGE";
    case VIT_EDATA: return "VIT_EDATA";
    default: return "VIT_E(unknown)";
    }
}

size_t vit_real_size(void) { return sizeof(vit_real); }

const char *vit_version(void) { return VIT_VERSION_STRING; }

int vit_check_ptr(const char *fn, const char *name, const void *p)
{
    if (p == NULL)
        return vit_fail(VIT_EINVAL, "%s: %s is NULL", fn, name);
    return VIT_OK;
}

int vit_check_dim(const char *fn, const char *name, long v)
{
    /* Sizes stay below 2^30 so that products of two of them fit easily in
     * size_t and BLAS's int arguments never overflow. */
    if (v <= 0)
        return vit_fail(VIT_EINVAL, "%s: %s must be positive, got %ld", fn, name, v);
    if (v > (1L << 30))
        return vit_fail(VIT_EINVAL, "%s: %s = %ld is too large", fn, name, v);
    return VIT_OK;
}

int vit_mul_size(size_t *out, size_t a, size_t b)
{
    if (a != 0 && b > SIZE_MAX / a) {
        vit_fail(VIT_ENOMEM, "size %zu x %zu overflows", a, b);
        return 0;
    }
    *out = a * b;
    return 1;
}

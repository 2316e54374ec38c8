/*
 * vit/f64.h - the whole public API in float64, from libvit-f64
 * (pkg-config package vit-f64).
 *
 * Include it instead of <vit/vit.h> in a file that works in float64: it
 * defines VIT_DOUBLE and includes every header, so that in this file
 * vit_real is double and every function vit_NAME is the float64 library's
 * vit_f64_NAME (see vit/core.h).  The precision is a property of the
 * source file, not of the compile line, so that one program may have
 * float64 files (a gradient check of its own op) and float32 files (its
 * training) linked to both libraries:
 *
 *     cc -c check.c  $(pkg-config --cflags vit-f64)  # includes <vit/f64.h>
 *     cc -c train.c  $(pkg-config --cflags vit)      # includes <vit/vit.h>
 *     cc check.o train.o $(pkg-config --libs vit vit-f64)
 *
 * The two precisions' types share their names (vit_tape, vit_real, ...), so
 * one file sees one of them: include this before any other vit header (a
 * float32 vit header included first is an error here).  Defining
 * VIT_DOUBLE on the compile line before including <vit/vit.h> is the same.
 */
#ifndef VIT_F64_H
#define VIT_F64_H

#if defined(VIT_CORE_H) && !defined(VIT_DOUBLE)
#error "vit/f64.h: a vit header was included before it in float32; include vit/f64.h first"
#endif
#ifndef VIT_DOUBLE
#define VIT_DOUBLE 1
#endif
#include "vit/vit.h"

#endif

/* Internal: a training step's slices summed piece by piece as the backward
 * makes their gradients final (slice_sum.c), so that vit_train_extras'
 * grads_ready hears of them during a step of several slices too.
 *
 * vit_model_train_grads runs one slice of the batch per thread, each into
 * its own gradient buffer (bufs[s]; bufs[0] is the model's), and adds them
 * up in slice order after the backward.  With reports, each slice passes
 * the values its tape made final (vit_tape_on_leaf_grad) to
 * vit_slice_sum_report; once EVERY slice has reported a chunk's values,
 * that chunk is added up into bufs[0] right away, in slice order as the
 * sum after the step does (so bitwise the same), and handed to the
 * caller's report function on the calling thread only (MPI_THREAD_FUNNELED:
 * the thread that may call MPI).
 *
 * Threads: vit_slice_sum_begin, _serve, _finish on the calling thread;
 * vit_slice_sum_report on any slice's thread (caller says whether it is the
 * calling thread); vit_slice_sum_done on a worker's. */
#ifndef VIT_SRC_SLICE_SUM_H
#define VIT_SRC_SLICE_SUM_H

#include <stddef.h>

#include "vit/core.h"

typedef struct vit_slice_sum vit_slice_sum;

/* For buffers of n values; NULL (with vit_last_error) when out of memory. */
vit_slice_sum *vit_slice_sum_new(size_t n);
void vit_slice_sum_free(vit_slice_sum *g);

/* One step: bufs[nbufs] (read until vit_slice_sum_finish), of which slices
 * 1 .. concurrent-1 run on other threads (vit_parallel_width) and report
 * vit_slice_sum_done when their backward is over; fn(ctx, offset, count)
 * hears of the values of bufs[0] final (and summed).  Returns VIT_OK or
 * VIT_ENOMEM. */
int vit_slice_sum_begin(vit_slice_sum *g, vit_real *const *bufs, int nbufs, int concurrent,
                        void (*fn)(void *ctx, size_t offset, size_t count), void *ctx);

/* Values [offset, offset + count) of one slice's buffer are final; chunks
 * every slice has now reported are added up into bufs[0] (by this thread)
 * and queued.  on_caller: this is the calling thread, which then passes
 * the queue on to fn. */
void vit_slice_sum_report(vit_slice_sum *g, size_t offset, size_t count, int on_caller);

/* A worker's slice is over (its reports all made). */
void vit_slice_sum_done(vit_slice_sum *g);

/* The calling thread, its own slice over: passes chunks on to fn as the
 * other slices complete them, until slices 1 .. concurrent-1 are done;
 * between them it sleeps, waking every millisecond to call fn(ctx, 0, 0)
 * (nothing new: a chance to move sums in flight on). */
void vit_slice_sum_serve(vit_slice_sum *g);

/* After the join: passes on what is still queued, then adds up every chunk
 * not complete (values some slice never reported) as the sum after the
 * step does; with sum 0 (a failed step) only the former. */
void vit_slice_sum_finish(vit_slice_sum *g, int sum);

#endif

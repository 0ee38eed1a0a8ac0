/* The element-wise sum that every reduce-scatter applies when a received
 * segment meets the local one, one function for every dtype a collective may
 * carry. The ring calls it on each segment it receives, and the MPI user ops
 * (mpi.c) call it from inside MPI's own reduction, so both implementations
 * add alike.
 *
 * fp16 and bf16: each element is widened to fp32 with kernels/convert.h,
 * added in fp32, and rounded once back to the dtype (round to nearest even).
 * fp32 has at least 2p+2 significand bits for both formats (p = 11 or 8), so
 * this gives the correctly rounded half-precision sum of the two operands.
 * Overflow gives an infinity of the right sign, never a saturated value, so a
 * loss scaler sees it; NaNs stay NaNs (quieted). */
#ifndef ZS_COMM_REDUCE_H
#define ZS_COMM_REDUCE_H

#include <stddef.h>

#include "zeroshard.h"

/* dst[i] = dst[i] + src[i] for i < n, elements of `dtype` (fp32, fp16 or
 * bf16; the caller has checked it). dst and src must not overlap. Pure
 * arithmetic, the same bits on every machine. */
void zs__comm_sum_into(void *dst, const void *src, size_t n, zs_dtype dtype);

#endif

/* The CPU kernels of one instruction-set level, written once and compiled once
 * per level: cpu_kernels_scalar.c, cpu_kernels_avx2.c and cpu_kernels_avx512.c
 * each define the names below and then include this file. It is a template,
 * not a header: it defines static functions and one table, and has no guard.
 *
 * The including unit defines:
 *   ZS_CPU_TARGET   a function attribute naming the level's target ISA (empty
 *                   for the baseline); every function here carries it so the
 *                   compiler vectorizes and inlines for that level
 *   ZS_CPU_TABLE    the name of the zs__cpu_kernels table to define
 *   ZS_CPU_LEVEL    its zs__cpu_isa value
 * and four static conversion loops over n >= 0 elements (any alignment), each
 * bit-identical to the functions of kernels/convert.h:
 *   cvt_fp16_to_fp32(float *dst, const uint16_t *src, int64_t n)
 *   cvt_bf16_to_fp32(float *dst, const uint16_t *src, int64_t n)
 *   cvt_fp32_to_fp16(uint16_t *dst, const float *src, int64_t n)
 *   cvt_fp32_to_bf16(uint16_t *dst, const float *src, int64_t n)
 *
 * Everything else is written in terms of those loops and of the element
 * functions of kernels/optimizer.h and kernels/quantize.h, so the optimizer
 * and quantization formulas exist once. The
 * element loops are marked `omp simd`: it only promises that iterations are
 * independent (they are: each touches its own element), which lets the
 * compiler vectorize them at -O2; it permits no reassociation, so vector and
 * scalar code compute the same operations in the same order. */

/* The address of element i of an array of `dtype`. */
ZS_CPU_TARGET static inline void *elem_at(const void *base, zs_dtype dtype, int64_t i) {
    return (char *)(uintptr_t)base + (size_t)i * (dtype == ZS_DTYPE_FP32 ? 4u : 2u);
}

ZS_CPU_TARGET static void to_fp32(float *dst, const void *src, zs_dtype dtype, int64_t n) {
    switch (dtype) {
    case ZS_DTYPE_FP32: memmove(dst, src, (size_t)n * sizeof(float)); return;
    case ZS_DTYPE_FP16: cvt_fp16_to_fp32(dst, src, n); return;
    case ZS_DTYPE_BF16: cvt_bf16_to_fp32(dst, src, n); return;
    }
}

ZS_CPU_TARGET static void from_fp32(void *dst, zs_dtype dtype, const float *src, int64_t n) {
    switch (dtype) {
    case ZS_DTYPE_FP32: memmove(dst, src, (size_t)n * sizeof(float)); return;
    case ZS_DTYPE_FP16: cvt_fp32_to_fp16(dst, src, n); return;
    case ZS_DTYPE_BF16: cvt_fp32_to_bf16(dst, src, n); return;
    }
}

ZS_CPU_TARGET static void kernel_convert(void *dst, zs_dtype dst_dtype, const void *src,
                                         zs_dtype src_dtype, int64_t n) {
    if (dst_dtype == src_dtype) {
        if (dst != src && n > 0)
            memmove(dst, src, (size_t)n * (dst_dtype == ZS_DTYPE_FP32 ? 4u : 2u));
        return;
    }
    if (src_dtype == ZS_DTYPE_FP32) {
        from_fp32(dst, dst_dtype, src, n);
        return;
    }
    if (dst_dtype == ZS_DTYPE_FP32) {
        to_fp32(dst, src, src_dtype, n);
        return;
    }
    /* fp16 <-> bf16: widening to fp32 is exact, so going through fp32 rounds
     * once, exactly as the scalar composition of kernels/convert.h does. */
    float wide[ZS_CPU_CHUNK];
    for (int64_t off = 0; off < n; off += ZS_CPU_CHUNK) {
        int64_t c = n - off < ZS_CPU_CHUNK ? n - off : ZS_CPU_CHUNK;
        to_fp32(wide, elem_at(src, src_dtype, off), src_dtype, c);
        from_fp32(elem_at(dst, dst_dtype, off), dst_dtype, wide, c);
    }
}

/* d[i] += s[i] in fp32. d and s may be the same array (x += x), never
 * partially overlapping, so there is no restrict here. */
ZS_CPU_TARGET static void add_fp32(float *d, const float *s, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) d[i] = d[i] + s[i];
}

ZS_CPU_TARGET static void kernel_accumulate(void *dst, zs_dtype dst_dtype, const void *src,
                                            zs_dtype src_dtype, int64_t n) {
    float dwide[ZS_CPU_CHUNK], swide[ZS_CPU_CHUNK];
    for (int64_t off = 0; off < n; off += ZS_CPU_CHUNK) {
        int64_t c = n - off < ZS_CPU_CHUNK ? n - off : ZS_CPU_CHUNK;
        void *d = elem_at(dst, dst_dtype, off);
        const void *s = elem_at(src, src_dtype, off);
        float *d32 = dst_dtype == ZS_DTYPE_FP32 ? (float *)d : dwide;
        const float *s32 = src_dtype == ZS_DTYPE_FP32 ? (const float *)s : swide;
        if (dst_dtype != ZS_DTYPE_FP32) to_fp32(dwide, d, dst_dtype, c);
        if (src_dtype != ZS_DTYPE_FP32) to_fp32(swide, s, src_dtype, c);
        add_fp32(d32, s32, c);
        if (dst_dtype != ZS_DTYPE_FP32) from_fp32(d, dst_dtype, dwide, c);
    }
}

/* Adds x[i]^2 to lane[i mod LANES] for i < n, in increasing i. Squares of
 * fp32 values are exact in double, so only the additions round, and their
 * order is fixed by the lane rule, whatever width the compiler vectorizes
 * the inner loop with. The caller passes chunks whose sizes are multiples
 * of LANES except the last, so lanes continue across chunks. */
ZS_CPU_TARGET static void sumsq_lanes(double lane[ZS_CPU_SUMSQ_LANES], const float *x,
                                      int64_t n) {
    int64_t i = 0;
    for (; i + ZS_CPU_SUMSQ_LANES <= n; i += ZS_CPU_SUMSQ_LANES)
        for (int j = 0; j < ZS_CPU_SUMSQ_LANES; j++)
            lane[j] += (double)x[i + j] * (double)x[i + j];
    for (int j = 0; i + j < n; j++) lane[j] += (double)x[i + j] * (double)x[i + j];
}

ZS_CPU_TARGET static double kernel_sum_squares(const void *x, zs_dtype dtype, int64_t n) {
    double lane[ZS_CPU_SUMSQ_LANES] = {0};
    if (dtype == ZS_DTYPE_FP32) {
        sumsq_lanes(lane, x, n);
    } else {
        float wide[ZS_CPU_CHUNK];
        for (int64_t off = 0; off < n; off += ZS_CPU_CHUNK) {
            int64_t c = n - off < ZS_CPU_CHUNK ? n - off : ZS_CPU_CHUNK;
            to_fp32(wide, elem_at(x, dtype, off), dtype, c);
            sumsq_lanes(lane, wide, c);
        }
    }
    /* A fixed pairwise tree over the 8 lanes. */
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

/* The optimizer loops, one per (optimizer, state) case so each loop body is
 * branch-free; the element functions are the only copy of the formulas. */
ZS_CPU_TARGET static void adam_loop(float *restrict p, float *restrict m, float *restrict v,
                                    const float *restrict g, int64_t n,
                                    const zs_k_optim_scalars *s) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) zs_k_adam_element(&p[i], &m[i], &v[i], g[i], s, 0);
}

ZS_CPU_TARGET static void adamw_loop(float *restrict p, float *restrict m, float *restrict v,
                                     const float *restrict g, int64_t n,
                                     const zs_k_optim_scalars *s) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) zs_k_adam_element(&p[i], &m[i], &v[i], g[i], s, 1);
}

/* SGD with momentum. Two things keep this loop branch-free for the
 * vectorizer without touching the formula: the momentum element is passed
 * through a local (the address of a local is never NULL, so the element's
 * `if (buf)` folds away; `&buf[i]` would not), and Nesterov is a constant per
 * loop (the Nesterov term is a floating-point operation the compiler may not
 * speculate under the default -ftrapping-math, so a run-time select would
 * stay a branch). */
ZS_CPU_TARGET static inline void sgd_momentum_run(float *restrict p, float *restrict buf,
                                                  const float *restrict g, int64_t n,
                                                  const zs_k_optim_scalars *s) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float b = buf[i];
        zs_k_sgd_element(&p[i], &b, g[i], s);
        buf[i] = b;
    }
}

ZS_CPU_TARGET static void sgd_momentum_loop(float *restrict p, float *restrict buf,
                                            const float *restrict g, int64_t n,
                                            const zs_k_optim_scalars *s) {
    zs_k_optim_scalars fixed = *s;
    if (s->nesterov) {
        fixed.nesterov = 1;
        sgd_momentum_run(p, buf, g, n, &fixed);
    } else {
        fixed.nesterov = 0;
        sgd_momentum_run(p, buf, g, n, &fixed);
    }
}

ZS_CPU_TARGET static void sgd_plain_loop(float *restrict p, const float *restrict g, int64_t n,
                                         const zs_k_optim_scalars *s) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) zs_k_sgd_element(&p[i], NULL, g[i], s);
}

/* One pass per L1-sized chunk: widen the gradient, update master and state,
 * narrow the new master into the compute-dtype parameter. Each array is read
 * and written once from memory; the widened copies stay in L1. */
ZS_CPU_TARGET static void kernel_update(const zs__update_args *a, int64_t begin, int64_t n) {
    /* A local copy: the loops then read the scalars from registers. */
    const zs_k_optim_scalars s = a->scalars;
    float gwide[ZS_CPU_CHUNK];
    for (int64_t off = begin; off < begin + n; off += ZS_CPU_CHUNK) {
        int64_t c = begin + n - off < ZS_CPU_CHUNK ? begin + n - off : ZS_CPU_CHUNK;
        float *p = a->master + off;
        const float *g = gwide;
        if (a->grad_dtype == ZS_DTYPE_FP32)
            g = (const float *)a->grad + off;
        else
            to_fp32(gwide, elem_at(a->grad, a->grad_dtype, off), a->grad_dtype, c);
        switch (a->kind) {
        case ZS_K_OPTIM_ADAM: adam_loop(p, a->m + off, a->v + off, g, c, &s); break;
        case ZS_K_OPTIM_ADAMW: adamw_loop(p, a->m + off, a->v + off, g, c, &s); break;
        case ZS_K_OPTIM_SGD:
            if (a->m) sgd_momentum_loop(p, a->m + off, g, c, &s);
            else sgd_plain_loop(p, g, c, &s);
            break;
        }
        if (a->param) from_fp32(elem_at(a->param, a->param_dtype, off), a->param_dtype, p, c);
    }
}

/* ------------------------------------------------------------------
 * Block quantization (kernels/quantize.h). A block's amax is an integer
 * maximum of magnitude bits (exact in any order, so the vector reduction
 * gives the scalar bits); every integer is zs_k_quant_value and every
 * dequantized value zs_k_dequant_value / zs_k_dequant_add, in element loops
 * that only promise independent iterations. fp16 and bf16 go through the
 * level's exact conversions, chunk by chunk, as everywhere in this file. */

/* The maximum of zs_k_quant_magnitude over x[0..n). */
ZS_CPU_TARGET static uint32_t quant_amax(const float *x, int64_t n) {
    uint32_t amax = 0;
#pragma omp simd reduction(max : amax)
    for (int64_t i = 0; i < n; i++) {
        const uint32_t a = zs_k_quant_magnitude(x[i]);
        amax = a > amax ? a : amax;
    }
    return amax;
}

/* out[i] = the integer of x[i] in a block of `scale`, i < n. */
ZS_CPU_TARGET static void quant_run(int8_t *restrict out, const float *restrict x, int64_t n,
                                    float scale, float qmax, int bits) {
    if (!(scale > 0.0f)) { /* zeros or non-finite: the block stores its zero */
        memset(out, (int8_t)zs_k_quant_code(0.0f, scale, qmax, bits), (size_t)n);
        return;
    }
    if (bits == ZS_K_QUANT_NF4) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) out[i] = (int8_t)zs_k_nf4_value(x[i], scale);
        return;
    }
#pragma omp simd
    for (int64_t i = 0; i < n; i++) out[i] = (int8_t)zs_k_quant_value(x[i], scale, qmax);
}

/* Stores v[0..n) as the int4 nibbles of elements first .. first + n - 1 of
 * q. An odd `first` fills the high nibble of a byte whose low nibble this
 * thread stored just before (the previous block or chunk); an odd end
 * leaves a high nibble 0, filled by the next call or left 0 at the end of
 * the array. */
ZS_CPU_TARGET static void pack_int4(uint8_t *restrict q, int64_t first, const int8_t *restrict v,
                                    int64_t n) {
    int64_t i = 0;
    if (n > 0 && (first & 1)) {
        uint8_t *byte = q + (first >> 1);
        *byte = zs_k_int4_pack(zs_k_int4_low(*byte), v[0]);
        i = 1;
    }
    uint8_t *restrict dst = q + ((first + i) >> 1);
    const int8_t *restrict pairs = v + i;
    const int64_t whole = (n - i) / 2;
#pragma omp simd
    for (int64_t j = 0; j < whole; j++) dst[j] = zs_k_int4_pack(pairs[2 * j], pairs[2 * j + 1]);
    if ((n - i) & 1) dst[whole] = zs_k_int4_pack(pairs[2 * whole], 0);
}

/* v[k] = the int4 integer of element first + k of q, k < n. */
ZS_CPU_TARGET static void unpack_int4(int8_t *restrict v, const uint8_t *restrict q, int64_t first,
                                      int64_t n) {
    int64_t i = 0;
    if (n > 0 && (first & 1)) {
        v[0] = (int8_t)zs_k_int4_high(q[first >> 1]);
        i = 1;
    }
    const uint8_t *restrict src = q + ((first + i) >> 1);
    int8_t *restrict pairs = v + i;
    const int64_t whole = (n - i) / 2;
#pragma omp simd
    for (int64_t j = 0; j < whole; j++) {
        pairs[2 * j] = (int8_t)zs_k_int4_low(src[j]);
        pairs[2 * j + 1] = (int8_t)zs_k_int4_high(src[j]);
    }
    if ((n - i) & 1) pairs[2 * whole] = (int8_t)zs_k_int4_low(src[whole]);
}

/* Elements [e, e + n) of src as fp32: in place for fp32, else widened into
 * `wide` (n <= ZS_CPU_CHUNK). */
ZS_CPU_TARGET static const float *fp32_view(float *wide, const void *src, zs_dtype dtype,
                                            int64_t e, int64_t n) {
    if (dtype == ZS_DTYPE_FP32) return (const float *)src + e;
    to_fp32(wide, elem_at(src, dtype, e), dtype, n);
    return wide;
}

/* The integers of elements [e, e + n) of one block (n <= ZS_CPU_CHUNK) into
 * q: straight into int8 storage, or through `ints` into int4 nibbles. */
ZS_CPU_TARGET static void quant_store(void *q, int8_t *ints, const float *x, int64_t e, int64_t n,
                                      float scale, float qmax, int bits) {
    if (bits == 8) {
        quant_run((int8_t *)q + e, x, n, scale, qmax, bits);
        return;
    }
    quant_run(ints, x, n, scale, qmax, bits);
    pack_int4(q, e, ints, n);
}

ZS_CPU_TARGET static void kernel_quantize(void *q, float *scales, const void *src,
                                          zs_dtype src_dtype, int64_t n, int64_t block,
                                          int bits) {
    const float qmax = (float)zs_k_quant_qmax(bits);
    float wide[ZS_CPU_CHUNK];
    int8_t ints[ZS_CPU_CHUNK];
    int64_t b = 0; /* the block of element e */
    for (int64_t e = 0; e < n;) {
        if (block <= ZS_CPU_CHUNK) {
            /* The whole blocks that fit a chunk, widened once: each block's
             * amax and integers come from the L1 copy. */
            int64_t c = ZS_CPU_CHUNK / block * block;
            if (c > n - e) c = n - e;
            const float *x = fp32_view(wide, src, src_dtype, e, c);
            int8_t *out = bits == 8 ? (int8_t *)q + e : ints;
            for (int64_t off = 0; off < c; off += block, b++) {
                const int64_t m = c - off < block ? c - off : block;
                const float scale = zs_k_quant_scale(quant_amax(x + off, m), bits);
                scales[b] = scale;
                quant_run(out + off, x + off, m, scale, qmax, bits);
            }
            if (bits != 8) pack_int4(q, e, ints, c);
            e += c;
            continue;
        }
        /* A block longer than a chunk: its amax over every chunk, then its
         * integers, widening each chunk again (the block is read twice). */
        const int64_t m = n - e < block ? n - e : block;
        uint32_t amax = 0;
        for (int64_t off = 0; off < m; off += ZS_CPU_CHUNK) {
            const int64_t c = m - off < ZS_CPU_CHUNK ? m - off : ZS_CPU_CHUNK;
            const uint32_t a = quant_amax(fp32_view(wide, src, src_dtype, e + off, c), c);
            amax = a > amax ? a : amax;
        }
        const float scale = zs_k_quant_scale(amax, bits);
        scales[b++] = scale;
        for (int64_t off = 0; off < m; off += ZS_CPU_CHUNK) {
            const int64_t c = m - off < ZS_CPU_CHUNK ? m - off : ZS_CPU_CHUNK;
            quant_store(q, ints, fp32_view(wide, src, src_dtype, e + off, c), e + off, c, scale,
                        qmax, bits);
        }
        e += m;
    }
}

/* y[i] = dequantized v[i] (or y[i] += it), i < n, all in one block. */
ZS_CPU_TARGET static void dequant_run(float *restrict y, const int8_t *restrict v, int64_t n,
                                      float scale, int bits) {
    if (bits == ZS_K_QUANT_NF4) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] = zs_k_dequant_code(v[i], scale, ZS_K_QUANT_NF4);
        return;
    }
#pragma omp simd
    for (int64_t i = 0; i < n; i++) y[i] = zs_k_dequant_value(v[i], scale);
}

ZS_CPU_TARGET static void dequant_add_run(float *restrict y, const int8_t *restrict v, int64_t n,
                                          float scale, int bits) {
    if (bits == ZS_K_QUANT_NF4) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            y[i] = zs_k_dequant_code_add(y[i], v[i], scale, ZS_K_QUANT_NF4);
        return;
    }
#pragma omp simd
    for (int64_t i = 0; i < n; i++) y[i] = zs_k_dequant_add(y[i], v[i], scale);
}

ZS_CPU_TARGET static void kernel_dequantize(void *dst, zs_dtype dst_dtype, int accumulate,
                                            const void *q, const float *scales, int64_t n,
                                            int64_t block, int bits) {
    float wide[ZS_CPU_CHUNK];
    int8_t ints[ZS_CPU_CHUNK];
    for (int64_t e = 0; e < n;) {
        const int64_t c = n - e < ZS_CPU_CHUNK ? n - e : ZS_CPU_CHUNK;
        const int8_t *v = (const int8_t *)q + e;
        if (bits != 8) {
            unpack_int4(ints, q, e, c);
            v = ints;
        }
        float *y = dst_dtype == ZS_DTYPE_FP32 ? (float *)dst + e : wide;
        if (accumulate && dst_dtype != ZS_DTYPE_FP32)
            to_fp32(wide, elem_at(dst, dst_dtype, e), dst_dtype, c);
        /* The chunk's pieces of consecutive blocks, each with its scale. */
        int64_t b = e / block;
        for (int64_t off = 0; off < c; b++) {
            int64_t end = (b + 1) * block - e;
            if (end > c) end = c;
            if (accumulate) dequant_add_run(y + off, v + off, end - off, scales[b], bits);
            else dequant_run(y + off, v + off, end - off, scales[b], bits);
            off = end;
        }
        if (dst_dtype != ZS_DTYPE_FP32) from_fp32(elem_at(dst, dst_dtype, e), dst_dtype, wide, c);
        e += c;
    }
}

const zs__cpu_kernels ZS_CPU_TABLE = {
    .isa = ZS_CPU_LEVEL,
#ifdef __NO_MATH_ERRNO__
    .math_errno_off = 1,
#else
    .math_errno_off = 0,
#endif
    .convert = kernel_convert,
    .accumulate = kernel_accumulate,
    .sum_squares = kernel_sum_squares,
    .update = kernel_update,
    .quantize = kernel_quantize,
    .dequantize = kernel_dequantize,
};

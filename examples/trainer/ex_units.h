/*
 * ex_units — a model's parameters as zeroshard units, and the views its math
 * works on, for every model of the examples (GPT-2's and Llama's tables
 * register through it).
 *
 * A model's backend computes on tensors of its device's dtype (dev->dtype).
 * When that is zeroshard's compute dtype (fp32 anywhere; bf16 or fp16 on
 * CUDA) the views ARE zeroshard's buffers (zs_param_data / zs_param_grad):
 * no copy, and backward adds straight into the runtime's gradients. When
 * they differ (the CPU, which computes in fp32, training in fp16 or bf16) a
 * view is an fp32 copy made at each fetch (zs_backend_convert, on the
 * device's own memory), and backward adds into an fp32 scratch that is then
 * added into the runtime's low-precision gradient (zs_backend_accumulate,
 * rounded once per contribution). Either way the calls are the same.
 *
 * Parameters of a unit are numbered in registration order; a mask selects
 * some of them (bit i = parameter i; a unit has at most 32).
 */
#ifndef EX_UNITS_H
#define EX_UNITS_H

#include <stdint.h>

#include "nn_device.h"
#include "nn_param.h"
#include "zeroshard.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EX_UNIT_MAX_PARAMS 32
#define EX_UNITS_ALL 0xffffffffu

typedef struct ex_units {
    zs_ctx *zs;
    nn_device *dev;
    zs_dtype dtype;      /* zeroshard's compute dtype */
    int direct;          /* the device computes in that dtype: no views */
    int unit_count, param_count;
    int units_cap, params_cap;
    zs_unit **unit;      /* [units_cap] */
    int *first;          /* [units_cap + 1]: unit u's parameters are [first[u], first[u + 1]) */
    zs_param **param;    /* [params_cap] */
    int *unit_of;        /* [params_cap]: the unit it was registered in */
    int64_t *offset;     /* [params_cap]: elements from its unit's first parameter, no gaps */
    int64_t *numel;      /* [params_cap] */
    void **grad;         /* [params_cap]: zeroshard's gradients, kept by ex_units_grads */
    /* Converted views only: one unit's fp32 parameters and gradient
     * contributions ([largest unit] floats each, device memory); the
     * parameters of units fetched together with a block (its adapters, its
     * norms) get regions of their own: the unit's views start at
     * param32 + view_at[unit] (ex_units_set_kind). */
    float *param32, *grad32;
    int *kind;           /* [units_cap]: EX_UNITS_PRIMARY or a companion kind */
    int64_t *view_at;    /* [units_cap] */
    /* A unit's parameters as its family's table lists them, where that is
     * not its own registration (ex_units_set_view): global indices. */
    int **view;          /* [units_cap]: NULL = the unit's own parameters */
    int *view_n;         /* [units_cap] */
    int *companion;      /* [units_cap]: the unit fetched with it (-1: none) */
} ex_units;

/* Kinds of units whose views coexist with a primary unit's. */
enum { EX_UNITS_PRIMARY = 0, EX_UNITS_ADAPTERS = 1, EX_UNITS_NORMS = 2, EX_UNITS_KINDS = 3 };

/* Describing (before zs_build): room for unit_count units and param_count
 * parameters, then for each unit begin, its parameters, end. */
zs_status ex_units_init(ex_units *u, zs_ctx *zs, int unit_count, int param_count);
zs_status ex_units_begin(ex_units *u, const char *name);
zs_status ex_units_add(ex_units *u, const char *name, int ndim, const int64_t *shape, zs_init init,
                       unsigned flags);
zs_status ex_units_end(ex_units *u);
/* A table tensor's initialization as zeroshard's. */
zs_init ex_units_initializer(const nn_param_spec *spec);
/* All of it from a family's parameter table (nn_param.h) over its dims:
 * every unit in order, every tensor with its initialization and, for 1-D
 * tensors, ZS_PARAM_NO_DECAY. *units (may be NULL) gets the unit count. */
zs_status ex_units_describe(ex_units *u, zs_ctx *zs, const nn_param_table *table,
                            const void *dims, int *units);

/* After zs_build: decides whether the device works on zeroshard's buffers
 * directly and otherwise allocates the fp32 views on it. 0, or -1 with a
 * message in err (also when the device computes in a dtype that is neither
 * zeroshard's nor fp32). */
int ex_units_attach(ex_units *u, nn_device *dev, char *err, size_t cap);
void ex_units_free(ex_units *u);

/* Describing: `unit` is fetched together with primary units (kind
 * EX_UNITS_ADAPTERS or EX_UNITS_NORMS), so its fp32 views need a region of
 * their own. */
void ex_units_set_kind(ex_units *u, int unit, int kind);
/* Describing: ex_units_params(unit) lists these n global parameter indices
 * (the family's table order, spread over `unit` and its companion unit
 * `companion`, fetched with it). 0, or -1 out of memory. */
int ex_units_set_view(ex_units *u, int unit, const int *params, int n, int companion);

int ex_units_num_params(const ex_units *u, int unit);
zs_param *ex_units_param(const ex_units *u, int unit, int index);

/* The fetched unit's parameters in the device's dtype: ptrs[i] for
 * parameter i (of its view, ex_units_set_view: its companion must be
 * fetched too), NULL for a parameter stored quantized (its layers
 * dequantize it, zs_param_dequantize). 0, or -1 with a message (not
 * fetched, a conversion failed). */
int ex_units_params(ex_units *u, int unit, void **ptrs, char *err, size_t cap);
/* The gradients to ADD into for the unit: zeroshard's own (direct) or a
 * zeroed fp32 scratch; zeroshard's pointers are kept for commit and
 * grads_again. The unit must be fetched or its gradient opened
 * (zs_grads_open). */
int ex_units_grads(ex_units *u, int unit, void **ptrs, char *err, size_t cap);
/* Converted views: adds the scratch of the parameters in mask into the kept
 * gradients (a no-op when direct). */
int ex_units_commit(ex_units *u, int unit, unsigned mask, char *err, size_t cap);
/* The unit's kept gradients once more (a tied weight's second use, after
 * the unit's release): the same pointers, or the scratch again with the
 * parameters of mask zeroed (only those are committed afterwards). */
int ex_units_grads_again(ex_units *u, int unit, unsigned mask, void **ptrs, char *err,
                         size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* EX_UNITS_H */

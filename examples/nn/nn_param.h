/*
 * nn_param — what a model family describes of its parameters, in one
 * shape for every family: a table of units, each an ordered list of
 * tensors with a name, a shape, an initialization and whether weight decay
 * applies. GPT-2's table (gpt2_model.h) and the Llama family's
 * (llama_model.h) are two of these; the trainer registers any of them with
 * zeroshard the same way (ex_units_describe), and a new family writes its
 * table, not a registration loop. Plain data: no zeroshard, no device.
 */
#ifndef NN_PARAM_H
#define NN_PARAM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Longest tensor name, with its NUL. */
#define NN_PARAM_NAME_MAX 64

typedef enum nn_init {
    NN_INIT_NORMAL = 0, /* normal(0, init_std): matrices, embeddings */
    NN_INIT_ZEROS = 1,  /* biases */
    NN_INIT_ONES = 2    /* norm weights */
} nn_init;

typedef struct nn_param_spec {
    char name[NN_PARAM_NAME_MAX]; /* the checkpoint's state_dict name */
    int ndim;                     /* 1 or 2 */
    int64_t shape[2];             /* shape[1] = 1 when ndim == 1 */
    int64_t numel;
    int64_t offset;               /* elements from the start of its unit (table order) */
    nn_init init;
    double init_std;              /* for NN_INIT_NORMAL, else 0 */
    int no_decay;                 /* 1 for every 1-D tensor (biases, norms), 0 for matrices */
} nn_param_spec;

/* A family's parameter table over its dims (`dims`: the family's own
 * struct, handed back to every function). */
typedef struct nn_param_table {
    int (*num_units)(const void *dims);
    /* Tensors of `unit`, -1 out of range. */
    int (*unit_num_params)(const void *dims, int unit);
    /* The unit's name; 0, or -1 out of range or when it does not fit. */
    int (*unit_name)(const void *dims, int unit, char *buf, size_t cap);
    /* Tensor `index` of `unit`; 0, or -1 out of range. */
    int (*param_spec)(const void *dims, int unit, int index, nn_param_spec *out);
    /* The model's parameters, a tied weight counted once. */
    int64_t (*num_params)(const void *dims);
} nn_param_table;

#ifdef __cplusplus
}
#endif
#endif /* NN_PARAM_H */

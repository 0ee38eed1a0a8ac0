#define _DEFAULT_SOURCE /* mkdtemp */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h" /* zs__checkpoint_states */
#include "zero/ground.h"
#include "zero/state_io.h" /* zs__state_digest */
#include "zeroshard_mpi.h"

#define HARNESS_ALIGN 16

/* "layer<l>.weight" and "layer<l>.bias", made once per process. */
static const char *param_name(int i) {
    static char names[2 * TINY_MAX_LAYERS][24];
    if (!names[i][0])
        snprintf(names[i], sizeof names[i], "layer%d.%s", i / 2, i % 2 ? "bias" : "weight");
    return names[i];
}

static int64_t param_numel(int i) { return i % 2 == 0 ? tiny_weight_numel(i / 2) : tiny_bias_numel(i / 2); }

static int64_t model_numel(void) {
    int64_t n = 0;
    for (int i = 0; i < 2 * tiny_layer_count(); i++) n += param_numel(i);
    return n;
}

#define ZS_CHECK_LOCAL(call)              \
    do {                                  \
        zs_status c_st_ = (call);         \
        if (c_st_ != ZS_OK) return c_st_; \
    } while (0)

static int64_t param_start(int i) {
    int64_t n = 0;
    for (int j = 0; j < i; j++) n += param_numel(j);
    return n;
}

int64_t harness_unit_padded_aligned(int l, int world, int64_t align) {
    int64_t w = tiny_weight_numel(l);
    int64_t bias_at = (w + align - 1) / align * align;
    int64_t used = bias_at + tiny_bias_numel(l);
    int64_t granule = (int64_t)world * align;
    return (used + granule - 1) / granule * granule;
}

int64_t harness_unit_padded(int l, int world) {
    return harness_unit_padded_aligned(l, world, HARNESS_ALIGN);
}

static int fail(const char *what, zs_status st) {
    fprintf(stderr, "harness: %s failed: %s: %s\n", what, zs_status_name(st), zs_last_error());
    return -1;
}
#define H_CHECK(call)                                 \
    do {                                              \
        zs_status h_st_ = (call);                     \
        if (h_st_ != ZS_OK) {                         \
            out->status = h_st_;                      \
            return fail(#call, h_st_);                \
        }                                             \
    } while (0)

int harness_init_nodes(int *argc, char ***argv, int *world, int *rank, int *per_node) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_size(MPI_COMM_WORLD, world);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    *per_node = *argc >= 2 ? atoi((*argv)[1]) : 0;
    const int deep = *argc == 3 && strcmp((*argv)[2], "deep") == 0;
    if (deep) tiny_shape_select(TINY_SHAPE_DEEP);
    if (*per_node >= 1 && *world % *per_node == 0 && (*argc == 2 || deep)) return 0;
    fprintf(stderr, "usage: %s <ranks per node, a divisor of %d> [deep]\n", (*argv)[0], *world);
    return -1;
}

int harness_write_config(const harness_options *opt, char *path, size_t cap) {
    char dir[] = "/tmp/zs_harness_XXXXXX";
    if (!mkdtemp(dir)) return -1;
    snprintf(path, cap, "%s/run.cfg", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f,
            "seed = 7;\n"
            "zero: { stage = %d; max_live_units = %d; align = %d; prefetch_bytes = %d; %s };\n"
            "optimizer: { type = \"%s\"; lr = 0.01; weight_decay = 0.1; beta1 = 0.9;\n"
            "             beta2 = 0.99; eps = 1e-8; momentum = %.17g; nesterov = %s; };\n"
            "scheduler: { type = \"%s\"; warmup_steps = 3; total_steps = %d; min_lr = 0.001; };\n"
            "comm: { segment_bytes = 4096; overlap = %s; bucket_bytes = %d; %s };\n"
            "precision: { dtype = \"%s\"; reduce_dtype = \"%s\"; %s };\n"
            "gradient_accumulation_steps = %d;\n"
            "gradient_clipping = %.17g;\n%s\n",
            opt->stage, opt->max_live_units, opt->align > 0 ? opt->align : HARNESS_ALIGN,
            opt->gather_ahead ? 67108864 : 0,
            opt->zero_extra ? opt->zero_extra : "",
            opt->optimizer, opt->momentum, opt->nesterov ? "true" : "false", opt->scheduler,
            opt->steps, opt->sync ? "false" : "true", opt->bucket_bytes,
            opt->comm_extra ? opt->comm_extra : "",
            opt->dtype ? opt->dtype : "fp32", opt->reduce_dtype ? opt->reduce_dtype : "compute",
            opt->precision_extra ? opt->precision_extra : "", opt->gas > 0 ? opt->gas : 1, opt->clip,
            opt->config_extra ? opt->config_extra : "");
    fclose(f);
    return 0;
}

/* Copies every parameter's full value, as fp32, into dst (registration order). */
static int gather_all(zs_ctx *zs, zs_param **params, float *dst, harness_result *out) {
    for (int l = 0; l < tiny_layer_count(); l++) {
        zs_unit *u = zs_unit_at(zs, l);
        H_CHECK(zs_fetch(zs, u));
        for (int k = 0; k < 2; k++) {
            int i = 2 * l + k;
            const void *src = zs_param_data(params[i]);
            if (!src) return fail("zs_param_data", ZS_ERR_STATE);
            H_CHECK(zs_convert(dst + param_start(i), ZS_DTYPE_FP32, src, zs_param_dtype(params[i]),
                               param_numel(i)));
        }
        H_CHECK(zs_release(zs, u));
    }
    return 0;
}

/* Every rank's owned ranges of master, exp_avg and exp_avg_sq, assembled on
 * every rank: ownership is disjoint, so OR-ing the bit patterns of zero-filled
 * arrays rebuilds each value exactly (signed zeros included). */
static int gather_state(MPI_Comm comm, zs_ctx *zs, harness_result *out) {
    /* The arrays this optimizer keeps (master always, then its moments). */
    zs__ckpt_state states[4];
    const int nstates = zs__checkpoint_states(zs, states);
    int kept[3] = {0, 0, 0};
    for (int k = 0; k < nstates; k++) kept[zs__checkpoint_state_array(states[k])] = 1;
    for (int s = 0; s < 3; s++) {
        uint32_t *bits = calloc((size_t)out->numel, sizeof(uint32_t));
        if (!bits) return -1;
        for (int i = 0; i < 2 * tiny_layer_count() && kept[s]; i++) {
            int64_t b, e;
            if (!zs__plan_owned_range(zs->plan, i, zs->rank, &b, &e) ||
                zs_param_frozen(zs->params[i]))
                continue; /* frozen: no state (zeros here) */
            /* Wherever the state lives: device, host or NVMe. */
            if (zs__state_read(zs, (zs__state_array)s, i, b, e - b,
                               (float *)(bits + param_start(i) + b)) != ZS_OK) {
                free(bits);
                return -1;
            }
        }
        MPI_Allreduce(MPI_IN_PLACE, bits, (int)out->numel, MPI_UINT32_T, MPI_BOR, comm);
        out->gathered_state[s] = (float *)bits;
    }
    return 0;
}

/* The fp32 view of a parameter for the model math: the runtime's buffer
 * itself in fp32, else a converted copy in scratch. */
static const float *as_fp32(zs_param *p, float *scratch, harness_result *out) {
    const void *data = zs_param_data(p);
    if (!data) return NULL;
    if (zs_param_dtype(p) == ZS_DTYPE_FP32) return data;
    if (zs_convert(scratch, ZS_DTYPE_FP32, data, zs_param_dtype(p), zs_param_numel(p)) != ZS_OK) {
        out->status = ZS_ERR_INTERNAL;
        return NULL;
    }
    return scratch;
}

/* Adds an fp32 gradient contribution into the runtime's gradient buffer. */
static zs_status add_grad(zs_param *p, void *grad, const float *contribution, float *scratch) {
    zs_dtype dt = zs_param_dtype(p);
    int64_t n = zs_param_numel(p);
    ZS_CHECK_LOCAL(zs_convert(scratch, ZS_DTYPE_FP32, grad, dt, n));
    for (int64_t i = 0; i < n; i++) scratch[i] += contribution[i];
    return zs_convert(grad, dt, scratch, ZS_DTYPE_FP32, n);
}

zs_status harness_build(MPI_Comm comm, const harness_options *opt, zs_ctx **out_zs,
                        zs_param **params) {
    char path[256];
    if (harness_write_config(opt, path, sizeof path) != 0) return ZS_ERR_IO;
    zs_config *cfg = NULL;
    zs_status loaded = zs_config_load(path, &cfg);
    /* The file and its temporary directory both go, whatever the outcome. */
    unlink(path);
    char *slash = strrchr(path, '/');
    if (slash) *slash = '\0';
    rmdir(path);
    ZS_CHECK_LOCAL(loaded);
    zs_ctx *zs = NULL;
    zs_status st = zs_create_with_comm(cfg, comm, &zs);
    zs_config_destroy(cfg);
    ZS_CHECK_LOCAL(st);
    for (int l = 0; l < tiny_layer_count() && st == ZS_OK; l++) {
        char name[32];
        snprintf(name, sizeof name, "layer%d", l);
        int64_t wshape[2] = {tiny_dims[l + 1], tiny_dims[l]};
        int64_t bshape[1] = {tiny_dims[l + 1]};
        const unsigned frozen = (opt->frozen_mask >> l) & 1u ? ZS_PARAM_FROZEN : 0u;
        if (st == ZS_OK) st = zs_unit_begin(zs, name, NULL);
        if (st == ZS_OK)
            st = zs_param_create(zs, param_name(2 * l), 2, wshape, ZS_INIT_NORMAL_STD(0.3),
                                 frozen, &params[2 * l]);
        if (st == ZS_OK)
            st = zs_param_create(zs, param_name(2 * l + 1), 1, bshape,
                                 ZS_INIT_UNIFORM_RANGE(-0.1, 0.1), ZS_PARAM_NO_DECAY | frozen,
                                 &params[2 * l + 1]);
        if (st == ZS_OK) st = zs_unit_end(zs);
    }
    if (st == ZS_OK) st = zs_build(zs);
    if (st != ZS_OK) {
        zs_destroy(zs);
        return st;
    }
    *out_zs = zs;
    return ZS_OK;
}

int harness_run(MPI_Comm comm, const harness_options *opt, harness_result *out) {
    memset(out, 0, sizeof *out);
    out->numel = model_numel();
    out->initial = calloc((size_t)out->numel, sizeof(float));
    out->final = calloc((size_t)out->numel, sizeof(float));
    zs_ctx *zs = NULL;
    zs_param *params[2 * TINY_MAX_LAYERS];
    H_CHECK(harness_build(comm, opt, &zs, params));
    int world = zs_world_size(zs), rank = zs_rank(zs);
    out->world = world;
    if (gather_all(zs, params, out->initial, out) != 0) return -1;
    int first_step = 0;
    if (opt->load_dir) {
        H_CHECK(zs_load(zs, opt->load_dir));
        int64_t next = 0;
        size_t bytes = 0;
        H_CHECK(zs_user_state_get(zs, "next_step", &next, sizeof next, &bytes));
        if (bytes != sizeof next || next < 0 || next > opt->steps) return fail("next_step", ZS_ERR_INTERNAL);
        first_step = (int)next;
    } else if (opt->resume) {
        int64_t next = 0;
        size_t bytes = 0;
        if (zs_user_state_get(zs, "next_step", &next, sizeof next, &bytes) == ZS_OK &&
            bytes == sizeof next)
            first_step = (int)next;
    }
    out->first_step = first_step;

    const int gas = opt->gas > 0 ? opt->gas : 1;
    const int batch = opt->batch > 0 ? opt->batch : TINY_BATCH;
    const int mixed = zs_param_dtype(params[0]) != ZS_DTYPE_FP32;
    int local_batch = batch / world;
    /* fp32 scratch for the model math in mixed precision: one view of each
     * parameter, one gradient contribution, one conversion buffer. */
    int64_t max_numel = 0;
    for (int i = 0; i < 2 * tiny_layer_count(); i++)
        if (param_numel(i) > max_numel) max_numel = param_numel(i);
    float *view[2 * TINY_MAX_LAYERS], *contrib[2 * TINY_MAX_LAYERS];
    for (int i = 0; i < 2 * tiny_layer_count(); i++) {
        view[i] = calloc((size_t)param_numel(i), sizeof(float));
        contrib[i] = calloc((size_t)param_numel(i), sizeof(float));
    }
    float *convert_scratch = calloc((size_t)max_numel, sizeof(float));
    tiny_acts acts;
    tiny_acts_init(&acts, local_batch);
    int rc = 0;
    const int last = opt->stop_after > 0 && opt->stop_after < opt->steps ? opt->stop_after : opt->steps;
    int just_recovered = 0;
    for (int step = first_step; step < last && rc == 0; step++) {
        zs_comm_stats before, after;
        H_CHECK(zs_comm_report(zs, &before));
        out->loss[step] = 0.0;
        for (int micro = 0; micro < gas; micro++) {
            int64_t first = (int64_t)micro * batch + (int64_t)rank * local_batch;
            tiny_load_batch(&acts, step, first);
            if (opt->order_change_step > 0 && step >= opt->order_change_step) {
                zs_unit *extra = zs_unit_at(zs, tiny_layer_count() - 1);
                H_CHECK(zs_fetch(zs, extra));
                H_CHECK(zs_release(zs, extra));
            }
            /* Forward. With prefetch, the next unit is fetched before the
             * current one is released, so two units are live at once in stage 3. */
            zs_unit *prev = NULL;
            for (int l = 0; l < tiny_layer_count(); l++) {
                zs_unit *u = zs_unit_at(zs, l);
                H_CHECK(zs_fetch(zs, u));
                if (prev && opt->prefetch) H_CHECK(zs_release(zs, prev));
                const float *w = as_fp32(params[2 * l], view[2 * l], out);
                const float *b = as_fp32(params[2 * l + 1], view[2 * l + 1], out);
                if (!w || !b) return fail("parameter view", ZS_ERR_STATE);
                tiny_forward(l, w, b, &acts);
                if (opt->prefetch) prev = u;
                else H_CHECK(zs_release(zs, u));
            }
            if (prev) H_CHECK(zs_release(zs, prev));
            double local_loss = tiny_loss(&acts), global_loss = 0.0;
            MPI_Allreduce(&local_loss, &global_loss, 1, MPI_DOUBLE, MPI_SUM, comm);
            out->loss[step] += global_loss / world / gas;
            H_CHECK(zs_log_scalar(zs, "loss", out->loss[step]));

            tiny_backward_begin(&acts, zs_loss_scale(zs));
            for (int l = tiny_layer_count() - 1; l >= 0; l--) {
                zs_unit *u = zs_unit_at(zs, l);
                H_CHECK(zs_fetch(zs, u));
                const int frozen = (opt->frozen_mask >> l) & 1u;
                /* A frozen layer's parameter gradients land in scratch: only
                 * the input's gradient (acts' delta) goes on. */
                void *gw = frozen ? contrib[2 * l] : zs_param_grad(params[2 * l]);
                void *gb = frozen ? contrib[2 * l + 1] : zs_param_grad(params[2 * l + 1]);
                const float *w = as_fp32(params[2 * l], view[2 * l], out);
                const float *b = as_fp32(params[2 * l + 1], view[2 * l + 1], out);
                if (!gw || !gb || !w || !b) return fail("zs_param_grad", ZS_ERR_STATE);
                if (frozen) {
                    tiny_backward(l, w, b, contrib[2 * l], contrib[2 * l + 1], &acts, opt->mode,
                                  step, first, world);
                } else if (!mixed) {
                    tiny_backward(l, w, b, gw, gb, &acts, opt->mode, step, first, world);
                } else {
                    memset(contrib[2 * l], 0, sizeof(float) * (size_t)param_numel(2 * l));
                    memset(contrib[2 * l + 1], 0, sizeof(float) * (size_t)param_numel(2 * l + 1));
                    tiny_backward(l, w, b, contrib[2 * l], contrib[2 * l + 1], &acts, opt->mode,
                                  step, first, world);
                    H_CHECK(add_grad(params[2 * l], gw, contrib[2 * l], convert_scratch));
                    H_CHECK(add_grad(params[2 * l + 1], gb, contrib[2 * l + 1], convert_scratch));
                }
                if (opt->inject && step >= opt->inject_step &&
                    step < opt->inject_step + (opt->inject_count > 0 ? opt->inject_count : 1) &&
                    micro == 0 && rank == opt->inject_rank &&
                    l == opt->inject_unit)
                    H_CHECK(zs_convert((char *)gw + (size_t)opt->inject_index *
                                                        zs_dtype_size(zs_param_dtype(params[2 * l])),
                                       zs_param_dtype(params[2 * l]), &opt->inject_value,
                                       ZS_DTYPE_FP32, 1));
                H_CHECK(zs_grads_ready(zs, u));
                H_CHECK(zs_release(zs, u));
            }
            out->digest_before[step] = zs__state_digest(zs);
            if (micro == gas - 1) {
                /* The data position a checkpoint taken in this step resumes from. */
                int64_t next = step + 1;
                H_CHECK(zs_user_state_set(zs, "next_step", &next, sizeof next, 0));
            }
            if (micro == gas - 1 && opt->before_step) opt->before_step(zs, step, opt->before_step_arg);
            zs_step_info info;
            zs_status st = zs_step(zs, &info);
            if (st != ZS_OK) {
                out->status = st;
                snprintf(out->error, sizeof out->error, "%s", zs_last_error());
                rc = -1;
                if (opt->recover_dir && !out->recovered) {
                    /* The same context takes up the last checkpoint. */
                    int64_t next = 0;
                    size_t bytes = 0;
                    H_CHECK(zs_load(zs, opt->recover_dir));
                    H_CHECK(zs_user_state_get(zs, "next_step", &next, sizeof next, &bytes));
                    out->recovered = 1;
                    rc = 0;
                    step = (int)next - 1; /* the loop's increment makes it `next` */
                    just_recovered = 1;
                }
                break;
            }
            if (info.boundary != (micro == gas - 1)) return fail("boundary flag", ZS_ERR_INTERNAL);
            if (info.boundary) {
                /* A value known only after the step, for that step's line
                 * of log.metrics_file (test_metrics). */
                H_CHECK(zs_log_scalar_previous(zs, "after_step", (double)step));
                out->grad_norm[step] = info.grad_norm;
                out->lr[step] = info.lr;
                out->loss_scale[step] = info.loss_scale;
                out->clip_coef[step] = info.clip_coef;
                out->skipped[step] = info.skipped;
                out->overflow_rank[step] = info.overflow_rank;
                out->overflow_unit[step] = info.overflow_unit;
            }
        }
        if (just_recovered) { /* nothing of the failed step is kept */
            just_recovered = 0;
            continue;
        }
        out->digest_after[step] = zs__state_digest(zs);
        if (opt->save_dir && step + 1 == opt->save_after) H_CHECK(zs_save(zs, opt->save_dir));
        H_CHECK(zs_comm_report(zs, &after));
        for (int op = 0; op < ZS_COMM_OP_COUNT; op++) {
            out->step_bytes.bytes[op] = after.bytes[op] - before.bytes[op];
            out->step_bytes.calls[op] = after.calls[op] - before.calls[op];
            out->step_bytes.bytes_intra[op] = after.bytes_intra[op] - before.bytes_intra[op];
            out->step_bytes.bytes_inter[op] = after.bytes_inter[op] - before.bytes_inter[op];
        }
    }
    tiny_acts_free(&acts);
    for (int i = 0; i < 2 * tiny_layer_count(); i++) {
        free(view[i]);
        free(contrib[i]);
    }
    free(convert_scratch);
    H_CHECK(zs_memory_report(zs, &out->memory));
    out->final_digest = zs__state_digest(zs);
    if (rc == 0 && opt->optimizer[0] == 'a' && gather_state(comm, zs, out) != 0) rc = -1;
    out->final_loss_scale = zs_loss_scale(zs);
    if (rc == 0 && gather_all(zs, params, out->final, out) != 0) rc = -1;
    zs_destroy(zs);
    return rc;
}

/* ------------------------------------------------------------ reference */

/* Plain formulas, written independently of kernels/optimizer.h. */
static double reference_lr(const harness_options *opt, int t) {
    const double peak = 0.01, low = 0.001;
    if (strcmp(opt->scheduler, "constant") == 0) return peak;
    if (t <= 3) return peak * t / 3.0;
    if (t >= opt->steps) return low;
    return low + (peak - low) * 0.5 * (1.0 + cos(acos(-1.0) * (t - 3) / (double)(opt->steps - 3)));
}

void harness_reference(const harness_options *opt, const float *initial, harness_result *out) {
    memset(out, 0, sizeof *out);
    out->world = 1;
    out->numel = model_numel();
    out->initial = calloc((size_t)out->numel, sizeof(float));
    out->final = calloc((size_t)out->numel, sizeof(float));
    memcpy(out->initial, initial, sizeof(float) * (size_t)out->numel);
    float *p = out->final;
    memcpy(p, initial, sizeof(float) * (size_t)out->numel);
    float *g = calloc((size_t)out->numel, sizeof(float));
    float *m = calloc((size_t)out->numel, sizeof(float));
    float *v = calloc((size_t)out->numel, sizeof(float));
    const double b1 = 0.9, b2 = 0.99, eps = 1e-8, wd_all = 0.1;

    /* One process, the whole step's batch at once (all micro-batches). */
    const int total_batch = (opt->gas > 0 ? opt->gas : 1) * (opt->batch > 0 ? opt->batch : TINY_BATCH);
    tiny_acts acts;
    tiny_acts_init(&acts, total_batch);
    for (int step = 0; step < opt->steps; step++) {
        int t = step + 1;
        double lr = reference_lr(opt, t);
        tiny_load_batch(&acts, step, 0);
        for (int l = 0; l < tiny_layer_count(); l++)
            tiny_forward(l, p + param_start(2 * l), p + param_start(2 * l + 1), &acts);
        out->loss[step] = tiny_loss(&acts);
        memset(g, 0, sizeof(float) * (size_t)out->numel);
        tiny_backward_begin(&acts, 1.0f);
        for (int l = tiny_layer_count() - 1; l >= 0; l--)
            tiny_backward(l, p + param_start(2 * l), p + param_start(2 * l + 1),
                          g + param_start(2 * l), g + param_start(2 * l + 1), &acts, opt->mode,
                          step, 0, 1);
        /* Frozen layers: no gradient, no update. */
        for (int l = 0; l < tiny_layer_count(); l++)
            if ((opt->frozen_mask >> l) & 1u)
                for (int i = 2 * l; i <= 2 * l + 1; i++)
                    memset(g + param_start(i), 0, sizeof(float) * (size_t)param_numel(i));
        double sq = 0.0;
        for (int64_t i = 0; i < out->numel; i++) sq += (double)g[i] * g[i];
        out->grad_norm[step] = sqrt(sq);
        out->lr[step] = lr;
        /* Global-norm clipping as torch.nn.utils.clip_grad_norm_ does it. */
        double coef = 1.0;
        if (opt->clip > 0 && out->grad_norm[step] > opt->clip) coef = opt->clip / (out->grad_norm[step] + 1e-6);
        out->clip_coef[step] = coef;
        if (coef != 1.0)
            for (int64_t i = 0; i < out->numel; i++) g[i] = (float)(g[i] * coef);
        for (int i = 0; i < 2 * tiny_layer_count(); i++) {
            if ((opt->frozen_mask >> (i / 2)) & 1u) continue;
            double wd = (i % 2 == 1) ? 0.0 : wd_all; /* biases are flagged no-decay */
            for (int64_t k = param_start(i); k < param_start(i) + param_numel(i); k++) {
                double grad = g[k], w = p[k];
                if (strcmp(opt->optimizer, "sgd") == 0) {
                    grad += wd * w;
                    if (opt->momentum > 0) {
                        m[k] = (float)(opt->momentum * m[k] + grad);
                        grad = opt->nesterov ? grad + opt->momentum * m[k] : m[k];
                    }
                    p[k] = (float)(w - lr * grad);
                    continue;
                }
                if (strcmp(opt->optimizer, "adamw") == 0) w -= lr * wd * w;
                else grad += wd * w;
                m[k] = (float)(b1 * m[k] + (1 - b1) * grad);
                v[k] = (float)(b2 * v[k] + (1 - b2) * grad * grad);
                double mhat = m[k] / (1 - pow(b1, t));
                double vhat = v[k] / (1 - pow(b2, t));
                p[k] = (float)(w - lr * mhat / (sqrt(vhat) + eps));
            }
        }
    }
    tiny_acts_free(&acts);
    free(g);
    free(m);
    free(v);
}

void harness_result_free(harness_result *r) {
    free(r->initial);
    free(r->final);
    r->initial = r->final = NULL;
    for (int s = 0; s < 3; s++) {
        free(r->gathered_state[s]);
        r->gathered_state[s] = NULL;
    }
}

double harness_max_relative_diff(const float *a, const float *b, const char **worst_name) {
    double worst = 0.0;
    for (int i = 0; i < 2 * tiny_layer_count(); i++) {
        double max_diff = 0.0, max_ref = 0.0;
        for (int64_t k = param_start(i); k < param_start(i) + param_numel(i); k++) {
            double d = fabs((double)a[k] - (double)b[k]);
            if (d > max_diff) max_diff = d;
            if (fabs((double)b[k]) > max_ref) max_ref = fabs((double)b[k]);
        }
        double rel = max_ref > 0 ? max_diff / max_ref : max_diff;
        if (rel > worst || (worst == 0.0 && i == 0)) {
            worst = rel;
            if (worst_name) *worst_name = param_name(i);
        }
    }
    return worst;
}

int harness_save_steps_3_and_4(MPI_Comm comm, const char *root) {
    harness_options opt = {.stage = 2, .optimizer = "adamw", .steps = 3, .mode = TINY_GRAD_TRUE,
                           .max_live_units = 2, .scheduler = "constant", .save_dir = root,
                           .save_after = 3};
    harness_result r;
    if (harness_run(comm, &opt, &r) != 0) return -1;
    harness_result_free(&r);
    opt.steps = opt.save_after = 4;
    if (harness_run(comm, &opt, &r) != 0) return -1;
    harness_result_free(&r);
    return 0;
}

void harness_shared_tmpdir(char *dir, size_t cap, const char *pattern) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        snprintf(dir, cap, "%s", pattern);
        if (!mkdtemp(dir)) dir[0] = '\0';
    }
    MPI_Bcast(dir, (int)cap, MPI_CHAR, 0, MPI_COMM_WORLD);
}

void harness_remove_tree(const char *dir) {
    int rank = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
}

void harness_warn_log(const char *name, int rank, char *extra, size_t extra_cap, char *mine,
                      size_t mine_cap) {
    /* The launcher's pid keeps concurrent runs of the same test apart. */
    snprintf(mine, mine_cap, "/tmp/zs_%s_%d_%d.log", name, (int)getppid(), rank);
    snprintf(extra, extra_cap, "log: { level = \"warn\"; file = \"/tmp/zs_%s_%d_%%r.log\"; };",
             name, (int)getppid());
}

int harness_count_lines(const char *path, const char *needle, char *first, size_t first_cap) {
    if (first && first_cap) first[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle) && n++ == 0 && first && first_cap)
            snprintf(first, first_cap, "%s", line);
    fclose(f);
    return n;
}

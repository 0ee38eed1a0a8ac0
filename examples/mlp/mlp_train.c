/*
 * mlp_train — trains the example MLP (mlp_model.h) on its synthetic task
 * through zeroshard, with one zeroshard unit per layer.
 *
 *   mpirun -np 4 build/examples/mlp/mlp_train configs/mlp_zero3.cfg [group.key=value ...]
 *
 * The training loop is the one of DESIGN.md section 4 and is the same for
 * every ZeRO stage: fetch, release and grads_ready are no-ops where the stage
 * makes them so. The global batch is split evenly over the ranks and every
 * rank generates its share by global sample index, so a run sees the same
 * data whatever the world size. The program exits 0 when the final loss on
 * held-out samples is at most app.target_loss, and 1 otherwise or on any
 * error but these: a configuration it refuses (the file, an override, an
 * app key, a global batch the world size does not divide) exits
 * ZS_CONFIG_EXIT_CODE (64) after zs_report_config_error, so that a launcher
 * does not restart it; a stop signal (job.stop_signal, SIGTERM) exits with
 * zs_stop_requested's code (76 after the checkpoint is committed) at the
 * next optimizer step, skipping the evaluation.
 *
 * The same loop runs on every backend (the configuration's `backend`)
 * through one table of model ops per backend (mlp_device.h): on "cpu" the
 * model's math is mlp_model.h on host memory; on "cuda" it is mlp_cuda.h on
 * the device buffers zeroshard returns, and on "sim" (the simulated device)
 * it is the CPU's math run as kernels on the sim device's memory, its bits
 * the cpu backend's (mlp_sim.c). On both devices the work is ordered on the
 * runtime's compute stream, each batch is generated on the host and
 * uploaded, and the loss comes back to the host only on the steps that log.
 * See docs/GPU.md.
 *
 * App keys (the `app` group of the configuration; defaults in brackets):
 *   steps [300]          optimizer steps
 *   global_batch [240]   samples per micro-step over all ranks; divisible by the world
 *                        size (an optimizer step sees gradient_accumulation_steps of them)
 *   input_dim [61]       features per sample (D)
 *   hidden ["127,93"]    hidden layer widths, comma-separated; "" is a linear model
 *   classes [10]         classes (C)
 *   data_seed [2024]     chooses the samples (the labelling rule is fixed)
 *   log_every [25]       progress line every this many steps (and at the last)
 *   eval_samples [8192]  held-out samples for the final evaluation
 *   target_loss [0.5]    the final held-out loss the run must reach
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mlp_device.h"
#include "mlp_model.h"
#include "numerics.h"
#include "test_stop.h"
#include "zeroshard.h"


typedef struct app_settings {
    int64_t steps;
    int64_t global_batch;
    int64_t input_dim;
    const char *hidden; /* points into the configuration */
    int64_t classes;
    int64_t data_seed;
    int64_t log_every;
    int64_t eval_samples;
    double target_loss;
    int require_same_kernels; /* a rank with another BLAS kernel or GPU model is an error */
} app_settings;

/* One layer = one zeroshard unit holding "layerN.weight" and "layerN.bias". */
typedef struct layer_handles {
    zs_unit *unit;
    zs_param *weight; /* [dims[l + 1]][dims[l]] */
    zs_param *bias;   /* [dims[l + 1]] */
} layer_handles;

/* Reports a failed zeroshard call. Before zs_create nothing is collective;
 * after it, every call the trainer checks with this is collective, and the
 * runtime makes a failing collective fail on every rank, so each rank can
 * report, destroy its context and exit without leaving another rank waiting. */
static void report_status(zs_status status) {
    fprintf(stderr, "mlp_train: %s: %s\n", zs_status_name(status), zs_last_error());
}

#define TRY(call)                                                                  \
    do {                                                                           \
        zs_status try_status_ = (call);                                            \
        if (try_status_ != ZS_OK) {                                                \
            report_status(try_status_);                                            \
            goto done;                                                             \
        }                                                                          \
    } while (0)

/* The model on the context's backend: its ops and their state. */
typedef struct device_model {
    const mlp_device_ops *ops;
    void *state;
} device_model;

/* The table for a backend; NULL for one this program does not know. */
static const mlp_device_ops *device_ops_for(const char *backend) {
    static const mlp_device_ops *const tables[] = {&mlp_cpu_device, &mlp_cuda_device,
                                                   &mlp_sim_device};
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        if (strcmp(tables[i]->backend, backend) == 0) {
            return tables[i];
        }
    }
    return NULL;
}

/* A failure that only this rank sees (a NULL from a non-collective accessor,
 * memory for the model's buffers) would leave the other ranks blocked in
 * their next collective, so it takes the whole job down instead
 * (mlp_abort_job). */
static void *param_data_or_abort(const zs_param *p) {
    void *data = zs_param_data(p);
    if (data == NULL) {
        fprintf(stderr, "mlp_train: %s: zs_param_data: %s\n", zs_param_name(p), zs_last_error());
        mlp_abort_job("no parameter data");
    }
    return data;
}

static void *param_grad_or_abort(zs_param *p) {
    void *grad = zs_param_grad(p);
    if (grad == NULL) {
        fprintf(stderr, "mlp_train: %s: zs_param_grad: %s\n", zs_param_name(p), zs_last_error());
        mlp_abort_job("no gradient buffer");
    }
    return grad;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Parses app.hidden ("127,93") into dims[1..], with dims[0] = input_dim and
 * the last entry = classes. Returns 0, or -1 with the reason in why. */
static int parse_shape(const app_settings *app, mlp_shape *shape, char *why, size_t cap) {
    int dims[MLP_MAX_LAYERS + 1];
    int n = 0;
    dims[n++] = (int)app->input_dim;
    const char *s = app->hidden;
    while (*s != '\0') {
        char *end = NULL;
        errno = 0;
        long width = strtol(s, &end, 10);
        if (end == s || errno != 0 || width < 1 || width > (1L << 20) ||
            (*end != ',' && *end != '\0')) {
            snprintf(why, cap,
                     "app.hidden = \"%s\": expected comma-separated layer widths between 1 "
                     "and %ld, such as \"127,93\" (or \"\" for no hidden layer)",
                     app->hidden, 1L << 20);
            return -1;
        }
        if (n >= MLP_MAX_LAYERS) {
            snprintf(why, cap, "app.hidden = \"%s\": at most %d hidden layers", app->hidden,
                     MLP_MAX_LAYERS - 1);
            return -1;
        }
        dims[n++] = (int)width;
        s = *end == ',' ? end + 1 : end;
    }
    dims[n] = (int)app->classes;
    if (mlp_shape_init(shape, n, dims) != 0) {
        snprintf(why, cap, "app.input_dim = %" PRId64 ", app.hidden = \"%s\" and app.classes = "
                 "%" PRId64 " make no model (every width at least 1, at least 2 classes)",
                 app->input_dim, app->hidden, app->classes);
        return -1;
    }
    return 0;
}

static zs_status read_app_settings(zs_config *cfg, app_settings *app) {
    zs_status st;
    // Ranges are sanity bounds that keep sizes within int and sample indices
    // far from wrapping; the defaults are the tuned example (see configs/).
    if ((st = zs_config_app_int(cfg, "steps", 300, 1, INT64_C(1) << 30, &app->steps)) ||
        (st = zs_config_app_int(cfg, "global_batch", 240, 1, INT64_C(1) << 24,
                                &app->global_batch)) ||
        (st = zs_config_app_int(cfg, "input_dim", 61, 1, INT64_C(1) << 20, &app->input_dim)) ||
        (st = zs_config_app_string(cfg, "hidden", "127,93", &app->hidden)) ||
        (st = zs_config_app_int(cfg, "classes", 10, 2, INT64_C(1) << 20, &app->classes)) ||
        (st = zs_config_app_int(cfg, "data_seed", 2024, 0, INT64_MAX, &app->data_seed)) ||
        (st = zs_config_app_int(cfg, "log_every", 25, 1, INT64_C(1) << 30, &app->log_every)) ||
        (st = zs_config_app_int(cfg, "eval_samples", 8192, 1, INT64_C(1) << 30,
                                &app->eval_samples)) ||
        (st = zs_config_app_float(cfg, "target_loss", 0.5, 0.0, 1e6, &app->target_loss)) ||
        (st = zs_config_app_bool(cfg, "require_same_kernels", 0, &app->require_same_kernels)) ||
        (st = zs_config_app_finish(cfg))) {
        return st;
    }
    return ZS_OK;
}

/* Forward through every layer on the loaded batch, fetching one unit at a
 * time; the logits end where the model's loss op reads them. Collective
 * (stage 3 gathers each unit). */
static zs_status forward_all(zs_ctx *zs, const mlp_shape *shape, const layer_handles *layers,
                             int batch, const device_model *model) {
    zs_status st;
    for (int l = 0; l < shape->num_layers; l++) {
        if ((st = zs_fetch(zs, layers[l].unit)) != ZS_OK) {
            return st;
        }
        // The backend's pointers in the compute dtype; the model widens them.
        model->ops->layer_forward(model->state, l, batch, zs_param_dtype(layers[l].weight),
                                  param_data_or_abort(layers[l].weight),
                                  param_data_or_abort(layers[l].bias));
        if ((st = zs_release(zs, layers[l].unit)) != ZS_OK) {
            return st;
        }
    }
    return ZS_OK;
}

/* Backward in reverse layer order from the gradient the loss op left,
 * adding into the runtime's gradient buffers and declaring each unit done as
 * soon as its gradient is complete, so that its reduction can overlap the
 * layers below. On a device the adds are ordered on the runtime's compute
 * stream, which zs_grads_ready orders the reduction after. */
static zs_status backward_all(zs_ctx *zs, const mlp_shape *shape, const layer_handles *layers,
                              int batch, const device_model *model) {
    zs_status st;
    for (int l = shape->num_layers - 1; l >= 0; l--) {
        if ((st = zs_fetch(zs, layers[l].unit)) != ZS_OK) {
            return st;
        }
        model->ops->layer_backward(model->state, l, batch, zs_param_dtype(layers[l].weight),
                                   param_data_or_abort(layers[l].weight),
                                   param_grad_or_abort(layers[l].weight),
                                   param_grad_or_abort(layers[l].bias));
        if ((st = zs_grads_ready(zs, layers[l].unit)) != ZS_OK) {
            return st;
        }
        if ((st = zs_release(zs, layers[l].unit)) != ZS_OK) {
            return st;
        }
    }
    return ZS_OK;
}

/* Mean loss and accuracy over eval_samples held-out samples, starting right
 * after the last training sample. Each rank evaluates a contiguous share in
 * chunks of the local batch; every rank runs the same number of chunks (some
 * possibly empty) because in stage 3 each fetch is a collective. The model
 * sums over every chunk; the sums come back to the host once, at the end. */
static zs_status evaluate(zs_ctx *zs, const app_settings *app, const mlp_shape *shape,
                          const layer_handles *layers, const mlp_dataset *ds, int local_batch,
                          const device_model *model, uint64_t first_heldout, double *loss_out,
                          double *accuracy_out) {
    const int rank = zs_rank(zs);
    const int world = zs_world_size(zs);
    const int64_t E = app->eval_samples;
    const int64_t begin = E * rank / world;
    const int64_t end = E * (rank + 1) / world;
    const int64_t most_per_rank = (E + world - 1) / world;
    const int64_t chunks = (most_per_rank + local_batch - 1) / local_batch;
    double sums[2] = {0.0, 0.0}; // loss summed over samples, correct predictions
    ex_test_stop("mlp_train", "validation", rank);
    model->ops->metrics_reset(model->state);
    for (int64_t c = 0; c < chunks; c++) {
        int64_t lo = begin + c * local_batch;
        int64_t n = end - lo;
        n = n < 0 ? 0 : (n > local_batch ? local_batch : n);
        model->ops->load_batch(model->state, ds, first_heldout + (uint64_t)lo, (int)n);
        // An evaluation pass: its fetch order is kept apart from training's,
        // so stage 3 gathers ahead in both.
        zs_status st = zs_eval_begin(zs);
        if (st == ZS_OK) {
            st = forward_all(zs, shape, layers, (int)n, model);
        }
        if (st == ZS_OK) {
            st = zs_eval_end(zs);
        }
        if (st != ZS_OK) {
            return st;
        }
        model->ops->loss(model->state, (int)n, 1.0f, 0);
    }
    model->ops->metrics_read(model->state, &sums[0], &sums[1]);
    zs_status st = zs_all_reduce_host(zs, sums, 2, ZS_HOST_TYPE_DOUBLE, ZS_REDUCE_OP_SUM,
                                      "held-out loss");
    if (st != ZS_OK) {
        return st;
    }
    *loss_out = sums[0] / (double)E;
    *accuracy_out = sums[1] / (double)E;
    return ZS_OK;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        fprintf(stderr, "usage: %s <config.cfg> [group.key=value ...]\n",
                argc > 0 ? argv[0] : "mlp_train");
        return argc < 2 ? 1 : 0;
    }

    // Configuration: everything here is local to the process (no MPI yet).
    // Each refusal is the program's own error, the same on every rank and
    // host: it exits ZS_CONFIG_EXIT_CODE with an exit report saying so, and
    // a launcher stops instead of restarting it (docs/UNATTENDED.md).
    zs_config *cfg = NULL;
    zs_status st = zs_config_load(argv[1], &cfg);
    // All overrides are validated together, so related keys can change in any order.
    if (st == ZS_OK && argc > 2) {
        st = zs_config_override_list(cfg, argc - 2, (const char *const *)(argv + 2));
    }
    app_settings app;
    if (st == ZS_OK) {
        st = read_app_settings(cfg, &app);
    }
    if (st != ZS_OK) {
        const int code = zs_report_config_error("mlp_train", zs_last_error());
        zs_config_destroy(cfg);
        return code;
    }
    mlp_shape shape;
    mlp_dataset ds;
    char why[512];
    if (parse_shape(&app, &shape, why, sizeof why) != 0) {
        zs_config_destroy(cfg);
        return zs_report_config_error("mlp_train", why);
    }
    // It refuses only what mlp_shape_init (in parse_shape) refused already:
    // fewer than 1 input or 2 classes.
    (void)mlp_dataset_init(&ds, (int)app.input_dim, (int)app.classes, (uint64_t)app.data_seed);

    // From here on the ranks act together.
    int exit_code = 1;
    zs_ctx *zs = NULL;
    device_model model = {NULL, NULL}; // the model's buffers and math on the backend
    layer_handles layers[MLP_MAX_LAYERS];
    TRY(zs_create(cfg, &zs));
    const int rank = zs_rank(zs);
    const int world = zs_world_size(zs);
    TRY(ex_numerics_check(zs, app.require_same_kernels));
    if (app.global_batch % world != 0) {
        // Every rank sees the same numbers, so every rank stops here, each
        // with its exit report (a launcher reads every rank's).
        snprintf(why, sizeof why,
                 "app.global_batch = %" PRId64 " does not divide evenly over %d ranks; choose a "
                 "multiple of the world size (e.g. %" PRId64 ")",
                 app.global_batch, world, (app.global_batch / world + 1) * (int64_t)world);
        exit_code = zs_report_config_error("mlp_train", why);
        goto done;
    }
    const int local_batch = (int)(app.global_batch / world);

    const int L = shape.num_layers;
    for (int l = 0; l < L; l++) {
        char name[64];
        snprintf(name, sizeof(name), "layer%d", l);
        TRY(zs_unit_begin(zs, name, &layers[l].unit));
        const int64_t weight_shape[2] = {shape.dims[l + 1], shape.dims[l]};
        const int64_t bias_shape[1] = {shape.dims[l + 1]};
        snprintf(name, sizeof(name), "layer%d.weight", l);
        TRY(zs_param_create(zs, name, 2, weight_shape,
                            ZS_INIT_NORMAL_STD(mlp_layer_init_std(&shape, l)), 0,
                            &layers[l].weight));
        snprintf(name, sizeof(name), "layer%d.bias", l);
        TRY(zs_param_create(zs, name, 1, bias_shape, ZS_INIT_ZEROS_VALUE, ZS_PARAM_NO_DECAY,
                            &layers[l].bias));
        TRY(zs_unit_end(zs));
    }
    TRY(zs_build(zs));
    // Every rank has the same backend and build, so a model that cannot be
    // made here (a build without CUDA) stops every rank at the same point.
    model.ops = device_ops_for(zs_backend_name(zs));
    if (model.ops == NULL) {
        fprintf(stderr, "mlp_train: backend \"%s\" has no model here (cpu, cuda and sim do)\n",
                zs_backend_name(zs));
        goto done;
    }
    model.state = model.ops->create(zs, &shape, local_batch, zs_param_dtype(layers[0].weight));
    if (model.state == NULL) {
        goto done;
    }

    if (rank == 0) {
        printf("mlp_train: %s (hash %016" PRIx64 "), stage %d, %s, %d ranks, backend %s\n",
               zs_config_path(cfg), zs_config_hash(cfg), zs_stage(zs),
               zs_dtype_name(zs_param_dtype(layers[0].weight)), world, zs_backend_name(zs));
        printf("model: %d", shape.dims[0]);
        for (int l = 1; l <= L; l++) {
            printf(" -> %d", shape.dims[l]);
        }
        printf(" (%" PRId64 " parameters in %d units); batch %" PRId64 " = %d ranks x %d; "
               "%" PRId64 " steps; target held-out loss <= %.4f (chance is ln %d = %.4f)\n",
               mlp_param_count(&shape), zs_unit_count(zs), app.global_batch, world,
               local_batch, app.steps, app.target_loss, shape.dims[L],
               log((double)shape.dims[L]));
        fflush(stdout);
    }

    double window_start = now_seconds();
    int64_t window_steps = 0;
    // Micro-batches are numbered across the run, so every sample is used once
    // whatever gradient_accumulation_steps is; the held-out samples follow them.
    // The position is kept in checkpoints as user state: after an automatic
    // resume (checkpoint.resume = "auto") the loop continues where it stopped.
    int64_t position[2] = {0, 0}; // next step, micro-batches consumed
    size_t position_bytes = 0;
    if (zs_user_state_get(zs, "data_position", position, sizeof position, &position_bytes) ==
            ZS_OK &&
        position_bytes == sizeof position) {
        if (rank == 0) {
            printf("resumed from a checkpoint at step %" PRId64 " (%" PRId64 " optimizer steps "
                   "applied)\n", position[0], zs_step_count(zs));
        }
    } else {
        position[0] = position[1] = 0;
    }
    int64_t micro_batches = position[1];
    int stop_code = 0; // zs_stop_requested's value once a stop was agreed
    for (int64_t step = position[0]; step < app.steps; step++) {
        // One optimizer step: micro-steps until the runtime's accumulation
        // boundary (one micro-step when gradient_accumulation_steps = 1).
        int micro = 0, boundary = 0;
        zs_step_info info;
        const int log_this_step =
            (step + 1) % app.log_every == 0 || step == 0 || step + 1 == app.steps;
        // The model sums the loss over this step's micro-steps.
        model.ops->metrics_reset(model.state);
        do {
            model.ops->load_batch(model.state, &ds,
                                  mlp_batch_first_index(micro_batches, app.global_batch, rank,
                                                        world),
                                  local_batch);
            TRY(forward_all(zs, &shape, layers, local_batch, &model));
            // The loss value stays unscaled for the log; only its gradient carries
            // the loss scale, as if the loss had been multiplied before backward.
            model.ops->loss(model.state, local_batch, zs_loss_scale(zs), 1);
            TRY(backward_all(zs, &shape, layers, local_batch, &model));
            boundary = zs_is_accumulation_boundary(zs);
            if (boundary) {
                // What a checkpoint taken by this step (checkpoint.every) resumes from.
                int64_t next[2] = {step + 1, micro_batches + 1};
                TRY(zs_user_state_set(zs, "data_position", next, sizeof next, 0));
            }
            TRY(zs_step(zs, &info));
            micro++;
            micro_batches++;
            // A stop signal (job.stop_signal, or SIGTERM) that any rank got
            // was agreed inside this zs_step, which then committed the
            // checkpoint: every rank sees the same value here.
            if ((stop_code = zs_stop_requested(zs)) != 0) {
                break;
            }
        } while (!boundary);
        if (stop_code != 0) {
            // A preemption leaves little time: no evaluation, no report.
            if (rank == 0) {
                printf("stopped after step %" PRId64 " on a signal: %s; exit code %d\n",
                       info.step,
                       stop_code == ZS_STOPPED_EXIT_CODE ? "checkpoint committed"
                                                         : "no checkpoint (no checkpoint.dir)",
                       stop_code);
                fflush(stdout);
            }
            exit_code = stop_code;
            goto done;
        }
        window_steps++;

        if (log_this_step) {
            // On a device, the one device-to-host copy of the step.
            double loss_sum = 0.0, correct_sum = 0.0;
            model.ops->metrics_read(model.state, &loss_sum, &correct_sum);
            // The loss summed over this rank's samples, per micro-step: the
            // ranks' sums add up to the global batch's, whatever their sizes.
            double sums[2] = {loss_sum / micro, correct_sum / micro};
            TRY(zs_all_reduce_host(zs, sums, 2, ZS_HOST_TYPE_DOUBLE, ZS_REDUCE_OP_SUM,
                                   "training loss"));
            double elapsed = now_seconds() - window_start;
            if (rank == 0) {
                printf("step %6" PRId64 " | loss %.4f | acc %.3f | lr %.3e | grad norm %.4f | "
                       "scale %g | skipped %" PRId64 " | %.2f ms/step\n",
                       info.step, sums[0] / (double)app.global_batch,
                       sums[1] / (double)app.global_batch, info.lr, info.grad_norm,
                       info.loss_scale, info.skipped_total, 1e3 * elapsed / (double)window_steps);
                fflush(stdout);
            }
            window_start = now_seconds();
            window_steps = 0;
        }
    }

    double eval_loss = 0.0, eval_accuracy = 0.0;
    TRY(evaluate(zs, &app, &shape, layers, &ds, local_batch, &model,
                 (uint64_t)micro_batches * (uint64_t)app.global_batch, &eval_loss, &eval_accuracy));
    printf("\n");
    TRY(zs_report_print(zs, stdout));
    const int reached = eval_loss <= app.target_loss;
    if (rank == 0) {
        printf("\nfinal: held-out loss %.4f, accuracy %.4f on %" PRId64 " samples; target loss "
               "<= %.4f %s\n",
               eval_loss, eval_accuracy, app.eval_samples, app.target_loss,
               reached ? "reached" : "NOT reached");
        fflush(stdout);
    }
    if (!reached && rank == 0) {
        fprintf(stderr,
                "mlp_train: the held-out loss %.4f is above app.target_loss = %.4f; train "
                "longer (app.steps) or tune optimizer.lr\n",
                eval_loss, app.target_loss);
    }
    exit_code = reached ? 0 : 1;

done:
    // Before zs_destroy: a device's state uses the context's stream.
    if (model.ops != NULL) {
        model.ops->destroy(model.state);
    }
    zs_destroy(zs);
    zs_config_destroy(cfg);
    return exit_code;
}

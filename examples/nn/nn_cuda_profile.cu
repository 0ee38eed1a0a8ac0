// A CUDA device's per-op profile: the device time of every op of a few
// training micro-steps, to say which kernels make a gap to llm.c. A model
// backend starts it from its own variable (GPT2_CUDA_PROFILE,
// LLAMA_CUDA_PROFILE: STEPS[,WARMUP]) with the names of its own ops in the
// order of its table; the layers name the others as they run (prof_op:
// "matmul_<Linear>_fwd", "layernorm_fwd", ...), and the shared ops
// (embedding, attention, classifier, bias sums, loss sum) have theirs here.
//
// How: each timed op (a prof_scope, nn_cuda_ctx.cuh) records a CUDA event
// on the device's stream before its launches and one after them. The
// window opens at the first embed_forward after WARMUP training
// micro-steps (a training micro-step ends with embed_backward) and closes
// at the first embed_forward after STEPS more; every op enqueued in it is
// timed, so the ops lie inside the step time below. Nothing waits for an
// event inside a step: when the next micro-step starts (embed_forward),
// the events that have already completed are read with cudaEventQuery
// (which does not block) and go back to a pool; the rest are read at
// destroy, after its stream synchronization. The step's own time runs
// from the first profiled micro-step's embed_forward to the embed_forward
// after the last one, so it includes what the runtime enqueues between
// the model's ops (gathers, reductions, the optimizer) and the device's
// idle time while the host waits; "outside_ops" is that remainder. When no
// micro-step follows the last profiled one, the step time ends with that
// one's embed_backward.
// Evaluation passes that fall inside the window are counted too: profile
// with app.val_every = 0 or past the window.
//
// The table, on stderr when the device is destroyed (every line starts
// "profile " so that a script can pick it out; names have no spaces; after
// the header row the last four fields are numbers; LABEL is the model's,
// "gpt2" or "llama"):
//   LABEL cuda profile: 3 training micro-steps after 2 warm-up (...)
//   profile op                        calls     total_ms  ms_per_step pct_step
//   profile matmul_fc_fwd                36       12.345        4.115     8.21
//   ...   (the ops, longest total first)
//   profile all_ops                    1110      123.456       41.152    82.10
//   profile outside_ops                   0       26.900        8.967    17.90
//   profile step                          3      150.356       50.119   100.00
//   fusion: bias fused ... (nn_cuda_device_stats's line)
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "nn_cuda_ctx.cuh"

namespace nncuda {

namespace {

const char *const kSharedNames[] = {
    "encoder_fwd",       "encoder_bwd_sort",   "encoder_bwd_wte", "bias_grad_sums",
    "attn_fwd_permute",  "attn_fwd_qk",        "attn_fwd_softmax", "attn_fwd_av",
    "attn_fwd_unpermute", "attn_bwd_permute",  "attn_bwd_dp_dv",  "attn_bwd_softmax",
    "attn_bwd_dq_dk",    "attn_bwd_unpermute", "matmul_logits",   "classifier_xent",
    "matmul_wte_dw",     "matmul_head_dx",     "losses_sum"};
static_assert(sizeof kSharedNames / sizeof kSharedNames[0] == kProfModelBase,
              "one name per shared prof_op");

// The bounds of a profile's numbers: enough for any measurement, small
// enough that a typo does not hold events for a whole run.
constexpr long kMaxSteps = 100000;

struct record {
    int op;
    cudaEvent_t start, end;
};

} // namespace

struct profiler {
    int steps, warmup;
    const char *label, *env;    // the model's: "gpt2", "GPT2_CUDA_PROFILE"
    // Names of ops kProfModelBase + i: the model's list first (its table's
    // order), then any other a layer names at its first use (prof_op).
    char model[kProfMaxOps - kProfModelBase][kProfNameCap];
    int n_ops;                  // kProfModelBase + the names above
    int done;      // training micro-steps ended (embed_backward calls)
    int profiled;  // those that ended inside the window
    bool window;   // ops are being timed
    int depth;     // scopes open; only the outermost is recorded
    bool open;     // the outermost scope recorded its start event
    record current;
    // Recorded ops not yet read, oldest first: a ring of cap entries.
    record *queue;
    int head, count, cap;
    // Events read and ready for reuse.
    cudaEvent_t *spare;
    int n_spare, cap_spare;
    // The window's marks: the first profiled micro-step's start, the end of
    // the last profiled backward, and the start of the micro-step after it.
    cudaEvent_t first_mark, tail_mark, end_mark;
    bool have_first, have_tail, have_end;
    long long calls[kProfMaxOps];
    double ms[kProfMaxOps];
    char failure[200]; // the first failure; recording stopped there
};

namespace {

const char *op_name(const profiler *p, int op) {
    return op < kProfModelBase ? kSharedNames[op] : p->model[op - kProfModelBase];
}

// The op named `name` (added at its first use while there is room), or -1.
int find_or_add(profiler *p, const char *name) {
    for (int op = 0; op < p->n_ops; op++)
        if (std::strcmp(op_name(p, op), name) == 0) return op;
    if (p->n_ops == kProfMaxOps) return -1;
    std::snprintf(p->model[p->n_ops - kProfModelBase], kProfNameCap, "%s", name);
    return p->n_ops++;
}

bool in_window(const profiler *p) { return p->window && p->failure[0] == '\0'; }

// Profiling is a measurement, not part of the model's results: a failure
// stops it and is reported with the table, and the op goes on.
void stop(profiler *p, const char *what, cudaError_t e) {
    if (p->failure[0] == '\0')
        std::snprintf(p->failure, sizeof p->failure, "%s failed: %s", what,
                      cudaGetErrorString(e));
}

bool take_event(profiler *p, cudaEvent_t *out) {
    if (p->n_spare > 0) {
        *out = p->spare[--p->n_spare];
        return true;
    }
    const cudaError_t e = cudaEventCreate(out);
    if (e != cudaSuccess) {
        stop(p, "cudaEventCreate", e);
        return false;
    }
    return true;
}

void give_event(profiler *p, cudaEvent_t ev) {
    if (p->n_spare == p->cap_spare) {
        const int cap = p->cap_spare > 0 ? 2 * p->cap_spare : 256;
        void *grown = std::realloc(p->spare, sizeof(cudaEvent_t) * (size_t)cap);
        if (grown == nullptr) { // the pool stays as it is; this event goes
            cudaEventDestroy(ev);
            return;
        }
        p->spare = static_cast<cudaEvent_t *>(grown);
        p->cap_spare = cap;
    }
    p->spare[p->n_spare++] = ev;
}

bool push(profiler *p, const record &r) {
    if (p->count == p->cap) {
        const int cap = p->cap > 0 ? 2 * p->cap : 256;
        auto *grown = static_cast<record *>(std::malloc(sizeof(record) * (size_t)cap));
        if (grown == nullptr) return false;
        for (int i = 0; i < p->count; i++) grown[i] = p->queue[(p->head + i) % p->cap];
        std::free(p->queue);
        p->queue = grown;
        p->head = 0;
        p->cap = cap;
    }
    p->queue[(p->head + p->count) % p->cap] = r;
    p->count++;
    return true;
}

// Reads the recorded ops, oldest first, while their end events have
// completed; with `all` (at destroy, after the stream's synchronization)
// every one. Never blocks.
void harvest(profiler *p, bool all) {
    while (p->count > 0) {
        const record r = p->queue[p->head];
        const cudaError_t q = cudaEventQuery(r.end);
        if (q == cudaErrorNotReady && !all) {
            // Not an error, but the runtime may keep it as the thread's last
            // error, which the next launch's check (cudaGetLastError) would
            // then report as a failure of that launch. Every launch on this
            // device is checked as it is made, so nothing else is pending
            // here to be lost.
            (void)cudaGetLastError();
            return;
        }
        float ms = 0.0f;
        cudaError_t e = q;
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, r.start, r.end);
        if (e == cudaSuccess) {
            p->calls[r.op]++;
            p->ms[r.op] += ms;
        } else {
            stop(p, "reading a profile event", e);
            (void)cudaGetLastError();
        }
        give_event(p, r.start);
        give_event(p, r.end);
        p->head = (p->head + 1) % p->cap;
        p->count--;
    }
}

// Records `*mark` (created on first use) on the stream.
bool record_mark(ctx *cx, cudaEvent_t *mark, bool *have) {
    profiler *p = cx->prof;
    if (!*have && *mark == nullptr && !take_event(p, mark)) return false;
    const cudaError_t e = cudaEventRecord(*mark, cx->stream);
    if (e != cudaSuccess) {
        stop(p, "cudaEventRecord", e);
        return false;
    }
    *have = true;
    return true;
}

double elapsed_ms(profiler *p, cudaEvent_t a, cudaEvent_t b) {
    float ms = 0.0f;
    const cudaError_t e = cudaEventElapsedTime(&ms, a, b);
    if (e != cudaSuccess) {
        stop(p, "reading the step's events", e);
        return 0.0;
    }
    return ms;
}

} // namespace

bool profile_spec_parse(const char *spec, int *steps, int *warmup) {
    char *end = nullptr;
    const long s = std::strtol(spec, &end, 10);
    if (end == spec || s < 1 || s > kMaxSteps) return false;
    long w = 2;
    if (*end == ',') {
        const char *at = end + 1;
        w = std::strtol(at, &end, 10);
        if (end == at || w < 0 || w > kMaxSteps) return false;
    }
    if (*end != '\0') return false;
    *steps = (int)s;
    *warmup = (int)w;
    return true;
}

int profile_from_env(const char *env, const char *model, int *steps, int *warmup, char *err,
                     size_t cap) {
    *steps = 0;
    *warmup = 0;
    const char *spec = std::getenv(env);
    if (spec == nullptr || *spec == '\0' || profile_spec_parse(spec, steps, warmup)) return NN_OK;
    return ex_error(err, cap, NN_ERR_ARG,
                    "%s cuda: %s=\"%s\"; use STEPS or STEPS,WARMUP (training micro-steps to "
                    "time, 1..100000, after WARMUP ones, 0..100000, default 2), or unset it",
                    model, env, spec);
}

int profiler_create(ctx *cx, const char *label, const char *env, int steps, int warmup,
                    const char *const *model_names, int n_model, char *err, size_t cap) {
    if (cx->prof != nullptr) return NN_OK;
    if (n_model < 0 || kProfModelBase + n_model > kProfMaxOps)
        return ex_error(err, cap, NN_ERR_ARG, "nn cuda: a profile of %d model ops; at most %d",
                         n_model, kProfMaxOps - kProfModelBase);
    auto *p = static_cast<profiler *>(std::calloc(1, sizeof(profiler)));
    if (p == nullptr) return ex_error(err, cap, NN_ERR_NOMEM, "nn cuda: out of host memory");
    p->steps = steps;
    p->warmup = warmup;
    p->label = label;
    p->env = env;
    p->n_ops = kProfModelBase;
    for (int i = 0; i < n_model; i++) find_or_add(p, model_names[i]);
    cx->prof = p;
    return NN_OK;
}

int prof_op(ctx *cx, const char *prefix, const char *name, const char *suffix) {
    if (cx->prof == nullptr) return -1;
    char full[kProfNameCap];
    std::snprintf(full, sizeof full, "%s%s%s", prefix, name != nullptr ? name : "linear",
                  suffix);
    return find_or_add(cx->prof, full);
}

void prof_begin(ctx *cx, int op) {
    profiler *p = cx->prof;
    if (p->depth++ > 0 || !in_window(p) || op < 0 || op >= p->n_ops) return;
    record r{op, nullptr, nullptr};
    if (!take_event(p, &r.start)) return;
    if (!take_event(p, &r.end)) {
        give_event(p, r.start);
        return;
    }
    const cudaError_t e = cudaEventRecord(r.start, cx->stream);
    if (e != cudaSuccess) {
        stop(p, "cudaEventRecord", e);
        give_event(p, r.start);
        give_event(p, r.end);
        return;
    }
    p->current = r;
    p->open = true;
}

void prof_end(ctx *cx) {
    profiler *p = cx->prof;
    if (--p->depth > 0 || !p->open) return;
    p->open = false;
    const record r = p->current;
    const cudaError_t e = cudaEventRecord(r.end, cx->stream);
    if (e != cudaSuccess) stop(p, "cudaEventRecord", e);
    if (e != cudaSuccess || !push(p, r)) {
        if (e == cudaSuccess) std::snprintf(p->failure, sizeof p->failure, "out of host memory");
        give_event(p, r.start);
        give_event(p, r.end);
    }
}

void prof_cancel(ctx *cx) {
    profiler *p = cx->prof;
    if (p == nullptr || p->depth != 1 || !p->open) return;
    p->open = false;
    give_event(p, p->current.start);
    give_event(p, p->current.end);
}

void prof_step_begin(ctx *cx) {
    profiler *p = cx->prof;
    if (p == nullptr) return;
    harvest(p, false);
    if (p->failure[0] != '\0') {
        p->window = false;
    } else if (!p->have_first && p->done >= p->warmup && p->done < p->warmup + p->steps) {
        p->window = record_mark(cx, &p->first_mark, &p->have_first);
    } else if (p->window && p->done >= p->warmup + p->steps) {
        record_mark(cx, &p->end_mark, &p->have_end);
        p->window = false;
    }
}

void prof_step_end(ctx *cx) {
    profiler *p = cx->prof;
    if (p == nullptr) return;
    if (in_window(p) && record_mark(cx, &p->tail_mark, &p->have_tail)) p->profiled++;
    p->done++;
}

namespace {

// The table and the fusion line on stderr (every event read).
void report(profiler *p, const char *fusion_line) {
    const int profiled = p->profiled;
    const bool measured = profiled > 0 && p->have_first && (p->have_end || p->have_tail);
    std::fprintf(stderr,
                 "%s cuda profile: %d training micro-steps after %d warm-up (a step: from "
                 "its embed_forward to %s); device time in ms from CUDA events on the "
                 "compute stream\n",
                 p->label, profiled, p->warmup,
                 p->have_end ? "the next one, the runtime's work between included"
                             : "the end of its embed_backward (no step followed)");
    if (p->failure[0] != '\0')
        std::fprintf(stderr, "%s cuda profile: recording stopped early: %s\n", p->label,
                     p->failure);
    const double step_total =
        measured ? elapsed_ms(p, p->first_mark, p->have_end ? p->end_mark : p->tail_mark) : 0.0;
    if (!measured || step_total <= 0.0) {
        std::fprintf(stderr,
                     "%s cuda profile: nothing measured: %d training micro-steps ran, the "
                     "window starts after %d; run more steps or lower WARMUP "
                     "(%s=STEPS,WARMUP)\n",
                     p->label, p->done, p->warmup, p->env);
    } else {
        // The ops by total time, longest first (a stable insertion sort:
        // equal times keep the table's order).
        int order[kProfMaxOps];
        int n = 0;
        double ops_total = 0.0;
        long long calls_total = 0;
        for (int op = 0; op < p->n_ops; op++) {
            if (p->calls[op] == 0) continue;
            ops_total += p->ms[op];
            calls_total += p->calls[op];
            int k = n++;
            while (k > 0 && p->ms[order[k - 1]] < p->ms[op]) {
                order[k] = order[k - 1];
                k--;
            }
            order[k] = op;
        }
        const auto row = [&](const char *name, long long calls, double ms) {
            std::fprintf(stderr, "profile %-22s %8lld %12.3f %12.3f %8.2f\n", name, calls, ms,
                         ms / profiled, 100.0 * ms / step_total);
        };
        std::fprintf(stderr, "profile %-22s %8s %12s %12s %8s\n", "op", "calls", "total_ms",
                     "ms_per_step", "pct_step");
        for (int i = 0; i < n; i++)
            row(op_name(p, order[i]), p->calls[order[i]], p->ms[order[i]]);
        row("all_ops", calls_total, ops_total);
        row("outside_ops", 0, step_total - ops_total);
        row("step", profiled, step_total);
    }
    std::fprintf(stderr, "%s\n", fusion_line);
}

} // namespace

void profiler_destroy(ctx *cx, const char *fusion_line) {
    profiler *p = cx->prof;
    if (p == nullptr) return;
    harvest(p, true);
    if (fusion_line != nullptr) report(p, fusion_line);
    // Every queued event was read above; the pool and the marks go.
    for (int i = 0; i < p->n_spare; i++) cudaEventDestroy(p->spare[i]);
    if (p->first_mark != nullptr) cudaEventDestroy(p->first_mark);
    if (p->tail_mark != nullptr) cudaEventDestroy(p->tail_mark);
    if (p->end_mark != nullptr) cudaEventDestroy(p->end_mark);
    std::free(p->spare);
    std::free(p->queue);
    std::free(p);
    cx->prof = nullptr;
}

} // namespace nncuda

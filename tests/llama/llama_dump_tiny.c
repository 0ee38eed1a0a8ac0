/*
 * llama_dump_tiny DIR — one training step of four tiny Llama-family models
 * on the CPU backend, written for an independent implementation to
 * recompute (tests/llama/llama_numpy_ref.py). The four share the shape of
 * the gradient check (grouped-query: 4 query heads on 2 K/V heads, head
 * size 10, C = 40, F = 72, V = 53, B = 2, T = 7, 2 layers) and differ in
 * the head (tied or untied), the biases (none; or q/k/v only, as Qwen2;
 * or every one), rope_theta and RoPE scaling (llama3 with a short original
 * context, so that its three bands all occur), and rms_norm_eps. Each goes to
 * DIR/<variant>/:
 *   config.json    llama_config_write's (the reference reads the model from it)
 *   manifest.txt   one line per tensor: name ndim dim0 dim1 offset numel
 *                  (offset in floats into params.bin and grads.bin)
 *   params.bin     every parameter, float32 little-endian, units in order
 *   grads.bin      the gradient of the mean loss, same layout
 *   tokens.bin, targets.bin   int32 [B*T]; shape.txt: B T
 *   losses.bin     float32 [B*T] per-position losses (head_forward_backward)
 *   logits.bin     float32 [B*T][V] (head_logits, row by row)
 *   loss.txt       the mean loss, %.17g
 * With LoRA also lora.json (r, lora_alpha) and the adapters after the base
 * in params.bin and grads.bin, one manifest line each under PEFT's names
 * without its prefix (model.layers.N.self_attn.q_proj.lora_A.weight, A
 * [r][in], B [out][r]); the base's gradients in grads.bin are what its
 * buffer holds after the step, filled with NaN before it: a frozen base
 * gets no gradient, so NaN comes back.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama_backend.h"
#include "llama_test_model.h"

static void die(const char *what) {
    fprintf(stderr, "llama_dump_tiny: %s\n", what);
    exit(1);
}

static FILE *open_in(const char *dir, const char *name, const char *mode) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, mode);
    if (f == NULL) die(path);
    return f;
}

static void write_bin(const char *dir, const char *name, const void *data, size_t bytes) {
    FILE *f = open_in(dir, name, "wb");
    if (fwrite(data, 1, bytes, f) != bytes || fclose(f) != 0) die(name);
}

/* The shared shape; variants change the rest. */
static llama_dims tiny_dims(void) {
    llama_dims d = {.n_layer = 2, .n_head = 4, .n_kv_head = 2, .head_dim = 10, .n_embd = 40,
                    .n_ff = 72, .vocab = 53, .max_seq = 32, .rms_eps = 1e-5,
                    .rope_theta = 10000.0, .init_std = 0.02, .model_type = "llama"};
    return d;
}

/* Tied, every bias, rms_norm_eps 1e-6 and llama3 RoPE scaling. */
static llama_dims tied_biases_llama3_dims(void) {
    llama_dims d = tiny_dims();
    d.tied = 1;
    d.qkv_bias = d.o_bias = d.mlp_bias = 1;
    d.rms_eps = 1e-6;
    // Wavelengths 6.3, 40, 250, 1600, 9900 against an original context of
    // 64: the first kept (< 64 / 8), the second smoothed, the rest slowed.
    d.rope_kind = LLAMA_ROPE_LLAMA3;
    d.rope_factor = 8.0;
    d.rope_low_freq = 1.0;
    d.rope_high_freq = 8.0;
    d.rope_orig_max = 64;
    return d;
}

/* LoRA's rank and alpha in the lora variant. */
enum { LORA_R = 3 };
static const double lora_alpha = 5.0;

/* lora_targets: bit t of [l] adapts target t of block l; NULL: no LoRA. */
static void dump(const char *root, const char *name, const llama_dims *d, uint64_t seed,
                 const unsigned *lora_targets) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (system(cmd) != 0) die("mkdir");
    nn_device *dev = nn_cpu_device_create();
    llama_backend *be = NULL;
    char err[512];
    if (dev == NULL || llama_cpu_backend_create(dev, d, 7, &be, err, sizeof err) != 0) die(err);
    if (lora_targets != NULL &&
        llama_backend_set_lora(be, LORA_R, lora_alpha, 0.0, err, sizeof err) != 0)
        die(err);
    const int B = 2, T = 7, BT = B * T;
    llama_tm m;
    if (llama_tm_init(&m, be, B, T, 5) != 0) die("llama_tm_init");
    float *lora = NULL;
    if (lora_targets != NULL) {
        if (llama_tm_set_lora(&m, lora_targets) != 0) die("llama_tm_set_lora");
        lora = malloc(sizeof(float) * (size_t)m.n_lora);
        if (lora == NULL) die("out of memory");
        // A and B on the scale of the base's products (A normal(0, 0.3),
        // B normal(0, 0.1)): the adapters' share of each output is not small.
        uint64_t st = seed + 3;
        for (int l = 0; l < d->n_layer; l++) {
            for (int t = 0; t < LLAMA_LORA_TARGETS; t++) {
                const int64_t at = m.lora_at[l * LLAMA_LORA_TARGETS + t];
                if (at < 0) continue;
                int in, out;
                llama_lora_target_shape(d, t, &in, &out);
                for (int64_t i = 0; i < (int64_t)LORA_R * in; i++)
                    lora[at + i] = (float)(0.3 * mt_normal(&st));
                for (int64_t i = 0; i < (int64_t)LORA_R * out; i++)
                    lora[at + LORA_R * in + i] = (float)(0.1 * mt_normal(&st));
            }
        }
        if (llama_tm_set_lora_params(&m, lora) != 0) die("adapters");
        float *nan = malloc(sizeof(float) * (size_t)m.n_params);
        if (nan == NULL) die("out of memory");
        for (int64_t i = 0; i < m.n_params; i++) nan[i] = NAN;
        if (dev->ops->upload(dev, m.grads, nan, sizeof(float) * (size_t)m.n_params) != 0)
            die("upload");
        free(nan);
    }
    float *params = malloc(sizeof(float) * (size_t)m.n_params);
    float *logits = malloc(sizeof(float) * (size_t)BT * d->vocab);
    int tokens[14], targets[14];
    if (params == NULL || logits == NULL) die("out of memory");
    // Weights 5x the init and norms and biases off theirs: attention far
    // from uniform, SiLU far from linear, every bias felt.
    mt_init_params(&llama_param_table, d, params, seed, 5.0, 0.2);
    mt_random_tokens(BT, d->vocab, tokens, seed + 1);
    mt_random_tokens(BT, d->vocab, targets, seed + 2);
    tokens[3] = tokens[10] = 11; // a repeated token: two rows into one wte row
    double loss = 0.0;
    if (llama_tm_set_params(&m, params) != 0 || llama_tm_set_data(&m, tokens, targets) != 0 ||
        llama_tm_step(&m, 1.0f / BT, 1, &loss) != 0)
        die("step");
    for (int r = 0; r < BT; r++)
        if (llama_tm_logits(&m, r, logits + (size_t)r * d->vocab) != 0) die("head_logits");

    char text[4096];
    const int n = llama_config_write(d, text, sizeof text);
    if (n <= 0 || n >= (int)sizeof text) die("config");
    write_bin(dir, "config.json", text, (size_t)n);
    FILE *f = open_in(dir, "manifest.txt", "w");
    for (int u = 0; u < llama_num_units(d); u++) {
        for (int i = 0; i < llama_unit_num_params(d, u); i++) {
            llama_param_spec s;
            llama_param_spec_get(d, u, i, &s);
            fprintf(f, "%s %d %lld %lld %lld %lld\n", s.name, s.ndim, (long long)s.shape[0],
                    (long long)s.shape[1], (long long)mt_param_offset(&llama_param_table, d, u, i),
                    (long long)s.numel);
        }
    }
    for (int l = 0; lora != NULL && l < d->n_layer; l++) {
        for (int t = 0; t < LLAMA_LORA_TARGETS; t++) {
            const int64_t at = m.lora_at[l * LLAMA_LORA_TARGETS + t];
            if (at < 0) continue;
            int in, out;
            llama_lora_target_shape(d, t, &in, &out);
            const char *tn = llama_lora_target_name(t);
            fprintf(f, "model.layers.%d.%s.lora_A.weight 2 %d %d %lld %d\n", l, tn, LORA_R, in,
                    (long long)(m.n_params + at), LORA_R * in);
            fprintf(f, "model.layers.%d.%s.lora_B.weight 2 %d %d %lld %d\n", l, tn, out, LORA_R,
                    (long long)(m.n_params + at + LORA_R * in), LORA_R * out);
        }
    }
    fclose(f);
    if (lora != NULL) {
        f = open_in(dir, "lora.json", "w");
        fprintf(f, "{\"r\": %d, \"lora_alpha\": %.17g}\n", LORA_R, lora_alpha);
        fclose(f);
    }
    f = open_in(dir, "shape.txt", "w");
    fprintf(f, "%d %d\n", B, T);
    fclose(f);
    // The CPU device's memory is the host's: m.grads and m.lora_grads are
    // read in place.
    f = open_in(dir, "params.bin", "wb");
    if (fwrite(params, sizeof(float), (size_t)m.n_params, f) != (size_t)m.n_params ||
        (lora != NULL &&
         fwrite(lora, sizeof(float), (size_t)m.n_lora, f) != (size_t)m.n_lora) ||
        fclose(f) != 0)
        die("params.bin");
    f = open_in(dir, "grads.bin", "wb");
    if (fwrite(m.grads, sizeof(float), (size_t)m.n_params, f) != (size_t)m.n_params ||
        (lora != NULL &&
         fwrite(m.lora_grads, sizeof(float), (size_t)m.n_lora, f) != (size_t)m.n_lora) ||
        fclose(f) != 0)
        die("grads.bin");
    write_bin(dir, "tokens.bin", tokens, sizeof tokens);
    write_bin(dir, "targets.bin", targets, sizeof targets);
    write_bin(dir, "losses.bin", m.losses, sizeof(float) * BT);
    write_bin(dir, "logits.bin", logits, sizeof(float) * (size_t)BT * d->vocab);
    f = open_in(dir, "loss.txt", "w");
    fprintf(f, "%.17g\n", loss);
    fclose(f);
    printf("llama_dump_tiny: %s: mean loss %.9f, %lld parameters, %lld in adapters\n", name,
           loss, (long long)m.n_params, (long long)m.n_lora);
    free(params);
    free(lora);
    free(logits);
    llama_tm_free(&m);
    be->ops->destroy(be);
    dev->ops->destroy(dev);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: llama_dump_tiny DIR\n");
        return 2;
    }
    llama_dims d = tiny_dims();
    dump(argv[1], "untied", &d, 31, NULL);

    d = tied_biases_llama3_dims();
    dump(argv[1], "tied_biases_llama3", &d, 41, NULL);

    d = tiny_dims();
    d.qkv_bias = 1; /* Qwen2: q/k/v biases only */
    snprintf(d.model_type, sizeof d.model_type, "qwen2");
    d.rope_theta = 1e6;
    dump(argv[1], "qwen2_untied", &d, 51, NULL);

    d = tiny_dims();
    d.tied = 1;
    d.rope_theta = 500000.0;
    dump(argv[1], "tied", &d, 61, NULL);

    // LoRA on tied_biases_llama3's base: every target in block 0; in
    // block 1 k_proj, o_proj and up_proj (not PEFT's default q,v): adapted
    // and plain Linears side by side, an MLP one among them.
    d = tied_biases_llama3_dims();
    const unsigned targets[2] = {(1u << LLAMA_LORA_TARGETS) - 1,
                                 1u << LLAMA_LORA_K | 1u << LLAMA_LORA_O | 1u << LLAMA_LORA_UP};
    dump(argv[1], "lora_tied_biases", &d, 71, targets);
    return 0;
}

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
 */
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

static void dump(const char *root, const char *name, const llama_dims *d, uint64_t seed) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (system(cmd) != 0) die("mkdir");
    nn_device *dev = nn_cpu_device_create();
    llama_backend *be = NULL;
    char err[512];
    if (dev == NULL || llama_cpu_backend_create(dev, d, 7, &be, err, sizeof err) != 0) die(err);
    const int B = 2, T = 7, BT = B * T;
    llama_tm m;
    if (llama_tm_init(&m, be, B, T, 5) != 0) die("llama_tm_init");
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
    fclose(f);
    f = open_in(dir, "shape.txt", "w");
    fprintf(f, "%d %d\n", B, T);
    fclose(f);
    write_bin(dir, "params.bin", params, sizeof(float) * (size_t)m.n_params);
    write_bin(dir, "grads.bin", m.grads, sizeof(float) * (size_t)m.n_params);
    write_bin(dir, "tokens.bin", tokens, sizeof tokens);
    write_bin(dir, "targets.bin", targets, sizeof targets);
    write_bin(dir, "losses.bin", m.losses, sizeof(float) * BT);
    write_bin(dir, "logits.bin", logits, sizeof(float) * (size_t)BT * d->vocab);
    f = open_in(dir, "loss.txt", "w");
    fprintf(f, "%.17g\n", loss);
    fclose(f);
    printf("llama_dump_tiny: %s: mean loss %.9f, %lld parameters\n", name, loss,
           (long long)m.n_params);
    free(params);
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
    dump(argv[1], "untied", &d, 31);

    d = tiny_dims();
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
    dump(argv[1], "tied_biases_llama3", &d, 41);

    d = tiny_dims();
    d.qkv_bias = 1; /* Qwen2: q/k/v biases only */
    snprintf(d.model_type, sizeof d.model_type, "qwen2");
    d.rope_theta = 1e6;
    dump(argv[1], "qwen2_untied", &d, 51);

    d = tiny_dims();
    d.tied = 1;
    d.rope_theta = 500000.0;
    dump(argv[1], "tied", &d, 61);
    return 0;
}

/*
 * gpt2_dump_tiny DIR — runs the gradient check's tiny GPT-2 forward on the
 * CPU backend and writes what an independent implementation needs to
 * recompute it (tests/gpt2/gpt2_numpy_forward.py):
 *   DIR/dims.txt      n_layer n_head n_embd vocab block_size B T
 *   DIR/manifest.txt  one line per tensor: name ndim dim0 dim1 offset numel
 *                     (offset in floats into params.bin, nanoGPT's names)
 *   DIR/params.bin    every parameter, float32 little-endian, units in order
 *   DIR/tokens.bin, DIR/targets.bin   int32 [B*T]
 *   DIR/losses.bin    float32 [B*T], per-position loss (head_forward)
 *   DIR/loss.txt      the mean loss, %.17g
 *   DIR/logits.bin    float32 [vocab], logits of row B*T-1 (head_logits)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2_backend.h"
#include "gpt2_test_model.h"

static FILE *open_in(const char *dir, const char *name, const char *mode) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, mode);
    if (f == NULL) {
        fprintf(stderr, "gpt2_dump_tiny: cannot open %s for writing\n", path);
        exit(1);
    }
    return f;
}

static void write_bin(const char *dir, const char *name, const void *data, size_t bytes) {
    FILE *f = open_in(dir, name, "wb");
    if (fwrite(data, 1, bytes, f) != bytes || fclose(f) != 0) {
        fprintf(stderr, "gpt2_dump_tiny: writing %s/%s failed\n", dir, name);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: gpt2_dump_tiny DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    // The sizes of test_gpt2_model's gradient check; a non-power-of-two
    // vocab and T < block_size so that nothing lines up by accident.
    const gpt2_dims d = {.n_layer = 2, .n_head = 4, .n_embd = 32, .vocab = 61,
                         .block_size = 16};
    const int B = 2, T = 13, BT = B * T;
    gpt2_backend *be = gpt2_cpu_backend_create();
    if (be == NULL) {
        return 1;
    }
    gpt2_tm m;
    if (gpt2_tm_init(&m, be, &d, B, T, 10) != 0) {
        return 1;
    }
    float *params = malloc(sizeof(float) * (size_t)m.n_params);
    float *logits = malloc(sizeof(float) * (size_t)d.vocab);
    int *tokens = malloc(sizeof(int) * BT), *targets = malloc(sizeof(int) * BT);
    if (params == NULL || logits == NULL || tokens == NULL || targets == NULL) {
        return 1;
    }
    mt_init_params(&gpt2_param_table, &d, params, 77, 5.0, 0.2);
    mt_random_tokens(BT, d.vocab, tokens, 78);
    mt_random_tokens(BT, d.vocab, targets, 79);
    double loss = 0.0;
    if (gpt2_tm_set_params(&m, params) != 0 || gpt2_tm_set_data(&m, tokens, targets) != 0 ||
        gpt2_tm_loss(&m, &loss) != 0) {
        return 1;
    }
    const void *xL = gpt2_tm_resid(&m, d.n_layer);
    if (be->ops->head_logits(be, &d, B, T, &m.w0, xL, BT - 1, logits, m.hscratch) != 0) {
        fprintf(stderr, "gpt2_dump_tiny: head_logits: %s\n", be->ops->last_error(be));
        return 1;
    }

    FILE *f = open_in(dir, "dims.txt", "w");
    fprintf(f, "%d %d %d %d %d %d %d\n", d.n_layer, d.n_head, d.n_embd, d.vocab, d.block_size, B,
            T);
    fclose(f);
    f = open_in(dir, "manifest.txt", "w");
    for (int u = 0; u < gpt2_num_units(&d); u++) {
        for (int i = 0; i < gpt2_unit_num_params(&d, u); i++) {
            gpt2_param_spec s;
            gpt2_param_spec_get(&d, u, i, &s);
            fprintf(f, "%s %d %lld %lld %lld %lld\n", s.name, s.ndim, (long long)s.shape[0],
                    (long long)s.shape[1], (long long)(mt_unit_offset(&gpt2_param_table, &d, u) + s.offset),
                    (long long)s.numel);
        }
    }
    fclose(f);
    write_bin(dir, "params.bin", params, sizeof(float) * (size_t)m.n_params);
    write_bin(dir, "tokens.bin", tokens, sizeof(int) * BT);
    write_bin(dir, "targets.bin", targets, sizeof(int) * BT);
    write_bin(dir, "losses.bin", m.host_losses, sizeof(float) * BT);
    write_bin(dir, "logits.bin", logits, sizeof(float) * (size_t)d.vocab);
    f = open_in(dir, "loss.txt", "w");
    fprintf(f, "%.17g\n", loss);
    fclose(f);
    printf("gpt2_dump_tiny: mean loss %.9f written to %s\n", loss, dir);

    free(params);
    free(logits);
    free(tokens);
    free(targets);
    gpt2_tm_free(&m);
    be->ops->destroy(be);
    return 0;
}

/*
 * test_llama_golden GOLDEN_DIR — the CPU backend against Hugging Face's own
 * LlamaForCausalLM: for each model of the fixture (tests/llama/golden/<model>,
 * made once by tests/llama/make_golden.py with PyTorch and transformers),
 * its config.json (as save_pretrained wrote it) is parsed with
 * llama_config_read, its weights are placed by Hugging Face name into this
 * model's parameter table, and one training step on its tokens and targets
 * must give its mean loss, per-position losses, logits and the gradient of
 * every parameter within 1e-5 relative (per tensor: max |ours - theirs| /
 * max |theirs|), in fp32 on both sides.
 *
 * Exits 77 (skipped) when GOLDEN_DIR holds no fixture.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "model_check.h"
#include "llama_backend.h"
#include "llama_test_model.h"

#define RTOL 1e-5

/* n elements of 4 bytes (float32 or int32, little-endian as this host). */
static void *read_file(const char *dir, const char *name, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    void *p = malloc(4 * (n ? n : 1));
    REQUIRE(f != NULL && p != NULL);
    const size_t got = fread(p, 4, n, f);
    const int extra = fgetc(f) != EOF;
    fclose(f);
    CHECK_MSG(got == n && !extra, "%s: %zu elements, expected %zu", path, got, n);
    REQUIRE(got == n && !extra);
    return p;
}

/* max |a - b| / max |b| over n elements. */
static double rel_err(const float *a, const float *b, size_t n) {
    double err = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        err = fmax(err, fabs((double)a[i] - (double)b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return err / (scale > 0.0 ? scale : 1.0);
}

static void check_model(const char *root, const char *name) {
    char dir[4096], path[4200], err[1024] = "";
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    snprintf(path, sizeof path, "%s/config.json", dir);
    llama_dims d;
    CHECK_MSG(llama_config_read(path, &d, err, sizeof err) == 0, "%s", err);
    if (err[0]) return;
    snprintf(path, sizeof path, "%s/index.json", dir);
    json_object *index = json_object_from_file(path), *v = NULL;
    REQUIRE(index != NULL);
    REQUIRE(json_object_object_get_ex(index, "B", &v));
    const int B = json_object_get_int(v);
    REQUIRE(json_object_object_get_ex(index, "T", &v));
    const int T = json_object_get_int(v), BT = B * T;
    REQUIRE(json_object_object_get_ex(index, "mean_loss", &v));
    const double hf_loss = json_object_get_double(v);
    json_object *tensors = NULL;
    REQUIRE(json_object_object_get_ex(index, "tensors", &tensors));
    const size_t count = json_object_array_length(tensors);
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        json_object *t = json_object_array_get_idx(tensors, i);
        REQUIRE(json_object_object_get_ex(t, "numel", &v));
        total += (size_t)json_object_get_int64(v);
    }
    float *hf_w = read_file(dir, "weights.bin", total), *hf_g = read_file(dir, "grads.bin", total);
    float *hf_logits = read_file(dir, "logits.bin", (size_t)BT * d.vocab);
    float *hf_losses = read_file(dir, "losses.bin", (size_t)BT);
    int *tokens = read_file(dir, "tokens.bin", (size_t)BT);
    int *targets = read_file(dir, "targets.bin", (size_t)BT);

    nn_device *dev = nn_cpu_device_create();
    llama_backend *be = NULL;
    REQUIRE(dev != NULL && llama_cpu_backend_create(dev, &d, T, &be, err, sizeof err) == 0);
    llama_tm m;
    REQUIRE(llama_tm_init(&m, be, B, T, 5) == 0);
    CHECK_MSG((size_t)m.n_params == total, "%s: our table has %lld parameters, the fixture %zu",
              name, (long long)m.n_params, total);
    REQUIRE((size_t)m.n_params == total);

    // Every tensor of our table, found by name with the same shape.
    float *params = malloc(sizeof(float) * total);
    size_t *where = malloc(sizeof(size_t) * count); /* fixture tensor i -> our offset */
    REQUIRE(params && where);
    int found = 0;
    for (int u = 0; u < llama_num_units(&d); u++) {
        for (int i = 0; i < llama_unit_num_params(&d, u); i++) {
            llama_param_spec s;
            llama_param_spec_get(&d, u, i, &s);
            const int64_t ours = mt_param_offset(&llama_param_table, &d, u, i);
            int hit = 0;
            for (size_t k = 0; k < count; k++) {
                json_object *t = json_object_array_get_idx(tensors, k), *shape = NULL;
                json_object_object_get_ex(t, "name", &v);
                if (strcmp(json_object_get_string(v), s.name) != 0) continue;
                hit = 1;
                json_object_object_get_ex(t, "shape", &shape);
                const size_t nd = json_object_array_length(shape);
                const int64_t d0 = json_object_get_int64(json_object_array_get_idx(shape, 0));
                const int64_t d1 =
                    nd > 1 ? json_object_get_int64(json_object_array_get_idx(shape, 1)) : 1;
                CHECK_MSG((int)nd == s.ndim && d0 == s.shape[0] && d1 == s.shape[1],
                          "%s: %s shape [%lld, %lld] in the fixture, [%lld, %lld] here", name,
                          s.name, (long long)d0, (long long)d1, (long long)s.shape[0],
                          (long long)s.shape[1]);
                json_object_object_get_ex(t, "offset", &v);
                const size_t off = (size_t)json_object_get_int64(v);
                memcpy(params + ours, hf_w + off, sizeof(float) * (size_t)s.numel);
                where[k] = (size_t)ours;
                found++;
            }
            CHECK_MSG(hit, "%s: %s is not in the fixture", name, s.name);
        }
    }
    CHECK_MSG(found == (int)count, "%s: %d of the fixture's %zu tensors matched", name, found,
              count);
    REQUIRE(found == (int)count);

    double loss = 0.0;
    REQUIRE(llama_tm_set_params(&m, params) == 0 && llama_tm_set_data(&m, tokens, targets) == 0);
    REQUIRE(llama_tm_step(&m, 1.0f / BT, 1, &loss) == 0);
    float *logits = malloc(sizeof(float) * (size_t)BT * d.vocab);
    REQUIRE(logits != NULL);
    for (int r = 0; r < BT; r++) REQUIRE(llama_tm_logits(&m, r, logits + (size_t)r * d.vocab) == 0);

    const double e_loss = fabs(loss - hf_loss) / fabs(hf_loss);
    CHECK_MSG(e_loss <= RTOL, "%s: mean loss %.9g, transformers %.9g", name, loss, hf_loss);
    const double e_losses = rel_err(m.losses, hf_losses, (size_t)BT);
    CHECK_MSG(e_losses <= RTOL, "%s: per-position losses off by %.3g", name, e_losses);
    const double e_logits = rel_err(logits, hf_logits, (size_t)BT * d.vocab);
    CHECK_MSG(e_logits <= RTOL, "%s: logits off by %.3g", name, e_logits);
    double worst = 0.0;
    const char *worst_name = "";
    for (size_t k = 0; k < count; k++) {
        json_object *t = json_object_array_get_idx(tensors, k);
        json_object_object_get_ex(t, "numel", &v);
        const size_t n = (size_t)json_object_get_int64(v);
        json_object_object_get_ex(t, "offset", &v);
        const size_t off = (size_t)json_object_get_int64(v);
        json_object_object_get_ex(t, "name", &v);
        const double e = rel_err(m.grads + where[k], hf_g + off, n);
        CHECK_MSG(e <= RTOL, "%s: gradient of %s off by %.3g", name, json_object_get_string(v), e);
        if (e >= worst) {
            worst = e;
            worst_name = json_object_get_string(v);
        }
    }
    printf("%s: loss %.9f (transformers %.9f), logits %.2e, %zu gradients, worst %.2e (%s)\n",
           name, loss, hf_loss, e_logits, count, worst, worst_name);
    free(logits);
    free(params);
    free(where);
    free(hf_w);
    free(hf_g);
    free(hf_logits);
    free(hf_losses);
    free(tokens);
    free(targets);
    llama_tm_free(&m);
    be->ops->destroy(be);
    dev->ops->destroy(dev);
    json_object_put(index);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_llama_golden GOLDEN_DIR\n");
        return 2;
    }
    const char *models[] = {"untied", "tied_biases"};
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/untied/index.json", argv[1]);
    FILE *f = fopen(probe, "r");
    if (f == NULL) {
        printf("SKIP: %s is absent: run tests/llama/make_golden.py where torch and transformers "
               "are installed\n", probe);
        return 77;
    }
    fclose(f);
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) check_model(argv[1], models[i]);
    return model_check_finish("test_llama_golden");
}

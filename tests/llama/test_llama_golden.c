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
 * test_llama_golden --lora LORA_DIR GOLDEN_DIR — LoRA against PEFT (issue
 * 42): the fixture tests/llama/golden_lora (made once by
 * tests/llama/make_lora_golden.py with PEFT over the golden "untied" model)
 * holds PEFT's adapter_model.safetensors and adapter_config.json as
 * save_pretrained wrote them; the adapters are read from them by PEFT's
 * names (the project's safetensors reader; r and lora_alpha from the
 * config), put on the base with the base frozen, and one step must give
 * PEFT's mean loss, losses, logits and the gradient of every lora_A and
 * lora_B within the same 1e-5, and no gradient at all for the base.
 *
 * Exits 77 (skipped) when the directory holds no fixture.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "checkpoint/safetensors.h"
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

/* One model of the fixture on the CPU backend, its weights in place and its
 * batch uploaded. */
typedef struct golden {
    llama_dims d;
    int B, T, BT;
    double hf_loss;
    json_object *index, *tensors; /* tensors: borrowed from index */
    size_t count, total;          /* the fixture's tensors and their elements */
    float *hf_w, *hf_g, *hf_logits, *hf_losses;
    int *tokens, *targets;
    size_t *where; /* fixture tensor i -> our offset */
    nn_device *dev;
    llama_backend *be;
    llama_tm m;
} golden;

/* The integer or number `key` of a JSON object (the test stops without it). */
static json_object *member(json_object *o, const char *key) {
    json_object *v = NULL;
    CHECK_MSG(json_object_object_get_ex(o, key, &v), "no \"%s\" in the JSON", key);
    REQUIRE(v != NULL);
    return v;
}

/* Loads GOLDEN_DIR/name; with lora_r > 0 the backend gets LoRA's rank and
 * alpha before the model's buffers are sized. */
static void golden_open(golden *g, const char *root, const char *name, int lora_r,
                        double lora_alpha) {
    char dir[4096], path[4200], err[1024] = "";
    memset(g, 0, sizeof *g);
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK_MSG(llama_config_read(path, &g->d, err, sizeof err) == 0, "%s", err);
    REQUIRE(err[0] == '\0');
    snprintf(path, sizeof path, "%s/index.json", dir);
    g->index = json_object_from_file(path);
    REQUIRE(g->index != NULL);
    g->B = json_object_get_int(member(g->index, "B"));
    g->T = json_object_get_int(member(g->index, "T"));
    g->BT = g->B * g->T;
    g->hf_loss = json_object_get_double(member(g->index, "mean_loss"));
    g->tensors = member(g->index, "tensors");
    g->count = json_object_array_length(g->tensors);
    for (size_t i = 0; i < g->count; i++)
        g->total += (size_t)json_object_get_int64(
            member(json_object_array_get_idx(g->tensors, i), "numel"));
    const llama_dims *d = &g->d;
    g->hf_w = read_file(dir, "weights.bin", g->total);
    g->hf_g = read_file(dir, "grads.bin", g->total);
    g->hf_logits = read_file(dir, "logits.bin", (size_t)g->BT * d->vocab);
    g->hf_losses = read_file(dir, "losses.bin", (size_t)g->BT);
    g->tokens = read_file(dir, "tokens.bin", (size_t)g->BT);
    g->targets = read_file(dir, "targets.bin", (size_t)g->BT);

    g->dev = nn_cpu_device_create();
    REQUIRE(g->dev != NULL &&
            llama_cpu_backend_create(g->dev, d, g->T, &g->be, err, sizeof err) == 0);
    if (lora_r > 0) {
        CHECK_MSG(llama_backend_set_lora(g->be, lora_r, lora_alpha, 0.0, err, sizeof err) == 0, "%s",
                  err);
        REQUIRE(g->be->lora.r == lora_r);
    }
    llama_tm *m = &g->m;
    REQUIRE(llama_tm_init(m, g->be, g->B, g->T, 5) == 0);
    CHECK_MSG((size_t)m->n_params == g->total,
              "%s: our table has %lld parameters, the fixture %zu", name,
              (long long)m->n_params, g->total);
    REQUIRE((size_t)m->n_params == g->total);

    // Every tensor of our table, found by name with the same shape.
    float *params = malloc(sizeof(float) * g->total);
    g->where = malloc(sizeof(size_t) * g->count);
    REQUIRE(params && g->where);
    int found = 0;
    for (int u = 0; u < llama_num_units(d); u++) {
        for (int i = 0; i < llama_unit_num_params(d, u); i++) {
            llama_param_spec s;
            llama_param_spec_get(d, u, i, &s);
            const int64_t ours = mt_param_offset(&llama_param_table, d, u, i);
            int hit = 0;
            for (size_t k = 0; k < g->count; k++) {
                json_object *t = json_object_array_get_idx(g->tensors, k);
                if (strcmp(json_object_get_string(member(t, "name")), s.name) != 0) continue;
                hit = 1;
                json_object *shape = member(t, "shape");
                const size_t nd = json_object_array_length(shape);
                const int64_t d0 = json_object_get_int64(json_object_array_get_idx(shape, 0));
                const int64_t d1 =
                    nd > 1 ? json_object_get_int64(json_object_array_get_idx(shape, 1)) : 1;
                CHECK_MSG((int)nd == s.ndim && d0 == s.shape[0] && d1 == s.shape[1],
                          "%s: %s shape [%lld, %lld] in the fixture, [%lld, %lld] here", name,
                          s.name, (long long)d0, (long long)d1, (long long)s.shape[0],
                          (long long)s.shape[1]);
                const size_t off = (size_t)json_object_get_int64(member(t, "offset"));
                memcpy(params + ours, g->hf_w + off, sizeof(float) * (size_t)s.numel);
                g->where[k] = (size_t)ours;
                found++;
            }
            CHECK_MSG(hit, "%s: %s is not in the fixture", name, s.name);
        }
    }
    CHECK_MSG(found == (int)g->count, "%s: %d of the fixture's %zu tensors matched", name, found,
              g->count);
    REQUIRE(found == (int)g->count);
    REQUIRE(llama_tm_set_params(m, params) == 0 &&
            llama_tm_set_data(m, g->tokens, g->targets) == 0);
    free(params);
}

static void golden_close(golden *g) {
    free(g->where);
    free(g->hf_w);
    free(g->hf_g);
    free(g->hf_logits);
    free(g->hf_losses);
    free(g->tokens);
    free(g->targets);
    llama_tm_free(&g->m);
    g->be->ops->destroy(g->be);
    g->dev->ops->destroy(g->dev);
    json_object_put(g->index);
}

/* One step of the mean loss, and its loss, per-position losses and logits
 * against theirs; returns the logits' error. */
static double step_and_check(golden *g, const char *name, double hf_loss, const float *hf_losses,
                             const float *hf_logits) {
    llama_tm *m = &g->m;
    const int BT = g->BT, V = g->d.vocab;
    double loss = 0.0;
    REQUIRE(llama_tm_step(m, 1.0f / BT, 1, &loss) == 0);
    float *logits = malloc(sizeof(float) * (size_t)BT * V);
    REQUIRE(logits != NULL);
    for (int r = 0; r < BT; r++) REQUIRE(llama_tm_logits(m, r, logits + (size_t)r * V) == 0);
    const double e_loss = fabs(loss - hf_loss) / fabs(hf_loss);
    CHECK_MSG(e_loss <= RTOL, "%s: mean loss %.9g, theirs %.9g", name, loss, hf_loss);
    const double e_losses = rel_err(m->losses, hf_losses, (size_t)BT);
    CHECK_MSG(e_losses <= RTOL, "%s: per-position losses off by %.3g", name, e_losses);
    const double e_logits = rel_err(logits, hf_logits, (size_t)BT * V);
    CHECK_MSG(e_logits <= RTOL, "%s: logits off by %.3g", name, e_logits);
    printf("%s: loss %.9f (theirs %.9f), losses %.2e, logits %.2e\n", name, loss, hf_loss,
           e_losses, e_logits);
    free(logits);
    return e_logits;
}

/* Each of the fixture's gradients (tensors[k] at hf_g + its offset) against
 * ours at ours[k]; prints the worst. */
static void check_grads(const char *name, json_object *tensors, const float *hf_g,
                        const float *const *ours) {
    double worst = 0.0;
    const char *worst_name = "";
    const size_t count = json_object_array_length(tensors);
    for (size_t k = 0; k < count; k++) {
        json_object *t = json_object_array_get_idx(tensors, k);
        const size_t n = (size_t)json_object_get_int64(member(t, "numel"));
        const size_t off = (size_t)json_object_get_int64(member(t, "offset"));
        const char *tname = json_object_get_string(member(t, "name"));
        const double e = rel_err(ours[k], hf_g + off, n);
        CHECK_MSG(e <= RTOL, "%s: gradient of %s off by %.3g", name, tname, e);
        if (e >= worst) {
            worst = e;
            worst_name = tname;
        }
    }
    printf("%s: %zu gradients, worst %.2e (%s)\n", name, count, worst, worst_name);
}

static void check_model(const char *root, const char *name) {
    golden g;
    golden_open(&g, root, name, 0, 0.0);
    step_and_check(&g, name, g.hf_loss, g.hf_losses, g.hf_logits);
    const float **ours = malloc(sizeof(float *) * g.count);
    REQUIRE(ours != NULL);
    for (size_t k = 0; k < g.count; k++) ours[k] = g.m.grads + g.where[k];
    check_grads(name, g.tensors, g.hf_g, ours);
    free(ours);
    golden_close(&g);
}

/* PEFT's name of target t's A or B in block l, as adapter_model.safetensors
 * holds it. */
static void peft_name(char *out, size_t cap, int l, int t, char which) {
    snprintf(out, cap, "base_model.model.model.layers.%d.%s.lora_%c.weight", l,
             llama_lora_target_name(t), which);
}

/* The offset in m's adapter arrays of the tensor PEFT names `name`, and its
 * shape (A [r][in], B [out][r]); -1 when no adapter here has that name. */
static int64_t adapter_offset(const llama_tm *m, const char *name, int64_t shape[2]) {
    const int r = m->be->lora.r;
    char ours[512];
    shape[0] = shape[1] = 0;
    for (int l = 0; l < m->d.n_layer; l++) {
        for (int t = 0; t < LLAMA_LORA_TARGETS; t++) {
            const int64_t at = m->lora_at[l * LLAMA_LORA_TARGETS + t];
            if (at < 0) continue;
            int in, out;
            llama_lora_target_shape(&m->d, t, &in, &out);
            for (int ab = 0; ab < 2; ab++) {
                peft_name(ours, sizeof ours, l, t, ab ? 'B' : 'A');
                if (strcmp(ours, name) != 0) continue;
                shape[0] = ab ? out : r;
                shape[1] = ab ? r : in;
                return at + (ab ? (int64_t)r * in : 0);
            }
        }
    }
    return -1;
}

/* LORA_DIR (made by make_lora_golden.py with PEFT): the base GOLDEN_DIR/<its
 * base>, the adapters read from PEFT's adapter_model.safetensors (with the
 * project's reader) and r and lora_alpha from its adapter_config.json, the
 * base frozen; the loss, losses and logits of one step and the gradient of
 * every lora_A and lora_B against PEFT's, within RTOL. */
static void check_lora(const char *lora_dir, const char *golden_root) {
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", lora_dir);
    json_object *acfg = json_object_from_file(path);
    REQUIRE(acfg != NULL);
    const int r = json_object_get_int(member(acfg, "r"));
    const double alpha = json_object_get_double(member(acfg, "lora_alpha"));
    snprintf(path, sizeof path, "%s/index.json", lora_dir);
    json_object *index = json_object_from_file(path);
    REQUIRE(index != NULL);
    const char *base = strrchr(json_object_get_string(member(index, "base")), '/');
    REQUIRE(base != NULL);
    golden g;
    golden_open(&g, golden_root, base + 1, r, alpha);
    const llama_dims *d = &g.d;
    const int L = d->n_layer;
    CHECK_MSG(json_object_get_int(member(index, "B")) == g.B &&
                  json_object_get_int(member(index, "T")) == g.T,
              "LoRA fixture's B, T differ from its base's %d, %d", g.B, g.T);

    snprintf(path, sizeof path, "%s/adapter_model.safetensors", lora_dir);
    zs__st_file *st = NULL;
    CHECK_MSG(zs__st_open(path, &st) == ZS_OK, "%s", zs_last_error());
    REQUIRE(st != NULL);
    // Which Linears PEFT adapted: those whose A the file holds.
    unsigned *targets = calloc((size_t)L, sizeof(unsigned));
    REQUIRE(targets != NULL);
    char name[512];
    int adapted = 0;
    for (int l = 0; l < L; l++) {
        for (int t = 0; t < LLAMA_LORA_TARGETS; t++) {
            peft_name(name, sizeof name, l, t, 'A');
            if (zs__st_find(st, name) == NULL) continue;
            targets[l] |= 1u << t;
            adapted++;
        }
    }
    CHECK_MSG(2 * adapted == zs__st_count(st),
              "%s: %d tensors, %d adapted Linears found by this family's names", path,
              zs__st_count(st), adapted);
    REQUIRE(llama_tm_set_lora(&g.m, targets) == 0);
    llama_tm *m = &g.m;
    float *lora = malloc(sizeof(float) * (size_t)m->n_lora);
    REQUIRE(lora != NULL);
    // Every tensor of the file into its place.
    for (int i = 0; i < zs__st_count(st); i++) {
        const zs__st_entry *e = zs__st_entry_at(st, i);
        int64_t shape[2];
        const int64_t at = adapter_offset(m, e->name, shape);
        CHECK_MSG(at >= 0 && e->dtype == ZS_ST_F32 && e->ndim == 2 && e->shape[0] == shape[0] &&
                      e->shape[1] == shape[1],
                  "%s: %s is no adapter here, or not F32 [%lld, %lld]", path, e->name,
                  (long long)shape[0], (long long)shape[1]);
        REQUIRE(at >= 0 && e->end - e->begin == sizeof(float) * (uint64_t)(shape[0] * shape[1]));
        CHECK_MSG(zs__st_read(st, e, 0, lora + at, e->end - e->begin) == ZS_OK, "%s",
                  zs_last_error());
    }
    REQUIRE(llama_tm_set_lora_params(m, lora) == 0);

    const int BT = g.BT;
    float *hf_logits = read_file(lora_dir, "logits.bin", (size_t)BT * d->vocab);
    float *hf_losses = read_file(lora_dir, "losses.bin", (size_t)BT);
    json_object *tensors = member(index, "tensors");
    const size_t count = json_object_array_length(tensors);
    size_t total = 0;
    for (size_t k = 0; k < count; k++)
        total += (size_t)json_object_get_int64(
            member(json_object_array_get_idx(tensors, k), "numel"));
    CHECK_MSG(total == (size_t)m->n_lora, "LoRA fixture: %zu adapter elements, ours %lld", total,
              (long long)m->n_lora);
    float *hf_g = read_file(lora_dir, "grads.bin", total);
    // The base's gradient buffer is NaN before the step: a frozen base must
    // leave it so.
    for (int64_t i = 0; i < m->n_params; i++) m->grads[i] = NAN;
    step_and_check(&g, "lora", json_object_get_double(member(index, "mean_loss")), hf_losses,
                   hf_logits);
    int64_t written = 0;
    for (int64_t i = 0; i < m->n_params; i++) written += !isnan(m->grads[i]);
    CHECK_MSG(written == 0, "lora: the frozen base got %lld gradient elements",
              (long long)written);
    // Each of PEFT's gradients, found in ours by name.
    const float **ours = malloc(sizeof(float *) * count);
    REQUIRE(ours != NULL);
    for (size_t k = 0; k < count; k++) {
        const char *tname =
            json_object_get_string(member(json_object_array_get_idx(tensors, k), "name"));
        int64_t shape[2];
        const int64_t at = adapter_offset(m, tname, shape);
        ours[k] = at >= 0 ? m->lora_grads + at : NULL;
        CHECK_MSG(ours[k] != NULL, "lora: PEFT's gradient of %s has no adapter here", tname);
        REQUIRE(ours[k] != NULL);
    }
    check_grads("lora", tensors, hf_g, ours);
    printf("lora: r %d, lora_alpha %g, %d adapted Linears, the base frozen\n", r, alpha, adapted);
    free(ours);
    free(hf_g);
    free(hf_logits);
    free(hf_losses);
    free(lora);
    free(targets);
    zs__st_close(st);
    golden_close(&g);
    json_object_put(index);
    json_object_put(acfg);
}

/* 1 when dir/file exists; otherwise says which script makes it, with what. */
static int fixture_present(const char *dir, const char *file, const char *how) {
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/%s", dir, file);
    FILE *f = fopen(probe, "r");
    if (f == NULL) {
        printf("SKIP: %s is absent: run %s\n", probe, how);
        return 0;
    }
    fclose(f);
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2 && !(argc == 4 && strcmp(argv[1], "--lora") == 0)) {
        fprintf(stderr, "usage: test_llama_golden GOLDEN_DIR\n"
                        "       test_llama_golden --lora LORA_DIR GOLDEN_DIR\n");
        return 2;
    }
    if (argc == 4) {
        if (!fixture_present(argv[2], "adapter_model.safetensors",
                             "tests/llama/make_lora_golden.py where torch, transformers and "
                             "peft are installed"))
            return 77;
        check_lora(argv[2], argv[3]);
        return model_check_finish("test_llama_golden --lora");
    }
    if (!fixture_present(argv[1], "untied/index.json",
                         "tests/llama/make_golden.py where torch and transformers are installed"))
        return 77;
    const char *models[] = {"untied", "tied_biases"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) check_model(argv[1], models[i]);
    return model_check_finish("test_llama_golden");
}

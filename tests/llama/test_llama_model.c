/*
 * The Llama family's tables, without a backend:
 *   - the parameter table: names, shapes, init and no-decay, unit layout,
 *     tied and untied, with and without biases; the carving of unit
 *     buffers; the presets' parameter counts against the published ones,
 *     recomputed here from the shapes;
 *   - config.json: real configs of each family parse to the right dims;
 *     configs that change the architecture in ways not implemented, and
 *     malformed ones, are refused with a message naming the key;
 *     llama_config_write reads back to the same dims;
 *   - the RoPE table against the formula in double precision (default and
 *     llama3 scaling, positions up to the end of a long sequence).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model_check.h"
#include "llama_model.h"

/* ------------------------------------------------------------ the table */

/* The test's own count from the shapes, independent of the table code. */
static long long count_params(const llama_dims *d) {
    const long long C = d->n_embd, F = d->n_ff, V = d->vocab, L = d->n_layer;
    const long long Q = (long long)d->n_head * d->head_dim, KV = (long long)d->n_kv_head * d->head_dim;
    long long block = C * Q + 2 * C * KV + Q * C + 3 * C * F + 2 * C;
    if (d->qkv_bias) block += Q + 2 * KV;
    if (d->o_bias) block += C;
    if (d->mlp_bias) block += 2 * F + C;
    return V * C + (d->tied ? 0 : V * C) + C + L * block;
}

static void test_presets(void) {
    const struct {
        const char *name;
        long long params; /* published: the models' safetensors headers */
        int tied;
    } want[] = {{"llama-3.2-1b", 1235814400LL, 1},
                {"llama-3.1-8b", 8030261248LL, 0},
                {"llama-3.1-70b", 70553706496LL, 0}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        llama_dims d;
        REQUIRE(llama_dims_preset(want[i].name, &d) == 0);
        CHECK_MSG(llama_dims_check(&d, NULL, 0) == 0, "%s: dims check", want[i].name);
        CHECK_MSG(count_params(&d) == want[i].params, "%s: the shapes give %lld, published %lld",
                  want[i].name, count_params(&d), want[i].params);
        CHECK_MSG(llama_num_params(&d) == want[i].params, "%s: table %lld, published %lld",
                  want[i].name, (long long)llama_num_params(&d), want[i].params);
        CHECK_MSG(d.tied == want[i].tied && d.rope_kind == LLAMA_ROPE_LLAMA3,
                  "%s: tied %d rope %d", want[i].name, d.tied, (int)d.rope_kind);
    }
    llama_dims d;
    REQUIRE(llama_dims_preset("tiny", &d) == 0);
    CHECK(llama_dims_check(&d, NULL, 0) == 0 && llama_num_params(&d) == count_params(&d));
    CHECK(llama_dims_preset("llama-4", &d) == -1);
    // FLOPs: 6 N (embedding lookup free when untied) + 12 L NH hd T.
    REQUIRE(llama_dims_preset("llama-3.1-8b", &d) == 0);
    const double N = 8030261248.0 - 128256.0 * 4096.0;
    CHECK_MSG(llama_flops_per_token(&d, 2048) == 6.0 * N + 12.0 * 32 * 32 * 128 * 2048,
              "8B flops/token %.0f", llama_flops_per_token(&d, 2048));
}

/* A small shape with everything optional turned on or off. */
static llama_dims small_dims(int tied, int qkv_bias, int o_bias, int mlp_bias) {
    llama_dims d = {.n_layer = 2, .n_head = 4, .n_kv_head = 2, .head_dim = 10, .n_embd = 40,
                    .n_ff = 72, .vocab = 53, .max_seq = 64, .rms_eps = 1e-5,
                    .rope_theta = 10000.0, .init_std = 0.02, .model_type = "llama"};
    d.tied = tied;
    d.qkv_bias = qkv_bias;
    d.o_bias = o_bias;
    d.mlp_bias = mlp_bias;
    return d;
}

static void test_table(void) {
    for (int variant = 0; variant < 4; variant++) {
        const int tied = variant & 1, bias = variant >> 1;
        const llama_dims d = small_dims(tied, bias, bias, bias);
        CHECK(llama_dims_check(&d, NULL, 0) == 0);
        CHECK_MSG(llama_num_units(&d) == (tied ? 3 : 4), "units %d", llama_num_units(&d));
        CHECK(llama_head_unit(&d) == (tied ? -1 : 3));
        CHECK(llama_unit_block(&d, 0) == -1 && llama_unit_block(&d, 2) == 1 &&
              llama_unit_block(&d, 3) == -1);
        char buf[LLAMA_NAME_MAX];
        CHECK(llama_unit_name(&d, 0, buf, sizeof buf) == 0 &&
              strcmp(buf, "model.embed_tokens") == 0);
        CHECK(llama_unit_name(&d, 2, buf, sizeof buf) == 0 && strcmp(buf, "model.layers.1") == 0);
        if (!tied)
            CHECK(llama_unit_name(&d, 3, buf, sizeof buf) == 0 && strcmp(buf, "lm_head") == 0);
        CHECK(llama_unit_name(&d, llama_num_units(&d), buf, sizeof buf) == -1);

        // Unit 0 and the head.
        llama_param_spec s;
        REQUIRE(llama_param_spec_get(&d, 0, 0, &s) == 0);
        CHECK(strcmp(s.name, "model.embed_tokens.weight") == 0 && s.shape[0] == 53 &&
              s.shape[1] == 40 && s.init == LLAMA_INIT_NORMAL && s.init_std == 0.02 &&
              !s.no_decay);
        CHECK(llama_unit_num_params(&d, 0) == (tied ? 2 : 1));
        const int head = tied ? 0 : 3, norm_index = tied ? 1 : 0;
        REQUIRE(llama_param_spec_get(&d, head, norm_index, &s) == 0);
        CHECK_MSG(strcmp(s.name, "model.norm.weight") == 0 && s.ndim == 1 && s.numel == 40 &&
                      s.init == LLAMA_INIT_ONES && s.no_decay,
                  "head norm: %s", s.name);
        if (!tied) {
            REQUIRE(llama_param_spec_get(&d, 3, 1, &s) == 0);
            CHECK(strcmp(s.name, "lm_head.weight") == 0 && s.shape[0] == 53 && s.shape[1] == 40);
        }

        // A block: Hugging Face's names and shapes in registration order.
        const struct {
            const char *suffix;
            int64_t rows, cols;
            int is_bias; /* 1 qkv, 2 o, 3 mlp */
        } block[] = {{"input_layernorm.weight", 40, 1, 0},
                     {"self_attn.q_proj.weight", 40, 40, 0},
                     {"self_attn.q_proj.bias", 40, 1, 1},
                     {"self_attn.k_proj.weight", 20, 40, 0},
                     {"self_attn.k_proj.bias", 20, 1, 1},
                     {"self_attn.v_proj.weight", 20, 40, 0},
                     {"self_attn.v_proj.bias", 20, 1, 1},
                     {"self_attn.o_proj.weight", 40, 40, 0},
                     {"self_attn.o_proj.bias", 40, 1, 2},
                     {"post_attention_layernorm.weight", 40, 1, 0},
                     {"mlp.gate_proj.weight", 72, 40, 0},
                     {"mlp.gate_proj.bias", 72, 1, 3},
                     {"mlp.up_proj.weight", 72, 40, 0},
                     {"mlp.up_proj.bias", 72, 1, 3},
                     {"mlp.down_proj.weight", 40, 72, 0},
                     {"mlp.down_proj.bias", 40, 1, 3}};
        int index = 0;
        int64_t numel = 0;
        for (int slot = 0; slot < LLAMA_BLOCK_SLOTS; slot++) {
            if (block[slot].is_bias && !bias) {
                CHECK_MSG(llama_block_index(&d, (llama_block_param)slot) == -1,
                          "absent slot %d has an index", slot);
                continue;
            }
            REQUIRE(llama_param_spec_get(&d, 2, index, &s) == 0);
            char want[LLAMA_NAME_MAX];
            snprintf(want, sizeof want, "model.layers.1.%s", block[slot].suffix);
            CHECK_MSG(strcmp(s.name, want) == 0, "tensor %d: %s, expected %s", index, s.name, want);
            CHECK_MSG(s.shape[0] == block[slot].rows && s.shape[1] == block[slot].cols &&
                          s.ndim == (block[slot].cols == 1 ? 1 : 2),
                      "%s: [%lld, %lld]", s.name, (long long)s.shape[0], (long long)s.shape[1]);
            const llama_init init = s.ndim == 2 ? LLAMA_INIT_NORMAL
                                    : block[slot].is_bias ? LLAMA_INIT_ZEROS
                                                          : LLAMA_INIT_ONES;
            CHECK_MSG(s.init == init && s.no_decay == (s.ndim == 1), "%s: init %d no_decay %d",
                      s.name, (int)s.init, s.no_decay);
            CHECK(llama_block_slot(&d, index) == slot &&
                  llama_block_index(&d, (llama_block_param)slot) == index);
            numel += s.numel;
            index++;
        }
        CHECK_MSG(llama_unit_num_params(&d, 1) == index, "%d tensors, table says %d", index,
                  llama_unit_num_params(&d, 1));
        CHECK(llama_param_spec_get(&d, 1, index, &s) == -1 && llama_block_slot(&d, index) == -1);
        CHECK(llama_unit_numel(&d, 1) == numel);
        CHECK_MSG(llama_num_params(&d) == count_params(&d), "params %lld vs %lld",
                  (long long)llama_num_params(&d), count_params(&d));

        // Carving a block buffer follows the table; absent biases NULL.
        llama_block_w bw;
        unsigned char *base = (unsigned char *)(uintptr_t)4096;
        llama_block_w_carve(&d, NN_BF16, base, &bw);
        CHECK((unsigned char *)bw.attn_norm == base);
        CHECK((unsigned char *)bw.wq == base + 40 * 2);
        CHECK(bias ? (unsigned char *)bw.bq == base + (40 + 1600) * 2 : bw.bq == NULL);
        CHECK((unsigned char *)bw.bdown == (bias ? base + (llama_unit_numel(&d, 1) - 40) * 2 : NULL));
        CHECK((unsigned char *)bw.wdown ==
              base + (llama_unit_numel(&d, 1) - 2880 - (bias ? 40 : 0)) * 2);
        llama_head_w hw;
        llama_head_w_carve(&d, NN_F32, base, &hw);
        CHECK(tied ? ((unsigned char *)hw.wout == base && (unsigned char *)hw.norm == base + 53 * 40 * 4)
                   : ((unsigned char *)hw.norm == base && (unsigned char *)hw.wout == base + 40 * 4));
    }
    // Activations: every tensor aligned and within the bytes.
    const llama_dims d = small_dims(0, 1, 1, 1);
    llama_block_acts a;
    unsigned char *abase = (unsigned char *)(uintptr_t)65536;
    const int64_t bytes = llama_block_acts_bytes(&d, 3, 7, NN_BF16);
    llama_block_acts_carve(&d, 3, 7, NN_BF16, abase, &a);
    const void *parts[] = {a.xn1, a.rstd1, a.qkv, a.att, a.atty, a.res1,
                           a.xn2, a.rstd2, a.gate, a.up, a.h};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        const ptrdiff_t at = (const unsigned char *)parts[i] - abase;
        CHECK_MSG(at % NN_ALIGN == 0 && at >= 0 && at < bytes, "activation %zu at %td of %lld",
                  i, at, (long long)bytes);
    }
    CHECK(llama_qkv_width(&d) == 80);
    CHECK(llama_block_acts_bytes(&d, 0, 7, NN_F32) == -1);

    // Bad dims name the problem.
    char err[512];
    llama_dims bad = d;
    bad.n_kv_head = 3;
    CHECK_MSG(llama_dims_check(&bad, err, sizeof err) == -1 && strstr(err, "num_key_value_heads"),
              "%s", err);
    bad = d;
    bad.head_dim = 9;
    CHECK_MSG(llama_dims_check(&bad, err, sizeof err) == -1 && strstr(err, "head_dim"), "%s", err);
    bad = d;
    bad.rms_eps = 0;
    CHECK_MSG(llama_dims_check(&bad, err, sizeof err) == -1 && strstr(err, "rms_norm_eps"), "%s",
              err);
}

/* ---------------------------------------------------------- config.json */

static int parse(const char *text, llama_dims *d, char *err, size_t cap) {
    return llama_config_parse(text, strlen(text), "config.json", d, err, cap);
}

/* Llama 3.1 8B's config.json, as published. */
static const char *cfg_llama31_8b =
    "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n  \"bos_token_id\": 128000,\n  \"eos_token_id\": 128001,\n"
    "  \"hidden_act\": \"silu\",\n  \"hidden_size\": 4096,\n  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 14336,\n  \"max_position_embeddings\": 131072,\n"
    "  \"mlp_bias\": false,\n  \"model_type\": \"llama\",\n  \"num_attention_heads\": 32,\n"
    "  \"num_hidden_layers\": 32,\n  \"num_key_value_heads\": 8,\n  \"pretraining_tp\": 1,\n"
    "  \"rms_norm_eps\": 1e-05,\n  \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0,"
    " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, \"rope_type\": "
    "\"llama3\"},\n  \"rope_theta\": 500000.0,\n  \"tie_word_embeddings\": false,\n"
    "  \"torch_dtype\": \"bfloat16\",\n  \"transformers_version\": \"4.43.0.dev0\",\n"
    "  \"use_cache\": true,\n  \"vocab_size\": 128256\n}\n";

/* Llama 3.2 1B's: tied, head_dim given, factor 32. */
static const char *cfg_llama32_1b =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, "
    "\"attention_dropout\": 0.0, \"bos_token_id\": 128000, \"eos_token_id\": 128001, "
    "\"head_dim\": 64, \"hidden_act\": \"silu\", \"hidden_size\": 2048, "
    "\"initializer_range\": 0.02, \"intermediate_size\": 8192, \"max_position_embeddings\": "
    "131072, \"mlp_bias\": false, \"model_type\": \"llama\", \"num_attention_heads\": 32, "
    "\"num_hidden_layers\": 16, \"num_key_value_heads\": 8, \"pretraining_tp\": 1, "
    "\"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0, "
    "\"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192, \"rope_type\": "
    "\"llama3\"}, \"rope_theta\": 500000.0, \"tie_word_embeddings\": true, \"torch_dtype\": "
    "\"bfloat16\", \"transformers_version\": \"4.45.0.dev0\", \"use_cache\": true, "
    "\"vocab_size\": 128256}";

/* Mistral 7B v0.3's: sliding_window null. */
static const char *cfg_mistral =
    "{\"architectures\": [\"MistralForCausalLM\"], \"attention_dropout\": 0.0, "
    "\"bos_token_id\": 1, \"eos_token_id\": 2, \"hidden_act\": \"silu\", \"hidden_size\": 4096, "
    "\"initializer_range\": 0.02, \"intermediate_size\": 14336, \"max_position_embeddings\": "
    "32768, \"model_type\": \"mistral\", \"num_attention_heads\": 32, \"num_hidden_layers\": 32, "
    "\"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-05, \"rope_theta\": 1000000.0, "
    "\"sliding_window\": null, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", "
    "\"transformers_version\": \"4.42.0.dev0\", \"use_cache\": true, \"vocab_size\": 32768}";

/* Qwen2.5 0.5B's: q/k/v biases implied by the model type, a sliding_window
 * value that use_sliding_window false switches off, tied. */
static const char *cfg_qwen2 =
    "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0, "
    "\"bos_token_id\": 151643, \"eos_token_id\": 151643, \"hidden_act\": \"silu\", "
    "\"hidden_size\": 896, \"initializer_range\": 0.02, \"intermediate_size\": 4864, "
    "\"max_position_embeddings\": 32768, \"max_window_layers\": 24, \"model_type\": \"qwen2\", "
    "\"num_attention_heads\": 14, \"num_hidden_layers\": 24, \"num_key_value_heads\": 2, "
    "\"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"sliding_window\": 32768, "
    "\"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", \"transformers_version\": "
    "\"4.43.1\", \"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}";

/* SmolLM2 135M's: its own keys is_llama_config and rope_interleaved false;
 * hidden_size / num_attention_heads = 64; an integer rope_theta. */
static const char *cfg_smollm2 =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, "
    "\"attention_dropout\": 0.0, \"bos_token_id\": 0, \"eos_token_id\": 0, \"hidden_act\": "
    "\"silu\", \"hidden_size\": 576, \"initializer_range\": 0.041666666666666664, "
    "\"intermediate_size\": 1536, \"is_llama_config\": true, \"max_position_embeddings\": 8192, "
    "\"mlp_bias\": false, \"model_type\": \"llama\", \"num_attention_heads\": 9, "
    "\"num_hidden_layers\": 30, \"num_key_value_heads\": 3, \"pretraining_tp\": 1, "
    "\"rms_norm_eps\": 1e-05, \"rope_interleaved\": false, \"rope_scaling\": null, "
    "\"rope_theta\": 100000, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", "
    "\"transformers_version\": \"4.42.3\", \"use_cache\": true, \"vocab_size\": 49152}";

static void test_config_good(void) {
    char err[1024] = "";
    llama_dims d;
    CHECK_MSG(parse(cfg_llama31_8b, &d, err, sizeof err) == 0, "llama 3.1 8b: %s", err);
    llama_dims p;
    REQUIRE(llama_dims_preset("llama-3.1-8b", &p) == 0);
    CHECK_MSG(memcmp(&d, &p, sizeof d) == 0 || (d.n_layer == p.n_layer && d.n_head == p.n_head &&
                                                 d.n_kv_head == p.n_kv_head &&
                                                 d.head_dim == p.head_dim &&
                                                 d.n_ff == p.n_ff && d.vocab == p.vocab &&
                                                 d.rope_factor == p.rope_factor &&
                                                 d.rope_orig_max == p.rope_orig_max &&
                                                 d.rope_theta == p.rope_theta && !d.tied),
              "llama 3.1 8b config differs from the preset");
    CHECK(d.rope_kind == LLAMA_ROPE_LLAMA3 && d.rope_low_freq == 1.0 && d.rope_high_freq == 4.0 &&
          d.rms_eps == 1e-5 && d.max_seq == 131072 && !d.qkv_bias && !d.o_bias && !d.mlp_bias);
    CHECK(llama_num_params(&d) == 8030261248LL);

    CHECK_MSG(parse(cfg_llama32_1b, &d, err, sizeof err) == 0, "llama 3.2 1b: %s", err);
    CHECK(d.tied && d.head_dim == 64 && d.rope_factor == 32.0 && d.n_kv_head == 8);
    CHECK(llama_num_params(&d) == 1235814400LL);

    CHECK_MSG(parse(cfg_mistral, &d, err, sizeof err) == 0, "mistral: %s", err);
    CHECK(strcmp(d.model_type, "mistral") == 0 && d.rope_kind == LLAMA_ROPE_DEFAULT &&
          d.rope_theta == 1e6 && d.head_dim == 128 && d.vocab == 32768 && !d.tied);

    CHECK_MSG(parse(cfg_qwen2, &d, err, sizeof err) == 0, "qwen2: %s", err);
    CHECK_MSG(strcmp(d.model_type, "qwen2") == 0 && d.qkv_bias && !d.o_bias && !d.mlp_bias &&
                  d.tied && d.head_dim == 64 && d.n_kv_head == 2 && d.rms_eps == 1e-6,
              "qwen2: biases %d %d %d tied %d hd %d", d.qkv_bias, d.o_bias, d.mlp_bias, d.tied,
              d.head_dim);
    // Qwen2.5 0.5B has 494,032,768 parameters (its model card: 0.49B).
    CHECK_MSG(llama_num_params(&d) == 494032768LL, "qwen2.5 0.5b: %lld",
              (long long)llama_num_params(&d));

    CHECK_MSG(parse(cfg_smollm2, &d, err, sizeof err) == 0, "smollm2: %s", err);
    CHECK(d.head_dim == 64 && d.n_kv_head == 3 && d.tied && d.rope_theta == 100000.0 &&
          fabs(d.init_std - 0.041666666666666664) < 1e-18);
    // SmolLM2 135M: 134,515,008 parameters.
    CHECK_MSG(llama_num_params(&d) == 134515008LL, "smollm2 135m: %lld",
              (long long)llama_num_params(&d));

    // transformers 5 writes rope_parameters (rope_theta inside) and, for
    // Qwen2, layer_types: save_pretrained's output for small models.
    const char *v5_llama =
        "{\"attention_bias\": false, \"attention_dropout\": 0.0, \"bos_token_id\": 1, "
        "\"eos_token_id\": 2, \"head_dim\": 10, \"hidden_act\": \"silu\", \"hidden_size\": 40, "
        "\"initializer_range\": 0.02, \"intermediate_size\": 72, \"max_position_embeddings\": "
        "128, \"mlp_bias\": false, \"model_type\": \"llama\", \"num_attention_heads\": 4, "
        "\"num_hidden_layers\": 2, \"num_key_value_heads\": 2, \"pad_token_id\": null, "
        "\"pretraining_tp\": 1, \"rms_norm_eps\": 1e-06, \"rope_parameters\": {\"factor\": 8.0, "
        "\"high_freq_factor\": 8.0, \"low_freq_factor\": 1.0, "
        "\"original_max_position_embeddings\": 64, \"rope_theta\": 10000.0, \"rope_type\": "
        "\"llama3\"}, \"tie_word_embeddings\": false, \"transformers_version\": \"5.24.0\", "
        "\"use_cache\": true, \"vocab_size\": 53}";
    CHECK_MSG(parse(v5_llama, &d, err, sizeof err) == 0, "transformers 5 llama: %s", err);
    CHECK(d.rope_kind == LLAMA_ROPE_LLAMA3 && d.rope_theta == 10000.0 && d.rope_factor == 8.0 &&
          d.rope_high_freq == 8.0 && d.rope_orig_max == 64 && d.head_dim == 10);
    const char *v5_qwen2 =
        "{\"attention_dropout\": 0.0, \"bos_token_id\": null, \"eos_token_id\": null, "
        "\"hidden_act\": \"silu\", \"hidden_size\": 40, \"initializer_range\": 0.02, "
        "\"intermediate_size\": 72, \"layer_types\": [\"full_attention\", \"full_attention\"], "
        "\"max_position_embeddings\": 32768, \"max_window_layers\": 28, \"model_type\": "
        "\"qwen2\", \"num_attention_heads\": 4, \"num_hidden_layers\": 2, "
        "\"num_key_value_heads\": 2, \"pad_token_id\": null, \"rms_norm_eps\": 1e-06, "
        "\"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"default\"}, "
        "\"sliding_window\": null, \"tie_word_embeddings\": false, \"transformers_version\": "
        "\"5.24.0\", \"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 53}";
    CHECK_MSG(parse(v5_qwen2, &d, err, sizeof err) == 0, "transformers 5 qwen2: %s", err);
    CHECK(d.rope_kind == LLAMA_ROPE_DEFAULT && d.rope_theta == 500000.0 && d.qkv_bias &&
          !d.o_bias);

    // Defaults: num_key_value_heads, head_dim, rope_theta, tie_word_embeddings.
    const char *minimal = "{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 8, "
                          "\"intermediate_size\": 12, \"num_hidden_layers\": 1, "
                          "\"num_attention_heads\": 2, \"rms_norm_eps\": 1e-6}";
    CHECK_MSG(parse(minimal, &d, err, sizeof err) == 0, "minimal: %s", err);
    CHECK(d.n_kv_head == 2 && d.head_dim == 4 && d.rope_theta == 10000.0 && !d.tied &&
          d.max_seq == 2048 && d.rope_kind == LLAMA_ROPE_DEFAULT);
    // An explicit default rope type and llama with attention_bias true.
    const char *biased = "{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 8, "
                         "\"intermediate_size\": 12, \"num_hidden_layers\": 1, "
                         "\"num_attention_heads\": 2, \"attention_bias\": true, \"mlp_bias\": "
                         "true, \"rope_scaling\": {\"rope_type\": \"default\"}}";
    CHECK_MSG(parse(biased, &d, err, sizeof err) == 0, "biased: %s", err);
    CHECK(d.qkv_bias && d.o_bias && d.mlp_bias && d.rope_kind == LLAMA_ROPE_DEFAULT);
}

/* A config whose key `key` is set to `value` (JSON text), in a base that
 * parses; value NULL removes the key. */
static void with_key(char *out, size_t cap, const char *key, const char *value) {
    const char *keys[] = {"model_type", "vocab_size", "hidden_size", "intermediate_size",
                          "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                          "rms_norm_eps", "hidden_act"};
    const char *values[] = {"\"llama\"", "32", "16", "24", "1", "4", "2", "1e-5", "\"silu\""};
    size_t n = (size_t)snprintf(out, cap, "{");
    int found = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *v = values[i];
        if (strcmp(keys[i], key) == 0) {
            found = 1;
            if (value == NULL) continue;
            v = value;
        }
        n += (size_t)snprintf(out + n, cap - n, "%s\"%s\": %s", n > 1 ? ", " : "", keys[i], v);
    }
    if (!found && value != NULL)
        n += (size_t)snprintf(out + n, cap - n, ", \"%s\": %s", key, value);
    snprintf(out + n, cap - n, "}");
}

static void test_config_bad(void) {
    const struct {
        const char *key, *value; /* value NULL: the key removed */
        const char *want[2];     /* what the message must say */
    } cases[] = {
        {"sliding_window", "4096", {"sliding_window", "not implemented"}},
        {"rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4.0}", {"rope_scaling", "yarn"}},
        {"rope_scaling", "{\"type\": \"linear\", \"factor\": 2.0}", {"rope_scaling", "linear"}},
        {"rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0}",
         {"rope_scaling.high_freq_factor", "missing"}},
        {"rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
                         "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, "
                         "\"mscale\": 1.0}",
         {"rope_scaling.mscale", "llama3"}},
        {"rope_scaling", "8", {"rope_scaling", "object"}},
        {"rope_parameters", "{\"rope_type\": \"yarn\", \"rope_theta\": 1e4, \"factor\": 4.0}",
         {"rope_parameters", "yarn"}},
        {"rope_parameters", "{\"rope_type\": \"default\", \"rope_theta\": 1e4, "
                            "\"partial_rotary_factor\": 0.5}",
         {"rope_parameters.partial_rotary_factor", "partial rotary"}},
        {"rope_parameters", "{\"rope_type\": \"default\", \"rope_theta\": 1e4, \"factor\": 2.0}",
         {"rope_parameters.factor", "not a key"}},
        {"layer_types", "[\"sliding_attention\"]", {"layer_types[0]", "sliding"}},
        {"layer_types", "[\"full_attention\", \"full_attention\"]", {"layer_types", "list"}},
        {"partial_rotary_factor", "0.5", {"partial_rotary_factor", "partial rotary"}},
        {"rope_interleaved", "true", {"rope_interleaved", "interleaved"}},
        {"hidden_act", "\"gelu\"", {"hidden_act", "silu"}},
        {"attention_dropout", "0.1", {"attention_dropout", "dropout"}},
        {"use_sliding_window", "true", {"sliding_window", "not implemented"}},
        {"num_experts", "8", {"num_experts", "not a key"}},
        {"hidden_size", NULL, {"hidden_size", "missing"}},
        {"model_type", NULL, {"model_type", "missing"}},
        {"model_type", "\"gemma\"", {"model_type", "gemma"}},
        {"hidden_size", "\"16\"", {"hidden_size", "integer"}},
        {"hidden_size", "16.5", {"hidden_size", "integer"}},
        {"num_hidden_layers", "0", {"num_hidden_layers", "outside"}},
        {"vocab_size", "-3", {"vocab_size", "outside"}},
        {"rms_norm_eps", "\"1e-5\"", {"rms_norm_eps", "number"}},
        {"rope_theta", "true", {"rope_theta", "number"}},
        {"tie_word_embeddings", "1", {"tie_word_embeddings", "true or false"}},
        {"attention_bias", "\"false\"", {"attention_bias", "true or false"}},
        {"num_key_value_heads", "3", {"num_key_value_heads", "multiple"}},
        {"head_dim", "5", {"head_dim", "odd"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024], err[1024] = "";
        with_key(text, sizeof text, cases[i].key, cases[i].value);
        llama_dims d;
        const int rc = parse(text, &d, err, sizeof err);
        CHECK_MSG(rc == -1 && strstr(err, "config.json: ") == err &&
                      strstr(err, cases[i].want[0]) && strstr(err, cases[i].want[1]),
                  "%s = %s: rc %d, message \"%s\" (wanted \"%s\" and \"%s\")", cases[i].key,
                  cases[i].value ? cases[i].value : "(removed)", rc, err, cases[i].want[0],
                  cases[i].want[1]);
    }
    // The base itself parses.
    char text[1024], err[1024] = "";
    llama_dims d;
    with_key(text, sizeof text, "none", NULL);
    CHECK_MSG(parse(text, &d, err, sizeof err) == 0, "base: %s", err);
    // rope_parameters beside rope_scaling, or disagreeing with rope_theta.
    with_key(text, sizeof text, "rope_parameters", "{\"rope_type\": \"default\", \"rope_theta\": 1e4}");
    strcpy(text + strlen(text) - 1, ", \"rope_scaling\": {\"rope_type\": \"default\"}}");
    CHECK_MSG(parse(text, &d, err, sizeof err) == -1 && strstr(err, "both rope_scaling and rope_parameters"),
              "both: \"%s\"", err);
    with_key(text, sizeof text, "rope_parameters", "{\"rope_type\": \"default\", \"rope_theta\": 1e4}");
    strcpy(text + strlen(text) - 1, ", \"rope_theta\": 5e5}");
    CHECK_MSG(parse(text, &d, err, sizeof err) == -1 && strstr(err, "disagree"), "theta: \"%s\"",
              err);
    // Mistral with its v0.1 window.
    with_key(text, sizeof text, "model_type", "\"mistral\"");
    strcpy(text + strlen(text) - 1, ", \"sliding_window\": 4096}");
    CHECK_MSG(parse(text, &d, err, sizeof err) == -1 && strstr(err, "sliding_window = 4096"),
              "mistral window: \"%s\"", err);
    // Not JSON, trailing text, not an object, truncated.
    const struct {
        const char *text, *want;
    } broken[] = {{"model_type = llama", "not valid JSON"},
                  {"{\"model_type\": \"llama\"} x", "not valid JSON"},
                  {"{\"model_type\": \"llama\"}{}", "not valid JSON"},
                  {"[1, 2]", "not a JSON object"},
                  {"{\"model_type\": \"llama\", \"vocab_size\": ", "not valid JSON"},
                  {"", "not valid JSON"}};
    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
        err[0] = 0;
        CHECK_MSG(parse(broken[i].text, &d, err, sizeof err) == -1 && strstr(err, broken[i].want),
                  "\"%s\": \"%s\"", broken[i].text, err);
    }
    // Trailing whitespace is fine.
    with_key(text, sizeof text, "none", NULL);
    strcat(text, " \n\t");
    CHECK_MSG(parse(text, &d, err, sizeof err) == 0, "trailing whitespace: %s", err);
    // A missing file names itself.
    CHECK_MSG(llama_config_read("/nonexistent/config.json", &d, err, sizeof err) == -1 &&
                  strstr(err, "/nonexistent/config.json"),
              "missing file: %s", err);
}

static int dims_equal(const llama_dims *a, const llama_dims *b) {
    return a->n_layer == b->n_layer && a->n_head == b->n_head && a->n_kv_head == b->n_kv_head &&
           a->head_dim == b->head_dim && a->n_embd == b->n_embd && a->n_ff == b->n_ff &&
           a->vocab == b->vocab && a->max_seq == b->max_seq && a->rms_eps == b->rms_eps &&
           a->rope_theta == b->rope_theta && a->rope_kind == b->rope_kind &&
           (a->rope_kind != LLAMA_ROPE_LLAMA3 ||
            (a->rope_factor == b->rope_factor && a->rope_low_freq == b->rope_low_freq &&
             a->rope_high_freq == b->rope_high_freq && a->rope_orig_max == b->rope_orig_max)) &&
           a->qkv_bias == b->qkv_bias && a->o_bias == b->o_bias && a->mlp_bias == b->mlp_bias &&
           a->tied == b->tied && a->init_std == b->init_std &&
           strcmp(a->model_type, b->model_type) == 0;
}

static void test_config_round_trip(void) {
    llama_dims cases[8];
    int n = 0;
    for (int i = 0; llama_preset_names[i]; i++) REQUIRE(llama_dims_preset(llama_preset_names[i], &cases[n++]) == 0);
    cases[n] = small_dims(1, 1, 1, 1); /* llama with attention_bias and mlp_bias */
    cases[n].rms_eps = 1.1e-6;
    cases[n].init_std = 0.041666666666666664;
    n++;
    cases[n] = small_dims(0, 1, 0, 0);
    snprintf(cases[n].model_type, sizeof cases[n].model_type, "qwen2");
    cases[n].rope_theta = 1e6;
    n++;
    cases[n] = small_dims(0, 0, 0, 0);
    snprintf(cases[n].model_type, sizeof cases[n].model_type, "mistral");
    cases[n].head_dim = 16; /* not hidden_size / heads */
    n++;
    for (int i = 0; i < n; i++) {
        char text[4096], err[1024] = "";
        const int len = llama_config_write(&cases[i], text, sizeof text);
        REQUIRE(len > 0 && len < (int)sizeof text);
        llama_dims back;
        CHECK_MSG(llama_config_parse(text, (size_t)len, "written", &back, err, sizeof err) == 0,
                  "case %d: %s\n%s", i, err, text);
        CHECK_MSG(dims_equal(&cases[i], &back), "case %d (%s) does not read back:\n%s", i,
                  cases[i].model_type, text);
    }
    // snprintf's rule for a short buffer.
    char small[16];
    const int need = llama_config_write(&cases[0], small, sizeof small);
    CHECK(need > (int)sizeof small && strlen(small) == sizeof small - 1);
}

/* ------------------------------------------------------------- RoPE */

/* The rotary frequency of pair i in double: theta^(-2i/hd), and llama3's
 * scaling (Meta's reference: wavelengths beyond original / low_freq_factor
 * slowed by factor, below original / high_freq_factor kept, smooth between). */
static double ref_inv_freq(const llama_dims *d, int i) {
    const double f = pow(d->rope_theta, -2.0 * i / d->head_dim);
    if (d->rope_kind != LLAMA_ROPE_LLAMA3) return f;
    const double wavelen = 2.0 * 3.141592653589793 / f;
    const double low_wavelen = d->rope_orig_max / d->rope_low_freq;
    const double high_wavelen = d->rope_orig_max / d->rope_high_freq;
    if (wavelen < high_wavelen) return f;
    if (wavelen > low_wavelen) return f / d->rope_factor;
    const double smooth = (d->rope_orig_max / wavelen - d->rope_low_freq) /
                          (d->rope_high_freq - d->rope_low_freq);
    return (1.0 - smooth) * f / d->rope_factor + smooth * f;
}

static void check_rope(const llama_dims *d, int T, const char *what) {
    const int half = d->head_dim / 2;
    float *c = malloc(sizeof(float) * (size_t)T * half), *s = malloc(sizeof(float) * (size_t)T * half);
    REQUIRE(c && s);
    llama_rope_table(d, T, c, s);
    int bad = 0;
    double worst = 0.0;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < half; i++) {
            const double angle = t * ref_inv_freq(d, i);
            // The table rounds the frequency and the angle to fp32 (as the
            // libraries do): an error of a few fp32 ulp of the angle.
            const double tol = 4.0 * 1.1920929e-7 * fabs(angle) + 3e-7;
            const double ec = fabs(c[(size_t)t * half + i] - cos(angle));
            const double es = fabs(s[(size_t)t * half + i] - sin(angle));
            const double e = (ec > es ? ec : es) / tol;
            worst = e > worst ? e : worst;
            if (e > 1.0 && bad++ < 5)
                CHECK_MSG(0, "%s: t %d pair %d: cos %.9g sin %.9g, expected %.9g %.9g", what, t, i,
                          c[(size_t)t * half + i], s[(size_t)t * half + i], cos(angle), sin(angle));
        }
    }
    CHECK_MSG(bad == 0, "%s: %d of %d entries off", what, bad, T * half);
    printf("rope %s: T %d, worst error %.2f of the bound\n", what, T, worst);
    free(c);
    free(s);
}

static void test_rope(void) {
    llama_dims d = small_dims(0, 0, 0, 0);
    check_rope(&d, 64, "default, hd 10");
    // Llama 3.1's scaling at its real numbers, over 9000 positions (past
    // half of the original 8192 and past its end).
    REQUIRE(llama_dims_preset("llama-3.1-8b", &d) == 0);
    check_rope(&d, 9000, "llama3, hd 128");
    // Each band of the scaling with a short original context: hd 10, theta
    // 1e4 give wavelengths 6.3 (kept: below 64 / 8), 40 (smoothed), 250,
    // 1600, 9900 (slowed by the factor).
    d = small_dims(0, 0, 0, 0);
    d.rope_kind = LLAMA_ROPE_LLAMA3;
    d.rope_factor = 8.0;
    d.rope_low_freq = 1.0;
    d.rope_high_freq = 8.0;
    d.rope_orig_max = 64;
    check_rope(&d, 64, "llama3, original 64");
    // The rotation itself: position 0 is the identity.
    float c[5], s[5];
    llama_rope_table(&d, 1, c, s);
    for (int i = 0; i < 5; i++) CHECK(c[i] == 1.0f && s[i] == 0.0f);
}

int main(void) {
    test_presets();
    test_table();
    test_config_good();
    test_config_bad();
    test_config_round_trip();
    test_rope();
    return model_check_finish("test_llama_model");
}

/* zs_params_import_safetensors against Hugging Face checkpoints written
 * independently (hf_checkpoint.py, standard-library Python) and hostile
 * ones written here.
 *
 *   test_hf_import prepare <work>     (no MPI) the model's description
 *       (<work>/spec.txt, read by hf_checkpoint.py write), the runtime's
 *       configuration, and the hostile files under <work>/hostile
 *   mpirun -np N test_hf_import run <work> [save]
 *       every good checkpoint (single file and sharded with an index, F32,
 *       BF16, F16, addressed as a directory, an index or a file) imported at
 *       stages 0-3: every parameter's value bit for bit (BF16/F16 widen to
 *       fp32 exactly), each rank's bytes read exactly its owned elements
 *       times the stored size (and, over the ranks, the whole model once in
 *       stages 1-3 and N times in stage 0), the files each rank opened
 *       exactly those holding its ranges, the ignored inv_freq buffers
 *       counted; then every hostile case (below); with `save` (np 3), three
 *       imports saved with zs_save for run_hf_export.sh to export
 *   mpirun -np N test_hf_import hostile <work>
 *       the hostile cases alone (the sanitizer build runs these)
 *
 * Hostile cases, each refused on every rank with its message, after which
 * the parameters still hold the previous import: a missing tensor, missing
 * tensors whose entries were removed from the header but whose bytes were
 * left (a gap, trailing bytes; the message names them), a gap with every
 * tensor present, an unexpected tensor, the inv_freq buffers without an ignore pattern, a
 * shape mismatch, dtypes I32 and U8, overlapping offsets, offsets beyond
 * the file, a truncated file (in the data and in the header), a header
 * claiming 1,000,000 tensors (refused in under a second with little
 * memory), 600 extra tensors within the byte bound, and indexes naming a
 * missing file, a file with "../" or "..", a value that is not a string, no
 * weight_map, a missing parameter; and a bad shard only one rank opens
 * (stage 3), whose message every rank returns. */
#include <mpi.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"
#include "zero/ground.h"
#include "zero/state_layout.h" /* zs__state_range: which elements this rank keeps */
#include "zeroshard.h"
#include "zeroshard_mpi.h"

#define UNITS 4
static const char *const unit_names[UNITS] = {"embed", "layer0", "layer1", "head"};

/* A small Llama shape with grouped-query attention (6 K/V rows for 12
 * query rows) and, in layer 1, Qwen2's q/k/v biases; `shard` is the file
 * of the sharded checkpoints. Sizes are uneven so owned ranges cut
 * parameters at odd places. */
typedef struct spec_param {
    const char *name;
    int unit, shard, ndim;
    int64_t shape[2];
} spec_param;

#define L0 "model.layers.0."
#define L1 "model.layers.1."
static const spec_param params[] = {
    {"model.embed_tokens.weight", 0, 0, 2, {37, 12}},
    {L0 "input_layernorm.weight", 1, 0, 1, {12, 0}},
    {L0 "self_attn.q_proj.weight", 1, 0, 2, {12, 12}},
    {L0 "self_attn.k_proj.weight", 1, 0, 2, {6, 12}},
    {L0 "self_attn.v_proj.weight", 1, 0, 2, {6, 12}},
    {L0 "self_attn.o_proj.weight", 1, 0, 2, {12, 12}},
    {L0 "post_attention_layernorm.weight", 1, 1, 1, {12, 0}},
    {L0 "mlp.gate_proj.weight", 1, 1, 2, {20, 12}},
    {L0 "mlp.up_proj.weight", 1, 1, 2, {20, 12}},
    {L0 "mlp.down_proj.weight", 1, 1, 2, {12, 20}},
    {L1 "input_layernorm.weight", 2, 1, 1, {12, 0}},
    {L1 "self_attn.q_proj.weight", 2, 1, 2, {12, 12}},
    {L1 "self_attn.q_proj.bias", 2, 1, 1, {12, 0}},
    {L1 "self_attn.k_proj.weight", 2, 1, 2, {6, 12}},
    {L1 "self_attn.k_proj.bias", 2, 1, 1, {6, 0}},
    {L1 "self_attn.v_proj.weight", 2, 1, 2, {6, 12}},
    {L1 "self_attn.v_proj.bias", 2, 1, 1, {6, 0}},
    {L1 "self_attn.o_proj.weight", 2, 1, 2, {12, 12}},
    {L1 "post_attention_layernorm.weight", 2, 1, 1, {12, 0}},
    {L1 "mlp.gate_proj.weight", 2, 1, 2, {20, 12}},
    {L1 "mlp.up_proj.weight", 2, 1, 2, {20, 12}},
    {L1 "mlp.down_proj.weight", 2, 1, 2, {12, 20}},
    {"model.norm.weight", 3, 2, 1, {12, 0}},
    {"lm_head.weight", 3, 2, 2, {37, 12}},
};
#define PARAMS ((int)(sizeof params / sizeof params[0]))
#define SHARDS 3
/* The parameter the split checkpoint keeps alone in a bad file. */
#define LONE_PARAM 18

static const char *const ignore_patterns[] = {"*.rotary_emb.inv_freq"};
static const zs_safetensors_import ignore_inv_freq = {.ignore = ignore_patterns, .ignore_count = 1};

static char work[2048];
static int world = 1;

static int64_t numel_of(const spec_param *p) {
    int64_t n = 1;
    for (int d = 0; d < p->ndim; d++) n *= p->shape[d];
    return n;
}

/* ------------------------------------------------------------ context */

typedef struct model {
    zs_ctx *zs;
    zs_unit *units[UNITS];
    zs_param *handles[PARAMS];
} model;

static void model_create(model *m, int stage, const char *dtype) {
    char cfg_path[2100], a[64], b[64];
    snprintf(cfg_path, sizeof cfg_path, "%s/zs.cfg", work);
    snprintf(a, sizeof a, "zero.stage=%d", stage);
    snprintf(b, sizeof b, "precision.dtype=\"%s\"", dtype);
    const char *overrides[] = {a, b};
    zs_config *cfg = NULL;
    ZT_REQUIRE(zs_config_load(cfg_path, &cfg) == ZS_OK);
    ZT_REQUIRE(zs_config_override_list(cfg, 2, overrides) == ZS_OK);
    ZT_REQUIRE(zs_create_with_comm(cfg, MPI_COMM_WORLD, &m->zs) == ZS_OK);
    zs_config_destroy(cfg);
    for (int u = 0; u < UNITS; u++) {
        ZT_REQUIRE(zs_unit_begin(m->zs, unit_names[u], &m->units[u]) == ZS_OK);
        for (int p = 0; p < PARAMS; p++)
            if (params[p].unit == u)
                ZT_REQUIRE(zs_param_create(m->zs, params[p].name, params[p].ndim,
                                           params[p].shape, ZS_INIT_NORMAL_STD(0.02), 0,
                                           &m->handles[p]) == ZS_OK);
        ZT_REQUIRE(zs_unit_end(m->zs) == ZS_OK);
    }
    ZT_REQUIRE(zs_build(m->zs) == ZS_OK);
}

/* The fp32 values every parameter must hold, in spec order. */
static float *read_expected(const char *dtype) {
    char path[2200];
    snprintf(path, sizeof path, "%s/expected_%s.f32", work, dtype);
    int64_t total = 0;
    for (int p = 0; p < PARAMS; p++) total += numel_of(&params[p]);
    float *values = malloc(sizeof(float) * (size_t)total);
    FILE *f = fopen(path, "rb");
    ZT_REQUIRE(values && f);
    ZT_REQUIRE(fread(values, sizeof(float), (size_t)total, f) == (size_t)total);
    fclose(f);
    return values;
}

/* Compares every parameter with `want` bit for bit; returns the number of
 * differing elements (the first few printed). */
static int64_t check_values(model *m, const float *want, const char *what) {
    int64_t bad = 0;
    for (int u = 0; u < UNITS; u++) {
        ZT_OK(zs_fetch(m->zs, m->units[u]));
        for (int p = 0, k = 0; p < PARAMS; p++) {
            const int64_t n = numel_of(&params[p]);
            if (params[p].unit == u) {
                const float *got = zs_param_data(m->handles[p]);
                ZT_REQUIRE(got != NULL);
                for (int64_t i = 0; i < n; i++)
                    if (memcmp(&got[i], &want[k + i], sizeof(float)) != 0 && bad++ < 3)
                        fprintf(stderr, "rank %d %s: %s[%lld] = %a, expected %a\n", zt_rank, what,
                                params[p].name, (long long)i, (double)got[i],
                                (double)want[k + i]);
            }
            k += (int)n;
        }
        ZT_OK(zs_release(m->zs, m->units[u]));
    }
    return bad;
}

/* ------------------------------------------------------------ good imports */

static size_t dtype_bytes(const char *dtype) { return strcmp(dtype, "F32") == 0 ? 4 : 2; }

static void import_good(const char *layout, const char *dtype, int stage, int path_kind) {
    char path[2300], what[128];
    /* Each way of naming a checkpoint: its directory, its index or file. */
    if (path_kind == 0)
        snprintf(path, sizeof path, "%s/%s_%s", work, layout, dtype);
    else if (strcmp(layout, "sharded") == 0)
        snprintf(path, sizeof path, "%s/%s_%s/model.safetensors.index.json", work, layout, dtype);
    else
        snprintf(path, sizeof path, "%s/%s_%s/model.safetensors", work, layout, dtype);
    snprintf(what, sizeof what, "%s %s stage %d%s", layout, dtype, stage,
             path_kind ? " (by file)" : "");
    model m;
    model_create(&m, stage, "fp32");
    zs_import_report report = {0};
    ZT_OK(zs_params_import_safetensors(m.zs, path, &ignore_inv_freq, &report));

    /* What this rank keeps, from the runtime's plan; stored sizes from the
     * dtype of the file. */
    uint64_t want_bytes = 0;
    int keeps_shard[SHARDS] = {0}, want_files = 0;
    for (int p = 0; p < PARAMS; p++) {
        int64_t b, e;
        if (!zs__state_range(m.zs, p, &b, &e)) continue;
        want_bytes += (uint64_t)(e - b) * dtype_bytes(dtype);
        keeps_shard[strcmp(layout, "sharded") == 0 ? params[p].shard : 0] = 1;
    }
    for (int s = 0; s < SHARDS; s++) want_files += keeps_shard[s];
    ZT_CHECK_MSG(report.bytes_read == want_bytes, "%s: rank %d read %llu bytes, owns %llu", what,
                 zt_rank, (unsigned long long)report.bytes_read, (unsigned long long)want_bytes);
    ZT_CHECK_MSG(report.files_opened == want_files, "%s: rank %d opened %d files, needs %d", what,
                 zt_rank, report.files_opened, want_files);
    if (strcmp(layout, "sharded") == 0 || want_files > 0)
        ZT_CHECK_MSG(report.tensors_ignored == 2, "%s: %d tensors ignored, expected the 2 inv_freq",
                     what, report.tensors_ignored);
    /* Independently of the plan: the ranks together read the model once
     * (stages 1-3) or once each (stage 0). */
    uint64_t total = 0, all = 0;
    for (int p = 0; p < PARAMS; p++) total += (uint64_t)numel_of(&params[p]) * dtype_bytes(dtype);
    MPI_Allreduce(&report.bytes_read, &all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    ZT_CHECK_MSG(all == (stage == 0 ? total * (uint64_t)world : total),
                 "%s: the ranks read %llu bytes in all, the model holds %llu", what,
                 (unsigned long long)all, (unsigned long long)total);

    float *want = read_expected(dtype);
    const int64_t bad = check_values(&m, want, what);
    ZT_CHECK_MSG(bad == 0, "%s: %lld values differ", what, (long long)bad);
    free(want);
    zs_destroy(m.zs);
}

/* ------------------------------------------------------------ hostile */

typedef struct hostile_case {
    const char *path; /* under <work>/hostile */
    int ignore;       /* pass the inv_freq pattern */
    zs_status status;
    const char *text[2]; /* both must be in the message (NULL: none) */
} hostile_case;

static const hostile_case hostile_cases[] = {
    {"missing.safetensors", 1, ZS_ERR_INVALID_ARGUMENT,
     {"missing tensor \"model.norm.weight\"", "missing.safetensors"}},
    {"hole.safetensors", 1, ZS_ERR_INVALID_ARGUMENT,
     {"hole.safetensors: missing tensor \"" L0 "mlp.up_proj.weight\" (shape [20, 12]): the model "
      "has this parameter, but this file does not hold it",
      "data bytes 4560..5520 belong to no tensor: the header lost its entry, not its bytes"}},
    {"hole_end.safetensors", 1, ZS_ERR_INVALID_ARGUMENT,
     {"missing tensors \"model.norm.weight\" (shape [12]), \"lm_head.weight\" (shape [37, 12])",
      "belong to no tensor: the header lost their entries, not their bytes"}},
    {"gap.safetensors", 1, ZS_ERR_INVALID_ARGUMENT,
     {"gap.safetensors: gap in the data section: bytes 4560..4568 belong to no tensor", NULL}},
    {"extra.safetensors", 1, ZS_ERR_INVALID_ARGUMENT,
     {"unexpected tensor \"model.layers.0.self_attn.extra.weight\"", "extra.safetensors"}},
    {"../single_F32/model.safetensors", 0, ZS_ERR_INVALID_ARGUMENT,
     {"unexpected tensor \"model.layers.0.self_attn.rotary_emb.inv_freq\"", "single_F32"}},
    {"../sharded_F32", 0, ZS_ERR_INVALID_ARGUMENT,
     {"unexpected tensor \"model.layers.0.self_attn.rotary_emb.inv_freq\" (in "
      "model-00001-of-00003.safetensors)",
      "model.safetensors.index.json"}},
    {"shape.safetensors", 1, ZS_ERR_INVALID_ARGUMENT,
     {"tensor \"model.layers.0.self_attn.k_proj.weight\" has shape [12, 12], but the model's "
      "parameter has shape [6, 12]",
      "shape.safetensors"}},
    {"dtype_i32.safetensors", 1, ZS_ERR_INVALID_ARGUMENT,
     {"(\"model.norm.weight\") has a dtype I32, outside F32, BF16 and F16, the dtypes "
      "parameters are imported from",
      "dtype_i32.safetensors"}},
    {"dtype_u8.safetensors", 1, ZS_ERR_INVALID_ARGUMENT,
     {"tensor \"model.norm.weight\" has dtype U8; parameters are imported from F32, BF16 or F16",
      NULL}},
    {"overlap.safetensors", 1, ZS_ERR_INVALID_ARGUMENT,
     {"overlap (data bytes", "(\"model.layers.0.self_attn.k_proj.weight\")"}},
    {"beyond.safetensors", 1, ZS_ERR_INVALID_ARGUMENT,
     {"(\"lm_head.weight\") ends at data byte", "beyond the"}},
    {"truncated.safetensors", 1, ZS_ERR_INVALID_ARGUMENT,
     {"the file is truncated, or its header claims more than it holds", "truncated.safetensors"}},
    {"truncated_header.safetensors", 1, ZS_ERR_INVALID_ARGUMENT,
     {"do not hold a valid header length", "truncated_header.safetensors"}},
    {"many.safetensors", 1, ZS_ERR_INVALID_ARGUMENT,
     {"the header lists more than", "tensors expected there"}},
    {"index_missing_file/model.safetensors.index.json", 1, ZS_ERR_IO,
     {"names \"model-00009-of-00009.safetensors\", which is not a regular file",
      "weight_map entry 0 (\"model.embed_tokens.weight\")"}},
    {"index_slash", 1, ZS_ERR_INVALID_ARGUMENT,
     {"the file name \"../single_F32/model.safetensors\" contains '/'", "index_slash/"}},
    {"index_dotdot", 1, ZS_ERR_INVALID_ARGUMENT, {"the file name \"..\" contains \"..\"", NULL}},
    {"index_number", 1, ZS_ERR_INVALID_ARGUMENT,
     {"weight_map entry 0 (\"model.embed_tokens.weight\") is not a string", NULL}},
    {"index_no_map", 1, ZS_ERR_INVALID_ARGUMENT, {"has no \"weight_map\" object", NULL}},
    {"split/missing.index.json", 1, ZS_ERR_INVALID_ARGUMENT,
     {"missing tensor \"lm_head.weight\"", "is not in the weight_map"}},
    {"empty_dir", 1, ZS_ERR_IO, {"holds neither model.safetensors.index.json nor", NULL}},
};

/* One hostile case on a built model: refused on every rank. */
static void expect_refused(model *m, const hostile_case *c) {
    char path[2400];
    snprintf(path, sizeof path, "%s/hostile/%s", work, c->path);
    zs_import_report report = {12345, 0, 0};
    const zs_status s = zs_params_import_safetensors(m->zs, path, c->ignore ? &ignore_inv_freq
                                                                              : NULL,
                                                     &report);
    ZT_FAILS_WITH(s, c->status, c->text[0]);
    if (c->text[1]) ZT_FAILS_WITH(s, c->status, c->text[1]);
    ZT_CHECK_MSG(report.bytes_read == 12345, "%s: the report was written on failure", c->path);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static long max_rss_kib(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

static void hostile_all(void) {
    model m;
    model_create(&m, 3, "fp32");
    char good[2300];
    snprintf(good, sizeof good, "%s/single_F32", work);
    ZT_OK(zs_params_import_safetensors(m.zs, good, &ignore_inv_freq, NULL));

    for (size_t k = 0; k < sizeof hostile_cases / sizeof hostile_cases[0]; k++)
        expect_refused(&m, &hostile_cases[k]);

    /* A header of 1,000,000 tensors: refused from its length, before a
     * byte of it is read or allocated. */
    const long rss_before = max_rss_kib();
    const double t0 = now_s();
    const hostile_case huge = {"million.safetensors", 1, ZS_ERR_INVALID_ARGUMENT,
                               {"the header is longer than the", "tensors expected there"}};
    expect_refused(&m, &huge);
    const double seconds = now_s() - t0;
    const long grown_kib = max_rss_kib() - rss_before;
    ZT_CHECK_MSG(seconds < 1.0, "refusing 1,000,000 tensors took %.3f s", seconds);
    ZT_CHECK_MSG(grown_kib < 32 * 1024, "refusing 1,000,000 tensors grew the peak RSS by %ld KiB",
                 grown_kib);

    /* A bad file only the ranks keeping one parameter open (in stage 3,
     * one rank when there are 2 or 3): every rank returns its message. */
    int64_t b, e;
    const int mine = zs__state_range(m.zs, LONE_PARAM, &b, &e);
    int reporter = mine ? zt_rank : world;
    MPI_Allreduce(MPI_IN_PLACE, &reporter, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    const hostile_case lone = {"split/bad.index.json", 1, ZS_ERR_INVALID_ARGUMENT,
                               {"tensor \"" L1 "post_attention_layernorm.weight\" has shape [13]",
                                "lone.safetensors"}};
    expect_refused(&m, &lone);
    if (zt_rank != reporter) {
        char from[64];
        snprintf(from, sizeof from, "(reported by rank %d)", reporter);
        ZT_FAILS_WITH(ZS_ERR_INVALID_ARGUMENT, ZS_ERR_INVALID_ARGUMENT, from);
    }

    /* Nothing refused changed a parameter. */
    float *want = read_expected("F32");
    const int64_t bad = check_values(&m, want, "after the hostile cases");
    ZT_CHECK_MSG(bad == 0, "%lld values changed by refused imports", (long long)bad);
    free(want);
    zs_destroy(m.zs);
}

/* ------------------------------------------------------------ saves for the export test */

static void save_import(const char *source, int stage, const char *dtype, int with_config,
                        const char *root) {
    char path[2300], config_path[2300], dir[2300];
    snprintf(path, sizeof path, "%s/%s", work, source);
    snprintf(dir, sizeof dir, "%s/%s", work, root);
    model m;
    model_create(&m, stage, dtype);
    ZT_OK(zs_params_import_safetensors(m.zs, path, &ignore_inv_freq, NULL));
    if (with_config) {
        /* The trainer's convention: config.json's bytes as global user state. */
        snprintf(config_path, sizeof config_path, "%s/config.json", work);
        char text[4096];
        zt_read_text(config_path, text, sizeof text);
        ZT_REQUIRE(text[0] == '{');
        ZT_OK(zs_user_state_set(m.zs, "hf.config.json", text, strlen(text), 0));
    }
    ZT_OK(zs_save(m.zs, dir));
    zs_destroy(m.zs);
}

/* ------------------------------------------------------------ prepare */

/* A tensor of a hostile file: offsets laid out in order unless given. */
typedef struct fake {
    char name[96];
    const char *dtype;
    int ndim;
    int64_t shape[2];
    int64_t begin, end; /* -1: in order after the previous one */
} fake;

static int64_t fake_bytes(const fake *t) {
    int64_t n = strcmp(t->dtype, "F32") == 0 || strcmp(t->dtype, "I32") == 0 ? 4
                : strcmp(t->dtype, "U8") == 0                                  ? 1
                                                                               : 2;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

/* The model's parameters as F32 tensors, in spec order. */
static int fake_model(fake *t) {
    for (int p = 0; p < PARAMS; p++) {
        memset(&t[p], 0, sizeof t[p]);
        snprintf(t[p].name, sizeof t[p].name, "%s", params[p].name);
        t[p].dtype = "F32";
        t[p].ndim = params[p].ndim;
        memcpy(t[p].shape, params[p].shape, sizeof t[p].shape);
        t[p].begin = t[p].end = -1;
    }
    return PARAMS;
}

/* Writes a safetensors file of the tensors (zeros as data); data_bytes < 0
 * makes the data section exactly what the tensors laid out in order take. */
static void write_fake(const char *name, const fake *t, int n, int64_t data_bytes) {
    char path[2400];
    snprintf(path, sizeof path, "%s/hostile/%s", work, name);
    size_t cap = 256 + (size_t)n * 256, len = 0;
    char *header = malloc(cap);
    ZT_REQUIRE(header != NULL);
    len += (size_t)snprintf(header, cap, "{\"__metadata__\":{\"format\":\"pt\"}");
    int64_t at = 0;
    for (int k = 0; k < n; k++) {
        const int64_t bytes = fake_bytes(&t[k]);
        const int64_t begin = t[k].begin >= 0 ? t[k].begin : at;
        const int64_t end = t[k].end >= 0 ? t[k].end : begin + bytes;
        len += (size_t)snprintf(header + len, cap - len,
                                ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[k].name, t[k].dtype);
        for (int d = 0; d < t[k].ndim; d++)
            len += (size_t)snprintf(header + len, cap - len, "%s%lld", d ? "," : "",
                                    (long long)t[k].shape[d]);
        len += (size_t)snprintf(header + len, cap - len, "],\"data_offsets\":[%lld,%lld]}",
                                (long long)begin, (long long)end);
        if (t[k].begin < 0) at = end;
    }
    len += (size_t)snprintf(header + len, cap - len, "}");
    while (len % 8) header[len++] = ' ';
    ZT_REQUIRE(len < cap);
    if (data_bytes < 0) data_bytes = at;
    FILE *f = fopen(path, "wb");
    ZT_REQUIRE(f != NULL);
    unsigned char length[8];
    for (int k = 0; k < 8; k++) length[k] = (unsigned char)((uint64_t)len >> (8 * k));
    ZT_REQUIRE(fwrite(length, 1, 8, f) == 8 && fwrite(header, 1, len, f) == len);
    for (int64_t k = 0; k < data_bytes; k++) fputc(0, f);
    ZT_REQUIRE(fclose(f) == 0);
    free(header);
}

static int find_fake(const fake *t, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (strcmp(t[k].name, name) == 0) return k;
    return -1;
}

static void write_text(const char *name, const char *text) {
    char path[2400];
    snprintf(path, sizeof path, "%s/hostile/%s", work, name);
    FILE *f = fopen(path, "w");
    ZT_REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

static void make_dir(const char *name) {
    char path[2400];
    snprintf(path, sizeof path, "%s/hostile/%s", work, name);
    ZT_REQUIRE(mkdir(path, 0755) == 0 || errno == EEXIST);
}

/* 1,000,000 empty tensors (about 50 MB of header), written as it goes. */
static void write_million(void) {
    enum { COUNT = 1000000 };
    static const char prefix[] = "{\"__metadata__\":{\"format\":\"pt\"}";
    char entry[96];
    const int entry_len = snprintf(entry, sizeof entry,
                                   ",\"t%07d\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":"
                                   "[0,0]}",
                                   0);
    uint64_t len = (sizeof prefix - 1) + (uint64_t)COUNT * (uint64_t)entry_len + 1;
    const uint64_t padded = (len + 7) & ~(uint64_t)7;
    char path[2400];
    snprintf(path, sizeof path, "%s/hostile/million.safetensors", work);
    FILE *f = fopen(path, "wb");
    ZT_REQUIRE(f != NULL);
    unsigned char length[8];
    for (int k = 0; k < 8; k++) length[k] = (unsigned char)(padded >> (8 * k));
    fwrite(length, 1, 8, f);
    fputs(prefix, f);
    for (int k = 0; k < COUNT; k++)
        fprintf(f, ",\"t%07d\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}", k);
    fputc('}', f);
    for (uint64_t k = len; k < padded; k++) fputc(' ', f);
    ZT_REQUIRE(fclose(f) == 0);
}

static int prepare(void) {
    char path[2300];
    snprintf(path, sizeof path, "%s/spec.txt", work);
    FILE *f = fopen(path, "w");
    ZT_REQUIRE(f != NULL);
    for (int p = 0; p < PARAMS; p++) {
        fprintf(f, "param %s %d", params[p].name, params[p].shard);
        for (int d = 0; d < params[p].ndim; d++) fprintf(f, " %lld", (long long)params[p].shape[d]);
        fputc('\n', f);
    }
    ZT_REQUIRE(fclose(f) == 0);
    snprintf(path, sizeof path, "%s/zs.cfg", work);
    f = fopen(path, "w");
    ZT_REQUIRE(f != NULL);
    fprintf(f, "seed = 7;\nzero: { align = 1; };\n"
               "optimizer: { type = \"adamw\"; lr = 0.01; weight_decay = 0.1; };\n"
               "log: { level = \"warn\"; };\n"
               /* A rank left waiting by a broken agreement fails the test
                * in seconds, not at ctest's timeout. */
               "comm: { timeout_s = 20; };\n");
    ZT_REQUIRE(fclose(f) == 0);
    snprintf(path, sizeof path, "%s/hostile", work);
    ZT_REQUIRE(mkdir(path, 0755) == 0 || errno == EEXIST);

    fake t[PARAMS + 700];
    int n = fake_model(t);
    /* Missing: no model.norm.weight. */
    const int norm = find_fake(t, n, "model.norm.weight");
    t[norm] = t[n - 1];
    write_fake("missing.safetensors", t, n - 1, -1);
    /* Holes: entries removed from a header whose data section still holds
     * their bytes; in the middle (one tensor), and at the end (the last
     * two, so the bytes trail the rest). Laid out in spec order. */
    n = fake_model(t);
    int64_t placed = 0;
    for (int k = 0; k < n; k++) {
        t[k].begin = placed;
        t[k].end = placed += fake_bytes(&t[k]);
    }
    const int up = find_fake(t, n, L0 "mlp.up_proj.weight");
    fake kept = t[up];
    t[up] = t[n - 1];
    write_fake("hole.safetensors", t, n - 1, placed);
    t[up] = kept;
    write_fake("hole_end.safetensors", t, n - 2, placed);
    /* A gap with every tensor present: 8 bytes before up_proj. */
    for (int k = up; k < n; k++) {
        t[k].begin += 8;
        t[k].end += 8;
    }
    write_fake("gap.safetensors", t, n, placed + 8);
    /* Extra: a tensor no parameter has. */
    n = fake_model(t);
    t[n] = t[0];
    snprintf(t[n].name, sizeof t[n].name, L0 "self_attn.extra.weight");
    t[n].ndim = 1;
    t[n].shape[0] = 3;
    write_fake("extra.safetensors", t, n + 1, -1);
    /* Shape: k_proj as wide as q_proj. */
    n = fake_model(t);
    t[find_fake(t, n, L0 "self_attn.k_proj.weight")].shape[0] = 12;
    write_fake("shape.safetensors", t, n, -1);
    /* Dtypes: I32 (refused by the reader) and U8 (read, but no parameter's). */
    n = fake_model(t);
    t[norm].dtype = "I32";
    write_fake("dtype_i32.safetensors", t, n, -1);
    t[norm].dtype = "U8";
    write_fake("dtype_u8.safetensors", t, n, -1);
    /* Overlap: k_proj placed on top of q_proj, its own bytes left as a gap. */
    n = fake_model(t);
    int64_t at = 0;
    for (int k = 0; k < n; k++) {
        t[k].begin = at;
        t[k].end = at + fake_bytes(&t[k]);
        at = t[k].end;
    }
    const int q = find_fake(t, n, L0 "self_attn.q_proj.weight");
    const int kp = find_fake(t, n, L0 "self_attn.k_proj.weight");
    t[kp].begin = t[q].begin;
    t[kp].end = t[q].begin + fake_bytes(&t[kp]);
    write_fake("overlap.safetensors", t, n, at);
    /* Beyond: lm_head.weight's bytes placed past the end of the data
     * section, which holds the others. */
    n = fake_model(t);
    at = 0;
    for (int k = 0; k < n; k++) at += fake_bytes(&t[k]);
    const int head = find_fake(t, n, "lm_head.weight");
    at -= fake_bytes(&t[head]);
    t[head].begin = at + 100;
    t[head].end = at + 100 + fake_bytes(&t[head]);
    write_fake("beyond.safetensors", t, n, at);
    /* Truncated: a whole file cut 100 bytes short, and one cut inside its
     * first 8 bytes. */
    n = fake_model(t);
    write_fake("truncated.safetensors", t, n, -1);
    snprintf(path, sizeof path, "%s/hostile/truncated.safetensors", work);
    struct stat st;
    ZT_REQUIRE(stat(path, &st) == 0 && truncate(path, st.st_size - 100) == 0);
    write_fake("truncated_header.safetensors", t, n, -1);
    snprintf(path, sizeof path, "%s/hostile/truncated_header.safetensors", work);
    ZT_REQUIRE(truncate(path, 20) == 0);
    /* Many: 600 tiny extra tensors, far fewer bytes than the bound. */
    n = fake_model(t);
    for (int k = 0; k < 600; k++) {
        fake *x = &t[n + k];
        memset(x, 0, sizeof *x);
        snprintf(x->name, sizeof x->name, "x.%d", k);
        x->dtype = "F32";
        x->ndim = 1;
        x->begin = x->end = -1;
    }
    write_fake("many.safetensors", t, n + 600, -1);
    write_million();

    /* Indexes, each with its bad entry first. */
    make_dir("index_missing_file");
    write_text("index_missing_file/model.safetensors.index.json",
               "{\"weight_map\": {\"model.embed_tokens.weight\": "
               "\"model-00009-of-00009.safetensors\"}}");
    make_dir("index_slash");
    write_text("index_slash/model.safetensors.index.json",
               "{\"weight_map\": {\"model.embed_tokens.weight\": "
               "\"../single_F32/model.safetensors\"}}");
    make_dir("index_dotdot");
    write_text("index_dotdot/model.safetensors.index.json",
               "{\"weight_map\": {\"model.embed_tokens.weight\": \"..\"}}");
    make_dir("index_number");
    write_text("index_number/model.safetensors.index.json",
               "{\"metadata\": {\"total_size\": 4}, \"weight_map\": {\"model.embed_tokens."
               "weight\": 3}}");
    make_dir("index_no_map");
    write_text("index_no_map/model.safetensors.index.json", "{\"metadata\": {}}");
    make_dir("empty_dir");

    /* Split: every parameter in rest.safetensors but one, which is alone
     * (with a wrong shape) in lone.safetensors; and an index leaving out
     * lm_head. */
    make_dir("split");
    n = fake_model(t);
    fake lone = t[LONE_PARAM];
    lone.shape[0] = 13;
    t[LONE_PARAM] = t[n - 1];
    write_fake("split/rest.safetensors", t, n - 1, -1);
    write_fake("split/lone.safetensors", &lone, 1, -1);
    size_t cap = 64 * 1024, len = 0;
    char *bad = malloc(cap), *missing = malloc(cap);
    ZT_REQUIRE(bad && missing);
    len = (size_t)snprintf(bad, cap, "{\"weight_map\": {");
    size_t mlen = (size_t)snprintf(missing, cap, "{\"weight_map\": {");
    for (int p = 0; p < PARAMS; p++) {
        len += (size_t)snprintf(bad + len, cap - len, "%s\"%s\": \"%s\"", p ? ", " : "",
                                params[p].name,
                                p == LONE_PARAM ? "lone.safetensors" : "rest.safetensors");
        if (strcmp(params[p].name, "lm_head.weight") != 0)
            mlen += (size_t)snprintf(missing + mlen, cap - mlen, "%s\"%s\": \"rest.safetensors\"",
                                     p ? ", " : "", params[p].name);
    }
    snprintf(bad + len, cap - len, "}}\n");
    snprintf(missing + mlen, cap - mlen, "}}\n");
    write_text("split/bad.index.json", bad);
    write_text("split/missing.index.json", missing);
    free(bad);
    free(missing);
    return zt_finish("test_hf_import prepare");
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_hf_import prepare|run|hostile <work dir> [save]\n");
        return 2;
    }
    snprintf(work, sizeof work, "%s", argv[2]);
    if (strcmp(argv[1], "prepare") == 0) return prepare();

    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (strcmp(argv[1], "run") == 0) {
        static const char *const dtypes[] = {"F32", "BF16", "F16"};
        for (int layout = 0; layout < 2; layout++)
            for (int d = 0; d < 3; d++)
                for (int stage = 0; stage < 4; stage++)
                    import_good(layout ? "sharded" : "single", dtypes[d], stage,
                                /* each way of naming the checkpoint, somewhere */
                                stage == 1 && d == layout);
        hostile_all();
        if (argc > 3 && strcmp(argv[3], "save") == 0) {
            /* The export test's inputs: bf16 training (its default export
             * dtype) from the sharded BF16 files, F16 from the single file
             * without a config, F32 from the sharded files. */
            save_import("sharded_BF16", 3, "bf16", 1, "saved_bf16");
            save_import("single_F16", 2, "fp32", 0, "saved_f16");
            save_import("sharded_F32", 1, "fp32", 1, "saved_f32");
        }
    } else {
        hostile_all();
    }
    const int failures = zt_finish("test_hf_import");
    MPI_Finalize();
    return failures;
}

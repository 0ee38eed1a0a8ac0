/* Writes the synthetic checkpoint of fixture.h with zeroshard's own format
 * modules (safetensors writer, manifest serializer, atomic file writes), so
 * zs-ckpt can be tested without a training run:
 *
 *   make_fixture <root> <dump.f32> [--extra-tensor] [--hostile-names]
 *                [--world-size N]
 *
 * creates <root>/step_00000010/ (manifest.json, manifest.json.xxh3, and
 * rank0000{0,1}.{master,optim,user}.safetensors), <root>/latest naming it,
 * and <dump.f32>: every parameter's master values concatenated in manifest
 * order as raw little-endian float32, what an fp32 export must contain.
 * --extra-tensor adds a tensor to rank 1's master file that the manifest does
 * not list (the file's size and hash in the manifest still match), which
 * `zs-ckpt verify` must reject. --hostile-names gives unit 0 and parameter 0
 * names holding characters a terminal obeys (ESC, a C1 control, the
 * bidirectional override U+202E and isolate U+2066), consistently in the
 * manifest and the shards, so the checkpoint still verifies; --world-size N
 * writes N as the manifest's world size (the shards stay those of 2 ranks).
 * Exits 1 with a message on any failure. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "core/config.h"
#include "fs_path.h"
#include "fixture.h"

#define FX_FILES_PER_RANK 3
#define FX_MAX_TENSORS_PER_FILE 8

static int die(const char *what) {
    fprintf(stderr, "make_fixture: %s: %s\n", what, zs_last_error());
    return 1;
}

/* A file being planned: its tensors, their values and manifest records. */
typedef struct fx_file {
    zs__ckpt_file_kind kind;
    int count;
    zs__st_tensor_spec specs[FX_MAX_TENSORS_PER_FILE];
    char names[FX_MAX_TENSORS_PER_FILE][64];
    zs__ckpt_state states[FX_MAX_TENSORS_PER_FILE];
    int params[FX_MAX_TENSORS_PER_FILE];
    int64_t offsets[FX_MAX_TENSORS_PER_FILE];
    int64_t counts[FX_MAX_TENSORS_PER_FILE];
    int listed[FX_MAX_TENSORS_PER_FILE]; /* 0 for the stray tensor of --extra-tensor */
    void *data[FX_MAX_TENSORS_PER_FILE];
} fx_file;

static void add(fx_file *f, const char *name, zs__ckpt_state state, int param, int64_t offset,
                int64_t count, void *data, size_t elem, int listed) {
    int k = f->count++;
    snprintf(f->names[k], sizeof f->names[k], "%s", name);
    f->specs[k].name = f->names[k];
    f->specs[k].dtype = elem == 1 ? ZS_ST_U8 : ZS_ST_F32;
    f->specs[k].ndim = 1;
    f->specs[k].shape[0] = count;
    f->specs[k].data = data;
    f->specs[k].bytes = (uint64_t)count * elem;
    f->states[k] = state;
    f->params[k] = param;
    f->offsets[k] = offset;
    f->counts[k] = count;
    f->listed[k] = listed;
    f->data[k] = data;
}

static float *values(int p, int64_t begin, int64_t end, int state) {
    float *v = malloc(sizeof *v * (size_t)(end - begin));
    if (!v) abort();
    for (int64_t i = begin; i < end; i++) v[i - begin] = fx_value(p, i, state);
    return v;
}

/* The hostile names of --hostile-names: valid UTF-8 (a manifest refuses
 * anything else) with ESC, C1's CSI (U+009B), RIGHT-TO-LEFT OVERRIDE
 * (U+202E) and LEFT-TO-RIGHT ISOLATE (U+2066). */
#define FX_HOSTILE_UNIT "embed\x1b[31m\xc2\x9b" "2J\xe2\x80\xae" "dac"
#define FX_HOSTILE_PARAM "embed\xe2\x81\xa6.weight\x1b]0;x\x07"

int main(int argc, char **argv) {
    int extra = 0, hostile = 0;
    long long world_size = FX_RANKS;
    int bad = argc < 3;
    for (int i = 3; i < argc && !bad; i++) {
        if (strcmp(argv[i], "--extra-tensor") == 0) extra = 1;
        else if (strcmp(argv[i], "--hostile-names") == 0) hostile = 1;
        else if (strcmp(argv[i], "--world-size") == 0 && i + 1 < argc)
            world_size = strtoll(argv[++i], NULL, 10);
        else bad = 1;
    }
    if (bad) {
        fprintf(stderr, "usage: make_fixture <root> <dump.f32> [--extra-tensor] "
                        "[--hostile-names] [--world-size N]\n");
        return 2;
    }
    const char *root = argv[1];
    /* Parameter p's name, in the manifest and in the shards' keys. */
    const char *param_name[FX_PARAMS];
    for (int p = 0; p < FX_PARAMS; p++)
        param_name[p] = hostile && p == 0 ? FX_HOSTILE_PARAM : fx_params[p].name;
    char step_dir[4096], path[4096 + 128];
    snprintf(step_dir, sizeof step_dir, "%s/%s", root, FX_STEP_DIR);
    if (zt_fs_mkdir(root) != ZS_OK) return die("mkdir root");
    if (zt_fs_mkdir(step_dir) != ZS_OK) return die("mkdir step");

    static const char *const kind_names[FX_FILES_PER_RANK] = {"master", "optim", "user"};
    static const char *const state_suffix[3] = {"", ":exp_avg", ":exp_avg_sq"};
    fx_file files[FX_RANKS][FX_FILES_PER_RANK];
    memset(files, 0, sizeof files);
    static unsigned char epoch[8] = {3, 0, 0, 0, 0, 0, 0, 0};
    static unsigned char rng[FX_RANKS][5] = {{1, 2, 3, 4, 5}, {9, 8, 7, 6, 5}};
    static float stray[3] = {1.0f, 2.0f, 3.0f};

    for (int r = 0; r < FX_RANKS; r++) {
        for (int k = 0; k < FX_FILES_PER_RANK; k++) files[r][k].kind = (zs__ckpt_file_kind)k;
        for (int p = 0; p < FX_PARAMS; p++) {
            const fx_param *fp = &fx_params[p];
            int64_t b = r == 0 ? 0 : fp->split, e = r == 0 ? fp->split : fp->numel;
            if (b == e) continue; /* this rank owns nothing of the parameter */
            for (int s = 0; s < 3; s++) {
                char key[64];
                snprintf(key, sizeof key, "%s%s", param_name[p], state_suffix[s]);
                add(&files[r][s == 0 ? 0 : 1], key, (zs__ckpt_state)s, p, b, e - b,
                    values(p, b, e, s), sizeof(float), 1);
            }
        }
        if (r == 0)
            add(&files[r][2], "global:epoch", ZS_CKPT_STATE_USER_GLOBAL, -1, 0, sizeof epoch,
                epoch, 1, 1);
        add(&files[r][2], "rank:rng", ZS_CKPT_STATE_USER_RANK, -1, 0, sizeof rng[r], rng[r], 1, 1);
        if (extra && r == 1)
            add(&files[r][0], "stray", ZS_CKPT_STATE_MASTER, 0, 0, 3, stray, sizeof(float), 0);
    }

    int tensors = 0;
    for (int r = 0; r < FX_RANKS; r++)
        for (int k = 0; k < FX_FILES_PER_RANK; k++)
            for (int t = 0; t < files[r][k].count; t++) tensors += files[r][k].listed[t];
    zs__manifest *m = NULL;
    if (zs__manifest_alloc(FX_UNITS, FX_PARAMS, FX_RANKS * FX_FILES_PER_RANK, tensors, &m) !=
        ZS_OK)
        return die("manifest alloc");
    m->version = ZS_CKPT_VERSION;
    m->step = FX_STEP;
    m->skipped_total = 2;
    m->world_size = (int)world_size;
    m->stage = 3;
    m->config_hash = 0x0123456789abcdefull;
    m->compute_dtype = ZS_DTYPE_FP32;
    m->optimizer = ZS_OPTIMIZER_ADAMW;
    m->scaler.scale = 1.0;
    m->scaler.cur_iter = FX_STEP + 2;
    m->scaler.last_overflow_iter = -1;
    m->scaler.cur_hysteresis = 2;
    for (int u = 0; u < FX_UNITS; u++)
        snprintf(m->units[u].name, sizeof m->units[u].name, "%s",
                 hostile && u == 0 ? FX_HOSTILE_UNIT : fx_units[u]);
    for (int p = 0; p < FX_PARAMS; p++) {
        zs__ckpt_param *cp = &m->params[p];
        snprintf(cp->name, sizeof cp->name, "%s", param_name[p]);
        cp->unit = fx_params[p].unit;
        cp->ndim = fx_params[p].ndim;
        for (int d = 0; d < cp->ndim; d++) cp->shape[d] = fx_params[p].shape[d];
        cp->flags = fx_params[p].flags;
    }

    /* Each file: its offsets in the metadata (as the format allows), written
     * with the real writer, whose hashes and size go into the manifest. */
    int ti = 0;
    for (int r = 0; r < FX_RANKS; r++) {
        for (int k = 0; k < FX_FILES_PER_RANK; k++) {
            fx_file *f = &files[r][k];
            const int fi = r * FX_FILES_PER_RANK + k;
            zs__ckpt_file *cf = &m->files[fi];
            snprintf(cf->name, sizeof cf->name, "rank%05d.%s.safetensors", r, kind_names[k]);
            cf->rank = r;
            cf->kind = f->kind;
            char meta_keys[FX_MAX_TENSORS_PER_FILE][80], meta_values[FX_MAX_TENSORS_PER_FILE][32];
            zs__st_meta meta[FX_MAX_TENSORS_PER_FILE + 6];
            int nmeta = 0;
            /* What the runtime's save writes, which every reader checks. */
            char step_text[24], rank_text[24], world_text[24];
            snprintf(step_text, sizeof step_text, "%d", FX_STEP);
            snprintf(rank_text, sizeof rank_text, "%d", r);
            snprintf(world_text, sizeof world_text, "%d", FX_RANKS);
            meta[nmeta].key = "format";
            meta[nmeta++].value = "zeroshard-shard";
            meta[nmeta].key = "version";
            meta[nmeta++].value = "1";
            meta[nmeta].key = "step";
            meta[nmeta++].value = step_text;
            meta[nmeta].key = "rank";
            meta[nmeta++].value = rank_text;
            meta[nmeta].key = "world_size";
            meta[nmeta++].value = world_text;
            meta[nmeta].key = "kind";
            meta[nmeta++].value = kind_names[k];
            for (int t = 0; t < f->count; t++) {
                snprintf(meta_keys[t], sizeof meta_keys[t], "%s@offset", f->names[t]);
                snprintf(meta_values[t], sizeof meta_values[t], "%" PRId64, f->offsets[t]);
                meta[nmeta].key = meta_keys[t];
                meta[nmeta++].value = meta_values[t];
            }
            uint64_t hashes[FX_MAX_TENSORS_PER_FILE];
            snprintf(path, sizeof path, "%s/%s", step_dir, cf->name);
            if (zs__st_write(path, f->specs, f->count, meta, nmeta, NULL, NULL, hashes, &cf->xxh3,
                             &cf->bytes) != ZS_OK)
                return die(path);
            for (int t = 0; t < f->count; t++) {
                if (!f->listed[t]) continue;
                zs__ckpt_tensor *ct = &m->tensors[ti++];
                ct->file = fi;
                snprintf(ct->key, sizeof ct->key, "%s", f->names[t]);
                ct->state = f->states[t];
                ct->param = f->params[t];
                ct->offset = f->offsets[t];
                ct->count = f->counts[t];
                ct->xxh3 = hashes[t];
            }
        }
    }

    char *json = NULL;
    size_t bytes = 0;
    if (zs__manifest_to_json(m, &json, &bytes) != ZS_OK) return die("manifest to json");
    if (zt_fs_write_atomic(step_dir, "manifest.json", json, bytes) != ZS_OK)
        return die("manifest.json");
    char hash_text[32];
    snprintf(hash_text, sizeof hash_text, "%016" PRIx64 "\n", (uint64_t)XXH3_64bits(json, bytes));
    if (zt_fs_write_atomic(step_dir, "manifest.json.xxh3", hash_text, strlen(hash_text)) != ZS_OK)
        return die("manifest.json.xxh3");
    if (zt_fs_write_atomic(root, "latest", FX_STEP_DIR "\n", strlen(FX_STEP_DIR "\n")) != ZS_OK)
        return die("latest");
    free(json);

    /* The expected fp32 export: master values per parameter, in order, as
     * raw little-endian float32 (this test runs on little-endian hosts). */
    FILE *dump = fopen(argv[2], "wb");
    if (!dump) {
        fprintf(stderr, "make_fixture: cannot create %s\n", argv[2]);
        return 1;
    }
    for (int p = 0; p < FX_PARAMS; p++) {
        float *v = values(p, 0, fx_params[p].numel, 0);
        if (fwrite(v, sizeof *v, (size_t)fx_params[p].numel, dump) != (size_t)fx_params[p].numel) {
            fprintf(stderr, "make_fixture: cannot write %s\n", argv[2]);
            return 1;
        }
        free(v);
    }
    if (fclose(dump) != 0) {
        fprintf(stderr, "make_fixture: cannot write %s\n", argv[2]);
        return 1;
    }
    for (int r = 0; r < FX_RANKS; r++)
        for (int k = 0; k < 2; k++)
            for (int t = 0; t < files[r][k].count; t++)
                if (files[r][k].data[t] != stray) free(files[r][k].data[t]);
    zs__manifest_free(m);
    return 0;
}

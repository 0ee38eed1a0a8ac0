/* zs-estimate: per-rank memory of a model under each ZeRO stage, before
 * running anything.
 *
 *   zs-estimate <layout> [--config FILE] [--set group.key=value]... [--dtype D]
 *               [--world N] [--device-memory SIZE] [--gathers N]
 *
 * The numbers are zs_estimate_memory's, which runs the memory plan zs_build
 * allocates from (src/zero/memory_plan.c): a built context's
 * zs_memory_report shows exactly these bytes right after zs_build (a test,
 * tests/estimate, checks it for many layouts and configurations). Layout
 * sources, the output and the inverse questions are described in
 * usage_text below. Exit status: 0 success, 1 a file or the configuration
 * cannot be used (the message names the file and what is wrong), 2 usage. */
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "ckpt_tool.h"
#include "core/config.h"
#include "core/memory.h"
#include "core/number.h"
#include "gpt2_llmc.h"
#include "gpt2_model.h"
#include "llama_model.h"
#include "zero/comm_plan.h"
#include "zero/memory_plan.h"
#include "zeroshard.h"

#define EXIT_FAILED 1
#define EXIT_USAGE 2

/* The inverse search (no --world) tries every world size up to this. */
#define ZS_ESTIMATE_MAX_WORLD 65536
#define ZS_ESTIMATE_MAX_SETS 256
/* The learning rate of the default configuration: optimizer.lr is required
 * by the runtime but changes no buffer size. */
#define ZS_ESTIMATE_DEFAULT_CONFIG "optimizer: { lr = 0.0001; };\n"

static const char usage_text[] =
    "usage: zs-estimate <layout> [options]\n"
    "\n"
    "Prints, per rank, the bytes zs_build allocates for every memory tag under\n"
    "ZeRO stages 0-3 (the same planning code as zs_build, so a built context's\n"
    "zs_memory_report shows exactly these numbers), the model-state total, and\n"
    "the ZeRO paper's formula beside it. Activations, the program's own buffers\n"
    "and the CUDA context are not included; the numbers are the CPU backend's\n"
    "(on CUDA the same buffers live on the device, plus small staging buffers).\n"
    "The comm row follows the collectives: MPI's ring staging (comm.segment_bytes);\n"
    "with --set backend=\"cuda\", none for NCCL (comm.impl \"auto\" is planned as one\n"
    "GPU per rank), or that plus comm.staging_bytes of pinned host staging with\n"
    "comm.impl = \"mpi\" (ranks sharing a GPU).\n"
    "Each stage has a column per offload.optimizer setting: none, host and nvme\n"
    "(nvme: stages 1-3; its nvme_state row is disk, left out of the total).\n"
    "Below each table, the bytes a step sends inside nodes and across nodes\n"
    "(src/zero/comm_plan.c, what the runtime's counters show): every rank together,\n"
    "and the rank that sends the most across; nodes are comm.ranks_per_node\n"
    "consecutive ranks (one node when it is 0), so --set comm.ranks_per_node=8\n"
    "for nodes of 8 GPUs. The step: gradient_accumulation_steps micro-steps, in\n"
    "stage 3 each unit gathered --gathers times per micro-step; see docs/NODES.md.\n"
    "\n"
    "Layout (one of):\n"
    "  --preset 124M|350M|774M|1558M   GPT-2 as the example trainer registers it:\n"
    "                      unit 0 = embeddings and final LayerNorm, one unit per block\n"
    "  --llmc FILE         an llm.c model file (gpt2_124M.bin): sizes from its header,\n"
    "                      then the GPT-2 layout\n"
    "  --llama tiny|llama-3.2-1b|llama-3.1-8b|llama-3.1-70b   the Llama family as its\n"
    "                      trainer registers it: unit 0 = the token embedding (and the\n"
    "                      final norm when the head is tied), one unit per block, and\n"
    "                      the final norm with lm_head for an untied head\n"
    "  --hf-config FILE    a Hugging Face config.json of the Llama family (llama,\n"
    "                      mistral, qwen2): its sizes, then the Llama layout\n"
    "  --checkpoint DIR    a zeroshard checkpoint step directory or root (resolved as\n"
    "                      zs-ckpt info resolves it): units and parameters of its\n"
    "                      manifest. Without --config its compute dtype and optimizer\n"
    "                      are used.\n"
    "  --safetensors FILE  a safetensors file's header (F32, F16, BF16 and U8 tensors):\n"
    "                      tensors in the order of their data in the file; a unit is a\n"
    "                      run of consecutive tensors whose names share the prefix up\n"
    "                      to and including the first all-digit component\n"
    "                      (\"transformer.h.3.\"), or, for names without one, the first\n"
    "                      component (\"wte.\"); --unit-per-tensor makes every tensor a\n"
    "                      unit. Empty tensors are skipped.\n"
    "  A bare argument is read by its form: a preset name (GPT-2's or Llama's), a\n"
    "  directory (checkpoint), a *config.json (Hugging Face), a *.safetensors file,\n"
    "  or another file (llm.c).\n"
    "\n"
    "Options:\n"
    "  --config FILE       the run's libconfig file (default: every default, with\n"
    "                      optimizer.lr set); zero.stage is replaced by each stage\n"
    "  --set group.key=value   an override, as the runtime's (repeatable, in order)\n"
    "  --dtype fp32|bf16|fp16  shortcut for --set precision.dtype=...\n"
    "  --world N           ranks (1..65536)\n"
    "  --device-memory SIZE    memory per rank, e.g. 80GiB (B, KiB, MiB, GiB, TiB =\n"
    "                      powers of 1024; KB, MB, GB, TB = powers of 1000). With\n"
    "                      --world: which stages fit (total per rank <= SIZE).\n"
    "                      Without: the smallest world size (1..65536) at which each\n"
    "                      stage fits.\n"
    "  --unit-per-tensor   see --safetensors\n"
    "  --lora R            (Llama layouts) LoRA as llama_train registers it with\n"
    "                      app.lora_r = R: the model frozen, and per block a unit of\n"
    "                      adapters, A [R][in] and B [out][R] of each adapted Linear\n"
    "  --lora-targets LIST the adapted Linears: q_proj,v_proj (default, PEFT's), any\n"
    "                      of q_proj k_proj v_proj o_proj gate_proj up_proj down_proj,\n"
    "                      or all-linear\n"
    "  --freeze GLOB       freeze the units whose names match GLOB (fnmatch; repeatable):\n"
    "                      every parameter ZS_PARAM_FROZEN, as a fine-tune's base. They\n"
    "                      have no gradient, master or moments, and count under the\n"
    "                      frozen tag (\"model.layers.*\" freezes every Llama block).\n"
    "  --gathers N         stage-3 gathers of each unit per micro-step, for the\n"
    "                      bytes per step (default 2: the forward's and the\n"
    "                      backward's)\n"
    "  -h, --help          this text\n"
    "\n"
    "The paper's per-rank model state (Rajbhandari et al., ZeRO, 2020), with Psi\n"
    "parameters, N ranks and K bytes of optimizer state per parameter (K = 12 for\n"
    "mixed-precision Adam: fp32 master, momentum and variance):\n"
    "  stage 0: (2+2+K)Psi   stage 1: 2Psi+2Psi+K*Psi/N   stage 2: 2Psi+(2+K)Psi/N\n"
    "  stage 3: (2+2+K)Psi/N\n"
    "zeroshard differs by the padding of each unit to a multiple of N x zero.align\n"
    "elements; in fp32 it keeps no separate master copy (parameters and gradients\n"
    "take 4 bytes each instead); with gradient accumulation the stage-2/3 gradient\n"
    "shard is fp32 (precision.accumulate_dtype).\n"
    "\n"
    "Exit status: 0 success, 1 a file or the configuration cannot be used, 2 usage.\n";

/* ------------------------------------------------------------------ layout */

typedef struct layout {
    char source[128];     /* for the report: "GPT-2 124M (preset)" */
    int unit_count, param_count;
    int *params_per_unit; /* [unit_count] */
    int64_t *param_numel; /* [param_count] */
    char (*unit_names)[256];
    unsigned *param_flags; /* [param_count]: ZS_PARAM_FROZEN from --freeze */
    int frozen_units;
    int64_t numel;        /* Psi */
    int skipped_empty;    /* safetensors tensors of no elements */
    /* From a checkpoint, when no --config replaces them. */
    int have_saved;
    zs_dtype saved_dtype;
    int saved_optimizer;
} layout;

static void layout_free(layout *l) {
    free(l->params_per_unit);
    free(l->param_numel);
    free(l->unit_names);
    free(l->param_flags);
    memset(l, 0, sizeof *l);
}

static int layout_alloc(layout *l, int units, int params) {
    l->params_per_unit = calloc((size_t)(units > 0 ? units : 1), sizeof *l->params_per_unit);
    l->param_numel = calloc((size_t)(params > 0 ? params : 1), sizeof *l->param_numel);
    l->unit_names = calloc((size_t)(units > 0 ? units : 1), sizeof *l->unit_names);
    l->param_flags = calloc((size_t)(params > 0 ? params : 1), sizeof *l->param_flags);
    if (!l->params_per_unit || !l->param_numel || !l->unit_names || !l->param_flags) {
        fprintf(stderr, "zs-estimate: out of memory for a layout of %d tensors\n", params);
        return 0;
    }
    return 1;
}

/* GPT-2 through gpt2_model's table: the trainer's units, in its order. */
static int layout_gpt2(layout *l, const gpt2_dims *d) {
    char err[256];
    if (gpt2_dims_check(d, err, sizeof err) != 0) {
        fprintf(stderr, "zs-estimate: %s: %s\n", l->source, err);
        return 0;
    }
    const int units = gpt2_num_units(d);
    const int params = GPT2_EMBED_PARAMS + (units - 1) * GPT2_BLOCK_PARAMS;
    if (!layout_alloc(l, units, params)) return 0;
    l->unit_count = units;
    for (int u = 0; u < units; u++) {
        const int n = gpt2_unit_num_params(d, u);
        l->params_per_unit[u] = n;
        gpt2_unit_name(d, u, l->unit_names[u], sizeof l->unit_names[u]);
        for (int i = 0; i < n; i++) {
            gpt2_param_spec spec;
            gpt2_param_spec_get(d, u, i, &spec);
            l->param_numel[l->param_count++] = spec.numel;
            l->numel += spec.numel;
        }
    }
    return 1;
}

static int load_preset(layout *l, const char *name) {
    gpt2_dims d;
    if (gpt2_dims_preset(name, &d) != 0) {
        fprintf(stderr, "zs-estimate: unknown --preset \"%s\" (124M, 350M, 774M or 1558M)\n\n%s",
                name, usage_text);
        return -EXIT_USAGE;
    }
    snprintf(l->source, sizeof l->source, "GPT-2 %s (preset)", name);
    return layout_gpt2(l, &d) ? 0 : -EXIT_FAILED;
}

static int load_llmc(layout *l, const char *path) {
    gpt2_llmc_model *m = NULL;
    char err[EX_ERR_CAP];
    if (gpt2_llmc_model_open(path, &m, err, sizeof err) != 0) {
        fprintf(stderr, "zs-estimate: %s\n", err);
        return -EXIT_FAILED;
    }
    const gpt2_llmc_config *c = gpt2_llmc_model_config(m);
    const gpt2_dims d = {c->num_layers, c->num_heads, c->channels, c->vocab_size, c->max_seq_len};
    gpt2_llmc_model_destroy(m);
    snprintf(l->source, sizeof l->source, "GPT-2 from llm.c file %.80s (%d layers, %d channels)",
             path, d.n_layer, d.n_embd);
    return layout_gpt2(l, &d) ? 0 : -EXIT_FAILED;
}

/* --lora R and --lora-targets: LoRA's adapter units on a Llama layout, as
 * llama_train registers them with app.lora_r (examples/trainer/ex_lora.h):
 * every unit of the model frozen, then per block a unit of A [R][in] and B
 * [out][R] for each adapted Linear (bit t of lora_targets: Linear t in
 * llama_lora_target order; default q_proj and v_proj, PEFT's). */
static int lora_r = 0;
static unsigned lora_targets = (1u << LLAMA_LORA_Q) | (1u << LLAMA_LORA_V);

/* --lora-targets: "all-linear" or module names separated by commas (the
 * last component of llama_lora_target_name); 0 on anything else. */
static int parse_lora_targets(const char *text, unsigned *out) {
    if (strcmp(text, "all-linear") == 0) {
        *out = (1u << LLAMA_LORA_TARGETS) - 1u;
        return 1;
    }
    unsigned targets = 0;
    for (const char *p = text;; p++) {
        const size_t n = strcspn(p, ",");
        int found = -1;
        for (int t = 0; t < LLAMA_LORA_TARGETS && found < 0; t++) {
            const char *name = strrchr(llama_lora_target_name(t), '.') + 1;
            if (strlen(name) == n && strncmp(name, p, n) == 0) found = t;
        }
        if (found < 0) return 0;
        targets |= 1u << found;
        p += n;
        if (*p == '\0') break;
    }
    *out = targets;
    return 1;
}

/* The Llama family through llama_model's table: the trainer's units, in its
 * order (examples/llama/llama_family.c), and LoRA's adapters when asked. */
static int layout_llama(layout *l, const llama_dims *d) {
    char err[512];
    if (llama_dims_check(d, err, sizeof err) != 0) {
        fprintf(stderr, "zs-estimate: %s: %s\n", l->source, err);
        return 0;
    }
    const int base_units = llama_num_units(d), lora = lora_r > 0;
    int base_params = 0, per_block = 0;
    for (int u = 0; u < base_units; u++) base_params += llama_unit_num_params(d, u);
    for (int t = 0; lora && t < LLAMA_LORA_TARGETS; t++)
        per_block += 2 * !!(lora_targets & (1u << t));
    const int units = base_units + (lora ? d->n_layer : 0);
    if (!layout_alloc(l, units, base_params + (lora ? d->n_layer * per_block : 0))) return 0;
    l->unit_count = units;
    for (int u = 0; u < base_units; u++) {
        const int n = llama_unit_num_params(d, u);
        l->params_per_unit[u] = n;
        llama_unit_name(d, u, l->unit_names[u], sizeof l->unit_names[u]);
        for (int i = 0; i < n; i++) {
            llama_param_spec spec;
            llama_param_spec_get(d, u, i, &spec);
            l->param_flags[l->param_count] = lora ? ZS_PARAM_FROZEN : 0u;
            l->param_numel[l->param_count++] = spec.numel;
            l->numel += spec.numel;
        }
    }
    for (int b = 0; lora && b < d->n_layer; b++) {
        const int u = base_units + b;
        char block[200];
        llama_unit_name(d, 1 + b, block, sizeof block);
        snprintf(l->unit_names[u], sizeof l->unit_names[u], "%s.lora", block);
        l->params_per_unit[u] = per_block;
        for (int t = 0; t < LLAMA_LORA_TARGETS; t++) {
            if (!(lora_targets & (1u << t))) continue;
            int in = 0, out = 0;
            llama_lora_target_shape(d, t, &in, &out);
            l->param_numel[l->param_count++] = (int64_t)lora_r * in;
            l->param_numel[l->param_count++] = (int64_t)out * lora_r;
            l->numel += (int64_t)lora_r * (in + out);
        }
    }
    return 1;
}

static int load_llama(layout *l, const char *name) {
    llama_dims d;
    if (llama_dims_preset(name, &d) != 0) {
        fprintf(stderr, "zs-estimate: unknown --llama \"%s\" (tiny, llama-3.2-1b, llama-3.1-8b "
                        "or llama-3.1-70b)\n\n%s", name, usage_text);
        return -EXIT_USAGE;
    }
    snprintf(l->source, sizeof l->source, "Llama %s (preset)", name);
    return layout_llama(l, &d) ? 0 : -EXIT_FAILED;
}

static int load_hf_config(layout *l, const char *path) {
    llama_dims d;
    char err[1024];
    if (llama_config_read(path, &d, err, sizeof err) != 0) {
        fprintf(stderr, "zs-estimate: %s\n", err);
        return -EXIT_FAILED;
    }
    snprintf(l->source, sizeof l->source, "%s from %.80s (%d layers, %d channels)", d.model_type,
             path, d.n_layer, d.n_embd);
    return layout_llama(l, &d) ? 0 : -EXIT_FAILED;
}

static int load_checkpoint(layout *l, const char *dir) {
    zs__ckpt_step step;
    if (zs__tool_open(dir, &step, NULL) != ZS_OK) {
        fprintf(stderr, "zs-estimate: %s\n", zs_last_error());
        return -EXIT_FAILED;
    }
    const zs__manifest *m = step.m;
    int ok = layout_alloc(l, m->unit_count, m->param_count);
    /* The manifest lists parameters in registration order, unit by unit;
     * a manifest that does not would fail the runtime's own checks. */
    for (int p = 0; ok && p < m->param_count; p++) {
        const zs__ckpt_param *param = &m->params[p];
        const int prev = p ? m->params[p - 1].unit : 0;
        if (param->unit < prev || param->unit >= m->unit_count) {
            fprintf(stderr, "zs-estimate: %s: parameter %s is listed out of its unit's order\n",
                    step.path, param->name);
            ok = 0;
            break;
        }
        l->params_per_unit[param->unit]++;
        l->param_numel[p] = zs__ckpt_param_numel(param);
        l->numel += l->param_numel[p];
    }
    if (ok) {
        l->unit_count = m->unit_count;
        l->param_count = m->param_count;
        for (int u = 0; u < m->unit_count; u++)
            snprintf(l->unit_names[u], sizeof l->unit_names[u], "%s", m->units[u].name);
        snprintf(l->source, sizeof l->source, "checkpoint %.100s", step.path);
        l->have_saved = 1;
        l->saved_dtype = m->compute_dtype;
        l->saved_optimizer = m->optimizer;
    }
    zs__ckpt_step_close(&step);
    return ok ? 0 : -EXIT_FAILED;
}

/* Bytes of the unit key of a tensor name: through the first all-digit
 * component and its dot ("transformer.h.3."), else the first component
 * and its dot ("wte."), else the whole name. */
static size_t unit_key_len(const char *name) {
    for (const char *c = name;;) {
        const char *dot = strchr(c, '.');
        const size_t len = dot ? (size_t)(dot - c) : strlen(c);
        size_t digits = 0;
        while (digits < len && isdigit((unsigned char)c[digits])) digits++;
        if (len > 0 && digits == len) return (size_t)(c - name) + len + (dot ? 1 : 0);
        if (!dot) break;
        c = dot + 1;
    }
    const char *dot = strchr(name, '.');
    return dot ? (size_t)(dot - name) + 1 : strlen(name);
}

static const zs__st_file *sort_file;
static int compare_begin(const void *a, const void *b) {
    const zs__st_entry *x = zs__st_entry_at(sort_file, *(const int *)a);
    const zs__st_entry *y = zs__st_entry_at(sort_file, *(const int *)b);
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int load_safetensors(layout *l, const char *path, int unit_per_tensor) {
    zs__st_file *f = NULL;
    if (zs__st_open(path, &f) != ZS_OK) {
        fprintf(stderr, "zs-estimate: %s\n", zs_last_error());
        return -EXIT_FAILED;
    }
    const int n = zs__st_count(f);
    int *order = malloc(sizeof *order * (size_t)(n > 0 ? n : 1));
    int ok = order && layout_alloc(l, n, n);
    if (ok) {
        for (int i = 0; i < n; i++) order[i] = i;
        sort_file = f;
        qsort(order, (size_t)n, sizeof *order, compare_begin);
    }
    const char *prev_key = NULL;
    size_t prev_len = 0;
    for (int i = 0; ok && i < n; i++) {
        const zs__st_entry *e = zs__st_entry_at(f, order[i]);
        int64_t numel = 1;
        for (int d = 0; d < e->ndim; d++) numel *= e->shape[d]; /* checked by zs__st_open */
        if (numel == 0) {
            l->skipped_empty++;
            continue;
        }
        const size_t len = unit_per_tensor ? strlen(e->name) : unit_key_len(e->name);
        if (unit_per_tensor || !prev_key || len != prev_len || memcmp(prev_key, e->name, len) != 0) {
            char *name = l->unit_names[l->unit_count++];
            snprintf(name, sizeof l->unit_names[0], "%.*s", (int)len, e->name);
            if (len > 1 && name[len - 1] == '.') name[len - 1] = '\0';
        }
        prev_key = e->name;
        prev_len = len;
        l->params_per_unit[l->unit_count - 1]++;
        l->param_numel[l->param_count++] = numel;
        l->numel += numel;
    }
    if (ok && l->param_count == 0) {
        fprintf(stderr, "zs-estimate: %s: the file holds no tensor with elements\n", path);
        ok = 0;
    }
    if (ok) snprintf(l->source, sizeof l->source, "safetensors %.100s", path);
    free(order);
    zs__st_close(f);
    return ok ? 0 : -EXIT_FAILED;
}

/* A bare layout argument, by its form. */
static int load_guess(layout *l, const char *arg, int unit_per_tensor) {
    gpt2_dims d;
    if (gpt2_dims_preset(arg, &d) == 0) return load_preset(l, arg);
    llama_dims ld;
    if (llama_dims_preset(arg, &ld) == 0) return load_llama(l, arg);
    struct stat st;
    if (stat(arg, &st) != 0) {
        fprintf(stderr, "zs-estimate: %s: %s (not a preset name either: 124M, 350M, 774M, "
                        "1558M, tiny, llama-3.2-1b, llama-3.1-8b, llama-3.1-70b)\n",
                arg, strerror(errno));
        return -EXIT_FAILED;
    }
    if (S_ISDIR(st.st_mode)) return load_checkpoint(l, arg);
    const size_t len = strlen(arg);
    if (len >= 11 && strcmp(arg + len - 11, "config.json") == 0) return load_hf_config(l, arg);
    if (len >= 12 && strcmp(arg + len - 12, ".safetensors") == 0)
        return load_safetensors(l, arg, unit_per_tensor);
    return load_llmc(l, arg);
}

/* ------------------------------------------------------------ arguments */

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "zs-estimate: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", usage_text);
    return EXIT_USAGE;
}

/* ---------------------------------------------------------------- output */

static uint64_t model_state(const zs_memory_stats *m) {
    return m->current[ZS_MEM_PARAMS] + m->current[ZS_MEM_FROZEN] + m->current[ZS_MEM_GRADS] +
           m->current[ZS_MEM_MASTER] +
           m->current[ZS_MEM_OPTIM] + m->current[ZS_MEM_HOST_STATE] + m->current[ZS_MEM_HOST_PARAMS] +
           m->current[ZS_MEM_NVME_STATE];
}

/* Offload options: one column each in the tables; a mode adds its name
 * here and the overrides that select it. */
typedef struct offload_mode {
    const char *name;
    const char *overrides[3]; /* applied after zero.stage; NULL-terminated */
} offload_mode;
/* Every mode sets the key, since the configuration keeps the last value.
 * The NVMe tier's sizes do not depend on where its directory is. */
static const offload_mode offload_modes[] = {
    {"none", {"offload.optimizer=\"none\"", NULL}},
    {"host", {"offload.optimizer=\"host\"", NULL}},
    {"nvme", {"offload.nvme_path=\"/\"", "offload.optimizer=\"nvme\"", NULL}}};
#define OFFLOAD_MODES ((int)(sizeof offload_modes / sizeof offload_modes[0]))

typedef struct run_info {
    zs_config *cfg;
    const layout *l;
    zs_dtype dtype;
    int moments;    /* fp32 optimizer buffers per element: the paper's K = 4 + 4 x moments */
    int accumulate; /* the stage-2/3 gradient shard is fp32 (accumulation) */
    int gathers;    /* --gathers: stage-3 gathers of each unit per micro-step */
} run_info;

/* The estimate of one stage and offload mode on `world` ranks. The stage and
 * the mode's keys are applied as one list, validated once: one at a time,
 * the previous mode's keys could refuse the new stage (nvme with stage 0)
 * before the new mode replaced them. */
static zs_status estimate(const run_info *r, int stage, int mode, int world, zs_memory_stats *out) {
    char assignment[64];
    snprintf(assignment, sizeof assignment, "zero.stage=%d", stage);
    const char *list[4];
    int n = 0;
    for (int i = 0; offload_modes[mode].overrides[i]; i++) list[n++] = offload_modes[mode].overrides[i];
    list[n++] = assignment;
    zs_status s = zs_config_override_list(r->cfg, n, list);
    if (s != ZS_OK) return s;
    return zs_estimate_memory_flags(r->cfg, world, r->l->unit_count, r->l->params_per_unit,
                                    r->l->param_numel, r->l->param_flags, out);
}

/* The paper's model state per rank, with 2-byte parameters and gradients. */
static double paper_bytes(int stage, double psi, double n, double k) {
    switch (stage) {
    case 0: return (2 + 2 + k) * psi;
    case 1: return 2 * psi + 2 * psi + k * psi / n;
    case 2: return 2 * psi + (2 + k) * psi / n;
    default: return (2 + 2 + k) * psi / n;
    }
}

static const char *const paper_text[4] = {"(2+2+K)Psi", "2Psi+2Psi+K*Psi/N", "2Psi+(2+K)Psi/N",
                                          "(2+2+K)Psi/N"};

/* One cell of a table: bytes, human-readable and exact, or n/a. */
static void print_cell(int planned, uint64_t bytes) {
    char h[32];
    if (!planned) printf("  %10s %18s", "n/a", "");
    else printf("  %10s %18" PRIu64, zs__bytes_text(h, sizeof h, (double)bytes), bytes);
}

/* The bytes one step sends (zero/comm_plan.h), under the stage's settings
 * without offload (where the optimizer runs moves nothing between ranks). */
static void print_bytes(const run_info *r, int stage, int world) {
    zs_memory_stats m;
    if (estimate(r, stage, 0, world, &m) != ZS_OK) return;
    const zs__settings *s = zs__config_settings(r->cfg);
    zs__step_bytes job, busiest;
    if (zs__comm_plan_estimate(s, world, r->l->unit_count, r->l->params_per_unit,
                               r->l->param_numel, r->gathers, &job, &busiest) != ZS_OK) {
        printf("  %-24s  cannot be worked out: %s\n", "bytes per step", zs_last_error());
        return;
    }
    int per_node = world;
    if (zs__estimate_node_size(s, world, &per_node) != ZS_OK) return; /* as estimate() said */
    char a[32], b[32];
    printf("  %-24s  inside nodes %s (%" PRIu64 "), across nodes %s (%" PRIu64 "): every rank, "
           "%d node%s of %d\n", "bytes per step",
           zs__bytes_text(a, sizeof a, (double)zs__step_bytes_intra(&job)),
           zs__step_bytes_intra(&job), zs__bytes_text(b, sizeof b, (double)zs__step_bytes_inter(&job)),
           zs__step_bytes_inter(&job), (world + per_node - 1) / per_node,
           world > per_node ? "s" : "", per_node);
    printf("  %-24s  inside nodes %s (%" PRIu64 "), across nodes %s (%" PRIu64 "): the rank "
           "sending the most across\n", "",
           zs__bytes_text(a, sizeof a, (double)zs__step_bytes_intra(&busiest)),
           zs__step_bytes_intra(&busiest),
           zs__bytes_text(b, sizeof b, (double)zs__step_bytes_inter(&busiest)),
           zs__step_bytes_inter(&busiest));
}

static int print_stage(const run_info *r, int stage, int world) {
    zs_memory_stats m[OFFLOAD_MODES];
    int planned[OFFLOAD_MODES];
    for (int o = 0; o < OFFLOAD_MODES; o++) {
        planned[o] = estimate(r, stage, o, world, &m[o]) == ZS_OK;
        /* An offload mode may not exist in a stage (nvme in stage 0): its
         * column says so; the stage itself must plan without offload. */
        if (!planned[o] && o == 0) {
            printf("stage %d: cannot be planned: %s\n\n", stage, zs_last_error());
            return 0;
        }
    }
    char h[32], title[64];
    snprintf(title, sizeof title, "stage %d on %d rank%s", stage, world, world == 1 ? "" : "s");
    printf("%-26s", title);
    for (int o = 0; o < OFFLOAD_MODES; o++) {
        char column[64];
        snprintf(column, sizeof column, "offload: %s", offload_modes[o].name);
        printf("  %29s", column);
    }
    printf("\n");
    for (int t = 0; t < ZS_MEM_TAG_COUNT; t++) {
        printf("  %-24s", zs_mem_tag_name((zs_mem_tag)t));
        for (int o = 0; o < OFFLOAD_MODES; o++)
            print_cell(planned[o], m[o].current[t]);
        printf("\n");
    }
    printf("  %-24s", "model state");
    for (int o = 0; o < OFFLOAD_MODES; o++) print_cell(planned[o], model_state(&m[o]));
    printf("\n  %-24s", "total per rank");
    for (int o = 0; o < OFFLOAD_MODES; o++) print_cell(planned[o], m[o].total_current);
    printf("\n");
    if (stage == 3) {
        /* The shard every rank owns: the stage-3 parameters, in elements
         * (in host memory with offload.params = "host"). */
        const uint64_t shard = (m[0].current[ZS_MEM_PARAMS] + m[0].current[ZS_MEM_HOST_PARAMS]) /
                               zs_dtype_size(r->dtype);
        const zs__settings *set = zs__config_settings(r->cfg);
        const int n = set->zero.shard_group == ZS_SHARD_GROUP_NODE && set->comm.ranks_per_node > 0
                          ? (int)set->comm.ranks_per_node
                          : world;
        printf("  %-24s  %" PRIu64 " elements (Psi/N = %.0f, plus padding)\n", "shard per rank",
               shard, ceil((double)r->l->numel / n));
    }
    const double k = 4.0 + 4.0 * r->moments;
    /* Hybrid sharding (zero.shard_group = "node") shards over one node's
     * ranks: the paper's N is the node, not the world. */
    const zs__settings *s = zs__config_settings(r->cfg);
    const int n = s->zero.shard_group == ZS_SHARD_GROUP_NODE && s->comm.ranks_per_node > 0
                      ? (int)s->comm.ranks_per_node
                      : world;
    if (n != world)
        printf("  %-24s  %d nodes of %d ranks: sharded over a node (N = %d), replicated across "
               "nodes\n", "zero.shard_group", world / n, n, n);
    const double paper = paper_bytes(stage, (double)r->l->numel, n, k);
    const double diff = (double)model_state(&m[0]) - paper;
    printf("  %-24s  %s = %.0f bytes (%s), K = %.0f\n", "ZeRO paper", paper_text[stage], paper,
           zs__bytes_text(h, sizeof h, paper), k);
    printf("  %-24s  %+.0f bytes: ", "estimate - paper", diff);
    if (r->l->frozen_units)
        printf("frozen units keep only their parameters (frozen), no gradient, master or "
               "moments, where the formula trains every parameter; and padding\n");
    else if (r->dtype == ZS_DTYPE_FP32)
        printf("in fp32 zeroshard keeps no separate master copy (parameters and gradients "
               "take 4 bytes instead of the paper's 2 plus a 4-byte master); the rest is "
               "padding\n");
    else if (r->accumulate && stage >= 2)
        printf("the gradient shard is fp32 under gradient accumulation, and padding\n");
    else if (diff == 0)
        printf("none: no unit needed padding\n");
    else
        printf("padding (each unit to a multiple of N x zero.align elements)\n");
    print_bytes(r, stage, world);
    printf("\n");
    return 1;
}

/* What must fit the device: the tags that live there (offloaded state and
 * host buffers do not). */
static uint64_t device_share(const zs_memory_stats *m) {
    uint64_t sum = 0;
    for (int t = 0; t < ZS_MEM_TAG_COUNT; t++)
        if (zs__mem_tag_on_device((zs_mem_tag)t)) sum += m->current[t];
    return sum;
}

/* --device-memory: fits with the given world, or the smallest world, for
 * every offload mode; what must fit is the device's share of the estimate. */
static void print_fit_mode(const run_info *r, uint64_t memory, int world, int mode) {
    char h[32], hm[32];
    zs__bytes_text(hm, sizeof hm, (double)memory);
    printf("device memory %s (%" PRIu64 " bytes) per rank, offload %s:\n", hm, memory,
           offload_modes[mode].name);
    for (int stage = 0; stage < 4; stage++) {
        zs_memory_stats m;
        if (world > 0) {
            if (estimate(r, stage, mode, world, &m) != ZS_OK) {
                printf("  stage %d cannot be planned on %d ranks: %s\n", stage, world,
                       zs_last_error());
                continue;
            }
            printf("  stage %d %s on %d rank%s: %s per rank\n", stage,
                   device_share(&m) <= memory ? "fits" : "does not fit", world, world == 1 ? "" : "s",
                   zs__bytes_text(h, sizeof h, (double)device_share(&m)));
            continue;
        }
        int found = 0;
        uint64_t smallest = UINT64_MAX;
        const char *error = NULL;
        char error_copy[512];
        for (int n = 1; n <= ZS_ESTIMATE_MAX_WORLD; n++) {
            if (estimate(r, stage, mode, n, &m) != ZS_OK) {
                snprintf(error_copy, sizeof error_copy, "%s", zs_last_error());
                error = error_copy;
                break;
            }
            if (device_share(&m) < smallest) smallest = device_share(&m);
            if (device_share(&m) <= memory) {
                found = n;
                break;
            }
        }
        if (found)
            printf("  stage %d fits from %d rank%s: %s per rank\n", stage, found,
                   found == 1 ? "" : "s", zs__bytes_text(h, sizeof h, (double)device_share(&m)));
        else if (error)
            printf("  stage %d cannot be planned: %s\n", stage, error);
        else
            printf("  stage %d does not fit on up to %d ranks (at least %s per rank)\n", stage,
                   ZS_ESTIMATE_MAX_WORLD, zs__bytes_text(h, sizeof h, (double)smallest));
    }
}

static void print_fit(const run_info *r, uint64_t memory, int world) {
    for (int mode = 0; mode < OFFLOAD_MODES; mode++) print_fit_mode(r, memory, world, mode);
}


/* ------------------------------------------------------------------ main */

/* The default configuration: a temporary file, since the runtime reads
 * configurations from files only. */
static zs_status load_default_config(zs_config **out) {
    const char *dir = getenv("TMPDIR");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/zs-estimate-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) {
        fprintf(stderr, "zs-estimate: cannot create %s for the default configuration: %s\n", path,
                strerror(errno));
        return ZS_ERR_IO;
    }
    const size_t len = strlen(ZS_ESTIMATE_DEFAULT_CONFIG);
    const int written = write(fd, ZS_ESTIMATE_DEFAULT_CONFIG, len) == (ssize_t)len;
    close(fd);
    zs_status s = written ? zs_config_load(path, out) : ZS_ERR_IO;
    unlink(path);
    if (s != ZS_OK) fprintf(stderr, "zs-estimate: the default configuration: %s\n", zs_last_error());
    return s;
}

static const char *optimizer_text(int kind) {
    return kind == ZS_OPTIMIZER_SGD ? "sgd" : kind == ZS_OPTIMIZER_ADAM ? "adam" : "adamw";
}

static int takes_value(const char *option) {
    static const char *const options[] = {"--preset", "--llmc",  "--checkpoint", "--llama",
                                           "--hf-config",
                                           "--safetensors", "--config", "--set",
                                           "--dtype", "--world", "--device-memory", "--gathers",
                                           "--freeze", "--lora", "--lora-targets"};
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
        if (strcmp(option, options[i]) == 0) return 1;
    return 0;
}

int main(int argc, char **argv) {
    const char *preset = NULL, *llmc = NULL, *checkpoint = NULL, *safetensors = NULL;
    const char *llama = NULL, *hf_config = NULL;
    const char *bare = NULL, *config_path = NULL, *dtype_text = NULL;
    const char *sets[ZS_ESTIMATE_MAX_SETS];
    const char *freeze[ZS_ESTIMATE_MAX_SETS];
    int freeze_count = 0;
    int set_count = 0, world = 0, unit_per_tensor = 0, sources = 0, gathers = 2;
    uint64_t memory = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (takes_value(a) && i + 1 == argc) return usage_error("%s needs a value", a);
#define VALUE(name) argv[++i]
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage_text, stdout);
            return 0;
        } else if (strcmp(a, "--preset") == 0) {
            preset = VALUE(a);
            sources++;
        } else if (strcmp(a, "--llmc") == 0) {
            llmc = VALUE(a);
            sources++;
        } else if (strcmp(a, "--llama") == 0) {
            llama = VALUE(a);
            sources++;
        } else if (strcmp(a, "--hf-config") == 0) {
            hf_config = VALUE(a);
            sources++;
        } else if (strcmp(a, "--checkpoint") == 0) {
            checkpoint = VALUE(a);
            sources++;
        } else if (strcmp(a, "--safetensors") == 0) {
            safetensors = VALUE(a);
            sources++;
        } else if (strcmp(a, "--config") == 0) {
            config_path = VALUE(a);
        } else if (strcmp(a, "--set") == 0) {
            const char *v = VALUE(a);
            if (set_count == ZS_ESTIMATE_MAX_SETS) return usage_error("%s", "too many --set");
            if (!strchr(v, '=')) return usage_error("--set \"%s\" is not group.key=value", v);
            sets[set_count++] = v;
        } else if (strcmp(a, "--dtype") == 0) {
            dtype_text = VALUE(a);
            if (strcmp(dtype_text, "fp32") && strcmp(dtype_text, "bf16") && strcmp(dtype_text, "fp16"))
                return usage_error("unknown --dtype \"%s\" (fp32, bf16 or fp16)", dtype_text);
        } else if (strcmp(a, "--world") == 0) {
            if (zs__number_option_int(a, VALUE(a), 1, ZS_ESTIMATE_MAX_WORLD, &world) != ZS_OK)
                return usage_error("%s", zs_last_error());
        } else if (strcmp(a, "--device-memory") == 0) {
            int64_t bytes = 0;
            if (zs__number_option_size(a, VALUE(a), 1, INT64_MAX, &bytes) != ZS_OK)
                return usage_error("%s", zs_last_error());
            memory = (uint64_t)bytes;
        } else if (strcmp(a, "--lora") == 0) {
            if (zs__number_option_int(a, VALUE(a), 1, 65536, &lora_r) != ZS_OK)
                return usage_error("%s", zs_last_error());
        } else if (strcmp(a, "--lora-targets") == 0) {
            const char *v = VALUE(a);
            if (!parse_lora_targets(v, &lora_targets))
                return usage_error("--lora-targets \"%s\": a comma-separated list of q_proj, "
                                   "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, or "
                                   "all-linear", v);
        } else if (strcmp(a, "--freeze") == 0) {
            if (freeze_count == ZS_ESTIMATE_MAX_SETS) return usage_error("%s", "too many --freeze");
            freeze[freeze_count++] = VALUE(a);
        } else if (strcmp(a, "--gathers") == 0) {
            if (zs__number_option_int(a, VALUE(a), 0, 1000, &gathers) != ZS_OK)
                return usage_error("%s", zs_last_error());
        } else if (strcmp(a, "--unit-per-tensor") == 0) {
            unit_per_tensor = 1;
        } else if (a[0] == '-' && a[1] != '\0') {
            return usage_error("unknown option %s", a);
        } else if (!bare) {
            bare = a;
            sources++;
        } else {
            return usage_error("unexpected argument %s", a);
        }
#undef VALUE
    }
    if (sources != 1)
        return usage_error("%s", sources ? "give one layout, not several"
                                         : "missing the layout (--preset, --llmc, --llama, "
                                           "--hf-config, --checkpoint, --safetensors or a bare "
                                           "argument)");
    if (world == 0 && memory == 0)
        return usage_error("%s", "give --world N (and/or --device-memory SIZE to ask which "
                                 "world size fits)");
    if (unit_per_tensor && !safetensors && !bare)
        return usage_error("%s", "--unit-per-tensor applies to safetensors files");

    layout l;
    memset(&l, 0, sizeof l);
    int rc = preset        ? load_preset(&l, preset)
             : llmc        ? load_llmc(&l, llmc)
             : llama       ? load_llama(&l, llama)
             : hf_config   ? load_hf_config(&l, hf_config)
             : checkpoint  ? load_checkpoint(&l, checkpoint)
             : safetensors ? load_safetensors(&l, safetensors, unit_per_tensor)
                           : load_guess(&l, bare, unit_per_tensor);
    if (rc < 0) {
        layout_free(&l);
        return -rc;
    }

    zs_config *cfg = NULL;
    if (config_path) {
        if (zs_config_load(config_path, &cfg) != ZS_OK) {
            fprintf(stderr, "zs-estimate: %s\n", zs_last_error());
            layout_free(&l);
            return EXIT_FAILED;
        }
    } else if (load_default_config(&cfg) != ZS_OK) {
        layout_free(&l);
        return EXIT_FAILED;
    }
    /* Overrides in order: the checkpoint's dtype and optimizer (when no
     * file says otherwise), --dtype, then every --set. */
    char saved[2][64], dtype_set[64];
    const char *all[ZS_ESTIMATE_MAX_SETS + 3];
    int n = 0;
    if (l.have_saved && !config_path) {
        snprintf(saved[0], sizeof saved[0], "precision.dtype=%s", zs_dtype_name(l.saved_dtype));
        snprintf(saved[1], sizeof saved[1], "optimizer.type=%s", optimizer_text(l.saved_optimizer));
        all[n++] = saved[0];
        all[n++] = saved[1];
    }
    if (dtype_text) {
        snprintf(dtype_set, sizeof dtype_set, "precision.dtype=%s", dtype_text);
        all[n++] = dtype_set;
    }
    for (int i = 0; i < set_count; i++) all[n++] = sets[i];
    if (n > 0 && zs_config_override_list(cfg, n, all) != ZS_OK) {
        fprintf(stderr, "zs-estimate: an override (--dtype, --set) was refused: %s\n",
                zs_last_error());
        zs_config_destroy(cfg);
        layout_free(&l);
        return EXIT_USAGE;
    }

    /* --freeze: every parameter of a matching unit frozen; a pattern that
     * matches nothing is a typo. */
    for (int f = 0; f < freeze_count; f++) {
        int matched = 0;
        for (int u = 0, p = 0; u < l.unit_count; u++) {
            const int hit = fnmatch(freeze[f], l.unit_names[u], 0) == 0;
            for (int i = 0; i < l.params_per_unit[u]; i++, p++)
                if (hit) l.param_flags[p] |= ZS_PARAM_FROZEN;
            matched += hit;
        }
        if (!matched) {
            fprintf(stderr, "zs-estimate: --freeze \"%s\" matches no unit of %s (units are "
                            "named like \"%s\")\n", freeze[f], l.source, l.unit_names[0]);
            zs_config_destroy(cfg);
            layout_free(&l);
            return EXIT_USAGE;
        }
    }
    for (int u = 0, p = 0; u < l.unit_count; u++) {
        l.frozen_units += l.params_per_unit[u] > 0 && (l.param_flags[p] & ZS_PARAM_FROZEN);
        p += l.params_per_unit[u];
    }

    /* What the report needs to explain itself, from the validated settings. */
    const zs__settings *settings = zs__config_settings(cfg);
    run_info r = {cfg, &l, settings->precision.dtype,
                  settings->optimizer.kind == ZS_OPTIMIZER_SGD
                      ? (settings->optimizer.momentum > 0 ? 1 : 0)
                      : 2,
                  settings->gradient_accumulation_steps > 1 &&
                      settings->precision.accumulate_dtype == ZS_ACCUMULATE_DTYPE_FP32,
                  gathers};

    char h[32];
    int64_t largest = 0;
    int largest_unit = 0;
    for (int u = 0, p = 0; u < l.unit_count; u++) {
        int64_t sum = 0;
        for (int i = 0; i < l.params_per_unit[u]; i++) sum += l.param_numel[p++];
        if (sum > largest) largest = sum, largest_unit = u;
    }
    printf("layout         %s\n", l.source);
    printf("               %d units, %d tensors, Psi = %" PRId64 " parameters (%s in fp32)\n",
           l.unit_count, l.param_count, l.numel, zs__bytes_text(h, sizeof h, 4.0 * (double)l.numel));
    printf("               largest unit %s: %" PRId64 " elements\n", l.unit_names[largest_unit],
           largest);
    if (l.skipped_empty) printf("               %d empty tensors skipped\n", l.skipped_empty);
    if (l.frozen_units)
        printf("               %d of %d units frozen: no gradient, master or "
               "moments\n", l.frozen_units, l.unit_count);
    printf("config         %s: %s, %s\n",
           config_path ? config_path : "defaults (optimizer.lr set)", zs_dtype_name(r.dtype),
           optimizer_text(settings->optimizer.kind));
    for (int i = 0; i < n; i++)
        printf("               override %s%s\n", all[i],
               i < 2 && l.have_saved && !config_path ? " (as the checkpoint was saved)" : "");
    printf("\n");

    rc = 0;
    if (world > 0)
        for (int stage = 0; stage < 4; stage++) print_stage(&r, stage, world);
    if (memory > 0) print_fit(&r, memory, world);
    zs_config_destroy(cfg);
    layout_free(&l);
    return rc;
}

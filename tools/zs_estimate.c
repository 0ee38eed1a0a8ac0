/* zs-estimate: per-rank memory of a model under each ZeRO stage, before
 * running anything.
 *
 *   zs-estimate <layout> [--config FILE] [--set group.key=value]... [--dtype D]
 *               [--world N] [--device-memory SIZE] [--stage N] [--gathers N]
 *               [--lora R [--lora-targets LIST] [--lora-dropout P] [--qlora nf4|int8]]
 *               [--batch B] [--seq T] [--recompute]
 *
 * The numbers are zs_estimate_memory's, which runs the memory plan zs_build
 * allocates from (src/zero/memory_plan.c): a built context's
 * zs_memory_report shows exactly these bytes right after zs_build (a test,
 * tests/estimate, checks it for many layouts and configurations). Layout
 * sources, the output and the inverse questions are described in
 * usage_text below. For Llama layouts, --batch/--seq add llama_train's own
 * device memory (workspace_make: its activations, as tests/estimate/
 * test_estimate_workspace.c checks against the trainer's code on the CPU),
 * and --qlora registers QLoRA's quantized base (docs/QLORA.md). Exit
 * status: 0 success, 1 a file or the configuration cannot be used (the
 * message names the file and what is wrong), 2 usage. */
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
#include "core/error.h"
#include "core/memory.h"
#include "core/number.h"
#include "gpt2_llmc.h"
#include "gpt2_model.h"
#include "llama_model.h"
#include "zero/comm_plan.h"
#include "zero/memory_plan.h"
#include "zero/quant_record.h"
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
    "the ZeRO paper's formula beside it. Activations and the program's own buffers\n"
    "are not included, except llama_train's for a Llama layout given --batch or\n"
    "--seq (below); the CUDA context never is. The runtime's numbers are the CPU\n"
    "backend's (on CUDA the same buffers live on the device, plus small staging\n"
    "buffers).\n"
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
    "  --lora-dropout P    app.lora_dropout = P (0 <= P < 1): the dropout's scratch in\n"
    "                      llama_train's workspace (--batch, --seq)\n"
    "  --qlora nf4|int8    (with --lora) QLoRA as llama_train registers it: each block's\n"
    "                      matrices ZS_PARAM_FROZEN | ZS_PARAM_QUANTIZE, stored quantized\n"
    "                      (zero.frozen_storage, set to this unless the configuration\n"
    "                      sets it: 4- or 8-bit values and one fp32 scale per\n"
    "                      zero.frozen_block elements, in the frozen tag, or host_params\n"
    "                      with offload.params = \"host\" in stage 3), and the block's\n"
    "                      1-D tensors (norms, biases) in a frozen unit \"<block>.norms\"\n"
    "                      (registered after the adapters); the embedding and the head\n"
    "                      stay in the compute dtype\n"
    "  --batch B, --seq T  (Llama layouts) add llama_train's own device memory for\n"
    "                      micro-batches of B sequences of T tokens (defaults: app.batch_size\n"
    "                      and app.seq_len of the configuration, else 8 and the model's\n"
    "                      longest up to 2048): the activations it prints (the residual\n"
    "                      stream, each block's saved activations, the stream's gradient,\n"
    "                      the blocks' scratch with the attention's T x T scores, the\n"
    "                      head's), sized as the configured backend's layers size them\n"
    "                      (backend \"cuda\", else the CPU's), its RoPE table, QLoRA's one\n"
    "                      dequantized matrix and its token buffers: rows \"device total\"\n"
    "                      (the device's tags and these) and \"host total\" follow each\n"
    "                      table, and --device-memory counts them\n"
    "  --recompute         app.recompute = true: one block's saved activations,\n"
    "                      recomputed in backward (default: the configuration's)\n"
    "  --freeze GLOB       freeze the units whose names match GLOB (fnmatch; repeatable):\n"
    "                      every parameter ZS_PARAM_FROZEN, as a fine-tune's base. They\n"
    "                      have no gradient, master or moments, and count under the\n"
    "                      frozen tag (\"model.layers.*\" freezes every Llama block).\n"
    "  --stage N           print stage N's table and fit only (default: stages 0-3)\n"
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
    /* A Llama layout: its dims (llama_train's workspace), and with --qlora
     * the block units of ZS_PARAM_QUANTIZE matrices and the largest of
     * those matrices (the one dequantized copy), in elements. */
    int llama;
    llama_dims dims;
    int quantizable_units;
    int64_t largest_quantizable;
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
 * llama_lora_target order; default q_proj and v_proj, PEFT's). --qlora
 * (QLoRA, ex_lora.h's quantizable families): each block's matrices
 * ZS_PARAM_QUANTIZE in its unit, its 1-D tensors in a unit "<block>.norms"
 * of their own, registered after every other unit (ex_lora.c); the format
 * is zero.frozen_storage's. */
static int lora_r = 0;
static unsigned lora_targets = (1u << LLAMA_LORA_Q) | (1u << LLAMA_LORA_V);
static const char *qlora = NULL; /* "nf4" or "int8" */
static int only_stage = -1;      /* --stage: one stage's table and fit, -1: all four */

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

/* Appends table unit u of a Llama layout as a unit named its name and
 * `suffix`, with its tensors of `ndim` dimensions (0: all), each flagged
 * `flags`. */
static void llama_unit_add(layout *l, const llama_dims *d, int u, const char *suffix, int ndim,
                           unsigned flags) {
    const int unit = l->unit_count++;
    char name[200];
    llama_unit_name(d, u, name, sizeof name);
    snprintf(l->unit_names[unit], sizeof l->unit_names[unit], "%s%s", name, suffix);
    for (int i = 0; i < llama_unit_num_params(d, u); i++) {
        llama_param_spec spec;
        llama_param_spec_get(d, u, i, &spec);
        if (ndim && spec.ndim != ndim) continue;
        l->params_per_unit[unit]++;
        l->param_flags[l->param_count] = flags;
        l->param_numel[l->param_count++] = spec.numel;
        l->numel += spec.numel;
        if ((flags & ZS_PARAM_QUANTIZE) && spec.numel > l->largest_quantizable)
            l->largest_quantizable = spec.numel;
    }
}

/* The Llama family through llama_model's table: the trainer's units, in its
 * order (examples/llama/llama_family.c), and LoRA's adapters when asked. */
static int layout_llama(layout *l, const llama_dims *d) {
    char err[512];
    if (llama_dims_check(d, err, sizeof err) != 0) {
        fprintf(stderr, "zs-estimate: %s: %s\n", l->source, err);
        return 0;
    }
    const int base_units = llama_num_units(d), lora = lora_r > 0, split = lora && qlora;
    int base_params = 0, per_block = 0;
    for (int u = 0; u < base_units; u++) base_params += llama_unit_num_params(d, u);
    for (int t = 0; lora && t < LLAMA_LORA_TARGETS; t++)
        per_block += 2 * !!(lora_targets & (1u << t));
    const int units = base_units + (lora ? d->n_layer : 0) + (split ? d->n_layer : 0);
    if (!layout_alloc(l, units, base_params + (lora ? d->n_layer * per_block : 0))) return 0;
    l->llama = 1;
    l->dims = *d;
    const unsigned frozen = lora ? ZS_PARAM_FROZEN : 0u;
    for (int u = 0; u < base_units; u++) {
        const int block = split && llama_unit_block(d, u) >= 0;
        llama_unit_add(l, d, u, "", block ? 2 : 0, frozen | (block ? ZS_PARAM_QUANTIZE : 0u));
        l->quantizable_units += block;
    }
    for (int b = 0; lora && b < d->n_layer; b++) {
        const int u = l->unit_count++;
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
    /* QLoRA: each block's 1-D tensors, after every other unit. */
    for (int b = 0; split && b < d->n_layer; b++) llama_unit_add(l, d, 1 + b, ".norms", 1, frozen);
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

/* llama_train's own device memory beside the runtime's (--batch, --seq):
 * what examples/llama/llama_family.c's start() allocates, in its order,
 * sized as the layers of its backend size it:
 *   the activations (ex_stream_alloc, examples/trainer/ex_stream.c; what
 *   llama_train prints as "activations"): the residual stream [L + 1][BT][C],
 *   the saved activations (llama_block_acts_bytes: L blocks, or one with
 *   app.recompute), the stream's gradient 2 x [BT][C], the blocks' scratch
 *   and the head's (llama_layers.c: block_sizes, head_sizes, over the
 *   device's attention and classifier scratch: nn_cpu_layers.c, or
 *   nn_cuda_layers.cu, nn_cuda_attention.cu and nn_cuda_classifier.cu);
 *   the RoPE table (2 x [T][hd / 2] fp32); with QLoRA one dequantized
 *   matrix, the largest, in the compute dtype (and in fp32 where the device
 *   computes in fp32 on other parameters: the CPU's); the trainer's token
 *   buffers (tokens, targets, losses: 3 x [BT] x 4 bytes).
 * The CUDA layers compute in the compute dtype and align scratch to
 * NN_ALIGN; the CPU's (and the simulated device's) compute in fp32 and
 * align to 4 bytes. tests/estimate/test_estimate_workspace.c checks the CPU's
 * against the trainer's own code; the CUDA formulas follow its sources. */
enum {
    WS_RESIDUAL, WS_SAVED, WS_GRAD, WS_BLOCK, WS_HEAD, WS_ACTIVATIONS, WS_ROPE, WS_MATRIX,
    WS_TOKENS, WS_TOTAL, WS_ROWS
};
static const char *const ws_row[WS_ROWS] = {
    "residual stream", "saved activations", "stream gradient", "block scratch", "head scratch",
    "activations", "RoPE table", "dequantized matrix", "token buffers", "workspace total"};

typedef struct workspace {
    int on;              /* a Llama layout with --batch or --seq (or their app keys) */
    int B, T, recompute, cuda;
    double dropout;
    int64_t chunk_rows;  /* app.head_chunk_rows, 0: the backend's default */
    nn_dtype t;          /* the layers' dtype */
    uint64_t bytes[WS_ROWS];
} workspace;

static uint64_t round_to(uint64_t bytes, uint64_t align) {
    return (bytes + align - 1) / align * align;
}

static uint64_t u64max(uint64_t a, uint64_t b) { return a > b ? a : b; }

static void workspace_make(const layout *l, const zs__settings *s, workspace *w) {
    const llama_dims *d = &l->dims;
    w->cuda = s->backend == ZS_BACKEND_CUDA;
    w->t = !w->cuda                                 ? NN_F32
           : s->precision.dtype == ZS_DTYPE_BF16 ? NN_BF16
           : s->precision.dtype == ZS_DTYPE_FP16 ? NN_F16
                                                 : NN_F32;
    if (w->chunk_rows == 0) w->chunk_rows = w->cuda ? 1024 : 128; /* llama_family.c */
    const uint64_t e = nn_dtype_size(w->t), a = w->cuda ? NN_ALIGN : sizeof(float);
    const uint64_t B = (uint64_t)w->B, T = (uint64_t)w->T, BT = B * T, L = (uint64_t)d->n_layer;
    const uint64_t C = (uint64_t)d->n_embd, F = (uint64_t)d->n_ff, V = (uint64_t)d->vocab;
    const uint64_t NH = (uint64_t)d->n_head, NKV = (uint64_t)d->n_kv_head;
    const uint64_t hd = (uint64_t)d->head_dim, Q = NH * hd, W = (NH + 2 * NKV) * hd;
    uint64_t *b = w->bytes;
    memset(b, 0, sizeof w->bytes);
    b[WS_RESIDUAL] = (L + 1) * BT * C * e;
    b[WS_SAVED] = (w->recompute ? 1 : L) * (uint64_t)llama_block_acts_bytes(d, w->B, w->T, w->t);
    b[WS_GRAD] = 2 * BT * C * e;
    /* The block: d gate | d up or d qkv, d xn2 / d atty / d xn1, LoRA's
     * [BT][r] pair, the dropout's pair over the widest input of any
     * target, and the attention's: CPU one sequence's fp32 score
     * gradients; CUDA the batch's score gradients and the head-layout
     * buffers. */
    b[WS_BLOCK] = round_to(BT * u64max(2 * F, W) * e, a) + round_to(BT * u64max(C, Q) * e, a);
    if (lora_r > 0) b[WS_BLOCK] += 2 * round_to(BT * (uint64_t)lora_r * e, a);
    if (lora_r > 0 && w->dropout > 0) {
        int widest = 0;
        for (int t = 0; t < LLAMA_LORA_TARGETS; t++) {
            int in = 0, out = 0;
            llama_lora_target_shape(d, t, &in, &out);
            widest = in > widest ? in : widest;
        }
        b[WS_BLOCK] += 2 * round_to(BT * (uint64_t)widest * e, a);
    }
    b[WS_BLOCK] += w->cuda ? round_to(B * NH * T * T * e, NN_ALIGN) +
                                 3 * round_to(B * NH * T * hd * e, NN_ALIGN) +
                                 4 * round_to(B * NKV * T * hd * e, NN_ALIGN)
                           : 4 * NH * T * T;
    /* The head, per chunk of R rows: model.norm's output and its input
     * gradient, the rstd, and the logits (CUDA: rows padded to 64 columns,
     * then one fp32 row). */
    const uint64_t R = (uint64_t)w->chunk_rows < BT ? (uint64_t)w->chunk_rows : BT;
    const uint64_t Vp = (V + 63) / 64 * 64;
    b[WS_HEAD] = 2 * round_to(R * C * e, a) + round_to(R * 4, a) +
                 (w->cuda ? round_to(R * Vp * e, NN_ALIGN) + round_to(Vp * 4, NN_ALIGN)
                          : 4 * R * V);
    for (int i = WS_RESIDUAL; i < WS_ACTIVATIONS; i++) b[WS_ACTIVATIONS] += b[i];
    b[WS_ROPE] = 2 * T * (hd / 2) * 4;
    if (l->quantizable_units > 0 && s->zero.frozen_storage != ZS_FROZEN_COMPUTE) {
        const uint64_t n = (uint64_t)l->largest_quantizable;
        const uint64_t elem = zs_dtype_size(s->precision.dtype);
        b[WS_MATRIX] = n * elem + (nn_dtype_size(w->t) != elem ? n * 4 : 0);
    }
    b[WS_TOKENS] = 3 * BT * 4;
    b[WS_TOTAL] = b[WS_ACTIVATIONS] + b[WS_ROPE] + b[WS_MATRIX] + b[WS_TOKENS];
}

static void print_workspace(const layout *l, const workspace *w) {
    const llama_dims *d = &l->dims;
    char h[32];
    printf("workspace      llama_train's own device memory (examples/llama/llama_family.c): "
           "%s layers in %s,\n               B = %d, T = %d, %s", w->cuda ? "CUDA" : "CPU",
           nn_dtype_name(w->t), w->B, w->T,
           w->recompute ? "one block's activations, recomputed in backward (app.recompute)"
                        : "every block's activations kept (app.recompute = false)");
    if (lora_r > 0) printf(", LoRA r %d, dropout %g", lora_r, w->dropout);
    printf(";\n               L = %d, C = %d, NH = %d, hd = %d, V = %d\n", d->n_layer, d->n_embd,
           d->n_head, d->head_dim, d->vocab);
    char what[WS_ROWS][160];
    memset(what, 0, sizeof what);
    snprintf(what[WS_RESIDUAL], sizeof what[0], "(L + 1) x B T x C");
    snprintf(what[WS_SAVED], sizeof what[0], "%s the softmax B x NH x T x T",
             w->recompute ? "one block's set, with" : "L blocks' sets, each with");
    snprintf(what[WS_GRAD], sizeof what[0], "2 x B T x C");
    snprintf(what[WS_BLOCK], sizeof what[0], "%s",
             w->cuda ? "with the score gradients B x NH x T x T" : "with one sequence's fp32 "
                                                                  "score gradients NH x T x T");
    snprintf(what[WS_HEAD], sizeof what[0], "%" PRId64 " rows of logits (app.head_chunk_rows)",
             w->chunk_rows < (int64_t)w->B * w->T ? w->chunk_rows : (int64_t)w->B * w->T);
    snprintf(what[WS_ACTIVATIONS], sizeof what[0], "the above: what llama_train prints as "
             "\"activations\"");
    snprintf(what[WS_ROPE], sizeof what[0], "2 x T x hd / 2 fp32");
    if (w->bytes[WS_MATRIX])
        snprintf(what[WS_MATRIX], sizeof what[0], "QLoRA: one matrix at a time, the largest "
                 "(%" PRId64 " elements), in %s", l->largest_quantizable,
                 w->cuda ? nn_dtype_name(w->t) : "the compute dtype and fp32");
    else
        snprintf(what[WS_MATRIX], sizeof what[0], "none: no quantized base");
    snprintf(what[WS_TOKENS], sizeof what[0], "tokens, targets, losses: 3 x B T x 4 bytes");
    snprintf(what[WS_TOTAL], sizeof what[0], "activations, RoPE table, matrix, token buffers");
    for (int i = 0; i < WS_ROWS; i++)
        printf("  %-24s  %10s %18" PRIu64 "   %s\n", ws_row[i],
               zs__bytes_text(h, sizeof h, (double)w->bytes[i]), w->bytes[i], what[i]);
    printf("               not counted: the CUDA context, cuBLASLt's workspace and the CUDA "
           "layers' grow-on-demand buffers%s\n",
           w->cuda ? "" : "; on the CPU, the fp32 views of a unit's parameters");
}

typedef struct run_info {
    zs_config *cfg;
    const layout *l;
    zs_dtype dtype;
    int moments;    /* fp32 optimizer buffers per element: the paper's K = 4 + 4 x moments */
    int accumulate; /* the stage-2/3 gradient shard is fp32 (accumulation) */
    int gathers;    /* --gathers: stage-3 gathers of each unit per micro-step */
    uint64_t workspace; /* llama_train's device memory (--batch, --seq), 0: not counted */
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

/* The layout's plan on `world` ranks as zs_build lays it out (hybrid
 * sharding, frozen and quantized units), and *per_node the ranks of a node. */
static zs_status layout_plan(const run_info *r, int world, zs__plan **out, int *per_node) {
    const zs__settings *s = zs__config_settings(r->cfg);
    *out = NULL;
    *per_node = world;
    ZS_CHECK(zs__estimate_node_size(s, world, per_node));
    const int hybrid = s->zero.shard_group == ZS_SHARD_GROUP_NODE;
    if (hybrid && world % *per_node != 0)
        return zs__fail(ZS_ERR_CONFIG, "zero.shard_group = \"node\" needs nodes of equal "
                        "size; %d ranks in nodes of %d do not make them", world, *per_node);
    const int shard = hybrid ? *per_node : world;
    const layout *l = r->l;
    return zs__plan_of_settings(s, shard, world / shard, l->unit_count, l->params_per_unit,
                                l->param_numel, l->param_flags, NULL, NULL, out);
}

/* The bytes one step sends (zero/comm_plan.h), every rank's and the
 * busiest's, with the layout's flags: frozen units reduce nothing,
 * quantized ones gather their records. */
static zs_status step_bytes(const run_info *r, int world, zs__step_bytes *job,
                            zs__step_bytes *busiest, int *per_node) {
    const zs__settings *s = zs__config_settings(r->cfg);
    *per_node = world;
    ZS_CHECK(zs__estimate_node_size(s, world, per_node));
    const layout *l = r->l;
    return zs__comm_plan_estimate(s, world, l->unit_count, l->params_per_unit, l->param_numel,
                                  l->param_flags, r->gathers, job, busiest);
}

/* The bytes one step sends, under the stage's settings without offload
 * (where the optimizer runs moves nothing between ranks). */
static void print_bytes(const run_info *r, int stage, int world) {
    zs_memory_stats m;
    if (estimate(r, stage, 0, world, &m) != ZS_OK) return;
    zs__step_bytes job, busiest;
    int per_node = world;
    if (step_bytes(r, world, &job, &busiest, &per_node) != ZS_OK) {
        printf("  %-24s  cannot be worked out: %s\n", "bytes per step", zs_last_error());
        return;
    }
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

/* What must fit the device: the tags that live there (offloaded state and
 * host buffers do not). */
static uint64_t device_share(const zs_memory_stats *m) {
    uint64_t sum = 0;
    for (int t = 0; t < ZS_MEM_TAG_COUNT; t++)
        if (zs__mem_tag_on_device((zs_mem_tag)t)) sum += m->current[t];
    return sum;
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
    if (r->workspace) {
        /* What must fit the device: its tags and llama_train's workspace. */
        printf("  %-24s", "llama_train workspace");
        for (int o = 0; o < OFFLOAD_MODES; o++) print_cell(planned[o], r->workspace);
        printf("\n  %-24s", "device total");
        for (int o = 0; o < OFFLOAD_MODES; o++)
            print_cell(planned[o], device_share(&m[o]) + r->workspace);
        /* The rest of the total: host memory (the disk is not in it). */
        printf("\n  %-24s", "host total");
        for (int o = 0; o < OFFLOAD_MODES; o++)
            print_cell(planned[o], m[o].total_current - device_share(&m[o]));
        printf("\n");
    }
    zs__plan *plan = NULL;
    int per_node = world;
    if (stage == 3 && layout_plan(r, world, &plan, &per_node) == ZS_OK) {
        /* The shard every rank owns, in elements: of every unit, frozen and
         * quantized ones included (whatever tags hold them). */
        const zs__settings *set = zs__config_settings(r->cfg);
        const int n = set->zero.shard_group == ZS_SHARD_GROUP_NODE ? per_node : world;
        printf("  %-24s  %" PRId64 " elements (Psi/N = %.0f, plus padding)\n", "shard per rank",
               plan->shard_numel, ceil((double)r->l->numel / n));
    }
    zs__plan_destroy(plan);
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
               "moments, where the formula trains every parameter;%s and padding\n",
               r->l->quantizable_units && zs__frozen_bits_of(zs__config_settings(r->cfg))
                   ? " quantized ones as their records;" : "");
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

/* What must fit the device: its share of the estimate and llama_train's
 * workspace. "X per rank", with the parts when there is a workspace. */
static uint64_t device_need(const run_info *r, const zs_memory_stats *m) {
    return device_share(m) + r->workspace;
}

static const char *need_text(char *out, size_t cap, const run_info *r, uint64_t runtime) {
    char a[32], b[32], c[32];
    zs__bytes_text(a, sizeof a, (double)(runtime + r->workspace));
    if (!r->workspace) snprintf(out, cap, "%s per rank", a);
    else
        snprintf(out, cap, "%s per rank (runtime %s + llama_train workspace %s)", a,
                 zs__bytes_text(b, sizeof b, (double)runtime),
                 zs__bytes_text(c, sizeof c, (double)r->workspace));
    return out;
}

/* --device-memory: fits with the given world, or the smallest world, for
 * every offload mode. */
static void print_fit_mode(const run_info *r, uint64_t memory, int world, int mode) {
    char h[128], hm[32];
    zs__bytes_text(hm, sizeof hm, (double)memory);
    printf("device memory %s (%" PRIu64 " bytes) per rank, offload %s:\n", hm, memory,
           offload_modes[mode].name);
    for (int stage = 0; stage < 4; stage++) {
        if (only_stage >= 0 && stage != only_stage) continue;
        zs_memory_stats m;
        if (world > 0) {
            if (estimate(r, stage, mode, world, &m) != ZS_OK) {
                printf("  stage %d cannot be planned on %d ranks: %s\n", stage, world,
                       zs_last_error());
                continue;
            }
            printf("  stage %d %s on %d rank%s: %s\n", stage,
                   device_need(r, &m) <= memory ? "fits" : "does not fit", world,
                   world == 1 ? "" : "s", need_text(h, sizeof h, r, device_share(&m)));
            continue;
        }
        if (r->workspace >= memory) {
            printf("  stage %d does not fit on any number of ranks: llama_train's workspace "
                   "alone is %s\n", stage, zs__bytes_text(h, sizeof h, (double)r->workspace));
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
            if (device_need(r, &m) <= memory) {
                found = n;
                break;
            }
        }
        if (found)
            printf("  stage %d fits from %d rank%s: %s\n", stage, found, found == 1 ? "" : "s",
                   need_text(h, sizeof h, r, device_share(&m)));
        else if (error)
            printf("  stage %d cannot be planned: %s\n", stage, error);
        else
            printf("  stage %d does not fit on up to %d ranks (at least %s)\n", stage,
                   ZS_ESTIMATE_MAX_WORLD, need_text(h, sizeof h, r, smallest));
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
                                           "--freeze", "--lora", "--lora-targets",
                                           "--lora-dropout", "--qlora", "--batch", "--seq",
                                           "--stage"};
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
    int batch = 0, seq = 0, recompute = -1; /* llama_train's (0, -1: the configuration's) */
    double dropout = -1.0;
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
        } else if (strcmp(a, "--lora-dropout") == 0) {
            const char *v = VALUE(a);
            char *end = NULL;
            dropout = strtod(v, &end);
            if (end == v || *end != '\0' || !(dropout >= 0.0 && dropout < 1.0))
                return usage_error("--lora-dropout \"%s\": a probability, 0 <= P < 1", v);
        } else if (strcmp(a, "--qlora") == 0) {
            qlora = VALUE(a);
            if (strcmp(qlora, "nf4") && strcmp(qlora, "int8"))
                return usage_error("unknown --qlora \"%s\" (nf4 or int8)", qlora);
        } else if (strcmp(a, "--batch") == 0) {
            if (zs__number_option_int(a, VALUE(a), 1, 1 << 16, &batch) != ZS_OK)
                return usage_error("%s", zs_last_error());
        } else if (strcmp(a, "--seq") == 0) {
            if (zs__number_option_int(a, VALUE(a), 1, 1 << 20, &seq) != ZS_OK)
                return usage_error("%s", zs_last_error());
        } else if (strcmp(a, "--stage") == 0) {
            if (zs__number_option_int(a, VALUE(a), 0, 3, &only_stage) != ZS_OK)
                return usage_error("%s", zs_last_error());
        } else if (strcmp(a, "--recompute") == 0) {
            recompute = 1;
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
    if (qlora && lora_r == 0)
        return usage_error("%s", "--qlora needs --lora R: QLoRA trains LoRA adapters on the "
                                 "quantized base");

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
    if (!l.llama && (lora_r || batch || seq || recompute > 0 || dropout >= 0)) {
        layout_free(&l);
        return usage_error("%s", "--lora, --qlora, --batch, --seq and --recompute apply to "
                                 "Llama layouts (--llama, --hf-config)");
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
     * file says otherwise), --dtype, --qlora's format (unless the file sets
     * one), then every --set. */
    char saved[2][64], dtype_set[64], qlora_set[64];
    const char *all[ZS_ESTIMATE_MAX_SETS + 4];
    int n = 0, qlora_at = -1;
    const int file_storage = zs__config_settings(cfg)->zero.frozen_storage;
    if (qlora && file_storage != ZS_FROZEN_COMPUTE &&
        (file_storage == ZS_FROZEN_NF4) != (strcmp(qlora, "nf4") == 0)) {
        fprintf(stderr, "zs-estimate: --qlora %s, but %s sets zero.frozen_storage = \"%s\"\n",
                qlora, config_path, file_storage == ZS_FROZEN_NF4 ? "nf4" : "int8");
        zs_config_destroy(cfg);
        layout_free(&l);
        return EXIT_USAGE;
    }
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
    if (qlora && file_storage == ZS_FROZEN_COMPUTE) {
        snprintf(qlora_set, sizeof qlora_set, "zero.frozen_storage=\"%s\"", qlora);
        qlora_at = n;
        all[n++] = qlora_set;
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
                  gathers, 0};

    /* llama_train's workspace: --batch, --seq, --recompute, --lora-dropout,
     * or the app keys of the configuration the trainer would read. */
    workspace ws;
    memset(&ws, 0, sizeof ws);
    if (l.llama) {
        int64_t v[3] = {0, 0, 0};
        int app_recompute = 0;
        double app_dropout = 0.0;
        if (zs_config_app_int(cfg, "batch_size", 0, 0, 1 << 16, &v[0]) != ZS_OK ||
            zs_config_app_int(cfg, "seq_len", 0, 0, 1 << 20, &v[1]) != ZS_OK ||
            zs_config_app_int(cfg, "head_chunk_rows", 0, 0, 1 << 16, &v[2]) != ZS_OK ||
            zs_config_app_bool(cfg, "recompute", 0, &app_recompute) != ZS_OK ||
            zs_config_app_float(cfg, "lora_dropout", 0.0, 0.0, 0.999999, &app_dropout) != ZS_OK) {
            fprintf(stderr, "zs-estimate: %s\n", zs_last_error());
            zs_config_destroy(cfg);
            layout_free(&l);
            return EXIT_FAILED;
        }
        ws.on = batch || seq || v[0] || v[1];
        ws.B = batch ? batch : v[0] ? (int)v[0] : 8;
        const int longest = l.dims.max_seq < 2048 ? l.dims.max_seq : 2048;
        ws.T = seq ? seq : v[1] ? (int)v[1] : longest;
        ws.chunk_rows = v[2];
        ws.recompute = recompute >= 0 ? recompute : app_recompute;
        ws.dropout = dropout >= 0 ? dropout : app_dropout;
        if (ws.on && ws.T > l.dims.max_seq) {
            fprintf(stderr, "zs-estimate: a sequence of %d tokens is longer than %s takes "
                            "(max_position_embeddings = %d)\n", ws.T, l.source, l.dims.max_seq);
            zs_config_destroy(cfg);
            layout_free(&l);
            return EXIT_USAGE;
        }
        if (ws.on) {
            workspace_make(&l, settings, &ws);
            r.workspace = ws.bytes[WS_TOTAL];
        }
    }

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
    if (l.quantizable_units) {
        const int bits = zs__frozen_bits_of(settings);
        /* Bits per element: the value, and its block's scale: fp32, or
         * with double quantization an int8 code and an fp32 scale per
         * ZS_FROZEN_SCALE_GROUP codes (zero/quant_record.h). */
        const double block = (double)settings->zero.frozen_block;
        const int dq = settings->zero.frozen_double_quant;
        const double per = (bits == 8 ? 8.0 : 4.0) +
                           (dq ? (8.0 + 32.0 / ZS_FROZEN_SCALE_GROUP) / block : 32.0 / block);
        if (bits)
            printf("               QLoRA: the matrices of %d blocks stored %s (%.3f bits per "
                   "element: %s per zero.frozen_block = %" PRId64 "), their 1-D tensors in %d "
                   "units \"<block>.norms\"; the embedding and the head in %s\n",
                   l.quantizable_units, bits == 8 ? "int8" : "nf4", per,
                   dq ? "a double-quantized scale (zero.frozen_double_quant)" : "an fp32 scale",
                   (int64_t)settings->zero.frozen_block, l.quantizable_units,
                   zs_dtype_name(r.dtype));
        else
            printf("               QLoRA's layout, but zero.frozen_storage = \"compute\": the "
                   "block matrices are kept in %s\n", zs_dtype_name(r.dtype));
    }
    printf("config         %s: %s, %s\n",
           config_path ? config_path : "defaults (optimizer.lr set)", zs_dtype_name(r.dtype),
           optimizer_text(settings->optimizer.kind));
    for (int i = 0; i < n; i++)
        printf("               override %s%s\n", all[i],
               i == qlora_at ? " (--qlora)"
               : i < 2 && l.have_saved && !config_path ? " (as the checkpoint was saved)" : "");
    if (ws.on) print_workspace(&l, &ws);
    printf("\n");

    rc = 0;
    if (world > 0)
        for (int stage = 0; stage < 4; stage++)
            if (only_stage < 0 || stage == only_stage) print_stage(&r, stage, world);
    if (memory > 0) print_fit(&r, memory, world);
    zs_config_destroy(cfg);
    layout_free(&l);
    return rc;
}

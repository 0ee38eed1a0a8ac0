/* zs-ckpt: inspect, verify and export zeroshard checkpoints.
 *
 *   zs-ckpt info   <step dir | checkpoint root>
 *   zs-ckpt verify [--quiet] <step dir | checkpoint root>
 *   zs-ckpt export [--dtype fp32|bf16|fp16] [--buffer-bytes N] [--quiet] <step dir | root> <out.safetensors>
 *   zs-ckpt export --hf <out dir> [--max-shard-bytes N] [--tokenizer-from DIR] [--dtype ...]
 *   zs-ckpt export --peft <out dir> [--dtype ...]
 *                  [--buffer-bytes N] [--quiet] <step dir | root>
 *
 * A checkpoint root is resolved as zs_load resolves it (src/checkpoint/select.h):
 * the step `latest` names if it verifies, else the newest step directory
 * that verifies. verify and export show a progress line on long runs
 * (progress.h). Exit status: 0 on
 * success, 1 when the checkpoint is invalid or an operation fails (the
 * message names the file and what is wrong), 2 for a usage error. The
 * format is described in src/checkpoint/manifest.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/manifest.h"
#include "ckpt_tool.h"
#include "core/config.h"
#include "core/number.h"

/* Default of --buffer-bytes: large enough that reads and writes run at the
 * disk's speed, small enough for any machine that can run training. */
#define ZS_TOOL_DEFAULT_BUFFER_BYTES (64ull << 20)
/* Default of --max-shard-bytes: save_pretrained's max_shard_size, "5GB"
 * (transformers counts a GB as 10^9 bytes). */
#define ZS_TOOL_DEFAULT_MAX_SHARD_BYTES 5000000000ull

#define EXIT_INVALID 1
#define EXIT_USAGE 2

static const char usage_text[] =
    "usage: zs-ckpt info   <step dir | checkpoint root>\n"
    "       zs-ckpt verify [--quiet] <step dir | checkpoint root>\n"
    "       zs-ckpt export [--dtype fp32|bf16|fp16] [--buffer-bytes N] [--quiet]\n"
    "                      <step dir | checkpoint root> <out.safetensors>\n"
    "       zs-ckpt export --hf <out dir> [--merge] [--max-shard-bytes N] [--tokenizer-from DIR]\n"
    "                      [--dtype fp32|bf16|fp16] [--buffer-bytes N] [--quiet]\n"
    "                      <step dir | checkpoint root>\n"
    "       zs-ckpt export --peft <out dir> [--dtype fp32|bf16|fp16] [--buffer-bytes N]\n"
    "                      [--quiet] <step dir | checkpoint root>\n"
    "\n"
    "  info     print the manifest: step, world size and stage at save time, dtype,\n"
    "           optimizer, loss scale, config hash, units and parameters, files.\n"
    "  verify   the runtime's own checks: manifest.json against manifest.json.xxh3,\n"
    "           the manifest against what a save writes, then every file (regular,\n"
    "           never a symlink) for size, metadata (step, rank, world size, kind),\n"
    "           XXH3, header, and exactly the listed tensors with their XXH3.\n"
    "  export   write the full, unsharded model (one tensor per parameter, original\n"
    "           names and shapes) from the fp32 master weights, converted to --dtype\n"
    "           (default fp32; round to nearest even) with memory bounded by\n"
    "           --buffer-bytes (default 67108864 = 64 MiB, at least 16). The master and\n"
    "           user-state files are verified first as verify checks them (the optimizer\n"
    "           files are not needed); the output appears only when complete.\n"
    "           Metadata: format \"pt\", step, dtype.\n"
    "  export --hf <out dir>\n"
    "           the Hugging Face layout transformers' from_pretrained loads: a new\n"
    "           directory holding model.safetensors, or, when the tensors take more than\n"
    "           --max-shard-bytes (default 5GB, as save_pretrained), model-00001-of-0000N\n"
    "           .safetensors ... and model.safetensors.index.json; metadata format \"pt\";\n"
    "           tensors under the parameters' names in --dtype (default: the checkpoint's\n"
    "           compute dtype). config.json from the checkpoint's global user state\n"
    "           \"hf.config.json\" (where the trainer keeps the model's config.json), its\n"
    "           torch_dtype (and dtype, where it has one) set to the dtype written;\n"
    "           --tokenizer-from DIR copies tokenizer.json, tokenizer_config.json,\n"
    "           special_tokens_map.json, tokenizer.model and generation_config.json\n"
    "           found there. Written into a temporary directory renamed when complete;\n"
    "           <out dir> must not exist (or be empty). A checkpoint holding LoRA\n"
    "           adapters is refused unless --merge adds them into their Linears\n"
    "           (W + (alpha / r) B A, PEFT's merge_and_unload; the adapters left out);\n"
    "           --peft exports them alone.\n"
    "  export --peft <out dir>\n"
    "           a LoRA fine-tune's adapters as PEFT saves them: adapter_model.safetensors\n"
    "           (base_model.model.<module>.lora_A.weight [r, in], ...lora_B.weight\n"
    "           [out, r], in --dtype, default the compute dtype) and adapter_config.json\n"
    "           (the trainer's, from the global user state \"peft.adapter_config.json\"),\n"
    "           which peft.PeftModel.from_pretrained loads onto the base model; written\n"
    "           as --hf writes.\n"
    "\n"
    "A checkpoint root is resolved as the runtime resumes from it: the step `latest`\n"
    "names if it verifies, else the newest step directory that verifies.\n"
    "verify and export show a progress line on stderr (percent, bytes done / total,\n"
    "rate, ETA) once a run has lasted 2 s (ZS_PROGRESS_AFTER_S=<seconds> changes\n"
    "that): one line rewritten in place on a terminal, else a line per tenth of the\n"
    "work. --quiet turns it off.\n"
    "Exit status: 0 success, 1 invalid checkpoint or failed operation, 2 usage error.\n";

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "zs-ckpt: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", usage_text);
    return EXIT_USAGE;
}

static int fail(const char *command) {
    fprintf(stderr, "zs-ckpt %s: error: %s\n", command, zs_last_error());
    return EXIT_INVALID;
}

static const char *optimizer_name(int kind) {
    switch (kind) {
    case ZS_OPTIMIZER_SGD: return "sgd";
    case ZS_OPTIMIZER_ADAM: return "adam";
    case ZS_OPTIMIZER_ADAMW: return "adamw";
    }
    return "unknown";
}

/* Names and paths from a checkpoint, printed to a terminal: escaped as
 * messages escape them (zs__st_printable: control and bidirectional
 * characters, which a terminal would obey, as \xNN or \u{NNNN}), with room
 * for the longest name or path escaped. */
#define SHOWN_BYTES (4 * PATH_MAX + 8)

static const char *shown(const char *text, char *out) {
    zs__st_printable(text, out, SHOWN_BYTES);
    return out;
}

static void print_shape(const zs__ckpt_param *p) {
    printf("[");
    for (int d = 0; d < p->ndim; d++) printf("%s%" PRId64, d ? ", " : "", p->shape[d]);
    printf("]");
}

static int cmd_info(const char *arg) {
    zs__ckpt_step step;
    int from_root = 0;
    if (zs__tool_open(arg, &step, &from_root) != ZS_OK) return fail("info");
    const zs__manifest *m = step.m;
    static char text[SHOWN_BYTES];

    printf("checkpoint     %s%s\n", shown(step.path, text),
           from_root ? " (chosen in the root: the step zs_load would resume from)" : "");
    printf("format         %s version %d\n", ZS_CKPT_FORMAT, m->version);
    printf("manifest hash  matches manifest.json.xxh3\n");
    printf("step           %" PRId64 " optimizer steps applied\n", m->step);
    printf("skipped steps  %" PRId64 "\n", m->skipped_total);
    printf("saved by       %d rank%s, ZeRO stage %d\n", m->world_size,
           m->world_size == 1 ? "" : "s", m->stage);
    printf("compute dtype  %s (master weights fp32)\n", zs_dtype_name(m->compute_dtype));
    printf("optimizer      %s\n", optimizer_name(m->optimizer));
    printf("loss scale     %.17g\n", m->scaler.scale);
    printf("config hash    %016" PRIx64 "\n", m->config_hash);

    int64_t total_elements = 0;
    for (int p = 0; p < m->param_count; p++) total_elements += zs__ckpt_param_numel(&m->params[p]);
    printf("layout         %d unit%s, %d parameter%s, %" PRId64 " elements\n", m->unit_count,
           m->unit_count == 1 ? "" : "s", m->param_count, m->param_count == 1 ? "" : "s",
           total_elements);
    /* Parameters are listed under their unit; the manifest keeps them in
     * registration order, which groups each unit's parameters together. */
    for (int u = 0; u < m->unit_count; u++) {
        printf("  unit %d: %s\n", u, shown(m->units[u].name, text));
        for (int p = 0; p < m->param_count; p++) {
            const zs__ckpt_param *param = &m->params[p];
            if (param->unit != u) continue;
            printf("    %-32s ", shown(param->name, text));
            print_shape(param);
            printf("  %" PRId64 " elements%s%s\n", zs__ckpt_param_numel(param),
                   param->flags & ZS_PARAM_NO_DECAY ? "  no_decay" : "",
                   param->flags & ZS_PARAM_FROZEN ? "  frozen" : "");
        }
    }

    uint64_t total_bytes = 0;
    printf("files          %d\n", m->file_count);
    for (int f = 0; f < m->file_count; f++) {
        const zs__ckpt_file *file = &m->files[f];
        printf("  %-36s rank %-5d %-6s %12" PRIu64 " bytes\n", shown(file->name, text), file->rank,
               zs__ckpt_file_kind_name(file->kind), file->bytes);
        total_bytes += file->bytes;
    }
    printf("total bytes    %" PRIu64 "\n", total_bytes);
    zs__ckpt_step_close(&step);
    return 0;
}

static int cmd_verify(const char *arg, int quiet) {
    zs__ckpt_step step;
    int from_root = 0;
    if (zs__tool_open(arg, &step, &from_root) != ZS_OK) return fail("verify");
    /* A root's choice was verified completely while choosing; verifying it
     * again keeps one code path and prints the totals. */
    zs__ckpt_verify_totals t;
    zs__progress progress;
    zs__progress_begin(&progress, "zs-ckpt verify", zs__ckpt_verify_read_bytes(&step, 0, 1, 0),
                       quiet);
    zs_status s = zs__ckpt_verify_files_progress(&step, 0, 1, 0, &t, zs__tool_verify_progress,
                                                 &progress);
    if (s == ZS_OK) zs__progress_end(&progress);
    else if (progress.open_line) fputc('\n', stderr); /* the error starts on its own line */
    static char text[SHOWN_BYTES];
    if (s == ZS_OK && from_root) printf("chosen: %s\n", shown(step.path, text));
    zs__ckpt_step_close(&step);
    if (s != ZS_OK) return fail("verify");
    printf("OK: %d files, %" PRId64 " tensors, %" PRIu64 " bytes verified\n", t.files, t.tensors,
           t.bytes);
    return 0;
}

static int parse_dtype(const char *text, zs_dtype *out) {
    if (strcmp(text, "fp32") == 0) *out = ZS_DTYPE_FP32;
    else if (strcmp(text, "bf16") == 0) *out = ZS_DTYPE_BF16;
    else if (strcmp(text, "fp16") == 0) *out = ZS_DTYPE_FP16;
    else return 0;
    return 1;
}

static int cmd_export(int argc, char **argv) {
    zs_dtype dtype = ZS_DTYPE_FP32;
    int dtype_given = 0;
    uint64_t buffer_bytes = ZS_TOOL_DEFAULT_BUFFER_BYTES;
    uint64_t max_shard_bytes = ZS_TOOL_DEFAULT_MAX_SHARD_BYTES;
    const char *hf_dir = NULL, *tokenizer_from = NULL, *shard_option = NULL, *peft_dir = NULL;
    int quiet = 0, merge = 0;
    const char *positional[2];
    int npos = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--dtype") == 0) {
            if (i + 1 >= argc) return usage_error("%s needs a value", "--dtype");
            if (!parse_dtype(argv[++i], &dtype))
                return usage_error("unknown --dtype \"%s\" (fp32, bf16 or fp16)", argv[i]);
            dtype_given = 1;
        } else if (strcmp(argv[i], "--buffer-bytes") == 0 ||
                   strcmp(argv[i], "--max-shard-bytes") == 0) {
            const char *option = argv[i];
            if (i + 1 >= argc) return usage_error("%s needs a value", option);
            const int buffer = strcmp(option, "--buffer-bytes") == 0;
            int64_t bytes = 0;
            if (zs__number_option_size(option, argv[++i], buffer ? ZS_TOOL_MIN_BUFFER_BYTES : 1,
                                       INT64_MAX, &bytes) != ZS_OK)
                return usage_error("%s", zs_last_error());
            if (buffer) {
                buffer_bytes = (uint64_t)bytes;
            } else {
                max_shard_bytes = (uint64_t)bytes;
                shard_option = option;
            }
        } else if (strcmp(argv[i], "--peft") == 0) {
            if (i + 1 >= argc || !argv[i + 1][0]) return usage_error("%s needs a directory", argv[i]);
            peft_dir = argv[++i];
        } else if (strcmp(argv[i], "--hf") == 0 || strcmp(argv[i], "--tokenizer-from") == 0) {
            if (i + 1 >= argc || !argv[i + 1][0]) return usage_error("%s needs a directory", argv[i]);
            if (strcmp(argv[i], "--hf") == 0) hf_dir = argv[++i];
            else tokenizer_from = argv[++i];
        } else if (strcmp(argv[i], "--quiet") == 0) {
            quiet = 1;
        } else if (strcmp(argv[i], "--merge") == 0) {
            merge = 1;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            return usage_error("unknown option %s", argv[i]);
        } else if (npos < 2) {
            positional[npos++] = argv[i];
        } else {
            return usage_error("unexpected argument %s", argv[i]);
        }
    }
    if (peft_dir && (hf_dir || shard_option || tokenizer_from))
        return usage_error("%s", "export --peft takes no --hf, --max-shard-bytes or --tokenizer-from");
    if (peft_dir && npos != 1)
        return usage_error("%s", "export --peft <out dir> needs one checkpoint (and no output file)");
    if (merge && !hf_dir) return usage_error("%s", "--merge is an option of export --hf");
    if (!hf_dir && !peft_dir && (shard_option || tokenizer_from))
        return usage_error("%s is an option of export --hf", shard_option ? shard_option
                                                                          : "--tokenizer-from");
    if (hf_dir && npos != 1)
        return usage_error("%s", "export --hf <out dir> needs one checkpoint (and no output file)");
    if (!hf_dir && !peft_dir && npos != 2)
        return usage_error("%s", "export needs a checkpoint and an output file");

    zs__ckpt_step step;
    if (zs__tool_open(positional[0], &step, NULL) != ZS_OK) return fail("export");
    int params = step.m->param_count;
    int64_t step_number = step.m->step;
    zs_status s;
    if (peft_dir) {
        if (!dtype_given) dtype = step.m->compute_dtype;
        int tensors = 0;
        s = zs__tool_export_peft(&step, dtype, buffer_bytes, peft_dir, quiet, &tensors);
        zs__ckpt_step_close(&step);
        if (s != ZS_OK) return fail("export");
        printf("exported step %" PRId64 ": %d LoRA adapter tensors, %s, to %s "
               "(adapter_model.safetensors, adapter_config.json)\n",
               step_number, tensors, zs_dtype_name(dtype), peft_dir);
        return 0;
    }
    if (hf_dir) {
        /* Hugging Face checkpoints are usually kept in the dtype the model
         * trained in. */
        if (!dtype_given) dtype = step.m->compute_dtype;
        zs__tool_hf_summary summary;
        s = zs__tool_export_hf(&step, dtype, buffer_bytes, max_shard_bytes, hf_dir,
                               tokenizer_from, merge, quiet, &summary);
        zs__ckpt_step_close(&step);
        if (s != ZS_OK) return fail("export");
        printf("exported step %" PRId64 ": %d tensors, %s, %" PRIu64 " bytes in %d file%s%s%s, "
               "to %s\n",
               step_number, params, zs_dtype_name(dtype), summary.tensor_bytes, summary.files,
               summary.files == 1 ? "" : "s (with model.safetensors.index.json)",
               summary.config_written ? ", config.json" : "",
               summary.tokenizer_files > 0 ? ", tokenizer files" : "", hf_dir);
        return 0;
    }
    uint64_t bytes = 0;
    s = zs__tool_export(&step, dtype, buffer_bytes, positional[1], quiet, &bytes);
    zs__ckpt_step_close(&step);
    if (s != ZS_OK) return fail("export");
    printf("exported step %" PRId64 ": %d tensors, %s, %" PRIu64 " bytes to %s\n", step_number, params,
           zs_dtype_name(dtype), bytes, positional[1]);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage_error("%s", "missing command");
    const char *command = argv[1];
    if (strcmp(command, "-h") == 0 || strcmp(command, "--help") == 0 ||
        strcmp(command, "help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (strcmp(command, "info") == 0) {
        if (argc != 3) return usage_error("%s takes exactly one directory", command);
        return cmd_info(argv[2]);
    }
    if (strcmp(command, "verify") == 0) {
        const int quiet = argc == 4 && strcmp(argv[2], "--quiet") == 0;
        if (argc != 3 + quiet || strcmp(argv[argc - 1], "--quiet") == 0)
            return usage_error("%s takes [--quiet] and exactly one directory", command);
        return cmd_verify(argv[argc - 1], quiet);
    }
    if (strcmp(command, "export") == 0) return cmd_export(argc - 2, argv + 2);
    return usage_error("unknown command \"%s\"", command);
}

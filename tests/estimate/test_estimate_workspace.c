/* zs-estimate's llama_train workspace (--batch, --seq) against the
 * trainer's own code on the CPU backend: for each case, the rows zs-estimate
 * prints are compared, to the byte, with what examples/llama/llama_family.c's
 * start() allocates on an nn_cpu_device:
 *   saved activations   (1 or L) x llama_block_acts_bytes
 *   block scratch       the backend's block_scratch_bytes (LoRA and its
 *                       dropout set as llama_backend_set_lora sets them)
 *   head scratch        the backend's head_scratch_bytes for
 *                       app.head_chunk_rows (0: the CPU's 128)
 *   activations         ex_stream_alloc's total, what llama_train prints as
 *                       "activations" (allocated for real on the small
 *                       shapes; summed from the rows above for the large
 *                       ones, which are sized but not allocated)
 * and the workspace total as the sum of its rows. The CUDA sizes follow the
 * CUDA layers' sources (tools/zs_estimate.c: workspace_make); they need a
 * GPU to check the same way.
 *
 *   test_estimate_workspace <zs-estimate>
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_stream.h"
#include "llama_backend.h"
#include "llama_model.h"
#include "test_util.h"

typedef struct ws_case {
    const char *shape;    /* a llama preset */
    int B, T, recompute, lora_r;
    double dropout;
    int chunk_rows;       /* app.head_chunk_rows */
    const char *extra;    /* more zs-estimate options */
    int allocate;         /* ex_stream_alloc for real (small shapes) */
} ws_case;

static const ws_case cases[] = {
    {"tiny", 2, 64, 0, 0, 0.0, 0, "", 1},
    {"tiny", 3, 256, 1, 0, 0.0, 0, "--dtype bf16", 1},
    {"tiny", 1, 100, 0, 8, 0.0, 50, "--lora-targets all-linear", 1},
    {"tiny", 4, 32, 1, 4, 0.1, 1000, "--qlora nf4 --dtype bf16", 1},
    {"tiny", 1, 7, 0, 16, 0.05, 3, "--qlora int8 --lora-targets q_proj,k_proj", 1},
    {"llama-3.2-1b", 1, 512, 1, 16, 0.0, 0, "", 0},
    {"llama-3.1-70b", 1, 2048, 1, 64, 0.0, 0,
     "--lora-targets all-linear --qlora nf4 --dtype bf16", 0},
    {"llama-3.1-70b", 2, 1024, 0, 64, 0.1, 256, "--lora-targets all-linear", 0},
};
#define CASES ((int)(sizeof cases / sizeof cases[0]))

#define ROWS 10
static const char *const rows[ROWS] = {
    "residual stream", "saved activations", "stream gradient", "block scratch", "head scratch",
    "activations", "RoPE table", "dequantized matrix", "token buffers", "workspace total"};

/* The exact bytes of each row zs-estimate prints ("  <row>  <human>
 * <bytes>  <what>"); 0 when every row was found. */
static int run_tool(const char *tool, const ws_case *c, uint64_t out[ROWS]) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "'%s' --llama %s --world 1 --batch %d --seq %d%s --set app.head_chunk_rows=%d %s",
             tool, c->shape, c->B, c->T, c->recompute ? " --recompute" : "", c->chunk_rows,
             c->extra);
    if (c->lora_r > 0) {
        const size_t n = strlen(cmd);
        snprintf(cmd + n, sizeof cmd - n, " --lora %d --lora-dropout %g", c->lora_r, c->dropout);
    }
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    int found = 0;
    char line[1024];
    memset(out, 0, sizeof(uint64_t) * ROWS);
    while (fgets(line, sizeof line, p)) {
        if (strncmp(line, "stage ", 6) == 0) break; /* the tables: rows of their own */
        for (int i = 0; i < ROWS; i++) {
            const size_t n = strlen(rows[i]);
            if (strncmp(line, "  ", 2) != 0 || strncmp(line + 2, rows[i], n) != 0 ||
                line[2 + n] != ' ')
                continue;
            char unit[16];
            double human = 0;
            unsigned long long bytes = 0;
            if (sscanf(line + 2 + n, "%lf %15s %llu", &human, unit, &bytes) == 3) {
                out[i] = bytes;
                found |= 1 << i;
            }
        }
    }
    while (fgets(line, sizeof line, p)) {
    }
    const int rc = pclose(p);
    ZT_CHECK_MSG(rc == 0, "%s: exit status %d", cmd, rc);
    ZT_CHECK_MSG(found == (1 << ROWS) - 1, "%s: rows missing (found mask %#x)", cmd, found);
    return rc == 0 && found == (1 << ROWS) - 1 ? 0 : -1;
}

static void check_case(const char *tool, const ws_case *c) {
    uint64_t got[ROWS];
    if (run_tool(tool, c, got) != 0) return;
    llama_dims d;
    ZT_CHECK(llama_dims_preset(c->shape, &d) == 0);
    nn_device *dev = nn_cpu_device_create();
    llama_backend *be = NULL;
    char err[512] = "";
    ZT_CHECK_MSG(dev && llama_cpu_backend_create(dev, &d, c->T, &be, err, sizeof err) == 0,
                 "%s: %s", c->shape, err);
    if (!be) {
        if (dev) dev->ops->destroy(dev);
        return;
    }
    ZT_CHECK_MSG(llama_backend_set_lora(be, c->lora_r, 16.0, c->dropout, err, sizeof err) == 0,
                 "%s: %s", c->shape, err);
    const size_t block = be->ops->block_scratch_bytes(be, c->B, c->T);
    const size_t head = be->ops->head_scratch_bytes(be, c->B, c->T,
                                                   c->chunk_rows ? c->chunk_rows : 128);
    const size_t acts = (size_t)llama_block_acts_bytes(&d, c->B, c->T, dev->dtype);
    const size_t saved = (c->recompute ? 1 : (size_t)d.n_layer) * acts;
    const char *what = c->shape;
    ZT_CHECK_MSG(got[1] == saved, "%s B %d T %d: saved activations %llu, the trainer's %zu", what,
                 c->B, c->T, (unsigned long long)got[1], saved);
    ZT_CHECK_MSG(got[3] == block, "%s B %d T %d: block scratch %llu, the backend's %zu", what, c->B,
                 c->T, (unsigned long long)got[3], block);
    ZT_CHECK_MSG(got[4] == head, "%s B %d T %d: head scratch %llu, the backend's %zu", what, c->B,
                 c->T, (unsigned long long)got[4], head);
    double total = (double)(got[0] + got[1] + got[2] + got[3] + got[4]);
    if (c->allocate) {
        ex_stream ws;
        ZT_CHECK_MSG(ex_stream_alloc(&ws, dev, d.n_layer, c->B, c->T,
                                     (size_t)d.n_embd * nn_dtype_size(dev->dtype), acts,
                                     c->recompute, block, head, &total, err, sizeof err) == 0,
                     "%s: ex_stream_alloc: %s", what, err);
        ex_stream_free(&ws);
    }
    ZT_CHECK_MSG((double)got[5] == total, "%s B %d T %d: activations %llu, llama_train's %.0f",
                 what, c->B, c->T, (unsigned long long)got[5], total);
    uint64_t sum = 0;
    for (int i = 5; i < ROWS - 1; i++) sum += got[i];
    ZT_CHECK_MSG(got[ROWS - 1] == sum, "%s: workspace total %llu, its rows add up to %llu", what,
                 (unsigned long long)got[ROWS - 1], (unsigned long long)sum);
    be->ops->destroy(be);
    dev->ops->destroy(dev);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_estimate_workspace <zs-estimate>\n");
        return 2;
    }
    for (int i = 0; i < CASES; i++) check_case(argv[1], &cases[i]);
    return zt_finish("test_estimate_workspace");
}

/* The accounting reports: zs_memory_report and zs_comm_report (this rank's
 * figures), and zs_report_print: every rank's figures, gathered to rank 0
 * and printed as one table with a column per rank, so a training program can
 * show where its bytes went without writing the table itself. Reads the
 * ground's accountant and communicators and the carves' counts (carves.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "zero/carves.h"
#include "zero/ground.h"

#define MIB (1024.0 * 1024.0)

typedef struct rank_figures {
    zs_memory_stats memory;
    zs_comm_stats comm;
} rank_figures;

zs_status zs_memory_report(const zs_ctx *zs, zs_memory_stats *out) {
    if (!zs || !out) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_memory_report: zs and out are required");
    memset(out, 0, sizeof *out);
    for (int t = 0; t < ZS_MEM_TAG_COUNT; t++) {
        out->current[t] = zs->mem.current[t];
        out->peak[t] = zs->mem.peak[t];
    }
    out->total_current = zs->mem.total_current;
    out->total_peak = zs->mem.total_peak;
    size_t budget = 0, carved_peak = 0;
    zs__carves_report(zs, &out->live_units_current, &out->live_units_peak, &budget,
                      &carved_peak);
    out->live_bytes_budget = budget;
    out->live_bytes_peak = carved_peak;
    return ZS_OK;
}

zs_status zs_comm_report(const zs_ctx *zs, zs_comm_stats *out) {
    if (!zs || !out) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_comm_report: zs and out are required");
    zs__comm_stats_total(zs->comm, out); /* the node and cross-node communicators' too */
    return ZS_OK;
}

static void print_header(FILE *out, const char *first, int world) {
    fprintf(out, "  %-12s", first);
    for (int r = 0; r < world; r++) {
        char cell[32];
        snprintf(cell, sizeof cell, "rank %d", r);
        fprintf(out, " %25s", cell);
    }
    fprintf(out, "\n");
}

static void print_tables(FILE *out, const rank_figures *all, int world) {
    fprintf(out, "memory per rank, MiB (current / peak):\n");
    print_header(out, "tag", world);
    for (int t = 0; t < ZS_MEM_TAG_COUNT; t++) {
        fprintf(out, "  %-12s", zs_mem_tag_name((zs_mem_tag)t));
        for (int r = 0; r < world; r++)
            fprintf(out, " %11.4f / %11.4f", (double)all[r].memory.current[t] / MIB,
                    (double)all[r].memory.peak[t] / MIB);
        fprintf(out, "\n");
    }
    fprintf(out, "  %-12s", "total");
    for (int r = 0; r < world; r++)
        fprintf(out, " %11.4f / %11.4f", (double)all[r].memory.total_current / MIB,
                (double)all[r].memory.total_peak / MIB);
    fprintf(out, "\n  %-12s", "live units");
    for (int r = 0; r < world; r++)
        fprintf(out, " %11d / %11d", all[r].memory.live_units_current,
                all[r].memory.live_units_peak);
    fprintf(out, "\n  %-12s", "live bytes");
    for (int r = 0; r < world; r++)
        fprintf(out, " %11.4f / %11.4f", (double)all[r].memory.live_bytes_budget / MIB,
                (double)all[r].memory.live_bytes_peak / MIB);
    fprintf(out, "   (budget / peak carved)\n\ncommunication per rank, MiB sent (calls):\n");
    print_header(out, "op", world);
    for (int op = 0; op < ZS_COMM_OP_COUNT; op++) {
        fprintf(out, "  %-12s", zs_comm_op_name((zs_comm_op)op));
        for (int r = 0; r < world; r++) {
            char cell[64];
            snprintf(cell, sizeof cell, "%.4f (%" PRIu64 ")",
                     (double)all[r].comm.bytes[op] / MIB, all[r].comm.calls[op]);
            fprintf(out, " %25s", cell);
        }
        fprintf(out, "\n");
    }
    /* The same bytes by the link they took (zs_comm_stats): to ranks on
     * the sender's node, and to ranks on other nodes. */
    fprintf(out, "\ncommunication per rank by link, MiB sent (inside a node / across nodes):\n");
    print_header(out, "op", world);
    for (int op = 0; op < ZS_COMM_OP_COUNT; op++) {
        fprintf(out, "  %-12s", zs_comm_op_name((zs_comm_op)op));
        for (int r = 0; r < world; r++)
            fprintf(out, " %11.4f / %11.4f", (double)all[r].comm.bytes_intra[op] / MIB,
                    (double)all[r].comm.bytes_inter[op] / MIB);
        fprintf(out, "\n");
    }
    fflush(out);
}

zs_status zs_report_print(zs_ctx *zs, FILE *out) {
    if (!zs || (!out && zs->rank == 0))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_report_print: context and stream are required");
    ZS_CHECK(zs__engine_drain(zs->engine));
    rank_figures mine;
    ZS_CHECK(zs_memory_report(zs, &mine.memory));
    ZS_CHECK(zs_comm_report(zs, &mine.comm));
    rank_figures *all = zs__calloc((size_t)zs->world_size, sizeof *all);
    if (!all) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_report_print: out of host memory");
    /* Every rank runs the same binary, so the structs travel as bytes. */
    zs_status st = zs__comm_all_gather_bytes(zs->comm, &mine, sizeof mine, all, "report");
    if (st == ZS_OK && zs->rank == 0) {
        if (zs->topology) {
            char nodes[512];
            zs__topology_describe(zs->topology, nodes, sizeof nodes);
            fprintf(out, "topology: %s\n\n", nodes);
        }
        print_tables(out, all, zs->world_size);
    }
    free(all);
    return st;
}

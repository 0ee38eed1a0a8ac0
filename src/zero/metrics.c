/* log.metrics_file: a line of JSON per optimizer step (metrics.h), written
 * with json-c (the library that writes checkpoint manifests), so a training
 * curve can be read and plotted (scripts/plot_metrics.py) without parsing
 * logs.
 *
 * Floor (src/floors.txt): Owns struct zs__metrics (the file, the scalars);
 * reads the ground's step times and calls the optimizer pass's report
 * (update.h) below it.
 */
#include "zero/metrics.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/file_pattern.h"
#include "core/log.h"
#include "zero/ground.h"
#include "zero/update.h"

#define ZS_METRICS_SCALARS 32

/* The room's state (zs_ctx.metrics), from zs_create to zs_destroy, on
 * every rank (only rank 0 writes the file). The step's times are the
 * ground's (zs__step_times): the rooms that wait add to them. */
typedef struct zs__metrics {
    FILE *file;                  /* rank 0 with log.metrics_file; NULL otherwise */
    char path[1024];
    uint64_t step_start_ns;      /* when the previous optimizer step returned */
    zs_comm_stats comm_before;   /* counters when the step began */
    int scalar_count;
    char scalar_names[ZS_METRICS_SCALARS][64];
    double scalar_values[ZS_METRICS_SCALARS];
    /* The finished step's line (a json_object) and its scalars object, not
     * written yet; NULL before the first step. */
    void *pending, *pending_scalars;
    int pending_scalar_count;
} zs__metrics;

zs_status zs__metrics_open(zs_ctx *zs) {
    zs__metrics *m = zs__calloc(1, sizeof *m);
    if (!m)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_create: out of host memory for the metrics "
                        "(%zu bytes)", sizeof *m);
    zs->metrics = m;
    m->step_start_ns = zs__clock_ns();
    if (zs->rank != 0 || zs->settings.log.metrics_file[0] == '\0') return ZS_OK;
    zs__file_pattern_expand(zs->settings.log.metrics_file, zs->rank, m->path, sizeof m->path);
    m->file = fopen(m->path, "a");
    if (!m->file)
        return zs__fail(ZS_ERR_IO, "log.metrics_file = \"%s\": cannot open %s for appending; check "
                        "that the directory exists and is writable", zs->settings.log.metrics_file,
                        m->path);
    return ZS_OK;
}

/* Writes the pending line, if any, and lets it go. */
static void write_pending(zs_ctx *zs) {
    zs__metrics *m = zs->metrics;
    json_object *line = m->pending;
    m->pending = m->pending_scalars = NULL;
    m->pending_scalar_count = 0;
    if (!line) return;
    if (m->file) {
        const char *text = json_object_to_json_string_ext(line, JSON_C_TO_STRING_PLAIN);
        if (fprintf(m->file, "%s\n", text) < 0 || fflush(m->file) != 0) {
            ZS_WARN("log.metrics_file: writing %s failed; no more metrics will be written",
                    m->path);
            fclose(m->file);
            m->file = NULL;
        }
    }
    json_object_put(line);
}

void zs__metrics_close(zs_ctx *zs) {
    if (!zs->metrics) return;
    write_pending(zs);
    if (zs->metrics->file) fclose(zs->metrics->file);
    free(zs->metrics);
    zs->metrics = NULL;
}

zs_status zs_log_scalar(zs_ctx *zs, const char *name, double value) {
    if (!zs || !name || !*name || strlen(name) > 63)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_log_scalar: a context and a name of 1..63 "
                        "bytes are required");
    zs__metrics *m = zs->metrics;
    if (!m || !m->file) return ZS_OK;
    for (int i = 0; i < m->scalar_count; i++)
        if (strcmp(m->scalar_names[i], name) == 0) {
            m->scalar_values[i] = value;
            return ZS_OK;
        }
    if (m->scalar_count >= ZS_METRICS_SCALARS)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_log_scalar('%s'): at most %d scalars per "
                        "step", name, ZS_METRICS_SCALARS);
    snprintf(m->scalar_names[m->scalar_count], sizeof m->scalar_names[0], "%s", name);
    m->scalar_values[m->scalar_count++] = value;
    return ZS_OK;
}

zs_status zs_log_scalar_previous(zs_ctx *zs, const char *name, double value) {
    if (!zs || !name || !*name || strlen(name) > 63)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_log_scalar_previous: a context and a name "
                        "of 1..63 bytes are required");
    zs__metrics *m = zs->metrics;
    if (!m || !m->file) return ZS_OK;
    if (!m->pending)
        return zs__fail(ZS_ERR_STATE, "zs_log_scalar_previous('%s'): no optimizer step has "
                        "finished yet", name);
    json_object *scalars = m->pending_scalars;
    if (!json_object_object_get_ex(scalars, name, NULL)) {
        if (m->pending_scalar_count >= ZS_METRICS_SCALARS)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_log_scalar_previous('%s'): at most %d "
                            "scalars per step", name, ZS_METRICS_SCALARS);
        m->pending_scalar_count++;
    }
    json_object_object_add(scalars, name, json_object_new_double(value));
    return ZS_OK;
}

static json_object *ms(uint64_t ns) { return json_object_new_double((double)ns * 1e-6); }

zs_status zs__metrics_step(zs_ctx *zs, const zs_step_info *info) {
    zs__metrics *m = zs->metrics;
    const uint64_t now = zs__clock_ns();
    const uint64_t total = now - m->step_start_ns;
    if (m->file) {
        zs_comm_stats after;
        zs__comm_stats_total(zs->comm, &after);
        json_object *line = json_object_new_object(), *time = json_object_new_object(),
                    *mem = json_object_new_object(), *comm = json_object_new_object(),
                    *comm_intra = json_object_new_object(),
                    *comm_inter = json_object_new_object(),
                    *scalars = json_object_new_object();
        json_object_object_add(line, "step", json_object_new_int64(info->step));
        json_object_object_add(line, "lr", json_object_new_double(info->lr));
        json_object_object_add(line, "grad_norm", json_object_new_double(info->grad_norm));
        json_object_object_add(line, "loss_scale", json_object_new_double(info->loss_scale));
        json_object_object_add(line, "skipped", json_object_new_boolean(info->skipped));
        json_object_object_add(line, "skipped_total", json_object_new_int64(info->skipped_total));
        const zs__step_times *t = &zs->times;
        const uint64_t known = t->comm_ns + t->optimizer_ns + t->checkpoint_ns;
        json_object_object_add(time, "step", ms(total));
        json_object_object_add(time, "compute", ms(total > known ? total - known : 0));
        json_object_object_add(time, "exposed_comm", ms(t->comm_ns));
        json_object_object_add(time, "optimizer", ms(t->optimizer_ns));
        json_object_object_add(time, "checkpoint", ms(t->checkpoint_ns));
        json_object_object_add(line, "time_ms", time);
        if (zs->store.tier != ZS_TIER_DEVICE) {
            /* The offloaded optimizer: its last whole pass on the host, the
             * program's waits for it, and the bytes a step moves between
             * host and device (gradients down, parameters up). */
            double pass_ms = 0.0;
            uint64_t copied = 0;
            zs__update_report(zs, &pass_ms, &copied);
            json_object *off = json_object_new_object();
            json_object_object_add(off, "host_update_ms", json_object_new_double(pass_ms));
            json_object_object_add(off, "waited_ms", ms(t->offload_wait_ns));
            json_object_object_add(off, "copied_bytes", json_object_new_int64((int64_t)copied));
            json_object_object_add(line, "offload", off);
        }
        for (int t = 0; t < ZS_MEM_TAG_COUNT; t++)
            json_object_object_add(mem, zs_mem_tag_name((zs_mem_tag)t),
                                   json_object_new_int64((int64_t)zs->mem.peak[t]));
        json_object_object_add(line, "peak_bytes", mem);
        /* Per op: all bytes sent, then those to ranks on this rank's node
         * and on other nodes (intra + inter = all). */
        for (int op = 0; op < ZS_COMM_OP_COUNT; op++) {
            const char *name = zs_comm_op_name((zs_comm_op)op);
            json_object_object_add(comm, name,
                                   json_object_new_int64((int64_t)(after.bytes[op] -
                                                                   m->comm_before.bytes[op])));
            json_object_object_add(comm_intra, name,
                                   json_object_new_int64((int64_t)(after.bytes_intra[op] -
                                                                   m->comm_before.bytes_intra[op])));
            json_object_object_add(comm_inter, name,
                                   json_object_new_int64((int64_t)(after.bytes_inter[op] -
                                                                   m->comm_before.bytes_inter[op])));
        }
        json_object_object_add(line, "comm_bytes", comm);
        json_object_object_add(line, "comm_bytes_intra", comm_intra);
        json_object_object_add(line, "comm_bytes_inter", comm_inter);
        for (int i = 0; i < m->scalar_count; i++)
            json_object_object_add(scalars, m->scalar_names[i],
                                   json_object_new_double(m->scalar_values[i]));
        json_object_object_add(line, "scalars", scalars);
        /* The previous step's line is complete now; this one waits for
         * zs_log_scalar_previous. */
        write_pending(zs);
        m->pending = line;
        m->pending_scalars = scalars;
        m->pending_scalar_count = m->scalar_count;
    }
    memset(&zs->times, 0, sizeof zs->times);
    m->scalar_count = 0;
    zs__comm_stats_total(zs->comm, &m->comm_before);
    m->step_start_ns = zs__clock_ns();
    return ZS_OK;
}

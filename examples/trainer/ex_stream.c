/* A decoder's micro-step workspace (see ex_stream.h). */
#include "ex_stream.h"

#include <stdio.h>
#include <string.h>

int ex_stream_alloc(ex_stream *s, nn_device *dev, int L, int B, int T, size_t row_bytes,
                    size_t acts_bytes, int recompute, size_t block_scratch, size_t head_scratch,
                    double *total, char *err, size_t cap) {
    memset(s, 0, sizeof *s);
    s->dev = dev;
    s->layers = L;
    s->recompute = recompute;
    s->row_bytes = row_bytes;
    s->acts_bytes = acts_bytes;
    const size_t rows = (size_t)B * (size_t)T;
    const size_t bytes[] = {(size_t)(L + 1) * rows * row_bytes,
                            (recompute ? 1 : (size_t)L) * acts_bytes, rows * row_bytes,
                            rows * row_bytes, block_scratch, head_scratch};
    void **ptrs[] = {(void **)&s->res, (void **)&s->acts, &s->dres[0], &s->dres[1],
                     &s->block_scratch, &s->head_scratch};
    static const char *const what[] = {"the residual stream", "the saved activations",
                                       "the stream's gradient", "the stream's gradient",
                                       "the blocks' scratch", "the head's scratch"};
    double sum = 0.0;
    for (size_t i = 0; i < sizeof bytes / sizeof bytes[0]; i++) {
        if (dev->ops->alloc(dev, bytes[i], ptrs[i]) != 0) {
            snprintf(err, cap, "%s, %.1f MiB: %s", what[i], (double)bytes[i] / (1024.0 * 1024.0),
                     dev->ops->last_error(dev));
            ex_stream_free(s);
            return -1;
        }
        sum += (double)bytes[i];
    }
    if (total) *total = sum;
    return 0;
}

void ex_stream_free(ex_stream *s) {
    if (!s->dev) return;
    void *ptrs[] = {s->res, s->acts, s->dres[0], s->dres[1], s->block_scratch, s->head_scratch};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) s->dev->ops->free(s->dev, ptrs[i]);
    memset(s, 0, sizeof *s);
}

void *ex_stream_residual(const ex_stream *s, int l, int B, int T) {
    return s->res + (size_t)l * (size_t)B * (size_t)T * s->row_bytes;
}

void *ex_stream_acts(const ex_stream *s, int l) {
    return s->acts + (s->recompute ? 0 : (size_t)l) * s->acts_bytes;
}

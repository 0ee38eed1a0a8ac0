/* The live-memory budget (src/zero/live.c) on its own, over the CPU backend:
 *   - carves never overlap, stay inside the buffer and start 256-byte aligned;
 *   - the tags add up: live_free + live_params + live_grads = the budget,
 *     after every operation of a long random sequence;
 *   - two ends: parameters fill from the bottom, gradients from the top;
 *   - refusals name the request, the budget and every holder, and say
 *     "fragmentation" when enough bytes are free but not in one piece. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "test_util.h"
#include "zero/live.h"

static void check_tags(const zs__mem *mem, const zs__live *live) {
    ZT_EQ_U64(mem->current[ZS_MEM_LIVE_FREE] + mem->current[ZS_MEM_LIVE_PARAMS] +
                  mem->current[ZS_MEM_LIVE_GRADS],
              live->capacity);
    ZT_EQ_U64(mem->current[ZS_MEM_LIVE_PARAMS] + mem->current[ZS_MEM_LIVE_GRADS], live->carved);
}

static void test_rounding_and_refusals(zs__backend *be) {
    zs__live live;
    /* The buffer holds whole 256-byte blocks only. */
    ZT_OK(zs__live_create(&live, be, 4096 + 100, 8));
    ZT_EQ_U64(live.capacity, 4096);
    ZT_EQ_U64(be->mem->current[ZS_MEM_LIVE_FREE], 4096);
    void *a, *b, *c, *d, *e;
    ZT_OK(zs__live_take(&live, "a", ZS__LIVE_PARAMS, 1000, &a)); /* span 1024 at 0 */
    ZT_OK(zs__live_take(&live, "b", ZS__LIVE_GRAD, 1024, &b));   /* at the top: 3072 */
    ZT_OK(zs__live_take(&live, "c", ZS__LIVE_PARAMS, 1024, &c)); /* next from the bottom: 1024 */
    ZT_OK(zs__live_take(&live, "d", ZS__LIVE_GRAD, 1, &d));      /* span 256 under b: 2816 */
    char *base = live.storage.ptr;
    ZT_CHECK_MSG((char *)a - base == 0 && (char *)b - base == 3072 && (char *)c - base == 1024 &&
                     (char *)d - base == 2816,
                 "placed at %td %td %td %td", (char *)a - base, (char *)b - base, (char *)c - base,
                 (char *)d - base);
    ZT_EQ_U64(be->mem->current[ZS_MEM_LIVE_PARAMS], 2024);
    ZT_EQ_U64(be->mem->current[ZS_MEM_LIVE_GRADS], 1025);
    check_tags(be->mem, &live);
    /* 768 bytes remain in the middle; 1000 do not fit and the message lists the holders. */
    ZT_FAILS_WITH(zs__live_take(&live, "e", ZS__LIVE_PARAMS, 1000, &e), ZS_ERR_OUT_OF_MEMORY,
                  "'e' parameters needs 1000 bytes");
    ZT_CHECK_MSG(strstr(zs_last_error(), "held now: 'a' parameters (1000 bytes), 'c' parameters "
                                         "(1024 bytes), 'd' gradient (1 bytes), 'b' gradient "
                                         "(1024 bytes)") != NULL,
                 "message: %s", zs_last_error());
    /* Free a: 1024 + 768 bytes free (2047 counting exact sizes), but no
     * 1536-byte extent. */
    zs__live_give(&live, a);
    check_tags(be->mem, &live);
    ZT_FAILS_WITH(zs__live_take(&live, "f", ZS__LIVE_GRAD, 1500, &e), ZS_ERR_OUT_OF_MEMORY,
                  "the largest free extent is 1024 bytes (fragmentation)");
    /* Two ends: parameters take the lowest gap that holds them, gradients
     * the top of the highest one. */
    ZT_OK(zs__live_take(&live, "g", ZS__LIVE_PARAMS, 700, &e));
    ZT_CHECK_MSG((char *)e - base == 0, "parameters placed at %td", (char *)e - base);
    void *h = NULL;
    ZT_OK(zs__live_take(&live, "h", ZS__LIVE_GRAD, 200, &h));
    ZT_CHECK_MSG((char *)h - base == 2560, "gradient placed at %td", (char *)h - base);
    zs__live_give(&live, e);
    zs__live_give(&live, h);
    zs__live_give(&live, b);
    zs__live_give(&live, c);
    zs__live_give(&live, d);
    ZT_EQ_U64(live.carved, 0);
    ZT_EQ_U64(live.carved_peak, 3049);
    check_tags(be->mem, &live);
    /* The block count is bounded too (the caller's max_live_units). */
    zs__live_destroy(&live);
    ZT_OK(zs__live_create(&live, be, 4096, 1));
    ZT_OK(zs__live_take(&live, "a", ZS__LIVE_PARAMS, 10, &a));
    ZT_FAILS_WITH(zs__live_take(&live, "b", ZS__LIVE_PARAMS, 10, &b), ZS_ERR_OUT_OF_MEMORY,
                  "held now: 'a' parameters (10 bytes)");
    /* Destroying with a block still carved gives everything back. */
    zs__live_destroy(&live);
    ZT_EQ_U64(be->mem->current[ZS_MEM_LIVE_FREE] + be->mem->current[ZS_MEM_LIVE_PARAMS] +
                  be->mem->current[ZS_MEM_LIVE_GRADS],
              0);
}

/* Random carves and releases; after every operation the blocks are disjoint,
 * aligned, inside the buffer, and the tags add up. */
static void test_random_sequences(zs__backend *be) {
    enum { MAX_BLOCKS = 12, OPS = 20000 };
    zs__live live;
    ZT_OK(zs__live_create(&live, be, 1 << 16, MAX_BLOCKS));
    void *held[MAX_BLOCKS];
    size_t sizes[MAX_BLOCKS];
    int count = 0, refusals = 0, bad = 0;
    uint64_t state = 12345;
    for (int op = 0; op < OPS && bad == 0; op++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(state >> 33);
        if (count > 0 && (r % 3 == 0 || count == MAX_BLOCKS)) {
            int i = (int)((r >> 4) % (uint32_t)count);
            zs__live_give(&live, held[i]);
            held[i] = held[count - 1];
            sizes[i] = sizes[count - 1];
            count--;
        } else {
            size_t bytes = 1 + (r >> 5) % 20000;
            void *p = NULL;
            if (zs__live_take(&live, "x", (r & 1) ? ZS__LIVE_GRAD : ZS__LIVE_PARAMS, bytes, &p) ==
                ZS_OK) {
                memset(p, (int)(op & 0xff), bytes); /* the bytes are really there */
                held[count] = p;
                sizes[count] = bytes;
                count++;
            } else {
                refusals++;
            }
        }
        size_t carved = 0;
        for (int i = 0; i < count; i++) {
            size_t off = (size_t)((char *)held[i] - (char *)live.storage.ptr);
            carved += sizes[i];
            if (off % ZS__LIVE_ALIGN != 0 || off + sizes[i] > live.capacity) bad++;
            for (int j = 0; j < i; j++) {
                size_t oj = (size_t)((char *)held[j] - (char *)live.storage.ptr);
                if (off < oj + sizes[j] && oj < off + sizes[i]) bad++;
            }
        }
        if (carved != live.carved) bad++;
        if (be->mem->current[ZS_MEM_LIVE_FREE] + carved != live.capacity) bad++;
    }
    ZT_CHECK_MSG(bad == 0, "%d violations of the block invariants", bad);
    ZT_CHECK_MSG(refusals > 0, "the sequence never filled the budget (the test would prove little)");
    zs__live_destroy(&live);
}

int main(void) {
    zs__mem mem;
    memset(&mem, 0, sizeof mem);
    zs__backend *be = NULL;
    ZT_OK(zs__cpu_backend_create(&mem, &be));
    if (be) {
        test_rounding_and_refusals(be);
        test_random_sequences(be);
        zs__backend_destroy(be);
    }
    return zt_finish("test_live");
}

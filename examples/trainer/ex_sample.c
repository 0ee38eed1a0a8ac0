/* Temperature + top-k sampling (see ex_sample.h). */
#include "ex_sample.h"

#include <math.h>
#include <stdlib.h>

/* splitmix64: one 64-bit step; small, fast, and the same on every platform. */
static uint64_t next_u64(ex_rng *rng) {
    uint64_t z = (rng->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void ex_rng_seed(ex_rng *rng, uint64_t seed) { rng->state = seed; }

double ex_rng_uniform(ex_rng *rng) { return (double)(next_u64(rng) >> 11) * 0x1.0p-53; }

/* Moves the k largest values (and their ids) to the front, by selection:
 * k is small (top-k sampling keeps tens of tokens), so O(V k) is cheap and
 * needs no allocation. Ties keep the lower id first. */
static void select_top(float *values, int *ids, int V, int k) {
    for (int i = 0; i < k; i++) {
        int best = i;
        for (int j = i + 1; j < V; j++)
            if (values[j] > values[best] || (values[j] == values[best] && ids[j] < ids[best]))
                best = j;
        float v = values[i];
        int id = ids[i];
        values[i] = values[best];
        ids[i] = ids[best];
        values[best] = v;
        ids[best] = id;
    }
}

int ex_sample_token(const float *logits, int V, double temperature, int top_k, ex_rng *rng,
                      float *values, int *ids) {
    for (int v = 0; v < V; v++) {
        values[v] = logits[v];
        ids[v] = v;
    }
    if (temperature <= 0.0) {
        select_top(values, ids, V, 1);
        return ids[0];
    }
    const int k = top_k <= 0 || top_k > V ? V : top_k;
    if (k < V) select_top(values, ids, V, k);
    /* Softmax over the kept tokens at this temperature, shifted by the
     * largest logit so that exp never overflows. */
    float top = values[0];
    for (int i = 1; i < k; i++)
        if (values[i] > top) top = values[i];
    double sum = 0.0;
    for (int i = 0; i < k; i++) {
        double p = exp(((double)values[i] - top) / temperature);
        values[i] = (float)p;
        sum += p;
    }
    double u = ex_rng_uniform(rng) * sum, acc = 0.0;
    for (int i = 0; i < k; i++) {
        acc += values[i];
        if (u < acc) return ids[i];
    }
    return ids[k - 1];
}

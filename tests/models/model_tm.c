/* The test models' shared part (model_tm.h). */
#include "model_tm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ inputs */

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

double mt_uniform(uint64_t *state) {
    *state += UINT64_C(0x9e3779b97f4a7c15);
    return (double)(mix(*state) >> 11) * (1.0 / 9007199254740992.0);
}

double mt_normal(uint64_t *state) {
    // Box-Muller; 1 - u keeps the logarithm's argument in (0, 1].
    const double u1 = 1.0 - mt_uniform(state);
    const double u2 = mt_uniform(state);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void mt_random_tokens(int n, int vocab, int *out, uint64_t seed) {
    uint64_t state = mix(seed ^ UINT64_C(0x746f6b656e73)); /* "tokens" */
    for (int i = 0; i < n; i++) out[i] = (int)(mt_uniform(&state) * vocab);
}

int64_t mt_unit_offset(const nn_param_table *t, const void *dims, int unit) {
    int64_t off = 0;
    for (int u = 0; u < unit; u++) {
        for (int i = 0; i < t->unit_num_params(dims, u); i++) {
            nn_param_spec s;
            t->param_spec(dims, u, i, &s);
            off += s.numel;
        }
    }
    return off;
}

int64_t mt_param_offset(const nn_param_table *t, const void *dims, int unit, int index) {
    nn_param_spec s;
    t->param_spec(dims, unit, index, &s);
    return mt_unit_offset(t, dims, unit) + s.offset;
}

int64_t mt_num_params(const nn_param_table *t, const void *dims) {
    return mt_unit_offset(t, dims, t->num_units(dims));
}

void mt_init_params(const nn_param_table *t, const void *dims, float *host_params, uint64_t seed,
                    double gain, double jitter) {
    uint64_t state = mix(seed);
    for (int u = 0; u < t->num_units(dims); u++) {
        const int64_t base = mt_unit_offset(t, dims, u);
        for (int i = 0; i < t->unit_num_params(dims, u); i++) {
            nn_param_spec s;
            t->param_spec(dims, u, i, &s);
            float *p = host_params + base + s.offset;
            for (int64_t k = 0; k < s.numel; k++) {
                const double z = mt_normal(&state);
                switch (s.init) {
                case NN_INIT_NORMAL: p[k] = (float)(gain * s.init_std * z); break;
                case NN_INIT_ZEROS: p[k] = (float)(jitter * z); break;
                case NN_INIT_ONES: p[k] = (float)(1.0 + jitter * z); break;
                }
            }
        }
    }
}

long long mt_first_diff(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) return (long long)i;
    return -1;
}

/* ------------------------------------------------------- step results */

int mt_step_result_alloc(mt_step_result *r, size_t n_grads, size_t n_resid, size_t n_acts,
                         size_t n_losses) {
    memset(r, 0, sizeof *r);
    r->n_grads = n_grads;
    r->n_resid = n_resid;
    r->n_acts = n_acts;
    r->n_losses = n_losses;
    r->grads = malloc(sizeof(float) * n_grads);
    r->resid = malloc(sizeof(float) * n_resid);
    r->acts = malloc(sizeof(float) * n_acts);
    r->losses = malloc(sizeof(float) * n_losses);
    if (r->grads && r->resid && r->acts && r->losses) return 0;
    mt_step_result_free(r);
    return -1;
}

void mt_step_result_free(mt_step_result *r) {
    free(r->grads);
    free(r->resid);
    free(r->acts);
    free(r->losses);
    memset(r, 0, sizeof *r);
}

int mt_step_result_compare(const mt_step_result *a, const mt_step_result *b, char *what,
                           size_t cap) {
    if (memcmp(&a->loss, &b->loss, sizeof(double)) != 0) {
        snprintf(what, cap, "loss %.17g vs %.17g", a->loss, b->loss);
        return 1;
    }
    const struct {
        const char *name;
        const float *x, *y;
        size_t n;
    } arrays[4] = {{"gradient", a->grads, b->grads, a->n_grads},
                   {"residual stream", a->resid, b->resid, a->n_resid},
                   {"activations", a->acts, b->acts, a->n_acts},
                   {"losses", a->losses, b->losses, a->n_losses}};
    for (int i = 0; i < 4; i++) {
        const long long k = mt_first_diff(arrays[i].x, arrays[i].y, arrays[i].n);
        if (k >= 0) {
            snprintf(what, cap, "%s [%lld]: %.9g vs %.9g", arrays[i].name, k,
                     (double)arrays[i].x[k], (double)arrays[i].y[k]);
            return 1;
        }
    }
    snprintf(what, cap, "equal");
    return 0;
}

/* ------------------------------------------- finite-difference gradients */

/* The loss with params[k] moved by delta; *h_eff the move float rounding
 * made. 0, or -1 when the model fails. */
static int fd_loss(const mt_fd_model *fm, float *params, int64_t k, double delta, double *h_eff,
                   double *loss) {
    const float saved = params[k];
    params[k] = (float)((double)saved + delta);
    *h_eff = (double)params[k] - (double)saved;
    int rc = fm->set_params(fm->model, params);
    if (rc == 0) rc = fm->loss(fm->model, loss);
    params[k] = saved;
    return rc == 0 ? 0 : -1;
}

static int fd_gradient(const mt_fd_model *fm, float *params, int64_t k, double *out) {
    // The stencil needs p +- h and p +- 2h exactly; float rounding of p + h
    // makes them slightly uneven, so each is measured (h_eff) and the
    // stencil is applied with their mean, which is exact to O(h * 2^-24).
    double h1p, h1m, h2p, h2m, lp1, lm1, lp2, lm2;
    if (fd_loss(fm, params, k, MT_FD_STEP, &h1p, &lp1) != 0 ||
        fd_loss(fm, params, k, -MT_FD_STEP, &h1m, &lm1) != 0 ||
        fd_loss(fm, params, k, 2 * MT_FD_STEP, &h2p, &lp2) != 0 ||
        fd_loss(fm, params, k, -2 * MT_FD_STEP, &h2m, &lm2) != 0)
        return -1;
    const double h = (h1p - h1m + (h2p - h2m) / 2.0) / 4.0;
    *out = (8.0 * (lp1 - lm1) - (lp2 - lm2)) / (12.0 * h);
    return 0;
}

/* The MT_FD_TOP largest |g| of a tensor, largest first; and the largest. */
static double top_elements(const float *g, int64_t n, int64_t *top) {
    double maxabs = 0.0;
    for (int j = 0; j < MT_FD_TOP; j++) top[j] = -1;
    for (int64_t k = 0; k < n; k++) {
        const double a = fabs(g[k]);
        maxabs = a > maxabs ? a : maxabs;
        for (int j = 0; j < MT_FD_TOP; j++) {
            if (top[j] < 0 || a > fabs(g[top[j]])) {
                for (int q = MT_FD_TOP - 1; q > j; q--) top[q] = top[q - 1];
                top[j] = k;
                break;
            }
        }
    }
    return maxabs;
}

int mt_gradient_check(const mt_fd_model *fm, const nn_param_table *t, const void *dims,
                      float *params, const float *grads, const char *label, int verbose,
                      double *worst) {
    uint64_t rng = 99;
    int failures = 0;
    *worst = 0.0;
    for (int u = 0; u < t->num_units(dims); u++) {
        for (int i = 0; i < t->unit_num_params(dims, u); i++) {
            nn_param_spec s;
            t->param_spec(dims, u, i, &s);
            const int64_t base = mt_param_offset(t, dims, u, i);
            int64_t top[MT_FD_TOP];
            const double maxabs = top_elements(grads + base, s.numel, top);
            if (!(maxabs > 1e-4)) {
                fprintf(stderr, "%s: %s: largest gradient %g; the check would be vacuous\n",
                        label, s.name, maxabs);
                failures++;
            }
            const double atol = MT_FD_ATOL_FRAC * maxabs + MT_FD_ATOL_MIN;
            double tensor_worst = 0.0;
            for (int j = 0; j < MT_FD_TOP + MT_FD_RANDOM; j++) {
                const int64_t k =
                    j < MT_FD_TOP ? top[j] : (int64_t)(mt_uniform(&rng) * (double)s.numel);
                double fd;
                if (fd_gradient(fm, params, base + k, &fd) != 0) return -1;
                const double an = grads[base + k];
                const double bound = MT_FD_RTOL * fabs(fd) + atol;
                const double err = fabs(an - fd);
                tensor_worst = err / bound > tensor_worst ? err / bound : tensor_worst;
                if (!(err <= bound)) {
                    fprintf(stderr,
                            "%s: %s[%lld]: backward %.7g, finite difference %.7g (|diff| %.3g > "
                            "bound %.3g)\n",
                            label, s.name, (long long)k, an, fd, err, bound);
                    failures++;
                }
                if (verbose)
                    printf("  %-44s [%5lld] backward %+.6e fd %+.6e  err/bound %.3f\n", s.name,
                           (long long)k, an, fd, err / bound);
            }
            if (verbose)
                printf("%-46s max|g| %.3e  worst err/bound %.3f\n", s.name, maxabs,
                       tensor_worst);
            *worst = tensor_worst > *worst ? tensor_worst : *worst;
        }
    }
    // The last loss evaluated was at a moved parameter: put params back.
    if (fm->set_params(fm->model, params) != 0) return -1;
    return failures;
}

/* Data sets for training: the embedded UCI digits set, synthetic data, seeded batch order. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "optitpu/train.h"
#include "train/train_internal.h"

extern const unsigned char ot_digits_csv[];
extern const size_t ot_digits_csv_len;

#define DIGITS_FEATURES 64
#define DIGITS_CLASSES  10

void ot_dataset_free(ot_dataset *d) {
    if (!d) return;
    ot_free(d->x);
    ot_free(d->y);
    memset(d, 0, sizeof *d);
}

static ot_status dataset_alloc(ot_dataset *d, int64_t n, int64_t features, int64_t classes) {
    memset(d, 0, sizeof *d);
    if (n < 0 || features <= 0 || classes < 2 || n > (INT64_C(1) << 40) / features)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "data set of %lld samples x %lld features",
                        (long long)n, (long long)features);
    d->x = ot_calloc((size_t)(n * features) + 1, sizeof(float));
    d->y = ot_calloc((size_t)n + 1, sizeof(int32_t));
    if (!d->x || !d->y) {
        ot_dataset_free(d);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "data set of %lld samples", (long long)n);
    }
    d->n = n;
    d->features = features;
    d->classes = classes;
    return OT_OK;
}

/* Reads one non-negative decimal integer field ending at ',' '\n' '\r' or the end. */
static bool read_field(const char *s, size_t len, size_t *pos, int64_t *out) {
    size_t p = *pos;
    int64_t v = 0;
    size_t digits = 0;
    while (p < len && s[p] >= '0' && s[p] <= '9') {
        if (digits >= 9) return false; /* longer than any valid field */
        v = v * 10 + (s[p] - '0');
        p++;
        digits++;
    }
    if (digits == 0) return false;
    *pos = p;
    *out = v;
    return true;
}

ot_status ot_dataset_parse_digits_csv(const char *text, size_t len, ot_dataset *out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "digits csv: NULL output");
    memset(out, 0, sizeof *out);
    if (!text && len) return ot_error(OT_ERR_INVALID_ARGUMENT, "digits csv: NULL text");
    /* Count the rows (non-empty lines) first. */
    int64_t rows = 0;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && text[j] != '\n') j++;
        size_t e = j;
        if (e > i && text[e - 1] == '\r') e--;
        if (e > i) rows++;
        i = j + 1;
    }
    if (rows == 0) return ot_error(OT_ERR_INVALID_ARGUMENT, "digits csv: no rows");
    ot_dataset d;
    ot_status s = dataset_alloc(&d, rows, DIGITS_FEATURES, DIGITS_CLASSES);
    if (s != OT_OK) return s;
    int64_t row = 0, line = 0;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && text[j] != '\n') j++;
        size_t e = j;
        line++;
        if (e > i && text[e - 1] == '\r') e--;
        if (e > i) {
            size_t p = i;
            for (int f = 0; f <= DIGITS_FEATURES; f++) {
                int64_t v;
                if (!read_field(text, e, &p, &v)) {
                    ot_dataset_free(&d);
                    return ot_error(OT_ERR_INVALID_ARGUMENT,
                                    "digits csv: line %lld field %d: expected a non-negative "
                                    "integer",
                                    (long long)line, f + 1);
                }
                if (f < DIGITS_FEATURES) {
                    if (v > 16) {
                        ot_dataset_free(&d);
                        return ot_error(OT_ERR_INVALID_ARGUMENT,
                                        "digits csv: line %lld field %d: pixel %lld outside 0..16",
                                        (long long)line, f + 1, (long long)v);
                    }
                    d.x[row * DIGITS_FEATURES + f] = (float)v / 16.0f;
                } else {
                    if (v >= DIGITS_CLASSES) {
                        ot_dataset_free(&d);
                        return ot_error(OT_ERR_INVALID_ARGUMENT,
                                        "digits csv: line %lld: label %lld outside 0..9",
                                        (long long)line, (long long)v);
                    }
                    d.y[row] = (int32_t)v;
                }
                bool last = f == DIGITS_FEATURES;
                if (!last) {
                    if (p >= e || text[p] != ',') {
                        ot_dataset_free(&d);
                        return ot_error(OT_ERR_INVALID_ARGUMENT,
                                        "digits csv: line %lld: %d fields, expected %d",
                                        (long long)line, f + 1, DIGITS_FEATURES + 1);
                    }
                    p++;
                } else if (p != e) {
                    ot_dataset_free(&d);
                    return ot_error(OT_ERR_INVALID_ARGUMENT,
                                    "digits csv: line %lld: more than %d fields or trailing text",
                                    (long long)line, DIGITS_FEATURES + 1);
                }
            }
            row++;
        }
        i = j + 1;
    }
    *out = d;
    return OT_OK;
}

ot_status ot_dataset_digits(ot_dataset *train, ot_dataset *test) {
    if (!train || !test) return ot_error(OT_ERR_INVALID_ARGUMENT, "digits: NULL output");
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    ot_dataset all;
    ot_status s = ot_dataset_parse_digits_csv((const char *)ot_digits_csv, ot_digits_csv_len, &all);
    if (s != OT_OK) return s;
    int64_t ntest = 0;
    for (int64_t i = 0; i < all.n; i++) ntest += (i % 5 == 4);
    s = dataset_alloc(train, all.n - ntest, all.features, all.classes);
    if (s == OT_OK) s = dataset_alloc(test, ntest, all.features, all.classes);
    if (s != OT_OK) {
        ot_dataset_free(&all);
        ot_dataset_free(train);
        return s;
    }
    int64_t a = 0, b = 0;
    for (int64_t i = 0; i < all.n; i++) {
        ot_dataset *d = (i % 5 == 4) ? test : train;
        int64_t k = (i % 5 == 4) ? b++ : a++;
        memcpy(d->x + k * all.features, all.x + i * all.features, (size_t)all.features * 4);
        d->y[k] = all.y[i];
    }
    ot_dataset_free(&all);
    return OT_OK;
}

/* splitmix64 (Steele, Lea, Flood 2014): the seeded stream behind shuffles and initialization. */
uint64_t ot_train_rng_next(uint64_t *state) {
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

double ot_train_rng_uniform(uint64_t *state) {
    return (double)(ot_train_rng_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

double ot_train_rng_normal(uint64_t *state) {
    /* Box-Muller on (0, 1] x [0, 1). */
    double u1 = 1.0 - ot_train_rng_uniform(state);
    double u2 = ot_train_rng_uniform(state);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* A uniform integer in [0, n) without modulo bias (Lemire's method, rejection form). */
static uint64_t rng_below(uint64_t *state, uint64_t n) {
    uint64_t threshold = (0 - n) % n;
    for (;;) {
        uint64_t r = ot_train_rng_next(state);
        if (r >= threshold) return r % n;
    }
}

ot_status ot_dataset_synthetic(int64_t n, int64_t features, int64_t classes, double noise,
                               uint64_t seed, ot_dataset *out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "synthetic: NULL output");
    if (!(noise >= 0) || n <= 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "synthetic: n %lld, noise %g", (long long)n,
                        noise);
    ot_status s = dataset_alloc(out, n, features, classes);
    if (s != OT_OK) return s;
    float *centre = ot_calloc((size_t)(classes * features), sizeof(float));
    if (!centre) {
        ot_dataset_free(out);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "synthetic: class centres");
    }
    uint64_t st = seed ^ UINT64_C(0x5D1C0DE5);
    for (int64_t i = 0; i < classes * features; i++) centre[i] = (float)ot_train_rng_normal(&st);
    for (int64_t i = 0; i < n; i++) {
        int32_t c = (int32_t)rng_below(&st, (uint64_t)classes);
        out->y[i] = c;
        for (int64_t f = 0; f < features; f++)
            out->x[i * features + f] =
                centre[c * features + f] + (float)(noise * ot_train_rng_normal(&st));
    }
    ot_free(centre);
    return OT_OK;
}

ot_status ot_train_batch_indices(int64_t n, int64_t batch, uint64_t seed, int64_t step,
                                 int64_t *perm, int64_t *perm_epoch, int64_t *idx) {
    if (n <= 0 || batch <= 0 || batch > n || step < 0 || !idx || !perm || !perm_epoch)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "batch indices: %lld samples, batch %lld, step %lld", (long long)n,
                        (long long)batch, (long long)step);
    int64_t per_epoch = n / batch;
    int64_t epoch = step / per_epoch, k = step % per_epoch;
    if (*perm_epoch != epoch) {
        for (int64_t i = 0; i < n; i++) perm[i] = i;
        uint64_t st = seed * UINT64_C(0x9E3779B97F4A7C15) ^ (uint64_t)epoch ^ UINT64_C(0xD1617A);
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)rng_below(&st, (uint64_t)i + 1);
            int64_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        *perm_epoch = epoch;
    }
    memcpy(idx, perm + k * batch, (size_t)batch * sizeof *idx);
    return OT_OK;
}

ot_status ot_dataset_batch_indices(int64_t n, int64_t batch, uint64_t seed, int64_t step,
                                   int64_t *idx) {
    if (n <= 0 || batch <= 0 || batch > n || step < 0 || !idx)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "batch indices: %lld samples, batch %lld, step %lld", (long long)n,
                        (long long)batch, (long long)step);
    int64_t *perm = ot_malloc((size_t)n * sizeof *perm);
    if (!perm)
        return ot_error(OT_ERR_OUT_OF_MEMORY, "batch indices: permutation of %lld", (long long)n);
    int64_t epoch = -1;
    ot_status s = ot_train_batch_indices(n, batch, seed, step, perm, &epoch, idx);
    ot_free(perm);
    return s;
}

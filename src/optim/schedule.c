/* Learning-rate schedules (optim.h): closed forms in f64, optax's expression order. */
#include <math.h>
#include <string.h>

#include "optitpu/optim.h"

#define MAX_PIECES 64

typedef enum kind {
    K_CONSTANT,
    K_PIECEWISE,
    K_EXPONENTIAL,
    K_POLYNOMIAL,
    K_COSINE,
    K_RESTARTS,
    K_ONECYCLE,
    K_JOIN,
} kind;

static const char *const kind_names[] = {
    "constant", "piecewise_constant", "exponential", "polynomial",
    "cosine",   "cosine_restarts",    "onecycle",    "join"};

struct ot_lr_schedule {
    kind k;
    const char *name;
    double init, end, rate, power;
    int64_t steps, begin;
    bool staircase, torch;
    int n;
    int64_t bounds[MAX_PIECES];
    double scales[MAX_PIECES];
    ot_lr_schedule **children;
};

static ot_status make(kind k, ot_lr_schedule **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "schedule: out is NULL");
    *out = ot_calloc(1, sizeof **out);
    if (!*out) return ot_error(OT_ERR_OUT_OF_MEMORY, "schedule");
    (*out)->k = k;
    (*out)->name = kind_names[k];
    return OT_OK;
}

void ot_lr_schedule_free(ot_lr_schedule *s) {
    if (!s) return;
    for (int i = 0; s->children && i < s->n; i++) ot_lr_schedule_free(s->children[i]);
    ot_free(s->children);
    ot_free(s);
}

const char *ot_lr_schedule_kind(const ot_lr_schedule *s) {
    return s ? s->name : NULL;
}

static ot_status check_finite(const char *what, double v) {
    if (!isfinite(v)) return ot_error(OT_ERR_INVALID_ARGUMENT, "schedule: %s = %g", what, v);
    return OT_OK;
}

ot_status ot_lr_schedule_constant(double value, ot_lr_schedule **out) {
    OT_CHECK(check_finite("value", value));
    OT_CHECK(make(K_CONSTANT, out));
    (*out)->init = value;
    return OT_OK;
}

ot_status ot_lr_schedule_piecewise_constant(double init, const int64_t *boundaries,
                                            const double *scales, int n, ot_lr_schedule **out) {
    OT_CHECK(check_finite("init", init));
    if (n < 0 || n > MAX_PIECES || (n > 0 && (!boundaries || !scales)))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "schedule: %d boundaries (0..%d, with scales)", n,
                        MAX_PIECES);
    for (int i = 0; i < n; i++) {
        if (!(scales[i] >= 0) || !isfinite(scales[i]))
            return ot_error(OT_ERR_INVALID_ARGUMENT, "schedule: scale %d = %g (finite, >= 0)", i,
                            scales[i]);
        if (i > 0 && boundaries[i] <= boundaries[i - 1])
            return ot_error(OT_ERR_INVALID_ARGUMENT, "schedule: boundaries must increase");
    }
    OT_CHECK(make(K_PIECEWISE, out));
    (*out)->init = init;
    (*out)->n = n;
    for (int i = 0; i < n; i++) {
        (*out)->bounds[i] = boundaries[i];
        (*out)->scales[i] = scales[i];
    }
    return OT_OK;
}

ot_status ot_lr_schedule_exponential(double init, int64_t transition_steps, double decay_rate,
                                     int64_t transition_begin, bool staircase, double end_value,
                                     ot_lr_schedule **out) {
    OT_CHECK(check_finite("init", init));
    OT_CHECK(check_finite("decay_rate", decay_rate));
    if (transition_steps <= 0 || decay_rate < 0 || transition_begin < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "schedule: exponential needs transition_steps > 0, decay_rate >= 0, "
                        "transition_begin >= 0");
    OT_CHECK(make(K_EXPONENTIAL, out));
    ot_lr_schedule *s = *out;
    s->init = init;
    s->steps = transition_steps;
    s->rate = decay_rate;
    s->begin = transition_begin;
    s->staircase = staircase;
    s->end = end_value;
    return OT_OK;
}

ot_status ot_lr_schedule_step(double init, int64_t step_size, double gamma, ot_lr_schedule **out) {
    if (step_size <= 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "schedule: step_size %lld (> 0)",
                        (long long)step_size);
    OT_CHECK(ot_lr_schedule_exponential(init, step_size, gamma, 0, true, NAN, out));
    (*out)->name = "step";
    return OT_OK;
}

ot_status ot_lr_schedule_polynomial(double init, double end, double power, int64_t transition_steps,
                                    int64_t transition_begin, ot_lr_schedule **out) {
    OT_CHECK(check_finite("init", init));
    OT_CHECK(check_finite("end", end));
    OT_CHECK(check_finite("power", power));
    if (transition_steps <= 0 || transition_begin < 0)
        return ot_error(
            OT_ERR_INVALID_ARGUMENT,
            "schedule: polynomial needs transition_steps > 0 and transition_begin >= 0");
    OT_CHECK(make(K_POLYNOMIAL, out));
    ot_lr_schedule *s = *out;
    s->init = init;
    s->end = end;
    s->power = power;
    s->steps = transition_steps;
    s->begin = transition_begin;
    return OT_OK;
}

ot_status ot_lr_schedule_linear(double init, double end, int64_t transition_steps,
                                int64_t transition_begin, ot_lr_schedule **out) {
    OT_CHECK(ot_lr_schedule_polynomial(init, end, 1.0, transition_steps, transition_begin, out));
    (*out)->name = "linear";
    return OT_OK;
}

ot_status ot_lr_schedule_cosine(double init, double end, int64_t decay_steps, double exponent,
                                ot_lr_schedule **out) {
    OT_CHECK(check_finite("init", init));
    OT_CHECK(check_finite("end", end));
    OT_CHECK(check_finite("exponent", exponent));
    if (decay_steps <= 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "schedule: cosine decay_steps %lld (> 0)",
                        (long long)decay_steps);
    OT_CHECK(make(K_COSINE, out));
    ot_lr_schedule *s = *out;
    s->init = init;
    s->end = end;
    s->rate = init == 0.0 ? 0.0 : end / init; /* optax's alpha */
    s->power = exponent;
    s->steps = decay_steps;
    return OT_OK;
}

ot_status ot_lr_schedule_join(ot_lr_schedule **children, int n, const int64_t *boundaries,
                              ot_lr_schedule **out) {
    ot_status st = OT_OK;
    if (!out) st = ot_error(OT_ERR_INVALID_ARGUMENT, "schedule: out is NULL");
    if (st == OT_OK && (n < 1 || n > MAX_PIECES || !children || (n > 1 && !boundaries)))
        st = ot_error(OT_ERR_INVALID_ARGUMENT, "schedule: join of %d schedules (1..%d)", n,
                      MAX_PIECES);
    for (int i = 0; st == OT_OK && i < n; i++)
        if (!children[i]) st = ot_error(OT_ERR_INVALID_ARGUMENT, "schedule: child %d is NULL", i);
    for (int i = 1; st == OT_OK && i < n - 1; i++)
        if (boundaries[i] <= boundaries[i - 1])
            st = ot_error(OT_ERR_INVALID_ARGUMENT, "schedule: boundaries must increase");
    if (st == OT_OK) st = make(K_JOIN, out);
    ot_lr_schedule **kids = NULL;
    if (st == OT_OK && !(kids = ot_calloc((size_t)n, sizeof *kids))) {
        ot_free(*out);
        *out = NULL;
        st = ot_error(OT_ERR_OUT_OF_MEMORY, "schedule");
    }
    if (st != OT_OK) {
        for (int i = 0; children && i < n; i++) ot_lr_schedule_free(children[i]);
        return st;
    }
    ot_lr_schedule *s = *out;
    s->children = kids;
    s->n = n;
    for (int i = 0; i < n; i++) {
        kids[i] = children[i];
        if (i > 0) s->bounds[i - 1] = boundaries[i - 1];
    }
    return OT_OK;
}

ot_status ot_lr_schedule_warmup_cosine(double init, double peak, int64_t warmup_steps,
                                       int64_t decay_steps, double end, double exponent,
                                       ot_lr_schedule **out) {
    if (warmup_steps < 0 || decay_steps <= warmup_steps)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "schedule: warmup_cosine needs 0 <= warmup_steps < decay_steps");
    ot_lr_schedule *kids[2] = {NULL, NULL};
    if (warmup_steps == 0) {
        OT_CHECK(ot_lr_schedule_cosine(peak, end, decay_steps, exponent, out));
        return OT_OK;
    }
    ot_status st = ot_lr_schedule_linear(init, peak, warmup_steps, 0, &kids[0]);
    if (st == OT_OK)
        st = ot_lr_schedule_cosine(peak, end, decay_steps - warmup_steps, exponent, &kids[1]);
    if (st != OT_OK) {
        ot_lr_schedule_free(kids[0]);
        return st;
    }
    OT_CHECK(ot_lr_schedule_join(kids, 2, &warmup_steps, out));
    (*out)->name = "warmup_cosine";
    return OT_OK;
}

ot_status ot_lr_schedule_sgdr(const double *init, const double *peak, const int64_t *warmup,
                              const int64_t *decay_steps, const double *end, int n,
                              ot_lr_schedule **out) {
    if (n < 1 || n > MAX_PIECES || !init || !peak || !warmup || !decay_steps || !end)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "schedule: sgdr of %d cycles (1..%d)", n,
                        MAX_PIECES);
    ot_lr_schedule *kids[MAX_PIECES] = {0};
    int64_t bounds[MAX_PIECES];
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        ot_status st = ot_lr_schedule_warmup_cosine(init[i], peak[i], warmup[i], decay_steps[i],
                                                    end[i], 1.0, &kids[i]);
        if (st != OT_OK) {
            for (int j = 0; j < i; j++) ot_lr_schedule_free(kids[j]);
            return st;
        }
        at += decay_steps[i];
        bounds[i] = at;
    }
    OT_CHECK(ot_lr_schedule_join(kids, n, bounds, out));
    (*out)->name = "sgdr";
    return OT_OK;
}

ot_status ot_lr_schedule_cosine_restarts(double base, double eta_min, int64_t t0, int64_t t_mult,
                                         ot_lr_schedule **out) {
    OT_CHECK(check_finite("base", base));
    OT_CHECK(check_finite("eta_min", eta_min));
    if (t0 <= 0 || t_mult < 1)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "schedule: cosine_restarts needs T_0 > 0 and T_mult >= 1");
    OT_CHECK(make(K_RESTARTS, out));
    ot_lr_schedule *s = *out;
    s->init = base;
    s->end = eta_min;
    s->steps = t0;
    s->begin = t_mult;
    return OT_OK;
}

ot_status ot_lr_schedule_onecycle(int64_t total_steps, double peak, double pct_start,
                                  double div_factor, double final_div_factor, bool torch_convention,
                                  ot_lr_schedule **out) {
    OT_CHECK(check_finite("peak", peak));
    if (total_steps <= 1 || !(pct_start > 0 && pct_start < 1) || !(div_factor > 0) ||
        !(final_div_factor > 0) || !isfinite(div_factor) || !isfinite(final_div_factor))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "schedule: onecycle needs total_steps > 1, 0 < pct_start < 1 and positive "
                        "div factors");
    OT_CHECK(make(K_ONECYCLE, out));
    ot_lr_schedule *s = *out;
    s->steps = total_steps;
    s->init = peak;
    s->rate = pct_start;
    s->scales[0] = div_factor;
    s->scales[1] = final_div_factor;
    s->torch = torch_convention;
    return OT_OK;
}

static double cos_interp(double start, double end, double pct) { /* optax and torch alike */
    return end + (start - end) / 2.0 * (cos(M_PI * pct) + 1);
}

static double onecycle(const ot_lr_schedule *s, double t) {
    double peak = s->init, div = s->scales[0], fdiv = s->scales[1];
    double total = (double)s->steps;
    if (s->torch) { /* torch OneCycleLR, two phases, cos */
        double initial = peak / div, min_lr = initial / fdiv;
        double end1 = (double)(s->rate * total) - 1, end2 = total - 1;
        if (t <= end1) return cos_interp(initial, peak, t / end1);
        return cos_interp(peak, min_lr, (t - end1) / (end2 - end1));
    }
    /* optax: piecewise_interpolate_schedule('cosine', peak/div, {int(pct*T): div, T: 1/(div*fdiv)})
     */
    double v0 = peak / div;
    double v1 = v0 * div;
    double v2 = v1 * (1.0 / (div * fdiv));
    double b1 = (double)(int64_t)(s->rate * total), b2 = total;
    if (t < b1) return cos_interp(v0, v1, t / fmax(b1, 1));
    if (t < b2) return cos_interp(v1, v2, (t - b1) / fmax(b2 - b1, 1));
    return v2;
}

double ot_lr_schedule_lr(const ot_lr_schedule *s, int64_t step) {
    if (!s) return NAN;
    if (step < 0) step = 0;
    double t = (double)step;
    switch (s->k) {
    case K_CONSTANT: return s->init;
    case K_PIECEWISE: {
        double v = s->init;
        for (int i = 0; i < s->n; i++)
            if (step >= s->bounds[i]) v = s->scales[i] * v;
        return v;
    }
    case K_EXPONENTIAL: {
        double dc = t - (double)s->begin;
        double p = dc / (double)s->steps;
        if (s->staircase) p = floor(p);
        double v = dc <= 0 ? s->init : s->init * pow(s->rate, p);
        if (!isnan(s->end)) v = s->rate < 1.0 ? fmax(v, s->end) : fmin(v, s->end);
        return v;
    }
    case K_POLYNOMIAL: {
        double c = fmin(fmax(t - (double)s->begin, 0.0), (double)s->steps);
        double frac = 1 - c / (double)s->steps;
        double fp = s->power == 1.0 ? frac : pow(frac, s->power);
        return (s->init - s->end) * fp + s->end;
    }
    case K_COSINE: {
        double c = fmin(t, (double)s->steps);
        double cd = 0.5 * (1 + cos(M_PI * c / (double)s->steps));
        double e = s->power == 1.0 ? cd : pow(cd, s->power);
        return s->init * ((1 - s->rate) * e + s->rate);
    }
    case K_RESTARTS: {
        int64_t ti = s->steps, tc = step;
        if (s->begin == 1) tc %= ti;
        while (tc >= ti) {
            tc -= ti;
            ti *= s->begin;
        }
        return s->end + (s->init - s->end) * (1 + cos(M_PI * (double)tc / (double)ti)) / 2;
    }
    case K_ONECYCLE: return onecycle(s, t);
    case K_JOIN: {
        int i = 0;
        while (i + 1 < s->n && step >= s->bounds[i]) i++;
        return ot_lr_schedule_lr(s->children[i], i == 0 ? step : step - s->bounds[i - 1]);
    }
    }
    return NAN;
}

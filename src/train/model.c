/* Models built with the graph API: softmax regression, an MLP and a small CNN, with softmax
 * cross-entropy and accuracy. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "optitpu/train.h"
#include "train/train_internal.h"

#define MAX_PARAMS (2 * (OT_MODEL_MAX_HIDDEN + 2))

struct ot_model {
    ot_model_config cfg;
    int nparams;
    char names[MAX_PARAMS][24];
    ot_shape shapes[MAX_PARAMS];
    int64_t fan_in[MAX_PARAMS], fan_out[MAX_PARAMS]; /* 0 for biases */
};

static const char *const kind_names[] = {"logreg", "mlp", "cnn"};
static const char *const act_names[] = {"relu", "gelu", "tanh"};

const char *ot_model_kind_name(ot_model_kind k) {
    return (unsigned)k < 3 ? kind_names[k] : "<invalid>";
}
int ot_model_kind_from_name(const char *s) {
    for (int i = 0; s && i < 3; i++)
        if (!strcmp(s, kind_names[i])) return i;
    return -1;
}
const char *ot_activation_name(ot_activation a) {
    return (unsigned)a < 3 ? act_names[a] : "<invalid>";
}
int ot_activation_from_name(const char *s) {
    for (int i = 0; s && i < 3; i++)
        if (!strcmp(s, act_names[i])) return i;
    return -1;
}

ot_model_config ot_model_config_default(void) {
    ot_model_config c;
    memset(&c, 0, sizeof c);
    c.kind = OT_MODEL_MLP;
    c.inputs = 64;
    c.classes = 10;
    c.nhidden = 1;
    c.hidden[0] = 128;
    c.activation = OT_ACT_RELU;
    c.image_h = 8;
    c.image_w = 8;
    c.channels = 8;
    return c;
}

static void add_param(ot_model *m, const char *name, int rank, const int64_t *dims, int64_t fi,
                      int64_t fo) {
    int k = m->nparams++;
    snprintf(m->names[k], sizeof m->names[k], "%s", name);
    ot_shape_make(&m->shapes[k], OT_F32, rank, dims);
    m->fan_in[k] = fi;
    m->fan_out[k] = fo;
}

ot_status ot_model_create(const ot_model_config *cfg, ot_model **out) {
    if (!cfg || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "model: NULL argument");
    *out = NULL;
    const int64_t lim = INT64_C(1) << 24;
    if (cfg->inputs <= 0 || cfg->inputs > lim || cfg->classes < 2 || cfg->classes > lim)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "model: %lld inputs, %lld classes (need >= 1, >= 2)",
                        (long long)cfg->inputs, (long long)cfg->classes);
    if ((unsigned)cfg->activation > OT_ACT_TANH)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "model: unknown activation %d", cfg->activation);
    ot_model *m = ot_calloc(1, sizeof *m);
    if (!m) return ot_error(OT_ERR_OUT_OF_MEMORY, "model");
    m->cfg = *cfg;
    switch (cfg->kind) {
    case OT_MODEL_LOGREG:
        add_param(m, "dense0.w", 2, (int64_t[]){cfg->inputs, cfg->classes}, cfg->inputs,
                  cfg->classes);
        add_param(m, "dense0.b", 1, (int64_t[]){cfg->classes}, 0, 0);
        break;
    case OT_MODEL_MLP: {
        if (cfg->nhidden < 1 || cfg->nhidden > OT_MODEL_MAX_HIDDEN) {
            ot_free(m);
            return ot_error(OT_ERR_INVALID_ARGUMENT, "model: mlp needs 1..%d hidden layers, got %d",
                            OT_MODEL_MAX_HIDDEN, cfg->nhidden);
        }
        int64_t prev = cfg->inputs;
        for (int l = 0; l <= cfg->nhidden; l++) {
            int64_t width = l < cfg->nhidden ? cfg->hidden[l] : cfg->classes;
            if (width <= 0 || width > lim) {
                ot_free(m);
                return ot_error(OT_ERR_INVALID_ARGUMENT, "model: hidden layer %d has width %lld", l,
                                (long long)width);
            }
            char n[24];
            snprintf(n, sizeof n, "dense%d.w", l);
            add_param(m, n, 2, (int64_t[]){prev, width}, prev, width);
            snprintf(n, sizeof n, "dense%d.b", l);
            add_param(m, n, 1, (int64_t[]){width}, 0, 0);
            prev = width;
        }
        break;
    }
    case OT_MODEL_CNN: {
        int64_t h = cfg->image_h, w = cfg->image_w, ch = cfg->channels;
        if (h < 2 || w < 2 || h * w != cfg->inputs || ch <= 0 || ch > 4096) {
            ot_free(m);
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "model: cnn needs image_h * image_w == inputs (%lld x %lld vs %lld) "
                            "and 1..4096 channels",
                            (long long)h, (long long)w, (long long)cfg->inputs);
        }
        add_param(m, "conv0.w", 4, (int64_t[]){3, 3, 1, ch}, 9, 9 * ch);
        add_param(m, "conv0.b", 1, (int64_t[]){ch}, 0, 0);
        int64_t flat = (h / 2) * (w / 2) * ch;
        add_param(m, "dense0.w", 2, (int64_t[]){flat, cfg->classes}, flat, cfg->classes);
        add_param(m, "dense0.b", 1, (int64_t[]){cfg->classes}, 0, 0);
        break;
    }
    default:
        ot_free(m);
        return ot_error(OT_ERR_INVALID_ARGUMENT, "model: unknown kind %d", cfg->kind);
    }
    *out = m;
    return OT_OK;
}

void ot_model_free(ot_model *m) {
    ot_free(m);
}
int ot_model_param_count(const ot_model *m) {
    return m ? m->nparams : 0;
}
const char *ot_model_param_name(const ot_model *m, int i) {
    return m && i >= 0 && i < m->nparams ? m->names[i] : NULL;
}
const ot_shape *ot_model_param_shape(const ot_model *m, int i) {
    return m && i >= 0 && i < m->nparams ? &m->shapes[i] : NULL;
}
int64_t ot_model_param_elements(const ot_model *m) {
    int64_t n = 0;
    for (int i = 0; m && i < m->nparams; i++) n += ot_shape_numel_unchecked(&m->shapes[i]);
    return n;
}

ot_status ot_model_init(const ot_model *m, uint64_t seed, ot_tensor *params) {
    if (!m || !params) return ot_error(OT_ERR_INVALID_ARGUMENT, "model init: NULL argument");
    uint64_t st = seed ^ UINT64_C(0x1A1F00D);
    for (int k = 0; k < m->nparams; k++) {
        ot_status s = ot_tensor_alloc(&params[k], &m->shapes[k]);
        if (s != OT_OK) {
            for (int j = 0; j < k; j++) ot_tensor_release(&params[j]);
            return s;
        }
        float *p = params[k].data;
        int64_t n = ot_shape_numel_unchecked(&m->shapes[k]);
        if (m->fan_in[k] == 0) continue; /* biases start at zero */
        double limit = m->cfg.activation == OT_ACT_RELU && k + 2 < m->nparams
                           ? sqrt(6.0 / (double)m->fan_in[k])
                           : sqrt(6.0 / (double)(m->fan_in[k] + m->fan_out[k]));
        for (int64_t i = 0; i < n; i++)
            p[i] = (float)((2.0 * ot_train_rng_uniform(&st) - 1.0) * limit);
    }
    return OT_OK;
}

/* ---- graph building ---- */

typedef struct builder {
    ot_module *mod;
    ot_computation *c;
    ot_computation *add, *max;
    int64_t batch;
} builder;

static ot_computation *scalar_reducer(ot_module *mod, const char *name, ot_opcode op) {
    ot_computation *r = ot_module_add_computation(mod, name);
    ot_shape s = ot_shape_scalar(OT_F32);
    ot_instr *a = ot_build_parameter(r, 0, s, "a");
    ot_instr *b = ot_build_parameter(r, 1, s, "b");
    ot_computation_set_root(r, ot_build_binary(r, op, a, b));
    return r;
}

static ot_shape shp(int rank, const int64_t *dims) {
    ot_shape s;
    ot_shape_make(&s, OT_F32, rank, dims);
    return s;
}

static ot_instr *scalar(builder *b, double v) {
    return ot_build_constant_scalar(b->c, OT_F32, v);
}

static ot_instr *splat(builder *b, double v, const ot_ir_shape *like) {
    return ot_build_broadcast(b->c, scalar(b, v), like->array, NULL, 0);
}

/* x [B, in] . w [in, out] + b [out] */
static ot_instr *dense(builder *b, ot_instr *x, ot_instr *w, ot_instr *bias) {
    ot_dot_dims dn;
    memset(&dn, 0, sizeof dn);
    dn.ncontract = 1;
    dn.lhs_contract[0] = 1;
    dn.rhs_contract[0] = 0;
    ot_instr *y = ot_build_dot(b->c, x, w, &dn, OT_PRECISION_DEFAULT, OT_PRECISION_DEFAULT);
    if (!y) return NULL;
    ot_instr *bb = ot_build_broadcast(b->c, bias, y->shape.array, (int64_t[]){1}, 1);
    return ot_build_binary(b->c, OT_OP_ADD, y, bb);
}

static ot_instr *activation(builder *b, ot_activation a, ot_instr *x) {
    if (!x) return NULL;
    switch (a) {
    case OT_ACT_RELU: return ot_build_binary(b->c, OT_OP_MAXIMUM, x, splat(b, 0.0, &x->shape));
    case OT_ACT_TANH: return ot_build_unary(b->c, OT_OP_TANH, x);
    case OT_ACT_GELU: {
        /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
        ot_instr *x3 =
            ot_build_binary(b->c, OT_OP_MULTIPLY, x, ot_build_binary(b->c, OT_OP_MULTIPLY, x, x));
        ot_instr *inner = ot_build_binary(
            b->c, OT_OP_ADD, x,
            ot_build_binary(b->c, OT_OP_MULTIPLY, splat(b, 0.044715, &x->shape), x3));
        ot_instr *t = ot_build_unary(
            b->c, OT_OP_TANH,
            ot_build_binary(b->c, OT_OP_MULTIPLY, splat(b, 0.7978845608028654, &x->shape), inner));
        ot_instr *one_plus = ot_build_binary(b->c, OT_OP_ADD, splat(b, 1.0, &x->shape), t);
        return ot_build_binary(b->c, OT_OP_MULTIPLY,
                               ot_build_binary(b->c, OT_OP_MULTIPLY, splat(b, 0.5, &x->shape), x),
                               one_plus);
    }
    }
    return NULL;
}

static ot_instr *reduce1(builder *b, ot_instr *x, ot_computation *r, double init,
                         const int64_t *dims, int ndims) {
    ot_instr *iv = scalar(b, init);
    return ot_build_reduce(b->c, &x, &iv, 1, dims, ndims, r);
}

ot_status ot_model_build_loss(const ot_model *m, int64_t batch, double loss_scale,
                              ot_module **out) {
    if (!m || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "model loss: NULL argument");
    *out = NULL;
    if (batch <= 0 || batch > (INT64_C(1) << 24) || !isfinite(loss_scale))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "model loss: batch %lld, scale %g",
                        (long long)batch, loss_scale);
    const ot_model_config *cfg = &m->cfg;
    builder b;
    memset(&b, 0, sizeof b);
    b.batch = batch;
    b.mod = ot_module_new(cfg->kind == OT_MODEL_CNN   ? "cnn_loss"
                          : cfg->kind == OT_MODEL_MLP ? "mlp_loss"
                                                      : "logreg_loss");
    if (!b.mod) return ot_error(OT_ERR_OUT_OF_MEMORY, "model loss module");
    b.add = scalar_reducer(b.mod, "add_f32", OT_OP_ADD);
    b.max = scalar_reducer(b.mod, "max_f32", OT_OP_MAXIMUM);
    b.c = ot_module_add_computation(b.mod, "main");
    ot_instr *p[MAX_PARAMS];
    for (int k = 0; k < m->nparams; k++) {
        char n[32];
        snprintf(n, sizeof n, "%s", m->names[k]);
        for (char *q = n; *q; q++)
            if (*q == '.') *q = '_';
        p[k] = ot_build_parameter(b.c, k, m->shapes[k], n);
    }
    ot_instr *x = ot_build_parameter(b.c, m->nparams, shp(2, (int64_t[]){batch, cfg->inputs}), "x");
    ot_shape ys;
    ot_shape_make(&ys, OT_S32, 1, (int64_t[]){batch});
    ot_instr *y = ot_build_parameter(b.c, m->nparams + 1, ys, "y");

    ot_instr *logits = NULL;
    switch (cfg->kind) {
    case OT_MODEL_LOGREG: logits = dense(&b, x, p[0], p[1]); break;
    case OT_MODEL_MLP: {
        ot_instr *h = x;
        for (int l = 0; l < cfg->nhidden; l++)
            h = activation(&b, cfg->activation, dense(&b, h, p[2 * l], p[2 * l + 1]));
        logits = dense(&b, h, p[2 * cfg->nhidden], p[2 * cfg->nhidden + 1]);
        break;
    }
    case OT_MODEL_CNN: {
        int64_t H = cfg->image_h, W = cfg->image_w, C = cfg->channels;
        ot_instr *img = ot_build_reshape(b.c, x, shp(4, (int64_t[]){batch, H, W, 1}));
        ot_window w;
        memset(&w, 0, sizeof w);
        w.rank = 2;
        for (int d = 0; d < 2; d++)
            w.dims[d] = (ot_window_dim){.size = 3,
                                        .stride = 1,
                                        .pad_lo = 1,
                                        .pad_hi = 1,
                                        .window_dilation = 1,
                                        .base_dilation = 1};
        ot_conv_dims cd;
        memset(&cd, 0, sizeof cd);
        cd.nspatial = 2;
        cd.input_batch = 0, cd.input_feature = 3, cd.input_spatial[0] = 1, cd.input_spatial[1] = 2;
        cd.kernel_spatial[0] = 0, cd.kernel_spatial[1] = 1, cd.kernel_input_feature = 2,
        cd.kernel_output_feature = 3;
        cd.output_batch = 0, cd.output_feature = 3, cd.output_spatial[0] = 1,
        cd.output_spatial[1] = 2;
        ot_instr *conv = ot_build_convolution(b.c, img, p[0], &w, &cd, 1, 1);
        ot_instr *cb =
            conv ? ot_build_broadcast(b.c, p[1], conv->shape.array, (int64_t[]){3}, 1) : NULL;
        ot_instr *act = activation(&b, cfg->activation, ot_build_binary(b.c, OT_OP_ADD, conv, cb));
        ot_window pw;
        memset(&pw, 0, sizeof pw);
        pw.rank = 4;
        for (int d = 0; d < 4; d++) {
            int64_t k = (d == 1 || d == 2) ? 2 : 1;
            pw.dims[d] =
                (ot_window_dim){.size = k, .stride = k, .window_dilation = 1, .base_dilation = 1};
        }
        ot_instr *ninf = scalar(&b, -INFINITY);
        ot_instr *pool = ot_build_reduce_window(b.c, &act, &ninf, 1, &pw, b.max);
        ot_instr *flat =
            ot_build_reshape(b.c, pool, shp(2, (int64_t[]){batch, (H / 2) * (W / 2) * C}));
        logits = dense(&b, flat, p[2], p[3]);
        break;
    }
    }
    if (!logits) {
        ot_status s = ot_module_status(b.mod);
        ot_module_free(b.mod);
        return s != OT_OK ? s : ot_error(OT_ERR_INTERNAL, "model loss: graph construction failed");
    }
    /* log-softmax over classes, stabilized by the row maximum */
    int64_t cls[1] = {1};
    ot_instr *mx = reduce1(&b, logits, b.max, -INFINITY, cls, 1); /* [B] */
    ot_instr *z =
        ot_build_binary(b.c, OT_OP_SUBTRACT, logits,
                        ot_build_broadcast(b.c, mx, logits->shape.array, (int64_t[]){0}, 1));
    ot_instr *se = reduce1(&b, ot_build_unary(b.c, OT_OP_EXP, z), b.add, 0.0, cls, 1);
    ot_instr *lse = ot_build_unary(b.c, OT_OP_LOG, se);
    ot_instr *logp =
        ot_build_binary(b.c, OT_OP_SUBTRACT, z,
                        ot_build_broadcast(b.c, lse, logits->shape.array, (int64_t[]){0}, 1));
    /* one-hot labels */
    ot_shape is;
    ot_shape_make(&is, OT_S32, 2, (int64_t[]){batch, cfg->classes});
    ot_instr *iota = ot_build_iota(b.c, is, 1);
    ot_instr *yb = ot_build_broadcast(b.c, y, is, (int64_t[]){0}, 1);
    ot_instr *hot = ot_build_convert(
        b.c, ot_build_compare(b.c, iota, yb, OT_CMP_EQ, OT_CMP_TYPE_DEFAULT), OT_F32);
    int64_t both[2] = {0, 1};
    ot_instr *nll =
        reduce1(&b, ot_build_binary(b.c, OT_OP_MULTIPLY, hot, logp), b.add, 0.0, both, 2);
    ot_instr *loss = ot_build_binary(b.c, OT_OP_MULTIPLY, nll, scalar(&b, -loss_scale));
    /* accuracy: the label's logit is the row maximum */
    ot_instr *at_label =
        reduce1(&b, ot_build_binary(b.c, OT_OP_MULTIPLY, hot, logits), b.add, 0.0, cls, 1);
    ot_instr *ok = ot_build_convert(
        b.c, ot_build_compare(b.c, at_label, mx, OT_CMP_GE, OT_CMP_TYPE_DEFAULT), OT_F32);
    int64_t d0[1] = {0};
    ot_instr *correct = reduce1(&b, ok, b.add, 0.0, d0, 1);
    ot_instr *outs[2] = {loss, correct};
    ot_computation_set_root(b.c, ot_build_tuple(b.c, outs, 2));
    ot_module_set_entry(b.mod, b.c);
    ot_status s = ot_module_finalize(b.mod);
    if (s != OT_OK) {
        ot_module_free(b.mod);
        return s;
    }
    *out = b.mod;
    return OT_OK;
}

/* optitpu simulate: predicts a data-parallel training job's step time, memory and goodput per
 * chip count on a TPU pod (or on this machine's in-process devices) from the compiled step. */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: optitpu simulate [--model mlp|FILE.hlo] [--preset NAME] [--batch B] [options]\n"
    "\n"
    "Predicts one data-parallel training step per chip count: compute from the compiled step's\n"
    "per-kernel FLOPs and bytes on a device model (roofline per kernel), the gradient all-reduce\n"
    "(reduce-scatter + all-gather with --shard-optimizer) from the pod's collective cost model on\n"
    "the preset's topology, memory per chip against HBM, and goodput under failures.\n"
    "\n"
    "  --model M          mlp (default: optitpu train's 64-128-10 MLP, recompiled at each chip\n"
    "                     count's per-chip batch) or an HLO file holding one chip's forward+\n"
    "                     backward step (see --file-batch)\n"
    "  --hidden LIST      mlp hidden layer widths, e.g. 4096,4096 (default 128)\n"
    "  --inputs N, --classes N   mlp sizes (default 64, 10)\n"
    "  --file-batch N     samples the HLO file's step processes (default: --batch); other chip\n"
    "                     counts scale its kernels' FLOPs and bytes linearly\n"
    "  --preset NAME      v4-AxBxC, v5e-AxB, v5p-AxBxC (TPU device model of that generation),\n"
    "                     host or host-N (this machine's N in-process devices, measured first;\n"
    "                     default host-8), or ring-N / mesh-.. / torus-.. with --device\n"
    "  --device NAME      v4, v5e, v5p: the chip model (default: the preset's generation)\n"
    "  --batch B          global batch per step (default 128); must divide by every chip count\n"
    "  --chips LIST       chip counts, e.g. 1,8,64 (default: 1, 2, 4, ... and the preset's size;\n"
    "                     counts the batch does not divide are left out with a note)\n"
    "  --optimizer NAME   any built-in optimizer (default adam): its state tensors per parameter\n"
    "  --state F          optimizer state kept as f32 (default) or bf16 (as optitpu train "
    "--state)\n"
    "  --shard-optimizer  optimizer state and update sharded over the chips (reduce-scatter,\n"
    "                     update 1/N, all-gather)\n"
    "  --allreduce ALGO   auto (default), ring, halving_doubling, tree, hier2d, direct\n"
    "  --bucket SIZE      gradient fusion bucket (default 25M)\n"
    "  --rings N          rings of disjoint links each collective is split over (default: 2 x\n"
    "                     axes on a full torus, 2 with one Hamiltonian ring, else 1)\n"
    "  --no-overlap       all-reduce after the backward pass (the default on host, as optitpu\n"
    "                     train does); --overlap: buckets during the backward pass (TPU default)\n"
    "  --ckpt-every N     steps between checkpoints (default: the Young/Daly optimum)\n"
    "  --mtbf-hours H     mean time between failures of one chip (default 0: no failures)\n"
    "  --restart-s S      time lost per failure besides the restore (default 0)\n"
    "  --ckpt-gbs W[,R]   checkpoint write (and read) GB/s per host (TPU default 1,2: assumed)\n"
    "  --json             one JSON object per chip count, then a summary line\n"
    "  --svg FILE         step time and scaling efficiency against chips\n";

#define MAX_ROWS 64

typedef struct {
    const char *model;
    int64_t hidden[OT_MODEL_MAX_HIDDEN];
    int nhidden;
    int64_t inputs, classes, file_batch, batch, bucket, ckpt_every, rings;
    const char *preset, *device, *optimizer, *svg;
    int chips[MAX_ROWS], nchips;
    bool shard, json, overlap_set, overlap, bf16_state;
    ot_coll_algo algo;
    double mtbf, restart, ckpt_w, ckpt_r;
} sim_args;

static bool parse_list(const char *s, int64_t lo, int64_t hi, int64_t *v, int cap, int *n) {
    *n = 0;
    char buf[512];
    if (!s || strlen(s) >= sizeof buf) return false;
    strcpy(buf, s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (*n >= cap || !cli_parse_i64(tok, lo, hi, &v[*n])) return false;
        ++*n;
    }
    return *n > 0;
}

static int parse_args(int argc, char **argv, sim_args *a) {
    const char *cmd = "simulate";
    memset(a, 0, sizeof *a);
    a->model = "mlp";
    a->hidden[0] = 128;
    a->nhidden = 1;
    a->inputs = 64, a->classes = 10, a->batch = 128, a->bucket = 25 << 20;
    a->preset = "host-8";
    a->optimizer = "adam";
    a->algo = OT_ALGO_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x;
        if (!strcmp(o, "--json")) {
            a->json = true;
            continue;
        } else if (!strcmp(o, "--shard-optimizer")) {
            a->shard = true;
            continue;
        } else if (!strcmp(o, "--overlap") || !strcmp(o, "--no-overlap")) {
            a->overlap_set = true;
            a->overlap = o[2] == 'o';
            continue;
        }
        if (!v) return cli_usage_error(cmd, "unknown or incomplete argument '%s'", o);
        i++;
        if (!strcmp(o, "--model")) {
            a->model = v;
        } else if (!strcmp(o, "--hidden")) {
            if (!parse_list(v, 1, 1 << 24, a->hidden, OT_MODEL_MAX_HIDDEN, &a->nhidden))
                return cli_usage_error(cmd, "--hidden: 1 to %d widths in 1..%d, got '%s'",
                                       OT_MODEL_MAX_HIDDEN, 1 << 24, v);
        } else if (!strcmp(o, "--inputs") || !strcmp(o, "--classes")) {
            if (!cli_parse_i64(v, o[2] == 'i' ? 1 : 2, 1 << 24, &x))
                return cli_usage_error(cmd, "%s: an integer in %d..%d, got '%s'", o,
                                       o[2] == 'i' ? 1 : 2, 1 << 24, v);
            *(o[2] == 'i' ? &a->inputs : &a->classes) = x;
        } else if (!strcmp(o, "--file-batch")) {
            if (!cli_parse_i64(v, 1, INT64_C(1) << 40, &a->file_batch))
                return cli_usage_error(cmd, "--file-batch: a positive integer, got '%s'", v);
        } else if (!strcmp(o, "--batch")) {
            if (!cli_parse_i64(v, 1, INT64_C(1) << 40, &a->batch))
                return cli_usage_error(cmd, "--batch: a positive integer, got '%s'", v);
        } else if (!strcmp(o, "--preset")) {
            a->preset = v;
        } else if (!strcmp(o, "--device")) {
            a->device = v;
        } else if (!strcmp(o, "--optimizer")) {
            a->optimizer = v;
        } else if (!strcmp(o, "--svg")) {
            a->svg = v;
        } else if (!strcmp(o, "--chips")) {
            int64_t c[MAX_ROWS];
            if (!parse_list(v, 1, OT_TOPO_MAX_DEVICES, c, MAX_ROWS, &a->nchips))
                return cli_usage_error(cmd, "--chips: up to %d counts in 1..%d, got '%s'", MAX_ROWS,
                                       OT_TOPO_MAX_DEVICES, v);
            for (int k = 0; k < a->nchips; k++) a->chips[k] = (int)c[k];
        } else if (!strcmp(o, "--allreduce")) {
            int al = ot_coll_algo_from_name(v);
            if (al < 0)
                return cli_usage_error(
                    cmd,
                    "--allreduce: auto, ring, halving_doubling, tree, hier2d or direct, got '%s'",
                    v);
            a->algo = (ot_coll_algo)al;
        } else if (!strcmp(o, "--state")) {
            if (strcmp(v, "f32") && strcmp(v, "bf16"))
                return cli_usage_error(cmd, "--state: f32 or bf16, got '%s'", v);
            a->bf16_state = v[0] == 'b';
        } else if (!strcmp(o, "--rings")) {
            if (!cli_parse_i64(v, 1, 64, &a->rings))
                return cli_usage_error(cmd, "--rings: 1..64, got '%s'", v);
        } else if (!strcmp(o, "--bucket")) {
            if (!cli_parse_size(v, &a->bucket) || a->bucket < 1)
                return cli_usage_error(cmd, "--bucket: a size such as 25M, got '%s'", v);
        } else if (!strcmp(o, "--ckpt-every")) {
            if (!cli_parse_i64(v, 1, INT64_C(1) << 40, &a->ckpt_every))
                return cli_usage_error(cmd, "--ckpt-every: a positive step count, got '%s'", v);
        } else if (!strcmp(o, "--mtbf-hours") || !strcmp(o, "--restart-s")) {
            double d;
            if (!cli_parse_double(v, &d) || d < 0)
                return cli_usage_error(cmd, "%s: a number >= 0, got '%s'", o, v);
            *(o[2] == 'm' ? &a->mtbf : &a->restart) = d;
        } else if (!strcmp(o, "--ckpt-gbs")) {
            char *end;
            a->ckpt_w = strtod(v, &end);
            a->ckpt_r = a->ckpt_w;
            if (*end == ',') a->ckpt_r = strtod(end + 1, &end);
            if (*end || !(a->ckpt_w > 0) || !(a->ckpt_r > 0) || !isfinite(a->ckpt_w) ||
                !isfinite(a->ckpt_r))
                return cli_usage_error(cmd, "--ckpt-gbs: W or W,R in GB/s (> 0), got '%s'", v);
        } else {
            return cli_usage_error(cmd, "unknown argument '%s'", o);
        }
    }
    return CLI_OK;
}

/* ---- the step executable per per-chip batch -------------------------------------------------- */

typedef struct {
    const sim_args *a;
    ot_model *mlp;
    ot_executable *file_exe; /* HLO file: one executable, scaled */
    int64_t param_bytes, input_bytes_per_sample, file_input_bytes;
    ot_executable *cache_exe;
    int64_t cache_batch;
    bool host; /* the host model: which fusions get native code matters */
} workload;

/* On a TPU the kernel list, FLOPs and bytes do not depend on native code: leave the C compiler
 * out. The host model prices interpreted fusions apart: compile as optitpu train does. */
static ot_compile_options sim_compile_options(const workload *w) {
    ot_compile_options co = ot_compile_options_default();
    if (!w->host) co.native = OT_NATIVE_OFF;
    return co;
}

static ot_status workload_open(const sim_args *a, bool host, workload *w) {
    memset(w, 0, sizeof *w);
    w->a = a;
    w->host = host;
    if (!strcmp(a->model, "mlp")) {
        ot_model_config mc = ot_model_config_default();
        mc.inputs = a->inputs;
        mc.classes = a->classes;
        mc.nhidden = a->nhidden;
        for (int k = 0; k < a->nhidden; k++) mc.hidden[k] = a->hidden[k];
        OT_CHECK(ot_model_create(&mc, &w->mlp));
        w->param_bytes = ot_model_param_elements(w->mlp) * 4;
        w->input_bytes_per_sample = a->inputs * 4 + 4;
        return OT_OK;
    }
    FILE *f = fopen(a->model, "rb");
    if (!f)
        return ot_error(OT_ERR_NOT_FOUND, "cannot open model '%s' (mlp or an HLO file)", a->model);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = len >= 0 ? malloc((size_t)len + 1) : NULL;
    size_t got = text ? fread(text, 1, (size_t)len, f) : 0;
    fclose(f);
    if (!text || got != (size_t)len) {
        free(text);
        return ot_error(OT_ERR_IO, "reading %s", a->model);
    }
    ot_module *m = NULL;
    ot_status s = ot_hlo_parse(text, got, NULL, &m);
    free(text);
    ot_compile_options co = sim_compile_options(w);
    if (s == OT_OK) s = ot_compile(m, &co, &w->file_exe);
    ot_module_free(m);
    if (s != OT_OK) return s;
    /* parameters: floating entry parameters with an output leaf of the same shape (their
     * gradients); the other entry parameters are the batch */
    int np = ot_executable_param_count(w->file_exe), no = ot_executable_output_count(w->file_exe);
    bool *used = calloc((size_t)no + 1, 1);
    if (!used) return ot_error(OT_ERR_OUT_OF_MEMORY, "simulate");
    for (int k = 0; k < np; k++) {
        const ot_slot *p =
            ot_executable_slot(w->file_exe, ot_executable_param_slot(w->file_exe, k));
        bool param = false;
        for (int j = 0; j < no && ot_dtype_is_float(p->shape.dtype) && !param; j++) {
            const ot_slot *q =
                ot_executable_slot(w->file_exe, ot_executable_output_slot(w->file_exe, j));
            if (!used[j] && p->shape.rank > 0 && ot_shape_equal(&p->shape, &q->shape))
                used[j] = param = true;
        }
        if (param)
            w->param_bytes += p->nbytes;
        else
            w->file_input_bytes += p->nbytes;
    }
    free(used);
    return OT_OK;
}

static void workload_close(workload *w) {
    ot_model_free(w->mlp);
    ot_executable_free(w->file_exe);
    ot_executable_free(w->cache_exe);
}

/* The step for `b` samples per chip, and the batch it was built for. */
static ot_status workload_step(workload *w, int64_t b, const ot_executable **exe, int64_t *eb,
                               int64_t *input_bytes) {
    if (w->file_exe) {
        *exe = w->file_exe;
        *eb = w->a->file_batch > 0 ? w->a->file_batch : w->a->batch;
        *input_bytes = w->file_input_bytes;
        return OT_OK;
    }
    *eb = b;
    *input_bytes = b * w->input_bytes_per_sample;
    if (w->cache_exe && w->cache_batch == b) {
        *exe = w->cache_exe;
        return OT_OK;
    }
    ot_executable_free(w->cache_exe);
    w->cache_exe = NULL;
    /* what optitpu train compiles: the gradient of sum(loss) / global batch */
    ot_module *loss = NULL, *g = NULL;
    ot_status s = ot_model_build_loss(w->mlp, b, 1.0 / (double)w->a->batch, &loss);
    int np = ot_model_param_count(w->mlp);
    int64_t wrt[2 * OT_MODEL_MAX_HIDDEN + 4];
    for (int k = 0; k < np; k++) wrt[k] = k;
    ot_grad_options go = ot_grad_options_default();
    go.loss_index = 0;
    if (s == OT_OK) s = ot_grad(loss, wrt, np, &go, &g);
    ot_compile_options co = sim_compile_options(w);
    if (s == OT_OK) s = ot_compile(g, &co, &w->cache_exe);
    ot_module_free(loss);
    ot_module_free(g);
    if (s != OT_OK) return s;
    w->cache_batch = b;
    *exe = w->cache_exe;
    return OT_OK;
}

/* ---- topologies per chip count -------------------------------------------------------------- */

typedef struct {
    char kind[16];
    int ndims, size;
    bool host;
} preset_info;

static int parse_preset(const char *p, preset_info *pi) {
    memset(pi, 0, sizeof *pi);
    if (!strncmp(p, "host", 4) && (p[4] == 0 || p[4] == '-')) {
        int64_t n = 8;
        if (p[4] == '-' && !cli_parse_i64(p + 5, 1, 64, &n))
            return cli_usage_error("simulate", "--preset host-N: N in 1..64, got '%s'", p);
        pi->host = true;
        pi->size = (int)n;
        snprintf(pi->kind, sizeof pi->kind, "host");
        return CLI_OK;
    }
    ot_topology *t;
    if (ot_topology_preset(p, &t) != OT_OK) return cli_fail("simulate");
    pi->ndims = ot_topology_ndims(t);
    pi->size = ot_topology_size(t);
    ot_topology_free(t);
    size_t kl = strcspn(p, "-");
    if (kl >= sizeof pi->kind) kl = sizeof pi->kind - 1;
    memcpy(pi->kind, p, kl);
    return CLI_OK;
}

/* A slice of n chips of the preset's kind: among the factorizations of n into the preset's
 * number of axes, whole 4-chip multiples (a torus) first, then the most balanced. */
static ot_status topology_for(const preset_info *pi, const char *preset, int n, ot_topology **out) {
    if (n == pi->size) return ot_topology_preset(preset, out);
    if (n > pi->size)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "%d chips exceed the preset %s (%d chips)", n,
                        preset, pi->size);
    int best[3] = {0}, bs = -1;
    double bscore = 0;
    for (int a = 1; a <= n; a++) {
        if (n % a) continue;
        for (int b = pi->ndims >= 2 ? a : n / a; b <= n / a; b++) {
            if ((n / a) % b) continue;
            int c = n / a / b;
            if (pi->ndims == 2 && c != 1) continue;
            if (pi->ndims == 3 && c < b) continue;
            if (pi->ndims == 1 && (a != n)) continue;
            int d[3] = {pi->ndims == 1 ? n : a, b, c};
            bool four = true;
            for (int k = 0; k < pi->ndims; k++) four &= d[k] % 4 == 0;
            int hi = d[pi->ndims - 1 > 0 ? pi->ndims - 1 : 0], lo = d[0];
            double score = (four ? 0 : 1e6) + (double)hi / lo;
            char name[64];
            if (pi->ndims == 1)
                snprintf(name, sizeof name, "%s-%d", pi->kind, n);
            else if (pi->ndims == 2)
                snprintf(name, sizeof name, "%s-%dx%d", pi->kind, a, b);
            else
                snprintf(name, sizeof name, "%s-%dx%dx%d", pi->kind, a, b, c);
            ot_topology *t;
            if (ot_topology_preset(name, &t) != OT_OK) {
                ot_clear_error();
                continue;
            }
            ot_topology_free(t);
            if (bs < 0 || score < bscore) {
                bs = 1, bscore = score;
                best[0] = d[0], best[1] = d[1], best[2] = d[2];
            }
            if (pi->ndims == 1) break;
        }
        if (pi->ndims == 1) break;
    }
    if (bs < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "no %s topology has %d chips (preset %s)",
                        pi->kind, n, preset);
    char name[64];
    if (pi->ndims == 1)
        snprintf(name, sizeof name, "%s-%d", pi->kind, best[0]);
    else if (pi->ndims == 2)
        snprintf(name, sizeof name, "%s-%dx%d", pi->kind, best[0], best[1]);
    else
        snprintf(name, sizeof name, "%s-%dx%dx%d", pi->kind, best[0], best[1], best[2]);
    return ot_topology_preset(name, out);
}

/* ---- output -----------------------------------------------------------------------------------
 */

static const double GiB = 1024.0 * 1024 * 1024;

static void fmt_time(double s, char *b, size_t n) {
    if (s >= 1)
        snprintf(b, n, "%.3g s", s);
    else if (s >= 1e-3)
        snprintf(b, n, "%.3g ms", s * 1e3);
    else
        snprintf(b, n, "%.3g us", s * 1e6);
}

typedef struct {
    ot_sim_result r;
    char topo[48];
    double eff;
    bool ok;
    char note[400];
} row;

static int write_svg(const char *path, const row *rows, int n) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "optitpu simulate: cannot write %s\n", path);
        return CLI_FAIL;
    }
    const double W = 720, H = 420, L = 70, R = 70, T = 30, B = 50;
    double xmin = 1e300, xmax = 0, ymin = 1e300, ymax = 0;
    for (int i = 0; i < n; i++) {
        if (!rows[i].ok) continue;
        double x = rows[i].r.chips, y = rows[i].r.step_s;
        xmin = fmin(xmin, x), xmax = fmax(xmax, x), ymin = fmin(ymin, y), ymax = fmax(ymax, y);
    }
    if (xmax <= 0) xmin = 1, xmax = 2, ymin = 1e-6, ymax = 1;
    if (xmax <= xmin) xmax = xmin * 2;
    if (ymax <= ymin) ymax = ymin * 2;
    double lx0 = log2(xmin), lx1 = log2(xmax), ly0 = log10(ymin) - 0.1, ly1 = log10(ymax) + 0.1;
#define PX(x) (L + (log2(x) - lx0) / (lx1 - lx0) * (W - L - R))
#define PY(y) (H - B - (log10(y) - ly0) / (ly1 - ly0) * (H - T - B))
#define PE(e) (H - B - (e) * (H - T - B))
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            "<text x=\"%g\" y=\"18\">step time (blue, log) and scaling efficiency (orange) vs "
            "chips</text>\n"
            "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#888\"/>\n",
            W, H, L, L, T, W - L - R, H - T - B);
    for (int i = 0; i < n; i++) {
        if (!rows[i].ok) continue;
        fprintf(f, "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%d</text>\n",
                PX(rows[i].r.chips), H - B + 16, rows[i].r.chips);
    }
    for (int k = (int)floor(ly0); k <= (int)ceil(ly1); k++) {
        double y = pow(10, k);
        if (log10(y) < ly0 || log10(y) > ly1) continue;
        char b[32];
        fmt_time(y, b, sizeof b);
        fprintf(f, "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\" fill=\"#1f77b4\">%s</text>\n",
                L - 4, PY(y) + 4, b);
    }
    for (int k = 0; k <= 4; k++)
        fprintf(f, "<text x=\"%g\" y=\"%.1f\" fill=\"#ff7f0e\">%d%%</text>\n", W - R + 4,
                PE(k / 4.0) + 4, k * 25);
    fprintf(f, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">chips</text>\n", (L + W - R) / 2,
            H - 12);
    const char *color[2] = {"#1f77b4", "#ff7f0e"};
    for (int s = 0; s < 2; s++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", color[s]);
        for (int i = 0; i < n; i++)
            if (rows[i].ok)
                fprintf(f, "%.1f,%.1f ", PX(rows[i].r.chips),
                        s == 0 ? PY(rows[i].r.step_s) : PE(fmin(1.0, rows[i].eff)));
        fprintf(f, "\"/>\n");
    }
#undef PX
#undef PY
#undef PE
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "optitpu simulate: cannot write %s\n", path);
        return CLI_FAIL;
    }
    return CLI_OK;
}

/* optitpu train's own work per step on one host device of `per` samples of the MLP
 * (ot_sim_train_loop_measure, the step executable run between): its rows drawn from the digits
 * training set, or from the batch itself when that is larger. */
static ot_status train_loop(const ot_model *m, int64_t per, int64_t features,
                            const ot_executable *step, double *out) {
    ot_dataset tr, te;
    memset(&tr, 0, sizeof tr);
    memset(&te, 0, sizeof te);
    OT_CHECK(ot_dataset_digits(&tr, &te));
    int64_t rows = tr.n > per ? tr.n : per;
    ot_dataset_free(&tr);
    ot_dataset_free(&te);
    ot_shape shapes[2 * OT_MODEL_MAX_HIDDEN + 4];
    int np = ot_model_param_count(m);
    for (int k = 0; k < np; k++) shapes[k] = *ot_model_param_shape(m, k);
    const ot_executable *between[1] = {step};
    ot_sim_train_loop l = {per, features, rows, np, shapes, 6, between, 1};
    return ot_sim_train_loop_measure(&l, 0.05, out);
}

static int run(int argc, char **argv) {
    const char *cmd = "simulate";
    sim_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_OK) return rc;
    preset_info pi;
    if ((rc = parse_preset(a.preset, &pi)) != CLI_OK) return rc;
    ot_sim_device dev;
    ot_sim_host_calibration cal;
    if (pi.host) {
        if (a.device && strcmp(a.device, "host"))
            return cli_usage_error(cmd, "--device %s: host presets use the measured host model",
                                   a.device);
        if (!a.json) fprintf(stderr, "measuring this machine for the host model...\n");
        if (ot_sim_device_host_calibrate(NULL, &dev, &cal) != OT_OK) return cli_fail(cmd);
    } else {
        const char *dn = a.device ? a.device : pi.kind;
        if (ot_sim_device_preset(dn, &dev) != OT_OK) {
            if (!a.device)
                return cli_usage_error(
                    cmd, "--preset %s has no chip model: add --device v4|v5e|v5p", a.preset);
            return cli_fail(cmd);
        }
        if (a.ckpt_w > 0) {
            dev.ckpt_write_bytes_per_s = a.ckpt_w * 1e9;
            dev.ckpt_read_bytes_per_s = a.ckpt_r * 1e9;
        }
    }
    /* chip counts */
    int chips[MAX_ROWS], nchips = 0;
    bool explicit_chips = a.nchips > 0;
    if (explicit_chips) {
        for (int k = 0; k < a.nchips; k++) {
            if (a.chips[k] > pi.size)
                return cli_usage_error(cmd, "--chips %d: the preset %s has %d chips", a.chips[k],
                                       a.preset, pi.size);
            if (a.batch % a.chips[k])
                return cli_usage_error(cmd,
                                       "batch %lld is not divisible by the data-parallel degree "
                                       "%d (%lld = %d x %lld + %lld)",
                                       (long long)a.batch, a.chips[k], (long long)a.batch,
                                       a.chips[k], (long long)(a.batch / a.chips[k]),
                                       (long long)(a.batch % a.chips[k]));
            chips[nchips++] = a.chips[k];
        }
    } else {
        for (int c = 1; c < pi.size && nchips < MAX_ROWS - 1; c *= 2) chips[nchips++] = c;
        chips[nchips++] = pi.size;
    }
    ot_optimizer *opt;
    if (ot_optimizer_new(a.optimizer, &opt) != OT_OK) return cli_fail(cmd);
    int states = ot_optimizer_state_count(opt);
    ot_optimizer_free(opt);
    workload w;
    if (workload_open(&a, pi.host, &w) != OT_OK) {
        workload_close(&w);
        return cli_fail(cmd);
    }
    row *rows = calloc(MAX_ROWS, sizeof *rows);
    if (!rows) {
        workload_close(&w);
        return cli_fail(cmd);
    }
    int nrows = 0, nfit = 0, nbad = 0;
    char skipped[512] = "";
    for (int k = 0; k < nchips; k++) {
        int n = chips[k];
        if (a.batch % n) {
            size_t l = strlen(skipped);
            snprintf(skipped + l, sizeof skipped - l, "%s%d", l ? ", " : "", n);
            continue;
        }
        row *r = &rows[nrows++];
        ot_topology *t = NULL;
        ot_sim_config c = ot_sim_config_default();
        c.device = dev;
        if (pi.host) {
            /* n device threads' rates, measured now (the machine's load included) */
            ot_sim_host_rates hr;
            if (ot_sim_host_measure(n, 0.1, &hr) != OT_OK) {
                workload_close(&w);
                free(rows);
                return cli_fail(cmd);
            }
            ot_sim_device_host_rates(&hr, &cal, &c.device);
            c.chips = n;
            snprintf(r->topo, sizeof r->topo, "host-%d", n);
        }
        ot_status s = pi.host ? OT_OK : topology_for(&pi, a.preset, n, &t);
        if (s == OT_OK && t) snprintf(r->topo, sizeof r->topo, "%s", ot_topology_name(t));
        c.topology = t;
        c.global_batch = a.batch;
        c.param_bytes = w.param_bytes;
        c.optimizer_states = states;
        c.state_bytes = a.bf16_state ? 2 : 4;
        c.shard_optimizer = a.shard;
        c.overlap = a.overlap_set ? a.overlap : !pi.host;
        c.bucket_bytes = a.bucket;
        c.rings = (int)a.rings;
        c.algo = a.algo;
        c.ckpt_every = a.ckpt_every;
        c.mtbf_hours = a.mtbf;
        c.restart_s = a.restart;
        if (s == OT_OK) s = workload_step(&w, a.batch / n, &c.step, &c.step_batch, &c.input_bytes);
        /* optitpu train on host devices stages the batch and the gradients through host memory */
        if (s == OT_OK && pi.host && w.mlp)
            ot_sim_config_train_pipeline(&c, ot_model_param_count(w.mlp));
        if (s == OT_OK && pi.host) {
            /* train runs the step natively from its tier-up run on (small fusions,
             * docs/codegen.md): the steps priced are those after it */
            ot_executable_tier_up(c.step);
            /* the host's kernel model: this step's dot shapes, the pool hand-off, per-element
             * costs and the other processes' load, probed now */
            ot_sim_host_probe pb;
            const ot_executable *pe[1] = {c.step};
            s = ot_sim_host_probe_measure(pe, 1, &pb);
            if (s == OT_OK) ot_sim_device_host_probe(&pb, &c.device);
            /* train's own work per step (staging, its timeline's clocks), probed now with the
             * step run between: it replaces the transfer count's price */
            if (s == OT_OK && w.mlp)
                s = train_loop(w.mlp, a.batch / n, a.inputs, c.step, &c.host_work_s);
        }
        if (s == OT_OK) s = ot_sim_run(&c, &r->r);
        ot_topology_free(t);
        r->ok = s == OT_OK;
        if (s == OT_ERR_OUT_OF_MEMORY) r->r.fits = false;
        if (s != OT_OK) {
            snprintf(r->note, sizeof r->note, "%s", ot_last_error());
            nbad++;
            if (s != OT_ERR_OUT_OF_MEMORY) {
                fprintf(stderr, "optitpu simulate: %d chips: %s\n", n, r->note);
                workload_close(&w);
                free(rows);
                return CLI_FAIL;
            }
        } else {
            nfit++;
        }
    }
    workload_close(&w);
    /* strong scaling against the smallest chip count that fits */
    const row *base = NULL;
    for (int i = 0; i < nrows && !base; i++)
        if (rows[i].ok) base = &rows[i];
    for (int i = 0; i < nrows; i++)
        if (rows[i].ok && base)
            rows[i].eff = base->r.step_s * base->r.chips / (rows[i].r.step_s * rows[i].r.chips);
    if (a.json) {
        for (int i = 0; i < nrows; i++) {
            char *js = NULL;
            if (ot_sim_result_json(&rows[i].r, &js) != OT_OK) continue;
            /* the error of a row that does not fit, quotes and backslashes dropped */
            char err[sizeof rows[i].note];
            size_t m = 0;
            for (const char *q = rows[i].note; *q && m + 1 < sizeof err; q++)
                if (*q != '"' && *q != '\\' && (unsigned char)*q >= 0x20) err[m++] = *q;
            err[m] = 0;
            printf("{\"topology\":\"%s\",\"scaling_efficiency\":%.6g,\"error\":\"%s\","
                   "\"result\":%s}\n",
                   rows[i].topo, rows[i].ok ? rows[i].eff : 0.0, err, js);
            ot_free(js);
        }
        printf("{\"summary\":{\"model\":\"%s\",\"preset\":\"%s\",\"device\":\"%s\",\"batch\":%lld,"
               "\"param_bytes\":%lld,\"optimizer_states\":%d,\"shard_optimizer\":%s,"
               "\"fits\":%d,\"does_not_fit\":%d,\"skipped\":\"%s\"}}\n",
               a.model, a.preset, dev.name, (long long)a.batch, (long long)w.param_bytes, states,
               a.shard ? "true" : "false", nfit, nbad, skipped);
    } else {
        printf("model %s: %.4g M parameters (%.3g MiB f32), %s with %d state tensors%s; global "
               "batch %lld\n",
               a.model, (double)w.param_bytes / 4 / 1e6, (double)w.param_bytes / 1048576.0,
               a.optimizer, states, a.shard ? " sharded" : "", (long long)a.batch);
        printf("device %s: %.4g TFLOP/s f32, %.4g TFLOP/s bf16, %.4g GB/s memory, %.3g us per "
               "kernel%s\n\n",
               dev.name, dev.peak_flops_f32 / 1e12, dev.peak_flops_bf16 / 1e12,
               dev.hbm_bytes_per_s / 1e9, dev.launch_s * 1e6,
               pi.host ? " (the whole machine; N devices share it)" : "");
        printf("%6s %-16s %7s %10s %10s %10s %10s %10s %6s %-19s %9s %8s %8s\n", "chips",
               "topology", "batch/c", "step", "compute", "exp.comm", "comm", "optimizer", "eff",
               "algo x rings", "mem GiB", "ckpt/N", "goodput");
        for (int i = 0; i < nrows; i++) {
            const ot_sim_result *r = &rows[i].r;
            char st[16], cs[16], ec[16], cm[16], os[16];
            fmt_time(r->step_s, st, sizeof st);
            fmt_time(r->compute_s, cs, sizeof cs);
            fmt_time(r->exposed_comm_s, ec, sizeof ec);
            fmt_time(r->comm_s, cm, sizeof cm);
            fmt_time(r->optimizer_s, os, sizeof os);
            char ck[16] = "-", ef[16] = "-", gp[16] = "-";
            if (r->ckpt_every > 0) snprintf(ck, sizeof ck, "%.0f", r->ckpt_every);
            if (rows[i].ok) {
                snprintf(ef, sizeof ef, "%.0f%%", rows[i].eff * 100);
                snprintf(gp, sizeof gp, "%.2f%%", r->goodput * 100);
            }
            char al[40];
            snprintf(al, sizeof al, r->chips > 1 ? "%s x%d" : "%s", r->algo, r->rings);
            printf("%6d %-16s %7lld %10s %10s %10s %10s %10s %6s %-19s %9.3f %8s %8s%s\n", r->chips,
                   rows[i].topo, (long long)r->per_chip_batch, st, cs, ec, cm, os, ef, al,
                   r->mem_total / GiB, ck, gp, rows[i].ok ? "" : "  DOES NOT FIT");
        }
        for (int i = 0; i < nrows; i++)
            if (!rows[i].ok) printf("\n%s", rows[i].note);
        if (nbad) printf("\n");
        if (skipped[0])
            printf("\nleft out (batch %lld not divisible): %s chips\n", (long long)a.batch,
                   skipped);
        if (a.mtbf > 0 && nrows)
            printf("\ngoodput: Daly's useful fraction with a chip MTBF of %g h (pod MTBF = MTBF / "
                   "chips), checkpoints every ckpt/N steps (%s)\n",
                   a.mtbf, a.ckpt_every ? "as given" : "the optimal interval");
    }
    if (a.svg && (rc = write_svg(a.svg, rows, nrows)) != CLI_OK) {
        free(rows);
        return rc;
    }
    free(rows);
    if (nfit == 0) {
        fprintf(stderr, "optitpu simulate: the job fits on none of the chip counts%s\n",
                nbad ? " (see the numbers above)" : "");
        return CLI_FAIL;
    }
    if (explicit_chips && nbad) {
        fprintf(stderr, "optitpu simulate: %d of the requested chip counts do not fit\n", nbad);
        return CLI_FAIL;
    }
    return CLI_OK;
}

const cli_command cli_cmd_simulate = {
    "simulate",
    "predict a training job's step time, memory and goodput per chip count on a pod",
    usage,
    run,
};

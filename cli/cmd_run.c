/* optitpu run: compile an HLO module, run it on host devices, write the results as .npy, print
 * timings and (optionally) a Chrome trace. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char usage[] =
    "usage: optitpu run FILE [--input NAME=x.npy]... [--fill random:SEED|zeros]\n"
    "                   [--output-dir D] [--devices N] [--device-memory SIZE | --hbm PRESET]\n"
    "                   [-O LEVEL] [--trace t.json] [--repeat K] [--warmup K] [--profile "
    "all|warmup]\n"
    "                   [--summary] [--limits] [--json] [--module K] [--compile-cache]\n"
    "\n"
    "Compiles FILE (HLO text), runs it, writes the results as D/out_0.npy, out_1.npy, ... in\n"
    "the order of the result tuple, and prints the compile and run times. FILE may also be an\n"
    "executable written by `optitpu compile -o` (recognized by its magic): it is loaded and\n"
    "verified instead of compiled (-O and --module do not apply to it).\n"
    "\n"
    "  --input NAME=F   parameter NAME (its name in the module, or its number) from .npy file F;\n"
    "                   a bf16 parameter reads a u16 file as bf16 bit patterns\n"
    "  --fill MODE      parameters without --input: random:SEED (uniform [-1, 1) for floats,\n"
    "                   [0, 10) for integers) or zeros; without --fill every parameter needs\n"
    "                   an --input\n"
    "  --output-dir D   where out_K.npy go (default: the current directory; created if missing);\n"
    "                   bf16 results are written as u16 bit patterns\n"
    "  --devices N      host devices (default: OPTITPU_DEVICES or 1); a module with\n"
    "                   replica_count=R and num_partitions=P runs on R*P of them (device\n"
    "                   g = replica*P + partition, each with the same inputs), collectives\n"
    "                   between them; out_K.npy are device 0's results\n"
    "  --device-memory SIZE  memory per device (K/M/G suffixes; default unlimited)\n"
    "  --hbm PRESET     memory per device = a TPU chip's HBM (v2, v3, v4, v5e, v5p, v6e)\n"
    "  -O LEVEL         optimization level 0, 1 or 2 (default 2)\n"
    "  --trace F        Chrome trace JSON (compile passes, kernels, memory; opens in Perfetto)\n"
    "  --repeat K       run K times (times per run; inputs uploaded once, a donated one again\n"
    "                   before each run)\n"
    "  --warmup K       run K times more before those, untimed (default 0)\n"
    "  --profile WHICH  the runs the profile (trace, summary) records: all (default) or warmup,\n"
    "                   which times the --repeat runs without the profiler's clock reads and\n"
    "                   records, as a program that sets no profile runs (needs --warmup >= 1)\n"
    "  --summary        print the profile summary (top kernels, totals)\n"
    "  --limits         measure STREAM triad first and print each kernel's share of it\n"
    "  --json           one JSON object instead of text\n"
    "  --module K       in a file of several modules separated by '// -----' lines, run the\n"
    "                   K-th (from 0)\n"
    "  --compile-cache  compile through the persistent compilation cache (`optitpu help\n"
    "                   cache`): a module compiled before with the same options is loaded\n"
    "                   (the trace then shows no compile passes)\n";

#define MAX_INPUTS 256

typedef struct input_arg {
    const char *name, *file;
    bool used;
} input_arg;

typedef struct run_state {
    ot_backend *b;
    const ot_executable *exe;
    ot_profile *prof;
    ot_tensor *host; /* one per parameter */
    int np, no;
    int replicas;
    ot_tensor *result; /* replica 0's outputs of the last run */
    uint64_t *ns;      /* per replica: this run's execute time */
    /* per device: its input buffers, kept from run to run as a caller keeps its arrays (jax.jit
     * on device_put arrays); a donated one is uploaded again before the next run */
    ot_buffer ***in;
} run_state;

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void fill_random(ot_tensor *t, uint64_t seed) {
    int64_t n = ot_shape_numel_unchecked(&t->shape);
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = splitmix(&s);
        double u = (double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0;
        int64_t iv = (int64_t)(r % 10);
        void *p = t->data;
        switch (t->shape.dtype) {
        case OT_PRED: ((uint8_t *)p)[i] = (uint8_t)(r & 1); break;
        case OT_S8: ((int8_t *)p)[i] = (int8_t)iv; break;
        case OT_U8: ((uint8_t *)p)[i] = (uint8_t)iv; break;
        case OT_S16: ((int16_t *)p)[i] = (int16_t)iv; break;
        case OT_U16: ((uint16_t *)p)[i] = (uint16_t)iv; break;
        case OT_S32: ((int32_t *)p)[i] = (int32_t)iv; break;
        case OT_U32: ((uint32_t *)p)[i] = (uint32_t)iv; break;
        case OT_S64: ((int64_t *)p)[i] = iv; break;
        case OT_U64: ((uint64_t *)p)[i] = (uint64_t)iv; break;
        case OT_F16: ((uint16_t *)p)[i] = ot_f32_to_f16((float)u); break;
        case OT_BF16: ((uint16_t *)p)[i] = ot_f32_to_bf16((float)u); break;
        case OT_F32: ((float *)p)[i] = (float)u; break;
        case OT_F64: ((double *)p)[i] = u; break;
        default: break;
        }
    }
}

static int find_param(const ot_computation *c, const char *name) {
    for (int k = 0; k < c->nparams; k++)
        if (c->params[k] && c->params[k]->name && !strcmp(c->params[k]->name, name)) return k;
    int64_t v;
    if (cli_parse_i64(name, 0, c->nparams - 1, &v)) return (int)v;
    return -1;
}

static ot_status run_on(run_state *st, int dev, ot_comm *comm, bool keep) {
    ot_device *d = ot_backend_device(st->b, dev);
    if (!st->in[dev]) st->in[dev] = ot_calloc((size_t)st->np + 1, sizeof *st->in[dev]);
    ot_buffer **in = st->in[dev];
    ot_buffer **out = ot_calloc((size_t)st->no + 1, sizeof *out);
    ot_status s = (in && out) ? OT_OK : ot_error(OT_ERR_OUT_OF_MEMORY, "run: out of memory");
    for (int k = 0; k < st->np && s == OT_OK; k++)
        if (!in[k]) s = ot_buffer_from_host(d, &st->host[k], &in[k]);
    if (s == OT_OK) {
        ot_run_options ro = ot_run_options_default();
        ro.comm = comm;
        ro.profile = st->prof;
        uint64_t t0 = ot_now_ns();
        if (comm) {
            ot_run_result rr;
            s = ot_device_execute(d, st->exe, in, st->np, out, st->no, &ro, &rr);
        } else {
            s = ot_backend_execute(st->b, "main", dev, in, st->np, out, st->no, &ro, NULL);
        }
        st->ns[dev] = ot_now_ns() - t0;
    }
    for (int k = 0; k < st->no && s == OT_OK && keep; k++) {
        ot_tensor_release(&st->result[k]);
        s = ot_buffer_to_host(out[k], &st->result[k]);
    }
    for (int k = 0; in && k < st->np; k++) {
        if (s == OT_OK && in[k] && !ot_buffer_donated(in[k])) continue;
        ot_buffer_free(in[k]); /* donated (its memory is now an output's), or after a failure */
        in[k] = NULL;
    }
    for (int k = 0; out && k < st->no; k++) ot_buffer_free(out[k]);
    ot_free(out);
    return s;
}

static ot_status replica_fn(void *ud, int rank, ot_comm *c) {
    run_state *st = ud;
    return run_on(st, rank, c, rank == 0);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}

/* Parses FILE, or its piece `index` when it holds several modules ('// -----' separators). */
static ot_status parse_module(const char *file, int64_t index, ot_module **out) {
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    OT_CHECK(ot_hlo_read_file(file, &text, &len)); /* refuses devices and text over 1 GiB */
    size_t pos = 0;
    int line = 0, pieces = 0;
    size_t starts[4096], lens[4096];
    int lines[4096];
    while (pos < len && pieces < 4096) {
        size_t next;
        int nl;
        size_t n = ot_hlo_split_next(text + pos, len - pos, &next, &nl);
        starts[pieces] = pos;
        lens[pieces] = n;
        lines[pieces] = line;
        pieces++;
        line += nl;
        if (next == 0) break;
        pos += next;
    }
    ot_status s;
    if (pieces > 1 && index < 0) {
        s = ot_error(OT_ERR_INVALID_ARGUMENT,
                     "%s holds %d modules separated by '// -----'; choose one with --module K",
                     file, pieces);
    } else if (index >= (pieces ? pieces : 1)) {
        s = ot_error(OT_ERR_NOT_FOUND, "%s: --module %lld, but the file holds %d module%s", file,
                     (long long)index, pieces, pieces == 1 ? "" : "s");
    } else {
        int k = index < 0 ? 0 : (int)index;
        ot_hlo_parse_options po = ot_hlo_parse_options_default();
        po.filename = file;
        po.line_offset = pieces ? lines[k] : 0;
        s = ot_hlo_parse(pieces ? text + starts[k] : text, pieces ? lens[k] : len, &po, out);
    }
    ot_free(text);
    return s;
}

typedef struct run_args {
    const char *file, *fill, *outdir, *trace, *hbm;
    input_arg inputs[MAX_INPUTS];
    int ninputs;
    int64_t devices, repeat, warmup, level, devmem, modix;
    bool json, summary, limits, level_given, cache;
    bool profile_warmup_only; /* --profile warmup */
    uint64_t seed;            /* --fill random:SEED */
    bool zeros, random;       /* --fill zeros, --fill random:SEED */
} run_args;

/* --fill MODE into a's zeros, random and seed; CLI_OK or the usage error's code. */
static int parse_fill(run_args *a) {
    const char *fill = a->fill;
    if (!fill) return CLI_OK;
    if (!strcmp(fill, "zeros")) {
        a->zeros = true;
    } else if (!strncmp(fill, "random:", 7)) {
        int64_t sv;
        if (!cli_parse_i64(fill + 7, 0, INT64_MAX, &sv))
            return cli_usage_error("run", "--fill random:SEED needs a non-negative seed");
        a->seed = (uint64_t)sv;
        a->random = true;
    } else {
        return cli_usage_error("run", "--fill takes random:SEED or zeros, not '%s'", fill);
    }
    return CLI_OK;
}

/* Returns CLI_OK, or the usage error's code. */
static int parse_args(int argc, char **argv, run_args *ra) {
    memset(ra, 0, sizeof *ra);
    ra->outdir = ".";
    ra->repeat = 1;
    ra->level = 2;
    ra->modix = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (!strcmp(a, "--input") && more) {
            const char *v = argv[++i], *eq = strchr(v, '=');
            if (!eq || eq == v || !eq[1])
                return cli_usage_error("run", "--input needs NAME=FILE.npy, got '%s'", v);
            if (ra->ninputs == MAX_INPUTS) return cli_usage_error("run", "too many --input");
            static char names[MAX_INPUTS][256];
            snprintf(names[ra->ninputs], sizeof names[ra->ninputs], "%.*s", (int)(eq - v), v);
            ra->inputs[ra->ninputs] = (input_arg){names[ra->ninputs], eq + 1, false};
            ra->ninputs++;
        } else if (!strcmp(a, "--fill") && more) {
            ra->fill = argv[++i];
        } else if (!strcmp(a, "--output-dir") && more) {
            ra->outdir = argv[++i];
        } else if (!strcmp(a, "--devices") && more) {
            if (!cli_parse_i64(argv[++i], 1, 4096, &ra->devices))
                return cli_usage_error("run", "--devices needs a count in 1..4096");
        } else if (!strcmp(a, "--device-memory") && more) {
            if (!cli_parse_size(argv[++i], &ra->devmem) || ra->devmem <= 0)
                return cli_usage_error("run", "--device-memory needs a size such as 512M");
        } else if (!strcmp(a, "--hbm") && more) {
            ra->hbm = argv[++i];
        } else if (!strcmp(a, "-O") && more) {
            if (!cli_parse_i64(argv[++i], 0, 2, &ra->level))
                return cli_usage_error("run", "-O needs 0, 1 or 2");
            ra->level_given = true;
        } else if (!strncmp(a, "-O", 2) && a[2]) {
            if (!cli_parse_i64(a + 2, 0, 2, &ra->level))
                return cli_usage_error("run", "-O needs 0, 1 or 2");
            ra->level_given = true;
        } else if (!strcmp(a, "--trace") && more) {
            ra->trace = argv[++i];
        } else if (!strcmp(a, "--repeat") && more) {
            if (!cli_parse_i64(argv[++i], 1, 1000000, &ra->repeat))
                return cli_usage_error("run", "--repeat needs a count >= 1");
        } else if (!strcmp(a, "--warmup") && more) {
            if (!cli_parse_i64(argv[++i], 0, 1000000, &ra->warmup))
                return cli_usage_error("run", "--warmup needs a count >= 0");
        } else if (!strcmp(a, "--profile") && more) {
            const char *v = argv[++i];
            if (strcmp(v, "all") && strcmp(v, "warmup"))
                return cli_usage_error("run", "--profile takes all or warmup, not '%s'", v);
            ra->profile_warmup_only = !strcmp(v, "warmup");
        } else if (!strcmp(a, "--module") && more) {
            if (!cli_parse_i64(argv[++i], 0, 1 << 20, &ra->modix))
                return cli_usage_error("run", "--module needs an index >= 0");
        } else if (!strcmp(a, "--json")) {
            ra->json = true;
        } else if (!strcmp(a, "--compile-cache")) {
            ra->cache = true;
        } else if (!strcmp(a, "--summary")) {
            ra->summary = true;
        } else if (!strcmp(a, "--limits")) {
            ra->limits = true;
        } else if (a[0] != '-' && !ra->file) {
            ra->file = a;
        } else {
            return cli_usage_error("run", "unknown or incomplete argument '%s'", a);
        }
    }
    if (!ra->file) return cli_usage_error("run", "no HLO or executable file given");
    if (ra->hbm && ra->devmem)
        return cli_usage_error("run", "--hbm and --device-memory exclude each other");
    if (ra->profile_warmup_only && ra->warmup < 1)
        return cli_usage_error("run",
                               "--profile warmup needs --warmup >= 1 (nothing else is profiled)");
    return parse_fill(ra);
}

/* One `optitpu run`; run_free releases what was made, whatever phase stopped. */
typedef struct run_ctx {
    run_args *a;
    const ot_module *m; /* own_m, or the module of the loaded executable */
    ot_module *own_m;
    ot_executable *loaded; /* FILE is an executable: it, until the backend takes it over */
    bool from_exe;         /* FILE is an executable (compile_ms: its load and verification) */
    bool cache_hit;        /* --compile-cache found the executable */
    const ot_computation *entry;
    ot_profile *prof;
    ot_backend *b;
    run_state st;
    uint64_t *times; /* per repetition: its execute time (the slowest device's) */
    ot_bench_limits lim;
    int *given; /* per parameter: 1 + the index of its --input, or 0 */
    int64_t in_bytes;
    double compile_ms;
    int dev; /* the device a single-device module ran on */
} run_ctx;

/* Whether file starts with the executable file's magic. */
static bool is_executable_file(const char *file) {
    char magic[8];
    FILE *f = fopen(file, "rb");
    if (!f) return false; /* the HLO reader reports the error */
    bool yes = fread(magic, 1, 8, f) == 8 && !memcmp(magic, "OPTITPUX", 8);
    fclose(f);
    return yes;
}

/* The module, its entry, and the devices it runs on (one per replica and partition). */
static ot_status load_module(run_ctx *x) {
    run_args *a = x->a;
    if (is_executable_file(a->file)) {
        if (a->level_given || a->modix >= 0)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "%s is a compiled executable: -O and --module do not apply", a->file);
        uint64_t t0 = ot_now_ns();
        OT_CHECK(ot_executable_load(a->file, &x->loaded));
        x->from_exe = true;
        x->compile_ms = (double)(ot_now_ns() - t0) / 1e6;
        x->m = ot_executable_module(x->loaded);
    } else {
        OT_CHECK(parse_module(a->file, a->modix, &x->own_m));
        x->m = x->own_m;
    }
    x->entry = ot_module_entry(x->m);
    if (!x->entry) return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: no entry computation", a->file);
    x->st.np = x->entry->nparams;
    x->st.replicas = (int)ot_module_get_config(x->m)->replica_count;
    if (x->st.replicas < 1) x->st.replicas = 1;
    int64_t nparts = ot_module_get_config(x->m)->num_partitions;
    if (nparts > 1) x->st.replicas *= (int)nparts; /* one device per replica and partition */
    if (a->devices == 0)
        a->devices = x->st.replicas > 1 ? x->st.replicas : ot_device_count_from_env();
    if (x->st.replicas > 1 && a->devices != x->st.replicas)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "%s has replica_count=%lld, num_partitions=%lld; run it with --devices "
                        "%d, not %lld",
                        a->file, (long long)ot_module_get_config(x->m)->replica_count,
                        (long long)(nparts > 1 ? nparts : 1), x->st.replicas,
                        (long long)a->devices);
    return OT_OK;
}

/* Inputs: names and kinds checked first; nothing is read or allocated before admission. */
static ot_status check_inputs(run_ctx *x) {
    const run_args *a = x->a;
    const ot_computation *entry = x->entry;
    int np = x->st.np;
    x->st.host = ot_calloc((size_t)np + 1, sizeof *x->st.host);
    x->given = ot_calloc((size_t)np + 1, sizeof *x->given);
    if (!x->st.host || !x->given) return ot_error(OT_ERR_OUT_OF_MEMORY, "run: out of memory");
    for (int k = 0; k < a->ninputs; k++) {
        const char *name = a->inputs[k].name;
        int p = find_param(entry, name);
        if (p < 0)
            return ot_error(OT_ERR_NOT_FOUND,
                            "--input %s: the module has no parameter named or numbered "
                            "'%s' (it has %d)",
                            name, name, np);
        if (x->given[p])
            return ot_error(OT_ERR_INVALID_ARGUMENT, "--input %s: parameter %d (%s) given twice",
                            name, p, entry->params[p]->name);
        x->given[p] = k + 1;
    }
    for (int p = 0; p < np; p++) {
        const ot_ir_shape *ps = &entry->params[p]->shape;
        if (ps->kind != OT_IR_ARRAY)
            return ot_error(OT_ERR_UNIMPLEMENTED, "parameter %d (%s) is a tuple; pass arrays", p,
                            entry->params[p]->name);
        if (!x->given[p] && !a->zeros && !a->random)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "parameter %d (%s) has no --input (or use --fill)", p,
                            entry->params[p]->name);
        int64_t nb = ot_ir_shape_nbytes(ps);
        x->in_bytes = nb > INT64_MAX - x->in_bytes ? INT64_MAX : x->in_bytes + nb;
    }
    return OT_OK;
}

/* The backend, and the module compiled into the profile. */
static ot_status compile_module(run_ctx *x) {
    const run_args *a = x->a;
    OT_CHECK(ot_profile_create(&x->prof));
    int64_t off;
    if (ot_clock_offset_ns(&off)) ot_profile_set_time_offset(x->prof, off);
    ot_backend_options bo = ot_backend_options_default();
    bo.devices = (int)a->devices;
    bo.device_memory = a->devmem;
    bo.hbm_preset = a->hbm;
    bo.retry.max_attempts = 1; /* a CLI run reports the first failure */
    OT_CHECK(ot_backend_create(&bo, &x->b));
    for (int k = 0; k < ot_backend_device_count(x->b); k++)
        ot_device_set_profile(ot_backend_device(x->b, k), x->prof);
    if (x->loaded) { /* loaded and verified by load_module (compile_ms is its time) */
        ot_executable *e = x->loaded;
        x->loaded = NULL; /* the backend takes it over, also on failure */
        OT_CHECK(ot_backend_register_executable(x->b, "main", e));
        return ot_backend_lookup(x->b, "main", &x->st.exe);
    }
    ot_compile_options co = ot_compile_options_default();
    co.opt_level = (int)a->level;
    uint64_t tc = ot_now_ns();
    if (a->cache) {
        ot_compile_cache *cache = NULL;
        ot_executable *e = NULL;
        OT_CHECK(ot_compile_cache_open(NULL, &cache));
        ot_status s = ot_compile_cached(x->m, &co, cache, &e, &x->cache_hit);
        ot_compile_cache_free(cache);
        OT_CHECK(s);
        OT_CHECK(ot_backend_register_executable(x->b, "main", e));
    } else {
        OT_CHECK(ot_backend_register_module_profiled(x->b, "main", x->m, &co, x->prof));
    }
    x->compile_ms = (double)(ot_now_ns() - tc) / 1e6;
    return ot_backend_lookup(x->b, "main", &x->st.exe);
}

/* Memory admission (runtime.h): the host copies of the inputs and of the results, and on each
 * device that runs the input buffers, the arena and the output buffers. */
static ot_status admit(const run_ctx *x) {
    const run_args *a = x->a;
    int64_t cap = a->devmem, out_bytes = ot_ir_shape_nbytes(&x->entry->root->shape);
    if (a->hbm) OT_CHECK(ot_tpu_hbm_bytes(a->hbm, &cap));
    ot_mem_item need[] = {
        {"inputs", x->in_bytes, false},       {"results", out_bytes, false},
        {"input buffers", x->in_bytes, true}, {"arena", ot_executable_arena_size(x->st.exe), true},
        {"output buffers", out_bytes, true},
    };
    char what[4200];
    snprintf(what, sizeof what, "run %s", a->file);
    return ot_mem_admit(what, need, (int)(sizeof need / sizeof need[0]), x->st.replicas, cap, NULL);
}

/* Parameter p from its --input file, checked against the parameter's shape. */
static ot_status read_input(run_ctx *x, int p, const input_arg *in) {
    const ot_ir_shape *ps = &x->entry->params[p]->shape;
    const char *pname = x->entry->params[p]->name;
    /* a file far larger than the parameter would be read whole before its shape is compared:
     * refuse it from its size (a .npy header is at most a few KiB) */
    struct stat fs;
    int64_t data_bytes = ot_ir_shape_nbytes(ps);
    if (stat(in->file, &fs) == 0 && S_ISREG(fs.st_mode) &&
        (int64_t)fs.st_size > data_bytes + 65536) {
        char sh[96];
        ot_shape_format(&ps->array, sh, sizeof sh);
        return ot_error(OT_ERR_SHAPE_MISMATCH,
                        "--input %s=%s: the file holds %lld bytes, parameter %d (%s) is %s "
                        "(%lld bytes)",
                        in->name, in->file, (long long)fs.st_size, p, pname, sh,
                        (long long)data_bytes);
    }
    if (ot_npy_read_file(in->file, &x->st.host[p]) != OT_OK)
        return ot_error_wrap(OT_ERR_INVALID_ARGUMENT, "--input %s", in->name);
    ot_tensor *t = &x->st.host[p];
    if (ps->array.dtype == OT_BF16 && t->shape.dtype == OT_U16) t->shape.dtype = OT_BF16;
    if (!ot_shape_equal(&t->shape, &ps->array)) {
        char want[96], got[96];
        ot_shape_format(&ps->array, want, sizeof want);
        ot_shape_format(&t->shape, got, sizeof got);
        return ot_error(OT_ERR_SHAPE_MISMATCH,
                        "--input %s=%s: parameter %d (%s) expects %s, the file "
                        "holds %s",
                        in->name, in->file, p, pname, want, got);
    }
    return OT_OK;
}

/* Every parameter's host tensor: from its --input, else zeros or --fill random. */
static ot_status load_inputs(run_ctx *x) {
    for (int p = 0; p < x->st.np; p++) {
        if (x->given[p]) {
            OT_CHECK(read_input(x, p, &x->a->inputs[x->given[p] - 1]));
            continue;
        }
        OT_CHECK(ot_tensor_alloc(&x->st.host[p], &x->entry->params[p]->shape.array));
        if (x->a->random) fill_random(&x->st.host[p], x->a->seed * 1000003ULL + (uint64_t)p);
    }
    return OT_OK;
}

/* --limits' STREAM first, then --repeat runs (every replica in parallel when there are several). */
static ot_status execute_all(run_ctx *x) {
    const run_args *a = x->a;
    run_state *st = &x->st;
    if (a->limits) {
        ot_bench_limits_options lo = ot_bench_limits_options_default();
        lo.what = OT_BENCH_LIMIT_STREAM;
        lo.reps = 3;
        OT_CHECK(ot_bench_limits_measure(&lo, &x->lim));
    }
    st->b = x->b;
    st->prof = x->prof;
    st->no = ot_executable_output_count(st->exe);
    st->result = ot_calloc((size_t)st->no + 1, sizeof *st->result);
    st->ns = ot_calloc((size_t)a->devices, sizeof *st->ns);
    x->times = ot_calloc((size_t)a->repeat, sizeof *x->times);
    st->in = ot_calloc((size_t)a->devices, sizeof *st->in);
    if (!st->result || !st->ns || !x->times || !st->in)
        return ot_error(OT_ERR_OUT_OF_MEMORY, "run: out of memory");
    x->dev = 0;
    if (st->replicas == 1)
        OT_CHECK(ot_backend_select_device(x->b, OT_DEVSEL_MOST_FREE, -1, &x->dev));
    /* r < 0: the untimed warm-up runs */
    for (int64_t r = -a->warmup; r < a->repeat; r++) {
        if (r == 0 && a->profile_warmup_only) {
            st->prof = NULL;
            for (int k = 0; k < ot_backend_device_count(x->b); k++)
                ot_device_set_profile(ot_backend_device(x->b, k), NULL);
        }
        ot_status s;
        uint64_t ns;
        if (st->replicas > 1) {
            s = ot_local_run(st->replicas, replica_fn, st, NULL);
            uint64_t mx = 0;
            for (int k = 0; k < st->replicas; k++) mx = st->ns[k] > mx ? st->ns[k] : mx;
            ns = mx;
        } else {
            s = run_on(st, x->dev, NULL, r == a->repeat - 1);
            ns = st->ns[x->dev];
        }
        OT_CHECK(s);
        if (r >= 0) x->times[r] = ns;
    }
    return OT_OK;
}

/* D/out_K.npy (bf16 as u16 bit patterns) and the --trace file. */
static ot_status write_outputs(const run_ctx *x) {
    const run_args *a = x->a;
    if (mkdir(a->outdir, 0777) != 0 && errno != EEXIST)
        return ot_error(OT_ERR_IO, "--output-dir %s: cannot create it", a->outdir);
    for (int k = 0; k < x->st.no; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/out_%d.npy", a->outdir, k);
        ot_tensor t = x->st.result[k];
        if (t.shape.dtype == OT_BF16) t.shape.dtype = OT_U16;
        OT_CHECK(ot_npy_write_file(path, &t));
    }
    if (a->trace) OT_CHECK(ot_profile_write_chrome_trace(x->prof, a->trace));
    return OT_OK;
}

/* What print_json and print_text print beside the context. */
typedef struct run_figures {
    double min_ms, med_ms;
    ot_mem_stats ms;
    int64_t flops, bytes;
} run_figures;

static void print_json(const run_ctx *x, const run_figures *f) {
    const run_args *a = x->a;
    const run_state *st = &x->st;
    printf("{\"module\":");
    json_str(ot_module_name(x->m));
    printf(",\"file\":");
    json_str(a->file);
    printf(",\"devices\":%lld,\"replicas\":%d,", (long long)a->devices, st->replicas);
    if (x->from_exe) /* the file's level is not recorded where the CLI can read it */
        printf("\"executable\":true,\"opt_level\":null,");
    else
        printf("\"opt_level\":%lld,", (long long)a->level);
    if (a->cache) printf("\"compile_cache_hit\":%s,", x->cache_hit ? "true" : "false");
    printf("\"kernels\":%d,\"arena_bytes\":%lld,\"compile_ms\":%.3f,\"repeat\":%lld,\"run_ms\":[",
           ot_executable_kernel_count(st->exe), (long long)ot_executable_arena_size(st->exe),
           x->compile_ms, (long long)a->repeat);
    for (int64_t r = 0; r < a->repeat; r++) printf("%s%.4f", r ? "," : "", x->times[r] / 1e6);
    printf("],\"min_ms\":%.4f,\"median_ms\":%.4f,\"flops\":%lld,\"bytes\":%lld,"
           "\"peak_device_bytes\":%lld,\"outputs\":[",
           f->min_ms, f->med_ms, (long long)f->flops, (long long)f->bytes,
           (long long)f->ms.peak_in_use);
    for (int k = 0; k < st->no; k++) {
        char sh[128], path[4096];
        ot_shape_format(&st->result[k].shape, sh, sizeof sh);
        snprintf(path, sizeof path, "%s/out_%d.npy", a->outdir, k);
        printf("%s{\"shape\":", k ? "," : "");
        json_str(sh);
        printf(",\"file\":");
        json_str(path);
        printf("}");
    }
    printf("]");
    if (a->trace) {
        printf(",\"trace\":");
        json_str(a->trace);
    }
    printf("}\n");
}

static ot_status print_text(const run_ctx *x, const run_figures *f) {
    const run_args *a = x->a;
    const run_state *st = &x->st;
    printf("module      %s (%s)\n", ot_module_name(x->m), a->file);
    if (x->from_exe)
        printf("loaded      executable in %.3f ms: %d kernels, arena %lld bytes\n", x->compile_ms,
               ot_executable_kernel_count(st->exe), (long long)ot_executable_arena_size(st->exe));
    else
        printf("compiled    -O%lld in %.3f ms%s: %d kernels, arena %lld bytes\n",
               (long long)a->level, x->compile_ms,
               !a->cache      ? ""
               : x->cache_hit ? " (compilation cache hit)"
                              : " (compilation cache miss)",
               ot_executable_kernel_count(st->exe), (long long)ot_executable_arena_size(st->exe));
    printf("devices     %lld%s\n", (long long)a->devices,
           st->replicas > 1 ? " (one replica or partition each)" : "");
    printf("run         %lld x: min %.4f ms, median %.4f ms", (long long)a->repeat, f->min_ms,
           f->med_ms);
    if (f->med_ms > 0)
        printf(", %.3f GB/s, %.3f GFLOP/s", (double)f->bytes / (f->med_ms * 1e6),
               (double)f->flops / (f->med_ms * 1e6));
    printf("\n");
    printf("memory      peak %lld bytes in use on device %d\n", (long long)f->ms.peak_in_use,
           x->dev);
    for (int k = 0; k < st->no; k++) {
        char sh[128];
        ot_shape_format(&st->result[k].shape, sh, sizeof sh);
        printf("output %-4d %s -> %s/out_%d.npy%s\n", k, sh, a->outdir, k,
               st->result[k].shape.dtype == OT_BF16 ? " (bf16 as u16 bits)" : "");
    }
    if (a->trace) printf("trace       %s\n", a->trace);
    if (a->summary || a->limits) {
        char *s = NULL;
        OT_CHECK(ot_profile_summary(x->prof, a->limits ? &x->lim : NULL, 10, &s));
        printf("\n%s", s);
        ot_free(s);
    }
    return OT_OK;
}

/* The run times' minimum and median, device memory, the executable's totals; then the report. */
static ot_status report(const run_ctx *x) {
    int64_t repeat = x->a->repeat;
    run_figures f;
    uint64_t *sorted = ot_malloc((size_t)repeat * sizeof *sorted);
    if (!sorted) return ot_error(OT_ERR_OUT_OF_MEMORY, "run: out of memory");
    memcpy(sorted, x->times, (size_t)repeat * sizeof *sorted);
    qsort(sorted, (size_t)repeat, sizeof *sorted, cmp_u64);
    f.min_ms = sorted[0] / 1e6, f.med_ms = sorted[repeat / 2] / 1e6;
    ot_free(sorted);
    ot_device_memory(ot_backend_device(x->b, x->dev), &f.ms);
    f.flops = ot_executable_total_flops(x->st.exe);
    f.bytes = ot_executable_total_bytes(x->st.exe);
    if (!x->a->json) return print_text(x, &f);
    print_json(x, &f);
    return OT_OK;
}

static void run_free(run_ctx *x) {
    run_state *st = &x->st;
    for (int k = 0; st->host && k < st->np; k++) ot_tensor_release(&st->host[k]);
    for (int k = 0; st->result && k < st->no; k++) ot_tensor_release(&st->result[k]);
    for (int64_t d = 0; st->in && d < x->a->devices; d++) {
        for (int k = 0; st->in[d] && k < st->np; k++) ot_buffer_free(st->in[d][k]);
        ot_free(st->in[d]);
    }
    ot_free(st->in);
    ot_free(x->given);
    ot_free(st->host);
    ot_free(st->result);
    ot_free(st->ns);
    ot_free(x->times);
    if (x->b)
        for (int k = 0; k < ot_backend_device_count(x->b); k++)
            ot_device_set_profile(ot_backend_device(x->b, k), NULL);
    ot_backend_free(x->b);
    ot_profile_free(x->prof);
    ot_executable_free(x->loaded);
    ot_module_free(x->own_m);
}

static int run(int argc, char **argv) {
    run_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_OK) return rc;
    run_ctx x;
    memset(&x, 0, sizeof x);
    x.a = &a;
    ot_status s = load_module(&x);
    if (s == OT_OK) s = check_inputs(&x);
    if (s == OT_OK) s = compile_module(&x);
    if (s == OT_OK) s = admit(&x);
    if (s == OT_OK) s = load_inputs(&x);
    if (s == OT_OK) s = execute_all(&x);
    if (s == OT_OK) s = write_outputs(&x);
    if (s == OT_OK) s = report(&x);
    rc = s == OT_OK ? CLI_OK : cli_fail("run");
    run_free(&x);
    return rc;
}

const cli_command cli_cmd_run = {
    "run",
    "compile an HLO module, run it on host devices, write out_K.npy and timings",
    usage,
    run,
};

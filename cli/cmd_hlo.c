/* optitpu hlo: check, print, dot and stats for HLO text files (public API only). */
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HLO_USAGE                                                                                  \
    "usage: optitpu hlo check FILE [--split-input-file]\n"                                         \
    "       optitpu hlo print FILE [--short] [--no-metadata] [--split-input-file] [-o OUT]\n"      \
    "       optitpu hlo dot FILE [--computation NAME] [-o OUT]\n"                                  \
    "       optitpu hlo stats FILE [--json]\n"                                                     \
    "\n"                                                                                           \
    "HLO text as XLA dumps it (% names, operand shapes, layouts, metadata) or as JAX prints it\n"  \
    "(jax.jit(f).lower(...).as_text(dialect=\"hlo\")); FILE - reads standard input.\n"             \
    "  check   parse, infer every shape and verify; exit 1 with FILE:LINE:COL and what was\n"      \
    "          expected on the first error (UNIMPLEMENTED names a feature optitpu lacks)\n"        \
    "  print   the canonical text (a fixed point: printing it again gives the same text);\n"       \
    "          --short drops %% and operand shapes as JAX does, --no-metadata drops metadata\n"    \
    "  dot     Graphviz DOT of the entry computation (or --computation NAME)\n"                    \
    "  stats   computations, parameters and instructions by opcode (--json: one object)\n"         \
    "  --split-input-file  the file holds several modules separated by '// -----' lines\n"         \
    "                      (XLA's lit tests); each is handled in turn\n"

static bool is_help(const char *a) {
    return !strcmp(a, "--help") || !strcmp(a, "-h");
}

/* Reads FILE (or stdin for "-"), ot_free'd; the library's reader refuses devices such as
 * /dev/zero and text over 1 GiB. */
static char *slurp(const char *path, size_t *len) {
    char *text = NULL;
    return ot_hlo_read_file(path, &text, len) == OT_OK ? text : NULL;
}

static bool blank_piece(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') continue;
        if (i + 1 < n && s[i] == '/' && s[i + 1] == '/') {
            while (i < n && s[i] != '\n') i++;
            continue;
        }
        return false;
    }
    return true;
}

typedef struct hlo_args {
    const char *file, *out, *computation;
    bool split, shorter, no_metadata, json;
} hlo_args;

static int parse_args(const char *sub, int argc, char **argv, hlo_args *a, unsigned allowed) {
    enum { A_SPLIT = 1, A_SHORT = 2, A_OUT = 4, A_COMP = 8, A_JSON = 16, A_NOMD = 32 };
    memset(a, 0, sizeof *a);
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i];
        if ((allowed & A_SPLIT) && !strcmp(s, "--split-input-file")) {
            a->split = true;
        } else if ((allowed & A_SHORT) && !strcmp(s, "--short")) {
            a->shorter = true;
        } else if ((allowed & A_NOMD) && !strcmp(s, "--no-metadata")) {
            a->no_metadata = true;
        } else if ((allowed & A_JSON) && !strcmp(s, "--json")) {
            a->json = true;
        } else if ((allowed & A_OUT) && !strcmp(s, "-o")) {
            if (++i >= argc) return cli_usage_error("hlo", "%s: -o needs a file name", sub);
            a->out = argv[i];
        } else if ((allowed & A_COMP) && !strcmp(s, "--computation")) {
            if (++i >= argc) return cli_usage_error("hlo", "%s: --computation needs a name", sub);
            a->computation = argv[i];
        } else if (s[0] == '-' && s[1] != '\0') {
            return cli_usage_error("hlo", "%s: unknown option '%s'", sub, s);
        } else if (!a->file) {
            a->file = s;
        } else {
            return cli_usage_error("hlo", "%s: unexpected argument '%s'", sub, s);
        }
    }
    if (!a->file) return cli_usage_error("hlo", "%s: FILE is required", sub);
    return CLI_OK;
}

static const char *display_name(const char *file) {
    return strcmp(file, "-") ? file : "<stdin>";
}

/* Parses piece [off, off+n) of text; line_offset for messages. */
static ot_status parse_piece(const char *file, const char *text, size_t n, int line_offset,
                             ot_module **m) {
    ot_hlo_parse_options o = ot_hlo_parse_options_default();
    o.filename = display_name(file);
    o.line_offset = line_offset;
    return ot_hlo_parse(text, n, &o, m);
}

static FILE *open_out(const char *out) {
    if (!out || !strcmp(out, "-")) return stdout;
    FILE *f = fopen(out, "wb");
    if (!f) ot_error(OT_ERR_IO, "open %s: %s", out, strerror(errno));
    return f;
}

static int close_out(FILE *f, const char *out) {
    if (f == stdout) return fflush(f) == 0 ? CLI_OK : CLI_FAIL;
    if (fclose(f) != 0) {
        ot_error(OT_ERR_IO, "write %s: %s", out, strerror(errno));
        return cli_fail("hlo");
    }
    return CLI_OK;
}

static int cmd_check_or_print(bool print, int argc, char **argv) {
    hlo_args a;
    int rc = parse_args(print ? "print" : "check", argc, argv, &a, print ? 1 | 2 | 4 | 32 : 1);
    if (rc != CLI_OK) return rc;
    size_t len;
    char *text = slurp(a.file, &len);
    if (!text) return cli_fail("hlo");
    FILE *out = NULL;
    if (print && !(out = open_out(a.out))) {
        ot_free(text);
        return cli_fail("hlo");
    }
    ot_hlo_print_options po = ot_hlo_print_options_default();
    if (a.shorter) po.operand_shapes = po.percent = false;
    if (a.no_metadata) po.metadata = false;
    size_t off = 0;
    int line = 0, pieces = 0, failed = 0;
    while (off < len || pieces == 0) {
        size_t next = len;
        int lines = 0;
        size_t n = a.split ? ot_hlo_split_next(text + off, len - off, &next, &lines) : len;
        if (!a.split) next = len;
        if (a.split && blank_piece(text + off, n)) {
            off += next;
            line += lines;
            if (off >= len) break;
            continue;
        }
        ot_module *m = NULL;
        ot_status s = parse_piece(a.file, text + off, n, line, &m);
        if (s != OT_OK) {
            fprintf(stderr, "optitpu hlo: %s\n", ot_last_error());
            failed++;
        } else if (print) {
            char *t = ot_hlo_print(m, &po);
            if (!t) {
                ot_module_free(m);
                ot_free(text);
                if (out != stdout) fclose(out);
                return cli_fail("hlo");
            }
            if (pieces) fputs("\n// -----\n\n", out);
            fputs(t, out);
            ot_free(t);
        } else {
            int64_t params = ot_module_entry(m)->nparams;
            printf("%s: ok: module %s, %d computations, %lld instructions, %lld entry "
                   "parameters\n",
                   display_name(a.file), ot_module_name(m), ot_module_computation_count(m),
                   (long long)ot_module_instr_count(m), (long long)params);
        }
        ot_module_free(m);
        pieces++;
        off += next;
        line += lines;
        if (!a.split || off >= len) break;
    }
    ot_free(text);
    if (pieces == 0 && !failed) {
        fprintf(stderr, "optitpu hlo: %s: no module (only comments and blank lines)\n",
                display_name(a.file));
        failed++;
    }
    if (print) {
        rc = close_out(out, a.out);
        if (rc != CLI_OK) return rc;
    }
    return failed ? CLI_FAIL : CLI_OK;
}

static ot_module *load_one(const hlo_args *a) {
    size_t len;
    char *text = slurp(a->file, &len);
    if (!text) return NULL;
    ot_module *m = NULL;
    ot_status s = parse_piece(a->file, text, len, 0, &m);
    ot_free(text);
    return s == OT_OK ? m : NULL;
}

static int cmd_dot(int argc, char **argv) {
    hlo_args a;
    int rc = parse_args("dot", argc, argv, &a, 4 | 8);
    if (rc != CLI_OK) return rc;
    ot_module *m = load_one(&a);
    if (!m) return cli_fail("hlo");
    const ot_computation *c = NULL;
    if (a.computation && !(c = ot_module_find_computation(m, a.computation))) {
        ot_error(OT_ERR_NOT_FOUND, "no computation named '%s'", a.computation);
        ot_module_free(m);
        return cli_fail("hlo");
    }
    char *d = ot_ir_to_dot(m, c);
    ot_module_free(m);
    if (!d) return cli_fail("hlo");
    FILE *out = open_out(a.out);
    if (!out) {
        ot_free(d);
        return cli_fail("hlo");
    }
    fputs(d, out);
    ot_free(d);
    return close_out(out, a.out);
}

static int cmd_stats(int argc, char **argv) {
    hlo_args a;
    int rc = parse_args("stats", argc, argv, &a, 16);
    if (rc != CLI_OK) return rc;
    ot_module *m = load_one(&a);
    if (!m) return cli_fail("hlo");
    int64_t by_op[OT_OP_COUNT] = {0};
    int ncomp = ot_module_computation_count(m);
    for (int k = 0; k < ncomp; k++)
        for (const ot_instr *i = ot_module_computation(m, k)->first; i; i = i->next)
            by_op[i->opcode]++;
    const ot_computation *e = ot_module_entry(m);
    const ot_module_config *cfg = ot_module_get_config(m);
    if (a.json) {
        json_t *o = json_object(), *ops = json_object(), *params = json_array(),
               *comps = json_array();
        json_object_set_new(o, "module", json_string(ot_module_name(m)));
        json_object_set_new(o, "computations", json_integer(ncomp));
        json_object_set_new(o, "instructions", json_integer(ot_module_instr_count(m)));
        json_object_set_new(o, "entry", json_string(e->name));
        json_object_set_new(o, "replica_count", json_integer(cfg->replica_count));
        json_object_set_new(o, "num_partitions", json_integer(cfg->num_partitions));
        for (int op = 0; op < OT_OP_COUNT; op++)
            if (by_op[op])
                json_object_set_new(ops, ot_opcode_name((ot_opcode)op), json_integer(by_op[op]));
        json_object_set_new(o, "opcodes", ops);
        for (int k = 0; k < e->nparams; k++) {
            char shp[512];
            ot_ir_shape_format(&e->params[k]->shape, shp, sizeof shp);
            json_t *p = json_object();
            json_object_set_new(p, "number", json_integer(k));
            json_object_set_new(p, "name", json_string(e->params[k]->name));
            json_object_set_new(p, "shape", json_string(shp));
            json_object_set_new(p, "bytes", json_integer(ot_ir_shape_nbytes(&e->params[k]->shape)));
            json_array_append_new(params, p);
        }
        json_object_set_new(o, "parameters", params);
        for (int k = 0; k < ncomp; k++) {
            const ot_computation *c = ot_module_computation(m, k);
            json_t *cj = json_object();
            json_object_set_new(cj, "name", json_string(c->name));
            json_object_set_new(cj, "instructions", json_integer(c->ninstrs));
            json_object_set_new(cj, "parameters", json_integer(c->nparams));
            json_array_append_new(comps, cj);
        }
        json_object_set_new(o, "computation_list", comps);
        char *s = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        ot_module_free(m);
        if (!s) return cli_fail("hlo");
        printf("%s\n", s);
        free(s);
        return CLI_OK;
    }
    printf("module %s: %d computations, %lld instructions, entry %s\n", ot_module_name(m), ncomp,
           (long long)ot_module_instr_count(m), e->name);
    if (cfg->replica_count != 1 || cfg->num_partitions != 1)
        printf("replica_count %lld, num_partitions %lld\n", (long long)cfg->replica_count,
               (long long)cfg->num_partitions);
    printf("\nentry parameters:\n");
    for (int k = 0; k < e->nparams; k++) {
        char shp[512];
        ot_ir_shape_format(&e->params[k]->shape, shp, sizeof shp);
        printf("  %3d  %-24s %s  (%lld bytes)\n", k, e->params[k]->name, shp,
               (long long)ot_ir_shape_nbytes(&e->params[k]->shape));
    }
    printf("\ninstructions by opcode:\n");
    /* most frequent first; ties by opcode order */
    int order[OT_OP_COUNT], n = 0;
    for (int op = 0; op < OT_OP_COUNT; op++)
        if (by_op[op]) order[n++] = op;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && by_op[order[j]] > by_op[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int i = 0; i < n; i++)
        printf("  %-24s %lld\n", ot_opcode_name((ot_opcode)order[i]), (long long)by_op[order[i]]);
    printf("\ncomputations:\n");
    for (int k = 0; k < ncomp; k++) {
        const ot_computation *c = ot_module_computation(m, k);
        printf("  %-40s %lld instructions, %d parameters%s\n", c->name, (long long)c->ninstrs,
               c->nparams, c == e ? " (entry)" : "");
    }
    ot_module_free(m);
    return CLI_OK;
}

static int run(int argc, char **argv) {
    if (argc < 2 || is_help(argv[1])) {
        fputs(HLO_USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    const char *sub = argv[1];
    for (int i = 2; i < argc; i++)
        if (is_help(argv[i])) {
            fputs(HLO_USAGE, stdout);
            return CLI_OK;
        }
    if (!strcmp(sub, "check")) return cmd_check_or_print(false, argc - 2, argv + 2);
    if (!strcmp(sub, "print")) return cmd_check_or_print(true, argc - 2, argv + 2);
    if (!strcmp(sub, "dot")) return cmd_dot(argc - 2, argv + 2);
    if (!strcmp(sub, "stats")) return cmd_stats(argc - 2, argv + 2);
    return cli_usage_error("hlo", "unknown subcommand '%s' (check, print, dot, stats)", sub);
}

const cli_command cli_cmd_hlo = {
    "hlo",
    "check, print, dot and stats for HLO text (XLA dumps, JAX as_text)",
    HLO_USAGE,
    run,
};

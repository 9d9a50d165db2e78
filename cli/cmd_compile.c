/* optitpu compile FILE: parses an HLO module, compiles it and prints the kernel count, the arena
 * beside its lower bound and (with --stats) per-pass statistics and the native-code stage; -o
 * writes the executable. */
#include "cli.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static int run_compile(int argc, char **argv) {
    const char *cmd = "compile";
    const char *file = NULL, *out = NULL;
    ot_compile_options o = ot_compile_options_default();
    bool stats = false, json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n;
        if (!strcmp(a, "-O0") || !strcmp(a, "-O1") || !strcmp(a, "-O2")) {
            o.opt_level = a[2] - '0';
        } else if (!strcmp(a, "--dump-dir")) {
            if (!v) return cli_usage_error(cmd, "--dump-dir needs a directory");
            o.dump_dir = v;
            i++;
        } else if (!strcmp(a, "--dump-after")) {
            if (!v) return cli_usage_error(cmd, "--dump-after needs a pass name (or all)");
            o.dump_after = v;
            i++;
        } else if (!strcmp(a, "--passes")) {
            if (!v) return cli_usage_error(cmd, "--passes needs a comma list");
            o.passes = v;
            i++;
        } else if (!strcmp(a, "--disable-passes")) {
            if (!v) return cli_usage_error(cmd, "--disable-passes needs a comma list");
            o.disable_passes = v;
            i++;
        } else if (!strcmp(a, "--arena-limit")) {
            if (!v || !cli_parse_size(v, &n) || n < 1)
                return cli_usage_error(cmd, "--arena-limit needs a size (e.g. 64M)");
            o.arena_limit = n;
            i++;
        } else if (!strcmp(a, "--fold-limit")) {
            if (!v || !cli_parse_i64(v, 1, INT64_MAX, &n))
                return cli_usage_error(cmd, "--fold-limit needs an element count");
            o.fold_max_elements = n;
            i++;
        } else if (!strcmp(a, "--native")) {
            if (v && !strcmp(v, "auto")) {
                o.native = OT_NATIVE_AUTO;
            } else if (v && !strcmp(v, "on")) {
                o.native = OT_NATIVE_ON;
            } else if (v && !strcmp(v, "off")) {
                o.native = OT_NATIVE_OFF;
            } else {
                return cli_usage_error(cmd, "--native needs auto, on or off");
            }
            i++;
        } else if (!strcmp(a, "--no-fusion")) {
            o.fusion = false;
        } else if (!strcmp(a, "--verify-each")) {
            o.verify_each = true;
        } else if (!strcmp(a, "--stats")) {
            stats = true;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "-o")) {
            if (!v) return cli_usage_error(cmd, "-o needs a file name");
            out = v;
            i++;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error(cmd, "unknown option '%s'", a);
        } else if (file) {
            return cli_usage_error(cmd, "one FILE only ('%s' and '%s')", file, a);
        } else {
            file = a;
        }
    }
    if (!file) return cli_usage_error(cmd, "needs an HLO text FILE");
    if (o.dump_dir && !o.dump_after) o.dump_after = "all";
    if (o.dump_after && !o.dump_dir) return cli_usage_error(cmd, "--dump-after needs --dump-dir");
    ot_hlo_parse_options po = ot_hlo_parse_options_default();
    po.filename = file;
    ot_module *m = NULL;
    if (ot_hlo_parse_file(file, &po, &m) != OT_OK) return cli_fail(cmd);
    ot_executable *e = NULL;
    uint64_t t0 = ot_now_ns();
    ot_status s = ot_compile(m, &o, &e);
    double secs = (double)(ot_now_ns() - t0) / 1e9;
    ot_module_free(m);
    if (s != OT_OK) return cli_fail(cmd);
    if (out && ot_executable_save(e, out) != OT_OK) {
        ot_executable_free(e);
        return cli_fail(cmd);
    }
    uint8_t fp[32];
    char hex[65];
    ot_executable_fingerprint(e, fp);
    ot_hex(fp, 32, hex);
    int nk = ot_executable_kernel_count(e), nf = 0;
    for (int k = 0; k < nk; k++) nf += ot_executable_kernel(e, k)->kind == OT_KERNEL_FUSION;
    int64_t arena = ot_executable_arena_size(e), peak = ot_executable_peak_live_bytes(e);
    ot_native_stats ns;
    ot_executable_native_stats(e, &ns);
    if (json) {
        json_t *j = json_object();
        json_object_set_new(j, "file", json_string(file));
        json_object_set_new(j, "opt_level", json_integer(o.opt_level));
        json_object_set_new(j, "compile_s", json_real(secs));
        json_object_set_new(j, "kernels", json_integer(nk));
        json_object_set_new(j, "fusions", json_integer(nf));
        json_object_set_new(j, "arena_bytes", json_integer(arena));
        json_object_set_new(j, "peak_live_bytes", json_integer(peak));
        json_object_set_new(j, "flops", json_integer(ot_executable_total_flops(e)));
        json_object_set_new(j, "bytes", json_integer(ot_executable_total_bytes(e)));
        json_object_set_new(j, "fingerprint", json_string(hex));
        if (stats) {
            json_t *arr = json_array();
            for (int k = 0; k < ot_executable_stat_count(e); k++) {
                const ot_pass_stat *st = ot_executable_stat(e, k);
                json_t *x = json_object();
                json_object_set_new(x, "pass", json_string(st->name));
                json_object_set_new(x, "iteration", json_integer(st->iteration));
                json_object_set_new(x, "time_ms", json_real((double)st->time_ns / 1e6));
                json_object_set_new(x, "instrs_before", json_integer(st->instrs_before));
                json_object_set_new(x, "instrs_after", json_integer(st->instrs_after));
                json_object_set_new(x, "changed", json_boolean(st->changed));
                json_array_append_new(arr, x);
            }
            json_object_set_new(j, "passes", arr);
            json_t *nj = json_object();
            json_object_set_new(nj, "kernels", json_integer(ns.kernels));
            json_object_set_new(nj, "units", json_integer(ns.units));
            json_object_set_new(nj, "units_compiled", json_integer(ns.units_compiled));
            json_object_set_new(nj, "units_cached", json_integer(ns.units_cached));
            json_object_set_new(nj, "seconds", json_real(ns.seconds));
            json_object_set_new(nj, "cc_cpu_seconds", json_real(ns.cc_cpu_seconds));
            json_object_set_new(j, "native", nj);
        }
        char *txt = json_dumps(j, JSON_COMPACT);
        if (txt) printf("%s\n", txt);
        free(txt);
        json_decref(j);
    } else {
        if (stats) {
            printf("%-16s %4s %10s %10s %10s %s\n", "pass", "iter", "time ms", "before", "after",
                   "changed");
            for (int k = 0; k < ot_executable_stat_count(e); k++) {
                const ot_pass_stat *st = ot_executable_stat(e, k);
                printf("%-16s %4d %10.3f %10lld %10lld %s\n", st->name, st->iteration,
                       (double)st->time_ns / 1e6, (long long)st->instrs_before,
                       (long long)st->instrs_after, st->changed ? "yes" : "no");
            }
            /* the last stage: native code for the loop fusions (docs/codegen.md) */
            if (ns.kernels > 0)
                printf(
                    "native code  %d kernel%s in %d unit%s (%d compiled, %d from cache), %.3f s, "
                    "cc cpu %.3f s\n",
                    ns.kernels, ns.kernels == 1 ? "" : "s", ns.units, ns.units == 1 ? "" : "s",
                    ns.units_compiled, ns.units_cached, ns.seconds, ns.cc_cpu_seconds);
            else
                printf("native code  none, %.3f s\n", ns.seconds);
            printf("\n");
        }
        printf("module       %s (-O%d, %.3f s)\n", file, o.opt_level, secs);
        printf("kernels      %d (%d fused)\n", nk, nf);
        printf("arena        %lld bytes (lower bound: peak of live bytes %lld", (long long)arena,
               (long long)peak);
        if (peak > 0) printf(", %.3fx", (double)arena / (double)peak);
        printf(")\n");
        printf("flops        %lld\n", (long long)ot_executable_total_flops(e));
        printf("bytes        %lld\n", (long long)ot_executable_total_bytes(e));
        printf("fingerprint  %s\n", hex);
        if (out) printf("written      %s\n", out);
    }
    ot_executable_free(e);
    return CLI_OK;
}

const cli_command cli_cmd_compile = {
    "compile",
    "compile an HLO module: per-pass statistics, kernels, arena vs its lower bound",
    "usage: optitpu compile FILE [-O0|-O1|-O2] [--dump-dir D] [--dump-after PASS] [--stats]\n"
    "                       [--json] [-o OUT] [--no-fusion] [--passes LIST]\n"
    "                       [--disable-passes LIST] [--arena-limit SIZE] [--fold-limit N]\n"
    "                       [--verify-each] [--native auto|on|off]\n"
    "\n"
    "Parses FILE (HLO text), compiles it (default -O2) and prints the kernel count, the arena\n"
    "size beside the peak of live bytes (its no-fragmentation lower bound), FLOPs, bytes and the\n"
    "fingerprint (the compilation-cache key).\n"
    "\n"
    "  -O0 / -O1 / -O2      required passes only / inline, simplify, cse, dce, fuse / the same\n"
    "                       with a fixed-point group and constant folding (default)\n"
    "  --stats              per-pass table: time, instructions before/after, changed; then\n"
    "                       the native-code stage: kernels, units compiled or loaded from the\n"
    "                       disk cache, seconds\n"
    "  --json               one JSON object (with --stats: a \"passes\" array and a\n"
    "                       \"native\" object)\n"
    "  --dump-dir D         write D/NN.PASS.hlo and D/NN.PASS.dot after every pass\n"
    "  --dump-after PASS    only after PASS (inline, licm, simplify, cse, fold, dce, fuse)\n"
    "  --passes LIST        run exactly these graph passes (comma list), in order\n"
    "  --disable-passes L   skip these passes\n"
    "  --no-fusion          no fusion\n"
    "  --arena-limit SIZE   fail (OUT_OF_MEMORY, with the peak) when the arena needs more\n"
    "  --fold-limit N       constant-folding cap in elements (default 1M)\n"
    "  --verify-each        run the verifier after every pass\n"
    "  --native MODE        native code for loop fusions, compiled by the system C compiler:\n"
    "                       auto (default: when one fusion has 4096+ elements), on, off\n"
    "  -o OUT               write the executable (versioned, checksummed file)",
    run_compile,
};

/* optitpu bench NAME [ARGS...]: benchmarks, dispatched through a table of subcommands.
 *
 * Adding `optitpu bench NAME` takes one line here:
 *   1. define `const cli_command cli_bench_NAME = {"NAME", "summary", "usage text", run};` in your
 *      own file cli/bench_NAME.c (run gets argv[0] == "NAME"; return CLI_OK / CLI_FAIL /
 *      CLI_USAGE; print rows with ot_bench_print so --json output follows the common format);
 *   2. add `X(NAME)` to CLI_BENCH_SUBCOMMANDS below (it declares the extern and the table entry).
 * `optitpu bench` lists the table; `optitpu bench NAME --help` prints the usage text.
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

#define CLI_BENCH_SUBCOMMANDS(X)                                                                   \
    X(limits) X(collectives) X(ckpt) X(compile) X(ir) X(optim) X(train) X(simulate)

#define CLI_BENCH_DECLARE(name) extern const cli_command cli_bench_##name;
CLI_BENCH_SUBCOMMANDS(CLI_BENCH_DECLARE)
#define CLI_BENCH_ENTRY(name) &cli_bench_##name,
static const cli_command *const bench_subcommands[] = {CLI_BENCH_SUBCOMMANDS(CLI_BENCH_ENTRY)};

static void list_subcommands(FILE *f) {
    fprintf(f, "usage: optitpu bench NAME [ARGS...]   (optitpu bench NAME --help for details)\n\n"
               "benchmarks:\n");
    for (size_t i = 0; i < sizeof bench_subcommands / sizeof bench_subcommands[0]; i++)
        fprintf(f, "  %-12s %s\n", bench_subcommands[i]->name, bench_subcommands[i]->summary);
    fprintf(f, "\nEvery benchmark prints a table, or with --json one JSON object per line:\n"
               "{\"bench\", \"case\", \"metric\", \"value\", \"baseline\", \"baseline_value\", "
               "\"ratio\"} (ratio > 1: optitpu did better).\n");
}

static int run_bench(int argc, char **argv) {
    /* alone, it answers "which benchmarks are there?": the list on stdout, success */
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        list_subcommands(stdout);
        return CLI_OK;
    }
    for (size_t i = 0; i < sizeof bench_subcommands / sizeof bench_subcommands[0]; i++) {
        const cli_command *c = bench_subcommands[i];
        if (strcmp(c->name, argv[1]) != 0) continue;
        for (int k = 2; k < argc; k++) {
            if (!strcmp(argv[k], "--help") || !strcmp(argv[k], "-h")) {
                printf("%s\n", c->usage);
                return CLI_OK;
            }
        }
        return c->run(argc - 1, argv + 1);
    }
    return cli_usage_error("bench", "unknown benchmark '%s' (run 'optitpu bench' for the list)",
                           argv[1]);
}

const cli_command cli_cmd_bench = {
    "bench",
    "run a benchmark: optitpu bench NAME (limits: this machine's memory, hash and disk limits)",
    "usage: optitpu bench NAME [ARGS...]\n"
    "\n"
    "Runs one benchmark. 'optitpu bench' alone lists them; 'optitpu bench NAME --help' explains\n"
    "one. Every benchmark prints a table, or with --json one JSON object per line.\n"
    "\n"
    "  optitpu bench limits [--json] [--threads N]   memcpy, STREAM, SHA-256, file write/read",
    run_bench,
};

/* ---- optitpu bench limits ------------------------------------------------------------------ */

static int parse_only(const char *s, unsigned *out) {
    unsigned what = 0;
    while (*s) {
        size_t n = strcspn(s, ",");
        if (n == 6 && !strncmp(s, "memcpy", n))
            what |= OT_BENCH_LIMIT_MEMCPY;
        else if (n == 6 && !strncmp(s, "stream", n))
            what |= OT_BENCH_LIMIT_STREAM;
        else if (n == 6 && !strncmp(s, "sha256", n))
            what |= OT_BENCH_LIMIT_SHA256;
        else if (n == 4 && !strncmp(s, "disk", n))
            what |= OT_BENCH_LIMIT_DISK;
        else
            return -1;
        s += n;
        if (*s == ',') s++;
    }
    if (!what) return -1;
    *out = what;
    return 0;
}

static int run_limits(int argc, char **argv) {
    const char *cmd = "bench limits";
    ot_bench_limits_options o = ot_bench_limits_options_default();
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n;
        if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--threads")) {
            if (!v || !cli_parse_i64(v, 1, 1024, &n))
                return cli_usage_error(cmd, "--threads needs a number from 1 to 1024");
            o.threads = (int)n;
            i++;
        } else if (!strcmp(a, "--reps")) {
            if (!v || !cli_parse_i64(v, 1, 1000, &n))
                return cli_usage_error(cmd, "--reps needs a number from 1 to 1000");
            o.reps = (int)n;
            i++;
        } else if (!strcmp(a, "--stream-bytes")) {
            if (!v || !cli_parse_size(v, &n) || n < 8192)
                return cli_usage_error(cmd,
                                       "--stream-bytes needs a size of at least 8K (e.g. 256M)");
            o.stream_bytes = (size_t)n;
            i++;
        } else if (!strcmp(a, "--file-bytes")) {
            if (!v || !cli_parse_size(v, &n) || n < 4 * 1024 * 1024)
                return cli_usage_error(cmd, "--file-bytes needs a size of at least 4M (e.g. 1G)");
            o.file_bytes = (size_t)n;
            i++;
        } else if (!strcmp(a, "--only")) {
            if (!v || parse_only(v, &o.what) != 0)
                return cli_usage_error(
                    cmd,
                    "--only needs a comma list of memcpy, stream, sha256, disk (e.g. stream,disk)");
            i++;
        } else if (!strcmp(a, "--tmp-dir")) {
            if (!v) return cli_usage_error(cmd, "--tmp-dir needs a directory");
            o.tmp_dir = v;
            i++;
        } else {
            return cli_usage_error(cmd, "unknown argument '%s'", a);
        }
    }
    ot_bench_limits l;
    if (ot_bench_limits_measure(&o, &l) != OT_OK) return cli_fail(cmd);
    ot_bench_print_header(json);
    ot_bench_limits_print(&l, json);
    return CLI_OK;
}

const cli_command cli_bench_limits = {
    "limits",
    "this machine's limits: memcpy, STREAM copy/scale/add/triad, SHA-256, file write+fsync/read",
    "usage: optitpu bench limits [--json] [--threads N] [--reps N] [--only LIST]\n"
    "                            [--stream-bytes SIZE] [--file-bytes SIZE] [--tmp-dir DIR]\n"
    "\n"
    "Measures this machine's own limits in GB/s (best of --reps timed runs after one warm-up):\n"
    "  memcpy        libc memcpy split over the threads, read+write bytes counted\n"
    "  STREAM        copy, scale, add, triad over three f64 arrays (default 4x the last-level\n"
    "                cache, at least 64 MiB each; first touched by the working thread; validated)\n"
    "  sha256        one thread, OpenSSL EVP over 64 MiB\n"
    "  disk          sequential write+fsync of a temporary file in $TMPDIR (default 256 MiB), "
    "then\n"
    "                a sequential read after dropping it from the page cache (fadvise DONTNEED);\n"
    "                the case name says whether the read came from the device or the cache\n"
    "\n"
    "  --json            one JSON object per figure (bench, case, metric, value, baseline, ...)\n"
    "  --threads N       memcpy/STREAM threads (default: OPTITPU_THREADS or the CPU count)\n"
    "  --reps N          timed repetitions (default 5)\n"
    "  --only LIST       comma list of memcpy, stream, sha256, disk (default: all)\n"
    "  --stream-bytes S  bytes per STREAM array, e.g. 512M\n"
    "  --file-bytes S    disk test file size, e.g. 1G\n"
    "  --tmp-dir DIR     where the disk test file goes (default $TMPDIR or /tmp)",
    run_limits,
};

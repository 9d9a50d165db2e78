/* optitpu cache: list, verify and clear the persistent compilation cache (compiler.h). */
#include "cli.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static const char usage[] =
    "usage: optitpu cache ls|verify|clear [--dir DIR]\n"
    "\n"
    "The persistent compilation cache holds serialized executables keyed by the module, the\n"
    "compile options, the library version and the executable format (docs/compiler.md);\n"
    "`optitpu train` uses it unless given --no-compile-cache.\n"
    "\n"
    "  ls       one line per entry, least recently used first: key, bytes, last use (UTC),\n"
    "           then the total and the size limit\n"
    "  verify   load every entry; remove (with a warning) those that are damaged or stale.\n"
    "           Exit status 1 when any was removed\n"
    "  clear    remove every entry\n"
    "  --dir DIR  the cache directory (default: $OPTITPU_CACHE_DIR/executables, else\n"
    "             $XDG_CACHE_HOME/optitpu/executables, else ~/.cache/optitpu/executables)\n"
    "\n"
    "Environment: OPTITPU_CACHE_MAX_BYTES (default 1G) bounds the total; the least recently\n"
    "used entries are removed after each store.\n";

static int run(int argc, char **argv) {
    if (argc < 2) return cli_usage_error("cache", "expected ls, verify or clear");
    const char *sub = argv[1];
    if (strcmp(sub, "ls") && strcmp(sub, "verify") && strcmp(sub, "clear"))
        return cli_usage_error("cache", "unknown subcommand '%s' (ls, verify, clear)", sub);
    ot_compile_cache_options o = {0};
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            o.dir = argv[++i];
        else
            return cli_usage_error("cache", "unknown or incomplete argument '%s'", argv[i]);
    }
    ot_compile_cache *c = NULL;
    if (ot_compile_cache_open(&o, &c) != OT_OK) return cli_fail("cache");
    int rc = CLI_OK;
    if (!strcmp(sub, "ls")) {
        ot_compile_cache_entry *e = NULL;
        int64_t n = 0, total = 0;
        if (ot_compile_cache_list(c, &e, &n) != OT_OK) {
            rc = cli_fail("cache");
        } else {
            for (int64_t k = 0; k < n; k++) {
                char when[32] = "?";
                time_t t = (time_t)(e[k].atime_ns / 1000000000);
                struct tm tm;
                if (gmtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
                printf("%s %12lld %s\n", e[k].key, (long long)e[k].bytes, when);
                total += e[k].bytes;
            }
            printf("%lld entr%s, %lld bytes of %lld, in %s\n", (long long)n, n == 1 ? "y" : "ies",
                   (long long)total, (long long)ot_compile_cache_max_bytes(c),
                   ot_compile_cache_dir(c));
        }
        ot_free(e);
    } else if (!strcmp(sub, "verify")) {
        int64_t good = 0, removed = 0;
        if (ot_compile_cache_verify(c, &good, &removed) != OT_OK) {
            rc = cli_fail("cache");
        } else {
            printf("%lld good, %lld removed, in %s\n", (long long)good, (long long)removed,
                   ot_compile_cache_dir(c));
            if (removed) rc = CLI_FAIL;
        }
    } else {
        int64_t removed = 0;
        if (ot_compile_cache_clear(c, &removed) != OT_OK)
            rc = cli_fail("cache");
        else
            printf("%lld removed from %s\n", (long long)removed, ot_compile_cache_dir(c));
    }
    ot_compile_cache_free(c);
    return rc;
}

const cli_command cli_cmd_cache = {
    "cache",
    "list, verify or clear the persistent compilation cache",
    usage,
    run,
};

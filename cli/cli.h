/* optitpu CLI: subcommand table and small helpers shared by the subcommands.
 * The CLI is a client of the public API only: it includes nothing but include/optitpu. */
#ifndef OPTITPU_CLI_H
#define OPTITPU_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "optitpu/optitpu.h"

/* Exit codes. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* `optitpu NAME --help` prints `usage` (main handles it). A command with subcommands of its own
 * (like bench) prints a subcommand's usage for `NAME SUB --help`, which is also what
 * `optitpu help NAME SUB` runs. */
typedef struct cli_command {
    const char *name;
    const char *summary;               /* one line for `optitpu help` */
    const char *usage;                 /* full text for `optitpu help NAME` */
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
} cli_command;

/* Prints "optitpu NAME: message" and a hint to stderr; returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Prints "optitpu NAME: <ot_last_error()>" to stderr; returns CLI_FAIL. */
int cli_fail(const char *cmd);

/* Strict number parsing: the whole string must be a number in range. */
bool cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);
bool cli_parse_double(const char *s, double *out);
/* Parses a size with optional K/M/G/Ki/Mi/Gi suffix (powers of 1024 for both). */
bool cli_parse_size(const char *s, int64_t *out);

/* This program's path (/proc/self/exe; "optitpu" when unknown), to run it again. */
const char *cli_self_exe(void);

/* Installed as the library's log callback by main: prints "optitpu: level: msg" to stderr. */
void cli_log(void *ud, ot_log_level level, const char *msg);

#endif /* OPTITPU_CLI_H */

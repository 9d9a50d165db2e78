/* optitpu — command-line entry point and subcommand dispatch. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

/* Subcommands live in cli/cmd_NAME.c, each defining `const cli_command cli_cmd_NAME`; add one
 * extern line and one table line per command. */
extern const cli_command cli_cmd_bench;
extern const cli_command cli_cmd_cache;
extern const cli_command cli_cmd_ckpt;
extern const cli_command cli_cmd_compile;
extern const cli_command cli_cmd_hlo;
extern const cli_command cli_cmd_launch;
extern const cli_command cli_cmd_ntp;
extern const cli_command cli_cmd_run;
extern const cli_command cli_cmd_simulate;
extern const cli_command cli_cmd_topo;
extern const cli_command cli_cmd_train;

static const cli_command *const commands[] = {
    &cli_cmd_bench,    &cli_cmd_cache,  &cli_cmd_ckpt,  &cli_cmd_compile,
    &cli_cmd_hlo,      &cli_cmd_launch, &cli_cmd_ntp,   &cli_cmd_run,
    &cli_cmd_simulate, &cli_cmd_topo,   &cli_cmd_train,
};

static const cli_command *find_command(const char *name) {
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (commands[i] && strcmp(commands[i]->name, name) == 0) return commands[i];
    return NULL;
}

static void print_overview(FILE *f) {
    fprintf(f, "optitpu %s — compile, run and profile ML optimizer steps on a pod of devices\n\n",
            ot_version());
    fprintf(f, "usage: optitpu [--version] [--verbose] COMMAND [ARGS...]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (commands[i]) fprintf(f, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
    fprintf(f, "  %-10s %s\n", "help", "show help for a command: optitpu help COMMAND");
    fprintf(f, "\nexit codes: 0 ok, 1 failure, 2 usage error\n");
}

static int cmd_help(int argc, char **argv) {
    if (argc < 2) {
        print_overview(stdout);
        return CLI_OK;
    }
    const cli_command *c = find_command(argv[1]);
    if (!c) {
        fprintf(stderr, "optitpu help: unknown command '%s'\n", argv[1]);
        print_overview(stderr);
        return CLI_USAGE;
    }
    if (argc > 2) {
        /* help COMMAND SUB...: the command explains its subcommand (`COMMAND SUB --help`) */
        static char help_flag[] = "--help";
        char *sub[8];
        int n = 0;
        for (int i = 1; i < argc && n < 6; i++) sub[n++] = argv[i];
        sub[n++] = help_flag;
        sub[n] = NULL;
        return c->run(n, sub);
    }
    printf("%s\n", c->usage);
    return CLI_OK;
}

int main(int argc, char **argv) {
    int i = 1;
    ot_log_level level = OT_LOG_WARN;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--version") || !strcmp(argv[i], "-V")) {
            printf("optitpu %s\n", ot_version());
            return CLI_OK;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            print_overview(stdout);
            return CLI_OK;
        } else if (!strcmp(argv[i], "--verbose") || !strcmp(argv[i], "-v")) {
            level = OT_LOG_DEBUG;
        } else {
            fprintf(stderr, "optitpu: unknown option '%s'\n(run 'optitpu help' for usage)\n",
                    argv[i]);
            return CLI_USAGE;
        }
    }
    if (i >= argc) {
        print_overview(stderr);
        return CLI_USAGE;
    }
    ot_set_log(cli_log, NULL, level);
    const char *name = argv[i];
    if (!strcmp(name, "help")) return cmd_help(argc - i, argv + i);
    const cli_command *c = find_command(name);
    if (!c) {
        fprintf(stderr, "optitpu: unknown command '%s'\n(run 'optitpu help' for the list)\n", name);
        return CLI_USAGE;
    }
    if (i + 1 < argc && (!strcmp(argv[i + 1], "--help") || !strcmp(argv[i + 1], "-h"))) {
        printf("%s\n", c->usage);
        return CLI_OK;
    }
    return c->run(argc - i, argv + i);
}

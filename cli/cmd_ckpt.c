/* optitpu ckpt: list, verify, inspect and export checkpoints and safetensors files. */
#include "cli.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

static const char usage[] =
    "usage: optitpu ckpt ls DIR [--json]\n"
    "       optitpu ckpt verify DIR|STEP_DIR\n"
    "       optitpu ckpt inspect PATH [--json]\n"
    "       optitpu ckpt export STEP_DIR OUT.safetensors [--role ROLE]\n"
    "\n"
    "Checkpoints are directories DIR/step_00000100/ holding safetensors files and a manifest.json\n"
    "with each file's size and SHA-256 (see docs/checkpoints.md).\n"
    "\n"
    "  ls       the checkpoints under DIR: step, state (committed; partial: an interrupted .tmp;\n"
    "           damaged: set aside by a resume as step_N.damaged), files, bytes and time from\n"
    "           the manifest (nothing is hashed)\n"
    "  verify   checks every file's size and SHA-256 against the manifest, and that each parses;\n"
    "           DIR verifies every committed step. Exit 1 naming each bad file.\n"
    "  inspect  tensors (name, dtype, shape, bytes) and metadata of a .safetensors file, or the\n"
    "           manifest and tensors of a step directory (verified first); control characters\n"
    "           in names and values are printed escaped (\\n, \\xNN, \\u00NN; \\\\ for \\)\n"
    "  export   writes the tensors of a verified step as one safetensors file: all roles as\n"
    "           role/name (role.SHARD/name when sharded), or one --role\n";

static bool is_step_dir(const char *p) {
    char m[4096];
    struct stat st;
    snprintf(m, sizeof m, "%s/manifest.json", p);
    return stat(m, &st) == 0;
}

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Text from a file, made safe for a terminal: C0 controls, DEL and C1 controls (U+0080-U+009F)
 * escaped, a backslash doubled; the rest (valid UTF-8, checked by the reader) as is. The result
 * is cut at n - 1 bytes. */
static const char *esc(const char *s, char *buf, size_t n) {
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && k + 8 < n; p++) {
        if (*p == '\\') {
            buf[k++] = '\\';
            buf[k++] = '\\';
        } else if (*p == '\n' || *p == '\t' || *p == '\r') {
            buf[k++] = '\\';
            buf[k++] = *p == '\n' ? 'n' : *p == '\t' ? 't' : 'r';
        } else if (*p < 0x20 || *p == 0x7f) {
            k += (size_t)snprintf(buf + k, n - k, "\\x%02x", *p);
        } else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
            k += (size_t)snprintf(buf + k, n - k, "\\u%04x", p[1]);
            p++;
        } else {
            buf[k++] = (char)*p;
        }
    }
    buf[k] = '\0';
    return buf;
}

static void shape_str(const ot_st_info *t, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->rank && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? "," : "", (long long)t->dims[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static json_t *st_json(const ot_safetensors *st) {
    json_t *o = json_object(), *ts = json_array(), *md = json_object();
    for (size_t i = 0; i < ot_safetensors_count(st); i++) {
        const ot_st_info *t = ot_safetensors_at(st, i);
        json_t *j = json_object(), *sh = json_array();
        json_object_set_new(j, "name", json_string(t->name));
        json_object_set_new(j, "dtype", json_string(ot_st_dtype_name(t->dtype)));
        for (int d = 0; d < t->rank; d++) json_array_append_new(sh, json_integer(t->dims[d]));
        json_object_set_new(j, "shape", sh);
        json_object_set_new(j, "begin", json_integer((json_int_t)t->begin));
        json_object_set_new(j, "end", json_integer((json_int_t)t->end));
        json_array_append_new(ts, j);
    }
    for (size_t i = 0; i < ot_safetensors_metadata_count(st); i++) {
        ot_st_kv kv = ot_safetensors_metadata_at(st, i);
        json_object_set_new(md, kv.key, json_string(kv.value));
    }
    json_object_set_new(o, "header_bytes", json_integer((json_int_t)ot_safetensors_header_len(st)));
    json_object_set_new(o, "data_bytes", json_integer((json_int_t)ot_safetensors_data_len(st)));
    json_object_set_new(o, "metadata", md);
    json_object_set_new(o, "tensors", ts);
    return o;
}

static void st_print(const ot_safetensors *st, const char *indent) {
    printf("%sheader %llu bytes, data %llu bytes, %zu tensors\n", indent,
           (unsigned long long)ot_safetensors_header_len(st),
           (unsigned long long)ot_safetensors_data_len(st), ot_safetensors_count(st));
    for (size_t i = 0; i < ot_safetensors_metadata_count(st); i++) {
        ot_st_kv kv = ot_safetensors_metadata_at(st, i);
        char k[1024], v[4096];
        printf("%smetadata %s = %s\n", indent, esc(kv.key, k, sizeof k),
               esc(kv.value, v, sizeof v));
    }
    for (size_t i = 0; i < ot_safetensors_count(st); i++) {
        const ot_st_info *t = ot_safetensors_at(st, i);
        char sh[256];
        shape_str(t, sh, sizeof sh);
        char name[4096];
        printf("%s  %-32s %-8s %-20s %12llu bytes\n", indent, esc(t->name, name, sizeof name),
               ot_st_dtype_name(t->dtype), sh, (unsigned long long)(t->end - t->begin));
    }
}

static int cmd_ls(int argc, char **argv) {
    const char *dir = NULL;
    bool json = false;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!dir)
            dir = argv[i];
        else
            return cli_usage_error("ckpt", "ls: unexpected argument '%s'", argv[i]);
    }
    if (!dir) return cli_usage_error("ckpt", "ls needs a DIR");
    ot_ckpt_entry *e;
    size_t n;
    if (ot_ckpt_list(dir, &e, &n) != OT_OK) return cli_fail("ckpt");
    json_t *arr = json ? json_array() : NULL;
    if (!json)
        printf("%-10s %-10s %6s %14s  %-20s %s\n", "step", "state", "files", "bytes", "time",
               "path");
    for (size_t i = 0; i < n; i++) {
        char mp[4096];
        snprintf(mp, sizeof mp, "%s/manifest.json", e[i].path);
        FILE *f = fopen(mp, "rb");
        ot_ckpt_manifest *m = NULL;
        const char *state = e[i].committed ? "committed" : e[i].damaged ? "damaged" : "partial";
        if (f) {
            static char buf[1 << 22];
            size_t len = fread(buf, 1, sizeof buf, f);
            fclose(f);
            if (ot_ckpt_manifest_parse(buf, len, true, &m) != OT_OK && e[i].committed)
                state = "bad-manifest";
        } else if (e[i].committed) {
            state = "no-manifest";
        }
        uint64_t bytes = 0;
        char tbuf[32] = "-";
        if (m) {
            for (size_t k = 0; k < m->nfiles; k++) bytes += m->files[k].size;
            time_t secs = (time_t)(m->time_unix_ns / 1000000000);
            struct tm tmv;
            gmtime_r(&secs, &tmv);
            strftime(tbuf, sizeof tbuf, "%Y-%m-%dT%H:%M:%SZ", &tmv);
        }
        if (json) {
            json_t *j = json_object();
            json_object_set_new(j, "step", json_integer(e[i].step));
            json_object_set_new(j, "state", json_string(state));
            json_object_set_new(j, "path", json_string(e[i].path));
            if (m) {
                json_object_set_new(j, "files", json_integer((json_int_t)m->nfiles));
                json_object_set_new(j, "bytes", json_integer((json_int_t)bytes));
                json_object_set_new(j, "time", json_string(tbuf));
            }
            json_array_append_new(arr, j);
        } else {
            printf("%-10lld %-10s %6zu %14llu  %-20s %s\n", (long long)e[i].step, state,
                   m ? m->nfiles : 0, (unsigned long long)bytes, tbuf, e[i].path);
        }
        ot_ckpt_manifest_free(m);
    }
    if (json) {
        char *s = json_dumps(arr, JSON_COMPACT);
        if (s) puts(s);
        free(s);
        json_decref(arr);
    }
    ot_ckpt_entries_free(e, n);
    return CLI_OK;
}

static int verify_one(const char *dir) {
    ot_ckpt_verify_report rep;
    ot_status s = ot_ckpt_verify_dir(dir, &rep);
    if (s == OT_OK) {
        printf("ok   %s: step %lld, %zu files, %llu bytes verified\n", dir, (long long)rep.step,
               rep.nfiles, (unsigned long long)rep.bytes);
    } else {
        for (size_t i = 0; i < rep.nbad; i++)
            printf("BAD  %s: %s\n", rep.bad[i].path, rep.bad[i].reason);
        if (rep.nbad == 0) printf("BAD  %s: %s\n", dir, ot_last_error());
    }
    ot_ckpt_verify_report_clear(&rep);
    return s == OT_OK ? CLI_OK : CLI_FAIL;
}

static int cmd_verify(int argc, char **argv) {
    if (argc != 3) return cli_usage_error("ckpt", "verify needs one DIR or STEP_DIR");
    const char *p = argv[2];
    if (is_step_dir(p)) return verify_one(p);
    if (!is_dir(p)) {
        fprintf(stderr, "optitpu ckpt: %s is not a directory\n", p);
        return CLI_FAIL;
    }
    ot_ckpt_entry *e;
    size_t n;
    if (ot_ckpt_list(p, &e, &n) != OT_OK) return cli_fail("ckpt");
    int rc = CLI_OK;
    size_t checked = 0;
    for (size_t i = 0; i < n; i++) {
        if (e[i].damaged) {
            printf("skip %s: damaged, set aside by a resume (kept for inspection)\n", e[i].path);
            continue;
        }
        if (!e[i].committed) {
            printf("skip %s: interrupted save (removed when a manager opens this root)\n",
                   e[i].path);
            continue;
        }
        checked++;
        if (verify_one(e[i].path) != CLI_OK) rc = CLI_FAIL;
    }
    ot_ckpt_entries_free(e, n);
    if (checked == 0) {
        fprintf(stderr, "optitpu ckpt: no committed checkpoint under %s\n", p);
        return CLI_FAIL;
    }
    return rc;
}

static int cmd_inspect(int argc, char **argv) {
    const char *p = NULL;
    bool json = false;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!p)
            p = argv[i];
        else
            return cli_usage_error("ckpt", "inspect: unexpected argument '%s'", argv[i]);
    }
    if (!p) return cli_usage_error("ckpt", "inspect needs a PATH");
    if (!is_step_dir(p)) {
        ot_safetensors *st;
        if (ot_safetensors_open(p, &st) != OT_OK) return cli_fail("ckpt");
        if (json) {
            json_t *o = st_json(st);
            json_object_set_new(o, "path", json_string(p));
            char *s = json_dumps(o, JSON_COMPACT);
            if (s) puts(s);
            free(s);
            json_decref(o);
        } else {
            printf("%s\n", p);
            st_print(st, "  ");
        }
        ot_safetensors_free(st);
        return CLI_OK;
    }
    ot_ckpt *ck;
    if (ot_ckpt_load(p, &ck) != OT_OK) return cli_fail("ckpt");
    const ot_ckpt_manifest *m = ot_ckpt_manifest_of(ck);
    if (json) {
        json_t *o = json_object(), *files = json_array(), *mt = json_object();
        json_object_set_new(o, "path", json_string(p));
        json_object_set_new(o, "step", json_integer(m->step));
        json_object_set_new(o, "format_version", json_integer(m->format_version));
        json_object_set_new(o, "time_unix_ns", json_integer(m->time_unix_ns));
        json_t *pod = json_object();
        json_object_set_new(pod, "num_devices", json_integer(m->pod.num_devices));
        json_object_set_new(pod, "num_processes", json_integer(m->pod.num_processes));
        json_object_set_new(pod, "num_hosts", json_integer(m->pod.num_hosts));
        json_object_set_new(pod, "membership_epoch", json_integer(m->pod.membership_epoch));
        json_object_set_new(pod, "topology", json_string(m->pod.topology));
        json_object_set_new(o, "pod", pod);
        json_object_set_new(o, "optimizer", json_loads(m->optimizer_json, 0, NULL));
        json_object_set_new(o, "rng_algorithm", json_string(m->rng_algorithm));
        json_object_set_new(o, "rng_words", json_integer((json_int_t)m->rng_words));
        json_object_set_new(o, "data_epoch", json_integer(m->data_epoch));
        json_object_set_new(o, "data_index", json_integer(m->data_index));
        for (size_t i = 0; i < m->nmetrics; i++)
            json_object_set_new(mt, m->metrics[i].name, json_real(m->metrics[i].value));
        json_object_set_new(o, "metrics", mt);
        for (size_t i = 0; i < m->nfiles; i++) {
            json_t *f = st_json(ot_ckpt_file(ck, i));
            char hex[65];
            ot_hex(m->files[i].sha256, 32, hex);
            json_object_set_new(f, "path", json_string(m->files[i].path));
            json_object_set_new(f, "role", json_string(m->files[i].role));
            json_object_set_new(f, "shard", json_integer(m->files[i].shard));
            json_object_set_new(f, "shards", json_integer(m->files[i].shards));
            json_object_set_new(f, "size", json_integer((json_int_t)m->files[i].size));
            json_object_set_new(f, "sha256", json_string(hex));
            json_array_append_new(files, f);
        }
        json_object_set_new(o, "files", files);
        char *s = json_dumps(o, JSON_COMPACT);
        if (s) puts(s);
        free(s);
        json_decref(o);
    } else {
        char tb[1024], ob[8192], rb[1024];
        printf("%s (verified)\n", p);
        printf("  step %lld, format %d, pod %d devices / %d processes / %d hosts, membership "
               "epoch %lld (%s)\n",
               (long long)m->step, m->format_version, m->pod.num_devices, m->pod.num_processes,
               m->pod.num_hosts, (long long)m->pod.membership_epoch,
               esc(m->pod.topology, tb, sizeof tb));
        printf("  optimizer %s\n", esc(m->optimizer_json, ob, sizeof ob));
        printf("  rng %s (%zu words), data position epoch %lld index %lld\n",
               esc(m->rng_algorithm, rb, sizeof rb), m->rng_words, (long long)m->data_epoch,
               (long long)m->data_index);
        for (size_t i = 0; i < m->nmetrics; i++)
            printf("  metric %s = %.17g\n", esc(m->metrics[i].name, tb, sizeof tb),
                   m->metrics[i].value);
        for (size_t i = 0; i < m->nfiles; i++) {
            char hex[65];
            ot_hex(m->files[i].sha256, 32, hex);
            printf("  file %s (role %s, shard %d/%d, %llu bytes, sha256 %s)\n", m->files[i].path,
                   m->files[i].role, m->files[i].shard, m->files[i].shards,
                   (unsigned long long)m->files[i].size, hex);
            st_print(ot_ckpt_file(ck, i), "    ");
        }
    }
    ot_ckpt_free(ck);
    return CLI_OK;
}

static int cmd_export(int argc, char **argv) {
    const char *role = NULL, *in = NULL, *out = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--role") && i + 1 < argc)
            role = argv[++i];
        else if (!in)
            in = argv[i];
        else if (!out)
            out = argv[i];
        else
            return cli_usage_error("ckpt", "export: unexpected argument '%s'", argv[i]);
    }
    if (!in || !out) return cli_usage_error("ckpt", "export needs STEP_DIR and OUT.safetensors");
    ot_ckpt *ck;
    if (ot_ckpt_load(in, &ck) != OT_OK) return cli_fail("ckpt");
    ot_status s = ot_ckpt_export(ck, role, out);
    ot_ckpt_free(ck);
    if (s != OT_OK) return cli_fail("ckpt");
    printf("wrote %s\n", out);
    return CLI_OK;
}

static int run(int argc, char **argv) {
    if (argc < 2)
        return cli_usage_error("ckpt", "missing subcommand (ls, verify, inspect, export)");
    const char *sub = argv[1];
    if (!strcmp(sub, "ls")) return cmd_ls(argc, argv);
    if (!strcmp(sub, "verify")) return cmd_verify(argc, argv);
    if (!strcmp(sub, "inspect")) return cmd_inspect(argc, argv);
    if (!strcmp(sub, "export")) return cmd_export(argc, argv);
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h")) {
        fputs(usage, stdout);
        return CLI_OK;
    }
    return cli_usage_error("ckpt", "unknown subcommand '%s'", sub);
}

const cli_command cli_cmd_ckpt = {
    "ckpt",
    "list, verify, inspect and export checkpoints and safetensors files",
    usage,
    run,
};

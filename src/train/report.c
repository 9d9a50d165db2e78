/* Training report output: CSV, an SVG chart of the curves, JSON. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "optitpu/train.h"

/* The file is written as PATH.tmp and renamed over PATH when complete. */
static ot_status tmp_path(const char *path, char *buf, size_t n) {
    if (!path) return ot_error(OT_ERR_INVALID_ARGUMENT, "train report: NULL path");
    if ((size_t)snprintf(buf, n, "%s.tmp", path) >= n)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "train report: path too long: %s", path);
    return OT_OK;
}

static ot_status open_out(const char *path, FILE **f) {
    char tmp[4200];
    OT_CHECK(tmp_path(path, tmp, sizeof tmp));
    *f = fopen(tmp, "w");
    if (!*f) return ot_error(OT_ERR_IO, "train report: cannot create %s: %s", tmp, strerror(errno));
    return OT_OK;
}

static ot_status close_out(FILE *f, const char *path) {
    char tmp[4200];
    ot_status s = tmp_path(path, tmp, sizeof tmp);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) s = ot_error(OT_ERR_IO, "train report: cannot write %s", tmp);
    if (s == OT_OK && rename(tmp, path) != 0)
        s = ot_error(OT_ERR_IO, "train report: rename %s -> %s: %s", tmp, path, strerror(errno));
    if (s != OT_OK) remove(tmp);
    return s;
}

#define CSV_HEADER "step,loss,train_accuracy,test_accuracy,lr"

/* One number of a row, up to the next comma (or the end when last); empty allowed when
 * `empty` is given (it is stored then). */
static bool csv_num(char **p, bool last, double *v, const double *empty) {
    char *q = *p;
    char *end = strchr(q, ',');
    if (last != (end == NULL)) return false;
    if (!end) end = q + strlen(q);
    if (end == q) {
        if (!empty) return false;
        *v = *empty;
    } else {
        char *e;
        errno = 0;
        *v = strtod(q, &e);
        if (e != end || errno == ERANGE) return false;
    }
    *p = *end ? end + 1 : end;
    return true;
}

ot_status ot_train_read_csv(const char *path, ot_train_point **points, int64_t *n) {
    if (!path || !points || !n)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "train csv: NULL argument");
    *points = NULL;
    *n = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return ot_error(OT_ERR_NOT_FOUND, "%s: no such file", path);
        return ot_error(OT_ERR_IO, "%s: %s", path, strerror(errno));
    }
    ot_train_point *v = NULL;
    int64_t cnt = 0, cap = 0, line = 0;
    ot_status s = OT_OK;
    char buf[512];
    while (s == OT_OK && fgets(buf, sizeof buf, f)) {
        line++;
        size_t len = strlen(buf);
        if (len && buf[len - 1] == '\n') {
            buf[--len] = '\0';
        } else if (feof(f)) {
            /* every row is written with its newline: a last line without one is a row whose
             * append was cut off by a kill, and its numbers may be cut short too */
            line--;
            break;
        } else {
            s = ot_error(OT_ERR_CORRUPT_DATA, "%s:%lld: line too long", path, (long long)line);
            break;
        }
        if (line == 1) {
            if (strcmp(buf, CSV_HEADER) != 0)
                s = ot_error(OT_ERR_CORRUPT_DATA, "%s:1: not a metrics file (header is not %s)",
                             path, CSV_HEADER);
            continue;
        }
        ot_train_point p;
        double step, none = -1;
        char *q = buf;
        if (!csv_num(&q, false, &step, NULL) || !csv_num(&q, false, &p.loss, NULL) ||
            !csv_num(&q, false, &p.train_accuracy, NULL) ||
            !csv_num(&q, false, &p.test_accuracy, &none) || !csv_num(&q, true, &p.lr, NULL) ||
            !(step >= 1 && step <= 9e15) || step != floor(step)) {
            s = ot_error(OT_ERR_CORRUPT_DATA, "%s:%lld: malformed row", path, (long long)line);
            break;
        }
        p.step = (int64_t)step;
        if (cnt > 0 && p.step <= v[cnt - 1].step) {
            s = ot_error(OT_ERR_CORRUPT_DATA, "%s:%lld: step %lld does not follow step %lld", path,
                         (long long)line, (long long)p.step, (long long)v[cnt - 1].step);
            break;
        }
        if (cnt == cap) {
            int64_t nc = cap ? cap * 2 : 256;
            ot_train_point *nv = ot_realloc(v, (size_t)nc * sizeof *nv);
            if (!nv) {
                s = ot_error(OT_ERR_OUT_OF_MEMORY, "train csv: out of memory");
                break;
            }
            v = nv, cap = nc;
        }
        v[cnt++] = p;
    }
    if (s == OT_OK && ferror(f)) s = ot_error(OT_ERR_IO, "%s: read error", path);
    if (s == OT_OK && line == 0) s = ot_error(OT_ERR_CORRUPT_DATA, "%s: empty (no header)", path);
    fclose(f);
    if (s != OT_OK) {
        ot_free(v);
        return s;
    }
    *points = v;
    *n = cnt;
    return OT_OK;
}

/* One row with its newline; the length written to buf (always < n for n >= 128). */
static int csv_row(char *buf, size_t n, const ot_train_point *p) {
    int k = snprintf(buf, n, "%lld,%.9g,%.6g,", (long long)p->step, p->loss, p->train_accuracy);
    if (p->test_accuracy >= 0) k += snprintf(buf + k, n - (size_t)k, "%.6g", p->test_accuracy);
    k += snprintf(buf + k, n - (size_t)k, ",%.9g\n", p->lr);
    return k;
}

ot_status ot_train_write_csv(const ot_train_report *r, const char *path) {
    if (!r) return ot_error(OT_ERR_INVALID_ARGUMENT, "train report: NULL report");
    FILE *f;
    ot_status s = open_out(path, &f);
    if (s != OT_OK) return s;
    fprintf(f, CSV_HEADER "\n");
    char row[160];
    for (int64_t i = 0; i < r->npoints; i++) {
        int k = csv_row(row, sizeof row, &r->points[i]);
        fwrite(row, 1, (size_t)k, f);
    }
    return close_out(f, path);
}

ot_status ot_train_append_csv(const char *path, const ot_train_point *p) {
    if (!path || !p) return ot_error(OT_ERR_INVALID_ARGUMENT, "train csv: NULL argument");
    char row[160];
    int k = csv_row(row, sizeof row, p);
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) return ot_error(OT_ERR_IO, "train csv: cannot open %s: %s", path, strerror(errno));
    /* one write: a kill leaves the row whole or, at worst, cut short without its newline */
    ssize_t w;
    do w = write(fd, row, (size_t)k);
    while (w < 0 && errno == EINTR);
    int err = w < 0 ? errno : 0;
    if (close(fd) != 0 && !err) err = errno;
    if (w >= 0 && w != k)
        return ot_error(OT_ERR_IO, "train csv: short write to %s (%zd of %d bytes)", path, w, k);
    if (err) return ot_error(OT_ERR_IO, "train csv: cannot write %s: %s", path, strerror(err));
    return OT_OK;
}

/* One polyline of values v(i) (skipping negatives when skip_neg) scaled into the plot box. */
static void polyline(FILE *f, const ot_train_report *r, int which, double lo, double hi,
                     const char *color, double x0, double y0, double w, double h, int64_t smax) {
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", color);
    for (int64_t i = 0; i < r->npoints; i++) {
        const ot_train_point *p = &r->points[i];
        double v = which == 0 ? p->loss : which == 1 ? p->train_accuracy : p->test_accuracy;
        if (which == 2 && v < 0) continue;
        if (!isfinite(v)) continue;
        double fx = smax > 0 ? (double)p->step / (double)smax : 0;
        double fy = hi > lo ? (v - lo) / (hi - lo) : 0;
        if (fy < 0) fy = 0;
        if (fy > 1) fy = 1;
        fprintf(f, "%.1f,%.1f ", x0 + fx * w, y0 + (1 - fy) * h);
    }
    fprintf(f, "\"/>\n");
}

ot_status ot_train_write_svg(const ot_train_report *r, const char *path) {
    if (!r) return ot_error(OT_ERR_INVALID_ARGUMENT, "train report: NULL report");
    FILE *f;
    ot_status s = open_out(path, &f);
    if (s != OT_OK) return s;
    const double W = 800, H = 360, pad = 50, pw = (W - 3 * pad) / 2, ph = H - 2 * pad;
    double lmax = 0;
    int64_t smax = 1;
    for (int64_t i = 0; i < r->npoints; i++) {
        if (isfinite(r->points[i].loss) && r->points[i].loss > lmax) lmax = r->points[i].loss;
        if (r->points[i].step > smax) smax = r->points[i].step;
    }
    if (lmax <= 0) lmax = 1;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H);
    const char *titles[2] = {"training loss", "accuracy (train: blue, test: red)"};
    for (int pnl = 0; pnl < 2; pnl++) {
        double x0 = pad + pnl * (pw + pad), y0 = pad;
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                "stroke=\"#888\"/>\n<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                x0, y0, pw, ph, x0, y0 - 10, titles[pnl]);
        double hi = pnl == 0 ? lmax : 1.0;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", x0 - 4, y0 + 4,
                hi);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">0</text>\n", x0 - 4,
                y0 + ph + 4);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">step %lld</text>\n", x0 + pw,
                y0 + ph + 16, (long long)smax);
        if (pnl == 0) {
            polyline(f, r, 0, 0, lmax, "#1f77b4", x0, y0, pw, ph, smax);
        } else {
            polyline(f, r, 1, 0, 1, "#1f77b4", x0, y0, pw, ph, smax);
            polyline(f, r, 2, 0, 1, "#d62728", x0, y0, pw, ph, smax);
        }
    }
    fprintf(f, "</svg>\n");
    return close_out(f, path);
}

static int set_num(json_t *o, const char *k, double v) {
    return json_object_set_new(o, k, isfinite(v) ? json_real(v) : json_null());
}

ot_status ot_train_report_json(const ot_train_report *r, char **out) {
    if (!r || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "train report: NULL argument");
    *out = NULL;
    json_t *o = json_object();
    if (!o) return ot_error(OT_ERR_OUT_OF_MEMORY, "train report json");
    char hex[65];
    ot_hex(r->params_sha256, 32, hex);
    int bad = 0;
    bad |= json_object_set_new(o, "start_step", json_integer(r->start_step));
    bad |= json_object_set_new(o, "final_step", json_integer(r->final_step));
    bad |= json_object_set_new(o, "steps_run", json_integer(r->steps_run));
    bad |= set_num(o, "final_loss", r->final_loss);
    bad |= set_num(o, "test_accuracy", r->test_accuracy);
    bad |= set_num(o, "test_loss", r->test_loss);
    bad |= set_num(o, "wall_s", r->wall_s);
    bad |= set_num(o, "samples_per_s", r->samples_per_s);
    bad |= set_num(o, "steady_wall_s", r->steady_wall_s);
    bad |= json_object_set_new(o, "steady_steps", json_integer(r->steady_steps));
    bad |= set_num(o, "compute_cpu_s", r->compute_s);
    bad |= set_num(o, "comm_cpu_s", r->comm_s);
    bad |= set_num(o, "ckpt_cpu_s", r->ckpt_s);
    bad |= set_num(o, "other_cpu_s", r->other_s);
    bad |= set_num(o, "outside_compute_share", r->outside_compute_share);
    json_t *parts = json_array(); /* the step loop's timeline */
    for (int k = 0; parts && k < r->nparts; k++) {
        json_t *p = json_object();
        bad |= p ? 0 : -1;
        if (!p) break;
        bad |= json_object_set_new(p, "name", json_string(r->parts[k].name));
        bad |= set_num(p, "wall_s", r->parts[k].wall_s);
        bad |= set_num(p, "cpu_s", r->parts[k].cpu_s);
        bad |= set_num(p, "count", r->parts[k].count);
        bad |= json_array_append_new(parts, p);
    }
    bad |= parts ? json_object_set_new(o, "parts", parts) : -1;
    bad |= json_object_set_new(o, "devices_start", json_integer(r->devices_start));
    bad |= json_object_set_new(o, "devices_end", json_integer(r->devices_end));
    bad |= json_object_set_new(o, "failures", json_integer(r->failures));
    json_t *sd = json_array();
    for (int i = 0; sd && i < r->nslice_devices; i++)
        bad |= json_array_append_new(sd, json_integer(r->slice_devices[i]));
    bad |= sd ? json_object_set_new(o, "slice_devices", sd) : -1;
    bad |= json_object_set_new(o, "migrations", json_integer(r->migrations));
    bad |= set_num(o, "migrate_s", r->migrate_s);
    bad |= set_num(o, "detect_s", r->detect_s);
    bad |= set_num(o, "recover_s", r->recover_s);
    bad |= json_object_set_new(o, "checkpoints", json_integer(r->checkpoints));
    bad |= json_object_set_new(o, "allreduce_bytes_per_step",
                               json_integer(r->allreduce_bytes_per_step));
    bad |= json_object_set_new(o, "allreduce_bytes", json_integer(r->allreduce_bytes));
    bad |= json_object_set_new(o, "optim_state_bytes_per_device",
                               json_integer(r->optim_state_bytes_per_device));
    bad |= json_object_set_new(o, "shard_optimizer", json_boolean(r->shard_optimizer));
    bad |= json_object_set_new(o, "overlap", json_boolean(r->overlapped));
    bad |= set_num(o, "compile_s", r->compile_s);
    bad |= json_object_set_new(o, "compile_cache_hits", json_integer(r->compile_cache_hits));
    bad |= json_object_set_new(o, "compile_cache_misses", json_integer(r->compile_cache_misses));
    bad |= json_object_set_new(o, "param_elements", json_integer(r->param_elements));
    bad |= json_object_set_new(o, "params_sha256", json_string(hex));
    bad |= json_object_set_new(o, "stopped", json_boolean(r->stopped));
    char *text = bad ? NULL : json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!text) return ot_error(OT_ERR_OUT_OF_MEMORY, "train report json");
    size_t n = strlen(text);
    *out = ot_malloc(n + 1);
    if (*out) memcpy(*out, text, n + 1);
    free(text);
    return *out ? OT_OK : ot_error(OT_ERR_OUT_OF_MEMORY, "train report json");
}

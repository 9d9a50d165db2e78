/* RFC 5905 mitigation: clock filter (section 10), selection, cluster and combine (section 11),
 * poll adaptation (A.5.5.6). Pure functions over plain structs; time is passed in. */
#include "optitpu/clock.h"

#include <math.h>
#include <string.h>

#define PGATE 4.0 /* poll-adjust gate */
#define LIMIT 30  /* poll-adjust threshold */

/* ---- clock filter ---- */

void ot_ntp_filter_init(ot_ntp_filter *f) {
    memset(f, 0, sizeof *f);
    for (int i = 0; i < OT_NTP_NSTAGE; i++) {
        f->stage[i].delay = OT_NTP_MAXDISP;
        f->stage[i].disp = OT_NTP_MAXDISP;
    }
    f->disp = OT_NTP_MAXDISP;
    f->t = -INFINITY;
}

bool ot_ntp_filter_add(ot_ntp_filter *f, double offset, double delay, double disp, double now,
                       int sys_precision) {
    double dt = f->n > 0 ? fmax(now - f->t_last, 0) : 0;
    /* shift the register one stage older, ageing the dispersion of the valid stages */
    for (int i = OT_NTP_NSTAGE - 1; i > 0; i--) {
        f->stage[i] = f->stage[i - 1];
        if (i < f->n + 1)
            f->stage[i].disp = fmin(f->stage[i].disp + OT_NTP_PHI * dt, OT_NTP_MAXDISP);
    }
    f->stage[0] = (ot_ntp_filter_stage){offset, delay, fmin(disp, OT_NTP_MAXDISP), now};
    if (f->n < OT_NTP_NSTAGE) f->n++;
    f->t_last = now;

    /* sort by delay (stable: among equal delays the newer stage first); empty stages carry
     * delay MAXDISP and sort last */
    ot_ntp_filter_stage s[OT_NTP_NSTAGE];
    memcpy(s, f->stage, sizeof s);
    for (int i = 1; i < OT_NTP_NSTAGE; i++) {
        ot_ntp_filter_stage v = s[i];
        int j = i - 1;
        while (j >= 0 && s[j].delay > v.delay) {
            s[j + 1] = s[j];
            j--;
        }
        s[j + 1] = v;
    }
    double d = 0;
    for (int i = OT_NTP_NSTAGE - 1; i >= 0; i--) d = 0.5 * (d + s[i].disp); /* Σ ε_i / 2^(i+1) */
    f->disp = d;
    double jj = 0;
    for (int i = 1; i < f->n; i++) jj += (s[i].offset - s[0].offset) * (s[i].offset - s[0].offset);
    f->jitter = fmax(f->n > 1 ? sqrt(jj / (f->n - 1)) : 0, ot_ntp_log2d(sys_precision));
    if (f->valid && s[0].t <= f->t) return false; /* prime directive */
    f->offset = s[0].offset;
    f->delay = s[0].delay;
    f->t = s[0].t;
    f->valid = true;
    return true;
}

double ot_ntp_filter_disp(const ot_ntp_filter *f, double now) {
    if (f->n == 0) return OT_NTP_MAXDISP;
    return fmin(f->disp + OT_NTP_PHI * fmax(now - f->t_last, 0), OT_NTP_MAXDISP);
}

/* ---- selection, cluster, combine ---- */

static const char *const class_names[] = {"unfit", "falseticker", "outlier", "survivor",
                                          "sys_peer"};

const char *ot_ntp_peer_class_name(ot_ntp_peer_class c) {
    return (unsigned)c <= OT_NTP_SYS_PEER ? class_names[c] : "unknown";
}

double ot_ntp_root_distance(const ot_ntp_candidate *c, double now) {
    return fmax(OT_NTP_MINDISP, c->root_delay + c->delay) / 2 + c->root_disp + c->disp + c->jitter +
           OT_NTP_PHI * fmax(now - c->t, 0);
}

/* The one distance check: the selection (sync) and ot_ntp_query both ask it. */
bool ot_ntp_fit(const ot_ntp_candidate *c, double now, const char **why) {
    const char *w = NULL;
    if (!c->reachable) {
        w = "unreachable";
    } else if (c->leap == OT_NTP_LEAP_NOSYNC) {
        w = "unsynchronized (leap indicator 3)";
    } else if (c->stratum < 1 || c->stratum >= OT_NTP_MAXSTRAT) {
        w = "stratum outside 1..15";
    } else if (!isfinite(c->offset) || !isfinite(c->t) || !(c->delay >= 0) || !(c->disp >= 0) ||
               !(c->jitter >= 0) || !(c->root_delay >= 0) || !(c->root_disp >= 0)) {
        /* delays, dispersions and jitter are non-negative by construction (RFC 5905); a
         * candidate whose variables are not (or are not finite) cannot be weighed */
        w = "variables negative or not finite";
    } else {
        double lambda = ot_ntp_root_distance(c, now);
        if (!(isfinite(lambda) && lambda <= OT_NTP_MAXDIST))
            w = "root distance above MAXDIST (1.5 s)";
    }
    if (why) *why = w;
    return w == NULL;
}

static bool fit(const ot_ntp_candidate *c, double now) {
    return ot_ntp_fit(c, now, NULL);
}

typedef struct endpoint {
    double val;
    int type; /* -1 lower, 0 midpoint, +1 upper */
} endpoint;

ot_status ot_ntp_select(const ot_ntp_candidate *c, int n, double now, ot_ntp_peer_class *cls,
                        double *low_out, double *high_out) {
    if (n < 0 || n > OT_NTP_MAX_PEERS)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ntp select: %d candidates (1..%d)", n,
                        OT_NTP_MAX_PEERS);
    endpoint e[3 * OT_NTP_MAX_PEERS];
    int m = 0, nfit = 0;
    for (int i = 0; i < n; i++) {
        if (!fit(&c[i], now)) {
            cls[i] = OT_NTP_UNFIT;
            continue;
        }
        cls[i] = OT_NTP_SURVIVOR;
        nfit++;
        double lambda = ot_ntp_root_distance(&c[i], now);
        e[m++] = (endpoint){c[i].offset - lambda, -1};
        e[m++] = (endpoint){c[i].offset, 0};
        e[m++] = (endpoint){c[i].offset + lambda, +1};
    }
    if (nfit == 0) return ot_error(OT_ERR_FAILED_PRECONDITION, "ntp select: no fit server");
    /* ascending by value; at equal values lower endpoints before midpoints before upper ones,
     * so touching intervals count as overlapping */
    for (int i = 1; i < m; i++) {
        endpoint v = e[i];
        int j = i - 1;
        while (j >= 0 && (e[j].val > v.val || (e[j].val == v.val && e[j].type > v.type))) {
            e[j + 1] = e[j];
            j--;
        }
        e[j + 1] = v;
    }
    double low = 0, high = 0;
    int allow;
    for (allow = 0; 2 * allow < nfit; allow++) {
        int found = 0, chime = 0;
        bool have_low = false, have_high = false;
        for (int i = 0; i < m; i++) {
            chime -= e[i].type;
            if (chime >= nfit - allow) {
                low = e[i].val;
                have_low = true;
                break;
            }
            if (e[i].type == 0) found++;
        }
        chime = 0;
        for (int i = m - 1; i >= 0; i--) {
            chime += e[i].type;
            if (chime >= nfit - allow) {
                high = e[i].val;
                have_high = true;
                break;
            }
            if (e[i].type == 0) found++;
        }
        if (found > allow || !have_low || !have_high) continue;
        if (high >= low) break;
    }
    if (2 * allow >= nfit) {
        /* no majority: nobody can be trusted, like ntpd marking every candidate 'x' */
        for (int i = 0; i < n; i++)
            if (cls[i] == OT_NTP_SURVIVOR) cls[i] = OT_NTP_FALSETICKER;
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "ntp select: no majority of the %d fit servers agrees on the time", nfit);
    }
    for (int i = 0; i < n; i++) {
        if (cls[i] != OT_NTP_SURVIVOR) continue;
        double lambda = ot_ntp_root_distance(&c[i], now);
        if (c[i].offset + lambda < low || c[i].offset - lambda > high) cls[i] = OT_NTP_FALSETICKER;
    }
    if (low_out) *low_out = low;
    if (high_out) *high_out = high;
    return OT_OK;
}

static double metric(const ot_ntp_candidate *c, double now) {
    return OT_NTP_MAXDIST * c->stratum + ot_ntp_root_distance(c, now);
}

int ot_ntp_cluster(const ot_ntp_candidate *c, int n, double now, ot_ntp_peer_class *cls, int nmin) {
    if (nmin < 1) nmin = 1;
    for (;;) {
        int ns = 0;
        for (int i = 0; i < n; i++) ns += cls[i] == OT_NTP_SURVIVOR;
        if (ns <= nmin) break;
        double max_phi = -1, min_psi = INFINITY;
        int qmax = -1;
        for (int i = 0; i < n; i++) {
            if (cls[i] != OT_NTP_SURVIVOR) continue;
            double sum = 0;
            for (int j = 0; j < n; j++)
                if (cls[j] == OT_NTP_SURVIVOR)
                    sum += (c[i].offset - c[j].offset) * (c[i].offset - c[j].offset);
            double phi = sqrt(sum / (ns - 1));
            /* ties: drop the one with the worse metric */
            if (phi > max_phi || (phi == max_phi && metric(&c[i], now) > metric(&c[qmax], now))) {
                max_phi = phi;
                qmax = i;
            }
            min_psi = fmin(min_psi, c[i].jitter);
        }
        if (max_phi < min_psi) break;
        cls[qmax] = OT_NTP_OUTLIER;
    }
    int best = -1;
    for (int i = 0; i < n; i++)
        if (cls[i] == OT_NTP_SURVIVOR && (best < 0 || metric(&c[i], now) < metric(&c[best], now)))
            best = i;
    if (best >= 0) cls[best] = OT_NTP_SYS_PEER;
    return best;
}

void ot_ntp_combine(const ot_ntp_candidate *c, int n, double now, const ot_ntp_peer_class *cls,
                    int sys_peer, ot_ntp_system *out) {
    /* the weighted mean is taken relative to the system peer's offset: survivors lie within the
     * intersection interval of each other, so the differences are small whatever the offsets */
    double base = sys_peer >= 0 ? c[sys_peer].offset : 0;
    double y = 0, z = 0, w = 0;
    int ns = 0, nt = 0;
    for (int i = 0; i < n; i++) {
        if (cls[i] >= OT_NTP_OUTLIER) nt++;
        if (cls[i] != OT_NTP_SURVIVOR && cls[i] != OT_NTP_SYS_PEER) continue;
        ns++;
        double x = ot_ntp_root_distance(&c[i], now);
        double d = c[i].offset - base;
        y += 1 / x;
        z += d / x;
        w += d * d / x;
    }
    out->n_survivors = ns;
    out->n_truechimers = nt;
    out->sys_peer = sys_peer;
    if (ns == 0 || sys_peer < 0) {
        out->offset = 0;
        out->jitter = 0;
        out->root_distance = OT_NTP_MAXDISP;
        return;
    }
    out->offset = base + z / y;
    double sel_jitter = sqrt(w / y);
    out->jitter = sqrt(sel_jitter * sel_jitter + c[sys_peer].jitter * c[sys_peer].jitter);
    out->root_distance = ot_ntp_root_distance(&c[sys_peer], now);
}

ot_status ot_ntp_mitigate(const ot_ntp_candidate *c, int n, double now, ot_ntp_peer_class *cls,
                          ot_ntp_system *out) {
    memset(out, 0, sizeof *out);
    out->sys_peer = -1;
    OT_CHECK(ot_ntp_select(c, n, now, cls, &out->low, &out->high));
    double low = out->low, high = out->high;
    int sp = ot_ntp_cluster(c, n, now, cls, OT_NTP_NMIN);
    ot_ntp_combine(c, n, now, cls, sp, out);
    out->low = low;
    out->high = high;
    if (sp < 0) return ot_error(OT_ERR_FAILED_PRECONDITION, "ntp: no survivor after clustering");
    return OT_OK;
}

/* ---- poll interval ---- */

void ot_ntp_poll_init(ot_ntp_poll *p, int minpoll, int maxpoll) {
    minpoll = minpoll < 0 ? 0 : minpoll > 17 ? 17 : minpoll;
    maxpoll = maxpoll < 0 ? 0 : maxpoll > 17 ? 17 : maxpoll;
    if (minpoll > maxpoll) {
        int t = minpoll;
        minpoll = maxpoll;
        maxpoll = t;
    }
    p->minpoll = minpoll;
    p->maxpoll = maxpoll;
    p->poll = minpoll;
    p->jiggle = 0;
}

int ot_ntp_poll_update(ot_ntp_poll *p, double offset, double jitter) {
    if (fabs(offset) < PGATE * jitter) {
        p->jiggle += p->poll;
        if (p->jiggle > LIMIT) {
            p->jiggle = LIMIT;
            if (p->poll < p->maxpoll) {
                p->jiggle = 0;
                p->poll++;
            }
        }
    } else {
        p->jiggle -= 2 * p->poll;
        if (p->jiggle < -LIMIT) {
            p->jiggle = -LIMIT;
            if (p->poll > p->minpoll) {
                p->jiggle = 0;
                p->poll--;
            }
        }
    }
    return p->poll;
}

int ot_ntp_poll_backoff(ot_ntp_poll *p) {
    if (p->poll < p->maxpoll) p->poll++;
    p->jiggle = 0;
    return p->poll;
}

/* Scheduling: a memory-minimizing list scheduler (as XLA's ListScheduler). Among the ready
 * instructions it picks the one with the largest (bytes its operands free by this being their
 * last use) − (bytes it allocates); ties go to the earlier post-order position, so the order is
 * deterministic. A lazy max-heap keeps it O((V + E) log V). */
#include "compiler_internal.h"

/* Bytes an instruction's result adds to the arena: arrays and tuple leaves computed by a kernel;
 * parameters, constants, tuples and get-tuple-element add nothing. */
static int64_t new_bytes(const ot_instr *i) {
    switch (i->opcode) {
    case OT_OP_PARAMETER:
    case OT_OP_CONSTANT:
    case OT_OP_TUPLE:
    case OT_OP_GET_TUPLE_ELEMENT: return 0;
    default: return ot_ir_shape_nbytes(&i->shape);
    }
}

typedef struct hent {
    int64_t prio, pos;
    uint32_t ver;
} hent;

static bool hless(const hent *a, const hent *b) { /* a has lower priority than b */
    if (a->prio != b->prio) return a->prio < b->prio;
    return a->pos > b->pos;
}

typedef struct heap {
    hent *h;
    int64_t n, cap;
} heap;

static ot_status hpush(heap *hp, hent e) {
    OT_CHECK(cc_grow(&hp->h, &hp->cap, hp->n + 1, sizeof *hp->h));
    int64_t k = hp->n++;
    while (k > 0) {
        int64_t p = (k - 1) / 2;
        if (!hless(&hp->h[p], &e)) break;
        hp->h[k] = hp->h[p];
        k = p;
    }
    hp->h[k] = e;
    return OT_OK;
}

static hent hpop(heap *hp) {
    hent top = hp->h[0], last = hp->h[--hp->n];
    int64_t k = 0;
    for (;;) {
        int64_t c = 2 * k + 1;
        if (c >= hp->n) break;
        if (c + 1 < hp->n && hless(&hp->h[c], &hp->h[c + 1])) c++;
        if (!hless(&last, &hp->h[c])) break;
        hp->h[k] = hp->h[c];
        k = c;
    }
    if (hp->n) hp->h[k] = last;
    return top;
}

/* Whether operand j of i is its first slot reading that instruction. A few operands are compared
 * directly; a wide instruction (the root tuple of many outputs) marks each operand's position
 * with a stamp instead, so walking its operands stays linear. A walk over i's operands calls it
 * for every j in order, after taking a fresh stamp (*tick + 1). */
typedef struct seen {
    uint64_t *stamp; /* per position */
    uint64_t tick;
} seen;

static bool first_use(const ot_instr *i, int j, seen *sn) {
    if (i->noperands <= 8) {
        for (int k = 0; k < j; k++)
            if (i->operands[k] == i->operands[j]) return false;
        return true;
    }
    int64_t p = i->operands[j]->mark;
    if (sn->stamp[p] == sn->tick) return false;
    sn->stamp[p] = sn->tick;
    return true;
}

static int64_t prio(const ot_instr *i, const int64_t *users_left, seen *sn) {
    int64_t p = -new_bytes(i);
    sn->tick++;
    for (int j = 0; j < i->noperands; j++)
        if (first_use(i, j, sn) && users_left[i->operands[j]->mark] == 1)
            p += new_bytes(i->operands[j]);
    return p;
}

ot_status ot_schedule_entry(const ot_module *m, bool minimize_memory, ot_instr ***order,
                            int64_t *n) {
    *order = NULL;
    *n = 0;
    ot_computation *c = ot_module_entry(m);
    if (!c) return ot_error(OT_ERR_INVALID_ARGUMENT, "schedule: no entry computation");
    ot_instr **po = NULL;
    int64_t np = 0;
    OT_CHECK(cc_post_order(c, &po, &np));
    return cc_schedule_post_order(po, np, minimize_memory, order, n);
}

ot_status cc_schedule_post_order(ot_instr **po, int64_t np, bool minimize_memory, ot_instr ***order,
                                 int64_t *n) {
    *order = NULL;
    *n = 0;
    if (!minimize_memory || np == 0) {
        *order = po;
        *n = np;
        return OT_OK;
    }
    int64_t *pending = ot_malloc((size_t)np * sizeof *pending);
    int64_t *users_left = ot_malloc((size_t)np * sizeof *users_left);
    uint32_t *ver = ot_calloc((size_t)np, sizeof *ver);
    bool *done = ot_calloc((size_t)np, sizeof *done);
    ot_instr **out = ot_malloc((size_t)np * sizeof *out);
    /* two stamp sets: prio runs inside the walk over a scheduled instruction's operands */
    seen walk = {ot_calloc((size_t)np, sizeof(uint64_t)), 0};
    seen pr = {ot_calloc((size_t)np, sizeof(uint64_t)), 0};
    heap hp = {0};
    ot_status s = OT_OK;
    if (!pending || !users_left || !ver || !done || !out || !walk.stamp || !pr.stamp) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "schedule: out of memory");
        goto fail;
    }
    /* one walk (each visit of an instruction of a large graph is a cache miss): operands come
     * before their users in the post order, so their positions and user counts, which prio
     * reads, are set by the time a user is pushed */
    for (int64_t k = 0; k < np && s == OT_OK; k++) {
        ot_instr *i = po[k];
        i->mark = k;
        int64_t d = 0;
        walk.tick++;
        for (int j = 0; j < i->noperands; j++) d += first_use(i, j, &walk);
        pending[k] = d;
        users_left[k] = i->nusers;
        if (d == 0) s = hpush(&hp, (hent){prio(i, users_left, &pr), k, 0});
    }
    int64_t no = 0;
    while (hp.n && s == OT_OK) {
        hent e = hpop(&hp);
        if (done[e.pos] || e.ver != ver[e.pos]) continue;
        ot_instr *i = po[e.pos];
        done[e.pos] = true;
        out[no++] = i;
        walk.tick++;
        for (int j = 0; j < i->noperands && s == OT_OK; j++) {
            if (!first_use(i, j, &walk)) continue;
            ot_instr *o = i->operands[j];
            if (--users_left[o->mark] != 1) continue;
            /* o's last unscheduled user now frees it: raise that user's priority */
            for (int u = 0; u < o->nusers; u++) {
                ot_instr *x = o->users[u];
                if (done[x->mark]) continue;
                if (pending[x->mark] == 0)
                    s = hpush(&hp, (hent){prio(x, users_left, &pr), x->mark, ++ver[x->mark]});
                break;
            }
        }
        for (int u = 0; u < i->nusers && s == OT_OK; u++) {
            ot_instr *x = i->users[u];
            if (--pending[x->mark] == 0)
                s = hpush(&hp, (hent){prio(x, users_left, &pr), x->mark, ver[x->mark]});
        }
    }
    if (s == OT_OK && no != np)
        s = ot_error(OT_ERR_INTERNAL, "schedule: %lld of %lld instructions scheduled",
                     (long long)no, (long long)np);
    if (s == OT_OK) {
        *order = out;
        *n = no;
        out = NULL;
    }
fail:
    ot_free(hp.h);
    ot_free(pending);
    ot_free(users_left);
    ot_free(ver);
    ot_free(done);
    ot_free(out);
    ot_free(walk.stamp);
    ot_free(pr.stamp);
    ot_free(po);
    return s;
}

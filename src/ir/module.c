/* The IR data model: modules, computations, instructions, links, name indexes and edits. */
#include "ir_internal.h"

#include <stdarg.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* ---------------------------------------------------------------------------------------------
 * Hashing and indexes
 * ------------------------------------------------------------------------------------------- */

static inline uint64_t slot_tag(uint64_t h) {
    return h >> 32;
}

/* Probe tables from 4 MiB on are placed on 2 MiB boundaries and advised as transparent huge
 * pages: every insert and lookup is a random access, and with 4 KiB pages each one is also a TLB
 * miss (which makes the CPU drop the prefetch the parser issues for the insert). */
#define SLOTS_HUGE_BYTES ((size_t)4 << 20)
#define HUGE_PAGE        ((size_t)2 << 20)

static uint64_t *slots_alloc(uint64_t n) {
    size_t bytes = (size_t)n * sizeof(uint64_t);
    if (bytes < SLOTS_HUGE_BYTES) return ot_calloc((size_t)n, sizeof(uint64_t));
    uint64_t *p = ot_aligned_alloc(HUGE_PAGE, bytes);
    if (!p) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    (void)madvise(p, bytes, MADV_HUGEPAGE); /* advice only */
#endif
    memset(p, 0, bytes);
    return p;
}

static void slots_free(uint64_t *p, uint64_t n) {
    if ((size_t)n * sizeof(uint64_t) < SLOTS_HUGE_BYTES)
        ot_free(p);
    else
        ot_aligned_free(p);
}

/* Rebuilds the probe table with entry room for `want` keys and a load below 3/4 at that count,
 * dropping deleted entries. Entries keep their insertion order. */
static ot_status names_rebuild(ir_name_index *x, uint64_t want) {
    uint64_t ncap = 16;
    while (ncap * 3 <= want * 4) ncap *= 2;
    if (want > UINT32_MAX - 2)
        return ot_error(OT_ERR_OUT_OF_RANGE, "name index: more than 2^32 names");
    uint64_t *ns = slots_alloc(ncap);
    if (!ns) return ot_error(OT_ERR_OUT_OF_MEMORY, "name index: out of memory");
    if (want > x->ecap) {
        ir_name_entry *ne = ot_realloc(x->entries, want * sizeof *ne);
        if (!ne) {
            slots_free(ns, ncap);
            return ot_error(OT_ERR_OUT_OF_MEMORY, "name index: out of memory");
        }
        x->entries = ne;
        x->ecap = want;
    }
    uint64_t k = 0;
    for (uint64_t e = 0; e < x->nent; e++) {
        ir_name_entry en = x->entries[e];
        if (!en.key) continue;
        x->entries[k] = en;
        uint64_t j = en.hash & (ncap - 1);
        while (ns[j]) j = (j + 1) & (ncap - 1);
        ns[j] = slot_tag(en.hash) << 32 | (k + 1);
        k++;
    }
    slots_free(x->slots, x->cap);
    x->slots = ns;
    x->cap = ncap;
    x->nent = k;
    return OT_OK;
}

ot_status ir_names_reserve(ir_name_index *x, uint64_t n) {
    if (n <= x->n || (x->cap && n * 4 < x->cap * 3 && n <= x->ecap)) return OT_OK;
    return names_rebuild(x, n);
}

/* Room for one more entry and one more used slot. */
static ot_status names_room(ir_name_index *x) {
    /* used slots = appended entries (live or deleted) since the last rebuild */
    if ((x->nent + 1) * 4 >= x->cap * 3) {
        uint64_t want = x->n + 1 > 8 ? (x->n + 1) * 3 / 2 : 12; /* the table doubles */
        return names_rebuild(x, want);
    }
    if (x->nent == x->ecap) {
        uint64_t ncap = x->ecap ? x->ecap * 2 : 8;
        ir_name_entry *ne = ot_realloc(x->entries, ncap * sizeof *ne);
        if (!ne) return ot_error(OT_ERR_OUT_OF_MEMORY, "name index: out of memory");
        x->entries = ne;
        x->ecap = ncap;
    }
    return OT_OK;
}

/* The slot holding key, or the empty slot where it would go (*found false). */
static uint64_t names_find(const ir_name_index *x, const char *key, size_t len, uint64_t h,
                           bool *found) {
    const uint64_t tag = slot_tag(h), mask = x->cap - 1;
    uint64_t j = h & mask;
    for (;;) {
        uint64_t s = x->slots[j];
        if (!s) {
            *found = false;
            return j;
        }
        if (s != IR_SLOT_DEL && (s >> 32) == tag) {
            const ir_name_entry *e = &x->entries[(s & 0xffffffffu) - 1];
            if (e->hash == h && strncmp(e->key, key, len) == 0 && e->key[len] == '\0') {
                *found = true;
                return j;
            }
        }
        j = (j + 1) & mask;
    }
}

static void names_append(ir_name_index *x, uint64_t j, const char *key, void *val, uint64_t h) {
    x->entries[x->nent] = (ir_name_entry){key, val, h};
    x->slots[j] = slot_tag(h) << 32 | (x->nent + 1);
    x->nent++;
    x->n++;
}

ot_status ir_names_put(ir_name_index *x, const char *key, void *val) {
    OT_CHECK(names_room(x));
    size_t len = strlen(key);
    uint64_t h = ir_hash_bytes(key, len);
    bool found;
    uint64_t j = names_find(x, key, len, h, &found);
    if (found) {
        ir_name_entry *e = &x->entries[(x->slots[j] & 0xffffffffu) - 1];
        e->key = key;
        e->val = val;
        return OT_OK;
    }
    names_append(x, j, key, val, h);
    return OT_OK;
}

ot_status ir_names_insert(ir_name_index *x, const char *key, size_t len, void *val) {
    OT_CHECK(names_room(x));
    uint64_t h = ir_hash_bytes(key, len);
    bool found;
    uint64_t j = names_find(x, key, len, h, &found);
    if (found) return OT_ERR_ALREADY_EXISTS;
    names_append(x, j, key, val, h);
    return OT_OK;
}

void *ir_names_get(const ir_name_index *x, const char *key, size_t len) {
    if (!x->cap) return NULL;
    bool found;
    uint64_t j = names_find(x, key, len, ir_hash_bytes(key, len), &found);
    return found ? x->entries[(x->slots[j] & 0xffffffffu) - 1].val : NULL;
}

void ir_names_del(ir_name_index *x, const char *key) {
    if (!x->cap) return;
    size_t len = strlen(key);
    bool found;
    uint64_t j = names_find(x, key, len, ir_hash_bytes(key, len), &found);
    if (!found) return;
    ir_name_entry *e = &x->entries[(x->slots[j] & 0xffffffffu) - 1];
    e->key = NULL;
    e->val = NULL;
    x->slots[j] = IR_SLOT_DEL;
    x->n--;
}

void ir_names_free(ir_name_index *x) {
    slots_free(x->slots, x->cap);
    ot_free(x->entries);
    memset(x, 0, sizeof *x);
}

static uint64_t ptr_hash(const void *p) {
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

ot_status ir_ptr_map_put(ir_ptr_map *m, const void *k, void *v) {
    if ((m->n + 1) * 2 >= m->cap) {
        uint64_t ncap = m->cap ? m->cap * 2 : 16;
        struct ir_ptr_slot *ns = ot_calloc(ncap, sizeof *ns);
        if (!ns) return ot_error(OT_ERR_OUT_OF_MEMORY, "pointer map: out of memory");
        for (uint64_t i = 0; i < m->cap; i++) {
            if (!m->slots[i].k) continue;
            uint64_t j = ptr_hash(m->slots[i].k) & (ncap - 1);
            while (ns[j].k) j = (j + 1) & (ncap - 1);
            ns[j] = m->slots[i];
        }
        ot_free(m->slots);
        m->slots = ns;
        m->cap = ncap;
    }
    uint64_t j = ptr_hash(k) & (m->cap - 1);
    while (m->slots[j].k && m->slots[j].k != k) j = (j + 1) & (m->cap - 1);
    if (!m->slots[j].k) m->n++;
    m->slots[j].k = k;
    m->slots[j].v = v;
    return OT_OK;
}

void *ir_ptr_map_get(const ir_ptr_map *m, const void *k) {
    if (!m->cap) return NULL;
    uint64_t j = ptr_hash(k) & (m->cap - 1);
    while (m->slots[j].k) {
        if (m->slots[j].k == k) return m->slots[j].v;
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

void ir_ptr_map_free(ir_ptr_map *m) {
    ot_free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------------------------------------
 * Arena helpers and the sticky error
 * ------------------------------------------------------------------------------------------- */

void *ir_alloc(ot_module *m, size_t n) {
    return ot_arena_alloc(m->arena, n, 8);
}

char *ir_strndup(ot_module *m, const char *s, size_t n) {
    char *d = ot_arena_alloc(m->str_arena, n + 1, 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *ir_strdup(ot_module *m, const char *s) {
    return ir_strndup(m, s, strlen(s));
}

void *ir_memdup(ot_module *m, const void *p, size_t n) {
    void *d = ot_arena_alloc(m->arena, n, 8);
    if (d && n) memcpy(d, p, n);
    return d;
}

ot_status ir_record(ot_module *m, ot_status s) {
    if (s == OT_OK) return m->err;
    if (m->err == OT_OK) {
        m->err = s;
        const char *msg = ot_last_error();
        size_t cl = strlen(ot_status_str(s));
        if (strncmp(msg, ot_status_str(s), cl) == 0 && msg[cl] == ':' && msg[cl + 1] == ' ')
            msg += cl + 2;
        snprintf(m->errmsg, sizeof m->errmsg, "%s", msg);
    }
    return m->err;
}

ot_status ir_fail(ot_module *m, ot_status code, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    ot_error(code, "%s", buf);
    return ir_record(m, code);
}

ot_status ot_module_status(const ot_module *m) {
    if (!m) return ot_error(OT_ERR_INVALID_ARGUMENT, "module is NULL");
    if (m->err != OT_OK) return ot_error(m->err, "%s", m->errmsg);
    return OT_OK;
}

ot_status ot_module_record_error(ot_module *m, ot_status err, const char *msg) {
    if (err == OT_OK) return m->err;
    ot_error(err, "%s", msg ? msg : "");
    return ir_record(m, err);
}

ot_status ot_module_finalize(ot_module *m) {
    OT_CHECK(ot_module_status(m));
    return ot_module_verify(m);
}

/* ---------------------------------------------------------------------------------------------
 * Users lists. Each user appears once per operand however many slots it uses. Removal swaps with
 * the last entry; an instruction with many users keeps a user -> position index so that edits
 * stay O(1) (a scalar constant broadcast into a million consumers must not make DCE quadratic).
 * ------------------------------------------------------------------------------------------- */

#define UIDX_MIN 32

/* Indexes are heap blocks on a per-module list so the module can free them all at once. A slot
 * holds a position in the users array plus one (0: free), 4 bytes where a pointer and a position
 * took 16: the index of an instruction read by every reduce of a large graph then stays in the
 * core's cache where the larger one did not (the users array it points into is half its size).
 * The user at a slot is op->users[slot - 1], whose address is also its hash key. */
typedef struct uidx {
    struct uidx *prev, *next;
    uint64_t cap;
    uint32_t slots[];
} uidx;

static void uidx_release(ot_instr *op) {
    uidx *x = op->uidx_;
    if (!x) return;
    ot_module *m = op->parent->module;
    if (x->prev)
        x->prev->next = x->next;
    else
        m->uidx_head = x->next;
    if (x->next) x->next->prev = x->prev;
    ot_free(x);
    op->uidx_ = NULL;
}

static uidx *uidx_build(ot_instr *op, uint64_t cap) {
    uidx *x = ot_calloc(1, sizeof *x + cap * sizeof x->slots[0]);
    if (!x) return NULL;
    x->cap = cap;
    ot_module *m = op->parent->module;
    x->next = m->uidx_head;
    if (x->next) x->next->prev = x;
    m->uidx_head = x;
    for (int i = 0; i < op->nusers; i++) {
        uint64_t j = ptr_hash(op->users[i]) & (cap - 1);
        while (x->slots[j]) j = (j + 1) & (cap - 1);
        x->slots[j] = (uint32_t)i + 1;
    }
    return x;
}

/* The slot of user u of op, or NULL. */
static uint32_t *uidx_find(const ot_instr *op, uidx *x, const ot_instr *u) {
    uint64_t j = ptr_hash(u) & (x->cap - 1);
    while (x->slots[j]) {
        if (op->users[x->slots[j] - 1] == u) return &x->slots[j];
        j = (j + 1) & (x->cap - 1);
    }
    return NULL;
}

/* Backward-shift deletion for linear probing (op->users still holds every indexed user). */
static void uidx_erase(const ot_instr *op, uidx *x, uint32_t *s) {
    uint64_t i = (uint64_t)(s - x->slots), mask = x->cap - 1;
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!x->slots[j]) break;
        uint64_t k = ptr_hash(op->users[x->slots[j] - 1]) & mask;
        /* move j into i when k is cyclically outside (i, j] */
        if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) {
            x->slots[i] = x->slots[j];
            i = j;
        }
    }
    x->slots[i] = 0;
}

bool ir_users_contains(const ot_instr *op, const ot_instr *user) {
    if (op->uidx_) return uidx_find(op, op->uidx_, user) != NULL;
    for (int i = 0; i < op->nusers; i++)
        if (op->users[i] == user) return true;
    return false;
}

ot_status ir_users_add(ot_instr *op, ot_instr *user) {
    if (op->nusers == op->users_cap_) {
        /* arena-backed and grown geometrically: the old array is simply abandoned */
        int ncap = op->users_cap_ ? op->users_cap_ * 2 : 2;
        if (op->users_cap_ > INT32_MAX / 2)
            return ot_error(OT_ERR_OUT_OF_RANGE, "too many users of %s", op->name);
        ot_instr **nu =
            ot_arena_alloc(op->parent->module->users_arena, (size_t)ncap * sizeof *nu, 8);
        if (!nu) return ot_error(OT_ERR_OUT_OF_MEMORY, "users of %s: out of memory", op->name);
        if (op->nusers) memcpy(nu, op->users, (size_t)op->nusers * sizeof *nu);
        op->users = nu;
        op->users_cap_ = ncap;
    }
    uidx *x = op->uidx_;
    if (x && (uint64_t)(op->nusers + 1) * 2 > x->cap) {
        uidx_release(op);
        x = NULL;
    }
    if (!x && op->nusers + 1 >= UIDX_MIN) {
        uint64_t cap = 64;
        while (cap < (uint64_t)(op->nusers + 1) * 4) cap *= 2;
        x = uidx_build(op, cap);
        if (!x) return ot_error(OT_ERR_OUT_OF_MEMORY, "users of %s: out of memory", op->name);
        op->uidx_ = x;
    }
    int pos = op->nusers++;
    op->users[pos] = user;
    if (x) {
        uint64_t j = ptr_hash(user) & (x->cap - 1);
        while (x->slots[j]) j = (j + 1) & (x->cap - 1);
        x->slots[j] = (uint32_t)pos + 1;
    }
    return OT_OK;
}

void ir_users_remove(ot_instr *op, ot_instr *user) {
    int pos = -1;
    uidx *x = op->uidx_;
    if (x) {
        uint32_t *s = uidx_find(op, x, user);
        if (!s) return;
        pos = (int)*s - 1;
        uidx_erase(op, x, s);
    } else {
        for (int i = 0; i < op->nusers; i++)
            if (op->users[i] == user) {
                pos = i;
                break;
            }
        if (pos < 0) return;
    }
    int last = op->nusers - 1;
    if (pos != last) {
        /* keep the order of the remaining users stable for small lists (deterministic printing
         * and passes); swap with the last for large indexed ones */
        if (!x) {
            memmove(op->users + pos, op->users + pos + 1, (size_t)(last - pos) * sizeof *op->users);
        } else {
            /* the last user's slot (found while op->users[last] is still that user) */
            uint32_t *s = uidx_find(op, x, op->users[last]);
            op->users[pos] = op->users[last];
            if (s) *s = (uint32_t)pos + 1;
        }
    }
    op->nusers = last;
}

static void users_free(ot_instr *i) {
    uidx_release(i);
    i->users = NULL;
    i->nusers = i->users_cap_ = 0;
}

/* ---------------------------------------------------------------------------------------------
 * Modules and computations
 * ------------------------------------------------------------------------------------------- */

ot_module *ot_module_new(const char *name) {
    ot_module *m = ot_calloc(1, sizeof *m);
    if (!m) goto oom;
    m->arena = ot_arena_new(256 * 1024);
    m->instr_arena = ot_arena_new(256 * 1024);
    m->users_arena = ot_arena_new(256 * 1024);
    m->str_arena = ot_arena_new(64 * 1024);
    if (!m->arena || !m->instr_arena || !m->users_arena || !m->str_arena) goto oom;
    m->name = ir_strdup(m, name ? name : "module");
    if (!m->name) goto oom;
    m->cfg.replica_count = 1;
    m->cfg.num_partitions = 1;
    m->name_suffix_max = -1;
    return m;
oom:
    ot_module_free(m);
    ot_error(OT_ERR_OUT_OF_MEMORY, "module: out of memory");
    return NULL;
}

static void comp_free(ot_computation *c) {
    c->module->edits++;
    /* users arrays live in the arena; user indexes are freed with the module's list */
    ot_free(c->params);
    ir_name_index *x = c->names_;
    if (x) {
        ir_names_free(x);
        ot_free(x);
    }
}

void ot_module_free(ot_module *m) {
    if (!m) return;
    for (int i = 0; i < m->ncomps; i++) comp_free(m->comps[i]);
    for (struct uidx *x = m->uidx_head, *n; x; x = n) {
        n = x->next;
        ot_free(x);
    }
    ot_free(m->comps);
    ot_free(m->removed);
    ir_names_free(&m->comp_names);
    if (m->pass_cache_free) m->pass_cache_free(m->pass_cache);
    ot_free((void *)m->cfg.alias);
    ot_arena_free(m->arena);
    ot_arena_free(m->instr_arena);
    ot_arena_free(m->users_arena);
    ot_arena_free(m->str_arena);
    ot_free(m);
}

const char *ot_module_name(const ot_module *m) {
    return m->name;
}

int ot_module_computation_count(const ot_module *m) {
    return m->ncomps;
}

ot_computation *ot_module_computation(const ot_module *m, int i) {
    return i >= 0 && i < m->ncomps ? m->comps[i] : NULL;
}

ot_computation *ot_module_find_computation(const ot_module *m, const char *name) {
    return ir_names_get(&m->comp_names, name, strlen(name));
}

ot_computation *ot_module_entry(const ot_module *m) {
    return m->entry;
}

int64_t ot_module_instr_count(const ot_module *m) {
    return m->ninstrs;
}

const ot_module_config *ot_module_get_config(const ot_module *m) {
    return &m->cfg;
}

void ot_module_set_replica_count(ot_module *m, int64_t n) {
    if (n >= 1) m->cfg.replica_count = n;
}

void ot_module_set_num_partitions(ot_module *m, int64_t n) {
    if (n >= 1) m->cfg.num_partitions = n;
}

void ot_module_clear_entry_contract(ot_module *m) {
    m->cfg.nalias = 0; /* the array stays allocated for later ot_module_add_alias calls */
    m->cfg.entry_computation_layout = NULL; /* arena memory: freed with the module */
}

ot_status ot_module_add_alias(ot_module *m, const ot_io_alias *a) {
    if (a->noutput_index < 0 || a->noutput_index > OT_MAX_RANK || a->nparam_index < 0 ||
        a->nparam_index > OT_MAX_RANK || a->param_number < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "input_output_alias: invalid entry");
    if (m->cfg.nalias == m->alias_cap) {
        int ncap = m->alias_cap ? m->alias_cap * 2 : 4;
        ot_io_alias *na = ot_realloc((void *)m->cfg.alias, (size_t)ncap * sizeof *na);
        if (!na) return ot_error(OT_ERR_OUT_OF_MEMORY, "input_output_alias: out of memory");
        m->cfg.alias = na;
        m->alias_cap = ncap;
    }
    ((ot_io_alias *)m->cfg.alias)[m->cfg.nalias++] = *a;
    return OT_OK;
}

ot_status ir_add_computation(ot_module *m, const char *name, size_t len, ot_computation **out) {
    *out = NULL;
    char buf[64];
    if (!name) {
        snprintf(buf, sizeof buf, "computation.%lld", (long long)m->next_comp_id);
        name = buf;
        len = strlen(buf);
    }
    if (ir_names_get(&m->comp_names, name, len))
        return ot_error(OT_ERR_ALREADY_EXISTS, "computation '%.*s' is already defined", (int)len,
                        name);
    if (m->ncomps == m->comps_cap) {
        int ncap = m->comps_cap ? m->comps_cap * 2 : 8;
        ot_computation **nc = ot_realloc(m->comps, (size_t)ncap * sizeof *nc);
        if (!nc) return ot_error(OT_ERR_OUT_OF_MEMORY, "computation: out of memory");
        m->comps = nc;
        m->comps_cap = ncap;
    }
    ot_computation *c = ir_alloc(m, sizeof *c);
    if (!c) return ot_error(OT_ERR_OUT_OF_MEMORY, "computation: out of memory");
    memset(c, 0, sizeof *c);
    c->name = ir_strndup(m, name, len);
    if (!c->name) return ot_error(OT_ERR_OUT_OF_MEMORY, "computation: out of memory");
    /* the instruction name index is built once the computation grows past IR_NAMES_LAZY */
    OT_CHECK(ir_names_put(&m->comp_names, c->name, c));
    c->module = m;
    c->id = m->next_comp_id++;
    m->comps[m->ncomps++] = c;
    m->edits++;
    *out = c;
    return OT_OK;
}

ot_computation *ot_module_add_computation(ot_module *m, const char *name) {
    if (!m || m->err) return NULL;
    if (name && ir_names_get(&m->comp_names, name, strlen(name))) {
        /* make a unique name, as XLA's name uniquer does */
        char buf[256];
        for (int64_t k = 1;; k++) {
            snprintf(buf, sizeof buf, "%.200s.%lld", name, (long long)k);
            if (!ir_names_get(&m->comp_names, buf, strlen(buf))) break;
        }
        ot_computation *c;
        ot_status s = ir_add_computation(m, buf, strlen(buf), &c);
        if (s) ir_record(m, s);
        return c;
    }
    ot_computation *c;
    ot_status s = ir_add_computation(m, name, name ? strlen(name) : 0, &c);
    if (s) ir_record(m, s);
    return c;
}

void ot_module_set_entry(ot_module *m, ot_computation *c) {
    if (!m || !c || m->err) return;
    if (c->module != m) {
        ir_fail(m, OT_ERR_INVALID_ARGUMENT, "set entry: computation %s is from another module",
                c->name);
        return;
    }
    if (m->entry) m->entry->is_entry = false;
    m->entry = c;
    m->edits++;
    c->is_entry = true;
}

ot_computation *ot_instr_computation(const ot_instr *i) {
    return i->parent;
}

ot_instr *ot_computation_find_instr(const ot_computation *c, const char *name) {
    return ir_comp_find(c, name, strlen(name));
}

/* ---------------------------------------------------------------------------------------------
 * Instruction names. A computation of up to IR_NAMES_LAZY instructions has no index: a lookup
 * scans its list. Fusion makes a computation of a few instructions per fused loop, and an index
 * each (the struct, a probe table and an entry array: ~600 bytes of heap and three allocations)
 * was a large part of what fusing a million-instruction graph allocated.
 * ------------------------------------------------------------------------------------------- */

ot_instr *ir_comp_find(const ot_computation *c, const char *key, size_t len) {
    /* the index is a cache of the list: built on the first lookup in a large computation (out
     * of memory: the scan below answers instead) */
    if (!c->names_ && c->ninstrs > IR_NAMES_LAZY) (void)ir_comp_names((ot_computation *)c, 0);
    if (c->names_) return ir_names_get(c->names_, key, len);
    for (ot_instr *i = c->first; i; i = i->next)
        if (i->name[0] == key[0] && strncmp(i->name, key, len) == 0 && i->name[len] == '\0')
            return i;
    return NULL;
}

ot_status ir_comp_names(ot_computation *c, uint64_t reserve) {
    ir_name_index *x = c->names_;
    if (x) return reserve ? ir_names_reserve(x, reserve) : OT_OK;
    x = ot_calloc(1, sizeof *x);
    if (!x) return ot_error(OT_ERR_OUT_OF_MEMORY, "name index: out of memory");
    uint64_t want = (uint64_t)c->ninstrs > reserve ? (uint64_t)c->ninstrs : reserve;
    ot_status s = want ? ir_names_reserve(x, want) : OT_OK;
    for (ot_instr *i = c->first; i && s == OT_OK; i = i->next)
        s = ir_names_insert(x, i->name, strlen(i->name), i);
    if (s != OT_OK) {
        ir_names_free(x);
        ot_free(x);
        return s == OT_ERR_ALREADY_EXISTS
                   ? ot_error(OT_ERR_INTERNAL, "computation %s: duplicate instruction names",
                              c->name)
                   : s;
    }
    c->names_ = x;
    return OT_OK;
}

ot_status ir_comp_name_insert(ot_computation *c, const char *key, size_t len, ot_instr *i,
                              bool fresh) {
    if (!c->names_) {
        if (fresh) return OT_OK;
        if (c->ninstrs < IR_NAMES_LAZY)
            return ir_comp_find(c, key, len) ? OT_ERR_ALREADY_EXISTS : OT_OK;
        OT_CHECK(ir_comp_names(c, 0));
    }
    return ir_names_insert(c->names_, key, len, i);
}

void ir_comp_name_del(ot_computation *c, const char *key) {
    if (c->names_) ir_names_del(c->names_, key);
}

/* Counts a change to c's instructions, their operands or its root: in c (its analyses, such as
 * a fused computation's, stay valid while its count does) and in the module (its kept orders). */
static void edited(ot_computation *c) {
    c->edits_++;
    c->module->edits++;
}

void ot_computation_set_root(ot_computation *c, ot_instr *r) {
    if (!c || !r || c->module->err) return;
    if (r->parent != c || r->dead_) {
        ir_fail(c->module, OT_ERR_INVALID_ARGUMENT,
                "set root: %s is not an instruction of computation %s", r->name, c->name);
        return;
    }
    c->root = r;
    edited(c);
}

ot_dtype ot_instr_dtype(const ot_instr *i) {
    return i->shape.kind == OT_IR_ARRAY ? i->shape.array.dtype : OT_DTYPE_INVALID;
}

/* ---------------------------------------------------------------------------------------------
 * Instruction creation
 * ------------------------------------------------------------------------------------------- */

static ot_status params_set(ot_computation *c, int64_t number, ot_instr *p) {
    if (number < 0 || number > 1000000)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "parameter number %lld out of range",
                        (long long)number);
    if (number >= c->params_cap_) {
        int ncap = c->params_cap_ ? c->params_cap_ : 4;
        while (ncap <= number) ncap *= 2;
        ot_instr **np = ot_realloc(c->params, (size_t)ncap * sizeof *np);
        if (!np) return ot_error(OT_ERR_OUT_OF_MEMORY, "parameters: out of memory");
        for (int k = c->params_cap_; k < ncap; k++) np[k] = NULL;
        c->params = np;
        c->params_cap_ = ncap;
    }
    if (c->params[number])
        return ot_error(OT_ERR_ALREADY_EXISTS, "parameter number %lld is already taken by %s",
                        (long long)number, c->params[number]->name);
    c->params[number] = p;
    if (number >= c->nparams) c->nparams = (int)number + 1;
    return OT_OK;
}

/* Puts i at the end of c's list (links, parent and count only). */
static void list_append(ot_computation *c, ot_instr *i) {
    i->parent = c;
    i->next = NULL;
    i->prev = c->last;
    if (c->last)
        c->last->next = i;
    else
        c->first = i;
    c->last = i;
    c->ninstrs++;
}

/* Takes i out of its computation's list (links and count only). */
static void list_unlink(ot_computation *c, ot_instr *i) {
    if (i->prev)
        i->prev->next = i->next;
    else
        c->first = i->next;
    if (i->next)
        i->next->prev = i->prev;
    else
        c->last = i->prev;
    c->ninstrs--;
}

/* Attribute sets: an instruction points at its own copy in the arena, or, for the commonest
 * sets (none at all, a parameter number or tuple index below 64, a fusion kind alone), at a
 * shared constant one: most instructions of a large module carry one of those, and 192 bytes
 * apiece would be a third of the module. */
static const ot_attrs no_attrs;
static const ot_attrs index_attrs[64] = {
    {.index = 0},  {.index = 1},  {.index = 2},  {.index = 3},  {.index = 4},  {.index = 5},
    {.index = 6},  {.index = 7},  {.index = 8},  {.index = 9},  {.index = 10}, {.index = 11},
    {.index = 12}, {.index = 13}, {.index = 14}, {.index = 15}, {.index = 16}, {.index = 17},
    {.index = 18}, {.index = 19}, {.index = 20}, {.index = 21}, {.index = 22}, {.index = 23},
    {.index = 24}, {.index = 25}, {.index = 26}, {.index = 27}, {.index = 28}, {.index = 29},
    {.index = 30}, {.index = 31}, {.index = 32}, {.index = 33}, {.index = 34}, {.index = 35},
    {.index = 36}, {.index = 37}, {.index = 38}, {.index = 39}, {.index = 40}, {.index = 41},
    {.index = 42}, {.index = 43}, {.index = 44}, {.index = 45}, {.index = 46}, {.index = 47},
    {.index = 48}, {.index = 49}, {.index = 50}, {.index = 51}, {.index = 52}, {.index = 53},
    {.index = 54}, {.index = 55}, {.index = 56}, {.index = 57}, {.index = 58}, {.index = 59},
    {.index = 60}, {.index = 61}, {.index = 62}, {.index = 63},
};
static const ot_attrs fusion_kind_attrs[] = {
    {.fusion_kind = OT_FUSION_LOOP},
    {.fusion_kind = OT_FUSION_INPUT},
    {.fusion_kind = OT_FUSION_OUTPUT},
    {.fusion_kind = OT_FUSION_CUSTOM},
};

/* The shared constant equal to a, or NULL when none is. */
static const ot_attrs *attrs_shared(const ot_attrs *a) {
    ot_attrs t = *a;
    t.index = 0;
    t.fusion_kind = OT_FUSION_LOOP;
    if (memcmp(&t, &no_attrs, sizeof t) != 0) return NULL;
    if (a->fusion_kind == OT_FUSION_LOOP)
        return a->index == 0                   ? &no_attrs
               : a->index > 0 && a->index < 64 ? &index_attrs[a->index]
                                               : NULL;
    if (a->index != 0) return NULL;
    for (size_t k = 0; k < sizeof fusion_kind_attrs / sizeof *fusion_kind_attrs; k++)
        if (fusion_kind_attrs[k].fusion_kind == a->fusion_kind) return &fusion_kind_attrs[k];
    return NULL;
}

/* a itself when shared, else an arena copy (NULL: out of memory). */
static const ot_attrs *attrs_intern(ot_module *m, const ot_attrs *a) {
    const ot_attrs *sh = attrs_shared(a);
    if (sh) return sh;
    ot_attrs *c = ot_arena_alloc(m->arena, sizeof *c, 8);
    if (c) *c = *a;
    return c;
}

/* Records an explicit name's trailing number ("x.12" -> 12) in m->name_suffix_max. */
static void note_name(ot_module *m, const char *name, size_t len) {
    size_t d = len;
    while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9') d--;
    if (d == len || d == 0 || name[d - 1] != '.') return;
    int64_t v = 0;
    for (size_t k = d; k < len; k++) {
        if (v > (INT64_MAX - 9) / 10) {
            v = INT64_MAX;
            break;
        }
        v = v * 10 + (name[k] - '0');
    }
    if (v > m->name_suffix_max) m->name_suffix_max = v;
}

ot_status ir_create(ot_computation *c, ot_opcode op, ot_instr *const *operands, int noperands,
                    const ot_attrs *attrs, ot_computation *const *called, int ncalled,
                    const ot_ir_shape *hint, const char *name, size_t name_len, unsigned flags,
                    ot_instr **out) {
    ot_module *m = c->module;
    *out = NULL;
    static const ot_attrs zero_attrs;
    if (!attrs) attrs = &zero_attrs;
    if ((int)op < 0 || op >= OT_OP_COUNT)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "invalid opcode %d", (int)op);
    if (noperands < 0 || ncalled < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: negative operand count", ot_opcode_name(op));
    for (int k = 0; k < noperands; k++) {
        if (!operands[k])
            return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: operand %d is NULL", ot_opcode_name(op),
                            k);
        if (operands[k]->parent != c || operands[k]->dead_)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "%s: operand %d (%s) is not a live instruction of computation %s",
                            ot_opcode_name(op), k, operands[k]->name, c->name);
    }
    for (int k = 0; k < ncalled; k++) {
        if (!called[k] || called[k]->module != m)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "%s: called computation %d is NULL or from another module",
                            ot_opcode_name(op), k);
        if (called[k] == c)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: computation %s calls itself",
                            ot_opcode_name(op), c->name);
    }
    ot_ir_shape shape;
    if ((flags & IR_SHAPE_KNOWN) && hint)
        shape = *hint;
    else
        OT_CHECK(ir_infer(m, op, operands, noperands, attrs, called, ncalled, hint, &shape));

    ot_instr *i = m->free_instrs;
    if (i)
        m->free_instrs = i->next;
    else if (!(i = ot_arena_alloc(m->instr_arena, sizeof *i, 64)))
        return ot_error(OT_ERR_OUT_OF_MEMORY, "instruction: out of memory");
    memset(i, 0, sizeof *i);
    i->opcode = op;
    i->shape = shape;
    if (hint && hint->has_layout && hint->kind == OT_IR_ARRAY && shape.kind == OT_IR_ARRAY) {
        i->shape.has_layout = true;
        memcpy(i->shape.minor_to_major, hint->minor_to_major, sizeof i->shape.minor_to_major);
    }
    if (!(flags & IR_SHAPE_KNOWN) && hint && hint->kind == OT_IR_TUPLE && shape.kind == OT_IR_TUPLE)
        OT_CHECK(ir_shape_copy(m, hint, &i->shape)); /* keeps element layouts (equal structure) */
    if (noperands) {
        i->operands = ir_memdup(m, operands, (size_t)noperands * sizeof *operands);
        if (!i->operands) return ot_error(OT_ERR_OUT_OF_MEMORY, "instruction: out of memory");
    }
    i->noperands = noperands;
    if (ncalled) {
        i->called = ir_memdup(m, called, (size_t)ncalled * sizeof *called);
        if (!i->called) return ot_error(OT_ERR_OUT_OF_MEMORY, "instruction: out of memory");
    }
    i->ncalled = ncalled;
    if (flags & IR_ATTRS_SHARED) {
        i->attrs = attrs;
    } else if ((i->attrs = attrs_shared(attrs)) != NULL) {
        /* a shared constant: nothing to copy */
    } else if (flags & IR_COPY_ATTRS) {
        int rank = shape.kind == OT_IR_ARRAY ? shape.array.rank : 0;
        ot_attrs t;
        OT_CHECK(ir_attrs_copy(m, op, rank, attrs, &t));
        i->attrs = attrs_intern(m, &t);
    } else {
        i->attrs = attrs_intern(m, attrs);
    }
    if (!i->attrs) return ot_error(OT_ERR_OUT_OF_MEMORY, "instruction: out of memory");
    /* a made name "<opcode>.<id>" is free when no explicit name ends in a number as large as
     * the id: ids skip ahead past such names (unless that would leave a gap much larger than
     * the module, which only a name like "x.999999999999" asks for) */
    if (!name && m->next_id <= m->name_suffix_max &&
        m->name_suffix_max - m->next_id < ((int64_t)1 << 20) + m->ninstrs)
        m->next_id = m->name_suffix_max + 1;
    i->id = m->next_id;
    ot_status s;
    if (name) {
        i->name = ir_strndup(m, name, name_len);
        if (!i->name) return ot_error(OT_ERR_OUT_OF_MEMORY, "instruction: out of memory");
        s = ir_comp_name_insert(c, i->name, name_len, i, (flags & IR_NAME_UNIQUE) != 0);
        if (s == OT_OK) note_name(m, i->name, name_len);
    } else {
        /* "<opcode>.<id>", else the first free "<opcode>.<id>.<k>" (k = 1, 2, ...): one probe
         * of the index per candidate, the insert itself */
        char buf[64];
        size_t base = ir_name_puts(buf, sizeof buf, 0, ot_opcode_name(op), SIZE_MAX);
        base = ir_name_puts(buf, sizeof buf, base, ".", 1);
        base = ir_name_putd(buf, sizeof buf, base, i->id);
        bool fresh = i->id > m->name_suffix_max;
        for (int k = 0;; k++) {
            size_t nlen = base;
            if (k) {
                nlen = ir_name_puts(buf, sizeof buf, nlen, ".", 1);
                nlen = ir_name_putd(buf, sizeof buf, nlen, k);
            }
            i->name = ir_strndup(m, buf, nlen);
            if (!i->name) return ot_error(OT_ERR_OUT_OF_MEMORY, "instruction: out of memory");
            s = ir_comp_name_insert(c, i->name, nlen, i, fresh);
            if (s != OT_ERR_ALREADY_EXISTS) {
                if (s == OT_OK && k) note_name(m, i->name, nlen);
                break;
            }
        }
    }
    if (s == OT_ERR_ALREADY_EXISTS)
        return ot_error(OT_ERR_ALREADY_EXISTS, "instruction name '%s' is already used in %s",
                        i->name, c->name);
    if (s != OT_OK) return s;
    if (op == OT_OP_PARAMETER && (s = params_set(c, attrs->index, i)) != OT_OK) {
        ir_comp_name_del(c, i->name);
        return s;
    }
    /* users: an operand used in several slots records this user once (ir_users_add appends, so
     * an operand already handled has i as its last user) */
    for (int k = 0; k < noperands; k++) {
        const ot_instr *o = operands[k];
        if (o->nusers && o->users[o->nusers - 1] == i) continue;
        s = ir_users_add(operands[k], i);
        if (s != OT_OK) {
            for (int j = 0; j < k; j++) ir_users_remove(operands[j], i);
            ir_comp_name_del(c, i->name);
            if (op == OT_OP_PARAMETER) c->params[attrs->index] = NULL;
            return s;
        }
    }
    m->next_id++;
    edited(c);
    list_append(c, i);
    m->ninstrs++;
    if (op == OT_OP_CALL) m->ncalls++;
    *out = i;
    return OT_OK;
}

ot_status ir_param_known(ot_computation *c, int64_t number, const ot_ir_shape *shape,
                         ot_instr **out) {
    ot_attrs a = {0};
    a.index = number;
    const ot_attrs *sh = attrs_shared(&a);
    return ir_create(c, OT_OP_PARAMETER, NULL, 0, sh ? sh : &a, NULL, 0, shape, NULL, 0,
                     IR_SHAPE_KNOWN | (sh ? IR_ATTRS_SHARED : 0), out);
}

ot_instr *ot_build(ot_computation *c, ot_opcode op, ot_instr *const *operands, int noperands,
                   const ot_attrs *attrs, ot_computation *const *called, int ncalled,
                   const ot_ir_shape *hint, const char *name) {
    if (!c || c->module->err) return NULL;
    ot_module *m = c->module;
    for (int k = 0; k < noperands; k++)
        if (!operands || !operands[k]) {
            ir_fail(m, OT_ERR_INVALID_ARGUMENT, "%s: operand %d is NULL", ot_opcode_name(op), k);
            return NULL;
        }
    for (int k = 0; k < ncalled; k++)
        if (!called || !called[k]) {
            ir_fail(m, OT_ERR_INVALID_ARGUMENT, "%s: called computation %d is NULL",
                    ot_opcode_name(op), k);
            return NULL;
        }
    char uniq[256];
    if (name && ir_comp_find(c, name, strlen(name))) {
        for (int64_t k = 1;; k++) {
            snprintf(uniq, sizeof uniq, "%.200s.%lld", name, (long long)k);
            if (!ir_comp_find(c, uniq, strlen(uniq))) break;
        }
        name = uniq;
    }
    ot_instr *i;
    ot_status s = ir_create(c, op, operands, noperands, attrs, called, ncalled, hint, name,
                            name ? strlen(name) : 0, IR_COPY_ATTRS, &i);
    if (s != OT_OK) {
        ir_record(m, s);
        return NULL;
    }
    return i;
}

/* ---------------------------------------------------------------------------------------------
 * Edits
 * ------------------------------------------------------------------------------------------- */

static bool has_operand(const ot_instr *u, const ot_instr *x) {
    for (int k = 0; k < u->noperands; k++)
        if (u->operands[k] == x) return true;
    return false;
}

static char *shape_str(const ot_ir_shape *s, char *buf, size_t n) {
    ot_ir_shape_format(s, buf, n);
    return buf;
}

ot_status ot_instr_replace_all_uses(ot_instr *from, ot_instr *to) {
    if (!from || !to) return ot_error(OT_ERR_INVALID_ARGUMENT, "replace all uses: NULL");
    if (from == to) return OT_OK;
    if (from->dead_ || to->dead_ || from->parent != to->parent)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "replace all uses of %s with %s: both must be live instructions of one "
                        "computation",
                        from->name, to->name);
    if (!ot_ir_shape_equal(&from->shape, &to->shape)) {
        char a[256], b[256];
        return ot_error(OT_ERR_SHAPE_MISMATCH,
                        "replace all uses of %s %s with %s %s: shapes differ", from->name,
                        shape_str(&from->shape, a, sizeof a), to->name,
                        shape_str(&to->shape, b, sizeof b));
    }
    edited(to->parent);
    /* reserve room first so that a failure changes nothing; the array grows geometrically like
     * ir_users_add's (merging many duplicates into one instruction one by one, as CSE does, would
     * otherwise leave an abandoned arena array per merge: quadratic memory) */
    int need = to->nusers + from->nusers;
    if (need > to->users_cap_) {
        int ncap = to->users_cap_ > 2 ? to->users_cap_ : 2;
        while (ncap < need) ncap = ncap > INT32_MAX / 2 ? need : ncap * 2;
        ot_instr **nu =
            ot_arena_alloc(to->parent->module->users_arena, (size_t)ncap * sizeof *nu, 8);
        if (!nu) return ot_error(OT_ERR_OUT_OF_MEMORY, "replace all uses: out of memory");
        if (to->nusers) memcpy(nu, to->users, (size_t)to->nusers * sizeof *nu);
        to->users = nu;
        to->users_cap_ = ncap;
    }
    for (int k = 0; k < from->nusers; k++) {
        ot_instr *u = from->users[k];
        bool had = has_operand(u, to);
        if (u == to) continue; /* `to` uses `from` (e.g. to = f(from)): keep that edge */
        for (int j = 0; j < u->noperands; j++)
            if (u->operands[j] == from) u->operands[j] = to;
        if (!had) {
            ot_status s = ir_users_add(to, u);
            if (s != OT_OK) return s; /* only the user index can fail here: out of memory */
        }
    }
    /* from keeps `to` as its only possible user */
    bool to_uses_from = ir_users_contains(from, to);
    uidx_release(from);
    from->nusers = 0;
    if (to_uses_from) from->users[from->nusers++] = to;
    ot_computation *c = from->parent;
    if (c->root == from) c->root = to;
    return OT_OK;
}

ot_status ot_instr_replace_operand(ot_instr *user, int i, ot_instr *to) {
    if (!user || !to || i < 0 || i >= user->noperands)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "replace operand: bad arguments");
    ot_instr *from = user->operands[i];
    if (from == to) return OT_OK;
    if (to->dead_ || to->parent != user->parent)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "replace operand %d of %s: %s is not a live instruction of %s", i,
                        user->name, to->name, user->parent->name);
    if (to == user) return ot_error(OT_ERR_INVALID_ARGUMENT, "replace operand: would be a cycle");
    if (!ot_ir_shape_equal(&from->shape, &to->shape)) {
        char a[256], b[256];
        return ot_error(OT_ERR_SHAPE_MISMATCH, "replace operand %d of %s: %s is %s, %s is %s", i,
                        user->name, from->name, shape_str(&from->shape, a, sizeof a), to->name,
                        shape_str(&to->shape, b, sizeof b));
    }
    if (!has_operand(user, to)) OT_CHECK(ir_users_add(to, user));
    user->operands[i] = to;
    edited(user->parent);
    if (!has_operand(user, from)) ir_users_remove(from, user);
    return OT_OK;
}

static ot_status removed_grow(ot_module *m) {
    int64_t ncap = m->removed_cap ? m->removed_cap * 2 : 256;
    ot_instr **nr = ot_realloc(m->removed, (size_t)ncap * sizeof *nr);
    if (!nr) return OT_ERR_OUT_OF_MEMORY;
    m->removed = nr;
    m->removed_cap = ncap;
    return OT_OK;
}

static void unlink_instr(ot_instr *i) {
    ot_computation *c = i->parent;
    edited(c);
    /* an operand in several slots lists i once: the first removal takes it, the others find
     * nothing (no scan of the earlier slots: quadratic for a concatenate of many operands) */
    for (int k = 0; k < i->noperands; k++) ir_users_remove(i->operands[k], i);
    list_unlink(c, i);
    ir_comp_name_del(c, i->name);
    users_free(i);
    c->module->ninstrs--;
    if (i->opcode == OT_OP_CALL) c->module->ncalls--;
    i->dead_ = true;
    i->prev = i->next = NULL;
    /* kept for reuse after the next ir_module_recycle (out of memory: simply not reused) */
    ot_module *m = c->module;
    if (m->nremoved < m->removed_cap || removed_grow(m) == OT_OK) m->removed[m->nremoved++] = i;
}

ot_status ir_instr_move(ot_instr *x, ot_computation *dst) {
    ot_computation *c = x->parent;
    if (x->dead_ || x->opcode == OT_OP_PARAMETER || dst == c || dst->module != c->module)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "move %s: a live non-parameter instruction into another computation of "
                        "its module",
                        x->name);
    /* the name first: it is the only step that can fail, and a failure changes nothing */
    size_t len = strlen(x->name);
    const char *name = x->name;
    if (ir_comp_find(dst, name, len)) {
        char buf[256];
        for (int64_t k = 1;; k++) {
            int n = snprintf(buf, sizeof buf, "%.200s.%lld", x->name, (long long)k);
            if (!ir_comp_find(dst, buf, (size_t)n)) {
                len = (size_t)n;
                break;
            }
        }
        if (!(name = ir_strndup(c->module, buf, len)))
            return ot_error(OT_ERR_OUT_OF_MEMORY, "move %s: out of memory", x->name);
    }
    OT_CHECK(ir_comp_name_insert(dst, name, len, x, false));
    if (name != x->name) note_name(c->module, name, len);
    ir_comp_name_del(c, x->name);
    x->name = name;
    list_unlink(c, x);
    list_append(dst, x);
    edited(c);
    dst->edits_++; /* (one change of the module) */
    return OT_OK;
}

ot_status ir_instr_map_operands(ot_instr *y, ot_instr *(*map)(void *ctx, const ot_instr *o),
                                void *ctx) {
    int n = y->noperands;
    if (n == 0) return OT_OK;
    ot_module *m = y->parent->module;
    ot_instr *small[2][8], **old = small[0], **neu = small[1];
    if (n > 8) {
        old = ot_malloc((size_t)n * sizeof *old);
        neu = ot_malloc((size_t)n * sizeof *neu);
    }
    ot_status s =
        old && neu ? OT_OK : ot_error(OT_ERR_OUT_OF_MEMORY, "map operands: out of memory");
    bool any = false;
    for (int q = 0; q < n && s == OT_OK; q++) {
        ot_instr *o = y->operands[q], *t = map(ctx, o);
        old[q] = o;
        neu[q] = t ? t : o;
        if (neu[q] == o) continue;
        any = true;
        if (t->dead_ || t->parent != y->parent || t == y)
            s = ot_error(OT_ERR_INVALID_ARGUMENT,
                         "map operands of %s: %s is not another live instruction of %s", y->name,
                         t->name, y->parent->name);
        else if (!ot_ir_shape_equal(&o->shape, &t->shape))
            s = ot_error(OT_ERR_SHAPE_MISMATCH, "map operands of %s: %s and %s differ in shape",
                         y->name, o->name, t->name);
    }
    if (s != OT_OK || !any) {
        if (old != small[0]) ot_free(old);
        if (neu != small[1]) ot_free(neu);
        return s;
    }
    /* stamps: `was` marks the operands before, `now` those after; users lists change once per
     * distinct instruction, without scanning the operand list per slot */
    uint64_t base = ir_visit_stamps(m, 3), was = base + 1, added = base + 2, now = base + 3;
    for (int q = 0; q < n; q++) old[q]->visit_ = was;
    for (int q = 0; q < n && s == OT_OK; q++) {
        ot_instr *t = neu[q];
        if (t == old[q] || t->visit_ == was || t->visit_ == added) continue;
        s = ir_users_add(t, y);
        t->visit_ = added;
    }
    if (s != OT_OK) {
        /* undo: nothing else has changed yet */
        for (int q = 0; q < n; q++)
            if (neu[q]->visit_ == added) {
                ir_users_remove(neu[q], y);
                neu[q]->visit_ = 0;
            }
        if (old != small[0]) ot_free(old);
        if (neu != small[1]) ot_free(neu);
        return s;
    }
    for (int q = 0; q < n; q++) neu[q]->visit_ = now;
    for (int q = 0; q < n; q++) {
        if (old[q]->visit_ == now) continue; /* still an operand (or already dropped) */
        ir_users_remove(old[q], y);
        old[q]->visit_ = now;
    }
    memcpy(y->operands, neu, (size_t)n * sizeof *neu);
    edited(y->parent);
    if (old != small[0]) ot_free(old);
    if (neu != small[1]) ot_free(neu);
    return OT_OK;
}

int64_t ir_module_call_count(const ot_module *m) {
    return m->ncalls;
}

uint64_t ir_visit_stamps(ot_module *m, uint64_t k) {
    uint64_t base = m->epoch;
    m->epoch += k;
    return base;
}

void ir_module_recycle(ot_module *m) {
    for (int64_t k = 0; k < m->nremoved; k++) {
        m->removed[k]->next = m->free_instrs;
        m->free_instrs = m->removed[k];
    }
    m->nremoved = 0;
}

ot_status ot_instr_remove(ot_instr *i) {
    if (!i || i->dead_) return ot_error(OT_ERR_INVALID_ARGUMENT, "remove: not a live instruction");
    if (i->nusers)
        return ot_error(OT_ERR_FAILED_PRECONDITION, "remove %s: it still has %d user(s), e.g. %s",
                        i->name, i->nusers, i->users[0]->name);
    if (i->parent->root == i)
        return ot_error(OT_ERR_FAILED_PRECONDITION, "remove %s: it is the root of %s", i->name,
                        i->parent->name);
    if (i->opcode == OT_OP_PARAMETER)
        return ot_error(OT_ERR_FAILED_PRECONDITION, "remove %s: parameters cannot be removed",
                        i->name);
    unlink_instr(i);
    return OT_OK;
}

ot_status ot_instr_remove_with_dead_operands(ot_instr *i) {
    OT_CHECK(ot_instr_remove(i));
    /* iterative worklist over the operands that lost their last user */
    int cap = 16, n = 0;
    ot_instr **stack = ot_malloc((size_t)cap * sizeof *stack);
    if (!stack) return ot_error(OT_ERR_OUT_OF_MEMORY, "remove: out of memory");
    for (int k = 0; k < i->noperands; k++) {
        if (n == cap) {
            ot_instr **ns = ot_realloc(stack, (size_t)(cap *= 2) * sizeof *ns);
            if (!ns) {
                ot_free(stack);
                return ot_error(OT_ERR_OUT_OF_MEMORY, "remove: out of memory");
            }
            stack = ns;
        }
        stack[n++] = i->operands[k];
    }
    while (n) {
        ot_instr *x = stack[--n];
        if (x->dead_ || x->nusers || x->opcode == OT_OP_PARAMETER || x->parent->root == x ||
            ot_instr_has_side_effect(x))
            continue;
        unlink_instr(x);
        for (int k = 0; k < x->noperands; k++) {
            if (n == cap) {
                ot_instr **ns = ot_realloc(stack, (size_t)(cap *= 2) * sizeof *ns);
                if (!ns) {
                    ot_free(stack);
                    return ot_error(OT_ERR_OUT_OF_MEMORY, "remove: out of memory");
                }
                stack = ns;
            }
            stack[n++] = x->operands[k];
        }
    }
    ot_free(stack);
    return OT_OK;
}

ot_status ot_instr_set_metadata(ot_instr *i, const ot_metadata *md) {
    ot_module *m = i->parent->module;
    if (!md) {
        i->metadata = NULL;
        return OT_OK;
    }
    ot_metadata *d = ir_alloc(m, sizeof *d);
    if (!d) return ot_error(OT_ERR_OUT_OF_MEMORY, "metadata: out of memory");
    *d = *md;
    if ((md->op_type && !(d->op_type = ir_strdup(m, md->op_type))) ||
        (md->op_name && !(d->op_name = ir_strdup(m, md->op_name))) ||
        (md->source_file && !(d->source_file = ir_strdup(m, md->source_file))))
        return ot_error(OT_ERR_OUT_OF_MEMORY, "metadata: out of memory");
    i->metadata = d;
    return OT_OK;
}

ot_status ot_instr_clone(ot_computation *dst, const ot_instr *src, ot_instr *const *new_operands,
                         const char *name, ot_instr **out) {
    *out = NULL;
    if (!dst || !src || dst->module != src->parent->module)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "clone: instruction and destination differ in module");
    char buf[256];
    if (!name) {
        size_t base = ir_name_puts(buf, sizeof buf, 0, src->name, 200);
        base = ir_name_puts(buf, sizeof buf, base, ".clone", SIZE_MAX);
        size_t len = base;
        for (int k = 1; ir_comp_find(dst, buf, len); k++) {
            len = ir_name_puts(buf, sizeof buf, base, ".", 1);
            len = ir_name_putd(buf, sizeof buf, len, k);
        }
        name = buf;
    }
    if (src->opcode == OT_OP_PARAMETER && dst->params_cap_ > src->attrs->index &&
        dst->params[src->attrs->index])
        return ot_error(OT_ERR_ALREADY_EXISTS, "clone %s: parameter %lld exists in %s", src->name,
                        (long long)src->attrs->index, dst->name);
    /* operands of the original's shapes (and the same called computations): the original's
     * shape is what inference would give */
    unsigned flags = IR_SHAPE_KNOWN;
    for (int k = 0; k < src->noperands; k++)
        if (!new_operands[k] ||
            !ot_ir_shape_equal(&new_operands[k]->shape, &src->operands[k]->shape))
            flags = 0;
    ot_instr *i;
    OT_CHECK(ir_create(dst, src->opcode, new_operands, src->noperands, src->attrs, src->called,
                       src->ncalled, &src->shape, name, strlen(name), flags | IR_ATTRS_SHARED, &i));
    i->metadata = src->metadata;
    i->raw = src->raw;
    i->nraw = src->nraw;
    *out = i;
    return OT_OK;
}

/* Visit state of the post-order walk: in the instructions' stamps, or, when `ids` is given, in
 * that array indexed by id (0 unvisited, 1 on the stack, 2 done), which leaves the module
 * untouched. */
typedef struct po_state {
    uint8_t *ids;
    uint64_t on, done;
} po_state;

static inline int po_get(const po_state *ps, const ot_instr *i) {
    if (ps->ids) return ps->ids[i->id];
    return i->visit_ == ps->done ? 2 : i->visit_ == ps->on ? 1 : 0;
}

static inline void po_set(const po_state *ps, ot_instr *i, int v) {
    if (ps->ids)
        ps->ids[i->id] = (uint8_t)v;
    else
        i->visit_ = v == 2 ? ps->done : ps->on;
}

static ot_status post_order_walk(const ot_computation *c, const po_state *ps, ot_instr ***out,
                                 int64_t *n) {
    *out = NULL;
    *n = 0;
    int64_t cnt = c->ninstrs;
    ot_instr **order = ot_malloc((size_t)(cnt ? cnt : 1) * sizeof *order);
    /* DFS stack of (instr, next operand index) */
    struct frame {
        ot_instr *i;
        int k;
    } *st = ot_malloc((size_t)(cnt ? cnt : 1) * sizeof *st);
    ot_status s = OT_OK;
    if (!order || !st) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "post order: out of memory");
        goto out;
    }
    int64_t no = 0;
    for (ot_instr *r = c->first; r; r = r->next) {
        if (po_get(ps, r) == 2) continue;
        int64_t sp = 0;
        st[sp].i = r;
        st[sp].k = 0;
        sp++;
        po_set(ps, r, 1);
        while (sp) {
            struct frame *f = &st[sp - 1];
            if (f->k < f->i->noperands) {
                ot_instr *o = f->i->operands[f->k++];
                int v = po_get(ps, o);
                if (v == 2) continue;
                if (v == 1) {
                    s = ot_error(OT_ERR_INVALID_ARGUMENT, "computation %s has a cycle through %s",
                                 c->name, o->name);
                    goto out;
                }
                if (o->parent != c || o->dead_ || sp >= cnt) {
                    s = ot_error(OT_ERR_INTERNAL,
                                 "post order: %s reaches %s, which is not a live instruction of %s",
                                 f->i->name, o->name, c->name);
                    goto out;
                }
                po_set(ps, o, 1);
                st[sp].i = o;
                st[sp].k = 0;
                sp++;
            } else {
                po_set(ps, f->i, 2);
                if (no >= cnt) {
                    s = ot_error(OT_ERR_INTERNAL, "post order: more instructions than %s lists",
                                 c->name);
                    goto out;
                }
                order[no++] = f->i;
                sp--;
            }
        }
    }
    *out = order;
    *n = no;
    order = NULL;
out:
    ot_free(order);
    ot_free(st);
    return s;
}

ot_status ot_computation_post_order(const ot_computation *c, ot_instr ***out, int64_t *n) {
    ot_module *m = c->module;
    po_state ps = {NULL, m->epoch + 1, m->epoch + 2}; /* older stamps read as unvisited */
    m->epoch += 2;
    return post_order_walk(c, &ps, out, n);
}

uint64_t ir_module_edits(const ot_module *m) {
    return m->edits;
}

void ir_module_set_pass_cache(ot_module *m, void *p, void (*free_fn)(void *)) {
    if (m->pass_cache_free && m->pass_cache != p) m->pass_cache_free(m->pass_cache);
    m->pass_cache = p;
    m->pass_cache_free = p ? free_fn : NULL;
}

void *ir_module_pass_cache(const ot_module *m) {
    return m->pass_cache;
}

ot_status ot_module_post_order(const ot_module *m, ot_computation ***out, int *n) {
    *out = NULL;
    *n = 0;
    int cnt = m->ncomps;
    ot_computation **order = ot_malloc((size_t)(cnt ? cnt : 1) * sizeof *order);
    signed char *state = ot_calloc((size_t)(cnt ? cnt : 1), 1);
    struct cframe {
        ot_computation *c;
        ot_instr *i;
        int k;
    } *st = ot_malloc((size_t)(cnt ? cnt : 1) * sizeof *st);
    ir_ptr_map idx = {0};
    ot_status s = OT_OK;
    if (!order || !state || !st) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "module post order: out of memory");
        goto out;
    }
    for (int k = 0; k < cnt; k++)
        if ((s = ir_ptr_map_put(&idx, m->comps[k], (void *)(intptr_t)(k + 1))) != OT_OK) goto out;
    int no = 0;
    for (int r = 0; r < cnt; r++) {
        if (state[r]) continue;
        int sp = 0;
        st[sp++] = (struct cframe){m->comps[r], m->comps[r]->first, 0};
        state[r] = 1;
        while (sp) {
            struct cframe *f = &st[sp - 1];
            ot_computation *next = NULL;
            while (f->i && !next) {
                if (f->k < f->i->ncalled) {
                    next = f->i->called[f->k++];
                } else {
                    f->i = f->i->next;
                    f->k = 0;
                }
            }
            if (next) {
                intptr_t j = (intptr_t)ir_ptr_map_get(&idx, next) - 1;
                if (j < 0) {
                    s = ot_error(OT_ERR_INVALID_ARGUMENT,
                                 "computation %s calls %s, which is not "
                                 "in the module",
                                 f->c->name, next->name);
                    goto out;
                }
                if (state[j] == 1) {
                    s = ot_error(OT_ERR_INVALID_ARGUMENT, "recursive call: %s calls %s", f->c->name,
                                 next->name);
                    goto out;
                }
                if (state[j] == 0) {
                    state[j] = 1;
                    st[sp++] = (struct cframe){next, next->first, 0};
                }
            } else {
                intptr_t j = (intptr_t)ir_ptr_map_get(&idx, f->c) - 1;
                state[j] = 2;
                order[no++] = f->c;
                sp--;
            }
        }
    }
    *out = order;
    *n = no;
    order = NULL;
out:
    ot_free(order);
    ot_free(state);
    ot_free(st);
    ir_ptr_map_free(&idx);
    return s;
}

/* Old -> new instructions of a clone: an array indexed by instruction id when the whole module is
 * copied (ids are below the module's next id), else a hash map. */
typedef struct clone_map {
    ot_instr **byid;
    ir_ptr_map ptr;
    /* a copy into another module: copies holding each distinct attribute set copied so far,
     * by content (open addressing; the sets of a module repeat: a broadcast's dimensions, a
     * reduce's, scalar constants) */
    ot_instr **attrs_tab;
    uint64_t attrs_cap, attrs_n;
} clone_map;

/* The copy made so far whose attribute set equals src's (same opcode and rank, every field,
 * arrays by content), or NULL; *slot gets where src's copy would go. */
static ot_instr *attrs_seen(clone_map *x, const ot_instr *src, uint64_t *slot) {
    if (x->attrs_n * 2 >= x->attrs_cap) {
        uint64_t ncap = x->attrs_cap ? x->attrs_cap * 2 : 1024;
        ot_instr **nt = ot_calloc(ncap, sizeof *nt);
        if (!nt) return NULL; /* (then copied, as without the table) */
        for (uint64_t k = 0; k < x->attrs_cap; k++) {
            ot_instr *r = x->attrs_tab[k];
            if (!r) continue;
            uint64_t j = ot_instr_attrs_hash(r) & (ncap - 1);
            while (nt[j]) j = (j + 1) & (ncap - 1);
            nt[j] = r;
        }
        ot_free(x->attrs_tab);
        x->attrs_tab = nt;
        x->attrs_cap = ncap;
    }
    int rank = src->shape.kind == OT_IR_ARRAY ? src->shape.array.rank : -1;
    uint64_t j = ot_instr_attrs_hash(src) & (x->attrs_cap - 1);
    for (ot_instr *r; (r = x->attrs_tab[j]); j = (j + 1) & (x->attrs_cap - 1)) {
        int rr = r->shape.kind == OT_IR_ARRAY ? r->shape.array.rank : -1;
        /* (replica groups: absent and empty compare equal, but print differently) */
        if (rr == rank && (!r->attrs->groups) == (!src->attrs->groups) &&
            ot_instr_attrs_equal(src, r))
            return r;
    }
    *slot = j;
    return NULL;
}

static inline ot_instr *clone_map_get(const clone_map *x, const ot_instr *i) {
    return x->byid ? x->byid[i->id] : ir_ptr_map_get(&x->ptr, i);
}

static inline ot_status clone_map_put(clone_map *x, const ot_instr *i, ot_instr *ni) {
    if (!x->byid) return ir_ptr_map_put(&x->ptr, i, ni);
    x->byid[i->id] = ni;
    return OT_OK;
}

/* Copies src's instructions into dst (empty, same or other module) in post order (given, or
 * found here), or, with `lists`, in list order, which is OT_ERR_FAILED_PRECONDITION as soon as an
 * operand or called computation has no copy yet (the list is not in topological order). map
 * receives old -> new. Called computations are looked up in cmap (old -> new) when given. */
static ot_status clone_body(const ot_computation *src, ot_computation *dst, clone_map *map,
                            const ir_ptr_map *cmap, ot_instr **given, int64_t given_n, bool lists) {
    ot_instr **order = given;
    int64_t n = lists ? src->ninstrs : given_n;
    if (!given && !lists) OT_CHECK(ot_computation_post_order(src, &order, &n));
    const ot_instr *li = src->first;
    ot_status s = OT_OK;
    ot_module *dm = dst->module;
    bool other = dm != src->module;
    ot_instr *ops_small[16];
    ot_computation *called_small[16];
    for (int64_t k = 0; k < n && s == OT_OK; k++) {
        const ot_instr *i = lists ? li : order[k];
        if (lists) li = li->next;
        ot_instr **ops = ops_small;
        ot_computation **called = called_small;
        if (i->noperands > 16) ops = ot_malloc((size_t)i->noperands * sizeof *ops);
        if (i->ncalled > 16) called = ot_malloc((size_t)i->ncalled * sizeof *called);
        if (!ops || !called) {
            s = ot_error(OT_ERR_OUT_OF_MEMORY, "clone: out of memory");
        } else {
            bool later = false;
            for (int j = 0; j < i->noperands; j++)
                later |= !(ops[j] = clone_map_get(map, i->operands[j]));
            for (int j = 0; j < i->ncalled; j++) {
                called[j] = i->called[j];
                if (cmap) {
                    ot_computation *nc = ir_ptr_map_get(cmap, i->called[j]);
                    if (nc) called[j] = nc;
                    later |= !nc;
                }
            }
            if (lists && later)
                s = ot_error(OT_ERR_FAILED_PRECONDITION,
                             "clone: %s in %s precedes an operand or a called computation", i->name,
                             src->name);
            ot_ir_shape shape = i->shape;
            ot_instr *ni = NULL;
            if (s == OT_OK && other) s = ir_shape_copy(dm, &i->shape, &shape);
            /* into another module: an attribute set copied before is shared, not copied again */
            const ot_attrs *attrs = i->attrs;
            unsigned share = other ? IR_COPY_ATTRS : IR_ATTRS_SHARED;
            uint64_t slot = UINT64_MAX;
            if (s == OT_OK && other && map->byid && !attrs_shared(i->attrs)) {
                ot_instr *r = attrs_seen(map, i, &slot);
                if (r) {
                    attrs = r->attrs;
                    share = IR_ATTRS_SHARED;
                }
            }
            if (s == OT_OK)
                /* a copy of a built (so inferred) instruction over copies of its operands and
                 * of its called computations: its shape needs no inferring again */
                s = ir_create(dst, i->opcode, ops, i->noperands, attrs, called, i->ncalled, &shape,
                              i->name, strlen(i->name), IR_SHAPE_KNOWN | IR_NAME_UNIQUE | share,
                              &ni);
            if (s == OT_OK && slot != UINT64_MAX) {
                map->attrs_tab[slot] = ni;
                map->attrs_n++;
            }
            if (s == OT_OK && other && i->metadata) s = ot_instr_set_metadata(ni, i->metadata);
            if (s == OT_OK && !other) ni->metadata = i->metadata;
            if (s == OT_OK && i->nraw) {
                if (other) {
                    ot_raw_attr *r = ir_alloc(dm, (size_t)i->nraw * sizeof *r);
                    if (!r) s = ot_error(OT_ERR_OUT_OF_MEMORY, "clone: out of memory");
                    for (int j = 0; s == OT_OK && j < i->nraw; j++) {
                        r[j].name = ir_strdup(dm, i->raw[j].name);
                        r[j].value = ir_strdup(dm, i->raw[j].value);
                        if (!r[j].name || !r[j].value)
                            s = ot_error(OT_ERR_OUT_OF_MEMORY, "clone: out of memory");
                    }
                    ni->raw = r;
                } else {
                    ni->raw = i->raw;
                }
                ni->nraw = i->nraw;
            }
            if (s == OT_OK) s = clone_map_put(map, i, ni);
        }
        if (ops != ops_small) ot_free(ops);
        if (called != called_small) ot_free(called);
    }
    if (s == OT_OK && src->root) dst->root = clone_map_get(map, src->root);
    if (!given) ot_free(order);
    return s;
}

ot_status ot_computation_clone(const ot_computation *src, const char *suffix,
                               ot_computation **out) {
    *out = NULL;
    ot_module *m = src->module;
    char buf[512];
    snprintf(buf, sizeof buf, "%.400s%s", src->name, suffix ? suffix : ".clone");
    for (int k = 1; ir_names_get(&m->comp_names, buf, strlen(buf)); k++)
        snprintf(buf, sizeof buf, "%.400s%s.%d", src->name, suffix ? suffix : ".clone", k);
    ot_computation *c;
    OT_CHECK(ir_add_computation(m, buf, strlen(buf), &c));
    clone_map map = {0};
    ot_status s = clone_body(src, c, &map, NULL, NULL, 0, false);
    ir_ptr_map_free(&map.ptr);
    if (s != OT_OK) {
        /* an unused, partial computation: remove it again */
        for (ot_instr *i = c->last, *p; i; i = p) {
            p = i->prev;
            users_free(i);
        }
        c->first = c->last = NULL;
        c->root = NULL;
        ot_module_remove_computation(m, c);
        return s;
    }
    *out = c;
    return OT_OK;
}

ot_status ot_module_remove_computation(ot_module *m, ot_computation *c) {
    int idx = -1;
    for (int k = 0; k < m->ncomps; k++)
        if (m->comps[k] == c) idx = k;
    if (idx < 0) return ot_error(OT_ERR_NOT_FOUND, "remove computation: not in module");
    if (m->entry == c)
        return ot_error(OT_ERR_FAILED_PRECONDITION, "remove computation %s: it is the entry",
                        c->name);
    for (int k = 0; k < m->ncomps; k++)
        for (ot_instr *i = m->comps[k]->first; i; i = i->next)
            for (int j = 0; j < i->ncalled; j++)
                if (i->called[j] == c && m->comps[k] != c)
                    return ot_error(OT_ERR_FAILED_PRECONDITION,
                                    "remove computation %s: %s calls it", c->name, i->name);
    m->ninstrs -= c->ninstrs;
    comp_free(c);
    ir_names_del(&m->comp_names, c->name);
    memmove(m->comps + idx, m->comps + idx + 1, (size_t)(m->ncomps - idx - 1) * sizeof *m->comps);
    m->ncomps--;
    return OT_OK;
}

ot_status ot_module_remove_unreachable(ot_module *m, int *removed) {
    if (removed) *removed = 0;
    if (!m || !m->entry)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "remove unreachable: no module or no entry");
    ir_ptr_map live = {0};
    ot_computation **stack = ot_malloc((size_t)(m->ncomps ? m->ncomps : 1) * sizeof *stack);
    ot_status s = stack ? ir_ptr_map_put(&live, m->entry, m->entry)
                        : ot_error(OT_ERR_OUT_OF_MEMORY, "remove unreachable: out of memory");
    int sp = 0;
    if (s == OT_OK) stack[sp++] = m->entry;
    while (sp && s == OT_OK) {
        ot_computation *c = stack[--sp];
        for (ot_instr *i = c->first; i && s == OT_OK; i = i->next)
            for (int k = 0; k < i->ncalled && s == OT_OK; k++) {
                ot_computation *x = i->called[k];
                if (ir_ptr_map_get(&live, x)) continue;
                s = ir_ptr_map_put(&live, x, x);
                if (s == OT_OK) stack[sp++] = x; /* each computation is pushed once */
            }
    }
    if (s == OT_OK) {
        int kept = 0, gone = 0;
        for (int k = 0; k < m->ncomps; k++) {
            ot_computation *c = m->comps[k];
            if (ir_ptr_map_get(&live, c)) {
                m->comps[kept++] = c;
                continue;
            }
            m->ninstrs -= c->ninstrs;
            comp_free(c);
            ir_names_del(&m->comp_names, c->name);
            gone++;
        }
        m->ncomps = kept;
        if (removed) *removed = gone;
    }
    ir_ptr_map_free(&live);
    ot_free(stack);
    return s;
}

ot_status ir_module_orders_build(const ot_module *m, ir_module_orders *o) {
    memset(o, 0, sizeof *o);
    OT_CHECK(ot_module_post_order(m, &o->comps, &o->ncomps));
    int n = o->ncomps ? o->ncomps : 1;
    o->po = ot_calloc((size_t)n, sizeof *o->po);
    o->npo = ot_calloc((size_t)n, sizeof *o->npo);
    ot_status s = o->po && o->npo ? OT_OK : ot_error(OT_ERR_OUT_OF_MEMORY, "orders: out of memory");
    /* visit state by id, so that nothing in m is written (see ir_passes.h) */
    po_state ps = {ot_calloc((size_t)(m->next_id ? m->next_id : 1), 1), 0, 0};
    if (s == OT_OK && !ps.ids) s = ot_error(OT_ERR_OUT_OF_MEMORY, "orders: out of memory");
    for (int k = 0; k < o->ncomps && s == OT_OK; k++)
        s = post_order_walk(o->comps[k], &ps, &o->po[k], &o->npo[k]);
    ot_free(ps.ids);
    if (s != OT_OK) ir_module_orders_free(o);
    return s;
}

const ir_module_orders ir_orders_lists;

void ir_module_orders_free(ir_module_orders *o) {
    for (int k = 0; o->po && k < o->ncomps; k++) ot_free(o->po[k]);
    ot_free(o->po);
    ot_free(o->npo);
    ot_free(o->comps);
    memset(o, 0, sizeof *o);
}

ot_status ir_module_extract(const ot_computation *root, ot_module **out) {
    *out = NULL;
    const ot_module *src = root->module;
    ot_module *m = ot_module_new(src->name);
    if (!m) return OT_ERR_OUT_OF_MEMORY;
    ot_status s = OT_OK;
    ir_ptr_map seen = {0}, cmap = {0};
    clone_map map = {0};
    /* callees first: a depth-first walk over called computations with an explicit stack */
    struct xframe {
        const ot_computation *c;
        const ot_instr *i; /* the next instruction whose callees to visit */
        int j;             /* the next of its called computations */
    } *st = NULL;
    int sp = 0, cap = 0;
    const ot_computation **order = NULL;
    int n = 0, ocap = 0;
    s = ir_ptr_map_put(&seen, root, (void *)1);
    if (s == OT_OK) {
        cap = 16;
        st = ot_malloc((size_t)cap * sizeof *st);
        if (!st)
            s = ot_error(OT_ERR_OUT_OF_MEMORY, "extract: out of memory");
        else
            st[sp++] = (struct xframe){root, root->first, 0};
    }
    while (s == OT_OK && sp > 0) {
        struct xframe *f = &st[sp - 1];
        if (f->i && f->j >= f->i->ncalled) {
            f->i = f->i->next;
            f->j = 0;
            continue;
        }
        if (f->i) {
            const ot_computation *next = f->i->called[f->j++];
            if (ir_ptr_map_get(&seen, next)) continue;
            if ((s = ir_ptr_map_put(&seen, next, (void *)1)) != OT_OK) break;
            if (sp == cap) {
                struct xframe *ns = ot_realloc(st, (size_t)cap * 2 * sizeof *st);
                if (!ns) {
                    s = ot_error(OT_ERR_OUT_OF_MEMORY, "extract: out of memory");
                    break;
                }
                st = ns;
                cap *= 2;
            }
            st[sp++] = (struct xframe){next, next->first, 0};
            continue;
        }
        if (n == ocap) {
            int nc = ocap ? ocap * 2 : 16;
            const ot_computation **no = ot_realloc(order, (size_t)nc * sizeof *order);
            if (!no) {
                s = ot_error(OT_ERR_OUT_OF_MEMORY, "extract: out of memory");
                break;
            }
            order = no;
            ocap = nc;
        }
        order[n++] = f->c;
        sp--;
    }
    for (int k = 0; k < n && s == OT_OK; k++) {
        ot_computation *c;
        s = ir_add_computation(m, order[k]->name, strlen(order[k]->name), &c);
        if (s == OT_OK) s = clone_body(order[k], c, &map, &cmap, NULL, 0, false);
        if (s == OT_OK) s = ir_ptr_map_put(&cmap, order[k], c);
        if (s == OT_OK && order[k] == root) {
            m->entry = c;
            c->is_entry = true;
        }
    }
    ot_free(st);
    ot_free(order);
    ir_ptr_map_free(&seen);
    ir_ptr_map_free(&cmap);
    ir_ptr_map_free(&map.ptr);
    ot_free(map.attrs_tab);
    if (s != OT_OK) {
        ot_module_free(m);
        return s;
    }
    *out = m;
    return OT_OK;
}

ot_status ot_module_clone(const ot_module *src, ot_module **out) {
    return ir_module_clone_ordered(src, NULL, out);
}

ot_status ir_module_clone_ordered(const ot_module *src, const ir_module_orders *ord,
                                  ot_module **out) {
    *out = NULL;
    ot_module *m = ot_module_new(src->name);
    if (!m) return OT_ERR_OUT_OF_MEMORY;
    ot_status s = OT_OK;
    ir_ptr_map cmap = {0};
    clone_map map = {0};
    ot_computation **order = NULL;
    int n = 0;
    map.byid = ot_calloc((size_t)(src->next_id ? src->next_id : 1), sizeof *map.byid);
    if (!map.byid) s = ot_error(OT_ERR_OUT_OF_MEMORY, "module clone: out of memory");
    m->cfg.replica_count = src->cfg.replica_count;
    m->cfg.num_partitions = src->cfg.num_partitions;
    for (int k = 0; k < src->cfg.nalias && s == OT_OK; k++)
        s = ot_module_add_alias(m, &src->cfg.alias[k]);
    if (s == OT_OK && src->cfg.entry_computation_layout &&
        !(m->cfg.entry_computation_layout = ir_strdup(m, src->cfg.entry_computation_layout)))
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "module clone: out of memory");
    if (s == OT_OK && src->cfg.nraw) {
        ot_raw_attr *r = ir_alloc(m, (size_t)src->cfg.nraw * sizeof *r);
        if (!r) s = ot_error(OT_ERR_OUT_OF_MEMORY, "module clone: out of memory");
        for (int k = 0; s == OT_OK && k < src->cfg.nraw; k++) {
            r[k].name = ir_strdup(m, src->cfg.raw[k].name);
            r[k].value = ir_strdup(m, src->cfg.raw[k].value);
            if (!r[k].name || !r[k].value)
                s = ot_error(OT_ERR_OUT_OF_MEMORY, "module clone: out of memory");
        }
        m->cfg.raw = r;
        m->cfg.nraw = src->cfg.nraw;
    }
    bool lists = ord == IR_ORDERS_LISTS;
    if (s == OT_OK && lists) {
        order = src->comps; /* definition order */
        n = src->ncomps;
    } else if (s == OT_OK && ord) {
        order = ord->comps;
        n = ord->ncomps;
    } else if (s == OT_OK) {
        s = ot_module_post_order(src, &order, &n);
    }
    for (int k = 0; k < n && s == OT_OK; k++) {
        ot_computation *c;
        /* no name index: the names are the source's, unique already (a lookup builds one) */
        s = ir_add_computation(m, order[k]->name, strlen(order[k]->name), &c);
        if (s == OT_OK)
            s = clone_body(order[k], c, &map, &cmap, ord && !lists ? ord->po[k] : NULL,
                           ord && !lists ? ord->npo[k] : 0, lists);
        if (s == OT_OK) s = ir_ptr_map_put(&cmap, order[k], c);
        if (s == OT_OK && src->entry == order[k]) {
            m->entry = c;
            c->is_entry = true;
        }
    }
    if (!ord) ot_free(order);
    ir_ptr_map_free(&cmap);
    ot_free(map.byid);
    ot_free(map.attrs_tab);
    if (s != OT_OK) {
        ot_module_free(m);
        return s;
    }
    *out = m;
    return OT_OK;
}

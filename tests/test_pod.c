/* Coordinator, phi-accrual detector, barriers: state machine and epochs on an injected clock,
 * 10,000 jittery heartbeats without a false alarm, a stopped device caught within its bound,
 * channels, load balancing, events, barrier timeouts and failures, and the detector driving a
 * collective's PEER_FAILED. */
#include "ot_test.h"

#include "optitpu/collectives.h"
#include "optitpu/pod.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

static uint64_t fake_clock(void *ud) {
    return *(uint64_t *)ud;
}

#define MS 1000000ull

/* deterministic jitter: uniform in [-j, j] */
static uint64_t rng_state = 88172645463325252ull;
static double urand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

static void test_phi_no_false_alarm_and_detects_stop(void) {
    ot_phi_detector *d;
    ASSERT_OK(ot_phi_create(NULL, &d));
    uint64_t t = 0;
    double worst = 0;
    ot_phi_heartbeat(d, t);
    for (int i = 0; i < 10000; i++) {
        /* 100 ms +- 30 ms, with a 170 ms hiccup (4 std late) every 1000 beats */
        uint64_t gap = (uint64_t)((100 + (urand() * 2 - 1) * 30) * MS);
        if (i % 1000 == 999) gap = 170 * MS;
        /* the detector is consulted every 10 ms while waiting, as a tick loop would */
        for (uint64_t w = 10 * MS; w < gap; w += 10 * MS) {
            double phi = ot_phi_value(d, t + w);
            if (phi > worst) worst = phi;
        }
        t += gap;
        ot_phi_heartbeat(d, t);
    }
    EXPECT_TRUE(worst < 8.0); /* never reached the failure threshold */
    EXPECT_TRUE(worst > 1.0); /* ... though the hiccups were noticed */
    double mean, std;
    ot_phi_stats(d, &mean, &std);
    EXPECT_NEAR(mean / MS, 100.0, 5.0);
    /* the device stops: phi crosses 8 within mean + 6 std of silence */
    uint64_t detect = 0;
    for (uint64_t w = 0; w < 10000 * MS; w += MS)
        if (ot_phi_value(d, t + w) >= 8.0) {
            detect = w;
            break;
        }
    EXPECT_TRUE(detect > 0);
    EXPECT_TRUE((double)detect < mean + 6 * std);
    ot_phi_free(d);
    EXPECT_STATUS(ot_phi_create(&(ot_phi_options){.window = 0}, &d), OT_ERR_INVALID_ARGUMENT);
}

typedef struct evlog {
    int n;
    ot_coord_event e[64];
} evlog;

static void on_event(void *ud, const ot_coord_event *e) {
    evlog *l = ud;
    if (l->n < 64) l->e[l->n++] = *e;
}

static void test_coordinator_state_machine(void) {
    uint64_t now = 0;
    ot_coord_options o = ot_coord_options_default();
    o.clock = fake_clock;
    o.clock_ud = &now;
    ot_coord *c;
    ASSERT_OK(ot_coord_create(&o, &c));
    evlog log = {0};
    int sub;
    ASSERT_OK(ot_coord_subscribe(c, OT_EVENT_ALL, on_event, &log, &sub));
    int a, b;
    ASSERT_OK(ot_coord_register(c, "host:0", &a));
    ASSERT_OK(ot_coord_register(c, "host:1", &b));
    EXPECT_INT_EQ(ot_coord_state(c, a), OT_DEV_JOINING);
    EXPECT_U64_EQ(ot_coord_epoch(c), 0);
    for (int i = 0; i < 50; i++) {
        now += 100 * MS;
        ot_coord_heartbeat(c, a);
        ot_coord_heartbeat(c, b);
        ot_coord_tick(c);
    }
    EXPECT_INT_EQ(ot_coord_state(c, a), OT_DEV_HEALTHY);
    EXPECT_U64_EQ(ot_coord_epoch(c), 2); /* two joins */
    EXPECT_INT_EQ(ot_coord_members(c, NULL, 0), 2);
    /* b goes silent: suspect, then failed; a keeps beating */
    bool saw_suspect = false;
    uint64_t t_stop = now;
    while (ot_coord_state(c, b) != OT_DEV_FAILED && now < t_stop + 10000 * MS) {
        now += 10 * MS;
        if ((now - t_stop) % (100 * MS) == 0) ot_coord_heartbeat(c, a);
        ot_coord_tick(c);
        saw_suspect |= ot_coord_state(c, b) == OT_DEV_SUSPECT;
    }
    EXPECT_TRUE(saw_suspect);
    EXPECT_INT_EQ(ot_coord_state(c, b), OT_DEV_FAILED);
    EXPECT_INT_EQ(ot_coord_state(c, a), OT_DEV_HEALTHY);
    EXPECT_U64_EQ(ot_coord_epoch(c), 3);
    int ids[4];
    EXPECT_INT_EQ(ot_coord_members(c, ids, 4), 1);
    EXPECT_INT_EQ(ids[0], a);
    /* b comes back: recovering for 3 heartbeats, then healthy (new epoch) */
    ot_coord_heartbeat(c, b);
    EXPECT_INT_EQ(ot_coord_state(c, b), OT_DEV_RECOVERING);
    ot_coord_heartbeat(c, b);
    ot_coord_heartbeat(c, b);
    EXPECT_INT_EQ(ot_coord_state(c, b), OT_DEV_HEALTHY);
    EXPECT_U64_EQ(ot_coord_epoch(c), 4);
    ASSERT_OK(ot_coord_remove(c, a));
    EXPECT_U64_EQ(ot_coord_epoch(c), 5);
    EXPECT_STATUS(ot_coord_heartbeat(c, a), OT_ERR_FAILED_PRECONDITION);
    EXPECT_STATUS(ot_coord_heartbeat(c, 7), OT_ERR_NOT_FOUND);
    /* the event log, in order */
    int kinds[] = {OT_EVENT_JOINED,  OT_EVENT_EPOCH,   OT_EVENT_JOINED, OT_EVENT_EPOCH,
                   OT_EVENT_SUSPECT, OT_EVENT_FAILED,  OT_EVENT_EPOCH,  OT_EVENT_RECOVERED,
                   OT_EVENT_EPOCH,   OT_EVENT_REMOVED, OT_EVENT_EPOCH};
    EXPECT_INT_EQ(log.n, 11);
    for (int i = 0; i < 11 && i < log.n; i++) EXPECT_INT_EQ(log.e[i].kind, kinds[i]);
    EXPECT_TRUE(log.e[5].phi >= 8.0);
    ot_coord_unsubscribe(c, sub);
    ASSERT_OK(ot_coord_mark_failed(c, b));
    EXPECT_INT_EQ(log.n, 11); /* unsubscribed */
    ot_coord_free(c);
}

static void test_timeout_detector(void) {
    uint64_t now = 0;
    ot_coord_options o = ot_coord_options_default();
    o.clock = fake_clock;
    o.clock_ud = &now;
    o.detector = OT_DETECT_TIMEOUT;
    o.timeout_ns = 500 * MS;
    ot_coord *c;
    ASSERT_OK(ot_coord_create(&o, &c));
    int a;
    ASSERT_OK(ot_coord_register(c, "x", &a));
    ot_coord_heartbeat(c, a);
    now += 249 * MS;
    ot_coord_tick(c);
    EXPECT_INT_EQ(ot_coord_state(c, a), OT_DEV_HEALTHY);
    now += 1 * MS;
    ot_coord_tick(c);
    EXPECT_INT_EQ(ot_coord_state(c, a), OT_DEV_SUSPECT);
    now += 250 * MS;
    ot_coord_tick(c);
    EXPECT_INT_EQ(ot_coord_state(c, a), OT_DEV_FAILED);
    ot_coord_free(c);
    o.phi_fail = 1; /* below phi_suspect */
    EXPECT_STATUS(ot_coord_create(&o, &c), OT_ERR_INVALID_ARGUMENT);
}

static void test_channels_and_selection(void) {
    uint64_t now = 0;
    ot_coord_options o = ot_coord_options_default();
    o.clock = fake_clock;
    o.clock_ud = &now;
    ot_coord *c;
    ASSERT_OK(ot_coord_create(&o, &c));
    int id[4];
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof name, "d%d", i);
        ASSERT_OK(ot_coord_register(c, name, &id[i]));
        ot_coord_heartbeat(c, id[i]);
    }
    EXPECT_STR_EQ(ot_coord_name(c, 2), "d2");
    /* channels */
    for (int k = 0; k < 100; k++) ASSERT_OK(ot_coord_channel_record(c, 0, 1, 1000, 2000, true));
    ASSERT_OK(ot_coord_channel_record(c, 0, 1, 0, 0, false));
    for (int s = 0; s < 4; s++)
        for (int d = 0; d < 4; d++) ASSERT_OK(ot_coord_channel_record(c, s, d, 1, 1, true));
    ot_channel_stats st;
    ASSERT_OK(ot_coord_channel_stats(c, 0, 1, &st));
    EXPECT_U64_EQ(st.messages, 101);
    EXPECT_U64_EQ(st.errors, 1);
    EXPECT_U64_EQ(st.bytes, 100001);
    EXPECT_NEAR(st.gbytes_per_s, 100001.0 / 200001.0, 1e-9);
    EXPECT_STATUS(ot_coord_channel_record(c, 0, 9, 1, 1, true), OT_ERR_NOT_FOUND);
    /* round-robin really rotates, skipping a failed device */
    ASSERT_OK(ot_coord_mark_failed(c, 2));
    int seq[6];
    for (int k = 0; k < 6; k++) ASSERT_OK(ot_coord_select(c, OT_SELECT_ROUND_ROBIN, &seq[k]));
    int want[] = {0, 1, 3, 0, 1, 3};
    for (int k = 0; k < 6; k++) EXPECT_INT_EQ(seq[k], want[k]);
    /* least loaded */
    ASSERT_OK(ot_coord_load_add(c, 0, 5));
    ASSERT_OK(ot_coord_load_add(c, 1, 2));
    ASSERT_OK(ot_coord_load_add(c, 3, 7));
    int pick;
    ASSERT_OK(ot_coord_select(c, OT_SELECT_LEAST_LOADED, &pick));
    EXPECT_INT_EQ(pick, 1);
    /* weighted by throughput: 3:1:... proportions over a cycle */
    ASSERT_OK(ot_coord_report_throughput(c, 0, 300));
    ASSERT_OK(ot_coord_report_throughput(c, 1, 100));
    ASSERT_OK(ot_coord_report_throughput(c, 3, 100));
    EXPECT_STATUS(ot_coord_report_throughput(c, 3, -1), OT_ERR_INVALID_ARGUMENT);
    int cnt[4] = {0};
    for (int k = 0; k < 500; k++) {
        ASSERT_OK(ot_coord_select(c, OT_SELECT_WEIGHTED, &pick));
        cnt[pick]++;
    }
    EXPECT_INT_EQ(cnt[0], 300);
    EXPECT_INT_EQ(cnt[1], 100);
    EXPECT_INT_EQ(cnt[3], 100);
    EXPECT_INT_EQ(cnt[2], 0);
    for (int i = 0; i < 4; i++) ot_coord_mark_failed(c, i);
    EXPECT_STATUS(ot_coord_select(c, OT_SELECT_ROUND_ROBIN, &pick), OT_ERR_FAILED_PRECONDITION);
    ot_coord_free(c);
}

static void test_coordinator_alloc_failures(void) {
    int64_t live = ot_alloc_live();
    for (int64_t n = 1; n < 30; n++) {
        ot_alloc_fail_after(n);
        ot_coord *c = NULL;
        if (ot_coord_create(NULL, &c) == OT_OK) {
            int id;
            for (int i = 0; i < 10; i++) (void)ot_coord_register(c, "d", &id);
            (void)ot_coord_channel_record(c, 0, 0, 1, 1, true);
        }
        ot_alloc_fail_after(0);
        ot_coord_free(c);
        EXPECT_INT_EQ(ot_alloc_live(), live);
    }
}

/* ---- barriers ---- */

typedef struct barg {
    ot_barrier *b;
    int p;
    int64_t timeout;
    int rounds;
    ot_status st[8];
    uint64_t gen[8];
} barg;

static void *barrier_thread(void *p) {
    barg *a = p;
    for (int r = 0; r < a->rounds; r++)
        a->st[r] = ot_barrier_wait(a->b, a->p, a->timeout, &a->gen[r]);
    return NULL;
}

static void test_barrier_generations(void) {
    ot_barrier *b;
    ASSERT_OK(ot_barrier_create(4, &b));
    pthread_t th[4];
    barg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (barg){.b = b, .p = i, .timeout = 10LL * 1000 * MS, .rounds = 5};
        pthread_create(&th[i], NULL, barrier_thread, &args[i]);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++)
        for (int r = 0; r < 5; r++) {
            EXPECT_OK(args[i].st[r]);
            EXPECT_U64_EQ(args[i].gen[r], (uint64_t)r);
        }
    EXPECT_U64_EQ(ot_barrier_generation(b), 5);
    EXPECT_STATUS(ot_barrier_wait(b, 4, 0, NULL), OT_ERR_INVALID_ARGUMENT);
    ot_barrier_free(b);
}

static void test_barrier_timeout_then_next_generation(void) {
    ot_barrier *b;
    ASSERT_OK(ot_barrier_create(3, &b));
    pthread_t th[2];
    barg args[2];
    uint64_t t0 = ot_now_ns();
    for (int i = 0; i < 2; i++) {
        args[i] = (barg){.b = b, .p = i, .timeout = 100 * (int64_t)MS, .rounds = 1};
        pthread_create(&th[i], NULL, barrier_thread, &args[i]);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    uint64_t el = ot_now_ns() - t0;
    for (int i = 0; i < 2; i++) EXPECT_STATUS(args[i].st[0], OT_ERR_TIMEOUT);
    EXPECT_TRUE(el >= 100 * MS && el < 5000 * MS);
    EXPECT_U64_EQ(ot_barrier_generation(b), 1);
    /* the next generation works with everyone */
    for (int i = 0; i < 2; i++) {
        args[i] = (barg){.b = b, .p = i, .timeout = 10LL * 1000 * MS, .rounds = 1};
        pthread_create(&th[i], NULL, barrier_thread, &args[i]);
    }
    EXPECT_OK(ot_barrier_wait(b, 2, 10LL * 1000 * MS, NULL));
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) EXPECT_OK(args[i].st[0]);
    ot_barrier_free(b);
}

static void wait_arrivals(ot_barrier *b, int n) {
    while (ot_barrier_arrived(b) < n) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static void test_barrier_peer_failed(void) {
    ot_barrier *b;
    ASSERT_OK(ot_barrier_create(3, &b));
    pthread_t th[2];
    barg args[2];
    for (int i = 0; i < 2; i++) {
        args[i] = (barg){.b = b, .p = i, .timeout = 30LL * 1000 * MS, .rounds = 1};
        pthread_create(&th[i], NULL, barrier_thread, &args[i]);
    }
    wait_arrivals(b, 2);
    uint64_t t0 = ot_now_ns();
    ot_barrier_fail(b, 2);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    EXPECT_TRUE(ot_now_ns() - t0 < 5000 * MS);
    for (int i = 0; i < 2; i++) EXPECT_STATUS(args[i].st[0], OT_ERR_PEER_FAILED);
    EXPECT_INT_EQ(ot_barrier_expected(b), 2);
    EXPECT_STATUS(ot_barrier_wait(b, 2, 0, NULL), OT_ERR_FAILED_PRECONDITION);
    /* the survivors carry on */
    for (int i = 0; i < 2; i++) {
        args[i] = (barg){.b = b, .p = i, .timeout = 10LL * 1000 * MS, .rounds = 2};
        pthread_create(&th[i], NULL, barrier_thread, &args[i]);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        EXPECT_OK(args[i].st[0]);
        EXPECT_OK(args[i].st[1]);
    }
    /* and the victim can rejoin */
    ot_barrier_rejoin(b, 2);
    EXPECT_INT_EQ(ot_barrier_expected(b), 3);
    for (int i = 0; i < 2; i++) {
        args[i] = (barg){.b = b, .p = i, .timeout = 10LL * 1000 * MS, .rounds = 1};
        pthread_create(&th[i], NULL, barrier_thread, &args[i]);
    }
    EXPECT_OK(ot_barrier_wait(b, 2, 10LL * 1000 * MS, NULL));
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) EXPECT_OK(args[i].st[0]);
    ot_barrier_free(b);
}

static void test_barrier_deadline_closes_generation_for_all(void) {
    ot_barrier *b;
    ASSERT_OK(ot_barrier_create(3, &b));
    pthread_t th;
    barg a = {.b = b, .p = 0, .timeout = 30LL * 1000 * MS, .rounds = 1};
    pthread_create(&th, NULL, barrier_thread, &a);
    wait_arrivals(b, 1);
    /* participant 1 arrives with a short deadline: its expiry closes the generation for both */
    ot_status s1 = ot_barrier_wait(b, 1, 50 * (int64_t)MS, NULL);
    pthread_join(th, NULL);
    EXPECT_STATUS(s1, OT_ERR_TIMEOUT);
    EXPECT_STATUS(a.st[0], OT_ERR_TIMEOUT);
    EXPECT_INT_EQ(ot_barrier_arrived(b), 0);
    ot_barrier_free(b);
}

/* ---- the detector drives the collectives: heartbeats stop → FAILED → PEER_FAILED ---- */

typedef struct pod {
    ot_local_world *w;
    ot_coord *c;
    int ids[4];
    atomic_int stop_beats[4];
    atomic_int done;
    ot_status st[4];
    uint64_t detect_ns;
    atomic_ullong t_stop;
} pod;

static void on_failed(void *ud, const ot_coord_event *e) {
    pod *p = ud;
    p->detect_ns = ot_now_ns() - atomic_load(&p->t_stop);
    ot_local_world_fail(p->w, e->device);
}

static void *monitor(void *ud) {
    pod *p = ud;
    while (!atomic_load(&p->done)) {
        for (int i = 0; i < 4; i++)
            if (!atomic_load(&p->stop_beats[i])) ot_coord_heartbeat(p->c, p->ids[i]);
        ot_coord_tick(p->c);
        struct timespec ts = {0, 2000000}; /* heartbeat interval 2 ms */
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static ot_status pod_rank(void *ud, int rank, ot_comm *c) {
    pod *p = ud;
    float x[1024] = {0};
    ot_coll_options o = ot_coll_options_default();
    o.timeout_ns = 30LL * 1000 * MS;
    ot_status st = OT_OK;
    for (int it = 0; st == OT_OK; it++) {
        if (rank == 3 && it == 50) {
            /* device 3 hangs: no more heartbeats, no more collectives */
            atomic_store(&p->t_stop, ot_now_ns());
            atomic_store(&p->stop_beats[3], 1);
            p->st[rank] = OT_OK;
            return OT_OK;
        }
        st = ot_comm_allreduce(c, x, x, 1024, OT_F32, OT_REDOP_SUM, &o);
    }
    p->st[rank] = st;
    return OT_OK;
}

static void test_detector_fails_collective(void) {
    pod p = {0};
    ASSERT_OK(ot_local_world_create(4, &p.w));
    ot_coord_options o = ot_coord_options_default();
    o.phi.first_interval_ns = 2 * MS;
    o.phi.min_std_ns = 2 * MS;
    ASSERT_OK(ot_coord_create(&o, &p.c));
    for (int i = 0; i < 4; i++) ASSERT_OK(ot_coord_register(p.c, "dev", &p.ids[i]));
    ASSERT_OK(ot_coord_subscribe(p.c, OT_EVENT_FAILED, on_failed, &p, NULL));
    pthread_t m;
    pthread_create(&m, NULL, monitor, &p);
    while (ot_coord_members(p.c, NULL, 0) < 4) { /* everyone has joined */
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    uint64_t t0 = ot_now_ns();
    EXPECT_OK(ot_local_world_run(p.w, pod_rank, &p, NULL));
    uint64_t el = ot_now_ns() - t0;
    atomic_store(&p.done, 1);
    pthread_join(m, NULL);
    for (int r = 0; r < 3; r++) EXPECT_STATUS(p.st[r], OT_ERR_PEER_FAILED);
    EXPECT_INT_EQ(ot_coord_state(p.c, p.ids[3]), OT_DEV_FAILED);
    EXPECT_TRUE(el < 20000 * MS); /* far inside the 30 s collective deadline */
    EXPECT_TRUE(p.detect_ns > 0);
    ot_coord_free(p.c);
    ot_local_world_free(p.w);
}

static void test_step_breakdown(void) {
    ot_pod_trace *t;
    ASSERT_OK(ot_pod_trace_create(&t));
    ASSERT_OK(ot_pod_trace_record(t, 0, OT_PHASE_COMPUTE, "fwd", 1000, 1100));
    ASSERT_OK(ot_pod_trace_record(t, 0, OT_PHASE_COMM, "allreduce", 1080, 1150));
    ASSERT_OK(ot_pod_trace_record(t, 0, OT_PHASE_OTHER, "ckpt", 1200, 1220));
    ASSERT_OK(ot_pod_trace_record(t, 1, OT_PHASE_COMPUTE, "fwd", 1000, 1300));
    EXPECT_STATUS(ot_pod_trace_record(t, 0, OT_PHASE_COMM, "x", 10, 5), OT_ERR_INVALID_ARGUMENT);
    ot_step_breakdown b;
    ASSERT_OK(ot_pod_trace_breakdown(t, 0, 1000, 1300, &b));
    EXPECT_NEAR(b.compute_s * 1e9, 100, 1e-6);
    EXPECT_NEAR(b.comm_s * 1e9, 50, 1e-6); /* the overlap counts as compute */
    EXPECT_NEAR(b.other_s * 1e9, 20, 1e-6);
    EXPECT_NEAR(b.idle_s * 1e9, 130, 1e-6);
    ASSERT_OK(ot_pod_trace_breakdown(t, 0, 1090, 1120, &b)); /* clipped to the window */
    EXPECT_NEAR(b.compute_s * 1e9, 10, 1e-6);
    EXPECT_NEAR(b.comm_s * 1e9, 20, 1e-6);
    char *js;
    ASSERT_OK(ot_pod_trace_to_json(t, &js));
    json_error_t e;
    json_t *j = json_loads(js, 0, &e);
    ASSERT_TRUE(j != NULL);
    EXPECT_INT_EQ(json_array_size(json_object_get(j, "traceEvents")), 4);
    json_t *ev = json_array_get(json_object_get(j, "traceEvents"), 1);
    EXPECT_STR_EQ(json_string_value(json_object_get(ev, "cat")), "comm");
    EXPECT_NEAR(json_real_value(json_object_get(ev, "ts")), 0.08, 1e-9);
    json_decref(j);
    ot_free(js);
    ot_pod_trace_free(t);
}

typedef struct tracerun {
    ot_pod_trace *t;
    uint64_t from, to;
} tracerun;

static ot_status trace_rank(void *ud, int rank, ot_comm *c) {
    tracerun *tr = ud;
    ot_comm_set_trace(c, tr->t, rank);
    float x[4096];
    for (int i = 0; i < 4096; i++) x[i] = (float)i;
    for (int step = 0; step < 3; step++) {
        uint64_t t0 = ot_now_ns();
        double acc = 0;
        for (int i = 0; i < 4096; i++) acc += x[i] * 0.5;
        x[0] = (float)acc;
        OT_CHECK(ot_pod_trace_record(tr->t, rank, OT_PHASE_COMPUTE, "step", t0, ot_now_ns()));
        OT_CHECK(ot_comm_allreduce(c, x, x, 4096, OT_F32, OT_REDOP_MEAN, NULL));
    }
    return OT_OK;
}

static void test_collectives_record_into_trace(void) {
    tracerun tr;
    ASSERT_OK(ot_pod_trace_create(&tr.t));
    tr.from = ot_now_ns();
    ASSERT_OK(ot_local_run(2, trace_rank, &tr, NULL));
    tr.to = ot_now_ns();
    EXPECT_INT_EQ(ot_pod_trace_count(tr.t), 2 * 3 * 2); /* compute + allreduce, 3 steps, 2 */
    ot_step_breakdown b;
    ASSERT_OK(ot_pod_trace_breakdown(tr.t, 1, tr.from, tr.to, &b));
    EXPECT_TRUE(b.comm_s > 0 && b.compute_s > 0);
    EXPECT_NEAR(b.compute_s + b.comm_s + b.other_s + b.idle_s, b.wall_s, 1e-9);
    ot_pod_trace_free(tr.t);
}

OT_TEST_MAIN(OT_TEST(test_step_breakdown), OT_TEST(test_collectives_record_into_trace),
             OT_TEST(test_phi_no_false_alarm_and_detects_stop),
             OT_TEST(test_coordinator_state_machine), OT_TEST(test_timeout_detector),
             OT_TEST(test_channels_and_selection), OT_TEST(test_coordinator_alloc_failures),
             OT_TEST(test_barrier_generations), OT_TEST(test_barrier_timeout_then_next_generation),
             OT_TEST(test_barrier_peer_failed),
             OT_TEST(test_barrier_deadline_closes_generation_for_all),
             OT_TEST(test_detector_fails_collective))

/* Slice leases (pod.h): a pod preset shared by jobs in any threads and processes of a host, through
 * one flock(2)-held lock file per device. flock locks belong to an open file description, so two
 * leases conflict whether they are in two processes or two threads of one, and the kernel drops a
 * dead process's locks: a crashed job's slice is free again without any clean-up. */
#include "pod_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

struct ot_slice_lease {
    int origin[OT_TOPO_MAX_DIMS], extent[OT_TOPO_MAX_DIMS];
    int n;      /* devices in the slice */
    int *ids;   /* pod id of each slice device (ot_topology_slice order) */
    int *fds;   /* the locked file of each, open while the lease lives */
    int others; /* devices other jobs held at placement */
};

/* mkdir -p. */
static ot_status make_dirs(const char *dir) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "slice registry: path too long: %s", dir);
    for (char *q = buf + 1;; q++) {
        bool end = *q == 0;
        if (*q == '/' || end) {
            *q = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return ot_error(OT_ERR_IO, "slice registry: mkdir %s: %s", buf, strerror(errno));
            if (end) break;
            *q = '/';
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return ot_error(OT_ERR_IO, "slice registry: %s is not a directory", dir);
    return OT_OK;
}

static int open_lock(const char *dir, const char *name) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
}

void ot_slice_lease_release(ot_slice_lease *l) {
    if (!l) return;
    for (int i = 0; i < l->n; i++)
        if (l->fds && l->fds[i] >= 0) close(l->fds[i]); /* drops the lock */
    ot_free(l->fds);
    ot_free(l->ids);
    ot_free(l);
}

void ot_slice_lease_box(const ot_slice_lease *l, int origin[OT_TOPO_MAX_DIMS],
                        int extent[OT_TOPO_MAX_DIMS]) {
    memcpy(origin, l->origin, sizeof l->origin);
    memcpy(extent, l->extent, sizeof l->extent);
}

int ot_slice_lease_devices(const ot_slice_lease *l, int *ids, int cap) {
    for (int i = 0; ids && i < l->n && i < cap; i++) ids[i] = l->ids[i];
    return l->n;
}

int ot_slice_lease_others(const ot_slice_lease *l) {
    return l->others;
}

/* Under the placement lock: which devices other leases hold (their lock cannot be taken). */
static ot_status mark_held(const char *dir, const ot_topology *pod, ot_slice_sched *s,
                           int *others) {
    int n = ot_topology_size(pod);
    *others = 0;
    for (int id = 0; id < n; id++) {
        char name[32];
        snprintf(name, sizeof name, "device_%d.lock", id);
        int fd = open_lock(dir, name);
        if (fd < 0)
            return ot_error(OT_ERR_IO, "slice registry: open %s/%s: %s", dir, name,
                            strerror(errno));
        bool held = flock(fd, LOCK_EX | LOCK_NB) != 0;
        int err = errno;
        close(fd); /* a probe that got the lock lets go of it at once */
        if (held && err != EWOULDBLOCK)
            return ot_error(OT_ERR_IO, "slice registry: flock %s/%s: %s", dir, name, strerror(err));
        if (!held) continue;
        int c[OT_TOPO_MAX_DIMS], one[OT_TOPO_MAX_DIMS] = {1, 1, 1}, job;
        ot_topology_coords(pod, id, c);
        ot_status st = ot_slice_reserve(s, c, one, &job);
        if (st != OT_OK) return st;
        ++*others;
    }
    return OT_OK;
}

ot_status ot_slice_lease_acquire(const char *dir, const char *preset,
                                 const int shape[OT_TOPO_MAX_DIMS], ot_slice_lease **out) {
    if (!dir || !preset || !shape || !out)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "slice lease: NULL argument");
    *out = NULL;
    if (strchr(preset, '/') || preset[0] == '.')
        return ot_error(OT_ERR_INVALID_ARGUMENT, "slice lease: bad preset name '%s'", preset);
    ot_topology *pod = NULL;
    OT_CHECK(ot_topology_preset(preset, &pod));
    char pdir[4096];
    ot_status s = OT_OK;
    if (snprintf(pdir, sizeof pdir, "%s/%s", dir, preset) >= (int)sizeof pdir)
        s = ot_error(OT_ERR_INVALID_ARGUMENT, "slice registry: path too long: %s", dir);
    if (s == OT_OK) s = make_dirs(pdir);
    int lockfd = -1;
    if (s == OT_OK && (lockfd = open_lock(pdir, "placement.lock")) < 0)
        s = ot_error(OT_ERR_IO, "slice registry: open %s/placement.lock: %s", pdir,
                     strerror(errno));
    /* placements one at a time (a lease's release needs no lock) */
    while (s == OT_OK && flock(lockfd, LOCK_EX) != 0)
        if (errno != EINTR)
            s = ot_error(OT_ERR_IO, "slice registry: flock %s/placement.lock: %s", pdir,
                         strerror(errno));
    ot_slice_sched *sched = NULL;
    ot_slice_lease *l = NULL;
    int others = 0;
    if (s == OT_OK) s = ot_slice_sched_create(pod, &sched);
    if (s == OT_OK) s = mark_held(pdir, pod, sched, &others);
    int job, origin[OT_TOPO_MAX_DIMS], extent[OT_TOPO_MAX_DIMS];
    if (s == OT_OK) {
        s = ot_slice_alloc(sched, shape, &job, origin, extent);
        if (s != OT_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", ot_last_error());
            s = ot_error(s, "slice %dx%dx%d of %s (%d of its %d devices held by other jobs): %s",
                         shape[0], shape[1], shape[2], preset, others, ot_topology_size(pod), msg);
        }
    }
    ot_topology *slice = NULL;
    if (s == OT_OK && !(l = ot_calloc(1, sizeof *l)))
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "slice lease");
    if (s == OT_OK) {
        memcpy(l->origin, origin, sizeof origin);
        memcpy(l->extent, extent, sizeof extent);
        l->n = extent[0] * extent[1] * extent[2];
        l->others = others;
        l->ids = ot_malloc(sizeof(int) * (size_t)l->n);
        l->fds = ot_malloc(sizeof(int) * (size_t)l->n);
        if (!l->ids || !l->fds) {
            s = ot_error(OT_ERR_OUT_OF_MEMORY, "slice lease");
            l->n = 0;
        }
        for (int i = 0; l->fds && i < l->n; i++) l->fds[i] = -1;
    }
    if (s == OT_OK) s = ot_topology_slice(pod, origin, extent, &slice, l->ids);
    for (int i = 0; s == OT_OK && i < l->n; i++) {
        char name[32];
        snprintf(name, sizeof name, "device_%d.lock", l->ids[i]);
        l->fds[i] = open_lock(pdir, name);
        if (l->fds[i] < 0 || flock(l->fds[i], LOCK_EX | LOCK_NB) != 0)
            s = ot_error(OT_ERR_IO, "slice registry: cannot lock %s/%s: %s", pdir, name,
                         strerror(errno));
    }
    ot_topology_free(slice);
    ot_slice_sched_free(sched);
    if (lockfd >= 0) close(lockfd);
    ot_topology_free(pod);
    if (s != OT_OK) {
        ot_slice_lease_release(l);
        return s;
    }
    *out = l;
    return OT_OK;
}

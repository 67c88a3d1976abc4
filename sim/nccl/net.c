/* simcuda NCCL's socket transport between hosts (net.h): interface
 * selection, the bootstrap root and the ranks' side of it, the TCP mesh
 * between ranks of different hosts and the proxy thread that moves queued
 * messages over it, with heartbeats and bounded waits so that a dead peer
 * or a cut link is an error naming the peer, never a hang. */
#include "sim/nccl/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HB_MS 250            /* heartbeat period of an idle connection (at most) */
#define MAX_MSG (1u << 31)   /* largest message accepted from a peer */
#define BOOT_VERSION 1u

enum { MSG_DATA = 1, MSG_HB = 2, MSG_BYE = 3 };

__attribute__((format(printf, 3, 4))) static int seterr(char *err, size_t len, const char *fmt,
                                                        ...)
{
    if (err && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, len, fmt, ap);
        va_end(ap);
    }
    return 0;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static const char *addr_str(uint32_t addr, uint16_t port, char *buf, size_t len)
{
    char a[INET_ADDRSTRLEN] = "?";
    struct in_addr ia = {addr};
    inet_ntop(AF_INET, &ia, a, sizeof(a));
    snprintf(buf, len, "%s:%u", a, (unsigned)ntohs(port));
    return buf;
}

/* ---- host identity, interfaces ------------------------------------------------ */

static unsigned long long ns_ino(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (unsigned long long)st.st_ino : 0ull;
}

void sim_nccl_host_identity(char *buf, size_t len)
{
    char boot[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (f) {
        if (!fgets(boot, sizeof(boot), f))
            boot[0] = '\0';
        fclose(f);
        boot[strcspn(boot, "\n")] = '\0';
    }
    struct stat st;
    unsigned long long shm = stat("/dev/shm", &st) == 0 ? (unsigned long long)st.st_dev : 0ull;
    snprintf(buf, len, "boot:%s net:%llu pid:%llu shm:%llu", boot, ns_ino("/proc/self/ns/net"),
             ns_ino("/proc/self/ns/pid"), shm);
}

/* NCCL_SOCKET_IFNAME's syntax: "^" excludes, "=" exact, else prefixes;
 * comma-separated. */
static int if_matches(const char *spec, const char *name)
{
    int exclude = 0, exact = 0;
    if (*spec == '^') {
        exclude = 1;
        spec++;
    }
    if (*spec == '=') {
        exact = 1;
        spec++;
    }
    int hit = 0;
    while (*spec && !hit) {
        size_t l = strcspn(spec, ",");
        if (l > 0)
            hit = exact ? strlen(name) == l && strncmp(name, spec, l) == 0
                        : strncmp(name, spec, l) == 0;
        spec += l;
        if (*spec == ',')
            spec++;
    }
    return exclude ? !hit : hit;
}

int sim_nccl_net_ifaddr(uint32_t *addr, char *ifname, size_t iflen, char *err, size_t errlen)
{
    const char *spec = getenv("NCCL_SOCKET_IFNAME");
    if (spec && *spec) {
        const char *s = spec + (*spec == '^');
        s += *s == '=';
        if (!*s || strspn(s, ",") == strlen(s)) {
            seterr(err, errlen, "NCCL_SOCKET_IFNAME=\"%s\" names no interface", spec);
            return -EINVAL;
        }
    }
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) != 0) {
        int e = errno;
        seterr(err, errlen, "getifaddrs: %s", strerror(e));
        return -e;
    }
    int rc = -ENODEV;
    /* pass 0: preferred, 1: docker*, 2: loopback (only without a spec) */
    for (int pass = 0; pass < (spec && *spec ? 1 : 3) && rc != 0; pass++)
        for (struct ifaddrs *i = ifa; i && rc != 0; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
                continue;
            int lo = (i->ifa_flags & IFF_LOOPBACK) != 0;
            int docker = strncmp(i->ifa_name, "docker", 6) == 0;
            if (spec && *spec) {
                if (!if_matches(spec, i->ifa_name))
                    continue;
            } else if ((pass == 0 && (lo || docker)) || (pass == 1 && !docker) ||
                       (pass == 2 && !lo)) {
                continue;
            }
            *addr = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
            snprintf(ifname, iflen, "%s", i->ifa_name);
            rc = 0;
        }
    freeifaddrs(ifa);
    if (rc != 0)
        seterr(err, errlen, "no socket interface found%s%s%s",
               spec && *spec ? " matching NCCL_SOCKET_IFNAME=\"" : "", spec && *spec ? spec : "",
               spec && *spec ? "\" (up, with an IPv4 address)" : " (up, with an IPv4 address)");
    return rc;
}

/* ---- sockets ---------------------------------------------------------------------- */

static int set_nonblock(int fd, int on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -errno;
    return fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK) < 0 ? -errno : 0;
}

int sim_nccl_net_listen(uint32_t addr, uint16_t want_port, int *fd, uint16_t *port)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -errno;
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = want_port,
                            .sin_addr.s_addr = addr};
    socklen_t al = sizeof(a);
    if (bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(s, 128) != 0 ||
        getsockname(s, (struct sockaddr *)&a, &al) != 0) {
        int e = -errno;
        close(s);
        return e;
    }
    *fd = s;
    *port = a.sin_port;
    return 0;
}

/* Connects to addr:port, retrying refused or unreachable attempts until
 * the deadline (the listener may not be up yet). Returns the socket
 * (blocking mode) or a negative errno. */
static int connect_retry(uint32_t addr, uint16_t port, uint64_t deadline)
{
    int last = -ETIMEDOUT;
    for (;;) {
        uint64_t now = now_ms();
        if (now >= deadline)
            return last == -ECONNREFUSED || last == -ETIMEDOUT ? -ETIMEDOUT : last;
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0)
            return -errno;
        set_nonblock(s, 1);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = port, .sin_addr.s_addr = addr};
        int rc = connect(s, (struct sockaddr *)&a, sizeof(a));
        if (rc != 0 && errno == EINPROGRESS) {
            struct pollfd p = {s, POLLOUT, 0};
            uint64_t left = deadline - now;
            int pr = poll(&p, 1, left > 1000 ? 1000 : (int)left);
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            if (pr == 1 && getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
                rc = 0;
            else
                errno = pr == 0 ? ETIMEDOUT : soerr ? soerr : EIO;
        }
        if (rc == 0) {
            set_nonblock(s, 0);
            return s;
        }
        last = -errno;
        close(s);
        if (last != -ECONNREFUSED && last != -ETIMEDOUT && last != -ENETUNREACH &&
            last != -EHOSTUNREACH && last != -ECONNRESET && last != -EAGAIN)
            return last;
        usleep(20000);
    }
}

/* Reads or writes exactly len bytes on a blocking socket before the
 * deadline. */
static int xfer_all(int fd, void *buf, size_t len, int out, uint64_t deadline)
{
    char *p = buf;
    while (len > 0) {
        uint64_t now = now_ms();
        if (now >= deadline)
            return -ETIMEDOUT;
        struct pollfd q = {fd, out ? POLLOUT : POLLIN, 0};
        int pr = poll(&q, 1, (int)(deadline - now > 1000 ? 1000 : deadline - now));
        if (pr < 0 && errno != EINTR)
            return -errno;
        if (pr <= 0)
            continue;
        ssize_t k = out ? send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, p, len, MSG_DONTWAIT);
        if (k == 0 && !out)
            return -ECONNRESET;
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return -errno;
        }
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

/* ---- bootstrap ------------------------------------------------------------------ */

typedef struct hello {
    uint64_t magic;
    uint32_t version;
    int32_t rank, nranks;
    int32_t tuning[4];
    int32_t pad0;
    uint64_t slot, p2p;
    sim_nccl_peer_t me;
} hello_t;

typedef struct reply {
    int32_t status;       /* 0, or a negative errno */
    int32_t pad0;
    sim_nccl_boot_t boot;
} reply_t;

typedef struct root_arg {
    int lfd;
    uint64_t magic;
    int timeout_ms;
} root_arg_t;

/* The root: gathers one hello per rank, answers all with the table. */
static void *root_thread(void *p)
{
    root_arg_t a = *(root_arg_t *)p;
    free(p);
    int fds[SIM_NCCL_MAX_RANKS];
    int got = 0, nranks = -1, status = 0;
    reply_t *rep = calloc(1, sizeof(*rep));
    char seen[SIM_NCCL_MAX_RANKS] = {0};
    uint64_t deadline = now_ms() + (uint64_t)a.timeout_ms;
    if (!rep)
        goto out;
    while (nranks < 0 || got < nranks) {
        uint64_t now = now_ms();
        if (now >= deadline)
            goto out;   /* the ranks time out too */
        struct pollfd q = {a.lfd, POLLIN, 0};
        if (poll(&q, 1, (int)(deadline - now > 1000 ? 1000 : deadline - now)) <= 0)
            continue;
        int s = accept4(a.lfd, NULL, NULL, SOCK_CLOEXEC);
        if (s < 0)
            continue;
        hello_t h;
        uint64_t d2 = now_ms() + 5000 < deadline ? now_ms() + 5000 : deadline;
        if (xfer_all(s, &h, sizeof(h), 0, d2) != 0 || h.magic != a.magic ||
            h.version != BOOT_VERSION || h.nranks < 1 || h.nranks > SIM_NCCL_MAX_RANKS ||
            h.rank < 0 || h.rank >= h.nranks) {
            close(s);   /* a stranger, or garbage: not one of ours */
            continue;
        }
        if (nranks < 0)
            nranks = h.nranks;
        if (h.nranks != nranks || got >= nranks)
            status = -EINVAL;
        else if (seen[h.rank])
            status = -EEXIST;
        if (got >= SIM_NCCL_MAX_RANKS) {
            close(s);
            continue;
        }
        fds[got++] = s;
        if (status == 0) {
            seen[h.rank] = 1;
            rep->boot.peer[h.rank] = h.me;
            rep->boot.peer[h.rank].rank = h.rank;
            if (h.rank == 0) {
                memcpy(rep->boot.tuning, h.tuning, sizeof(h.tuning));
                rep->boot.slot = h.slot;
                rep->boot.p2p = h.p2p;
            }
        } else {
            break;
        }
    }
    rep->status = status;
    rep->boot.nranks = nranks;
    if (getrandom(&rep->boot.nonce, sizeof(rep->boot.nonce), 0) != sizeof(rep->boot.nonce))
        rep->boot.nonce = a.magic * 0x9e3779b97f4a7c15ULL ^ now_ms();
    for (int i = 0; i < got; i++)
        xfer_all(fds[i], rep, sizeof(*rep), 1, now_ms() + 5000);
out:
    for (int i = 0; i < got; i++)
        close(fds[i]);
    close(a.lfd);
    free(rep);
    return NULL;
}

static int root_start(int lfd, uint64_t magic, int timeout_ms)
{
    root_arg_t *a = malloc(sizeof(*a));
    if (!a)
        return -ENOMEM;
    *a = (root_arg_t){lfd, magic, timeout_ms};
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_t th;
    int rc = pthread_create(&th, &at, root_thread, a);
    pthread_attr_destroy(&at);
    if (rc != 0) {
        free(a);
        return -rc;
    }
    return 0;
}

/* NCCL_COMM_ID=host:port (IPv4 address or name). */
static int parse_comm_id(const char *v, uint32_t *addr, uint16_t *port, char *err, size_t errlen)
{
    const char *colon = strrchr(v, ':');
    if (!colon || colon == v || !colon[1]) {
        seterr(err, errlen, "NCCL_COMM_ID=\"%s\" is not host:port", v);
        return -EINVAL;
    }
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || *end || p < 1 || p > 65535) {
        seterr(err, errlen, "NCCL_COMM_ID=\"%s\": port is not an integer in [1, 65535]", v);
        return -EINVAL;
    }
    char host[256];
    size_t hl = (size_t)(colon - v);
    if (hl >= sizeof(host)) {
        seterr(err, errlen, "NCCL_COMM_ID=\"%s\": host name too long", v);
        return -EINVAL;
    }
    memcpy(host, v, hl);
    host[hl] = '\0';
    struct in_addr ia;
    if (inet_pton(AF_INET, host, &ia) != 1) {
        struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
        if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) {
            seterr(err, errlen, "NCCL_COMM_ID=\"%s\": cannot resolve \"%s\" (IPv4 only)", v,
                   host);
            return -EINVAL;
        }
        ia = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
        freeaddrinfo(res);
    }
    *addr = ia.s_addr;
    *port = htons((uint16_t)p);
    return 0;
}

int sim_nccl_net_make_id(sim_nccl_id_t *id, int init_timeout_ms, char *err, size_t errlen)
{
    const char *cid = getenv("NCCL_COMM_ID");
    if (cid && *cid) {
        uint32_t addr;
        uint16_t port;
        int rc = parse_comm_id(cid, &addr, &port, err, errlen);
        if (rc < 0)
            return rc;
        id->boot_addr = addr;
        id->boot_port = port;
        id->flags = SIM_NCCL_ID_COMM_ID;
        /* every process makes the same id from the address alone */
        id->boot_magic = 0x4e43434c434f4d4dULL ^ ((uint64_t)addr << 16) ^ port;
        id->nonce = id->boot_magic * 0x9e3779b97f4a7c15ULL;
        snprintf(id->name, sizeof(id->name), "/simnccl-cid-%08x-%u", (unsigned)ntohl(addr),
                 (unsigned)ntohs(port));
        return 0;
    }
    uint32_t addr;
    char ifname[IF_NAMESIZE + 1];
    int rc = sim_nccl_net_ifaddr(&addr, ifname, sizeof(ifname), err, errlen);
    if (rc < 0)
        return rc;
    int lfd = -1;
    uint16_t port = 0;
    rc = sim_nccl_net_listen(addr, 0, &lfd, &port);
    if (rc < 0) {
        seterr(err, errlen, "cannot listen on %s: %s", ifname, strerror(-rc));
        return rc;
    }
    if (getrandom(&id->boot_magic, sizeof(id->boot_magic), 0) != sizeof(id->boot_magic))
        id->boot_magic = id->nonce ^ now_ms();
    rc = root_start(lfd, id->boot_magic, init_timeout_ms);
    if (rc < 0) {
        close(lfd);
        seterr(err, errlen, "cannot start the bootstrap root: %s", strerror(-rc));
        return rc;
    }
    id->boot_addr = addr;
    id->boot_port = port;
    id->flags = 0;
    return 0;
}

int sim_nccl_net_bootstrap(const sim_nccl_id_t *id, int rank, int nranks,
                           const sim_nccl_peer_t *me, const int tuning[4], uint64_t slot,
                           uint64_t p2p, int timeout_ms, sim_nccl_boot_t *out, char *err,
                           size_t errlen)
{
    char ab[64];
    int rc, s = -1;
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
    addr_str(id->boot_addr, id->boot_port, ab, sizeof(ab));
    if ((id->flags & SIM_NCCL_ID_COMM_ID) && rank == 0) {
        int lfd;
        uint16_t port;
        rc = sim_nccl_net_listen(id->boot_addr, id->boot_port, &lfd, &port);
        if (rc == 0 && (rc = root_start(lfd, id->boot_magic, timeout_ms)) < 0)
            close(lfd);
        if (rc < 0) {
            seterr(err, errlen, "rank 0 cannot listen on NCCL_COMM_ID %s: %s", ab,
                   strerror(-rc));
            return rc;
        }
    }
    hello_t h;
    memset(&h, 0, sizeof(h));
    h.magic = id->boot_magic;
    h.version = BOOT_VERSION;
    h.rank = rank;
    h.nranks = nranks;
    memcpy(h.tuning, tuning, sizeof(h.tuning));
    h.slot = slot;
    h.p2p = p2p;
    h.me = *me;
    reply_t *rep = calloc(1, sizeof(*rep));
    if (!rep)
        return -ENOMEM;
    s = connect_retry(id->boot_addr, id->boot_port, deadline);
    if (s < 0) {
        rc = s;
        s = -1;
        seterr(err, errlen, "cannot reach the bootstrap root at %s: %s", ab, strerror(-rc));
        goto out;
    }
    rc = xfer_all(s, &h, sizeof(h), 1, deadline);
    if (rc == 0)
        rc = xfer_all(s, rep, sizeof(*rep), 0, deadline);
    if (rc < 0) {
        seterr(err, errlen, "bootstrap with the root at %s failed: %s (waited for the other "
               "ranks up to NCCL_SIM_INIT_TIMEOUT_MS=%d)", ab,
               rc == -ECONNRESET ? "the root closed the connection (timed out)" : strerror(-rc),
               timeout_ms);
        if (rc == -ECONNRESET)
            rc = -ETIMEDOUT;
        goto out;
    }
    if (rep->status < 0) {
        rc = rep->status;
        seterr(err, errlen, "%s", rc == -EEXIST ? "a rank joined this communicator twice"
                                                : "ranks disagree on the communicator size");
        goto out;
    }
    if (rep->boot.nranks != nranks) {
        rc = -EINVAL;
        seterr(err, errlen, "ranks disagree on the communicator size");
        goto out;
    }
    *out = rep->boot;
out:
    if (s >= 0)
        close(s);
    free(rep);
    return rc;
}

/* ---- the mesh and its proxy ------------------------------------------------------- */

typedef struct msg {
    struct msg *next;
    size_t len, off;      /* bytes of hdr + data, bytes written */
    uint32_t hdr[2];      /* type, length of data */
    char data[];
} msg_t;
_Static_assert(offsetof(msg_t, data) == offsetof(msg_t, hdr) + sizeof(uint32_t[2]),
               "a message's header and data are sent as one run of bytes");

typedef struct conn {
    int fd;               /* -1: same host (or me) */
    uint32_t addr;
    uint16_t port;
    int departed;         /* said goodbye */
    uint64_t last_rx, last_tx;
    msg_t *txq, **txtail;
    /* receive state: header, then payload */
    uint32_t rhdr[2];
    size_t rgot;
    char *rbuf;
    msg_t *rxq, **rxtail; /* complete data messages (data[] holds them) */
} conn_t;

struct sim_nccl_net {
    int me, nranks, timeout_ms;
    int hb_ms;            /* heartbeat period: HB_MS, or a quarter of the timeout */
    sim_nccl_seg_t *seg;
    conn_t c[SIM_NCCL_MAX_RANKS];
    pthread_t th;
    int started;
    int wake[2];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic int stop;     /* 1 graceful (flush, then bye), 2 now */
    _Atomic int failed;
    char fail_msg[200];
};

/* Records the first failure, marks the segment (the local ranks see it). */
__attribute__((format(printf, 3, 4))) static void net_fail(sim_nccl_net_t *n, int peer,
                                                           const char *fmt, ...)
{
    char why[96], ab[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&n->mu);
    int first = !atomic_load(&n->failed);
    if (first) {
        snprintf(n->fail_msg, sizeof(n->fail_msg), "peer rank %d (%s) unreachable: %s", peer,
                 addr_str(n->c[peer].addr, n->c[peer].port, ab, sizeof(ab)), why);
        atomic_store(&n->failed, 1);
    }
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
    if (!first)
        return;
    if (n->seg && n->seg->h) {
        uint32_t z = 0;
        if (atomic_compare_exchange_strong(&n->seg->h->net_set, &z, 1)) {
            size_t l = strnlen(n->fail_msg, sizeof(n->seg->h->net_msg) - 1);
            memcpy(n->seg->h->net_msg, n->fail_msg, l);
            n->seg->h->net_msg[l] = '\0';
            atomic_store(&n->seg->h->net_set, 2);
        }
        sim_nccl_fail(n->seg, SIM_FAIL_NET);
    }
    if (sim_nccl_debug_level() >= 2)
        fprintf(stderr, "simcuda nccl: rank %d: %s\n", n->me, n->fail_msg);
}

static void wake_proxy(sim_nccl_net_t *n)
{
    char b = 1;
    ssize_t k = write(n->wake[1], &b, 1);
    (void)k;
}

static msg_t *msg_new(uint32_t type, const void *data, size_t len)
{
    msg_t *m = malloc(sizeof(*m) + len);
    if (!m)
        return NULL;
    m->next = NULL;
    m->hdr[0] = type;
    m->hdr[1] = (uint32_t)len;
    m->len = sizeof(m->hdr) + len;
    m->off = 0;
    if (len)
        memcpy(m->data, data, len);
    return m;
}

/* Under mu. */
static void txq_push(conn_t *c, msg_t *m)
{
    *c->txtail = m;
    c->txtail = &m->next;
}

static void msgq_free(msg_t *m)
{
    while (m) {
        msg_t *nx = m->next;
        free(m);
        m = nx;
    }
}

/* Writes what the connection has queued; 0, or -errno. */
static int conn_write(sim_nccl_net_t *n, conn_t *c, uint64_t now)
{
    for (;;) {
        pthread_mutex_lock(&n->mu);
        msg_t *m = c->txq;
        pthread_mutex_unlock(&n->mu);
        if (!m)
            return 0;
        /* the header lives just before data[]: hdr is contiguous with it */
        const char *base = (const char *)m->hdr;
        ssize_t k = send(c->fd, base + m->off, m->len - m->off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -errno;
        c->last_tx = now;
        m->off += (size_t)k;
        if (m->off < m->len)
            return 0;
        pthread_mutex_lock(&n->mu);
        c->txq = m->next;
        if (!c->txq)
            c->txtail = &c->txq;
        pthread_mutex_unlock(&n->mu);
        free(m);
    }
}

/* Reads what arrived; 0, 1 (the peer said goodbye and closed), or -errno
 * (-ECONNRESET: closed without goodbye). */
static int conn_read(sim_nccl_net_t *n, conn_t *c, uint64_t now)
{
    for (;;) {
        char *dst;
        size_t want;
        if (c->rgot < sizeof(c->rhdr)) {
            dst = (char *)c->rhdr + c->rgot;
            want = sizeof(c->rhdr) - c->rgot;
        } else {
            size_t body = c->rgot - sizeof(c->rhdr);
            dst = c->rbuf + body;
            want = c->rhdr[1] - body;
        }
        ssize_t k = want ? recv(c->fd, dst, want, MSG_DONTWAIT) : 0;
        if (want && k == 0)
            return c->departed ? 1 : -ECONNRESET;
        if (k < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return 0;
            /* after a goodbye, a reset is how a closing peer with our
             * heartbeats unread ends the connection */
            return c->departed ? 1 : -errno;
        }
        c->last_rx = now;
        c->rgot += (size_t)k;
        if (c->rgot == sizeof(c->rhdr) && want) {
            if (c->rhdr[0] < MSG_DATA || c->rhdr[0] > MSG_BYE || c->rhdr[1] >= MAX_MSG)
                return -EPROTO;
            if (c->rhdr[0] == MSG_DATA) {
                msg_t *m = malloc(sizeof(*m) + c->rhdr[1]);
                if (!m)
                    return -ENOMEM;
                m->next = NULL;
                m->len = c->rhdr[1];
                m->off = 0;
                c->rbuf = m->data;
            } else if (c->rhdr[1] != 0) {
                return -EPROTO;
            }
        }
        if (c->rgot >= sizeof(c->rhdr) && c->rgot - sizeof(c->rhdr) == c->rhdr[1]) {
            if (c->rhdr[0] == MSG_DATA) {
                msg_t *m = (msg_t *)(c->rbuf - offsetof(msg_t, data));
                pthread_mutex_lock(&n->mu);
                *c->rxtail = m;
                c->rxtail = &m->next;
                pthread_cond_broadcast(&n->cv);
                pthread_mutex_unlock(&n->mu);
            } else if (c->rhdr[0] == MSG_BYE) {
                c->departed = 1;
            }
            c->rbuf = NULL;
            c->rgot = 0;
        }
    }
}

static void *proxy_thread(void *p)
{
    sim_nccl_net_t *n = p;
    struct pollfd pf[SIM_NCCL_MAX_RANKS + 1];
    int who[SIM_NCCL_MAX_RANKS + 1];
    uint64_t stop_at = 0;
    while (!atomic_load(&n->failed)) {
        int st = atomic_load(&n->stop);
        uint64_t now = now_ms();
        if (st == 2)
            break;
        int pending = 0;
        if (st == 1) {
            if (!stop_at)
                stop_at = now + (uint64_t)n->timeout_ms;
            /* what is queued for a peer gone after its goodbye (departed
             * 2: not polled any more) is never delivered: not pending */
            for (int r = 0; r < n->nranks; r++)
                pending |= n->c[r].fd >= 0 && n->c[r].txq != NULL && n->c[r].departed != 2;
            if (!pending || now >= stop_at)
                break;
        }
        int np = 0;
        pf[np] = (struct pollfd){n->wake[0], POLLIN, 0};
        who[np++] = -1;
        for (int r = 0; r < n->nranks; r++) {
            conn_t *c = &n->c[r];
            if (c->fd < 0 || c->departed == 2)
                continue;
            pthread_mutex_lock(&n->mu);
            int tx = c->txq != NULL;
            if (!tx && now - c->last_tx >= (uint64_t)n->hb_ms && !st) {
                msg_t *hb = msg_new(MSG_HB, NULL, 0);
                if (hb) {
                    txq_push(c, hb);
                    tx = 1;
                }
            }
            pthread_mutex_unlock(&n->mu);
            pf[np] = (struct pollfd){c->fd, (short)(POLLIN | (tx ? POLLOUT : 0)), 0};
            who[np++] = r;
        }
        int pr = poll(pf, (nfds_t)np, n->hb_ms / 2 + 1);
        now = now_ms();
        if (pr > 0 && (pf[0].revents & POLLIN)) {
            char buf[64];
            while (read(n->wake[0], buf, sizeof(buf)) > 0) {
            }
        }
        for (int i = 1; i < np && pr > 0 && !atomic_load(&n->failed); i++) {
            int r = who[i];
            conn_t *c = &n->c[r];
            int rc = 0;
            if (pf[i].revents & (POLLIN | POLLHUP | POLLERR))
                rc = conn_read(n, c, now);
            if (rc == 1) {
                c->departed = 2;   /* gone after goodbye: not a failure */
                continue;
            }
            if (rc == 0 && (pf[i].revents & POLLOUT))
                rc = conn_write(n, c, now);
            if (rc < 0 && c->departed) {
                c->departed = 2;   /* a heartbeat to a peer that said goodbye */
                continue;
            }
            if (rc < 0)
                net_fail(n, r, "%s", rc == -ECONNRESET || rc == -EPIPE
                                         ? "connection closed (process gone or aborted)"
                                         : strerror(-rc));
        }
        for (int r = 0; r < n->nranks && !st && !atomic_load(&n->failed); r++) {
            conn_t *c = &n->c[r];
            if (c->fd >= 0 && !c->departed && now - c->last_rx > (uint64_t)n->timeout_ms)
                net_fail(n, r, "nothing received for %d ms (NCCL_SIM_TIMEOUT_MS)",
                         n->timeout_ms);
        }
    }
    return NULL;
}

static void tune_socket(int fd, int timeout_ms)
{
    int one = 1, idle = 1, intvl = 1, cnt = timeout_ms / 1000 + 1;
    unsigned int uto = (unsigned int)timeout_ms;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof(uto));
}

typedef struct mesh_hello {
    uint64_t nonce;
    int32_t rank, pad0;
} mesh_hello_t;

int sim_nccl_net_start(sim_nccl_net_t **out, const sim_nccl_boot_t *b, int me,
                       const int *host_of, int listen_fd, int timeout_ms, sim_nccl_seg_t *seg,
                       char *err, size_t errlen)
{
    int rc = 0, nranks = b->nranks;
    char ab[64];
    *out = NULL;
    sim_nccl_net_t *n = calloc(1, sizeof(*n));
    if (!n) {
        close(listen_fd);
        return -ENOMEM;
    }
    n->me = me;
    n->nranks = nranks;
    n->timeout_ms = timeout_ms;
    n->hb_ms = timeout_ms / 4 < HB_MS ? (timeout_ms / 4 > 0 ? timeout_ms / 4 : 1) : HB_MS;
    n->seg = seg;
    n->wake[0] = n->wake[1] = -1;
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->cv, NULL);
    for (int r = 0; r < nranks; r++) {
        conn_t *c = &n->c[r];
        c->fd = -1;
        c->addr = b->peer[r].addr;
        c->port = b->peer[r].port;
        c->txtail = &c->txq;
        c->rxtail = &c->rxq;
    }
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
    /* Lower ranks connect to higher ones; every listener exists already
     * (made before the rendezvous), so connecting first never waits for an
     * accept. */
    int expect = 0;
    for (int r = 0; r < nranks && rc == 0; r++) {
        if (host_of[r] == host_of[me])
            continue;
        if (r < me) {
            expect++;
            continue;
        }
        int s = connect_retry(b->peer[r].addr, b->peer[r].port, deadline);
        if (s < 0) {
            rc = s;
            seterr(err, errlen, "cannot connect to rank %d at %s: %s", r,
                   addr_str(b->peer[r].addr, b->peer[r].port, ab, sizeof(ab)), strerror(-rc));
            break;
        }
        mesh_hello_t mh = {b->nonce, me, 0};
        rc = xfer_all(s, &mh, sizeof(mh), 1, deadline);
        if (rc < 0) {
            close(s);
            seterr(err, errlen, "cannot greet rank %d at %s: %s", r,
                   addr_str(b->peer[r].addr, b->peer[r].port, ab, sizeof(ab)), strerror(-rc));
            break;
        }
        n->c[r].fd = s;
    }
    while (rc == 0 && expect > 0) {
        uint64_t now = now_ms();
        if (now >= deadline) {
            rc = -ETIMEDOUT;
            int r = 0;
            while (r < me && (host_of[r] == host_of[me] || n->c[r].fd >= 0))
                r++;
            seterr(err, errlen, "rank %d (%s) did not connect within %d ms", r,
                   addr_str(b->peer[r].addr, b->peer[r].port, ab, sizeof(ab)), timeout_ms);
            break;
        }
        struct pollfd q = {listen_fd, POLLIN, 0};
        if (poll(&q, 1, (int)(deadline - now > 500 ? 500 : deadline - now)) <= 0)
            continue;
        int s = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (s < 0)
            continue;
        mesh_hello_t mh;
        if (xfer_all(s, &mh, sizeof(mh), 0, deadline) != 0 || mh.nonce != b->nonce ||
            mh.rank < 0 || mh.rank >= me || host_of[mh.rank] == host_of[me] ||
            n->c[mh.rank].fd >= 0) {
            close(s);
            continue;
        }
        n->c[mh.rank].fd = s;
        expect--;
    }
    close(listen_fd);
    if (rc == 0 && pipe2(n->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        rc = -errno;
        seterr(err, errlen, "pipe: %s", strerror(-rc));
    }
    if (rc == 0) {
        uint64_t now = now_ms();
        for (int r = 0; r < nranks; r++)
            if (n->c[r].fd >= 0) {
                tune_socket(n->c[r].fd, timeout_ms);
                set_nonblock(n->c[r].fd, 1);
                n->c[r].last_rx = n->c[r].last_tx = now;
            }
        int e = pthread_create(&n->th, NULL, proxy_thread, n);
        if (e != 0) {
            rc = -e;
            seterr(err, errlen, "cannot start the proxy thread: %s", strerror(e));
        } else {
            n->started = 1;
        }
    }
    if (rc < 0) {
        sim_nccl_net_stop(n, 0);
        return rc;
    }
    *out = n;
    return 0;
}

int sim_nccl_net_send(sim_nccl_net_t *n, int peer, const void *buf, size_t len)
{
    if (atomic_load(&n->failed))
        return -ECONNABORTED;
    msg_t *m = msg_new(MSG_DATA, buf, len);
    if (!m)
        return -ENOMEM;
    pthread_mutex_lock(&n->mu);
    txq_push(&n->c[peer], m);
    pthread_mutex_unlock(&n->mu);
    wake_proxy(n);
    return 0;
}

int sim_nccl_net_recv(sim_nccl_net_t *n, int peer, void *buf, size_t len, int *why)
{
    conn_t *c = &n->c[peer];
    uint64_t deadline = now_ms() + (uint64_t)n->timeout_ms;
    int rc = 0;
    msg_t *m = NULL;
    pthread_mutex_lock(&n->mu);
    for (;;) {
        if (c->rxq) {
            m = c->rxq;
            c->rxq = m->next;
            if (!c->rxq)
                c->rxtail = &c->rxq;
            break;
        }
        if (atomic_load(&n->failed)) {
            rc = -ECONNABORTED;
            *why = SIM_FAIL_NET;
            break;
        }
        uint32_t f = n->seg && n->seg->h ? atomic_load(&n->seg->h->fail) : 0;
        if (f) {
            rc = -ECONNABORTED;
            *why = (int)f;
            break;
        }
        if (n->seg && n->seg->local_abort && atomic_load(n->seg->local_abort)) {
            rc = -ECANCELED;
            *why = SIM_FAIL_ABORT;
            break;
        }
        if (c->departed) {
            pthread_mutex_unlock(&n->mu);
            net_fail(n, peer, "it left the communicator");
            pthread_mutex_lock(&n->mu);
            continue;
        }
        uint64_t now = now_ms();
        if (now >= deadline) {
            pthread_mutex_unlock(&n->mu);
            net_fail(n, peer, "no data within %d ms (NCCL_SIM_TIMEOUT_MS)", n->timeout_ms);
            pthread_mutex_lock(&n->mu);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&n->cv, &n->mu, &ts);
    }
    pthread_mutex_unlock(&n->mu);
    if (m) {
        if (m->len != len)
            rc = -EPROTO;
        else
            memcpy(buf, m->data, len);
        free(m);
    }
    return rc;
}

const char *sim_nccl_net_failure(sim_nccl_net_t *n)
{
    return n && atomic_load(&n->failed) ? n->fail_msg : NULL;
}

/* A graceful close: our goodbye is queued in the kernel; half-close, then
 * wait (reading and dropping what the peer still sends) until the peer has
 * acknowledged every byte. Closing with unread bytes would send a reset
 * that discards what is still unsent: the goodbye could be lost and the
 * peer would see a failure. Bounded by the timeout. */
static void linger_all(sim_nccl_net_t *n)
{
    uint64_t deadline = now_ms() + (uint64_t)n->timeout_ms;
    for (int r = 0; r < n->nranks; r++)
        if (n->c[r].fd >= 0)
            shutdown(n->c[r].fd, SHUT_WR);
    for (;;) {
        int busy = 0;
        for (int r = 0; r < n->nranks; r++) {
            int fd = n->c[r].fd, outq = 0;
            char buf[4096];
            if (fd < 0)
                continue;
            while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
            }
            if (ioctl(fd, SIOCOUTQ, &outq) == 0 && outq > 0)
                busy = 1;
        }
        if (!busy || now_ms() >= deadline)
            return;
        poll(NULL, 0, 5);
    }
}

void sim_nccl_net_stop(sim_nccl_net_t *n, int graceful)
{
    if (!n)
        return;
    if (n->started) {
        if (graceful && !atomic_load(&n->failed)) {
            pthread_mutex_lock(&n->mu);
            for (int r = 0; r < n->nranks; r++)
                if (n->c[r].fd >= 0) {
                    msg_t *m = msg_new(MSG_BYE, NULL, 0);
                    if (m)
                        txq_push(&n->c[r], m);
                }
            pthread_mutex_unlock(&n->mu);
        }
        atomic_store(&n->stop, graceful ? 1 : 2);
        wake_proxy(n);
        pthread_join(n->th, NULL);
        if (graceful && !atomic_load(&n->failed))
            linger_all(n);
    }
    for (int r = 0; r < n->nranks; r++) {
        conn_t *c = &n->c[r];
        if (c->fd >= 0)
            close(c->fd);
        msgq_free(c->txq);
        msgq_free(c->rxq);
        if (c->rbuf)
            free(c->rbuf - offsetof(msg_t, data));
    }
    if (n->wake[0] >= 0)
        close(n->wake[0]);
    if (n->wake[1] >= 0)
        close(n->wake[1]);
    pthread_mutex_destroy(&n->mu);
    pthread_cond_destroy(&n->cv);
    free(n);
}

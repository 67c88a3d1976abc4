/* The links between the hosts' leaders of a communicator across hosts
 * whose levels above a host run in host memory (xhost_mem.c): TCP, what
 * wire/xhost.h says. Host 0's leader (rank 0, who makes the unique id)
 * listens from ncclGetUniqueId on, on the interface NCCL_SOCKET_IFNAME
 * names (as NCCL picks one: a comma-separated list of name prefixes, '^'
 * excludes them; unset: the first interface that is up with an IPv4
 * address and is not loopback, else loopback); the id carries the address
 * and a random secret. At the communicator's making every other host's
 * leader connects and says hello; host 0 keeps one link to each (a star:
 * it relays what goes between two other hosts). Every wait is bounded
 * (the communicator's timeout); a peer that closes or breaks its link is
 * an error at once. Calls util.c only. */
#include "coll/xhost_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

/* A failure between the hosts: on stderr (the application may print only
 * NCCL's status) and kept for ncclGetLastError. */
#define ES_XS_ERR(...)                                                                         \
    do {                                                                                       \
        ES_WARN(__VA_ARGS__);                                                                  \
        es_coll_error(__VA_ARGS__);                                                            \
    } while (0)

struct es_xs {
    int host, nhosts;
    int fd[ES_COLL_MAX_RANKS];   /* host 0: fd[h] to host h; the others: fd[0] */
};

/* Listeners made by ncclGetUniqueId in this process, by secret; the
 * oldest goes when there are too many (an id never used). */
#define ES_XS_MAX_LISTEN 16
static pthread_mutex_t es_xs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    uint64_t secret;
    int fd;
} es_xs_lis[ES_XS_MAX_LISTEN];
static int es_xs_nlis;

/* ---- the interface --------------------------------------------------------------- */

/* Whether name is in NCCL_SOCKET_IFNAME's list (prefixes; '=' exact). */
static int es_xs_listed(const char *list, const char *name)
{
    int exact = *list == '=';
    list += exact;
    while (*list) {
        size_t l = strcspn(list, ",");
        if (l && (exact ? strlen(name) == l : strlen(name) >= l) && !strncmp(name, list, l))
            return 1;
        list += l + (list[l] == ',');
    }
    return 0;
}

/* The address to listen on (network order): 0 or -ENODEV (message set). */
static int es_xs_ifaddr(uint32_t *addr)
{
    const char *spec = getenv("NCCL_SOCKET_IFNAME");
    int excl = spec && *spec == '^';
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) != 0) {
        ES_XS_ERR("collectives across hosts: getifaddrs: %s", strerror(errno));
        return -errno;
    }
    int found = 0;
    for (int lo_ok = 0; lo_ok < 2 && !found; lo_ok++)
        for (struct ifaddrs *i = ifa; i && !found; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
                continue;
            int lo = (i->ifa_flags & IFF_LOOPBACK) != 0;
            if (spec && *spec) {
                if (lo_ok || es_xs_listed(spec + excl, i->ifa_name) == excl)
                    continue;
            } else if (lo != lo_ok) {
                continue;
            }
            *addr = ((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr.s_addr;
            found = 1;
        }
    freeifaddrs(ifa);
    if (!found)
        ES_XS_ERR("collectives across hosts: no interface up with an IPv4 address%s%s%s",
                      spec && *spec ? " matching NCCL_SOCKET_IFNAME=\"" : "",
                      spec && *spec ? spec : "", spec && *spec ? "\"" : "");
    return found ? 0 : -ENODEV;
}

int es_xs_listen(es_xw_addr_t *a)
{
    memset(a, 0, sizeof(*a));
    a->magic = ES_XW_MAGIC;
    a->version = ES_XW_VERSION;
    a->size = sizeof(*a);
    int rc = es_xs_ifaddr(&a->ipv4);
    if (rc < 0)
        return rc;
    if (getrandom(&a->secret, sizeof(a->secret), 0) != (ssize_t)sizeof(a->secret)) {
        ES_XS_ERR("collectives across hosts: getrandom: %s", strerror(errno));
        return -EIO;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = a->ipv4 };
    socklen_t sl = sizeof(sa);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(fd, ES_COLL_MAX_RANKS) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0) {
        rc = -errno;
        ES_XS_ERR("collectives across hosts: cannot listen on %s: %s",
                      inet_ntoa(sa.sin_addr), strerror(errno));
        if (fd >= 0)
            close(fd);
        return rc;
    }
    a->port = sa.sin_port;
    pthread_mutex_lock(&es_xs_mu);
    if (es_xs_nlis == ES_XS_MAX_LISTEN) {
        close(es_xs_lis[0].fd);
        memmove(es_xs_lis, es_xs_lis + 1, sizeof(es_xs_lis[0]) * (ES_XS_MAX_LISTEN - 1));
        es_xs_nlis--;
    }
    es_xs_lis[es_xs_nlis].secret = a->secret;
    es_xs_lis[es_xs_nlis++].fd = fd;
    pthread_mutex_unlock(&es_xs_mu);
    return 0;
}

/* The listener made for secret (taken out of the list), or -1. */
static int es_xs_take(uint64_t secret)
{
    int fd = -1;
    pthread_mutex_lock(&es_xs_mu);
    for (int i = 0; i < es_xs_nlis && fd < 0; i++)
        if (es_xs_lis[i].secret == secret) {
            fd = es_xs_lis[i].fd;
            memmove(es_xs_lis + i, es_xs_lis + i + 1, sizeof(es_xs_lis[0]) * (size_t)(es_xs_nlis - i - 1));
            es_xs_nlis--;
        }
    pthread_mutex_unlock(&es_xs_mu);
    return fd;
}

/* ---- bounded input and output ------------------------------------------------------ */

/* Waits for ev on fd until the deadline (es_coll_now_ms): 0, -ETIMEDOUT. */
static int es_xs_poll(int fd, short ev, uint64_t deadline)
{
    for (;;) {
        uint64_t now = es_coll_now_ms();
        if (now >= deadline)
            return -ETIMEDOUT;
        struct pollfd p = { .fd = fd, .events = ev };
        uint64_t left = deadline - now;
        int n = poll(&p, 1, left > 1000 ? 1000 : (int)left);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

/* All n bytes (wr: out of buf, else into it) by the deadline: 0,
 * -ETIMEDOUT, -ECONNRESET (the peer closed), or another -errno. */
static int es_xs_io(int fd, void *buf, size_t n, int wr, uint64_t deadline)
{
    char *p = buf;
    while (n) {
        ssize_t k = wr ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k == 0)
            return -ECONNRESET;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        int rc = es_xs_poll(fd, wr ? POLLOUT : POLLIN, deadline);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int es_xs_head_ok(uint32_t magic, uint16_t version, uint16_t size, size_t want)
{
    return magic == ES_XW_MAGIC && version == ES_XW_VERSION && size == want;
}

/* ---- joining ------------------------------------------------------------------------ */

/* Host 0: one hello on a new connection fd, answered. 0 and *host, -EAGAIN
 * (not ours: closed, go on waiting) or a fatal -errno (message set). */
static int es_xs_greet(es_xs_t *s, int fd, uint64_t secret, int k, uint64_t deadline)
{
    es_xw_hello_t h;
    es_xw_ack_t a = { ES_XW_MAGIC, ES_XW_VERSION, sizeof(a), 0, 0 };
    uint64_t soon = es_coll_now_ms() + 5000; /* a leader says hello at once */
    if (soon < deadline)
        deadline = soon;
    if (es_xs_io(fd, &h, sizeof(h), 0, deadline) < 0 ||
        !es_xs_head_ok(h.magic, h.version, h.size, sizeof(h)) || h.secret != secret)
        return -EAGAIN; /* a stray connection */
    int rc = 0;
    if (h.nhosts != s->nhosts || h.k != k) {
        ES_XS_ERR("collectives across hosts: host %d's leader says %d hosts of %d ranks, "
                      "host 0 has %d of %d (GROUP_WORLD_SIZE and LOCAL_WORLD_SIZE differ)",
                      h.host, h.nhosts, h.k, s->nhosts, k);
        rc = -EPROTO;
    } else if (h.host < 1 || h.host >= s->nhosts || s->fd[h.host] >= 0) {
        ES_XS_ERR("collectives across hosts: a second leader for host %d (GROUP_RANK)",
                      h.host);
        rc = -EPROTO;
    }
    a.status = rc;
    if (es_xs_io(fd, &a, sizeof(a), 1, deadline) < 0 && rc == 0)
        return -EAGAIN;
    if (rc == 0)
        s->fd[h.host] = fd;
    return rc;
}

static int es_xs_accept_all(es_xs_t *s, int lfd, uint64_t secret, int k, uint64_t deadline)
{
    for (int have = 1; have < s->nhosts;) {
        int rc = es_xs_poll(lfd, POLLIN, deadline);
        if (rc < 0) {
            ES_XS_ERR("collectives across hosts: host 0 heard from %d of the %d other "
                          "hosts' leaders in time", have - 1, s->nhosts - 1);
            return rc;
        }
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        rc = es_xs_greet(s, fd, secret, k, deadline);
        if (rc == 0)
            have++;
        else
            close(fd);
        if (rc < 0 && rc != -EAGAIN)
            return rc;
    }
    return 0;
}

/* Host h > 0: to host 0's leader, until it answers or the deadline. */
static int es_xs_connect(es_xs_t *s, const es_xw_addr_t *a, int k, uint64_t deadline)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = a->port,
                              .sin_addr.s_addr = a->ipv4 };
    es_xw_hello_t h = { ES_XW_MAGIC, ES_XW_VERSION, sizeof(h), a->secret, s->host, s->nhosts,
                        k, 0 };
    es_xw_ack_t ack;
    int rc = -ETIMEDOUT;
    while (es_coll_now_ms() < deadline) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -errno;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
            rc = -errno;
            close(fd);
            usleep(50000); /* host 0's leader not there yet */
            continue;
        }
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        if ((rc = es_xs_io(fd, &h, sizeof(h), 1, deadline)) == 0 &&
            (rc = es_xs_io(fd, &ack, sizeof(ack), 0, deadline)) == 0 &&
            !es_xs_head_ok(ack.magic, ack.version, ack.size, sizeof(ack)))
            rc = -EPROTO;
        if (rc == 0 && ack.status < 0)
            rc = ack.status;
        if (rc == 0) {
            s->fd[0] = fd;
            return 0;
        }
        close(fd);
        break;
    }
    ES_XS_ERR("collectives across hosts: host %d's leader could not join host 0's at "
                  "%s:%u: %s", s->host, inet_ntoa(sa.sin_addr), ntohs(a->port),
                  rc == -EPROTO ? "host 0 refused it (see host 0's message)" : strerror(-rc));
    return rc;
}

int es_xs_join(es_xs_t **out, const es_xw_addr_t *a, int host, int nhosts, int k,
               int timeout_ms)
{
    *out = NULL;
    if (!es_xs_head_ok(a->magic, a->version, a->size, sizeof(*a))) {
        ES_XS_ERR("collectives across hosts: the unique id carries no address of host 0");
        return -EINVAL;
    }
    es_xs_t *s = malloc(sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->host = host;
    s->nhosts = nhosts;
    for (int i = 0; i < ES_COLL_MAX_RANKS; i++)
        s->fd[i] = -1;
    uint64_t deadline = es_coll_now_ms() + (uint64_t)timeout_ms;
    int rc, lfd = host == 0 ? es_xs_take(a->secret) : -1;
    if (host == 0 && lfd < 0) {
        ES_XS_ERR("collectives across hosts: rank 0 must make the unique id (its process "
                      "listens for the other hosts' leaders)");
        rc = -EINVAL;
    } else {
        rc = host == 0 ? es_xs_accept_all(s, lfd, a->secret, k, deadline)
                       : es_xs_connect(s, a, k, deadline);
    }
    if (lfd >= 0)
        close(lfd);
    if (rc < 0) {
        es_xs_close(s);
        return rc;
    }
    for (int i = 0; i < nhosts; i++)
        if (s->fd[i] >= 0)
            setsockopt(s->fd[i], IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int));
    *out = s;
    return 0;
}

void es_xs_close(es_xs_t *s)
{
    if (!s)
        return;
    for (int i = 0; i < ES_COLL_MAX_RANKS; i++)
        if (s->fd[i] >= 0)
            close(s->fd[i]);
    free(s);
}

/* ---- messages ----------------------------------------------------------------------- */

static int es_xs_fd(es_xs_t *s, int peer)
{
    if (peer < 0 || peer >= s->nhosts || (s->host != 0 && peer != 0))
        return -1;
    return s->fd[peer];
}

static int es_xs_fail(int peer, const char *what, int rc)
{
    ES_XS_ERR("collectives across hosts: %s host %d's leader: %s", what, peer,
                  rc == -ECONNRESET ? "the link closed (the host or its process is gone)"
                  : rc == -ETIMEDOUT ? "no answer within the collective timeout"
                                     : strerror(-rc));
    return rc;
}

int es_xs_send(es_xs_t *s, int peer, uint64_t tag, const void *buf, size_t n, int timeout_ms)
{
    int fd = es_xs_fd(s, peer);
    if (fd < 0)
        return es_xs_fail(peer, "no link to", -ENOTCONN);
    uint64_t deadline = es_coll_now_ms() + (uint64_t)timeout_ms;
    es_xw_msg_t m = { ES_XW_MAGIC, ES_XW_VERSION, sizeof(m), tag, n };
    int rc = es_xs_io(fd, &m, sizeof(m), 1, deadline);
    if (rc == 0)
        rc = es_xs_io(fd, (void *)buf, n, 1, deadline);
    return rc < 0 ? es_xs_fail(peer, "sending to", rc) : 0;
}

int es_xs_recv(es_xs_t *s, int peer, uint64_t tag, void *buf, size_t n, int timeout_ms)
{
    int fd = es_xs_fd(s, peer);
    if (fd < 0)
        return es_xs_fail(peer, "no link to", -ENOTCONN);
    uint64_t deadline = es_coll_now_ms() + (uint64_t)timeout_ms;
    es_xw_msg_t m;
    int rc = es_xs_io(fd, &m, sizeof(m), 0, deadline);
    if (rc < 0)
        return es_xs_fail(peer, "receiving from", rc);
    if (!es_xs_head_ok(m.magic, m.version, m.size, sizeof(m)) || m.tag != tag ||
        m.bytes != n) {
        ES_XS_ERR("collectives across hosts: host %d's leader sent message %#llx of %llu "
                      "bytes where %#llx of %zu was due (the hosts issued different "
                      "collectives?)", peer, (unsigned long long)m.tag,
                      (unsigned long long)m.bytes, (unsigned long long)tag, n);
        return -EPROTO;
    }
    rc = es_xs_io(fd, buf, n, 0, deadline);
    return rc < 0 ? es_xs_fail(peer, "receiving from", rc) : 0;
}

/* easyscale-ctl's sockets: the default directory, finding the one job, the
 * job lock (two controllers never own one job), listening (unix 0600, TCP),
 * connecting (with the TCP token), and the peer-credential check. */
#include "controller/ctl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

int es_ctl_default_dir(char *buf, size_t len, char *err, size_t errlen)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    int n;
    if (xdg && xdg[0] == '/' && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode))
        n = snprintf(buf, len, "%s/easyscale", xdg);
    else
        n = snprintf(buf, len, "/tmp/easyscale-%u", (unsigned)geteuid());
    if (n < 0 || (size_t)n >= len) {
        snprintf(err, errlen, "socket directory path too long");
        return -ENAMETOOLONG;
    }
    if (mkdir(buf, 0700) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create %s: %s", buf, strerror(errno));
        return -errno;
    }
    if (lstat(buf, &st) < 0) {
        snprintf(err, errlen, "%s: %s", buf, strerror(errno));
        return -errno;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
        snprintf(err, errlen, "%s is not a private directory of this user (mode %03o, owner %u): "
                 "refusing to use it", buf, (unsigned)(st.st_mode & 0777), (unsigned)st.st_uid);
        return -EPERM;
    }
    return 0;
}

void es_ctl_job_paths(const char *sock, char *jobf, char *lockf, size_t len)
{
    if (jobf)
        snprintf(jobf, len, "%s.job", sock);
    if (lockf)
        snprintf(lockf, len, "%s.lock", sock);
}

int es_ctl_lock(const char *sock, pid_t *holder)
{
    char lockf[4200];
    es_ctl_job_paths(sock, NULL, lockf, sizeof(lockf));
    int fd = open(lockf, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        char b[32] = "";
        ssize_t r = pread(fd, b, sizeof(b) - 1, 0);
        long v = 0;
        if (r > 0) {
            b[r] = '\0';
            b[strcspn(b, "\n")] = '\0';
            if (es_ctl_parse_long(b, 1, 1L << 30, &v) < 0)
                v = 0;
        }
        if (holder)
            *holder = (pid_t)v;
        close(fd);
        return e == EWOULDBLOCK ? -EBUSY : -e;
    }
    char b[32];
    int n = snprintf(b, sizeof(b), "%d\n", (int)getpid());
    if (ftruncate(fd, 0) < 0 || pwrite(fd, b, (size_t)n, 0) != n) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

int es_ctl_lock_held(const char *sock)
{
    char lockf[4200];
    es_ctl_job_paths(sock, NULL, lockf, sizeof(lockf));
    int fd = open(lockf, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return 0;
    int held = flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
    close(fd);
    return held;
}

int es_ctl_find_job(char *path, size_t len, char *err, size_t errlen)
{
    char dir[4096];
    int rc = es_ctl_default_dir(dir, sizeof(dir), err, errlen);
    if (rc < 0)
        return rc;
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        return -errno;
    }
    int found = 0;
    size_t el = 0;
    err[0] = '\0';
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t nl = strlen(e->d_name);
        if (nl < 6 || strcmp(e->d_name + nl - 5, ".sock") != 0)
            continue;
        char p[4400];
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        if (!es_ctl_lock_held(p))
            continue; /* a job that ended without cleaning up */
        if (found++ == 0)
            snprintf(path, len, "%s", p);
        if (el < errlen) {
            int k = snprintf(err + el, errlen - el, "%s%s", el ? ", " : "", p);
            if (k > 0)
                el += (size_t)k;
        }
    }
    closedir(d);
    if (found == 0) {
        snprintf(err, errlen, "no job is running (no live socket in %s); name one with --socket",
                 dir);
        return -ENOENT;
    }
    if (found > 1) {
        char list[2048];
        snprintf(list, sizeof(list), "%s", err);
        snprintf(err, errlen, "%d jobs are running; name one with --socket: %s", found, list);
        return -EEXIST;
    }
    return 0;
}

void es_ctl_clean_stale(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        int pid = 0, n = 0;
        /* job-PID.sock of a run that no longer exists and a lock nobody holds */
        if (sscanf(e->d_name, "job-%d.sock%n", &pid, &n) != 1 || e->d_name[n] || pid <= 0 ||
            kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        char p[4400], jobf[4500], lockf[4500];
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        if (es_ctl_lock_held(p))
            continue;
        es_ctl_job_paths(p, jobf, lockf, sizeof(jobf));
        unlink(p);
        unlink(jobf);
        unlink(lockf);
    }
    closedir(d);
}

int es_ctl_listen_unix(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct stat st;
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    /* The caller holds the job lock: a socket left here is stale. */
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return -EEXIST;
        unlink(path);
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    mode_t old = umask(0177);
    int r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    int e = errno;
    umask(old);
    if (r < 0 || chmod(path, 0600) < 0 || listen(fd, 64) < 0) {
        e = r < 0 ? e : errno;
        close(fd);
        return -e;
    }
    return fd;
}

/* "HOST:PORT" into host and port strings (IPv6 as [addr]:port). */
int es_ctl_split_hostport(const char *hp, char *host, size_t hl, char *port, size_t pl)
{
    const char *colon = strrchr(hp, ':');
    if (!colon || colon == hp || !colon[1])
        return -EINVAL;
    size_t n = (size_t)(colon - hp);
    const char *h = hp;
    if (h[0] == '[' && n >= 2 && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    long v;
    if (n >= hl || strlen(colon + 1) >= pl || es_ctl_parse_long(colon + 1, 0, 65535, &v) < 0)
        return -EINVAL;
    memcpy(host, h, n);
    host[n] = '\0';
    strcpy(port, colon + 1);
    return 0;
}

int es_ctl_listen_tcp(const char *hostport, char *bound, size_t len)
{
    char host[256], port[16];
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE }, *ai = NULL;
    int fd = -1, rc;
    if (es_ctl_split_hostport(hostport, host, sizeof(host), port, sizeof(port)) < 0)
        return -EINVAL;
    if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai)
        return -EADDRNOTAVAIL;
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0) {
        rc = -errno;
        goto fail;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char ab[INET6_ADDRSTRLEN] = "?";
    int p = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &in->sin_addr, ab, sizeof(ab));
            p = ntohs(in->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *in = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &in->sin6_addr, ab, sizeof(ab));
            p = ntohs(in->sin6_port);
        }
    }
    snprintf(bound, len, ss.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", ab, p);
    freeaddrinfo(ai);
    return fd;
fail:
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return rc;
}

int es_ctl_connect(const char *target, const char *token)
{
    int fd = -1, rc;
    struct addrinfo *ai = NULL;
    if (strncmp(target, "tcp:", 4) == 0) {
        char host[256], port[16];
        uint8_t auth[ES_PROTO_AUTH_SIZE];
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
        if (!token || es_proto_auth_encode(token, auth) < 0) {
            rc = -EACCES;
            goto fail;
        }
        if (es_ctl_split_hostport(target + 4, host, sizeof(host), port, sizeof(port)) < 0) {
            rc = -EINVAL;
            goto fail;
        }
        if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai) {
            rc = -EHOSTUNREACH;
            goto fail;
        }
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
            rc = -errno;
            goto fail;
        }
        if ((rc = es_proto_send_all(fd, auth, sizeof(auth), NULL)) < 0)
            goto fail;
        freeaddrinfo(ai);
        return fd;
    }
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(target) >= sizeof(sa.sun_path)) {
        rc = -ENAMETOOLONG;
        goto fail;
    }
    strcpy(sa.sun_path, target);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        rc = -errno;
        goto fail;
    }
    return fd;
fail:
    if (ai)
        freeaddrinfo(ai);
    if (fd >= 0)
        close(fd);
    return rc;
}

int es_ctl_peercred_sys(int fd, uid_t *uid, pid_t *pid)
{
    struct ucred uc;
    socklen_t l = sizeof(uc);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &l) < 0)
        return -errno;
    *uid = uc.uid;
    *pid = uc.pid;
    return 0;
}

int es_ctl_peer_check(int fd, uid_t want, es_ctl_peercred_fn get, pid_t *pid)
{
    uid_t u = (uid_t)-1;
    pid_t p = 0;
    int rc = get ? get(fd, &u, &p) : -EINVAL;
    if (rc < 0)
        return rc;
    if (u != want)
        return -EACCES;
    if (pid)
        *pid = p;
    return 0;
}

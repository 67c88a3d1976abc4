/* Configuration of libeasyscale.so from the environment, parsed strictly:
 * a value that is not one of the documented ones (an empty one included) is
 * an error (the constructor prints the message and exits with status 2),
 * never silently a default.
 *
 *   EASYSCALE_DETERMINISM      off | d1 | d2            (default d1)
 *   EASYSCALE_LOG              error | warn | info | debug (default warn)
 *   EASYSCALE_LOG_FILE         path, opened for append  (default stderr)
 *   EASYSCALE_AUDIT            off | warn | strict      (default warn)
 *   EASYSCALE_CANONICAL_DEVICE comma-separated GPU models (checked by
 *                              device/device.c; used in d2)
 *   EASYSCALE_D2_GEMM          int8 | fma: d2's GEMM kernels (kernels/gemm.h;
 *                              docs/D2-GEMM.md)          (default int8)
 *   EASYSCALE_MOVE             off | on | nomem | nolib  (default on at d1/d2, off at off)
 *   EASYSCALE_MOVE_TIMEOUT     seconds a move waits for the other threads, 1..3600 (60)
 *   EASYSCALE_MOVE_SIGNAL      off, or the signal that requests a move: SIGUSR1,
 *                              SIGUSR2, SIGRTMIN+n (default off)
 *   EASYSCALE_RUNTIME_HANDLES  real | virtual: what the CUDA runtime (libcudart)
 *                              gets from cuGetProcAddress
 *                              while handles are virtual (docs/MOVING.md, section 7)
 *                              (default real)
 *   EASYSCALE_SWAP_STREAMS     copies in flight during a swap, 1..16 (2)
 *   EASYSCALE_SWAP_CHECKSUMS   on | off: skip unchanged memory at swap-out (on)
 *   EASYSCALE_TIME_SLICE       off | on | overlap: the ESTs of one GPU take turns on it,
 *                              one resident at a time (on) or two, the next one's memory
 *                              coming back while the holder runs (overlap) (off)
 *   EASYSCALE_TIME_SLICE_KEEP  MiB of its device memory a time-sliced EST keeps on its
 *                              GPU while parked, 0..1048576 (whole allocations; a swap-in
 *                              then copies only what its collectives wrote) (0)
 *   EASYSCALE_XHOST            nccl | host: in a job across hosts, the levels of the
 *                              collectives between the hosts over NCCL on the GPUs, or in
 *                              host memory over TCP between the hosts' leaders (what a
 *                              parked EST can serve) (nccl; host with EASYSCALE_TIME_SLICE)
 *   EASYSCALE_COLLECTIVES      virtual | nccl   (default virtual at d1/d2, nccl at off)
 *   EASYSCALE_COLL_TRANSPORT   auto | nccl | device | host   (default auto)
 *   EASYSCALE_COLL_TIMEOUT     seconds a collective waits for a live peer, 1..86400
 *                              (default 30)
 *   EASYSCALE_COLL_CHUNK       staging chunk in bytes, a multiple of 64 in
 *                              [4096, 1 GiB] (default: the engine's)
 *   EASYSCALE_SLOT             physical device ordinal (0..1023) or "GPU-" UUID
 *                              (8-4-4-4-12 hex digits); which device exists is
 *                              checked after cuInit (device/vdev.c)
 *   EASYSCALE_CONTROL          the controller's socket: an absolute path,
 *                              unix:PATH or tcp:HOST:PORT (default: none,
 *                              no control thread); then RANK and WORLD_SIZE
 *                              are required, EASYSCALE_TOKEN with tcp
 *   EASYSCALE_TOKEN            16-64 printable characters, no spaces
 *   EASYSCALE_HEARTBEAT_MS     10..60000                (default 1000)
 *   EASYSCALE_HOLD_STEPS       steps at which the EST waits at its collective for
 *                              the controller's scheduled events: decimal,
 *                              comma-separated, strictly ascending, at most
 *                              ES_CFG_HOLD_MAX (needs EASYSCALE_CONTROL; set by
 *                              easyscale-ctl run)    (default: none)
 *   EASYSCALE_HOLD_TIMEOUT     seconds one such wait lasts at most, 1..86400 (600);
 *                              also a job hold a process asks for (coll/jobhold.c)
 *   EASYSCALE_DIGEST           a directory: collective digests, one file per
 *                              EST (coll/digest.h)   (default: none)
 */
#include "shim/config.h"
#include "wire/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

es_config_t es_cfg = {
    .determinism = ES_DET_D1,
    .log_level = ES_LOG_WARN,
    .log_fd = 2,
    .audit = ES_AUDIT_MODE_WARN,
    .collectives = ES_COLL_VIRTUAL,
    .coll_timeout_s = 30,
};

static int es_pick(const char *var, const char *val, const char *const *names, int n, int *out,
                   char *msg, size_t msglen)
{
    for (int i = 0; i < n; i++)
        if (strcmp(val, names[i]) == 0) {
            *out = i;
            return 0;
        }
    int k = *val ? snprintf(msg, msglen, "%s=\"%s\" is not valid: expected ", var, val)
                 : snprintf(msg, msglen, "%s is set but empty: expected ", var);
    for (int i = 0; i < n && k > 0 && (size_t)k < msglen; i++)
        k += snprintf(msg + k, msglen - (size_t)k, "%s%s", names[i],
                      i + 2 < n ? ", " : i + 1 < n ? " or " : "");
    return -EINVAL;
}

/* A decimal integer in [lo, hi], nothing else (no sign, space or suffix). */
static int es_parse_num(const char *var, const char *val, long long lo, long long hi,
                        long long *out, char *msg, size_t msglen)
{
    char *end = NULL;
    errno = 0;
    long long v = (*val >= '0' && *val <= '9') ? strtoll(val, &end, 10) : 0;
    if (!end || *end || errno || v < lo || v > hi) {
        snprintf(msg, msglen, "%s=\"%s\" is not valid: expected an integer in [%lld, %lld]",
                 var, val, lo, hi);
        return -EINVAL;
    }
    *out = v;
    return 0;
}

/* EASYSCALE_SLOT: an ordinal, or GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx. */
static int es_slot_syntax(const char *v)
{
    if (*v >= '0' && *v <= '9') {
        char *end = NULL;
        errno = 0;
        long n = strtol(v, &end, 10);
        return !*end && !errno && n >= 0 && n <= 1023;
    }
    if (strncmp(v, "GPU-", 4) != 0 || strlen(v) != 40)
        return 0;
    for (int i = 4; i < 40; i++) {
        int k = i - 4;
        int dash = k == 8 || k == 13 || k == 18 || k == 23;
        char ch = v[i];
        int hex = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
        if (dash ? ch != '-' : !hex)
            return 0;
    }
    return 1;
}

/* A decimal integer in [lo, hi], the whole string. */
static int es_parse_int(const char *var, const char *v, long lo, long hi, int *out, char *msg,
                        size_t msglen)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi) {
        snprintf(msg, msglen, "%s=\"%s\" is not valid: expected an integer in [%ld, %ld]", var, v,
                 lo, hi);
        return -EINVAL;
    }
    *out = (int)x;
    return 0;
}

/* off, SIGUSR1, SIGUSR2, SIGRTMIN, SIGRTMIN+n (n < SIGRTMAX - SIGRTMIN). */
static int es_parse_signal(const char *val, int *out, char *msg, size_t msglen)
{
    int n = 0;
    if (strcmp(val, "off") == 0) {
        *out = 0;
        return 0;
    }
    if (strcmp(val, "SIGUSR1") == 0) {
        *out = SIGUSR1;
        return 0;
    }
    if (strcmp(val, "SIGUSR2") == 0) {
        *out = SIGUSR2;
        return 0;
    }
    if (strncmp(val, "SIGRTMIN", 8) == 0 &&
        (val[8] == '\0' ||
         (val[8] == '+' && es_parse_int("EASYSCALE_MOVE_SIGNAL", val + 9, 0,
                                          SIGRTMAX - SIGRTMIN, &n, msg, msglen) == 0))) {
        *out = SIGRTMIN + n;
        return 0;
    }
    snprintf(msg, msglen, "EASYSCALE_MOVE_SIGNAL=\"%s\" is not valid: expected off, SIGUSR1, "
             "SIGUSR2, SIGRTMIN or SIGRTMIN+n", val);
    return -EINVAL;
}

/* EASYSCALE_CONTROL and what goes with it. */
static int es_config_control(es_config_t *c, char *msg, size_t msglen)
{
    const char *v = getenv("EASYSCALE_CONTROL"), *t;
    int rc = 0;
    c->heartbeat_ms = 1000;
    if ((t = getenv("EASYSCALE_HEARTBEAT_MS")) != NULL &&
        (rc = es_parse_int("EASYSCALE_HEARTBEAT_MS", t, 10, 60000, &c->heartbeat_ms, msg,
                           msglen)) < 0)
        goto out;
    if (!v)
        goto out;
    rc = -EINVAL;
    const char *path = strncmp(v, "unix:", 5) == 0 ? v + 5 : v;
    if (strncmp(v, "tcp:", 4) == 0) {
        const char *colon = strrchr(v + 4, ':');
        int port;
        if (!colon || colon == v + 4 ||
            es_parse_int("EASYSCALE_CONTROL port", colon + 1, 1, 65535, &port, msg, msglen) < 0) {
            snprintf(msg, msglen, "EASYSCALE_CONTROL=\"%s\" is not valid: expected tcp:HOST:PORT", v);
            goto out;
        }
        if (strlen(v) >= sizeof(c->control)) {
            snprintf(msg, msglen, "EASYSCALE_CONTROL is too long (at most %zu characters)",
                     sizeof(c->control) - 1);
            goto out;
        }
        if (!(t = getenv("EASYSCALE_TOKEN")) || es_proto_token_valid(t) < 0) {
            snprintf(msg, msglen, "EASYSCALE_CONTROL=%s needs EASYSCALE_TOKEN: %d to %d printable "
                     "characters without spaces", v, ES_PROTO_TOKEN_MIN, ES_PROTO_TOKEN_MAX);
            goto out;
        }
        strcpy(c->token, t);
    } else if (path[0] != '/' || strlen(path) >= 108) {
        snprintf(msg, msglen, "EASYSCALE_CONTROL=\"%s\" is not valid: expected an absolute socket "
                 "path (under 108 bytes), unix:PATH or tcp:HOST:PORT", v);
        goto out;
    }
    strcpy(c->control, strncmp(v, "tcp:", 4) == 0 ? v : path);
    if (!(t = getenv("WORLD_SIZE"))) {
        snprintf(msg, msglen, "EASYSCALE_CONTROL is set but WORLD_SIZE is not");
        goto out;
    }
    if (es_parse_int("WORLD_SIZE", t, 1, 65536, &c->world, msg, msglen) < 0)
        goto out;
    if (!(t = getenv("RANK"))) {
        snprintf(msg, msglen, "EASYSCALE_CONTROL is set but RANK is not");
        goto out;
    }
    if (es_parse_int("RANK", t, 0, c->world - 1, &c->rank, msg, msglen) < 0)
        goto out;
    rc = 0;
out:
    return rc;
}

/* EASYSCALE_HOLD_STEPS and EASYSCALE_HOLD_TIMEOUT (after the control
 * channel's variables: holds need it). */
static int es_config_hold(es_config_t *c, char *msg, size_t msglen)
{
    const char *v = getenv("EASYSCALE_HOLD_STEPS"), *t;
    int rc = 0;
    c->hold_timeout_s = 600;
    if ((t = getenv("EASYSCALE_HOLD_TIMEOUT")) != NULL &&
        (rc = es_parse_int("EASYSCALE_HOLD_TIMEOUT", t, 1, 86400, &c->hold_timeout_s, msg,
                           msglen)) < 0)
        goto out;
    if (!v)
        goto out;
    rc = -EINVAL;
    if (!c->control[0]) {
        snprintf(msg, msglen, "EASYSCALE_HOLD_STEPS is set but EASYSCALE_CONTROL is not: only "
                 "a controller releases the ESTs held at those steps");
        goto out;
    }
    const char *p = v;
    for (;;) {
        char *end = NULL;
        errno = 0;
        unsigned long long x = (*p >= '0' && *p <= '9') ? strtoull(p, &end, 10) : 0;
        if (!end || end == p || errno || x >= UINT64_MAX / 2 || (*end && *end != ',')) {
            snprintf(msg, msglen, "EASYSCALE_HOLD_STEPS=\"%.64s\" is not valid: expected "
                     "comma-separated step numbers", v);
            goto out;
        }
        if (c->nhold == ES_CFG_HOLD_MAX) {
            snprintf(msg, msglen, "EASYSCALE_HOLD_STEPS lists more than %d steps",
                     ES_CFG_HOLD_MAX);
            goto out;
        }
        if (c->nhold && x <= c->hold[c->nhold - 1]) {
            snprintf(msg, msglen, "EASYSCALE_HOLD_STEPS=\"%.64s\" is not valid: the steps must "
                     "be strictly ascending (%llu after %llu)", v, x,
                     (unsigned long long)c->hold[c->nhold - 1]);
            goto out;
        }
        c->hold[c->nhold++] = x;
        if (!*end)
            break;
        p = end + 1;
    }
    rc = 0;
out:
    return rc;
}

/* EASYSCALE_DIGEST: a directory path (created at the first collective). */
static int es_config_digest(es_config_t *c, char *msg, size_t msglen)
{
    const char *v = getenv("EASYSCALE_DIGEST");
    if (!v)
        return 0;
    if (!*v) {
        snprintf(msg, msglen, "EASYSCALE_DIGEST is set but empty: expected a directory");
        return -EINVAL;
    }
    if (strlen(v) >= sizeof(c->digest)) {
        snprintf(msg, msglen, "EASYSCALE_DIGEST is too long (at most %zu characters)",
                 sizeof(c->digest) - 1);
        return -EINVAL;
    }
    for (const char *p = v; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            snprintf(msg, msglen, "EASYSCALE_DIGEST has a control character: expected a "
                     "directory");
            return -EINVAL;
        }
    strcpy(c->digest, v);
    return 0;
}

/* EASYSCALE_XHOST, after EASYSCALE_TIME_SLICE: time-sliced ESTs need the
 * levels between the hosts in host memory (a parked EST has no GPU). */
static int es_config_xhost(es_config_t *c, char *msg, size_t msglen)
{
    static const char *const modes[] = { "nccl", "host" };
    const char *v = getenv("EASYSCALE_XHOST");
    c->xhost_host = c->time_slice != 0;
    if (!v)
        return 0;
    int rc = es_pick("EASYSCALE_XHOST", v, modes, 2, &c->xhost_host, msg, msglen);
    if (rc == 0 && !c->xhost_host && c->time_slice) {
        snprintf(msg, msglen, "EASYSCALE_XHOST=nccl: time-sliced ESTs (EASYSCALE_TIME_SLICE) "
                 "take part in their collectives while parked, without a GPU: they need "
                 "EASYSCALE_XHOST=host (the default with EASYSCALE_TIME_SLICE)");
        rc = -EINVAL;
    }
    return rc;
}

int es_config_parse(es_config_t *cfg, char *msg, size_t msglen)
{
    static const char *const dets[] = { "off", "d1", "d2" };
    static const char *const levels[] = { "error", "warn", "info", "debug" };
    static const char *const audits[] = { "off", "warn", "strict" };
    static const char *const moves[] = { "off", "on", "nomem", "nolib" };
    static const char *const onoff[] = { "off", "on" };
    static const char *const colls[] = { "nccl", "virtual" };
    static const char *const tps[] = { "auto", "device", "host", "nccl" };
    static const char *const d2gemms[] = { "int8", "fma" };
    static const char *const rths[] = { "real", "virtual" };
    es_config_t c = { .determinism = ES_DET_D1, .log_level = ES_LOG_WARN, .log_fd = 2,
                      .audit = ES_AUDIT_MODE_WARN, .move_timeout_s = 60, .swap_streams = 2,
                      .swap_sums = 1, .coll_timeout_s = 30 };
    const char *v;
    long long num;
    int rc = 0;

    if ((v = getenv("EASYSCALE_DETERMINISM")) != NULL &&
        (rc = es_pick("EASYSCALE_DETERMINISM", v, dets, 3, &c.determinism, msg, msglen)) < 0)
        goto out;
    if ((v = getenv("EASYSCALE_LOG")) != NULL &&
        (rc = es_pick("EASYSCALE_LOG", v, levels, 4, &c.log_level, msg, msglen)) < 0)
        goto out;
    if ((v = getenv("EASYSCALE_AUDIT")) != NULL &&
        (rc = es_pick("EASYSCALE_AUDIT", v, audits, 3, &c.audit, msg, msglen)) < 0)
        goto out;
    if ((v = getenv("EASYSCALE_CANONICAL_DEVICE")) != NULL) {
        if (!*v) {
            snprintf(msg, msglen, "EASYSCALE_CANONICAL_DEVICE is set but empty: expected a "
                     "comma-separated list of GPU models (unset it for the built-in device)");
            rc = -EINVAL;
            goto out;
        }
        if (strlen(v) >= sizeof(c.canonical)) {
            snprintf(msg, msglen, "EASYSCALE_CANONICAL_DEVICE is too long (at most %zu characters)",
                     sizeof(c.canonical) - 1);
            rc = -EINVAL;
            goto out;
        }
        strcpy(c.canonical, v);
    }
    if ((v = getenv("EASYSCALE_D2_GEMM")) != NULL &&
        (rc = es_pick("EASYSCALE_D2_GEMM", v, d2gemms, 2, &c.d2_gemm, msg, msglen)) < 0)
        goto out;
    if ((v = getenv("EASYSCALE_RUNTIME_HANDLES")) != NULL &&
        (rc = es_pick("EASYSCALE_RUNTIME_HANDLES", v, rths, 2, &c.runtime_virtual, msg,
                      msglen)) < 0)
        goto out;
    c.collectives = c.determinism == ES_DET_OFF ? ES_COLL_NCCL : ES_COLL_VIRTUAL;
    if ((v = getenv("EASYSCALE_COLLECTIVES")) != NULL &&
        (rc = es_pick("EASYSCALE_COLLECTIVES", v, colls, 2, &c.collectives, msg, msglen)) < 0)
        goto out;
    if ((v = getenv("EASYSCALE_COLL_TRANSPORT")) != NULL &&
        (rc = es_pick("EASYSCALE_COLL_TRANSPORT", v, tps, 4, &c.coll_transport, msg, msglen)) < 0)
        goto out;
    if ((v = getenv("EASYSCALE_COLL_TIMEOUT")) != NULL) {
        if ((rc = es_parse_num("EASYSCALE_COLL_TIMEOUT", v, 1, 86400, &num, msg, msglen)) < 0)
            goto out;
        c.coll_timeout_s = (int)num;
    }
    if ((v = getenv("EASYSCALE_COLL_CHUNK")) != NULL) {
        if ((rc = es_parse_num("EASYSCALE_COLL_CHUNK", v, 4096, 1LL << 30, &num, msg, msglen)) < 0)
            goto out;
        if (num % 64) {
            snprintf(msg, msglen, "EASYSCALE_COLL_CHUNK=\"%s\" is not valid: expected a "
                     "multiple of 64", v);
            rc = -EINVAL;
            goto out;
        }
        c.coll_chunk = (size_t)num;
    }
    if ((v = getenv("EASYSCALE_SLOT")) != NULL) {
        if (!es_slot_syntax(v)) {
            snprintf(msg, msglen, "EASYSCALE_SLOT=\"%.64s\" is not valid: expected a device "
                     "ordinal (0..1023) or GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", v);
            rc = -EINVAL;
            goto out;
        }
        strcpy(c.slot, v);
    }
    if ((rc = es_config_control(&c, msg, msglen)) < 0)
        goto out;
    if ((rc = es_config_hold(&c, msg, msglen)) < 0)
        goto out;
    if ((rc = es_config_digest(&c, msg, msglen)) < 0)
        goto out;
    if ((v = getenv("EASYSCALE_LOG_FILE")) != NULL) {
        if (!*v) {
            snprintf(msg, msglen, "EASYSCALE_LOG_FILE is set but empty: expected a file path");
            rc = -EINVAL;
            goto out;
        }
        int fd = open(v, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) {
            snprintf(msg, msglen, "EASYSCALE_LOG_FILE=\"%s\": cannot open: %s", v, strerror(errno));
            rc = -EINVAL;
            goto out;
        }
        c.log_fd = fd;
    }
    c.move = c.determinism == ES_DET_OFF ? ES_MOVE_OFF : ES_MOVE_ON;
    if ((v = getenv("EASYSCALE_MOVE")) != NULL &&
        (rc = es_pick("EASYSCALE_MOVE", v, moves, 4, &c.move, msg, msglen)) < 0)
        goto out;
    if ((v = getenv("EASYSCALE_MOVE_TIMEOUT")) != NULL &&
        (rc = es_parse_int("EASYSCALE_MOVE_TIMEOUT", v, 1, 3600, &c.move_timeout_s, msg,
                             msglen)) < 0)
        goto out;
    if ((v = getenv("EASYSCALE_MOVE_SIGNAL")) != NULL &&
        (rc = es_parse_signal(v, &c.move_signal, msg, msglen)) < 0)
        goto out;
    if ((v = getenv("EASYSCALE_SWAP_STREAMS")) != NULL &&
        (rc = es_parse_int("EASYSCALE_SWAP_STREAMS", v, 1, 16, &c.swap_streams, msg,
                             msglen)) < 0)
        goto out;
    if ((v = getenv("EASYSCALE_SWAP_CHECKSUMS")) != NULL &&
        (rc = es_pick("EASYSCALE_SWAP_CHECKSUMS", v, onoff, 2, &c.swap_sums, msg, msglen)) < 0)
        goto out;
    static const char *const ts_modes[] = { "off", "on", "overlap" };
    if ((v = getenv("EASYSCALE_TIME_SLICE")) != NULL &&
        (rc = es_pick("EASYSCALE_TIME_SLICE", v, ts_modes, 3, &c.time_slice, msg, msglen)) < 0)
        goto out;
    if ((v = getenv("EASYSCALE_TIME_SLICE_KEEP")) != NULL) {
        if ((rc = es_parse_num("EASYSCALE_TIME_SLICE_KEEP", v, 0, 1 << 20, &num, msg,
                               msglen)) < 0)
            goto out;
        if (!c.time_slice && num) {
            snprintf(msg, msglen, "EASYSCALE_TIME_SLICE_KEEP=%s needs EASYSCALE_TIME_SLICE=on "
                     "or overlap", v);
            rc = -EINVAL;
            goto out;
        }
        c.ts_keep = (size_t)num << 20;
    }
    if ((rc = es_config_xhost(&c, msg, msglen)) < 0)
        goto out;
    if (c.time_slice && (c.move == ES_MOVE_OFF || c.collectives != ES_COLL_VIRTUAL)) {
        snprintf(msg, msglen, "EASYSCALE_TIME_SLICE=%s needs moves (EASYSCALE_MOVE on or "
                 "nomem, nolib) and the virtual collectives (EASYSCALE_COLLECTIVES=virtual)",
                 ts_modes[c.time_slice]);
        rc = -EINVAL;
        goto out;
    }
    c.stats = c.log_level >= ES_LOG_DEBUG;
    *cfg = c;
out:
    return rc;
}

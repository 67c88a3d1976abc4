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
 *                              context/device.c; used in d2)
 *   EASYSCALE_CONTROL          the controller's socket: an absolute path,
 *                              unix:PATH or tcp:HOST:PORT (default: none,
 *                              no control thread); then RANK and WORLD_SIZE
 *                              are required, EASYSCALE_TOKEN with tcp
 *   EASYSCALE_TOKEN            16-64 printable characters, no spaces
 *   EASYSCALE_HEARTBEAT_MS     10..60000                (default 1000)
 */
#include "shim/shim.h"
#include "controller/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

es_config_t es_cfg = {
    .determinism = ES_DET_D1,
    .log_level = ES_LOG_WARN,
    .log_fd = 2,
    .audit = ES_AUDIT_MODE_WARN,
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

int es_config_parse(es_config_t *cfg, char *msg, size_t msglen)
{
    static const char *const dets[] = { "off", "d1", "d2" };
    static const char *const levels[] = { "error", "warn", "info", "debug" };
    static const char *const audits[] = { "off", "warn", "strict" };
    es_config_t c = { .determinism = ES_DET_D1, .log_level = ES_LOG_WARN, .log_fd = 2,
                      .audit = ES_AUDIT_MODE_WARN };
    const char *v;
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
    if ((rc = es_config_control(&c, msg, msglen)) < 0)
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
    c.stats = c.log_level >= ES_LOG_DEBUG;
    *cfg = c;
out:
    return rc;
}

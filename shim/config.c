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
 */
#include "shim/shim.h"

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

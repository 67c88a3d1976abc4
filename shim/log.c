/* The shim's log: one line per message, written with a single write(2) to
 * stderr or EASYSCALE_LOG_FILE. No allocation, no lock (safe after fork and
 * from any thread). ES_LOG (shim/log.h) evaluates nothing when the level is off. */
#include "shim/config.h"
#include "shim/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

void es_log_write(int level, const char *fmt, ...)
{
    static const char *const names[] = { "error", "warn", "info", "debug" };
    char buf[4096]; /* room for a message with a host stack (audit/modaudit.c) */
    int n = snprintf(buf, sizeof(buf), "easyscale[%d]: %s: ", (int)getpid(),
                     names[level < 0 ? 0 : level > 3 ? 3 : level]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(buf))
        n += vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(buf) - 1)
        n = (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    ssize_t w = write(es_cfg.log_fd, buf, (size_t)n);
    (void)w;
}

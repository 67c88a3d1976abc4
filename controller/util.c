/* easyscale-ctl's small utilities: messages, clocks, strict parsers, a
 * growing text buffer with JSON strings. */
#include "controller/ctl.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void es_ctl_err(const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    fprintf(stderr, "easyscale-ctl: %s\n", line);
    fflush(stderr);
}

void es_ctl_log(const char *fmt, ...)
{
    char line[2048];
    struct timespec ts;
    struct tm tm;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "easyscale-ctl[%d] %02d:%02d:%02d.%03ld %s\n", (int)getpid(), tm.tm_hour,
            tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, line);
    fflush(stderr);
}

const char *es_ctl_level_name(int determinism)
{
    return determinism == 2 ? "d2" : determinism == 1 ? "d1" : "off";
}

int64_t es_ctl_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t es_ctl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int es_ctl_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    if (!s || !*s || (*s != '-' && (*s < '0' || *s > '9')))
        return -EINVAL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || errno || v < lo || v > hi)
        return -EINVAL;
    *out = v;
    return 0;
}

int es_ctl_parse_size(const char *s, uint64_t *out)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || v == 0)
        return -EINVAL;
    unsigned shift = 0;
    if (*end) {
        switch (*end) {
        case 'K': case 'k': shift = 10; break;
        case 'M': case 'm': shift = 20; break;
        case 'G': case 'g': shift = 30; break;
        case 'T': case 't': shift = 40; break;
        default: return -EINVAL;
        }
        end++;
        if (end[0] == 'i' && end[1] == 'B')
            end += 2;
        else if (end[0] == 'B')
            end++;
        if (*end)
            return -EINVAL;
    }
    if (v > (1ull << 50) >> shift)
        return -EINVAL;
    *out = (uint64_t)v << shift;
    return 0;
}

int es_ctl_parse_seconds(const char *s, double lo, double hi, double *out)
{
    char *end;
    if (!s || !*s || ((*s < '0' || *s > '9') && *s != '.'))
        return -EINVAL;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno || !isfinite(v) || v < lo || v > hi)
        return -EINVAL;
    *out = v;
    return 0;
}

void es_ctl_buf_printf(es_ctl_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    if (b->oom)
        return;
    for (;;) {
        size_t room = b->cap - b->len;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

void es_ctl_buf_json_str(es_ctl_buf_t *b, const char *s)
{
    es_ctl_buf_printf(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            es_ctl_buf_printf(b, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            es_ctl_buf_printf(b, "\\u%04x", c);
        else
            es_ctl_buf_printf(b, "%c", c);
    }
    es_ctl_buf_printf(b, "\"");
}

void es_ctl_buf_free(es_ctl_buf_t *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}


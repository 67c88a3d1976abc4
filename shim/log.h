/* The shim's log (shim/log.c): one line per message, one write(2) to
 * stderr or EASYSCALE_LOG_FILE. ES_LOG(level, fmt, ...) evaluates nothing,
 * not even its arguments, when the level (EASYSCALE_LOG) is off. Safe from
 * any thread; takes no lock and allocates nothing. */
#ifndef ES_SHIM_LOG_H
#define ES_SHIM_LOG_H

#include "shim/config.h"

void es_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define ES_LOG(level, ...)                                                     \
    do {                                                                       \
        if (__builtin_expect(es_cfg.log_level >= (level), 0))                  \
            es_log_write((level), __VA_ARGS__);                                \
    } while (0)
#define ES_ERROR(...) ES_LOG(ES_LOG_ERROR, __VA_ARGS__)
#define ES_WARN(...) ES_LOG(ES_LOG_WARN, __VA_ARGS__)
#define ES_INFO(...) ES_LOG(ES_LOG_INFO, __VA_ARGS__)
#define ES_DEBUG(...) ES_LOG(ES_LOG_DEBUG, __VA_ARGS__)

#endif

/* Helpers of the virtual collectives that every file of coll/ may call
 * (the bottom of coll/: it calls no other file of coll/): the last error
 * message (ncclGetLastError), the clock, element sizes, the shard rule,
 * and the progress counters of the step signal (coll.h). */
#include "coll/coll_int.h"
#include "shim/step.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* ---- the last error ------------------------------------------------------------------ */

static pthread_mutex_t es_coll_err_mu = PTHREAD_MUTEX_INITIALIZER;
static char es_coll_errbuf[512];
static pthread_once_t es_coll_err_once = PTHREAD_ONCE_INIT;

static void es_coll_err_atfork_child(void)
{
    pthread_mutex_init(&es_coll_err_mu, NULL);
}

static void es_coll_err_init(void)
{
    pthread_atfork(NULL, NULL, es_coll_err_atfork_child);
}

void es_coll_error(const char *fmt, ...)
{
    char buf[sizeof(es_coll_errbuf)];
    va_list ap;
    pthread_once(&es_coll_err_once, es_coll_err_init);
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&es_coll_err_mu);
    memcpy(es_coll_errbuf, buf, sizeof(buf));
    pthread_mutex_unlock(&es_coll_err_mu);
    ES_INFO("collectives: %s", buf);
}

const char *es_coll_last_error(void)
{
    /* NCCL's contract: the string stays valid (it may be overwritten). */
    return es_coll_errbuf;
}

/* ---- progress (coll.h) ------------------------------------------------------------- */

static uint64_t es_prog_count, es_prog_ns;

void es_coll_progress(es_coll_progress_t *out)
{
    if (!out)
        return;
    out->allreduces = __atomic_load_n(&es_prog_count, __ATOMIC_ACQUIRE);
    out->last_ns = __atomic_load_n(&es_prog_ns, __ATOMIC_ACQUIRE);
}

/* A gradient all-reduce completed: the progress counters here and the
 * control channel's step (shim/step.h). */
void es_coll_progress_add(void)
{
    es_step_tick();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    __atomic_store_n(&es_prog_ns, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec,
                     __ATOMIC_RELEASE);
    __atomic_fetch_add(&es_prog_count, 1, __ATOMIC_ACQ_REL);
}

/* ---- clock, sizes, shards -------------------------------------------------------------- */

uint64_t es_coll_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static const char *const es_op_names[ES_OP_KINDS] = {
    "ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather", "ncclReduceScatter",
    "ncclSend", "ncclRecv",
};

const char *es_coll_op_name(int kind)
{
    return kind >= 0 && kind < ES_OP_KINDS ? es_op_names[kind] : "?";
}

size_t es_coll_type_size(int dtype)
{
    static const unsigned char sz[ES_RT_COUNT] = { 1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1 };
    return dtype >= 0 && dtype < ES_RT_COUNT ? sz[dtype] : 0;
}

void es_coll_shard(size_t n, size_t esize, int r, int nr, size_t *lo, size_t *hi)
{
    size_t unit = esize >= 64 ? 1 : 64 / esize;
    size_t units = (n + unit - 1) / unit;
    size_t q = units / (size_t)nr, rem = units % (size_t)nr;
    size_t a = (size_t)r * q + ((size_t)r < rem ? (size_t)r : rem);
    size_t b = a + q + ((size_t)r < rem ? 1 : 0);
    *lo = a * unit < n ? a * unit : n;
    *hi = b * unit < n ? b * unit : n;
}

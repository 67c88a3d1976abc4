/* The handle arena (lib/harena.h): one anonymous reservation, carved
 * from the bottom in 64-byte multiples; given-back slots go to a free list
 * per size class and are reused first. Nothing is ever unmapped. */
#include "lib/harena.h"

#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#define ES_HA_ALIGN 64
#define ES_HA_CLASSES (ES_HARENA_MAX_OBJ / ES_HA_ALIGN)

uintptr_t es_harena_lo;
size_t es_harena_len;

static pthread_mutex_t es_ha_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t es_ha_once = PTHREAD_ONCE_INIT;
static char *es_ha_base;
static size_t es_ha_top;                    /* bytes carved so far */
/* per class: a list through each slot's second word (the first, where an
 * object keeps its real handle, is left as the caller set it) */
static void *es_ha_free[ES_HA_CLASSES + 1];
static size_t es_ha_used;

static void es_ha_reserve(void)
{
    void *p = mmap(NULL, ES_HARENA_SIZE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return;
    es_ha_base = p;
    /* published before any object exists (the first allocation follows);
     * the base first: while the length is 0 no value is in the arena, and
     * a base of 0 with the length set would take NULL and the special
     * stream values for objects */
    __atomic_store_n(&es_harena_lo, (uintptr_t)p, __ATOMIC_RELEASE);
    __atomic_store_n(&es_harena_len, ES_HARENA_SIZE, __ATOMIC_RELEASE);
}

static size_t es_ha_class(size_t size)
{
    return (size + ES_HA_ALIGN - 1) / ES_HA_ALIGN;
}

void *es_harena_alloc(size_t size)
{
    void *p = NULL;
    if (size == 0 || size > ES_HARENA_MAX_OBJ)
        return NULL;
    pthread_once(&es_ha_once, es_ha_reserve);
    if (!es_ha_base)
        return NULL;
    size_t k = es_ha_class(size), bytes = k * ES_HA_ALIGN;
    pthread_mutex_lock(&es_ha_mu);
    if (es_ha_free[k]) {
        p = es_ha_free[k];
        memcpy(&es_ha_free[k], (char *)p + sizeof(void *), sizeof(void *));
    } else if (es_ha_top + bytes <= ES_HARENA_SIZE) {
        p = es_ha_base + es_ha_top;
        es_ha_top += bytes;
    }
    if (p)
        es_ha_used += bytes;
    pthread_mutex_unlock(&es_ha_mu);
    if (p)
        memset(p, 0, bytes);
    return p;
}

void es_harena_free(void *p, size_t size)
{
    if (!p || !es_harena_has(p) || size == 0 || size > ES_HARENA_MAX_OBJ)
        return;
    size_t k = es_ha_class(size);
    pthread_mutex_lock(&es_ha_mu);
    memcpy((char *)p + sizeof(void *), &es_ha_free[k], sizeof(void *));
    es_ha_free[k] = p;
    es_ha_used -= k * ES_HA_ALIGN;
    pthread_mutex_unlock(&es_ha_mu);
}

size_t es_harena_in_use(void)
{
    pthread_mutex_lock(&es_ha_mu);
    size_t n = es_ha_used;
    pthread_mutex_unlock(&es_ha_mu);
    return n;
}

/* Open-addressing hash map, 64-bit keys to pointers (see hmap.h): linear
 * probing, tombstones for removals, rebuilt at 3/4 occupancy. */
#include "lib/hmap.h"

#include <errno.h>
#include <stdlib.h>

#define ES_HMAP_TOMB UINT64_MAX

static size_t es_hmap_slot(uint64_t k, size_t cap)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k & (cap - 1);
}

static int es_hmap_grow(es_hmap_t *m)
{
    size_t ncap = m->cap ? m->cap : 16;
    while (m->live * 2 >= ncap)
        ncap *= 2;
    uint64_t *nk = calloc(ncap, sizeof(*nk));
    void **nv = calloc(ncap, sizeof(*nv));
    if (!nk || !nv) {
        free(nk);
        free(nv);
        return -ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        uint64_t k = m->keys[i];
        if (k == 0 || k == ES_HMAP_TOMB)
            continue;
        size_t s = es_hmap_slot(k, ncap);
        while (nk[s])
            s = (s + 1) & (ncap - 1);
        nk[s] = k;
        nv[s] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = nk;
    m->vals = nv;
    m->cap = ncap;
    m->used = m->live;
    return 0;
}

int es_hmap_put(es_hmap_t *m, uint64_t key, void *val)
{
    if (key == 0 || key == ES_HMAP_TOMB || !val)
        return -EINVAL;
    if ((m->used + 1) * 4 > m->cap * 3) {
        int rc = es_hmap_grow(m);
        if (rc)
            return rc;
    }
    size_t s = es_hmap_slot(key, m->cap), tomb = SIZE_MAX;
    while (m->keys[s]) {
        if (m->keys[s] == key) {
            m->vals[s] = val;
            return 0;
        }
        if (m->keys[s] == ES_HMAP_TOMB && tomb == SIZE_MAX)
            tomb = s;
        s = (s + 1) & (m->cap - 1);
    }
    if (tomb != SIZE_MAX)
        s = tomb;
    else
        m->used++;
    m->keys[s] = key;
    m->vals[s] = val;
    m->live++;
    return 0;
}

static size_t es_hmap_find(const es_hmap_t *m, uint64_t key)
{
    if (!m->cap || key == 0 || key == ES_HMAP_TOMB)
        return SIZE_MAX;
    size_t s = es_hmap_slot(key, m->cap);
    while (m->keys[s]) {
        if (m->keys[s] == key)
            return s;
        s = (s + 1) & (m->cap - 1);
    }
    return SIZE_MAX;
}

void *es_hmap_get(const es_hmap_t *m, uint64_t key)
{
    size_t s = es_hmap_find(m, key);
    return s == SIZE_MAX ? NULL : m->vals[s];
}

void *es_hmap_del(es_hmap_t *m, uint64_t key)
{
    size_t s = es_hmap_find(m, key);
    if (s == SIZE_MAX)
        return NULL;
    void *v = m->vals[s];
    m->keys[s] = ES_HMAP_TOMB;
    m->vals[s] = NULL;
    m->live--;
    return v;
}

void es_hmap_free(es_hmap_t *m)
{
    free(m->keys);
    free(m->vals);
    *m = (es_hmap_t)ES_HMAP_INIT;
}

/* A small open-addressing hash map from 64-bit keys to pointers, for the
 * registries of move/ (stand-in handles, real -> virtual handles).
 *
 * Contract: not thread-safe (callers hold their registry's lock); key 0 is
 * not allowed (it marks an empty slot); values may be anything but NULL
 * (es_hmap_get returns NULL for "absent"). es_hmap_put grows the table and
 * returns 0 or -ENOMEM (the map is then unchanged); es_hmap_del returns the
 * value it removed, or NULL.
 */
#ifndef ES_LIB_HMAP_H
#define ES_LIB_HMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct es_hmap {
    uint64_t *keys;   /* 0 empty, ES_HMAP_TOMB removed */
    void **vals;
    size_t cap;       /* a power of two, or 0 */
    size_t used;      /* live + removed slots */
    size_t live;
} es_hmap_t;

#define ES_HMAP_INIT { NULL, NULL, 0, 0, 0 }

int es_hmap_put(es_hmap_t *m, uint64_t key, void *val);
void *es_hmap_get(const es_hmap_t *m, uint64_t key);
void *es_hmap_del(es_hmap_t *m, uint64_t key);
void es_hmap_free(es_hmap_t *m);

#endif

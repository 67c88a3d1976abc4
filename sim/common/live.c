/* Registry of live objects by address for simcuda's libraries (live.h). */
#include "sim/common/live.h"

#include <errno.h>
#include <stdlib.h>

int sim_live_add(sim_live_t *s, const void *p)
{
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    if (s->len == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        const void **n = realloc(s->items, cap * sizeof(*n));
        if (!n) {
            rc = -ENOMEM;
            goto out;
        }
        s->items = n;
        s->cap = cap;
    }
    s->items[s->len++] = p;
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sim_live_remove(sim_live_t *s, const void *p)
{
    int found = 0;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->len; i++)
        if (s->items[i] == p) {
            s->items[i] = s->items[--s->len];
            found = 1;
            break;
        }
    pthread_mutex_unlock(&s->lock);
    return found;
}

int sim_live_has(sim_live_t *s, const void *p)
{
    int found = 0;
    if (!p)
        return 0;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->len && !found; i++)
        found = s->items[i] == p;
    pthread_mutex_unlock(&s->lock);
    return found;
}

/* A set of live objects known by address (cuBLAS and cuDNN handles, cuDNN
 * descriptors, NCCL communicators), shared by simcuda's libraries: an API
 * looks a pointer up here before reading through it, so a destroyed or
 * foreign handle is refused with the library's status code instead of
 * crashing. Thread-safe; lookups are linear (sets stay small). */
#ifndef SIM_LIVE_H
#define SIM_LIVE_H

#include <pthread.h>
#include <stddef.h>

typedef struct sim_live {
    pthread_mutex_t lock;
    const void **items;
    size_t len, cap;
} sim_live_t;

#define SIM_LIVE_INIT {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0}

/* Adds p. Returns 0 or -ENOMEM (set unchanged). */
int sim_live_add(sim_live_t *s, const void *p);

/* Removes p. Returns 1 when it was there, 0 when not (nothing done). */
int sim_live_remove(sim_live_t *s, const void *p);

/* Whether p is in the set (NULL never is). */
int sim_live_has(sim_live_t *s, const void *p);

#endif

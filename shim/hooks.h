/* What the spine calls above itself: the functions intercept/ hands the
 * spine, declared here so that the spine depends on nothing above it but
 * this contract (scripts/check-deps allows exactly the names declared in
 * this file and shim/move.h as the spine's undefined symbols defined
 * elsewhere). */
#ifndef ES_SHIM_HOOKS_H
#define ES_SHIM_HOOKS_H

#include <stddef.h>

/* Start-up, from the constructor after the configuration is parsed
 * (intercept/enter.c): d2's device identity (EASYSCALE_CANONICAL_DEVICE).
 * Returns 0, or a negative errno with one line in msg; the constructor then
 * prints it and exits with status 2. */
int es_intercept_start(char *msg, size_t msglen);

/* While handles are virtual, the refusing stub for a driver function that
 * takes one and is not wrapped (intercept/virtual/refuse.c), by exported symbol
 * (dlsym) or by the name cuGetProcAddress is asked for; NULL otherwise. */
void *es_refusal_by_symbol(const char *name);
/* While the vendors' handles are virtual (intercept/virtual/libh.h): the shim's
 * translating wrapper of a cuBLAS / cuBLASLt / cuDNN function that takes
 * one of their handles and that funcs.h does not list (intercept/virtual/libh_gen.c),
 * when the library has it (handle: dlsym's; a specific one only when it
 * answers with the very function the shim calls); NULL otherwise. */
void *es_libh_wrapper_by_symbol(void *handle, const char *name);

/* Called once a library is loaded, its tables filled (intercept/virtual/thunks.c):
 * the engine's driver table, the translating thunks. */
void es_lib_loaded(int lib, void *handle, void *(*lookup)(void *, const char *));

#endif

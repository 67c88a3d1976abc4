/* The refusing stubs of intercept/virtual/refuse.c by the name
 * cuGetProcAddress is asked for (the symbol without its version suffix):
 * while handles are virtual, a driver function that takes one and that
 * shim/funcs.h does not wrap; NULL otherwise. (By exported symbol, for
 * dlsym: es_refusal_by_symbol, shim/hooks.h.) */
#ifndef ES_INTERCEPT_VIRTUAL_REFUSE_H
#define ES_INTERCEPT_VIRTUAL_REFUSE_H

void *es_refusal_by_base(const char *base);

#endif

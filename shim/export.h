/* What libeasyscale.so exports (the wrappers, dlsym, the easyscale_*
 * functions of shim/easyscale.h) is marked ES_EXPORT: everything else is
 * hidden (-fvisibility=hidden, shim/libeasyscale.map). */
#ifndef ES_SHIM_EXPORT_H
#define ES_SHIM_EXPORT_H

#define ES_EXPORT __attribute__((visibility("default")))

#endif

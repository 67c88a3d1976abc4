/* Architecture check of device-code images (see archcheck.h). */
#include "kernels/archcheck.h"
#include "fatbin/fatbin.h"

#include <stdint.h>

typedef struct {
    unsigned cc; /* major * 10 + minor */
    int ok;
} es_arch_probe_t;

static int es_arch_entry(const es_fatbin_entry_t *e, void *arg)
{
    es_arch_probe_t *p = arg;
    if (e->kind == ES_ENTRY_CUBIN && e->arch / 10 == p->cc / 10 && e->arch <= p->cc)
        p->ok = 1;
    if (e->kind == ES_ENTRY_PTX && e->arch <= p->cc)
        p->ok = 1;
    return 0;
}

int es_image_runs_on(const void *image, size_t size, int major, int minor)
{
    size_t sz = size;
    int kind = es_image_probe(image, size, &sz);
    if (kind < 0)
        return kind;
    es_arch_probe_t p = { (unsigned)(major * 10 + minor), 0 };
    int r = es_fatbin_walk(image, sz, es_arch_entry, &p);
    return r < 0 ? r : p.ok;
}

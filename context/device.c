/* Canonical device attributes for d2 (see device.h). Figures are the public
 * specifications of each model. */
#include "context/device.h"

#include <cuda.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef struct es_model {
    const char *key;
    int cc_major, cc_minor;
    int sms;
    int threads_per_sm;
    int blocks_per_sm;
    int smem_per_sm;       /* bytes */
    int smem_optin;        /* max shared memory per block, opt-in */
    int l2_bytes;
    int regs_per_sm;
} es_model_t;

static const es_model_t es_models[] = {
    { "p100", 6, 0, 56, 2048, 32, 65536, 49152, 4194304, 65536 },
    { "v100", 7, 0, 80, 2048, 32, 98304, 98304, 6291456, 65536 },
    { "t4", 7, 5, 40, 1024, 16, 65536, 65536, 4194304, 65536 },
    { "a100", 8, 0, 108, 2048, 32, 167936, 166912, 41943040, 65536 },
    { "a10", 8, 6, 72, 1536, 16, 102400, 101376, 6291456, 65536 },
    { "l4", 8, 9, 58, 1536, 24, 102400, 101376, 50331648, 65536 },
    { "h100", 9, 0, 132, 2048, 32, 233472, 232448, 52428800, 65536 },
    { "h200", 9, 0, 132, 2048, 32, 233472, 232448, 52428800, 65536 },
};

static es_model_t es_canon = { "builtin", 7, 0, 80, 2048, 32, 98304, 98304, 6291456, 65536 };

static void es_min_into(es_model_t *c, const es_model_t *m)
{
    if (m->cc_major < c->cc_major || (m->cc_major == c->cc_major && m->cc_minor < c->cc_minor)) {
        c->cc_major = m->cc_major;
        c->cc_minor = m->cc_minor;
    }
#define ES_MIN(f) if (m->f < c->f) c->f = m->f
    ES_MIN(sms);
    ES_MIN(threads_per_sm);
    ES_MIN(blocks_per_sm);
    ES_MIN(smem_per_sm);
    ES_MIN(smem_optin);
    ES_MIN(l2_bytes);
    ES_MIN(regs_per_sm);
#undef ES_MIN
}

int es_device_init(const char *list, char *msg, size_t msglen)
{
    if (!list || !*list)
        return 0;
    es_model_t c = { "list", 99, 99, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30,
                     1 << 30 };
    const char *p = list;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const es_model_t *m = NULL;
        for (size_t i = 0; i < sizeof(es_models) / sizeof(es_models[0]); i++)
            if (strlen(es_models[i].key) == len && strncasecmp(es_models[i].key, p, len) == 0)
                m = &es_models[i];
        if (!m) {
            snprintf(msg, msglen,
                     "EASYSCALE_CANONICAL_DEVICE=\"%s\": %s '%.*s' (expected a comma-separated "
                     "list of p100 v100 t4 a100 a10 l4 h100 h200)",
                     list, len ? "unknown model" : "empty entry", (int)len, p);
            return -EINVAL;
        }
        es_min_into(&c, m);
        if (!end)
            break;
        p = end + 1;
    }
    es_canon = c;
    return 0;
}

int es_device_canonical_attr(int attr, int *value)
{
    int v;
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = es_canon.sms; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = es_canon.cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = es_canon.cc_minor; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = es_canon.threads_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: v = es_canon.blocks_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: v = es_canon.smem_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: v = es_canon.smem_optin; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: v = es_canon.l2_bytes; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: v = es_canon.regs_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = 32; break;
    default: return 0;
    }
    *value = v;
    return 1;
}

void es_device_canonical_cc(int *major, int *minor)
{
    *major = es_canon.cc_major;
    *minor = es_canon.cc_minor;
}

/* d2's device identity (see device.h). Figures are the public
 * specifications of each model (the CUDA C++ Programming Guide's per
 * compute capability limits, the data sheets' SM counts and L2 sizes). */
#include "device/device.h"

#include <cuda.h>
#include <dlfcn.h>
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

#define ES_MODEL_KEYS "t4 a100 a10 l4 h100 h200 b200"
static const es_model_t es_models[] = {
    { "t4", 7, 5, 40, 1024, 16, 65536, 65536, 4194304, 65536 },
    { "a100", 8, 0, 108, 2048, 32, 167936, 166912, 41943040, 65536 },
    { "a10", 8, 6, 72, 1536, 16, 102400, 101376, 6291456, 65536 },
    { "l4", 8, 9, 58, 1536, 24, 102400, 101376, 50331648, 65536 },
    { "h100", 9, 0, 132, 2048, 32, 233472, 232448, 52428800, 65536 },
    { "h200", 9, 0, 132, 2048, 32, 233472, 232448, 52428800, 65536 },
    { "b200", 10, 0, 148, 2048, 32, 233472, 232448, 132120576, 65536 },
};

static int es_canon_set;
static es_model_t es_canon;

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
    es_canon_set = 0;
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
                     "list of " ES_MODEL_KEYS ")",
                     list, len ? "unknown model" : "empty entry", (int)len, p);
            return -EINVAL;
        }
        es_min_into(&c, m);
        if (!end)
            break;
        p = end + 1;
    }
    es_canon = c;
    es_canon_set = 1;
    return 0;
}

int es_device_canonical_set(void)
{
    return es_canon_set;
}

int es_device_canonical_attr(int attr, int *value)
{
    int v;
    if (!es_canon_set)
        return 0;
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = es_canon.sms; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = es_canon.threads_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: v = es_canon.blocks_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: v = es_canon.smem_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: v = es_canon.smem_optin; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: v = es_canon.l2_bytes; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: v = es_canon.regs_per_sm; break;
    /* the same on every supported model; lowered all the same */
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = 1024; break;
    default: return 0;
    }
    *value = v;
    return 1;
}

void es_device_canonical_cc(int *major, int *minor)
{
    *major = es_canon_set ? es_canon.cc_major : 99;
    *minor = es_canon_set ? es_canon.cc_minor : 99;
}

/* The file name (without directories) of the object holding addr. */
static const char *es_object_of(const void *addr, const char **path)
{
    Dl_info info;
    if (!addr || !dladdr(addr, &info) || !info.dli_fname)
        return NULL;
    const char *b = strrchr(info.dli_fname, '/');
    *path = info.dli_fname;
    return b ? b + 1 : info.dli_fname;
}

int es_device_caller_kind(const void *caller)
{
    const char *path = NULL, *b = es_object_of(caller, &path);
    if (!b)
        return ES_CALLER_APP;
    if (!strncmp(b, "libcublas", 9) || !strncmp(b, "libcudnn", 8) || !strncmp(b, "libnccl", 7))
        return ES_CALLER_VENDOR;
    if (!strncmp(b, "libnvrtc", 8) || !strncmp(b, "libnvJitLink", 12) ||
        !strncmp(b, "libnvptxcompiler", 16) || !strncmp(b, "__triton_launcher", 17) ||
        !strncmp(b, "cuda_utils", 10) || strstr(path, "/triton/"))
        return ES_CALLER_CODEGEN;
    return ES_CALLER_APP;
}

/* The smaller of two compute capabilities, into (*ma, *mi). */
static int es_min_cc(int *ma, int *mi, int cma, int cmi)
{
    if (cma < *ma || (cma == *ma && cmi < *mi)) {
        *ma = cma;
        *mi = cmi;
        return 1;
    }
    return 0;
}

int es_device_lower_attr(int attr, int dev, int *value, const void *caller,
                         es_attr_query_fn query)
{
    int c;
    if (!es_canon_set)
        return 0;
    if (attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ||
        attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) {
        int ma, mi, major = attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR;
        int other = major ? CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
                          : CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR;
        int v = 0;
        if (query(other, dev, &v) != 0)
            return 0;
        ma = major ? *value : v;
        mi = major ? v : *value;
        if (!es_min_cc(&ma, &mi, es_canon.cc_major, es_canon.cc_minor) ||
            es_device_caller_kind(caller) != ES_CALLER_APP)
            return 0;
        int nv = major ? ma : mi, changed = nv != *value;
        *value = nv;
        return changed;
    }
    if (!es_device_canonical_attr(attr, &c) || c >= *value ||
        es_device_caller_kind(caller) == ES_CALLER_VENDOR)
        return 0;
    *value = c;
    return 1;
}

int es_device_lower_cc(int *major, int *minor, const void *caller)
{
    int ma = *major, mi = *minor;
    if (!es_canon_set || !es_min_cc(&ma, &mi, es_canon.cc_major, es_canon.cc_minor) ||
        es_device_caller_kind(caller) != ES_CALLER_APP)
        return 0;
    *major = ma;
    *minor = mi;
    return 1;
}

/* simcuda devices: the simulated GPU models, SIMCUDA_DEVICES parsing,
 * CUDA_VISIBLE_DEVICES filtering and the cuDevice* entry points. */
#include "sim/driver/internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sim_device_t sim_devices[SIM_MAX_DEVICES];
int sim_ndevices;

#define GiB (1ULL << 30)

/* The GPUs the CUDA 13 libraries support (Turing and newer), as NVIDIA
 * documents them (data sheets; per compute capability the CUDA C++
 * Programming Guide's limits: threads and blocks per SM, shared memory per
 * SM and per block opt-in).
 * key, name, large-memory name, from, cc, SMs, threads/SM, blocks/SM,
 * smem/SM, smem optin, clock kHz, memory clock kHz, bus width, L2, copy
 * engines, slowness relative to the A100 */
static const sim_model_t g_models[] = {
    {"t4", "Tesla T4", NULL, 0, 7, 5, 40, 1024, 16,
     65536, 65536, 1590000, 5001000, 256, 4194304, 3, 4.0},
    {"a100", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", 41 * GiB, 8, 0, 108, 2048, 32,
     167936, 166912, 1410000, 1215000, 5120, 41943040, 3, 1.0},
    {"a10", "NVIDIA A10", NULL, 0, 8, 6, 72, 1536, 16,
     102400, 101376, 1695000, 6251000, 384, 6291456, 2, 2.0},
    {"l4", "NVIDIA L4", NULL, 0, 8, 9, 58, 1536, 24,
     102400, 101376, 2040000, 6251000, 192, 50331648, 2, 1.8},
    {"h100", "NVIDIA H100 80GB HBM3", NULL, 0, 9, 0, 132, 2048, 32,
     233472, 232448, 1980000, 2619000, 5120, 52428800, 3, 0.6},
    {"h200", "NVIDIA H200", NULL, 0, 9, 0, 132, 2048, 32,
     233472, 232448, 1980000, 3201000, 6144, 52428800, 3, 0.5},
    {"b200", "NVIDIA B200", NULL, 0, 10, 0, 148, 2048, 32,
     233472, 232448, 1965000, 3996000, 8192, 132120576, 4, 0.35},
};
#define MODEL_KEYS "t4 a100 a10 l4 h100 h200 b200"

static const sim_model_t *find_model(const char *key, size_t len)
{
    for (size_t i = 0; i < sizeof(g_models) / sizeof(g_models[0]); i++)
        if (strlen(g_models[i].key) == len && strncasecmp(g_models[i].key, key, len) == 0)
            return &g_models[i];
    return NULL;
}

/* "40G", "512M", "1T", "1048576": binary units; strict. */
static int parse_size(const char *s, size_t len, unsigned long long *out)
{
    char buf[32];
    if (len == 0 || len >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (!isdigit((unsigned char)buf[0]))
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno)
        return -EINVAL;
    unsigned shift = 0;
    if (*end) {
        switch (toupper((unsigned char)*end)) {
        case 'K': shift = 10; break;
        case 'M': shift = 20; break;
        case 'G': shift = 30; break;
        case 'T': shift = 40; break;
        default: return -EINVAL;
        }
        end++;
        if (*end == 'i' && end[1] == 'B')
            end += 2;
        else if (*end == 'B')
            end++;
        if (*end)
            return -EINVAL;
    }
    if (v == 0 || v > (1ULL << 50) >> shift)
        return -EINVAL;
    *out = v << shift;
    return 0;
}

static void make_uuid(sim_device_t *d)
{
    /* Stable per (model, position in SIMCUDA_DEVICES): two FNV-1a passes. */
    uint64_t h1 = 0xcbf29ce484222325ULL, h2 = 0x84222325cbf29ce4ULL;
    char key[64];
    int n = snprintf(key, sizeof(key), "simcuda/%s/%d", d->model->key, d->phys);
    for (int i = 0; i < n; i++) {
        h1 = (h1 ^ (unsigned char)key[i]) * 0x100000001b3ULL;
        h2 = (h2 ^ (unsigned char)key[n - 1 - i]) * 0x100000001b3ULL;
    }
    for (int i = 0; i < 8; i++) {
        d->uuid[i] = (unsigned char)(h1 >> (8 * i));
        d->uuid[8 + i] = (unsigned char)(h2 >> (8 * i));
    }
    d->uuid[6] = (unsigned char)((d->uuid[6] & 0x0f) | 0x40);
    d->uuid[8] = (unsigned char)((d->uuid[8] & 0x3f) | 0x80);
}

static void uuid_str(const unsigned char *u, char *out, size_t len)
{
    snprintf(out, len,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
             u[12], u[13], u[14], u[15]);
}

static int parse_devices(sim_device_t *all, int *nall)
{
    const char *spec = getenv("SIMCUDA_DEVICES");
    if (!spec)
        spec = "a100:8G,a100:8G";
    int n = 0;
    const char *p = spec;
    if (!*p) {
        sim_log("SIMCUDA_DEVICES is empty (expected e.g. a100:40G,t4:16G)");
        return -EINVAL;
    }
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        if (!colon) {
            sim_log("SIMCUDA_DEVICES entry '%.*s' lacks ':SIZE' (expected MODEL:SIZE, e.g. a100:40G)",
                    (int)len, p);
            return -EINVAL;
        }
        const sim_model_t *m = find_model(p, (size_t)(colon - p));
        if (!m) {
            sim_log("SIMCUDA_DEVICES: unknown model '%.*s' (known: " MODEL_KEYS ")",
                    (int)(colon - p), p);
            return -EINVAL;
        }
        unsigned long long cap;
        if (parse_size(colon + 1, len - (size_t)(colon + 1 - p), &cap) != 0) {
            sim_log("SIMCUDA_DEVICES: bad memory size '%.*s' in '%.*s' (expected e.g. 40G, 512M)",
                    (int)(len - (size_t)(colon + 1 - p)), colon + 1, (int)len, p);
            return -EINVAL;
        }
        if (n >= SIM_MAX_DEVICES) {
            sim_log("SIMCUDA_DEVICES: more than %d devices", SIM_MAX_DEVICES);
            return -EINVAL;
        }
        sim_device_t *d = &all[n];
        memset(d, 0, sizeof(*d));
        d->model = m;
        d->capacity = cap;
        d->phys = n;
        d->pci_bus = 0x10 + n;
        snprintf(d->name, sizeof(d->name), "%s",
                 m->name_big && cap >= m->big_from ? m->name_big : m->name);
        make_uuid(d);
        n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    *nall = n;
    return 0;
}

/* CUDA_DEVICE_ORDER: PCI_BUS_ID numbers devices in bus order, which in
 * simcuda is their order in SIMCUDA_DEVICES; FASTEST_FIRST numbers them
 * from the fastest model (by the models' speeds, stable among equals). The
 * real driver's default is FASTEST_FIRST; simcuda's default is bus order, so
 * that SIMCUDA_DEVICES says what device N is. CUDA_VISIBLE_DEVICES indices
 * refer to this numbering. */
static void apply_order(sim_device_t *all, int nall)
{
    const char *o = getenv("CUDA_DEVICE_ORDER");
    if (!o || !*o || strcmp(o, "PCI_BUS_ID") == 0)
        return;
    if (strcmp(o, "FASTEST_FIRST") != 0) {
        sim_log("CUDA_DEVICE_ORDER='%s' is neither FASTEST_FIRST nor PCI_BUS_ID: bus order", o);
        return;
    }
    for (int i = 1; i < nall; i++) { /* insertion sort: stable */
        sim_device_t d = all[i];
        int j = i;
        while (j > 0 && all[j - 1].model->slowness > d.model->slowness) {
            all[j] = all[j - 1];
            j--;
        }
        all[j] = d;
    }
}

/* CUDA_VISIBLE_DEVICES as the real driver reads it (the rules PyTorch's
 * torch.cuda._parse_visible_devices reproduces to predict the driver):
 * comma-separated entries, all of the kind of the first one. Index entries
 * are read like strtoul (leading blanks skipped, the digits taken, anything
 * after them ignored: "1gpu2" is 1); a "GPU-" entry is a unique prefix of
 * a device's UUID. The list ends at the first entry that is not of that
 * kind, is negative or empty, is out of range or matches no device (or
 * several); the entries before it stay. A repeated device makes the whole
 * list empty: no device is visible. */
static int apply_visible(const sim_device_t *all, int nall, sim_device_t *out)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (!v) {
        memcpy(out, all, sizeof(*all) * (size_t)nall);
        return nall;
    }
    int n = 0;
    int used[SIM_MAX_DEVICES] = {0};
    int by_uuid = strncmp(v, "GPU-", 4) == 0;
    const char *p = v;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        int idx = -1;
        if (by_uuid) {
            if (len < 4 || strncmp(p, "GPU-", 4) != 0)
                break;
            int count = 0;
            for (int i = 0; i < nall; i++) {
                char u[64];
                uuid_str(all[i].uuid, u, sizeof(u));
                if (len <= strlen(u) && strncasecmp(u, p, len) == 0) {
                    idx = i;
                    count++;
                }
            }
            if (count != 1)
                break;
        } else {
            const char *q = p, *end = p + len;
            while (q < end && isspace((unsigned char)*q))
                q++;
            if (q < end && *q == '+')
                q++;
            if (q == end || !isdigit((unsigned char)*q))
                break; /* empty, negative or not a number */
            unsigned long x = 0;
            while (q < end && isdigit((unsigned char)*q) && x < (unsigned long)nall)
                x = x * 10 + (unsigned long)(*q++ - '0');
            if (x >= (unsigned long)nall)
                break;
            idx = (int)x;
        }
        if (used[idx])
            return 0;
        used[idx] = 1;
        out[n++] = all[idx];
        if (!comma)
            break;
        p = comma + 1;
    }
    return n;
}

int sim_devices_init(void)
{
    static sim_device_t all[SIM_MAX_DEVICES];
    int nall = 0;
    if (parse_devices(all, &nall) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    apply_order(all, nall);
    sim_ndevices = apply_visible(all, nall, sim_devices);
    if (sim_ndevices == 0)
        return CUDA_ERROR_NO_DEVICE;
    for (int i = 0; i < sim_ndevices; i++) {
        sim_ctx_t *c = calloc(1, sizeof(*c));
        if (!c)
            return CUDA_ERROR_OUT_OF_MEMORY;
        c->dev = i;
        c->is_primary = 1;
        pthread_mutex_init(&c->mu, NULL);
        sim_devices[i].primary = c;
    }
    return CUDA_SUCCESS;
}

sim_device_t *sim_dev(CUdevice d)
{
    if (d < 0 || d >= sim_ndevices)
        return NULL;
    return &sim_devices[d];
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    SIM_CHECK_INIT();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= sim_ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    SIM_CHECK_INIT();
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = sim_ndevices;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    SIM_CHECK_INIT();
    sim_device_t *d = sim_dev(dev);
    if (!d)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", d->name);
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    SIM_CHECK_INIT();
    sim_device_t *d = sim_dev(dev);
    if (!d)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = (size_t)d->capacity;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    SIM_CHECK_INIT();
    sim_device_t *d = sim_dev(dev);
    if (!d)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(uuid->bytes, d->uuid, 16);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid_v2(uuid, dev);
}

CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    SIM_CHECK_INIT();
    sim_device_t *d = sim_dev(dev);
    if (!d)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!major || !minor)
        return CUDA_ERROR_INVALID_VALUE;
    *major = d->model->cc_major;
    *minor = d->model->cc_minor;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    SIM_CHECK_INIT();
    sim_device_t *d = sim_dev(dev);
    if (!d)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!pciBusId || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(pciBusId, (size_t)len, "%08X:%02X:%02X.0", 0, d->pci_bus, 0);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    SIM_CHECK_INIT();
    if (!dev || !pciBusId)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned dom, bus, devn, fn = 0;
    int n = sscanf(pciBusId, "%x:%x:%x.%x", &dom, &bus, &devn, &fn);
    if (n < 3) {
        dom = 0;
        n = sscanf(pciBusId, "%x:%x.%x", &bus, &devn, &fn);
        if (n < 2)
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (int i = 0; i < sim_ndevices; i++) {
        if (dom == 0 && (int)bus == sim_devices[i].pci_bus && devn == 0) {
            *dev = i;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    SIM_CHECK_INIT();
    if (!canAccessPeer)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev(dev) || !sim_dev(peerDev))
        return CUDA_ERROR_INVALID_DEVICE;
    *canAccessPeer = dev != peerDev;
    return CUDA_SUCCESS;
}

/* Every pair of distinct simulated GPUs has a peer link (NVLink-like). */
CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
                                 CUdevice dstDevice)
{
    SIM_CHECK_INIT();
    if (!sim_dev(srcDevice) || !sim_dev(dstDevice) || srcDevice == dstDevice)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    switch ((int)attrib) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK: *value = 0; break;
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED: *value = 1; break;
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED: *value = 1; break;
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED: *value = 0; break;
    case CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED: *value = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    SIM_CHECK_INIT();
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    sim_device_t *d = sim_dev(dev);
    if (!d)
        return CUDA_ERROR_INVALID_DEVICE;
    const sim_model_t *m = d->model;
    int cc = m->cc_major * 10 + m->cc_minor;
    int v;
    switch ((int)attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: v = m->clock_khz; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: v = 512; break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = m->sms; break;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: v = CU_COMPUTEMODE_DEFAULT; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH: v = 131072; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH: v = 131072; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH: v = 16384; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT: v = 512; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: v = 1; break; /* data-center parts, ECC on by default */
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: v = d->pci_bus; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: v = m->mem_clock_khz; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: v = m->bus_width; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: v = m->l2_bytes; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = m->max_threads_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: v = m->async_engines; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_CAN_TEX2D_GATHER: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE: v = 8192; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS: v = 2046; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH: v = 16384; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS: v = 2046; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH: v = 268435456; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT: v = 131072; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH: v = 2097120; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = m->cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = m->cc_minor; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: v = m->smem_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: v = dev; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO:
        v = (cc == 75 || cc == 86 || cc == 89) ? 32 : 2; break;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: v = m->smem_optin; break;
    case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: v = m->max_blocks_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED: v = cc >= 80; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: v = cc >= 80 ? m->l2_bytes / 4 * 3 : 0; break;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE: v = cc >= 80 ? 134213632 : 0; break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: v = cc >= 80 ? 1024 : 0; break;
    case CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: v = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; break;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: v = cc >= 90; break;
    case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED: v = 0; break;
    /* the v2 stream memory operations, on every platform (sim/driver/memop.c) */
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT: v = cc >= 90 ? 4 : 1; break;
    case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED: v = cc >= 90; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID: v = -1; break;
    case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID: v = 0x20b010de; break;
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID: v = 0x134f10de; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED: v = 0; break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pi = v;
    return CUDA_SUCCESS;
}

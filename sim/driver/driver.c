/* simcuda driver: a CPU implementation of the CUDA Driver API, built as
 * build/sim/libcuda.so.1 and ABI-compatible with CUDA 13's cuda.h.
 *
 * Design
 * ------
 * - Devices (device.c) come from SIMCUDA_DEVICES ("a100:40G,t4:16G", default
 *   "a100:8G,a100:8G") and are filtered/reordered by CUDA_VISIBLE_DEVICES as
 *   by NVIDIA's driver. The models are the GPUs the CUDA 13 libraries
 *   support: t4 (sm_75), a100 (sm_80), a10 (sm_86), l4 (sm_89), h100 and
 *   h200 (sm_90), b200 (sm_100), with their real SM counts, memory clocks,
 *   caches and per-compute-capability limits. CUDA_DEVICE_ORDER=FASTEST_FIRST
 *   numbers them from the fastest model; unset, simcuda keeps the
 *   SIMCUDA_DEVICES order (bus order; NVIDIA's default would be
 *   FASTEST_FIRST). A bad SIMCUDA_DEVICES prints a message and makes cuInit
 *   return CUDA_ERROR_INVALID_VALUE; no visible device gives
 *   CUDA_ERROR_NO_DEVICE.
 * - Every handle given out (context, stream, event, module, function,
 *   library, kernel, physical allocation) is recorded in a registry of live
 *   handles (registry below): a stale or forged handle is refused with the
 *   documented error instead of being dereferenced.
 * - Memory (memory.c, devclient.c). At cuInit the process reserves a 16 TiB
 *   address window (PROT_NONE, MAP_FIXED_NOREPLACE at one of a few fixed
 *   bases, else anywhere); every address simcuda hands out lies in it.
 *   cuMemAlloc memory is a range of its device's sparse backing memfd,
 *   pinned memory (cuMemAllocHost/cuMemHostAlloc) a range of the host memfd,
 *   VMM physical allocations (on a device, or on the host:
 *   CU_MEM_LOCATION_TYPE_HOST/HOST_NUMA) memfds of their own, exportable as
 *   file descriptors. A freed range becomes a reservation again, and
 *   addresses are reused only after the rest of the window was: a use after
 *   free faults like an illegal address on a GPU. Capacity (capacity.c) is
 *   shared by all the processes of a user through a small shared-memory
 *   table, per-process slots so the use of dead processes is reclaimed.
 * - Isolation (SIMCUDA_ISOLATION=1, the default; "0" keeps device memory in
 *   the process, read-write, for debugging; anything else makes cuInit
 *   fail). Device memory
 *   is then not host memory, as on an x86 GPU machine without HMM: each
 *   simulated GPU the process uses is a device server
 *   (build/sim/simcuda-gpu beside libcuda.so.1; devserver.c), started when
 *   the device's first context becomes active, one per (process, GPU). The
 *   server reserves the same window and maps, at the same addresses, exactly
 *   what its GPU may reach: its own cuMemAlloc memory, the memory of devices
 *   a context of it has peer access to (cuCtxEnablePeerAccess), VMM
 *   mappings cuMemSetAccess granted to it, pinned memory, and registered
 *   host memory (cuMemHostRegister: a shared file mapping keeps its file; a
 *   private range is moved into the host file and mapped back in place;
 *   memory.c says how and the limits). The process keeps device memory
 *   reserved PROT_NONE: a host access faults (SIGSEGV); host-located VMM
 *   memory is mapped in the process only with access granted to the host.
 *   The server runs the device's copies, memsets and kernels (the kernel
 *   twins of the list the process resolved, dlopen'ed by the server), one
 *   thread per client stream: a kernel touching memory its GPU cannot
 *   reach (another device's without peer access, malloc memory, freed
 *   memory) faults in the server and becomes CUDA_ERROR_ILLEGAL_ADDRESS. Stream workers hand device
 *   work to the server over shared-memory rings (futex wake-ups, spinning
 *   briefly first) and keep stream order, events, waits and host functions;
 *   a worker posts up to a ring of work its device does by itself before it
 *   waits. Copies with pageable host memory are staged through pinned
 *   chunks by the worker, as the real driver stages them; a copy between two
 *   devices that cannot reach each other is an illegal address, except
 *   cuMemcpyPeer*, which stages. Memory changes reach the servers over a
 *   control socket (SCM_RIGHTS for the memfds) before the call returns. A
 *   process that dies closes the sockets: its servers exit, its memory is
 *   freed and its capacity reclaimed. A server that dies is a lost device:
 *   the operation in flight and every later call that needs a context
 *   return CUDA_ERROR_DEVICE_UNAVAILABLE (sticky), never a hang. While
 *   simcuda's own cuBLAS/cuDNN/NCCL still compute in host functions that
 *   read device memory, isolation is off by default.
 * - Streams (stream.c): every stream has a worker thread executing its queue
 *   in order, so asynchronous work really is asynchronous. Every operation
 *   enters a stream through one function (enqueue). The legacy default
 *   stream waits for the blocking streams of its context and they wait for
 *   it; the per-thread default stream is one blocking stream per thread and
 *   context. Events carry a generation counter and a completion time.
 * - Sticky errors (as cuda.h documents CUDA_ERROR_ILLEGAL_ADDRESS,
 *   LAUNCH_FAILED and the other "inconsistent state" errors): the first
 *   failure of asynchronous work (a kernel twin returning non-zero, a fault
 *   inside a kernel or a copy, a lost device) is the process's sticky error;
 *   every later call that needs a context returns it (allocations, streams,
 *   events, module and library loads, launches, copies, synchronisation,
 *   new and retained contexts), and no more device work runs. Calls that
 *   need no context (device queries, error strings) still answer.
 * - SIMCUDA_CHAOS=SEED (chaos.c): adversarial scheduling. Stream work is
 *   held for a seeded delay from its enqueue (cut short while the host
 *   waits for it) and independent streams run newest first, so a missing
 *   synchronisation between streams gives a wrong result in nearly every
 *   run; ordering a program asked for is never broken.
 * - Kernels (module.c, arch.c): module images are read with fatbin/fatbin.h.
 *   A module loads only with code its device runs, by NVIDIA's rules: SASS
 *   of the same major version and a minor not above the device's
 *   (arch-specific sm_90a/sm_100a only on exactly that compute capability),
 *   or PTX the JIT compiles for it (target not above the device's;
 *   arch-specific PTX only on that exact one, family-specific "f" PTX only
 *   within the major version; PTX ISA up to 9.0); else
 *   CUDA_ERROR_NO_BINARY_FOR_GPU (a too new PTX ISA:
 *   CUDA_ERROR_UNSUPPORTED_PTX_VERSION). A library loaded without a context
 *   takes any image some device runs; a device without code for it refuses
 *   its kernels with the same error. Each kernel NAME of the image chosen
 *   runs as simcuda_twin_NAME from the libraries listed in SIMCUDA_KERNELS,
 *   else those in twins/ beside libcuda.so.1 (module.c;
 *   sim/include/simcuda_twin.h). Parameter sizes come from the cubin's
 *   .nv.info (or the PTX signature) so launch arguments are copied at launch
 *   time, as on a GPU.
 * - Copies follow the real driver's rules: an asynchronous copy from
 *   pageable host memory stages the source before returning, one to pageable
 *   memory returns when done; synchronous calls run on the legacy (or, for
 *   the _ptds names, the per-thread) default stream and wait.
 * - Entry points (procs.c) come from one X-macro table: exported symbol,
 *   base name, version introduced, per-thread-stream variant. It drives
 *   cuGetProcAddress and cuGetProcAddress_v2 (an unknown name, or a version
 *   too old, is CUDA_SUCCESS with a NULL pointer and the reason in the
 *   status, as cuda.h documents; the 4-argument form says
 *   CUDA_ERROR_NOT_FOUND). Every other function cuda.h declares (arrays,
 *   graphs, pools, ...; unsupported.h) is exported too, so any cuda.h
 *   program links, and returns CUDA_ERROR_NOT_SUPPORTED; so are the older
 *   ABIs of those that NVIDIA's driver still serves by their old versions
 *   (every PFN_<name>_v<version> of cudaTypedefs.h is answered, but for the
 *   32-bit-size forms CUDA 3.2 replaced). libcuda.map keeps everything but
 *   cu* local.
 * - cuGetExportTable (NVIDIA's private, undocumented function tables) gives
 *   no table: CUDA_ERROR_NOT_SUPPORTED. NVIDIA's CUDA runtime (libcudart,
 *   shared or static) needs table 6bd5fb6c-5bf4-e74a-8987-d93912fd9df9 at
 *   its initialisation, so it does not run on simcuda: its first call
 *   returns cudaErrorNotSupported (procs.c; tests/sim/driver/cudart_test.c).
 * - SIMCUDA_TRACE ("0" default, or "1"; anything else makes cuInit fail with
 *   CUDA_ERROR_INVALID_VALUE) logs to stderr every cuGetProcAddress lookup
 *   and its answer, every cuGetExportTable request, cuInit, each device
 *   server started, the sticky error, every call of an unsupported
 *   function (how to see what a vendor library asks for), and every host
 *   function enqueued (cuLaunchHostFunc: "host function enqueued on stream
 *   ID", the id cuStreamGetId gives).
 * - Stream memory operations (memop.c): cuStreamWaitValue32/64,
 *   cuStreamWriteValue32/64, cuStreamBatchMemOp (v2), run by the stream's
 *   worker: a wait blocks its stream only.
 * - SIMCUDA_TIME_SCALE (float >= 0, default 0): after each device operation a
 *   worker sleeps scale x (the operation's CPU time, in the server with
 *   isolation) x the model's slowness (b200 0.35, h200 0.5, h100 0.6,
 *   a100 1, l4 1.8, a10 2, t4 4).
 * - Deliberate limits: cuLaunchKernel with kernelParams == NULL and `extra`
 *   given returns CUDA_ERROR_INVALID_VALUE; with isolation, a kernel whose
 *   parameter layout the image does not give cannot be launched
 *   (CUDA_ERROR_NOT_SUPPORTED); module globals are not supported
 *   (cuModuleGetGlobal returns CUDA_ERROR_NOT_FOUND); no graphs, arrays,
 *   textures, stream capture or managed memory; peer access is per device
 *   pair (a device's server reaches a peer device's memory while any of its
 *   contexts has access to any context of the peer). cuMemFree and
 *   cuModuleUnload wait for the context's work (as the real ones
 *   synchronise). Destroyed contexts keep their (small) objects so stale
 *   handles stay safe to check and a thread that still has one current gets
 *   CUDA_ERROR_CONTEXT_IS_DESTROYED; destroyed streams' objects are reused
 *   by the next streams created (their number is bounded by the most
 *   streams alive at once). A forked child starts with an uninitialised
 *   driver (it calls cuInit again, gets its own capacity slot, window and
 *   servers; the parent's mappings stay as they were in it).
 *
 * This file: initialisation, errors, versions, the handle registry, the
 * fault guard used by the workers, fork handling.
 */
#include "sim/driver/internal.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

atomic_int sim_inited;
double sim_time_scale;
_Atomic int sim_sticky;

/* The first "inconsistent state" error of the process's asynchronous work
 * stays: every later call that needs a context returns it. */
void sim_set_sticky(CUresult r)
{
    int expected = 0;
    if (r != CUDA_SUCCESS && atomic_compare_exchange_strong(&sim_sticky, &expected, (int)r)) {
        const char *name = "?";
        cuGetErrorName(r, &name);
        sim_trace("sticky error %s: the process must restart to use CUDA again", name);
    }
}

static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
static CUresult g_init_result = CUDA_ERROR_NOT_INITIALIZED;
static int g_init_tried;
static uint64_t g_seed_base;
static _Atomic uint64_t g_launch_counter;

void sim_log(const char *fmt, ...)
{
    va_list ap;
    char buf[512];
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "simcuda: %s\n", buf);
}

/* ---- handle registry (open addressing, pointer keys) ------------------------ */
typedef struct { uintptr_t key; int type; } reg_slot_t;
static pthread_rwlock_t g_reg_mu = PTHREAD_RWLOCK_INITIALIZER;
static reg_slot_t *g_reg;
static size_t g_reg_cap, g_reg_used, g_reg_tomb;
#define REG_TOMB ((uintptr_t)1)

static size_t reg_hash(uintptr_t k, size_t cap)
{
    uint64_t x = (uint64_t)k;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static void reg_grow(void)
{
    size_t ncap = g_reg_cap ? g_reg_cap * 2 : 1024;
    if (g_reg_used * 4 < g_reg_cap * 2 && g_reg_cap) /* mostly tombstones: rehash same size */
        ncap = g_reg_cap;
    reg_slot_t *n = calloc(ncap, sizeof(*n));
    if (!n)
        abort();
    for (size_t i = 0; i < g_reg_cap; i++) {
        if (g_reg[i].key > REG_TOMB) {
            size_t j = reg_hash(g_reg[i].key, ncap);
            while (n[j].key)
                j = (j + 1) & (ncap - 1);
            n[j] = g_reg[i];
        }
    }
    free(g_reg);
    g_reg = n;
    g_reg_cap = ncap;
    g_reg_tomb = 0;
}

void sim_reg_add(const void *h, int type)
{
    uintptr_t k = (uintptr_t)h;
    pthread_rwlock_wrlock(&g_reg_mu);
    if ((g_reg_used + g_reg_tomb + 1) * 4 >= g_reg_cap * 3)
        reg_grow();
    size_t j = reg_hash(k, g_reg_cap);
    while (g_reg[j].key > REG_TOMB && g_reg[j].key != k)
        j = (j + 1) & (g_reg_cap - 1);
    if (g_reg[j].key != k) {
        if (g_reg[j].key == REG_TOMB)
            g_reg_tomb--;
        g_reg_used++;
    }
    g_reg[j].key = k;
    g_reg[j].type = type;
    pthread_rwlock_unlock(&g_reg_mu);
}

static size_t reg_find(uintptr_t k)
{
    if (!g_reg_cap || k <= REG_TOMB)
        return SIZE_MAX;
    size_t j = reg_hash(k, g_reg_cap);
    while (g_reg[j].key) {
        if (g_reg[j].key == k)
            return j;
        j = (j + 1) & (g_reg_cap - 1);
    }
    return SIZE_MAX;
}

void sim_reg_del(const void *h)
{
    pthread_rwlock_wrlock(&g_reg_mu);
    size_t j = reg_find((uintptr_t)h);
    if (j != SIZE_MAX) {
        g_reg[j].key = REG_TOMB;
        g_reg[j].type = 0;
        g_reg_used--;
        g_reg_tomb++;
    }
    pthread_rwlock_unlock(&g_reg_mu);
}

int sim_reg_has(const void *h, int type)
{
    pthread_rwlock_rdlock(&g_reg_mu);
    size_t j = reg_find((uintptr_t)h);
    int ok = j != SIZE_MAX && g_reg[j].type == type;
    pthread_rwlock_unlock(&g_reg_mu);
    return ok;
}

/* ---- fault guard: a fault inside device work becomes ILLEGAL_ADDRESS ------- */
static __thread sigjmp_buf *t_guard;
static struct sigaction g_old_segv, g_old_bus;
static atomic_int g_fault_installed; /* read without the lock by every guarded call */

static void fault_handler(int sig, siginfo_t *si, void *uc)
{
    if (t_guard) {
        sigjmp_buf *g = t_guard;
        t_guard = NULL;
        siglongjmp(*g, 1);
    }
    struct sigaction *old = sig == SIGSEGV ? &g_old_segv : &g_old_bus;
    if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction) {
        old->sa_sigaction(sig, si, uc);
        return;
    }
    if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN && old->sa_handler) {
        old->sa_handler(sig);
        return;
    }
    /* Default action: restore it and return, the access faults again. */
    signal(sig, SIG_DFL);
}

static pthread_mutex_t g_fault_mu = PTHREAD_MUTEX_INITIALIZER;

/* Installs the fault handler, chaining to whatever handler was there. Called
 * again before guarded work: a program (a test framework, Python) may have
 * installed its own handler since. */
void sim_fault_install(void)
{
    struct sigaction cur;
    if (atomic_load_explicit(&g_fault_installed, memory_order_acquire) &&
        sigaction(SIGSEGV, NULL, &cur) == 0 &&
        (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == fault_handler &&
        sigaction(SIGBUS, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
        cur.sa_sigaction == fault_handler)
        return;
    pthread_mutex_lock(&g_fault_mu);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = fault_handler;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, NULL, &cur) == 0 &&
        !((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == fault_handler))
        sigaction(SIGSEGV, &sa, &g_old_segv);
    if (sigaction(SIGBUS, NULL, &cur) == 0 &&
        !((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == fault_handler))
        sigaction(SIGBUS, &sa, &g_old_bus);
    atomic_store_explicit(&g_fault_installed, 1, memory_order_release);
    pthread_mutex_unlock(&g_fault_mu);
}

CUresult sim_guarded(void (*fn)(void *), void *arg)
{
    sigjmp_buf jb;
    sim_fault_install();
    if (sigsetjmp(jb, 1)) {
        t_guard = NULL;
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    t_guard = &jb;
    fn(arg);
    t_guard = NULL;
    return CUDA_SUCCESS;
}

uint64_t sim_nondet_seed(void)
{
    uint64_t n = atomic_fetch_add(&g_launch_counter, 1) + 1;
    uint64_t x = g_seed_base ^ (n * 0x9e3779b97f4a7c15ULL);
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

double sim_now_ms(const struct timespec *ts)
{
    return (double)ts->tv_sec * 1e3 + (double)ts->tv_nsec / 1e6;
}

/* ---- fork: the child starts with a fresh, uninitialised driver -------------- */
static void atfork_child(void)
{
    pthread_mutex_init(&g_init_mu, NULL);
    pthread_rwlock_init(&g_reg_mu, NULL);
    pthread_mutex_init(&g_fault_mu, NULL);
    atomic_store(&sim_inited, 0);
    g_init_tried = 0;
    g_init_result = CUDA_ERROR_NOT_INITIALIZED;
    /* Handles of the parent are no longer valid in the child. */
    g_reg = NULL;
    g_reg_cap = g_reg_used = g_reg_tomb = 0;
    sim_ctx_fork_reset();
    sim_stream_fork_reset();
    sim_mem_fork_reset();
    sim_cap_fork_reset();
    sim_kernel_fork_reset();
    sim_dc_fork_reset();
    sim_chaos_fork_reset();
    atomic_store(&sim_sticky, 0);
    t_guard = NULL;
}

/* SIMCUDA_ISOLATION: "1" (default) or "0". */
static int parse_isolation(void)
{
    const char *s = getenv("SIMCUDA_ISOLATION");
    sim_isolation = 1;
    if (!s || !*s || strcmp(s, "1") == 0)
        return 0;
    if (strcmp(s, "0") == 0) {
        sim_isolation = 0;
        return 0;
    }
    sim_log("SIMCUDA_ISOLATION='%s' is not 0 or 1", s);
    return -1;
}

static int parse_time_scale(void)
{
    const char *s = getenv("SIMCUDA_TIME_SCALE");
    sim_time_scale = 0;
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    /* A plain decimal number: no blanks, sign, hex, "inf" or "nan". */
    if (!(isdigit((unsigned char)s[0]) || s[0] == '.') || strpbrk(s, "xX") || errno || *end ||
        !(v >= 0) || v > 1e6) {
        sim_log("SIMCUDA_TIME_SCALE='%s' is not a number in [0, 1e6]", s);
        return -1;
    }
    sim_time_scale = v;
    return 0;
}

/* SIMCUDA_TRACE: "0" (default) or "1": log every cuGetProcAddress lookup,
 * cuGetExportTable request and call of an unsupported entry point to stderr.
 * Read once, at the first traced call or at cuInit, whichever comes first
 * (the CUDA runtime asks cuGetProcAddress before it calls cuInit). */
static pthread_once_t g_trace_once = PTHREAD_ONCE_INIT;
static int g_trace_on, g_trace_bad;

static void parse_trace(void)
{
    const char *s = getenv("SIMCUDA_TRACE");
    if (!s || !*s)
        return;
    if (strcmp(s, "0") == 0)
        return;
    if (strcmp(s, "1") == 0) {
        g_trace_on = 1;
        return;
    }
    sim_log("SIMCUDA_TRACE='%s' is not 0 or 1", s);
    g_trace_bad = 1;
}

int sim_trace_on(void)
{
    pthread_once(&g_trace_once, parse_trace);
    return g_trace_on;
}

void sim_trace(const char *fmt, ...)
{
    if (!sim_trace_on())
        return;
    va_list ap;
    char buf[512];
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "simcuda trace: %s\n", buf);
}

static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void) { pthread_atfork(NULL, NULL, atfork_child); }

CUresult cuInit(unsigned int flags)
{
    CUresult r;
    pthread_once(&g_atfork_once, register_atfork);
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_init_mu);
    if (g_init_tried) {
        r = g_init_result;
        goto out;
    }
    g_init_tried = 1;
    if (getrandom(&g_seed_base, sizeof(g_seed_base), 0) != (ssize_t)sizeof(g_seed_base))
        g_seed_base = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    sim_trace_on();
    if (g_trace_bad || parse_time_scale() != 0 || parse_isolation() != 0 ||
        sim_phys_pool_parse() != 0 || sim_chaos_init() != 0) {
        r = g_init_result = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    r = (CUresult)sim_devices_init();
    if (r == CUDA_SUCCESS && sim_win_init() != 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        sim_cap_attach();
        sim_fault_install();
        atomic_store_explicit(&sim_inited, 1, memory_order_release);
    }
    g_init_result = r;
out:
    pthread_mutex_unlock(&g_init_mu);
    sim_trace("cuInit(%u) -> %d", flags, (int)r);
    return r;
}

CUresult cuDriverGetVersion(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = SIM_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

/* ---- error names and strings ------------------------------------------------ */
#define SIM_ERRORS(X)                                                                       \
    X(CUDA_SUCCESS, "no error")                                                             \
    X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                         \
    X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                            \
    X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                                   \
    X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                                     \
    X(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled while using external profiling tool") \
    X(CUDA_ERROR_PROFILER_NOT_INITIALIZED, "profiler not initialized")                      \
    X(CUDA_ERROR_PROFILER_ALREADY_STARTED, "profiler already started")                      \
    X(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "profiler already stopped")                      \
    X(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library")                             \
    X(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "operation requires a newer driver")           \
    X(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable")   \
    X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                           \
    X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                                  \
    X(CUDA_ERROR_DEVICE_NOT_LICENSED, "device doesn't have valid Grid license")             \
    X(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")                           \
    X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                                 \
    X(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current")                        \
    X(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed")                             \
    X(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed")                         \
    X(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped")                                        \
    X(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped")                                 \
    X(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device") \
    X(CUDA_ERROR_ALREADY_ACQUIRED, "resource already acquired")                             \
    X(CUDA_ERROR_NOT_MAPPED, "resource not mapped")                                         \
    X(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "resource not mapped as array")                       \
    X(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "resource not mapped as pointer")                   \
    X(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered")                  \
    X(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit is not supported on this architecture")          \
    X(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "exclusive-thread device already in use by a different thread") \
    X(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices") \
    X(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed")                               \
    X(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "invalid OpenGL or DirectX context")             \
    X(CUDA_ERROR_NVLINK_UNCORRECTABLE, "uncorrectable NVLink error detected during the execution") \
    X(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "PTX JIT compiler library not found")              \
    X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "the provided PTX was compiled with an unsupported toolchain") \
    X(CUDA_ERROR_JIT_COMPILATION_DISABLED, "PTX JIT compilation was disabled")              \
    X(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "the provided execution affinity is not supported") \
    X(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, "device-side synchronization is not supported")  \
    X(CUDA_ERROR_CONTAINED, "an error was contained")                                       \
    X(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid")                          \
    X(CUDA_ERROR_FILE_NOT_FOUND, "file not found")                                          \
    X(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found")          \
    X(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object initialization failed")          \
    X(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS")  \
    X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                                 \
    X(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state")   \
    X(CUDA_ERROR_LOSSY_QUERY, "attempted introspection would be semantically lossy")        \
    X(CUDA_ERROR_NOT_FOUND, "named symbol not found")                                       \
    X(CUDA_ERROR_NOT_READY, "device not ready")                                             \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")               \
    X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch")        \
    X(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated")                 \
    X(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, "launch uses incompatible texturing mode")  \
    X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled")             \
    X(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled")               \
    X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process") \
    X(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")                              \
    X(CUDA_ERROR_ASSERT, "device-side assert triggered")                                    \
    X(CUDA_ERROR_TOO_MANY_PEERS, "peer mapping resources exhausted")                        \
    X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped") \
    X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region") \
    X(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error")                              \
    X(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered")             \
    X(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address")                                  \
    X(CUDA_ERROR_INVALID_ADDRESS_SPACE, "operation not supported on global/shared address space") \
    X(CUDA_ERROR_INVALID_PC, "invalid program counter")                                     \
    X(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")                               \
    X(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch")     \
    X(CUDA_ERROR_TENSOR_MEMORY_LEAK, "tensor memory not completely freed")                  \
    X(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")                                  \
    X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                                  \
    X(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized")                            \
    X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system has unsupported display driver / cuda driver combination") \
    X(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "forward compatibility was attempted on non supported HW") \
    X(CUDA_ERROR_MPS_CONNECTION_FAILED, "MPS client failed to connect to the MPS control daemon or the MPS server") \
    X(CUDA_ERROR_MPS_RPC_FAILURE, "the remote procedural call between the MPS server and the MPS client failed") \
    X(CUDA_ERROR_MPS_SERVER_NOT_READY, "MPS server is not ready to accept new MPS client requests") \
    X(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, "the hardware resources required to create MPS client have been exhausted") \
    X(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, "the hardware resources required to support device connections have been exhausted") \
    X(CUDA_ERROR_MPS_CLIENT_TERMINATED, "the MPS client has been terminated by the server") \
    X(CUDA_ERROR_CDP_NOT_SUPPORTED, "is using CUDA Dynamic Parallelism, but the current configuration does not support it") \
    X(CUDA_ERROR_CDP_VERSION_MISMATCH, "unsupported interaction between different versions of CUDA Dynamic Parallelism") \
    X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing") \
    X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture") \
    X(CUDA_ERROR_STREAM_CAPTURE_MERGE, "operation would result in a merge of separate capture sequences") \
    X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began") \
    X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work")             \
    X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another stream") \
    X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "operation would make the legacy stream depend on a capturing blocking stream") \
    X(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a capturing stream") \
    X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread") \
    X(CUDA_ERROR_TIMEOUT, "wait operation timed out")                                       \
    X(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update") \
    X(CUDA_ERROR_EXTERNAL_DEVICE, "an async error has occurred in external entity outside of CUDA") \
    X(CUDA_ERROR_INVALID_CLUSTER_SIZE, "a kernel launch error has occurred due to cluster misconfiguration") \
    X(CUDA_ERROR_FUNCTION_NOT_LOADED, "the function handle is not loaded when calling an API that requires a loaded function") \
    X(CUDA_ERROR_INVALID_RESOURCE_TYPE, "one or more resources passed in are not valid resource types for the operation") \
    X(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "one or more resources are insufficient or non-applicable for the operation") \
    X(CUDA_ERROR_KEY_ROTATION, "an error happened during the key rotation sequence")        \
    X(CUDA_ERROR_UNKNOWN, "unknown error")

CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
#define SIM_ERRNAME(e, s) case e: *pStr = #e; return CUDA_SUCCESS;
        SIM_ERRORS(SIM_ERRNAME)
#undef SIM_ERRNAME
    default:
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
#define SIM_ERRSTR(e, s) case e: *pStr = s; return CUDA_SUCCESS;
        SIM_ERRORS(SIM_ERRSTR)
#undef SIM_ERRSTR
    default:
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
}

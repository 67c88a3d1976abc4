/* Real functions of the wrapped libraries, and the two lookup paths the shim
 * answers besides direct calls: the dlsym interposer and the pointer map
 * used by the cuGetProcAddress wrappers (intercept/cuda.c).
 *
 * A library is loaded lazily, the first time one of its wrappers runs (or a
 * dlsym on its handle asks for a wrapped name): dlopen(soname) — which
 * returns the copy the application already loaded, if any — then dlsym of
 * every wrapped symbol on that handle, behind a pthread_once per library.
 * RTLD_NOLOAD is not tried first: dlopen(soname) already returns the copy
 * the application loaded, and a wrapper being called means the application
 * wants the library.
 * Until then, and forever when a symbol is missing, a table entry is a stub
 * returning the library's "not initialized" status.
 */
#include "shim/config.h"
#include "shim/hooks.h"
#include "shim/internal.h"
#include "shim/log.h"
#include "shim/real.h"
#include "shim/easyscale.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic ignored "-Wunused-parameter"

/* Not instrumented: a sanitizer runtime calls dlsym before its shadow
 * memory and interceptors are ready, so the path a name the shim does not
 * wrap takes through dlsym must not touch either. */
#define ES_EARLY __attribute__((no_sanitize("address", "undefined")))

/* ---- stubs and tables ----------------------------------------------------- */

#define ES_MISSING(kind, sym, gp, ver, fl, ret, params, args, err)             \
    static ret es_missing_##sym params { return err; }
ES_CUDA_FUNCS(ES_MISSING)
ES_CUBLAS_FUNCS(ES_MISSING)
ES_CUDNN_FUNCS(ES_MISSING)
ES_NCCL_FUNCS(ES_MISSING)
ES_CUBLASLT_FUNCS(ES_MISSING)
#undef ES_MISSING

#define ES_INIT(kind, sym, gp, ver, fl, ret, params, args, err) .sym = es_missing_##sym,
es_real_cuda_t es_real_cuda = { ES_CUDA_FUNCS(ES_INIT) };
es_real_cublas_t es_real_cublas = { ES_CUBLAS_FUNCS(ES_INIT) };
es_real_cudnn_t es_real_cudnn = { ES_CUDNN_FUNCS(ES_INIT) };
es_real_nccl_t es_real_nccl = { ES_NCCL_FUNCS(ES_INIT) };
es_real_cublaslt_t es_real_cublaslt = { ES_CUBLASLT_FUNCS(ES_INIT) };
es_real_cuda_t es_raw_cuda = { ES_CUDA_FUNCS(ES_INIT) };
es_real_cublas_t es_raw_cublas = { ES_CUBLAS_FUNCS(ES_INIT) };
es_real_cudnn_t es_raw_cudnn = { ES_CUDNN_FUNCS(ES_INIT) };
es_real_nccl_t es_raw_nccl = { ES_NCCL_FUNCS(ES_INIT) };
es_real_cublaslt_t es_raw_cublaslt = { ES_CUBLASLT_FUNCS(ES_INIT) };
#undef ES_INIT

int es_slow[ES_NLIBS] = { 1, 1, 1, 1, 1 };
static int es_slow_forced; /* es_slow_force */

/* A loaded library's slow-path flag: statistics, cuBLAS in d2, or forced. */
static int es_slow_base(int lib)
{
    return es_cfg.stats || (lib == ES_LIB_CUBLAS && es_cfg.determinism == ES_DET_D2) ||
           __atomic_load_n(&es_slow_forced, __ATOMIC_ACQUIRE) > 0;
}
unsigned es_launch_gate = 1;
__thread int es_in_shim;

enum { ES_KIND_P = 0, ES_KIND_C = 1, ES_KIND_I = 2, ES_KIND_H = 3, ES_KIND_A = 4, ES_KIND_T = 5 };

typedef struct es_fn_info {
    const char *sym;
    const char *gpname;   /* CUDA: name for cuGetProcAddress */
    int version;
    int flavor;           /* 1: per-thread default stream variant */
    int kind;
    void *wrapper;
    void *missing;        /* the stub standing for an absent real function */
} es_fn_info_t;

#define ES_FNINFO(kind, sym, gp, ver, fl, ret, params, args, err)              \
    { #sym, gp, ver, fl, ES_KIND_##kind, (void *)sym, (void *)es_missing_##sym },
static const es_fn_info_t es_cuda_fns[] = { ES_CUDA_FUNCS(ES_FNINFO) };
static const es_fn_info_t es_cublas_fns[] = { ES_CUBLAS_FUNCS(ES_FNINFO) };
static const es_fn_info_t es_cudnn_fns[] = { ES_CUDNN_FUNCS(ES_FNINFO) };
static const es_fn_info_t es_nccl_fns[] = { ES_NCCL_FUNCS(ES_FNINFO) };
static const es_fn_info_t es_cublaslt_fns[] = { ES_CUBLASLT_FUNCS(ES_FNINFO) };
#undef ES_FNINFO

#define ES_TOTAL_FNS (ES_CUDA_N + ES_CUBLAS_N + ES_CUDNN_N + ES_NCCL_N + ES_CUBLASLT_N)

typedef struct es_ptrmap_ent {
    const void *real;
    int idx;
} es_ptrmap_ent_t;

typedef struct es_counters {
    uint64_t calls, by_dlsym, by_getproc;
} es_counters_t;

typedef struct es_lib {
    const char *soname;
    const es_fn_info_t *fns;
    int n;
    void **table;               /* the typed table seen as pointers */
    void **raw;                 /* the raw table (the library's own functions) */
    pthread_once_t once;
    pthread_mutex_t lock;       /* held while loading (fork safety) */
    void *handle;
    int loaded;                 /* dlopen succeeded */
    int done;                   /* loading finished (either way) */
    es_ptrmap_ent_t *map;
    int nmap;
    es_counters_t *cnt;
} es_lib_t;

static es_ptrmap_ent_t es_map_cuda[2 * ES_CUDA_N], es_map_cublas[ES_CUBLAS_N],
    es_map_cudnn[ES_CUDNN_N], es_map_nccl[ES_NCCL_N], es_map_cublaslt[ES_CUBLASLT_N];
static es_counters_t es_cnt_cuda[ES_CUDA_N], es_cnt_cublas[ES_CUBLAS_N],
    es_cnt_cudnn[ES_CUDNN_N], es_cnt_nccl[ES_NCCL_N], es_cnt_cublaslt[ES_CUBLASLT_N];

_Static_assert(sizeof(es_real_cuda_t) == ES_CUDA_N * sizeof(void *), "table layout");
_Static_assert(sizeof(es_real_cublas_t) == ES_CUBLAS_N * sizeof(void *), "table layout");
_Static_assert(sizeof(es_real_cudnn_t) == ES_CUDNN_N * sizeof(void *), "table layout");
_Static_assert(sizeof(es_real_nccl_t) == ES_NCCL_N * sizeof(void *), "table layout");
_Static_assert(sizeof(es_real_cublaslt_t) == ES_CUBLASLT_N * sizeof(void *), "table layout");

static es_lib_t es_libs[ES_NLIBS] = {
    [ES_LIB_CUDA] = { "libcuda.so.1", es_cuda_fns, ES_CUDA_N, (void **)&es_real_cuda,
                      (void **)&es_raw_cuda, PTHREAD_ONCE_INIT, PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0,
                      es_map_cuda, 0, es_cnt_cuda },
    [ES_LIB_CUBLAS] = { "libcublas.so.13", es_cublas_fns, ES_CUBLAS_N,
                        (void **)&es_real_cublas, (void **)&es_raw_cublas, PTHREAD_ONCE_INIT,
                        PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, es_map_cublas, 0,
                        es_cnt_cublas },
    [ES_LIB_CUDNN] = { "libcudnn.so.9", es_cudnn_fns, ES_CUDNN_N, (void **)&es_real_cudnn,
                       (void **)&es_raw_cudnn, PTHREAD_ONCE_INIT, PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0,
                       es_map_cudnn, 0, es_cnt_cudnn },
    [ES_LIB_NCCL] = { "libnccl.so.2", es_nccl_fns, ES_NCCL_N, (void **)&es_real_nccl,
                      (void **)&es_raw_nccl, PTHREAD_ONCE_INIT, PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0,
                      es_map_nccl, 0, es_cnt_nccl },
    [ES_LIB_CUBLASLT] = { "libcublasLt.so.13", es_cublaslt_fns, ES_CUBLASLT_N,
                          (void **)&es_real_cublaslt, (void **)&es_raw_cublaslt, PTHREAD_ONCE_INIT,
                          PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, es_map_cublaslt, 0,
                          es_cnt_cublaslt },
};

/* ---- the real dlsym --------------------------------------------------------- */

typedef void *(*es_dlsym_fn)(void *, const char *);
/* Read by the dlsym trampoline (below). */
__attribute__((visibility("hidden"))) es_dlsym_fn es_real_dlsym_ptr;

ES_EARLY static es_dlsym_fn es_real_dlsym(void)
{
    es_dlsym_fn f = __atomic_load_n(&es_real_dlsym_ptr, __ATOMIC_ACQUIRE);
    if (__builtin_expect(f != NULL, 1))
        return f;
    void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!p)
        p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    memcpy(&f, &p, sizeof(f));
    __atomic_store_n(&es_real_dlsym_ptr, f, __ATOMIC_RELEASE);
    return f;
}

/* ---- loading ---------------------------------------------------------------- */

static int es_map_cmp(const void *a, const void *b)
{
    const es_ptrmap_ent_t *x = a, *y = b;
    return x->real < y->real ? -1 : x->real > y->real;
}

static void es_map_add(es_lib_t *L, const void *p, int idx, int cap)
{
    /* A driver that takes the address of its own exports hands out the
     * shim's wrappers (they preempt them): a wrapper always stands for
     * itself, whatever name or version it was returned for. */
    for (int j = 0; j < L->n; j++)
        if (L->fns[j].wrapper == p)
            idx = j;
    for (int i = 0; i < L->nmap; i++)
        if (L->map[i].real == p)
            return;
    if (L->nmap < cap)
        L->map[L->nmap++] = (es_ptrmap_ent_t){ p, idx };
}

typedef CUresult (*es_getproc_fn)(const char *, void **, int, cuuint64_t,
                                  CUdriverProcAddressQueryResult *);

static void es_load(int lib)
{
    es_lib_t *L = &es_libs[lib];
    es_dlsym_fn rd = es_real_dlsym();
    int cap = lib == ES_LIB_CUDA ? 2 * ES_CUDA_N : L->n;

    pthread_mutex_lock(&L->lock);
    es_in_shim |= 1 << lib;
    void *h = dlopen(L->soname, RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        ES_WARN("%s not loadable (%s): its functions return not-initialized", L->soname,
                e ? e : "?");
        goto out;
    }
    L->handle = h;
    int missing = 0;
    char absent[512]; /* the missing names, for the debug line (no allocation) */
    size_t alen = 0;
    absent[0] = '\0';
    for (int i = 0; i < L->n; i++) {
        void *p = rd(h, L->fns[i].sym);
        if (p) {
            L->table[i] = p;
            L->raw[i] = p;
            es_map_add(L, p, i, cap);
            continue;
        }
        missing++;
        if (alen < sizeof(absent)) {
            int k = snprintf(absent + alen, sizeof(absent) - alen, " %s", L->fns[i].sym);
            alen = k < 0 ? sizeof(absent) : alen + (size_t)k;
        }
    }
    if (lib == ES_LIB_CUDA) {
        /* The exact pointers cuGetProcAddress hands out, per version and
         * stream flavor, may differ from the exported symbols': map them
         * too. */
        void *gpv = rd(h, "cuGetProcAddress_v2");
        es_getproc_fn gp;
        memcpy(&gp, &gpv, sizeof(gp));
        for (int i = 0; gp && i < L->n; i++) {
            const es_fn_info_t *f = &L->fns[i];
            void *q = NULL;
            CUdriverProcAddressQueryResult st;
            cuuint64_t flags = f->flavor ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                         : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
            if (gp(f->gpname, &q, f->version, flags, &st) != CUDA_SUCCESS || !q)
                continue;
            es_map_add(L, q, i, cap);
        }
    }
    if (L->nmap > 1) /* (map may be NULL when empty) */
        qsort(L->map, (size_t)L->nmap, sizeof(L->map[0]), es_map_cmp);
    L->loaded = 1;
    es_lib_loaded(lib, h, rd);
    ES_DEBUG("%s loaded: %d of %d wrapped functions found, %d pointers mapped%s%s%s",
             L->soname, L->n - missing, L->n, L->nmap, missing ? "; missing (they return "
             "the library's not-initialized status):" : "", absent,
             alen >= sizeof(absent) ? " ..." : "");
out:
    es_in_shim &= ~(1 << lib);
    __atomic_store_n(&L->done, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&es_slow[lib], es_slow_base(lib), __ATOMIC_RELEASE);
    if (lib == ES_LIB_CUDA && !es_cfg.stats)
        __atomic_fetch_sub(&es_launch_gate, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&L->lock);
}

void es_slow_force(int on)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    __atomic_add_fetch(&es_slow_forced, on ? 1 : -1, __ATOMIC_ACQ_REL);
    for (int lib = 0; lib < ES_NLIBS; lib++)
        if (__atomic_load_n(&es_libs[lib].done, __ATOMIC_ACQUIRE))
            __atomic_store_n(&es_slow[lib], es_slow_base(lib), __ATOMIC_RELEASE);
    if (on)
        __atomic_fetch_add(&es_launch_gate, 1, __ATOMIC_RELEASE);
    else
        __atomic_fetch_sub(&es_launch_gate, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mu);
}

static void es_load_cuda(void) { es_load(ES_LIB_CUDA); }
static void es_load_cublas(void) { es_load(ES_LIB_CUBLAS); }
static void es_load_cudnn(void) { es_load(ES_LIB_CUDNN); }
static void es_load_nccl(void) { es_load(ES_LIB_NCCL); }
static void es_load_cublaslt(void) { es_load(ES_LIB_CUBLASLT); }
static void (*const es_loaders[ES_NLIBS])(void) = { es_load_cuda, es_load_cublas,
                                                   es_load_cudnn, es_load_nccl,
                                                   es_load_cublaslt };

static void es_ensure(int lib)
{
    if (__atomic_load_n(&es_libs[lib].done, __ATOMIC_ACQUIRE))
        return;
    if (es_in_shim & (1 << lib))
        return; /* called back from inside this library's own loading */
    pthread_once(&es_libs[lib].once, es_loaders[lib]);
}

void es_slowpath(int lib, int idx)
{
    es_ensure(lib);
    if (es_cfg.stats)
        __atomic_fetch_add(&es_libs[lib].cnt[idx].calls, 1, __ATOMIC_RELAXED);
}

int es_lib_ready(int lib)
{
    es_ensure(lib);
    return __atomic_load_n(&es_libs[lib].done, __ATOMIC_ACQUIRE) && es_libs[lib].loaded;
}

void *es_lib_sym(int lib, const char *name)
{
    if (!es_lib_ready(lib) || !es_libs[lib].handle)
        return NULL;
    return es_real_dlsym()(es_libs[lib].handle, name);
}

void *es_dlsym_real(void *handle, const char *name)
{
    return es_real_dlsym()(handle, name);
}

void *es_wrapper_for_real(int lib, const void *real, int *idx)
{
    es_lib_t *L = &es_libs[lib];
    if (!real || !__atomic_load_n(&L->done, __ATOMIC_ACQUIRE))
        return NULL;
    es_ptrmap_ent_t key = { real, 0 };
    es_ptrmap_ent_t *e = bsearch(&key, L->map, (size_t)L->nmap, sizeof(*e), es_map_cmp);
    if (!e)
        return NULL;
    if (idx)
        *idx = e->idx;
    return L->fns[e->idx].wrapper;
}

void es_stat_getproc(int lib, int idx)
{
    if (es_cfg.stats)
        __atomic_fetch_add(&es_libs[lib].cnt[idx].by_getproc, 1, __ATOMIC_RELAXED);
}

void *es_real_ptr(int lib, int idx)
{
    return es_libs[lib].table[idx];
}

void *es_raw_ptr(int lib, int idx)
{
    return es_libs[lib].raw[idx];
}

void *es_real_missing_ptr(int lib, int idx)
{
    return es_libs[lib].fns[idx].missing;
}

int es_real_present(int lib, int idx)
{
    es_lib_t *L = &es_libs[lib];
    return __atomic_load_n(&L->done, __ATOMIC_ACQUIRE) && L->table[idx] != L->fns[idx].missing;
}

int es_fn_is_identity(int lib, int idx)
{
    return es_libs[lib].fns[idx].kind == ES_KIND_I;
}

/* The file name (no directory) of the object addr lies in, or NULL. */
static const char *es_addr_object(const void *addr)
{
    Dl_info info;
    if (!addr || !dladdr(addr, &info) || !info.dli_fname)
        return NULL;
    const char *b = strrchr(info.dli_fname, '/');
    return b ? b + 1 : info.dli_fname;
}

int es_addr_kind(const void *addr)
{
    const char *b = es_addr_object(addr);
    if (!b)
        return ES_OBJ_OTHER;
    if (strncmp(b, "libcudart", 9) == 0)
        return ES_OBJ_CUDART;
    if (strncmp(b, "libcublas", 9) == 0) /* and libcublasLt */
        return ES_OBJ_CUBLAS;
    if (strncmp(b, "libcudnn", 8) == 0)
        return ES_OBJ_CUDNN;
    if (strncmp(b, "libnccl", 7) == 0)
        return ES_OBJ_NCCL;
    return ES_OBJ_OTHER;
}

int es_addr_in_vendor_lib(const void *addr)
{
    return es_obj_is_vendor(es_addr_kind(addr));
}

void es_resolve_atfork(int phase)
{
    /* Outer libraries first: loading cuDNN may load cuBLAS, which may load
     * the driver, never the other way round. */
    static const int order[ES_NLIBS] = { ES_LIB_NCCL, ES_LIB_CUDNN, ES_LIB_CUBLAS,
                                         ES_LIB_CUBLASLT, ES_LIB_CUDA };
    if (phase == 0) {
        for (int i = 0; i < ES_NLIBS; i++)
            pthread_mutex_lock(&es_libs[order[i]].lock);
    } else {
        for (int i = ES_NLIBS - 1; i >= 0; i--)
            pthread_mutex_unlock(&es_libs[order[i]].lock);
    }
}

/* ---- name index (dlsym and easyscale_stats) ---------------------------------- */

#define ES_NAME_SLOTS 1024
typedef struct es_name_ent {
    const char *name;
    short lib, idx;
} es_name_ent_t;
static es_name_ent_t es_names[ES_NAME_SLOTS];
/* 0 unbuilt, 1 building, 2 built. Not pthread_once: dlsym runs while a
 * sanitizer runtime is still setting up its interceptors (pthread_* not
 * callable yet). */
static int es_names_state;
_Static_assert(ES_TOTAL_FNS * 2 < ES_NAME_SLOTS, "name index too small");

/* Own comparison: a sanitizer runtime's strcmp interceptor is not usable
 * yet when it first calls dlsym. */
ES_EARLY static int es_streq(const char *a, const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

ES_EARLY static unsigned es_hash(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

ES_EARLY static void es_names_build(void)
{
    for (int lib = 0; lib < ES_NLIBS; lib++)
        for (int i = 0; i < es_libs[lib].n; i++) {
            const char *n = es_libs[lib].fns[i].sym;
            unsigned s = es_hash(n) & (ES_NAME_SLOTS - 1);
            while (es_names[s].name)
                s = (s + 1) & (ES_NAME_SLOTS - 1);
            es_names[s] = (es_name_ent_t){ n, (short)lib, (short)i };
        }
}

ES_EARLY static const es_name_ent_t *es_name_find(const char *name)
{
    if (__builtin_expect(__atomic_load_n(&es_names_state, __ATOMIC_ACQUIRE) != 2, 0)) {
        int expect = 0;
        if (__atomic_compare_exchange_n(&es_names_state, &expect, 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            es_names_build();
            __atomic_store_n(&es_names_state, 2, __ATOMIC_RELEASE);
        }
        while (__atomic_load_n(&es_names_state, __ATOMIC_ACQUIRE) != 2)
            __builtin_ia32_pause();
    }
    unsigned s = es_hash(name) & (ES_NAME_SLOTS - 1);
    while (es_names[s].name) {
        if (es_streq(es_names[s].name, name))
            return &es_names[s];
        s = (s + 1) & (ES_NAME_SLOTS - 1);
    }
    return NULL;
}

ES_EXPORT int easyscale_stats(const char *sym, easyscale_stat_t *out)
{
    if (!sym || !out)
        return -EINVAL;
    const es_name_ent_t *e = es_name_find(sym);
    if (!e)
        return -ENOENT;
    es_counters_t *c = &es_libs[e->lib].cnt[e->idx];
    out->calls = __atomic_load_n(&c->calls, __ATOMIC_RELAXED);
    out->by_dlsym = __atomic_load_n(&c->by_dlsym, __ATOMIC_RELAXED);
    out->by_getproc = __atomic_load_n(&c->by_getproc, __ATOMIC_RELAXED);
    return 0;
}

/* ---- the dlsym interposer ------------------------------------------------------ */

/* Decides a dlsym(handle, name) made by `caller`. Returns 1 with *out set
 * when the shim answers (a wrapped name), 0 when the real dlsym must answer
 * for the caller itself (then the trampoline below tail-jumps into it with
 * the caller's return address still on the stack, so RTLD_NEXT keeps
 * meaning "after the caller's object", exactly as without the shim). */
/* Only names the shim wraps go on to es_dlsym_answer (instrumented). */
static int es_dlsym_answer(const es_name_ent_t *e, void *handle, const char *name,
                           const void *caller, void **out);

__attribute__((used, visibility("hidden"))) ES_EARLY int es_dlsym_decide(void *handle,
                                                                        const char *name,
                                                                        const void *caller,
                                                                        void **out)
{
    es_real_dlsym();
    const char *nm = name;
    __asm__("" : "+r"(nm)); /* glibc declares name nonnull; callers may not honour it */
    const es_name_ent_t *e = nm ? es_name_find(nm) : NULL;
    if (!e) {
        /* not wrapped: refused when it takes a virtual handle; a vendor
         * function taking a virtual library handle: the shim's translating
         * wrapper (intercept/virtual/libh.h) */
        void *stub = nm ? es_refusal_by_symbol(nm) : NULL;
        if (!stub && nm && nm[0] == 'c' && nm[1] == 'u' && (nm[2] == 'b' || nm[2] == 'd'))
            stub = es_libh_wrapper_by_symbol(handle, nm);
        if (!stub)
            return 0;
        *out = stub;
        return 1;
    }
    return es_dlsym_answer(e, handle, name, caller, out);
}

__attribute__((noinline)) static int es_dlsym_answer(const es_name_ent_t *e, void *handle,
                                                     const char *name, const void *caller,
                                                     void **out)
{
    es_dlsym_fn rd = es_real_dlsym();
    es_lib_t *L = &es_libs[e->lib];
    const es_fn_info_t *f = &L->fns[e->idx];
    if (handle != RTLD_DEFAULT && handle != RTLD_NEXT) {
        void *p = rd(handle, name);
        *out = p;
        if (!p || p == f->wrapper)
            return 1;
        es_ensure(e->lib);
        int idx = -1;
        if (!L->loaded || !es_wrapper_for_real(e->lib, p, &idx) || idx != e->idx)
            return 1; /* some other library's function of that name */
    } else {
        /* A global lookup is a question: "is this function there?". Answer
         * it as the process without the shim would: not when the real
         * library or function is missing (unless asked from inside the
         * library's own loading, when that is not known yet). */
        es_ensure(e->lib);
        if (__atomic_load_n(&L->done, __ATOMIC_ACQUIRE) && L->table[e->idx] == f->missing) {
            /* fail the way dlsym fails, so dlerror() has a message */
            if (L->handle)
                rd(L->handle, name);
            else
                dlvsym(RTLD_DEFAULT, name, "EASYSCALE_ABSENT");
            *out = NULL;
            return 1;
        }
    }
    if (f->kind == ES_KIND_I && es_cfg.determinism == ES_DET_D2 &&
        es_addr_in_vendor_lib(caller) && es_lib_ready(e->lib)) {
        *out = L->table[e->idx];
        return 1;
    }
    if (es_cfg.stats)
        __atomic_fetch_add(&L->cnt[e->idx].by_dlsym, 1, __ATOMIC_RELAXED);
    ES_DEBUG("dlsym(%s) answered by the shim", name);
    *out = f->wrapper;
    return 1;
}

#if defined(__x86_64__)
/* dlsym: keep handle and name, ask es_dlsym_decide, then return its answer
 * or jump to the real dlsym (es_real_dlsym_ptr, set by the decision). */
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
        "  .cfi_startproc\n"
        "  endbr64\n"
        "  push %rdi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  push %rsi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  sub $24, %rsp\n"
        "  .cfi_adjust_cfa_offset 24\n"
        "  mov 40(%rsp), %rdx\n"       /* the caller's return address */
        "  mov %rsp, %rcx\n"           /* out */
        "  movq $0, (%rsp)\n"
        "  call es_dlsym_decide\n"
        "  mov %eax, %r11d\n"
        "  mov (%rsp), %rax\n"
        "  add $24, %rsp\n"
        "  .cfi_adjust_cfa_offset -24\n"
        "  pop %rsi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  pop %rdi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  test %r11d, %r11d\n"
        "  jz 1f\n"
        "  ret\n"
        "1:\n"
        "  jmp *es_real_dlsym_ptr(%rip)\n"
        "  .cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#else
/* Other architectures: RTLD_NEXT for names the shim does not wrap is
 * resolved relative to the shim instead of the caller. */
ES_EXPORT void *dlsym(void *handle, const char *name)
{
    void *out = NULL;
    if (es_dlsym_decide(handle, name, __builtin_return_address(0), &out))
        return out;
    return es_real_dlsym()(handle, name);
}
#endif

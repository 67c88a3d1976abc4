/* Client run by tests/shim/preload_test.c (test_every_wrapped_function), with
 * and without libeasyscale.so: for EVERY entry of shim/funcs.h, how
 * each lookup path answers:
 *   direct   the address the dynamic linker bound for a direct reference
 *            (weak references; the client is linked with the simcuda
 *            libraries, so without the shim they are the libraries')
 *   default  dlsym(RTLD_DEFAULT, sym)
 *   next     dlsym(RTLD_NEXT, sym)
 *   handle   dlsym(dlopen(soname), sym)
 *   CUDA entries also: cuGetProcAddress_v2 and cuGetProcAddress (v1) at the
 *   entry's version with its stream flavor (legacy / per-thread), and
 *   flavor-0 entries with CU_GET_PROC_ADDRESS_DEFAULT too.
 * Each answer is "none" (no function), "shim" (libeasyscale.so's export of
 * exactly that symbol, by dladdr), "shim-other" (one of the shim's exports,
 * but another symbol: a routing error) or "real".
 * Output: "ent LIB SYM direct=.. default=.. next=.. handle=.. [gp2=.. gp1=..
 * gpdef=..]" per entry, then "entries N".
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "shim/funcs.h"

/* Weak: a symbol simcuda lacks leaves the reference NULL. */
#define ES_WEAK(kind, sym, gp, ver, fl, ret, params, args, err)                                \
    extern __typeof__(sym) sym __attribute__((weak));
ES_CUDA_FUNCS(ES_WEAK)
ES_CUBLAS_FUNCS(ES_WEAK)
ES_CUDNN_FUNCS(ES_WEAK)
ES_NCCL_FUNCS(ES_WEAK)
ES_CUBLASLT_FUNCS(ES_WEAK)
#undef ES_WEAK

typedef CUresult (*gp2_t)(const char *, void **, int, cuuint64_t,
                          CUdriverProcAddressQueryResult *);
typedef CUresult (*gp1_t)(const char *, void **, int, cuuint64_t);

static void *g_handles[5];
static gp2_t g_gp2;
static gp1_t g_gp1;
static int g_entries;

static const char *what(const void *p, const char *sym)
{
    Dl_info i;
    if (!p)
        return "none";
    if (dladdr(p, &i) && i.dli_fname && strstr(i.dli_fname, "libeasyscale"))
        return i.dli_sname && strcmp(i.dli_sname, sym) == 0 ? "shim" : "shim-other";
    return "real";
}

static void entry(int lib, const char *sym, const void *direct, const char *gpname, int ver,
                  int flavor)
{
    static const char *const libs[5] = { "cuda", "cublas", "cudnn", "nccl", "cublaslt" };
    char line[512];
    int n = snprintf(line, sizeof(line), "ent %s %s direct=%s default=%s next=%s handle=%s",
                     libs[lib], sym, what(direct, sym), what(dlsym(RTLD_DEFAULT, sym), sym),
                     what(dlsym(RTLD_NEXT, sym), sym),
                     what(g_handles[lib] ? dlsym(g_handles[lib], sym) : NULL, sym));
    if (lib == 0 && gpname) {
        cuuint64_t fl = flavor ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                               : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
        CUdriverProcAddressQueryResult st;
        void *p2 = NULL, *p1 = NULL, *pd = NULL;
        if (!g_gp2 || g_gp2(gpname, &p2, ver, fl, &st) != CUDA_SUCCESS)
            p2 = NULL;
        if (!g_gp1 || g_gp1(gpname, &p1, ver, fl) != CUDA_SUCCESS)
            p1 = NULL;
        n += snprintf(line + n, sizeof(line) - (size_t)n, " gp2=%s gp1=%s", what(p2, sym),
                      what(p1, sym));
        if (!flavor) {
            if (!g_gp2 || g_gp2(gpname, &pd, ver, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS)
                pd = NULL;
            n += snprintf(line + n, sizeof(line) - (size_t)n, " gpdef=%s", what(pd, sym));
        }
    }
    puts(line);
    g_entries++;
}

int main(void)
{
    static const char *const sonames[5] = { "libcuda.so.1", "libcublas.so.13", "libcudnn.so.9",
                                            "libnccl.so.2", "libcublasLt.so.13" };
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 0; i < 5; i++)
        g_handles[i] = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
    if (!g_handles[0]) {
        printf("FAIL libcuda.so.1 not loadable\n");
        return 1;
    }
    void *p = dlsym(g_handles[0], "cuGetProcAddress_v2");
    memcpy(&g_gp2, &p, sizeof(p));
    p = dlsym(g_handles[0], "cuGetProcAddress");
    memcpy(&g_gp1, &p, sizeof(p));
    if (!g_gp2 || g_gp2("cuInit", &p, 2000, CU_GET_PROC_ADDRESS_DEFAULT, NULL) != CUDA_SUCCESS) {
        printf("FAIL cuGetProcAddress_v2 unusable\n");
        return 1;
    }
#define ES_ENT_CUDA(kind, sym, gp, ver, fl, ret, params, args, err)                            \
    entry(0, #sym, (const void *)sym, gp, ver, fl);
#define ES_ENT_CUBLAS(kind, sym, gp, ver, fl, ret, params, args, err)                          \
    entry(1, #sym, (const void *)sym, NULL, 0, 0);
#define ES_ENT_CUDNN(kind, sym, gp, ver, fl, ret, params, args, err)                           \
    entry(2, #sym, (const void *)sym, NULL, 0, 0);
#define ES_ENT_NCCL(kind, sym, gp, ver, fl, ret, params, args, err)                            \
    entry(3, #sym, (const void *)sym, NULL, 0, 0);
#define ES_ENT_CUBLASLT(kind, sym, gp, ver, fl, ret, params, args, err)                        \
    entry(4, #sym, (const void *)sym, NULL, 0, 0);
    ES_CUDA_FUNCS(ES_ENT_CUDA)
    ES_CUBLAS_FUNCS(ES_ENT_CUBLAS)
    ES_CUDNN_FUNCS(ES_ENT_CUDNN)
    ES_NCCL_FUNCS(ES_ENT_NCCL)
    ES_CUBLASLT_FUNCS(ES_ENT_CUBLASLT)
    printf("entries %d\n", g_entries);
    return 0;
}

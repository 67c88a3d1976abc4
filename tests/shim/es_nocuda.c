/* Client linked with no CUDA library, run under libeasyscale.so where the
 * real libraries (or their functions) cannot be found:
 * - direct calls (weak references, bound at run time to the shim's exports)
 *   return the library's "not initialized" status;
 * - a global dlsym of those names answers NULL (with a dlerror message), as
 *   it would without the shim.
 *   es_nocuda missing   prints "NAME STATUS" and "dlsym NAME found=N err=N"
 *   es_nocuda quiet     does nothing (a process that never uses CUDA) */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

extern int cuInit(unsigned flags) __attribute__((weak));
extern int cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags,
                               int *status) __attribute__((weak));
extern int cuDeviceGetCount(int *count) __attribute__((weak));
extern int cublasCreate_v2(void **handle) __attribute__((weak));
extern int cudnnCreate(void **handle) __attribute__((weak));
extern int ncclGetVersion(int *version) __attribute__((weak));

static void probe(const char *name)
{
    dlerror();
    void *p = dlsym(RTLD_DEFAULT, name);
    const char *e = dlerror();
    printf("dlsym %s found=%d err=%d\n", name, p != NULL, e != NULL);
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "missing") != 0)
        return 0;
    void *fn = NULL, *h = NULL;
    int st = 0, count = 0, v = 0;
    if (cuInit)
        printf("cuInit %d\n", cuInit(0));
    if (cuGetProcAddress_v2)
        printf("cuGetProcAddress_v2 %d\n", cuGetProcAddress_v2("cuInit", &fn, 13000, 0, &st));
    if (cuDeviceGetCount)
        printf("cuDeviceGetCount %d\n", cuDeviceGetCount(&count));
    if (cublasCreate_v2)
        printf("cublasCreate_v2 %d\n", cublasCreate_v2(&h));
    if (cudnnCreate)
        printf("cudnnCreate %d\n", cudnnCreate(&h));
    if (ncclGetVersion)
        printf("ncclGetVersion %d\n", ncclGetVersion(&v));
    probe("cuInit");
    probe("cublasCreate_v2");
    probe("ncclGetVersion");
    printf("done\n");
    return 0;
}

/* Client linked with no CUDA library, run under libeasyscale.so where the
 * real libraries cannot be found: every wrapper it reaches through the
 * shim's exports must return the library's "not initialized" status.
 *   es_nocuda missing   prints "NAME STATUS" lines
 *   es_nocuda quiet     does nothing (a process that never uses CUDA) */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*f_u)(unsigned);
typedef int (*f_p)(void *);
typedef int (*f_gp)(const char *, void **, int, unsigned long long, int *);

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "missing") != 0)
        return 0;
    void *p;
    if ((p = dlsym(RTLD_DEFAULT, "cuInit")) != NULL)
        printf("cuInit %d\n", ((f_u)p)(0));
    if ((p = dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2")) != NULL) {
        void *fn = NULL;
        int st = 0;
        printf("cuGetProcAddress_v2 %d\n", ((f_gp)p)("cuInit", &fn, 13000, 0, &st));
    }
    int count = 0;
    if ((p = dlsym(RTLD_DEFAULT, "cuDeviceGetCount")) != NULL)
        printf("cuDeviceGetCount %d\n", ((f_p)p)(&count));
    void *h = NULL;
    if ((p = dlsym(RTLD_DEFAULT, "cublasCreate_v2")) != NULL)
        printf("cublasCreate_v2 %d\n", ((f_p)p)(&h));
    if ((p = dlsym(RTLD_DEFAULT, "cudnnCreate")) != NULL)
        printf("cudnnCreate %d\n", ((f_p)p)(&h));
    int v = 0;
    if ((p = dlsym(RTLD_DEFAULT, "ncclGetVersion")) != NULL)
        printf("ncclGetVersion %d\n", ((f_p)p)(&v));
    printf("done\n");
    return 0;
}

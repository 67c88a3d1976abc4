/* libelf and libzstd for the shim's run-time kernel audit, loaded lazily.
 *
 * The audit code (fatbin/fatbin.c, audit/audit.c) calls elf_* and
 * ZSTD_* functions. Linking libelf.so.1 / libzstd.so.1 into the preloaded
 * shim would (1) make every process fail to start on a machine without them,
 * and (2) put them in the process's global scope ahead of the application's
 * own libraries, so an application library that exports a bundled zstd (or
 * its own elf_*) would have its calls bound to the system copy. Instead the
 * shim defines the functions it uses here, hidden (only the shim's objects
 * bind to them), forwarding to libelf.so.1 / libzstd.so.1 dlopen'ed
 * RTLD_LOCAL the first time any of them is called (the first module load the
 * audit reads). Without the libraries every function fails the way the
 * library reports a failure (elf_version: EV_NONE, so the fatbin reader
 * refuses to start; ZSTD_*: an error code), and the audit warns that it
 * cannot read images: nothing else changes.
 *
 * A function the audit starts to use and that is not listed here is an
 * undefined symbol of libeasyscale.so: tests/shim/preload_test.c
 * (test_exports) fails on it.
 */
#include "shim/log.h"
#include "shim/real.h"

#include <dlfcn.h>
#include <gelf.h>
#include <libelf.h>
#include <pthread.h>
#include <string.h>
/* zstd.h marks its API visibility("default"): here they are hidden. */
#define ZSTDLIB_VISIBLE
#define ZSTDLIB_VISIBILITY
#include <zstd.h>

/* X(lib, ret, name, params, args, failure value) */
#define ES_DYN_FUNCS(X)                                                                        \
    X(0, unsigned int, elf_version, (unsigned int v), (v), EV_NONE)                            \
    X(0, Elf *, elf_memory, (char *image, size_t size), (image, size), NULL)                   \
    X(0, int, elf_end, (Elf *e), (e), 0)                                                       \
    X(0, Elf_Kind, elf_kind, (Elf *e), (e), ELF_K_NONE)                                        \
    X(0, size_t, elf_ndxscn, (Elf_Scn *s), (s), SHN_UNDEF)                                     \
    X(0, Elf_Scn *, elf_nextscn, (Elf *e, Elf_Scn *s), (e, s), NULL)                           \
    X(0, int, elf_getshdrnum, (Elf *e, size_t *dst), (e, dst), -1)                             \
    X(0, int, elf_getshdrstrndx, (Elf *e, size_t *dst), (e, dst), -1)                          \
    X(0, char *, elf_strptr, (Elf *e, size_t index, size_t offset), (e, index, offset), NULL)  \
    X(0, GElf_Shdr *, gelf_getshdr, (Elf_Scn *s, GElf_Shdr *dst), (s, dst), NULL)              \
    X(1, ZSTD_DCtx *, ZSTD_createDCtx, (void), (), NULL)                                       \
    X(1, size_t, ZSTD_freeDCtx, (ZSTD_DCtx *d), (d), 0)                                        \
    X(1, size_t, ZSTD_decompressDCtx,                                                          \
      (ZSTD_DCtx *d, void *dst, size_t dcap, const void *src, size_t slen),                    \
      (d, dst, dcap, src, slen), (size_t)-1)                                                   \
    X(1, size_t, ZSTD_findFrameCompressedSize, (const void *src, size_t len), (src, len),      \
      (size_t)-1)                                                                              \
    X(1, unsigned long long, ZSTD_getFrameContentSize, (const void *src, size_t len),          \
      (src, len), ZSTD_CONTENTSIZE_ERROR)

static const char *const es_dyn_sonames[2] = { "libelf.so.1", "libzstd.so.1" };

#define ES_DYN_MEMBER(lib, ret, name, params, args, fail) ret(*name) params;
static struct {
    ES_DYN_FUNCS(ES_DYN_MEMBER)
    unsigned (*ZSTD_isError) (size_t code);
} es_dyn;
#undef ES_DYN_MEMBER

static pthread_once_t es_dyn_once = PTHREAD_ONCE_INIT;

static void es_dyn_load(void)
{
    void *h[2];
    for (int i = 0; i < 2; i++) {
        h[i] = dlopen(es_dyn_sonames[i], RTLD_NOW | RTLD_LOCAL);
        if (!h[i]) {
            const char *e = dlerror();
            ES_WARN("%s not loadable (%s): the kernel audit cannot read images",
                    es_dyn_sonames[i], e ? e : "?");
        }
    }
    /* A library with a function missing is not used at all. */
    void *p;
#define ES_DYN_CHECK(lib, ret, name, params, args, fail)                                       \
    if (h[lib] && !dlsym(h[lib], #name)) {                                                     \
        ES_WARN("%s has no %s: not used", es_dyn_sonames[lib], #name);                         \
        h[lib] = NULL;                                                                         \
    }
    ES_DYN_FUNCS(ES_DYN_CHECK)
#undef ES_DYN_CHECK
    if (h[1] && !dlsym(h[1], "ZSTD_isError"))
        h[1] = NULL;
#define ES_DYN_SET(lib, ret, name, params, args, fail)                                         \
    if (h[lib]) {                                                                              \
        p = dlsym(h[lib], #name);                                                              \
        memcpy(&es_dyn.name, &p, sizeof(p));                                                   \
    }
    ES_DYN_FUNCS(ES_DYN_SET)
#undef ES_DYN_SET
    if (h[1]) {
        p = dlsym(h[1], "ZSTD_isError");
        memcpy(&es_dyn.ZSTD_isError, &p, sizeof(p));
    }
}

/* The forwarders: hidden (the version script exports none of them either). */
#define ES_DYN_FWD(lib, ret, name, params, args, fail)                                         \
    __attribute__((visibility("hidden"))) ret name params                                      \
    {                                                                                          \
        pthread_once(&es_dyn_once, es_dyn_load);                                               \
        if (!es_dyn.name)                                                                      \
            return fail;                                                                       \
        return es_dyn.name args;                                                               \
    }
ES_DYN_FUNCS(ES_DYN_FWD)
#undef ES_DYN_FWD

__attribute__((visibility("hidden"))) unsigned ZSTD_isError(size_t code)
{
    pthread_once(&es_dyn_once, es_dyn_load);
    if (!es_dyn.ZSTD_isError)
        return code > (size_t)-120; /* zstd's own rule (ZSTD_error_maxCode) */
    return es_dyn.ZSTD_isError(code);
}

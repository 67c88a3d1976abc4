/* simcuda modules, libraries and kernel launches. A module image (fatbin,
 * cubin or PTX from nvcc) is read with fatbin/fatbin.h for its kernel names
 * and parameter layout (cubin .nv.info, else the PTX signature); each kernel
 * NAME runs as simcuda_twin_NAME from the twin libraries (SIMCUDA_KERNELS,
 * else those beside libcuda.so.1: below). A launch copies the argument
 * values (as a GPU does) and is enqueued on its stream; the stream's worker
 * calls the twin. */
#include "sim/driver/internal.h"

#include "fatbin/fatbin.h"

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- twin libraries ----------------------------------------------------------------
 * The twin libraries are SIMCUDA_KERNELS's colon-separated list when it is
 * set and not empty. Otherwise they are every libsimtwin_*.so in the twins/
 * directory beside the libcuda.so.1 that is running (simcuda's own libraries
 * and the project's, as the build lays them out), in name order. The list
 * is resolved once; the device servers are given it (devclient.c), so a
 * kernel has the same twin in the process and in its servers. */
#define MAX_TWIN_LIBS 64
#define TWIN_DIR "twins"
#define TWIN_PREFIX "libsimtwin_"
#define TWIN_SUFFIX ".so"
static void *g_twin_libs[MAX_TWIN_LIBS];
static int g_ntwin_libs;
static int g_twins_loaded;
static char *g_twin_list; /* resolved list, NULL: could not be made */
static char g_twin_source[4400]; /* where the list came from, for messages */
static pthread_once_t g_twin_list_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_mod_mu = PTHREAD_MUTEX_INITIALIZER;

void sim_kernel_fork_reset(void)
{
    pthread_mutex_init(&g_mod_mu, NULL);
}

static int is_twin_name(const char *n)
{
    size_t len = strlen(n), pl = strlen(TWIN_PREFIX), sl = strlen(TWIN_SUFFIX);
    return len > pl + sl && strncmp(n, TWIN_PREFIX, pl) == 0 &&
           strcmp(n + len - sl, TWIN_SUFFIX) == 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "DIR/twins/libsimtwin_A.so:DIR/twins/libsimtwin_B.so:..." for the
 * directory PATH (DIR/twins): "" when it has no such library or cannot be
 * read; NULL when out of memory. */
static char *default_twin_list(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return strdup("");
    char **names = NULL;
    size_t n = 0, cap = 0, total = 1;
    int oom = 0;
    struct dirent *e;
    while (!oom && (e = readdir(d)) != NULL) {
        if (!is_twin_name(e->d_name))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **a = realloc(names, nc * sizeof(*a));
            if (!a) {
                oom = 1;
                break;
            }
            names = a;
            cap = nc;
        }
        if (!(names[n] = strdup(e->d_name))) {
            oom = 1;
            break;
        }
        total += strlen(path) + 1 + strlen(names[n]) + 1;
        n++;
    }
    closedir(d);
    char *list = oom ? NULL : malloc(total);
    if (list) {
        if (n > 1)
            qsort(names, n, sizeof(*names), cmp_names);
        size_t off = 0;
        list[0] = '\0';
        for (size_t i = 0; i < n; i++)
            off += (size_t)sprintf(list + off, "%s%s/%s", i ? ":" : "", path, names[i]);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return list;
}

static void resolve_twin_list(void)
{
    const char *env = getenv("SIMCUDA_KERNELS");
    char dir[4096], path[4200];
    if (env && *env) {
        g_twin_list = strdup(env);
        snprintf(g_twin_source, sizeof(g_twin_source), "SIMCUDA_KERNELS");
    } else if (sim_lib_dir(dir, sizeof(dir)) == 0 &&
               snprintf(path, sizeof(path), "%s/" TWIN_DIR, dir) < (int)sizeof(path)) {
        g_twin_list = default_twin_list(path);
        snprintf(g_twin_source, sizeof(g_twin_source),
                 "%s/" TWIN_PREFIX "*" TWIN_SUFFIX " (SIMCUDA_KERNELS not set)", path);
    } else {
        g_twin_list = strdup("");
        snprintf(g_twin_source, sizeof(g_twin_source),
                 "any library (SIMCUDA_KERNELS not set, libcuda.so.1's directory unknown)");
    }
    if (!g_twin_list)
        sim_log("out of memory listing the kernel twin libraries");
}

const char *sim_twin_list(void)
{
    pthread_once(&g_twin_list_once, resolve_twin_list);
    return g_twin_list;
}

static void load_twins(void) /* g_mod_mu held */
{
    if (g_twins_loaded)
        return;
    g_twins_loaded = 1;
    const char *all = sim_twin_list();
    if (!all || !*all)
        return;
    char *list = strdup(all);
    if (!list)
        return;
    char *save = NULL;
    for (char *p = strtok_r(list, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
        if (g_ntwin_libs == MAX_TWIN_LIBS) {
            sim_log("%s lists more than %d libraries; ignoring '%s'", g_twin_source,
                    MAX_TWIN_LIBS, p);
            continue;
        }
        void *h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            sim_log("cannot load kernel twins '%s': %s", p, dlerror());
            continue;
        }
        g_twin_libs[g_ntwin_libs++] = h;
    }
    free(list);
}

static simcuda_twin_fn find_twin(const char *name)
{
    char sym[512];
    if (snprintf(sym, sizeof(sym), SIMCUDA_TWIN_PREFIX "%s", name) >= (int)sizeof(sym))
        return NULL;
    for (int i = 0; i < g_ntwin_libs; i++) {
        void *f = dlsym(g_twin_libs[i], sym);
        if (f) {
            simcuda_twin_fn fn;
            memcpy(&fn, &f, sizeof(fn));
            return fn;
        }
    }
    return NULL;
}

/* ---- image reading ------------------------------------------------------------------- */
typedef struct kinfo {
    char *name;
    int nparams;          /* -1 unknown */
    uint32_t psize;
    uint32_t *poff, *plen;
} kinfo_t;

typedef struct scan {
    kinfo_t *k;
    int n, cap;
    int err;
} scan_t;

static kinfo_t *scan_get(scan_t *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->k[i].name, name) == 0)
            return &s->k[i];
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 16;
        kinfo_t *a = realloc(s->k, (size_t)nc * sizeof(*a));
        if (!a)
            return NULL;
        s->k = a;
        s->cap = nc;
    }
    kinfo_t *k = &s->k[s->n];
    memset(k, 0, sizeof(*k));
    k->name = strdup(name);
    if (!k->name)
        return NULL;
    k->nparams = -1;
    s->n++;
    return k;
}

static int set_params(kinfo_t *k, int n, const uint32_t *off, const uint32_t *len, uint32_t total)
{
    free(k->poff);
    free(k->plen);
    k->poff = calloc((size_t)n + 1, sizeof(uint32_t));
    k->plen = calloc((size_t)n + 1, sizeof(uint32_t));
    if (!k->poff || !k->plen)
        return -ENOMEM;
    memcpy(k->poff, off, (size_t)n * sizeof(uint32_t));
    memcpy(k->plen, len, (size_t)n * sizeof(uint32_t));
    k->nparams = n;
    k->psize = total;
    return 0;
}

/* Parameter layout from a cubin's .nv.info.<kernel>: EIATTR_KPARAM_INFO
 * (0x17) entries {u32 index, u16 ordinal, u16 offset, u32 flags with the
 * size in bits 18..31}; EIATTR_CBANK_PARAM_SIZE (0x19) the total. */
static void cubin_params(const void *elf, size_t size, scan_t *s)
{
    elf_version(EV_CURRENT);
    Elf *e = elf_memory((char *)elf, size);
    if (!e)
        return;
    size_t shstrndx;
    if (elf_getshdrstrndx(e, &shstrndx) != 0)
        goto out;
    for (Elf_Scn *scn = elf_nextscn(e, NULL); scn; scn = elf_nextscn(e, scn)) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh))
            continue;
        const char *nm = elf_strptr(e, shstrndx, sh.sh_name);
        if (!nm || strncmp(nm, ".nv.info.", 9) != 0)
            continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        if (!d || !d->d_buf)
            continue;
        kinfo_t *k = scan_get(s, nm + 9);
        if (!k)
            continue;
        const unsigned char *b = d->d_buf;
        size_t len = d->d_size, i = 0;
        uint32_t off[1024], plen[1024], total = 0;
        int maxord = -1, ok = 1;
        while (i + 2 <= len) {
            unsigned fmt = b[i], attr = b[i + 1];
            if (fmt == 4) { /* EIFMT_SVAL: u16 size + payload */
                if (i + 4 > len)
                    break;
                unsigned sz = (unsigned)b[i + 2] | ((unsigned)b[i + 3] << 8);
                if (i + 4 + sz > len)
                    break;
                const unsigned char *p = b + i + 4;
                if (attr == 0x17 && sz >= 12) {
                    unsigned ord = (unsigned)p[4] | ((unsigned)p[5] << 8);
                    unsigned o = (unsigned)p[6] | ((unsigned)p[7] << 8);
                    uint32_t w = (uint32_t)p[8] | ((uint32_t)p[9] << 8) | ((uint32_t)p[10] << 16) |
                                 ((uint32_t)p[11] << 24);
                    if (ord < 1024) {
                        off[ord] = o;
                        plen[ord] = w >> 18;
                        if ((int)ord > maxord)
                            maxord = (int)ord;
                    } else {
                        ok = 0;
                    }
                }
                i += 4 + sz;
            } else if (fmt == 3) { /* EIFMT_HVAL: u16 value */
                if (attr == 0x19 && i + 4 <= len)
                    total = (uint32_t)b[i + 2] | ((uint32_t)b[i + 3] << 8);
                i += 4;
            } else if (fmt == 2) { /* EIFMT_BVAL */
                i += 4;
            } else {
                i += 2;
            }
        }
        if (ok) {
            uint32_t end = 0;
            for (int j = 0; j <= maxord; j++)
                if (off[j] + plen[j] > end)
                    end = off[j] + plen[j];
            set_params(k, maxord + 1, off, plen, total > end ? total : end);
        }
    }
out:
    elf_end(e);
}

static int kernel_name_cb(const char *name, const void *code, size_t code_size, void *arg)
{
    (void)code;
    (void)code_size;
    scan_t *s = arg;
    if (!scan_get(s, name))
        s->err = -ENOMEM;
    return 0;
}

/* PTX signature: ".entry NAME( .param .u64 NAME_param_0, .param .align 8 .b8 NAME_param_1[16] )" */
static unsigned ptx_type_size(const char *t)
{
    if (!strncmp(t, "u8", 2) || !strncmp(t, "s8", 2) || !strncmp(t, "b8", 2))
        return 1;
    if (!strncmp(t, "u16", 3) || !strncmp(t, "s16", 3) || !strncmp(t, "b16", 3) || !strncmp(t, "f16", 3))
        return 2;
    if (!strncmp(t, "u32", 3) || !strncmp(t, "s32", 3) || !strncmp(t, "b32", 3) || !strncmp(t, "f32", 3))
        return 4;
    if (!strncmp(t, "u64", 3) || !strncmp(t, "s64", 3) || !strncmp(t, "b64", 3) || !strncmp(t, "f64", 3))
        return 8;
    return 0;
}

static void ptx_params(const char *ptx, size_t size, scan_t *s)
{
    const char *end = ptx + size;
    for (int ki = 0; ki < s->n; ki++) {
        kinfo_t *k = &s->k[ki];
        if (k->nparams >= 0)
            continue;
        size_t nl = strlen(k->name);
        const char *p = ptx;
        while ((p = memmem(p, (size_t)(end - p), ".entry", 6)) != NULL) {
            const char *q = p + 6;
            while (q < end && isspace((unsigned char)*q))
                q++;
            if ((size_t)(end - q) > nl && memcmp(q, k->name, nl) == 0 &&
                (q[nl] == '(' || isspace((unsigned char)q[nl])))
                break;
            p = q;
        }
        if (!p)
            continue;
        const char *open = memchr(p, '(', (size_t)(end - p));
        const char *brace = memchr(p, '{', (size_t)(end - p));
        uint32_t off[1024], len[1024];
        int n = 0;
        uint32_t at = 0;
        if (open && (!brace || open < brace)) {
            const char *close = memchr(open, ')', (size_t)(end - open));
            const char *c = open;
            while (close && c < close && n < 1024) {
                const char *pp = memmem(c, (size_t)(close - c), ".param", 6);
                if (!pp)
                    break;
                c = pp + 6;
                unsigned align = 0;
                const char *al = memmem(c, (size_t)(close - c), ".align", 6);
                const char *comma = memchr(c, ',', (size_t)(close - c));
                const char *stop = comma ? comma : close;
                if (al && al < stop)
                    align = (unsigned)strtoul(al + 6, NULL, 10);
                const char *dot = c;
                unsigned esz = 0;
                while (dot < stop && (dot = memchr(dot, '.', (size_t)(stop - dot))) != NULL) {
                    dot++;
                    esz = ptx_type_size(dot);
                    if (esz)
                        break;
                }
                if (!esz)
                    break;
                unsigned count = 1;
                const char *br = memchr(c, '[', (size_t)(stop - c));
                if (br)
                    count = (unsigned)strtoul(br + 1, NULL, 10);
                if (!align)
                    align = esz;
                at = (at + align - 1) / align * align;
                off[n] = at;
                len[n] = esz * count;
                at += len[n];
                n++;
                c = stop;
            }
        }
        set_params(k, n, off, len, at);
    }
}

/* ---- choosing the image a device runs (arch.c has the rules) ------------------------- */
#define FATBIN_FLAG_ARCH_SPECIFIC 0x100000ULL
#define FATBIN_FLAG_FAMILY_SPECIFIC 0x200000ULL
#define SIM_MAX_PTX_VERSION 90 /* PTX ISA 9.0: what CUDA 13.0's JIT reads */

typedef struct img_cand {
    int kind;          /* ES_ENTRY_CUBIN or ES_ENTRY_PTX */
    unsigned arch;     /* sm number */
    int a, f;          /* arch-specific, family-specific */
    unsigned ptx_ver;  /* PTX: ISA version x 10 */
} img_cand_t;

typedef struct cands {
    img_cand_t *c;
    int n, cap;
    int err;
} cands_t;

/* A cubin's .nv.compat attribute 0x09 (1 for sm_90a, sm_100a, ...). */
static int cubin_arch_specific(const void *elf, size_t size)
{
    int found = 0;
    elf_version(EV_CURRENT);
    Elf *e = elf_memory((char *)elf, size);
    if (!e)
        return 0;
    size_t shstrndx;
    if (elf_getshdrstrndx(e, &shstrndx) != 0)
        goto out;
    for (Elf_Scn *scn = elf_nextscn(e, NULL); scn; scn = elf_nextscn(e, scn)) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh))
            continue;
        const char *nm = elf_strptr(e, shstrndx, sh.sh_name);
        if (!nm || strcmp(nm, ".nv.compat") != 0)
            continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        if (!d || !d->d_buf)
            continue;
        const unsigned char *b = d->d_buf;
        for (size_t i = 0; i + 2 <= d->d_size;) {
            unsigned fmt = b[i], attr = b[i + 1];
            if (fmt == 2) { /* BVAL: attribute, value byte, pad */
                if (i + 3 <= d->d_size && attr == 0x09)
                    found = b[i + 2] != 0;
                i += 4;
            } else if (fmt == 3) {
                i += 4;
            } else if (fmt == 4) {
                if (i + 4 > d->d_size)
                    break;
                i += 4 + ((size_t)b[i + 2] | ((size_t)b[i + 3] << 8));
            } else {
                i += 2;
            }
        }
    }
out:
    elf_end(e);
    return found;
}

/* PTX: ".target sm_NN[a|f]" and ".version X.Y". */
static void ptx_target(const char *ptx, size_t size, img_cand_t *c)
{
    const char *end = ptx + size;
    const char *t = memmem(ptx, size, ".target", 7);
    if (t) {
        t += 7;
        while (t < end && isspace((unsigned char)*t))
            t++;
        if (end - t > 3 && memcmp(t, "sm_", 3) == 0) {
            t += 3;
            unsigned a = 0;
            while (t < end && isdigit((unsigned char)*t) && a < 10000)
                a = a * 10 + (unsigned)(*t++ - '0');
            if (a)
                c->arch = a;
            if (t < end && *t == 'a')
                c->a = 1;
            else if (t < end && *t == 'f')
                c->f = 1;
        }
    }
    const char *v = memmem(ptx, size, ".version", 8);
    if (v) {
        v += 8;
        while (v < end && isspace((unsigned char)*v))
            v++;
        unsigned maj = 0, min = 0;
        while (v < end && isdigit((unsigned char)*v))
            maj = maj * 10 + (unsigned)(*v++ - '0');
        if (v < end && *v == '.')
            for (v++; v < end && isdigit((unsigned char)*v);)
                min = min * 10 + (unsigned)(*v++ - '0');
        c->ptx_ver = maj * 10 + (min > 9 ? 9 : min);
    }
}

static int cand_cb(const es_fatbin_entry_t *e, void *arg)
{
    cands_t *cs = arg;
    if (!e->data || (e->kind != ES_ENTRY_CUBIN && e->kind != ES_ENTRY_PTX))
        return 0;
    if (cs->n == cs->cap) {
        int nc = cs->cap ? cs->cap * 2 : 8;
        img_cand_t *a = realloc(cs->c, (size_t)nc * sizeof(*a));
        if (!a) {
            cs->err = -ENOMEM;
            return -ENOMEM;
        }
        cs->c = a;
        cs->cap = nc;
    }
    img_cand_t *c = &cs->c[cs->n];
    memset(c, 0, sizeof(*c));
    c->kind = e->kind;
    c->arch = e->arch;
    c->a = !!(e->flags & FATBIN_FLAG_ARCH_SPECIFIC);
    c->f = !!(e->flags & FATBIN_FLAG_FAMILY_SPECIFIC);
    if (e->kind == ES_ENTRY_CUBIN && cubin_arch_specific(e->data, e->size))
        c->a = 1;
    if (e->kind == ES_ENTRY_PTX)
        ptx_target(e->data, e->size, c);
    cs->n++;
    return 0;
}

/* Index of the entry a device of compute capability major.minor runs: the
 * newest SASS it can run, else the newest PTX the JIT can compile for it;
 * -1 if none (*ptx_too_new when only too new a PTX ISA was there). */
static int pick_entry(const cands_t *cs, int major, int minor, int *ptx_too_new)
{
    int best = -1;
    for (int pass = 0; pass < 2 && best < 0; pass++) {
        int want = pass == 0 ? ES_ENTRY_CUBIN : ES_ENTRY_PTX;
        for (int i = 0; i < cs->n; i++) {
            const img_cand_t *c = &cs->c[i];
            if (c->kind != want ||
                !sim_arch_runs(c->kind, c->arch, c->a, c->f, major, minor))
                continue;
            if (want == ES_ENTRY_PTX && c->ptx_ver > SIM_MAX_PTX_VERSION) {
                if (ptx_too_new)
                    *ptx_too_new = 1;
                continue;
            }
            if (best < 0 || c->arch > cs->c[best].arch)
                best = i;
        }
    }
    return best;
}

typedef struct scan_pick {
    scan_t *s;
    int want;          /* entry index whose kernels make the module */
    int at;
} scan_pick_t;

/* Kernel names and parameters of the chosen entry; parameters of kernels
 * whose cubin does not give them from any PTX of the image. */
static int entry_cb(const es_fatbin_entry_t *e, void *arg)
{
    scan_pick_t *sp = arg;
    scan_t *s = sp->s;
    if (!e->data || (e->kind != ES_ENTRY_CUBIN && e->kind != ES_ENTRY_PTX))
        return 0;
    int mine = sp->at++ == sp->want;
    if (mine && e->kind == ES_ENTRY_CUBIN) {
        es_cubin_kernels(e->data, e->size, kernel_name_cb, s);
        cubin_params(e->data, e->size, s);
    } else if (mine) {
        es_ptx_kernels(e->data, e->size, kernel_name_cb, s);
    }
    return s->err;
}

static int ptx_fill_cb(const es_fatbin_entry_t *e, void *arg)
{
    if (e->data && e->kind == ES_ENTRY_PTX)
        ptx_params(e->data, e->size, arg);
    return 0;
}

static void scan_free(scan_t *s)
{
    for (int i = 0; i < s->n; i++) {
        free(s->k[i].name);
        free(s->k[i].poff);
        free(s->k[i].plen);
    }
    free(s->k);
}

/* ---- modules ----------------------------------------------------------------------------- */
typedef struct sim_kernel {
    sim_func_t *fn;
} sim_kernel_t;

typedef struct sim_mod_ext {
    sim_module_t m;
    sim_kernel_t *kernels;
    unsigned char runs[SIM_MAX_DEVICES]; /* the image has code device d runs */
} sim_mod_ext_t;

/* Its function and kernel handles are refused from now on. */
static void module_unregister(sim_mod_ext_t *x)
{
    for (int i = 0; i < x->m.nfuncs; i++) {
        sim_reg_del(&x->m.funcs[i]);
        if (x->kernels)
            sim_reg_del(&x->kernels[i]);
    }
}

static void module_free(sim_mod_ext_t *x)
{
    module_unregister(x);
    for (int i = 0; i < x->m.nfuncs; i++) {
        free(x->m.funcs[i].name);
        free(x->m.funcs[i].poff);
        free(x->m.funcs[i].plen);
    }
    free(x->m.funcs);
    free(x->kernels);
    free(x);
}

static CUresult load_image(const void *image, size_t avail, int is_library, sim_ctx_t *ctx,
                           sim_mod_ext_t **out)
{
    size_t size = 0;
    CUresult r = CUDA_SUCCESS;
    scan_t s = {0};
    cands_t cs = {0};
    sim_mod_ext_t *x = NULL;
    int pick[SIM_MAX_DEVICES] = {0};
    if (!image)
        return CUDA_ERROR_INVALID_VALUE;
    int kind = es_image_probe(image, avail, &size);
    if (kind <= 0) {
        r = CUDA_ERROR_INVALID_IMAGE;
        goto out;
    }
    int rc = es_fatbin_walk(image, size, cand_cb, &cs);
    if (rc < 0 || cs.err) {
        r = rc == -ENOMEM || cs.err ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_IMAGE;
        goto out;
    }
    /* The code each device would run; a module is for its context's
     * device, a library for any device that has code in it. */
    int too_new = 0, dev = -1;
    for (int d = 0; d < sim_ndevices; d++) {
        pick[d] = pick_entry(&cs, sim_devices[d].model->cc_major, sim_devices[d].model->cc_minor,
                             &too_new);
        if (dev < 0 && pick[d] >= 0)
            dev = d;
    }
    if (ctx)
        dev = pick[ctx->dev] >= 0 ? ctx->dev : -1;
    if (dev < 0) {
        r = too_new ? CUDA_ERROR_UNSUPPORTED_PTX_VERSION : CUDA_ERROR_NO_BINARY_FOR_GPU;
        goto out;
    }
    scan_pick_t sp = {&s, pick[dev], 0};
    rc = es_fatbin_walk(image, size, entry_cb, &sp);
    if (rc == 0 && !s.err)
        rc = es_fatbin_walk(image, size, ptx_fill_cb, &s);
    if (rc < 0 || s.err) {
        r = rc == -ENOMEM || s.err ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_IMAGE;
        goto out;
    }
    pthread_mutex_lock(&g_mod_mu);
    load_twins();
    pthread_mutex_unlock(&g_mod_mu);
    x = calloc(1, sizeof(*x));
    if (!x) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    for (int d = 0; d < sim_ndevices; d++)
        x->runs[d] = pick[d] >= 0;
    x->m.ctx = ctx;
    x->m.is_library = is_library;
    x->m.funcs = calloc((size_t)s.n + 1, sizeof(sim_func_t));
    x->kernels = calloc((size_t)s.n + 1, sizeof(sim_kernel_t));
    if (!x->m.funcs || !x->kernels) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    for (int i = 0; i < s.n; i++) {
        simcuda_twin_fn twin = find_twin(s.k[i].name);
        if (!twin) {
            sim_log("kernel '%s' has no twin: no %s%s in %s", s.k[i].name, SIMCUDA_TWIN_PREFIX,
                    s.k[i].name, g_twin_source);
            r = CUDA_ERROR_NOT_FOUND;
            continue;
        }
        sim_func_t *f = &x->m.funcs[x->m.nfuncs];
        f->mod = &x->m;
        f->name = s.k[i].name;
        s.k[i].name = NULL;
        f->twin = twin;
        f->nparams = s.k[i].nparams;
        f->psize = s.k[i].psize;
        f->poff = s.k[i].poff;
        f->plen = s.k[i].plen;
        s.k[i].poff = s.k[i].plen = NULL;
        f->max_dyn_smem = 49152;
        f->num_regs = 32;
        f->preferred_carveout = -1;
        x->kernels[x->m.nfuncs].fn = f;
        x->m.nfuncs++;
    }
    if (r != CUDA_SUCCESS)
        goto out;
    for (int i = 0; i < x->m.nfuncs; i++) {
        sim_reg_add(&x->m.funcs[i], SIM_H_FUNC);
        sim_reg_add(&x->kernels[i], SIM_H_KERNEL);
    }
    atomic_store(&x->m.refs, 1);
    sim_reg_add(x, is_library ? SIM_H_LIBRARY : SIM_H_MODULE);
    *out = x;
    x = NULL;
out:
    if (x)
        module_free(x);
    scan_free(&s);
    free(cs.c);
    return r;
}

/* Does the module (or library) hold code device dev can run? */
int sim_module_runs_on(const sim_module_t *m, int dev)
{
    const sim_mod_ext_t *x = (const sim_mod_ext_t *)(const void *)m; /* m is the first member */
    return dev >= 0 && dev < SIM_MAX_DEVICES && x->runs[dev];
}

static CUresult module_load(CUmodule *module, const void *image, size_t avail)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    sim_mod_ext_t *x;
    r = load_image(image, avail, 0, c, &x);
    if (r == CUDA_SUCCESS)
        *module = (CUmodule)x;
    return r;
}

static int read_file(const char *path, void **buf, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    int rc = 0;
    char *b = NULL;
    if (fstat(fd, &st) != 0 || st.st_size <= 0) {
        rc = -EINVAL;
        goto out;
    }
    b = malloc((size_t)st.st_size + 1);
    if (!b) {
        rc = -ENOMEM;
        goto out;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, b + got, (size_t)st.st_size - got);
        if (n <= 0) {
            rc = -EIO;
            goto out;
        }
        got += (size_t)n;
    }
    b[got] = '\0';
    *buf = b;
    *len = got;
    b = NULL;
out:
    free(b);
    close(fd);
    return rc;
}

CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!module || !fname)
        return CUDA_ERROR_INVALID_VALUE;
    void *buf;
    size_t len;
    int rc = read_file(fname, &buf, &len);
    if (rc == -ENOENT || rc == -EACCES)
        return CUDA_ERROR_FILE_NOT_FOUND;
    if (rc < 0)
        return rc == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_IMAGE;
    r = module_load(module, buf, len + 1);
    free(buf);
    return r;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    return module_load(module, image, SIZE_MAX);
}

CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                            CUjit_option *options, void **optionValues)
{
    if (numOptions && (!options || !optionValues))
        return CUDA_ERROR_INVALID_VALUE;
    return module_load(module, image, SIZE_MAX);
}

CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    return module_load(module, fatCubin, SIZE_MAX);
}

static CUresult module_get(CUmodule h, int type, sim_mod_ext_t **out)
{
    SIM_CHECK_INIT();
    if (!h || !sim_reg_has(h, type))
        return CUDA_ERROR_INVALID_HANDLE;
    *out = (sim_mod_ext_t *)h;
    return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule hmod)
{
    sim_mod_ext_t *x;
    CUresult r = module_get(hmod, SIM_H_MODULE, &x);
    if (r != CUDA_SUCCESS)
        return r;
    sim_reg_del(x);
    module_unregister(x);
    /* Like the real call, waits for the context's work; launches still
     * queued elsewhere hold the module until they have run. */
    if (sim_ctx_valid(x->m.ctx))
        sim_ctx_sync(x->m.ctx);
    sim_module_unref(&x->m);
    return CUDA_SUCCESS;
}

void sim_module_unref(sim_module_t *m)
{
    if (atomic_fetch_sub(&m->refs, 1) == 1)
        module_free((sim_mod_ext_t *)(void *)m); /* m is the first member */
}

static sim_func_t *mod_find(sim_mod_ext_t *x, const char *name, int *idx)
{
    for (int i = 0; i < x->m.nfuncs; i++)
        if (strcmp(x->m.funcs[i].name, name) == 0) {
            if (idx)
                *idx = i;
            return &x->m.funcs[i];
        }
    return NULL;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    sim_mod_ext_t *x;
    CUresult r = module_get(hmod, SIM_H_MODULE, &x);
    if (r != CUDA_SUCCESS)
        return r;
    if (!hfunc || !name)
        return CUDA_ERROR_INVALID_VALUE;
    sim_func_t *f = mod_find(x, name, NULL);
    if (!f)
        return CUDA_ERROR_NOT_FOUND;
    *hfunc = (CUfunction)f;
    return CUDA_SUCCESS;
}

CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
    sim_mod_ext_t *x;
    (void)dptr;
    (void)bytes;
    CUresult r = module_get(hmod, SIM_H_MODULE, &x);
    if (r != CUDA_SUCCESS)
        return r;
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_ERROR_NOT_FOUND; /* module globals are not simulated */
}

CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    SIM_CHECK_INIT();
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    *mode = CU_MODULE_EAGER_LOADING;
    return CUDA_SUCCESS;
}

/* ---- libraries ------------------------------------------------------------------------------ */
CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                           void **jitOptionsValues, unsigned int numJitOptions,
                           CUlibraryOption *libraryOptions, void **libraryOptionValues,
                           unsigned int numLibraryOptions)
{
    SIM_CHECK_INIT();
    if (!library || !code || (numJitOptions && (!jitOptions || !jitOptionsValues)) ||
        (numLibraryOptions && (!libraryOptions || !libraryOptionValues)))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult sticky = SIM_STICKY();
    if (sticky)
        return sticky;
    sim_ctx_t *cur = sim_ctx_current();
    if (cur && !sim_ctx_valid(cur))
        cur = NULL;
    sim_mod_ext_t *x;
    CUresult r = load_image(code, SIZE_MAX, 1, cur, &x);
    if (r == CUDA_SUCCESS)
        *library = (CUlibrary)x;
    return r;
}

CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
                               void **jitOptionsValues, unsigned int numJitOptions,
                               CUlibraryOption *libraryOptions, void **libraryOptionValues,
                               unsigned int numLibraryOptions)
{
    SIM_CHECK_INIT();
    if (!library || !fileName)
        return CUDA_ERROR_INVALID_VALUE;
    void *buf;
    size_t len;
    int rc = read_file(fileName, &buf, &len);
    if (rc < 0)
        return rc == -ENOENT ? CUDA_ERROR_FILE_NOT_FOUND : CUDA_ERROR_INVALID_IMAGE;
    CUresult r = cuLibraryLoadData(library, buf, jitOptions, jitOptionsValues, numJitOptions,
                                   libraryOptions, libraryOptionValues, numLibraryOptions);
    free(buf);
    return r;
}

CUresult cuLibraryUnload(CUlibrary library)
{
    sim_mod_ext_t *x;
    CUresult r = module_get((CUmodule)library, SIM_H_LIBRARY, &x);
    if (r != CUDA_SUCCESS)
        return r;
    sim_reg_del(x);
    module_unregister(x);
    sim_ctx_t *c = sim_ctx_current();
    if (sim_ctx_valid(c))
        sim_ctx_sync(c);
    sim_module_unref(&x->m); /* its kernels may still be queued in other contexts */
    return CUDA_SUCCESS;
}

CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    sim_mod_ext_t *x;
    CUresult r = module_get((CUmodule)library, SIM_H_LIBRARY, &x);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pKernel || !name)
        return CUDA_ERROR_INVALID_VALUE;
    int i;
    if (!mod_find(x, name, &i))
        return CUDA_ERROR_NOT_FOUND;
    *pKernel = (CUkernel)&x->kernels[i];
    return CUDA_SUCCESS;
}

CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
    sim_mod_ext_t *x;
    CUresult r = module_get((CUmodule)library, SIM_H_LIBRARY, &x);
    if (r != CUDA_SUCCESS)
        return r;
    (void)pMod;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* Library globals are not simulated, like module globals: a valid
 * library and name get CUDA_ERROR_NOT_FOUND. */
static CUresult library_global(CUdeviceptr *dptr, size_t *bytes, CUlibrary library,
                               const char *name)
{
    sim_mod_ext_t *x;
    (void)dptr;
    (void)bytes;
    CUresult r = module_get((CUmodule)library, SIM_H_LIBRARY, &x);
    if (r != CUDA_SUCCESS)
        return r;
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_ERROR_NOT_FOUND;
}

CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library,
                            const char *name)
{
    return library_global(dptr, bytes, library, name);
}

CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library,
                             const char *name)
{
    return library_global(dptr, bytes, library, name);
}

CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib)
{
    sim_mod_ext_t *x;
    CUresult r = module_get((CUmodule)lib, SIM_H_LIBRARY, &x);
    if (r != CUDA_SUCCESS)
        return r;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = (unsigned)x->m.nfuncs;
    return CUDA_SUCCESS;
}

CUresult cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int numKernels, CUlibrary lib)
{
    sim_mod_ext_t *x;
    CUresult r = module_get((CUmodule)lib, SIM_H_LIBRARY, &x);
    if (r != CUDA_SUCCESS)
        return r;
    if (!kernels)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < numKernels && i < (unsigned)x->m.nfuncs; i++)
        kernels[i] = (CUkernel)&x->kernels[i];
    return CUDA_SUCCESS;
}

static CUresult kernel_get(CUkernel k, sim_func_t **out)
{
    SIM_CHECK_INIT();
    if (!k || !sim_reg_has(k, SIM_H_KERNEL))
        return CUDA_ERROR_INVALID_HANDLE;
    *out = ((sim_kernel_t *)k)->fn;
    return CUDA_SUCCESS;
}

CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    sim_func_t *f;
    CUresult r = kernel_get(kernel, &f);
    if (r != CUDA_SUCCESS)
        return r;
    sim_ctx_t *c;
    r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pFunc)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_module_runs_on(f->mod, c->dev))
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    *pFunc = (CUfunction)f;
    return CUDA_SUCCESS;
}

CUresult cuKernelGetName(const char **name, CUkernel hfunc)
{
    sim_func_t *f;
    CUresult r = kernel_get(hfunc, &f);
    if (r != CUDA_SUCCESS)
        return r;
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    *name = f->name;
    return CUDA_SUCCESS;
}

CUresult cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel)
{
    sim_func_t *f;
    CUresult r = kernel_get(kernel, &f);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pLib)
        return CUDA_ERROR_INVALID_VALUE;
    *pLib = (CUlibrary)(void *)f->mod; /* the module is the first member */
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule mod)
{
    sim_mod_ext_t *x;
    CUresult r = module_get(mod, SIM_H_MODULE, &x);
    if (r != CUDA_SUCCESS)
        return r;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = (unsigned)x->m.nfuncs;
    return CUDA_SUCCESS;
}

CUresult cuModuleEnumerateFunctions(CUfunction *functions, unsigned int numFunctions, CUmodule mod)
{
    sim_mod_ext_t *x;
    CUresult r = module_get(mod, SIM_H_MODULE, &x);
    if (r != CUDA_SUCCESS)
        return r;
    if (!functions)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < numFunctions && i < (unsigned)x->m.nfuncs; i++)
        functions[i] = (CUfunction)&x->m.funcs[i];
    return CUDA_SUCCESS;
}

/* ---- functions -------------------------------------------------------------------------------- */
static CUresult func_get(CUfunction h, sim_func_t **out)
{
    SIM_CHECK_INIT();
    if (!h || !sim_reg_has(h, SIM_H_FUNC))
        return CUDA_ERROR_INVALID_HANDLE;
    *out = (sim_func_t *)h;
    return CUDA_SUCCESS;
}

static CUresult func_attr(int *pi, CUfunction_attribute attrib, sim_func_t *f, int dev)
{
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    sim_device_t *d = sim_dev(dev);
    int cc = d ? d->model->cc_major * 10 + d->model->cc_minor : 80;
    switch ((int)attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = f->num_regs; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = cc; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = cc; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f->max_dyn_smem; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = f->preferred_carveout; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *pi = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static CUresult func_set_attr(sim_func_t *f, CUfunction_attribute attrib, int value, int dev)
{
    sim_device_t *d = sim_dev(dev);
    switch ((int)attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (value < 0 || (d && value > d->model->smem_optin))
            return CUDA_ERROR_INVALID_VALUE;
        f->max_dyn_smem = value;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        if (value < -1 || value > 100)
            return CUDA_ERROR_INVALID_VALUE;
        f->preferred_carveout = value;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    sim_func_t *f;
    CUresult r = func_get(hfunc, &f);
    if (r != CUDA_SUCCESS)
        return r;
    sim_ctx_t *c = sim_ctx_current();
    return func_attr(pi, attrib, f, c ? c->dev : 0);
}

CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    sim_func_t *f;
    CUresult r = func_get(hfunc, &f);
    if (r != CUDA_SUCCESS)
        return r;
    sim_ctx_t *c = sim_ctx_current();
    return func_set_attr(f, attrib, value, c ? c->dev : 0);
}

CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    sim_func_t *f;
    CUresult r = func_get(hfunc, &f);
    if (r != CUDA_SUCCESS)
        return r;
    if ((int)config < 0 || (int)config > CU_FUNC_CACHE_PREFER_EQUAL)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* ---- occupancy ------------------------------------------------------------------------------- */
/* The occupancy calculator over the model's per-SM limits: threads (whole
 * warps), blocks, registers (65536 per SM, f->num_regs per thread) and
 * shared memory (the dynamic bytes plus the 1 KiB the hardware reserves per
 * block from sm_80 on). A block the function cannot launch (too many
 * threads, more dynamic shared memory than its attribute allows) fits 0
 * times, as on a GPU. */
#define SIM_REGS_PER_SM 65536

static int occ_blocks(const sim_func_t *f, const sim_model_t *m, int block, size_t dyn)
{
    if (block <= 0 || block > 1024 || dyn > (size_t)f->max_dyn_smem)
        return 0;
    int warps = (block + 31) / 32;
    int n = m->max_blocks_per_sm;
    int by_threads = m->max_threads_per_sm / (warps * 32);
    if (by_threads < n)
        n = by_threads;
    if (f->num_regs > 0) {
        int by_regs = SIM_REGS_PER_SM / (f->num_regs * warps * 32);
        if (by_regs < n)
            n = by_regs;
    }
    size_t per_block = dyn + (m->cc_major >= 8 ? 1024 : 0);
    if (per_block) {
        size_t by_smem = (size_t)m->smem_per_sm / per_block;
        if (by_smem < (size_t)n)
            n = (int)by_smem;
    }
    return n;
}

static CUresult occ_begin(CUfunction func, sim_func_t **f, const sim_model_t **m)
{
    CUresult r = func_get(func, f);
    if (r != CUDA_SUCCESS)
        return r;
    sim_ctx_t *c = sim_ctx_current();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    sim_device_t *d = sim_dev(c->dev);
    if (!d)
        return CUDA_ERROR_INVALID_CONTEXT;
    *m = d->model;
    return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func,
                                                              int blockSize, size_t dynamicSMemSize,
                                                              unsigned int flags)
{
    sim_func_t *f;
    const sim_model_t *m;
    CUresult r = occ_begin(func, &f, &m);
    if (r != CUDA_SUCCESS)
        return r;
    if (!numBlocks || flags > CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE || blockSize <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    *numBlocks = occ_blocks(f, m, blockSize, dynamicSMemSize);
    return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
                                                     int blockSize, size_t dynamicSMemSize)
{
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
                                                                dynamicSMemSize, 0);
}

CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func,
                                                 int numBlocks, int blockSize)
{
    sim_func_t *f;
    const sim_model_t *m;
    CUresult r = occ_begin(func, &f, &m);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t avail = 0;
    if (occ_blocks(f, m, blockSize, 0) >= numBlocks) {
        size_t reserve = m->cc_major >= 8 ? 1024 : 0;
        size_t share = (size_t)m->smem_per_sm / (size_t)numBlocks;
        avail = share > reserve ? share - reserve : 0;
        if (avail > (size_t)f->max_dyn_smem)
            avail = (size_t)f->max_dyn_smem;
    }
    *dynamicSmemSize = avail;
    return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize,
                                                   CUfunction func,
                                                   CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                   size_t dynamicSMemSize, int blockSizeLimit,
                                                   unsigned int flags)
{
    sim_func_t *f;
    const sim_model_t *m;
    CUresult r = occ_begin(func, &f, &m);
    if (r != CUDA_SUCCESS)
        return r;
    if (!minGridSize || !blockSize || blockSizeLimit < 0 ||
        flags > CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)
        return CUDA_ERROR_INVALID_VALUE;
    int limit = blockSizeLimit == 0 || blockSizeLimit > 1024 ? 1024 : blockSizeLimit;
    int best = 0, best_blocks = 0, best_threads = 0;
    for (int b = (limit + 31) / 32 * 32; b > 0; b -= 32) {
        int size = b > limit ? limit : b;
        size_t dyn = blockSizeToDynamicSMemSize ? blockSizeToDynamicSMemSize(size)
                                                : dynamicSMemSize;
        int n = occ_blocks(f, m, size, dyn);
        if (n * size > best_threads) {
            best_threads = n * size;
            best = size;
            best_blocks = n;
        }
    }
    *blockSize = best;
    *minGridSize = best_blocks * m->sms;
    return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
                                          CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                          size_t dynamicSMemSize, int blockSizeLimit)
{
    return cuOccupancyMaxPotentialBlockSizeWithFlags(minGridSize, blockSize, func,
                                                     blockSizeToDynamicSMemSize,
                                                     dynamicSMemSize, blockSizeLimit, 0);
}

/* Functions are loaded with their module: never lazily. */
CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction function)
{
    sim_func_t *f;
    CUresult r = func_get(function, &f);
    if (r != CUDA_SUCCESS)
        return r;
    if (!state)
        return CUDA_ERROR_INVALID_VALUE;
    *state = CU_FUNCTION_LOADING_STATE_LOADED;
    return CUDA_SUCCESS;
}

CUresult cuFuncLoad(CUfunction function)
{
    sim_func_t *f;
    return func_get(function, &f);
}

CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
    sim_func_t *f;
    CUresult r = func_get(hfunc, &f);
    if (r != CUDA_SUCCESS)
        return r;
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    *name = f->name;
    return CUDA_SUCCESS;
}

CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
    sim_func_t *f;
    CUresult r = func_get(hfunc, &f);
    if (r != CUDA_SUCCESS)
        return r;
    if (!hmod)
        return CUDA_ERROR_INVALID_VALUE;
    *hmod = (CUmodule)f->mod;
    return CUDA_SUCCESS;
}

static CUresult param_info(sim_func_t *f, size_t idx, size_t *off, size_t *size)
{
    if (!off && !size)
        return CUDA_ERROR_INVALID_VALUE;
    if (f->nparams < 0 || idx >= (size_t)f->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    if (off)
        *off = f->poff[idx];
    if (size)
        *size = f->plen[idx];
    return CUDA_SUCCESS;
}

CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
    sim_func_t *f;
    CUresult r = func_get(func, &f);
    if (r != CUDA_SUCCESS)
        return r;
    return param_info(f, paramIndex, paramOffset, paramSize);
}

CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
    sim_func_t *f;
    CUresult r = kernel_get(kernel, &f);
    if (r != CUDA_SUCCESS)
        return r;
    return param_info(f, paramIndex, paramOffset, paramSize);
}

CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
    sim_func_t *f;
    CUresult r = kernel_get(kernel, &f);
    if (r != CUDA_SUCCESS)
        return r;
    if (!sim_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    return func_attr(pi, attrib, f, dev);
}

CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
    sim_func_t *f;
    CUresult r = kernel_get(kernel, &f);
    if (r != CUDA_SUCCESS)
        return r;
    if (!sim_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    return func_set_attr(f, attrib, val, dev);
}

/* ---- launch ------------------------------------------------------------------------------------ */
static CUresult launch(sim_func_t *f, const unsigned grid[3], const unsigned block[3], unsigned smem,
                       CUstream hStream, void **kernelParams, void **extra)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    sim_ctx_t *cur = sim_ctx_current();
    if (cur != s->ctx)
        return CUDA_ERROR_INVALID_HANDLE; /* stream of another context */
    if (!kernelParams && extra)
        return CUDA_ERROR_INVALID_VALUE; /* `extra` argument packing is not supported */
    if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || grid[0] > 2147483647u || grid[1] > 65535 ||
        grid[2] > 65535)
        return CUDA_ERROR_INVALID_VALUE;
    if (block[0] == 0 || block[1] == 0 || block[2] == 0 || block[0] > 1024 || block[1] > 1024 ||
        block[2] > 64 || (unsigned long long)block[0] * block[1] * block[2] > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (smem > (unsigned)f->max_dyn_smem)
        return CUDA_ERROR_INVALID_VALUE;
    if (f->nparams > 0 && !kernelParams)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_module_runs_on(f->mod, s->ctx->dev))
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    if (sim_isolation && f->nparams < 0)
        return CUDA_ERROR_NOT_SUPPORTED; /* a device cannot read the caller's argument array */
    sim_device_t *d = sim_dev(s->ctx->dev);
    sim_op_t *op = sim_op_alloc(s);
    op->type = SIM_OP_KERNEL;
    op->u.k.fn = f;
    op->u.k.heap = NULL;
    simcuda_launch_t *l = &op->u.k.l;
    memset(l, 0, sizeof(*l));
    l->abi = SIMCUDA_TWIN_ABI;
    memcpy(l->grid, grid, sizeof(l->grid));
    memcpy(l->block, block, sizeof(l->block));
    l->shared_bytes = smem;
    l->device = d->phys;
    l->sm_count = d->model->sms;
    l->cc_major = d->model->cc_major;
    l->cc_minor = d->model->cc_minor;
    int sync = 0;
    if (f->nparams < 0) {
        /* Unknown layout: pass the caller's array and wait for the launch. */
        op->u.k.params = kernelParams;
        sync = 1;
    } else {
        int n = f->nparams;
        void **ptrs = op->pptr;
        unsigned char *buf = op->pbuf;
        if (n > SIM_INLINE_NPARAMS || f->psize > SIM_INLINE_PARAMS) {
            op->u.k.heap = malloc((size_t)n * sizeof(void *) + f->psize + 16);
            if (!op->u.k.heap) {
                free(op->u.k.heap);
                op->type = SIM_OP_NOP;
                sim_enqueue(s, op);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            ptrs = op->u.k.heap;
            buf = (unsigned char *)op->u.k.heap + ((size_t)n * sizeof(void *) + 15) / 16 * 16;
        }
        for (int i = 0; i < n; i++) {
            if (!kernelParams[i]) {
                free(op->u.k.heap);
                op->u.k.heap = NULL;
                op->type = SIM_OP_NOP;
                sim_enqueue(s, op);
                return CUDA_ERROR_INVALID_VALUE;
            }
            memcpy(buf + f->poff[i], kernelParams[i], f->plen[i]);
            ptrs[i] = buf + f->poff[i];
        }
        op->u.k.params = ptrs;
    }
    atomic_fetch_add(&f->mod->refs, 1); /* dropped when the launch has run */
    if (sync) {
        /* a launch failure is sticky and reported by the next call; a
         * capture's refusal is reported now */
        CUresult e = sim_run_sync(s, op);
        return e >= CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED &&
                       e <= CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
                   ? e
                   : CUDA_SUCCESS;
    }
    return sim_enqueue(s, op);
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra)
{
    sim_func_t *fn;
    CUresult r;
    /* A CUkernel is accepted in place of a CUfunction, as by the real driver. */
    if (f && sim_reg_has(f, SIM_H_KERNEL))
        r = kernel_get((CUkernel)f, &fn);
    else
        r = func_get(f, &fn);
    if (r != CUDA_SUCCESS)
        return r;
    unsigned g[3] = {gridDimX, gridDimY, gridDimZ}, b[3] = {blockDimX, blockDimY, blockDimZ};
    return launch(fn, g, b, sharedMemBytes, hStream, kernelParams, extra);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                             unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                             void **kernelParams, void **extra)
{
    return cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                          sharedMemBytes, hStream ? hStream : CU_STREAM_PER_THREAD, kernelParams,
                          extra);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
    if (!config)
        return CUDA_ERROR_INVALID_VALUE;
    sim_func_t *fn;
    CUresult r;
    /* A CUkernel is accepted in place of a CUfunction, as by the real driver. */
    if (f && sim_reg_has(f, SIM_H_KERNEL))
        r = kernel_get((CUkernel)f, &fn);
    else
        r = func_get(f, &fn);
    if (r != CUDA_SUCCESS)
        return r;
    if (config->numAttrs && !config->attrs)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned g[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
    unsigned b[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
    return launch(fn, g, b, config->sharedMemBytes, config->hStream, kernelParams, extra);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                               void **extra)
{
    if (!config)
        return CUDA_ERROR_INVALID_VALUE;
    CUlaunchConfig c = *config;
    if (!c.hStream)
        c.hStream = CU_STREAM_PER_THREAD;
    return cuLaunchKernelEx(&c, f, kernelParams, extra);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                   unsigned int gridDimZ, unsigned int blockDimX,
                                   unsigned int blockDimY, unsigned int blockDimZ,
                                   unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)
{
    return cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                          sharedMemBytes, hStream, kernelParams, NULL);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                        unsigned int gridDimZ, unsigned int blockDimX,
                                        unsigned int blockDimY, unsigned int blockDimZ,
                                        unsigned int sharedMemBytes, CUstream hStream,
                                        void **kernelParams)
{
    return cuLaunchKernel_ptsz(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                               sharedMemBytes, hStream, kernelParams, NULL);
}

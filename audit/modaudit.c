/* Run-time kernel audit (audit/modaudit.h): per-image audit records cached
 * by content, the owner registry (module/library handle -> record), the
 * lock-free-read set of flagged kernel handles, and the launch check with
 * the host call stack (libunwind, dlopen'ed RTLD_LOCAL so its _Unwind_*
 * exports never enter the process's global scope).
 */
#define UNW_LOCAL_ONLY
#include "audit/modaudit.h"

#include "audit/audit.h"
#include "fatbin/fatbin.h"
#include "shim/config.h"
#include "shim/log.h"
#include "shim/real.h"

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <libunwind.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

unsigned es_modaudit_live;
unsigned es_modaudit_flagged_owners;

/* ---- audit records ------------------------------------------------------- */

enum { ES_KF_FLOAT = 1, ES_KF_CAS = 2, ES_KF_UNKNOWN = 4 };

typedef struct es_kinfo {
    char *name;             /* mangled */
    char *pretty;           /* demangled on first report (or NULL) */
    unsigned forms;         /* es_audit_form bits */
    char where[96];         /* "sm_80 sm_90 ptx" */
    int reported;           /* first launch logged (atomic) */
} es_kinfo_t;

typedef struct es_img {
    struct es_img *next;
    uint64_t hash;
    size_t size;
    int nflag;
    es_kinfo_t **flag;      /* sorted by name */
} es_img_t;

typedef struct es_owner {
    const void *owner;
    const void *parent;     /* alias of (cuLibraryGetModule), or NULL */
    es_img_t *img;
} es_owner_t;

static es_img_t *es_imgs;            /* under es_state_lock; never freed */
static es_owner_t *es_owners;        /* under es_state_lock; only owners with flags */
static size_t es_nowners, es_capowners;

/* ---- the flagged-handle set ------------------------------------------------ */

/* Replaced tables are kept (a lookup may still read one). */
es_fset_t *es_modaudit_set;

static es_fent_t *es_set_find(es_fset_t *t, uintptr_t k)
{
    size_t m = t->cap - 1, i = es_modaudit_hash(k) & m;
    for (size_t n = 0; n < t->cap; n++, i = (i + 1) & m) {
        uintptr_t key = __atomic_load_n(&t->e[i].key, __ATOMIC_ACQUIRE);
        if (key == k)
            return &t->e[i];
        if (key == 0)
            return NULL;
    }
    return NULL;
}

/* Under es_state_lock. Returns 0 or -ENOMEM. */
static int es_set_put(uintptr_t k, es_kinfo_t *info, const void *owner)
{
    es_fset_t *t = es_modaudit_set;
    if (t) {
        es_fent_t *e = es_set_find(t, k);
        if (e) {
            __atomic_store_n(&e->info, info, __ATOMIC_RELEASE);
            __atomic_store_n(&e->owner, owner, __ATOMIC_RELAXED);
            return 0;
        }
    }
    if (!t || (t->used + 1) * 2 > t->cap) {
        size_t live = 0;
        for (size_t i = 0; t && i < t->cap; i++)
            live += t->e[i].key > ES_TOMB;
        size_t cap = 64;
        while ((live + 1) * 4 > cap)
            cap *= 2;
        es_fset_t *n = calloc(1, sizeof(*n) + cap * sizeof(n->e[0]));
        if (!n)
            return -ENOMEM;
        n->cap = cap;
        n->prev = t;
        for (size_t i = 0; t && i < t->cap; i++) {
            if (t->e[i].key <= ES_TOMB)
                continue;
            size_t j = es_modaudit_hash(t->e[i].key) & (cap - 1);
            while (n->e[j].key)
                j = (j + 1) & (cap - 1);
            n->e[j] = t->e[i];
            n->used++;
        }
        __atomic_store_n(&es_modaudit_set, n, __ATOMIC_RELEASE);
        t = n; /* the old table stays allocated: lookups may be reading it */
    }
    size_t m = t->cap - 1, i = es_modaudit_hash(k) & m;
    while (t->e[i].key > ES_TOMB)
        i = (i + 1) & m;
    if (t->e[i].key == 0)
        t->used++;
    /* a reused tombstone may still be read by a lookup that matched its old
     * key: atomic stores (what it reads is valid either way) */
    __atomic_store_n(&t->e[i].info, info, __ATOMIC_RELAXED);
    __atomic_store_n(&t->e[i].owner, owner, __ATOMIC_RELAXED);
    __atomic_store_n(&t->e[i].key, k, __ATOMIC_RELEASE);
    __atomic_fetch_add(&es_modaudit_live, 1, __ATOMIC_RELEASE);
    __atomic_fetch_add(&es_launch_gate, 1, __ATOMIC_RELEASE);
    return 0;
}

/* Under es_state_lock: removes the entries of owner. */
static void es_set_drop_owner(const void *owner)
{
    es_fset_t *t = es_modaudit_set;
    for (size_t i = 0; t && i < t->cap; i++)
        if (t->e[i].key > ES_TOMB && t->e[i].owner == owner) {
            __atomic_store_n(&t->e[i].key, ES_TOMB, __ATOMIC_RELEASE);
            __atomic_fetch_sub(&es_modaudit_live, 1, __ATOMIC_RELEASE);
            __atomic_fetch_sub(&es_launch_gate, 1, __ATOMIC_RELEASE);
        }
}

/* ---- auditing an image ----------------------------------------------------- */

typedef struct es_krec {
    char *name;
    unsigned flags, forms;
    unsigned arch;
    int is_ptx;
    char where[96];         /* merged: where it is float-atomic */
} es_krec_t;

typedef struct es_collect {
    es_krec_t *k;
    size_t n, cap;
    int unreadable;
    int oom;
} es_collect_t;

static void es_where_add(char *where, size_t len, unsigned arch, int is_ptx)
{
    char tok[24];
    snprintf(tok, sizeof(tok), is_ptx ? "ptx_%u" : "sm_%u", arch);
    /* already listed? */
    size_t tl = strlen(tok);
    for (const char *p = where; (p = strstr(p, tok)) != NULL; p += tl)
        if ((p == where || p[-1] == ' ') && (p[tl] == ' ' || p[tl] == '\0'))
            return;
    size_t cur = strlen(where);
    if (cur + tl + 2 < len)
        snprintf(where + cur, len - cur, "%s%s", cur ? " " : "", tok);
}

static int es_collect_cb(const es_audit_kernel_t *k, void *arg)
{
    es_collect_t *c = arg;
    if (k->verdict == ES_AUDIT_UNREADABLE || !k->name) {
        c->unreadable++;
        return 0;
    }
    unsigned f = k->verdict == ES_AUDIT_FLOAT_ATOMIC ? ES_KF_FLOAT
               : k->verdict == ES_AUDIT_CAS_LOOP ? ES_KF_CAS
               : k->verdict == ES_AUDIT_UNKNOWN_ARCH ? ES_KF_UNKNOWN : 0;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        es_krec_t *nk = realloc(c->k, cap * sizeof(*nk));
        if (!nk) {
            c->oom = 1;
            return -ENOMEM;
        }
        c->k = nk;
        c->cap = cap;
    }
    es_krec_t *r = &c->k[c->n];
    r->name = strdup(k->name);
    if (!r->name) {
        c->oom = 1;
        return -ENOMEM;
    }
    r->flags = f;
    r->arch = k->arch;
    r->is_ptx = k->is_ptx;
    r->forms = f == ES_KF_FLOAT ? k->forms : 0;
    r->where[0] = '\0';
    if (f == ES_KF_FLOAT)
        es_where_add(r->where, sizeof(r->where), k->arch, k->is_ptx);
    c->n++;
    return 0;
}

static int es_krec_cmp(const void *a, const void *b)
{
    return strcmp(((const es_krec_t *)a)->name, ((const es_krec_t *)b)->name);
}

static int es_kinfo_cmp(const void *a, const void *b)
{
    return strcmp((*(es_kinfo_t *const *)a)->name, (*(es_kinfo_t *const *)b)->name);
}

static uint64_t es_content_hash(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

static const char *es_forms_text(unsigned forms, char *buf, size_t len)
{
    static const char *const names[] = { "red", "atom", "multimem-load-reduce", "bulk-reduce",
                                         "tensor-reduce", "multimem-red", "shared" };
    size_t k = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (forms & (1u << i)) {
            int w = snprintf(buf + k, len - k, "%s%s", k ? "," : "", names[i]);
            if (w < 0 || (size_t)w >= len - k)
                break;
            k += (size_t)w;
        }
    if (!k)
        snprintf(buf, len, "add");
    return buf;
}

/* Audits an image of `size` bytes (known) whose content hash is h; returns
 * the record (cached) or NULL when it could not be read (logged). */
static es_img_t *es_audit_new(const void *image, size_t size, uint64_t h, const char *api)
{
    es_collect_t c = { 0 };
    es_img_t *img = NULL;
    int rc = es_audit_image(image, size, es_collect_cb, &c);
    if (rc < 0 && !c.oom) {
        ES_WARN("audit: %s: module image not readable (%s): its kernels are not audited",
                api, strerror(-rc));
        goto out;
    }
    if (c.oom) {
        ES_WARN("audit: %s: out of memory while auditing: kernels not audited", api);
        goto out;
    }
    if (c.unreadable)
        ES_WARN("audit: %s: %d entr%s of the module compressed in a form not read: "
                "their kernels are not audited", api, c.unreadable,
                c.unreadable == 1 ? "y" : "ies");
    if (c.n > 1) /* (c.k is NULL when no kernel was read) */
        qsort(c.k, c.n, sizeof(c.k[0]), es_krec_cmp);
    /* merge the entries of each name (one per architecture / PTX) */
    size_t m = 0;
    for (size_t i = 0; i < c.n; i++) {
        if (m && strcmp(c.k[m - 1].name, c.k[i].name) == 0) {
            es_krec_t *d = &c.k[m - 1];
            d->flags |= c.k[i].flags;
            d->forms |= c.k[i].forms;
            if (c.k[i].flags & ES_KF_FLOAT)
                es_where_add(d->where, sizeof(d->where), c.k[i].arch, c.k[i].is_ptx);
            free(c.k[i].name);
        } else {
            c.k[m++] = c.k[i];
        }
    }
    c.n = m;
    img = calloc(1, sizeof(*img));
    if (!img)
        goto out;
    img->hash = h;
    img->size = size;
    int nflag = 0;
    for (size_t i = 0; i < c.n; i++)
        nflag += (c.k[i].flags & ES_KF_FLOAT) != 0;
    if (nflag && !(img->flag = calloc((size_t)nflag, sizeof(img->flag[0])))) {
        free(img);
        img = NULL;
        goto out;
    }
    char fb[128];
    for (size_t i = 0; i < c.n; i++) {
        es_krec_t *k = &c.k[i];
        if (k->flags & ES_KF_FLOAT) {
            es_kinfo_t *ki = calloc(1, sizeof(*ki));
            if (!ki)
                continue;
            ki->name = k->name;
            k->name = NULL;
            ki->forms = k->forms;
            snprintf(ki->where, sizeof(ki->where), "%s", k->where);
            img->flag[img->nflag++] = ki;
            ES_INFO("audit: %s: kernel %s: float-atomic (%s; %s): flagged", api, ki->name,
                    es_forms_text(ki->forms, fb, sizeof(fb)), ki->where);
        } else if (k->flags & ES_KF_CAS) {
            ES_INFO("audit: %s: kernel %s: compare-and-swap loop (maybe an emulated float "
                    "atomic): not flagged", api, k->name);
        } else if (k->flags & ES_KF_UNKNOWN) {
            ES_INFO("audit: %s: kernel %s: SASS of an architecture without an opcode table: "
                    "not audited there", api, k->name);
        }
    }
    if (img->nflag > 1) /* (flag is NULL when nothing was flagged) */
        qsort(img->flag, (size_t)img->nflag, sizeof(img->flag[0]), es_kinfo_cmp);
    ES_DEBUG("audit: %s: %zu kernels, %d flagged", api, c.n, img->nflag);
out:
    for (size_t i = 0; i < c.n; i++)
        free(c.k[i].name);
    free(c.k);
    return img;
}

/* ---- registrations ---------------------------------------------------------- */

static es_owner_t *es_owner_find(const void *owner)
{
    for (size_t i = 0; i < es_nowners; i++)
        if (es_owners[i].owner == owner)
            return &es_owners[i];
    return NULL;
}

/* Under es_state_lock. */
static void es_owner_set(const void *owner, const void *parent, es_img_t *img)
{
    es_owner_t *o = es_owner_find(owner);
    if (o) {
        /* a handle value reused: forget what was derived from the old one */
        es_set_drop_owner(owner);
        o->parent = parent;
        o->img = img;
        return;
    }
    if (es_nowners == es_capowners) {
        size_t cap = es_capowners ? es_capowners * 2 : 16;
        es_owner_t *n = realloc(es_owners, cap * sizeof(*n));
        if (!n) {
            ES_WARN("audit: out of memory: a module's flagged kernels are not tracked");
            return;
        }
        es_owners = n;
        es_capowners = cap;
    }
    es_owners[es_nowners++] = (es_owner_t){ owner, parent, img };
    __atomic_store_n(&es_modaudit_flagged_owners, (unsigned)es_nowners, __ATOMIC_RELEASE);
}

/* Under es_state_lock: removes owner's record and its set entries. */
static void es_owner_del(const void *owner)
{
    for (size_t i = 0; i < es_nowners;) {
        if (es_owners[i].owner == owner || es_owners[i].parent == owner) {
            es_set_drop_owner(es_owners[i].owner);
            es_owners[i] = es_owners[--es_nowners];
        } else {
            i++;
        }
    }
    __atomic_store_n(&es_modaudit_flagged_owners, (unsigned)es_nowners, __ATOMIC_RELEASE);
}

void es_modaudit_loaded(const void *owner, const void *image, size_t size, const char *api)
{
    size_t sz = 0;
    const void *body = image;
    if (!owner || !image)
        return;
    int kind = es_image_probe(image, size, &sz);
    if (kind < 0) {
        ES_WARN("audit: %s: module image not readable (%s): its kernels are not audited", api,
                strerror(-kind));
        goto forget;
    }
    if (kind == ES_IMAGE_WRAPPER)
        memcpy(&body, (const unsigned char *)image + 8, sizeof(body)); /* its fatbin */
    uint64_t h = es_content_hash(body, sz);

    pthread_mutex_lock(&es_state_lock);
    es_img_t *img = es_imgs;
    while (img && !(img->hash == h && img->size == sz))
        img = img->next;
    pthread_mutex_unlock(&es_state_lock);

    if (!img) {
        img = es_audit_new(image, kind == ES_IMAGE_WRAPPER ? SIZE_MAX : sz, h, api);
        if (!img)
            goto forget;
        pthread_mutex_lock(&es_state_lock);
        es_img_t *dup = es_imgs;
        while (dup && !(dup->hash == h && dup->size == sz))
            dup = dup->next;
        if (dup) {
            /* audited twice concurrently: keep the first (the second leaks, rare) */
            img = dup;
        } else {
            img->next = es_imgs;
            es_imgs = img;
        }
        pthread_mutex_unlock(&es_state_lock);
    } else {
        ES_DEBUG("audit: %s: image already audited (%d flagged)", api, img->nflag);
    }
    pthread_mutex_lock(&es_state_lock);
    if (img->nflag)
        es_owner_set(owner, NULL, img);
    else if (es_owner_find(owner))
        es_owner_del(owner);
    pthread_mutex_unlock(&es_state_lock);
    return;
forget:
    /* a handle value reused by a module that is not audited */
    pthread_mutex_lock(&es_state_lock);
    if (es_owner_find(owner))
        es_owner_del(owner);
    pthread_mutex_unlock(&es_state_lock);
}

void es_modaudit_loaded_file(const void *owner, const char *path, const char *api)
{
    char *buf = NULL;
    int fd = -1;
    struct stat st;
    if (!owner || !path)
        return;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0) {
        ES_WARN("audit: %s(%s): cannot read the file again: its kernels are not audited", api,
                path);
        goto out;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf)
        goto out;
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    es_modaudit_loaded(owner, buf, got + 1, api);
out:
    if (fd >= 0)
        close(fd);
    free(buf);
}

void es_modaudit_unloaded(const void *owner)
{
    if (!__atomic_load_n(&es_modaudit_flagged_owners, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&es_state_lock);
    es_owner_del(owner);
    pthread_mutex_unlock(&es_state_lock);
}

void es_modaudit_alias(const void *alias, const void *owner)
{
    if (!alias || !__atomic_load_n(&es_modaudit_flagged_owners, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&es_state_lock);
    es_owner_t *o = es_owner_find(owner);
    if (o && o->owner != alias)
        es_owner_set(alias, owner, o->img);
    pthread_mutex_unlock(&es_state_lock);
}

void es_modaudit_got(const void *handle, const void *owner, const char *name)
{
    if ((uintptr_t)handle <= ES_TOMB || !name ||
        !__atomic_load_n(&es_modaudit_flagged_owners, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&es_state_lock);
    es_owner_t *o = es_owner_find(owner);
    if (o) {
        es_kinfo_t key = { .name = (char *)name }, *kp = &key;
        es_kinfo_t **hit = bsearch(&kp, o->img->flag, (size_t)o->img->nflag,
                                   sizeof(o->img->flag[0]), es_kinfo_cmp);
        if (hit && es_set_put((uintptr_t)handle, *hit, o->owner) < 0)
            ES_WARN("audit: out of memory: kernel %s is not tracked", name);
        else if (hit)
            ES_DEBUG("audit: handle %p of flagged kernel %s recorded", handle, name);
    }
    pthread_mutex_unlock(&es_state_lock);
}

void es_modaudit_derived(const void *handle, const void *parent)
{
    if ((uintptr_t)handle <= ES_TOMB || !parent ||
        !__atomic_load_n(&es_modaudit_live, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&es_state_lock);
    es_fent_t *e = es_modaudit_set ? es_set_find(es_modaudit_set, (uintptr_t)parent) : NULL;
    if (e && handle != parent && es_set_put((uintptr_t)handle, e->info, e->owner) < 0)
        ES_WARN("audit: out of memory: kernel %s is not tracked", e->info->name);
    pthread_mutex_unlock(&es_state_lock);
}

/* ---- host call stack -------------------------------------------------------- */

typedef int (*es_unw_getcontext_fn)(unw_context_t *);
typedef int (*es_unw_init_fn)(unw_cursor_t *, unw_context_t *);
typedef int (*es_unw_step_fn)(unw_cursor_t *);
typedef int (*es_unw_reg_fn)(unw_cursor_t *, unw_regnum_t, unw_word_t *);
typedef int (*es_unw_name_fn)(unw_cursor_t *, char *, size_t, unw_word_t *);

static struct {
    pthread_once_t once;
    int ok;
    es_unw_getcontext_fn getcontext;
    es_unw_init_fn init;
    es_unw_step_fn step;
    es_unw_reg_fn reg;
    es_unw_name_fn name;
} es_unw = { .once = PTHREAD_ONCE_INIT };

static void *es_sym(void *h, const char *n)
{
    return dlsym(h, n); /* the shim's dlsym: unwrapped names go to the real one */
}

static void es_unw_load(void)
{
#if defined(__x86_64__)
    /* RTLD_LOCAL: libunwind exports _Unwind_* and backtrace, which must not
     * interpose libgcc_s's / glibc's for the application. */
    void *h = dlopen("libunwind.so.8", RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
        ES_DEBUG("audit: libunwind.so.8 not loadable: stacks from backtrace()");
        return;
    }
    void *p[5] = { es_sym(h, "_Ux86_64_getcontext"), es_sym(h, "_ULx86_64_init_local"),
                   es_sym(h, "_ULx86_64_step"), es_sym(h, "_ULx86_64_get_reg"),
                   es_sym(h, "_ULx86_64_get_proc_name") };
    for (int i = 0; i < 5; i++)
        if (!p[i])
            return;
    memcpy(&es_unw.getcontext, &p[0], sizeof(p[0]));
    memcpy(&es_unw.init, &p[1], sizeof(p[1]));
    memcpy(&es_unw.step, &p[2], sizeof(p[2]));
    memcpy(&es_unw.reg, &p[3], sizeof(p[3]));
    memcpy(&es_unw.name, &p[4], sizeof(p[4]));
    es_unw.ok = 1;
#endif
}

static int es_in_self(const void *ip)
{
    static const char self = 0;
    Dl_info a, b;
    return dladdr(ip, &a) && dladdr(&self, &b) && a.dli_fbase == b.dli_fbase;
}

/* Appends one frame line; returns 1 when written. */
static int es_frame_line(char *buf, size_t len, size_t *k, int idx, uintptr_t ip,
                         const char *uname, uintptr_t uoff)
{
    Dl_info d;
    const char *lib = "?", *fn = uname;
    uintptr_t off = uoff;
    /* ip - 1: a return address may point past the call's function */
    if (dladdr((void *)(ip - 1), &d)) {
        lib = d.dli_fname && *d.dli_fname ? d.dli_fname : "?";
        if (!fn && d.dli_sname) {
            fn = d.dli_sname;
            off = ip - (uintptr_t)d.dli_saddr;
        }
        if (!fn)
            off = ip - (uintptr_t)d.dli_fbase;
    }
    int w = fn ? snprintf(buf + *k, len - *k, "\n    #%d %s+0x%lx (%s)", idx, fn,
                          (unsigned long)off, lib)
               : snprintf(buf + *k, len - *k, "\n    #%d ?? %s+0x%lx", idx, lib,
                          (unsigned long)off);
    if (w < 0 || (size_t)w >= len - *k)
        return 0;
    *k += (size_t)w;
    return 1;
}

int es_modaudit_stack(char *buf, size_t len, int max_frames)
{
    size_t k = 0;
    int n = 0;
    if (!buf || !len)
        return 0;
    buf[0] = '\0';
    pthread_once(&es_unw.once, es_unw_load);
    if (es_unw.ok) {
        unw_context_t uc;
        unw_cursor_t cur;
        if (es_unw.getcontext(&uc) != 0 || es_unw.init(&cur, &uc) != 0)
            goto fallback;
        do {
            unw_word_t ip = 0, off = 0;
            char name[256];
            if (es_unw.reg(&cur, UNW_REG_IP, &ip) != 0 || !ip)
                break;
            if (es_in_self((void *)(uintptr_t)(ip - 1)))
                continue;
            int named = es_unw.name(&cur, name, sizeof(name), &off) == 0;
            if (!es_frame_line(buf, len, &k, n, (uintptr_t)ip, named ? name : NULL,
                               (uintptr_t)off))
                break;
            n++;
        } while (n < max_frames && es_unw.step(&cur) > 0);
        return n;
    }
fallback:;
    void *ips[64];
    int got = backtrace(ips, 64);
    for (int i = 0; i < got && n < max_frames; i++) {
        uintptr_t ip = (uintptr_t)ips[i];
        if (es_in_self((void *)(ip - 1)))
            continue;
        if (!es_frame_line(buf, len, &k, n, ip, NULL, 0))
            break;
        n++;
    }
    return n;
}

/* ---- the launch check --------------------------------------------------------- */

typedef char *(*es_demangle_fn)(const char *, char *, size_t *, int *);

static const char *es_pretty(es_kinfo_t *ki)
{
    char *p = __atomic_load_n(&ki->pretty, __ATOMIC_ACQUIRE);
    if (p)
        return p;
    if (strncmp(ki->name, "_Z", 2) != 0)
        return ki->name;
    /* the C++ runtime's demangler, when the process has one */
    void *f = dlsym(RTLD_DEFAULT, "__cxa_demangle");
    if (!f) {
        void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
        f = h ? dlsym(h, "__cxa_demangle") : NULL;
    }
    if (!f)
        return ki->name;
    es_demangle_fn dm;
    memcpy(&dm, &f, sizeof(dm));
    int st = -1;
    char *d = dm(ki->name, NULL, NULL, &st);
    if (st != 0 || !d) {
        free(d);
        return ki->name;
    }
    char *expect = NULL;
    if (!__atomic_compare_exchange_n(&ki->pretty, &expect, d, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        free(d);
        return expect;
    }
    return d;
}

/* A flagged kernel's launch: out of line, so the lookup stays small. */
__attribute__((noinline, cold)) static int es_modaudit_report(es_fent_t *e, const char *api)
{
    es_kinfo_t *ki = __atomic_load_n(&e->info, __ATOMIC_ACQUIRE);
    int strict = es_cfg.audit == ES_AUDIT_MODE_STRICT;
    if (__atomic_exchange_n(&ki->reported, 1, __ATOMIC_ACQ_REL)) {
        if (strict)
            ES_DEBUG("audit: %s of kernel %s refused (EASYSCALE_AUDIT=strict)", api, ki->name);
        return strict ? -EPERM : 0;
    }
    char stack[2600], forms[128];
    int nf = es_modaudit_stack(stack, sizeof(stack), 24);
    const char *nm = es_pretty(ki);
    es_forms_text(ki->forms, forms, sizeof(forms));
    if (strict)
        ES_ERROR("audit: %s refused (EASYSCALE_AUDIT=strict, CUDA_ERROR_NOT_SUPPORTED): kernel "
                 "%s uses float atomics (%s; %s): its results depend on the order the atomic "
                 "adds land in; host stack:%s",
                 api, nm, forms, ki->where, nf ? stack : " (unavailable)");
    else
        ES_WARN("audit: %s of kernel %s, which uses float atomics (%s; %s): its results "
                "depend on the order the atomic adds land in (logged once); host stack:%s",
                api, nm, forms, ki->where, nf ? stack : " (unavailable)");
    return strict ? -EPERM : 0;
}

int es_modaudit_launch(const void *f, const char *api)
{
    es_fset_t *t = __atomic_load_n(&es_modaudit_set, __ATOMIC_ACQUIRE);
    if (!f || !t)
        return 0;
    size_t m = t->cap - 1, i = es_modaudit_hash((uintptr_t)f) & m;
    for (size_t n = 0; n < t->cap; n++, i = (i + 1) & m) {
        uintptr_t key = __atomic_load_n(&t->e[i].key, __ATOMIC_ACQUIRE);
        if (key == (uintptr_t)f)
            return es_modaudit_report(&t->e[i], api);
        if (key == 0)
            break;
    }
    return 0;
}

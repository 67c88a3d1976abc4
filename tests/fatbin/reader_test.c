/* Unit tests for fatbin/fatbin.c: fatbins, cubins, PTX and host objects
 * compiled by nvcc at build time (tests/fatbin/module.mk, $ES_BUILD/tests/audit/),
 * every compression mode nvcc writes, the runtime wrapper, and corrupt,
 * truncated and randomly mutated images (errors, never crashes).
 *
 * Format facts used here are in docs/VENDOR-FACTS.md, "Device code inside
 * host binaries": container magic 0xBA55ED50 with a 16-byte header; entry
 * header size at +4, payload size at +8, arch at +28, flags at +40 (0x2000
 * older compression, 0x8000 zstd), decompressed size at +56. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <elf.h>

#include "fatbin/fatbin.h"
#include "tests/harness.h"

/* ------------------------------------------------------------ helpers -- */

typedef struct blob {
    unsigned char *p;
    size_t n;
} blob_t;

static blob_t load(const char *rel)
{
    const char *b = getenv("ES_BUILD");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/audit/%s", b && *b ? b : "build", rel);
    blob_t r = { NULL, 0 };
    r.p = es_read_file(path, &r.n);
    if (!r.p)
        fail_msg("cannot read %s (built by tests/fatbin/module.mk)", path);
    return r;
}

#define MAX_ENT 16
typedef struct collect {
    int n;
    int kind[MAX_ENT];
    unsigned arch[MAX_ENT];
    uint64_t flags[MAX_ENT];
    int unreadable[MAX_ENT];
    unsigned char *data[MAX_ENT];
    size_t size[MAX_ENT];
} collect_t;

static int collect_cb(const es_fatbin_entry_t *e, void *arg)
{
    collect_t *c = arg;
    if (c->n >= MAX_ENT)
        return -E2BIG;
    int i = c->n++;
    c->kind[i] = e->kind;
    c->arch[i] = e->arch;
    c->flags[i] = e->flags;
    c->unreadable[i] = e->unreadable;
    c->size[i] = e->size;
    c->data[i] = NULL;
    if (e->data) {
        c->data[i] = malloc(e->size ? e->size : 1);
        memcpy(c->data[i], e->data, e->size);
    }
    return 0;
}

static void collect_free(collect_t *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->data[i]);
    c->n = 0;
}

#define MAX_K 16
typedef struct names {
    int n;
    char name[MAX_K][128];
} names_t;

static int name_cb(const char *name, const void *code, size_t size, void *arg)
{
    names_t *k = arg;
    assert_non_null(code);
    assert_true(size > 0);
    if (k->n < MAX_K)
        snprintf(k->name[k->n++], 128, "%s", name);
    return 0;
}

static int has_name(const names_t *k, const char *n)
{
    for (int i = 0; i < k->n; i++)
        if (strcmp(k->name[i], n) == 0)
            return 1;
    return 0;
}

static int count_cb(const es_fatbin_entry_t *e, void *arg)
{
    (void)e;
    (*(int *)arg)++;
    return 0;
}

static int nop_kcb(const char *n, const void *c, size_t s, void *a)
{
    (void)n; (void)c; (void)s;
    (*(int *)a)++;
    return 0;
}

static int deep_pfunc(const char *name, const char *code, size_t size, int is_entry, void *arg)
{
    (void)name; (void)code; (void)size; (void)is_entry;
    (*(int *)arg)++;
    return 0;
}

static int deep_func(const char *name, int is_entry, void *arg)
{
    (void)name; (void)is_entry;
    (*(int *)arg)++;
    return 0;
}

static int deep_call(const char *a, const char *b, void *arg)
{
    (void)a; (void)b;
    (*(int *)arg)++;
    return 0;
}

/* Walks everything reachable from an image: entries, and the kernels of
 * each readable entry. Returns the first error. */
static int deep_entry(const es_fatbin_entry_t *e, void *arg)
{
    int n = 0, rc = 0;
    (void)arg;
    if (!e->data)
        return 0;
    if (e->kind == ES_ENTRY_CUBIN) {
        rc = es_cubin_kernels(e->data, e->size, nop_kcb, &n);
        int rc2 = es_cubin_callgraph(e->data, e->size, deep_func, deep_call, &n);
        if (rc == 0)
            rc = rc2;
    }
    else if (e->kind == ES_ENTRY_PTX)
        rc = es_ptx_functions(e->data, e->size, deep_pfunc, &n);
    return rc;
}

static int deep_section(const char *s, const void *d, size_t n, void *arg)
{
    (void)s;
    return es_fatbin_walk(d, n, deep_entry, arg);
}

static int deep_walk(const void *p, size_t n)
{
    size_t sz;
    int kind = es_image_probe(p, n, &sz);
    if (kind > 0) {
        if (sz > n)
            return -EFAULT;   /* a probe must never claim bytes beyond avail */
        return es_fatbin_walk(p, n, deep_entry, NULL);
    }
    int rc = es_host_elf_fatbins(p, n, deep_section, NULL);
    return rc;
}

/* -------------------------------------------------------------- tests -- */

static void test_null_args(void **state)
{
    (void)state;
    size_t sz;
    int n = 0;
    assert_int_equal(es_image_probe(NULL, 100, &sz), -EINVAL);
    assert_int_equal(es_fatbin_walk(NULL, 100, count_cb, &n), -EINVAL);
    assert_int_equal(es_fatbin_walk("x", 1, NULL, &n), -EINVAL);
    assert_int_equal(es_cubin_kernels(NULL, 10, nop_kcb, &n), -EINVAL);
    assert_int_equal(es_ptx_kernels(NULL, 10, nop_kcb, &n), -EINVAL);
    assert_int_equal(es_host_elf_fatbins(NULL, 10, NULL, NULL), -EINVAL);
    static const char junk[] = "this is not device code at all";
    assert_int_equal(es_image_probe(junk, sizeof junk, &sz), -EINVAL);
    assert_int_equal(es_fatbin_walk(junk, sizeof junk, count_cb, &n), -EINVAL);
    assert_int_equal(n, 0);
}

/* A 64-bit little-endian EM_CUDA ELF header with the given section table
 * fields, written at p. */
static void put_cuda_ehdr(unsigned char *p, uint64_t shoff, uint16_t shnum, uint16_t shentsize)
{
    Elf64_Ehdr eh = {0};
    memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_ident[EI_VERSION] = EV_CURRENT;
    eh.e_type = ET_EXEC;
    eh.e_machine = 190;   /* EM_CUDA */
    eh.e_version = EV_CURRENT;
    eh.e_ehsize = sizeof eh;
    eh.e_shoff = shoff;
    eh.e_shnum = shnum;
    eh.e_shentsize = shentsize;
    memcpy(p, &eh, sizeof eh);
}

/* Hand-made ELF headers whose table fields disagree with each other: each
 * is an error, read from an exactly-sized buffer (the sanitizer builds
 * catch an over-read; the first case read 8 bytes past a 65-byte image
 * before e_shentsize was checked with e_shnum 0). */
static void test_elf_header_fields(void **state)
{
    (void)state;
    static const struct {
        const char *what;
        uint64_t shoff;
        uint16_t shnum, shentsize;
        size_t extra;   /* bytes after the 64-byte header */
    } cases[] = {
        { "extended section count with a 1-byte entry size", 64, 0, 1, 1 },
        { "section count without a table", 0, 5, 64, 0 },
        { "section table past the end", 64, 2, 64, 64 },
        { "entry size not the class's", 64, 1, 40, 64 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = sizeof(Elf64_Ehdr) + cases[i].extra;
        unsigned char *p = calloc(1, n);
        put_cuda_ehdr(p, cases[i].shoff, cases[i].shnum, cases[i].shentsize);
        int n_cb = 0;
        int rc = es_cubin_kernels(p, n, nop_kcb, &n_cb);
        if (rc != -EBADMSG)
            fail_msg("%s: es_cubin_kernels gave %d, expected -EBADMSG", cases[i].what, rc);
        size_t sz;
        rc = es_image_probe(p, n, &sz);
        if (rc != -EBADMSG)
            fail_msg("%s: es_image_probe gave %d, expected -EBADMSG", cases[i].what, rc);
        assert_int_equal(es_host_elf_fatbins(p, n, deep_section, NULL), -EBADMSG);
        free(p);
    }
    /* control: the same header with no sections at all is a valid, empty cubin */
    unsigned char *p = calloc(1, sizeof(Elf64_Ehdr));
    put_cuda_ehdr(p, 0, 0, 0);
    int n_cb = 0;
    assert_int_equal(es_cubin_kernels(p, sizeof(Elf64_Ehdr), nop_kcb, &n_cb), 0);
    assert_int_equal(n_cb, 0);
    free(p);
}

static void test_probe_kinds(void **state)
{
    (void)state;
    blob_t fb = load("fb_default.fatbin"), cu = load("fb_sm90.cubin"), px = load("fb.ptx");
    size_t sz = 0;
    assert_int_equal(es_image_probe(fb.p, fb.n, &sz), ES_IMAGE_FATBIN);
    assert_int_equal(sz, fb.n);
    /* unknown size (cuModuleLoadData): the headers alone give it */
    sz = 0;
    assert_int_equal(es_image_probe(fb.p, SIZE_MAX, &sz), ES_IMAGE_FATBIN);
    assert_int_equal(sz, fb.n);
    sz = 0;
    assert_int_equal(es_image_probe(cu.p, cu.n, &sz), ES_IMAGE_CUBIN);
    assert_int_equal(sz, cu.n);
    sz = 0;
    assert_int_equal(es_image_probe(cu.p, SIZE_MAX, &sz), ES_IMAGE_CUBIN);
    assert_int_equal(sz, cu.n);
    /* every cubin built here, relocatable ones too (they have sections that
     * claim no file bytes) */
    static const char *const cubins[] = { "audit_rdc_sm90.cubin" };
    for (size_t i = 0; i < sizeof cubins / sizeof cubins[0]; i++) {
        blob_t c = load(cubins[i]);
        sz = 0;
        assert_int_equal(es_image_probe(c.p, SIZE_MAX, &sz), ES_IMAGE_CUBIN);
        assert_int_equal(sz, c.n);
        free(c.p);
    }
    sz = 0;
    assert_int_equal(es_image_probe(px.p, SIZE_MAX, &sz), ES_IMAGE_PTX);
    assert_int_equal(sz, strlen((char *)px.p));
    free(fb.p); free(cu.p); free(px.p);
}

/* nvcc's default: cubins stored plain, PTX zstd-compressed (flag 0x8000). */
static void test_walk_default(void **state)
{
    (void)state;
    blob_t fb = load("fb_default.fatbin");
    collect_t c = {0};
    assert_int_equal(es_fatbin_walk(fb.p, fb.n, collect_cb, &c), 0);
    assert_int_equal(c.n, 3);
    int cubins = 0, ptx = 0;
    for (int i = 0; i < c.n; i++) {
        assert_int_equal(c.unreadable[i], 0);
        assert_non_null(c.data[i]);
        if (c.kind[i] == ES_ENTRY_CUBIN) {
            cubins++;
            assert_true(c.arch[i] == 80 || c.arch[i] == 90);
            names_t k = {0};
            assert_int_equal(es_cubin_kernels(c.data[i], c.size[i], name_cb, &k), 0);
            assert_int_equal(k.n, 3);
            assert_true(has_name(&k, "_Z15es_fb_add_floatPff"));
            assert_true(has_name(&k, "_Z13es_fb_add_intPii"));
            assert_true(has_name(&k, "es_fb_scale"));
        } else {
            ptx++;
            assert_int_equal(c.kind[i], ES_ENTRY_PTX);
            assert_int_equal(c.arch[i], 90);
            assert_true(c.flags[i] & 0x8000);
            assert_int_not_equal(((char *)c.data[i])[c.size[i] - 1], 0);   /* NULs trimmed */
            names_t k = {0};
            assert_int_equal(es_ptx_kernels((char *)c.data[i], c.size[i], name_cb, &k), 0);
            assert_int_equal(k.n, 3);
            assert_true(has_name(&k, "es_fb_scale"));
        }
    }
    assert_int_equal(cubins, 2);
    assert_int_equal(ptx, 1);
    collect_free(&c);
    free(fb.p);
}

/* The same kernels stored plain, zstd-compressed and in the older format
 * (nvcc --compress-mode=speed writes flag 0x2000) decode to identical bytes:
 * this is what validates the older format's decoder. */
static void test_compression_modes_agree(void **state)
{
    (void)state;
    const char *files[] = { "fb_none.fatbin", "fb_zstd.fatbin", "fb_lz.fatbin" };
    const uint64_t want_flag[] = { 0, 0x8000, 0x2000 };
    collect_t c[3] = {{0}};
    for (int f = 0; f < 3; f++) {
        blob_t b = load(files[f]);
        assert_int_equal(es_fatbin_walk(b.p, b.n, collect_cb, &c[f]), 0);
        assert_int_equal(c[f].n, 3);
        for (int i = 0; i < 3; i++) {
            assert_int_equal(c[f].flags[i] & 0xA000, want_flag[f]);
            assert_int_equal(c[f].unreadable[i], 0);
        }
        free(b.p);
    }
    for (int f = 1; f < 3; f++)
        for (int i = 0; i < 3; i++) {
            assert_int_equal(c[f].kind[i], c[0].kind[i]);
            assert_int_equal(c[f].arch[i], c[0].arch[i]);
            assert_int_equal(c[f].size[i], c[0].size[i]);
            assert_memory_equal(c[f].data[i], c[0].data[i], c[0].size[i]);
        }
    for (int f = 0; f < 3; f++)
        collect_free(&c[f]);
}

/* Negative control for the comparison above: a changed byte in the older
 * format's payload changes the output or is an error. */
static void test_lz_corruption_detected(void **state)
{
    (void)state;
    blob_t lz = load("fb_lz.fatbin"), none = load("fb_none.fatbin");
    collect_t ref = {0};
    assert_int_equal(es_fatbin_walk(none.p, none.n, collect_cb, &ref), 0);
    /* first entry: header at 16, header size at +4, payload after it */
    uint32_t ehs;
    memcpy(&ehs, lz.p + 16 + 4, 4);
    unsigned char *pl = lz.p + 16 + ehs;
    pl[40] ^= 0x5a;
    collect_t c = {0};
    int rc = es_fatbin_walk(lz.p, lz.n, collect_cb, &c);
    if (rc == 0)
        assert_memory_not_equal(c.data[0], ref.data[0], ref.size[0]);
    else
        assert_int_equal(rc, -EBADMSG);
    collect_free(&c);
    collect_free(&ref);
    free(lz.p); free(none.p);
}

static void set_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint64_t get_u64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* A wrong decompressed size (+-1) is an error for both compressions. */
static void test_bad_decompressed_size(void **state)
{
    (void)state;
    const char *files[] = { "fb_zstd.fatbin", "fb_lz.fatbin" };
    for (int f = 0; f < 2; f++) {
        for (int d = -1; d <= 1; d += 2) {
            blob_t b = load(files[f]);
            unsigned char *e = b.p + 16;
            set_u64(e + 56, get_u64(e + 56) + (uint64_t)(int64_t)d);
            int n = 0;
            assert_int_equal(es_fatbin_walk(b.p, b.n, count_cb, &n), -EBADMSG);
            free(b.p);
        }
    }
}

/* An entry in a compression this reader does not know is reported, with
 * unreadable = -ENOTSUP and no data, and the walk goes on. */
static void test_unknown_compression_reported(void **state)
{
    (void)state;
    blob_t b = load("fb_zstd.fatbin");
    unsigned char *e = b.p + 16;
    set_u64(e + 40, get_u64(e + 40) | 0x2000 | 0x8000);
    collect_t c = {0};
    assert_int_equal(es_fatbin_walk(b.p, b.n, collect_cb, &c), 0);
    assert_int_equal(c.n, 3);
    assert_int_equal(c.unreadable[0], -ENOTSUP);
    assert_null(c.data[0]);
    assert_int_equal(c.unreadable[1], 0);
    assert_non_null(c.data[1]);
    collect_free(&c);
    free(b.p);
}

/* Two containers back to back (as in .nv_fatbin sections), with zero
 * padding between: both are walked; probing gives their total size. */
static void test_consecutive_containers(void **state)
{
    (void)state;
    blob_t a = load("fb_default.fatbin"), z = load("fb_lz.fatbin");
    size_t n = a.n + 8 + z.n;
    unsigned char *p = calloc(1, n);
    memcpy(p, a.p, a.n);
    memcpy(p + a.n + 8, z.p, z.n);
    int cnt = 0;
    assert_int_equal(es_fatbin_walk(p, n, count_cb, &cnt), 0);
    assert_int_equal(cnt, 6);
    /* without padding the probe follows the chain */
    memcpy(p + a.n, z.p, z.n);
    size_t sz = 0;
    assert_int_equal(es_image_probe(p, a.n + z.n, &sz), ES_IMAGE_FATBIN);
    assert_int_equal(sz, a.n + z.n);
    /* unknown size: only the first container is known to be the image's */
    assert_int_equal(es_image_probe(p, SIZE_MAX, &sz), ES_IMAGE_FATBIN);
    assert_int_equal(sz, a.n);
    /* garbage after a container is corrupt, not ignored */
    memset(p + a.n, 0x77, 16);
    cnt = 0;
    assert_int_equal(es_fatbin_walk(p, a.n + z.n, count_cb, &cnt), -EBADMSG);
    free(p); free(a.p); free(z.p);
}

static void test_cubin_and_ptx_images(void **state)
{
    (void)state;
    blob_t cu = load("fb_sm90.cubin"), px = load("fb.ptx");
    collect_t c = {0};
    assert_int_equal(es_fatbin_walk(cu.p, cu.n, collect_cb, &c), 0);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.kind[0], ES_ENTRY_CUBIN);
    assert_int_equal(c.arch[0], 90);
    collect_free(&c);
    assert_int_equal(es_fatbin_walk(px.p, px.n, collect_cb, &c), 0);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.kind[0], ES_ENTRY_PTX);
    assert_int_equal(c.arch[0], 90);
    collect_free(&c);
    names_t k = {0};
    assert_int_equal(es_ptx_kernels((char *)px.p, px.n, name_cb, &k), 0);
    assert_int_equal(k.n, 3);
    assert_true(has_name(&k, "_Z15es_fb_add_floatPff"));
    /* a cubin is not a host ELF with fatbins, and vice versa */
    int n = 0;
    assert_int_equal(es_host_elf_fatbins(cu.p, cu.n, deep_section, &n), 0);
    blob_t ho = load("fb_host.o");
    assert_int_equal(es_cubin_kernels(ho.p, ho.n, nop_kcb, &n), -EINVAL);
    free(cu.p); free(px.p); free(ho.p);
}

/* Processor-specific sections may have a size but no bytes in the file
 * (NCCL's relocatable cubins end with such a .nv_debug.shared): tolerated,
 * since they are never read; a code section past the end is an error. */
static void test_sections_without_file_bytes(void **state)
{
    (void)state;
    blob_t b = load("audit_rdc_sm90.cubin");
    int n0 = 0;
    assert_int_equal(es_cubin_kernels(b.p, b.n, nop_kcb, &n0), 0);
    assert_true(n0 > 10);
    uint64_t shoff;
    uint16_t shnum;
    memcpy(&shoff, b.p + 0x28, 8);
    memcpy(&shnum, b.p + 0x3c, 2);
    int patched_loproc = 0, patched_text = 0;
    unsigned char *copy = malloc(b.n);
    memcpy(copy, b.p, b.n);
    for (unsigned i = 0; i < shnum; i++) {
        unsigned char *sh = b.p + shoff + (size_t)i * 64;
        uint32_t type;
        memcpy(&type, sh + 4, 4);
        if (type == 0x7000000a && !patched_loproc) {
            uint64_t off = b.n - 16, sz = 0x10000;   /* runs past the end */
            memcpy(sh + 24, &off, 8);
            memcpy(sh + 32, &sz, 8);
            patched_loproc = 1;
        }
    }
    assert_true(patched_loproc);
    int n1 = 0;
    assert_int_equal(es_cubin_kernels(b.p, b.n, nop_kcb, &n1), 0);
    assert_int_equal(n1, n0);
    size_t sz;
    assert_int_equal(es_image_probe(b.p, b.n, &sz), ES_IMAGE_CUBIN);
    /* the same for a code section is corrupt */
    for (unsigned i = 0; i < shnum; i++) {
        unsigned char *sh = copy + shoff + (size_t)i * 64;
        uint32_t type;
        uint64_t flags;
        memcpy(&type, sh + 4, 4);
        memcpy(&flags, sh + 8, 8);
        if (type == 1 /* PROGBITS */ && (flags & 4 /* EXECINSTR */) && !patched_text) {
            uint64_t sz2 = b.n;
            memcpy(sh + 32, &sz2, 8);
            patched_text = 1;
        }
    }
    assert_true(patched_text);
    int n2 = 0;
    assert_int_equal(es_cubin_kernels(copy, b.n, nop_kcb, &n2), -EBADMSG);
    free(copy);
    free(b.p);
}

typedef struct cg {
    int funcs, entries, calls, fa_calls_mid;
} cg_t;

static int cg_func(const char *name, int is_entry, void *arg)
{
    cg_t *c = arg;
    c->funcs++;
    c->entries += is_entry;
    if (strcmp(name, "fa_via_call") == 0)
        assert_true(is_entry);
    if (strcmp(name, "_Z15es_noinline_addPff") == 0)
        assert_false(is_entry);
    return 0;
}

static int cg_call(const char *caller, const char *callee, void *arg)
{
    cg_t *c = arg;
    c->calls++;
    if (strcmp(caller, "fa_via_call") == 0 && strncmp(callee, "_Z15es_noinline_midPff", 22) == 0)
        c->fa_calls_mid = 1;
    return 0;
}

/* .nv.callgraph of a relocatable cubin: entries and direct calls. */
static void test_cubin_callgraph(void **state)
{
    (void)state;
    blob_t b = load("audit_rdc_sm90.cubin");
    cg_t c = {0};
    int n = 0;
    assert_int_equal(es_cubin_callgraph(b.p, b.n, cg_func, cg_call, &c), 0);
    assert_int_equal(es_cubin_kernels(b.p, b.n, nop_kcb, &n), 0);
    assert_int_equal(c.funcs, n);
    assert_true(c.entries > 40 && c.entries < n);
    assert_true(c.calls >= 3);
    assert_true(c.fa_calls_mid);
    /* whole-program cubin: callees live in the caller's section, no calls */
    blob_t w = load("fb_sm90.cubin");
    cg_t d = {0};
    assert_int_equal(es_cubin_callgraph(w.p, w.n, cg_func, cg_call, &d), 0);
    assert_int_equal(d.funcs, 3);
    assert_int_equal(d.entries, 3);
    assert_int_equal(d.calls, 0);
    assert_int_equal(es_cubin_callgraph(NULL, 1, cg_func, NULL, &d), -EINVAL);
    assert_int_equal(es_cubin_callgraph(w.p, w.n, NULL, NULL, &d), -EINVAL);
    for (size_t len = 0; len < w.n; len += 7) {
        unsigned char *p = malloc(len ? len : 1);
        memcpy(p, w.p, len);
        assert_true(es_cubin_callgraph(p, len, cg_func, cg_call, &d) < 0);
        free(p);
    }
    free(w.p);
    free(b.p);
}

typedef struct secs {
    int n;
    char name[4][32];
    size_t size[4];
    int entries;
} secs_t;

static int sec_cb(const char *s, const void *d, size_t n, void *arg)
{
    secs_t *x = arg;
    if (x->n < 4) {
        snprintf(x->name[x->n], 32, "%s", s);
        x->size[x->n++] = n;
    }
    return es_fatbin_walk(d, n, count_cb, &x->entries);
}

/* nvcc -dlto: a PTX entry and an LTO-IR entry (kind 8, whose payload is
 * not plain zstd although flag 0x8000 is set). The LTO-IR entry is walked as
 * unreadable, never decoded, and does not make the image corrupt. */
static void test_lto_entry(void **state)
{
    (void)state;
    blob_t fb = load("fb_lto.fatbin");
    collect_t c = {0};
    assert_int_equal(es_fatbin_walk(fb.p, fb.n, collect_cb, &c), 0);
    int lto = -1, ptx = -1;
    for (int i = 0; i < c.n; i++) {
        if (c.kind[i] == ES_ENTRY_LTOIR)
            lto = i;
        else if (c.kind[i] == ES_ENTRY_PTX)
            ptx = i;
    }
    assert_true(lto >= 0 && ptx >= 0);
    assert_int_equal(c.unreadable[lto], -ENOTSUP);
    assert_null(c.data[lto]);
    assert_int_equal(c.arch[lto], 90);
    assert_int_equal(c.unreadable[ptx], 0);
    assert_non_null(strstr((char *)c.data[ptx], ".entry"));
    collect_free(&c);
    assert_int_equal(deep_walk(fb.p, fb.n), 0);
    free(fb.p);
    blob_t ho = load("fb_lto.o");
    assert_int_equal(deep_walk(ho.p, ho.n), 0);
    free(ho.p);
}

static void test_host_objects(void **state)
{
    (void)state;
    blob_t ho = load("fb_host.o"), rdc = load("fb_rdc.o");
    secs_t s = {0};
    assert_int_equal(es_host_elf_fatbins(ho.p, ho.n, sec_cb, &s), 0);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.name[0], ".nv_fatbin");
    assert_int_equal(s.entries, 3);
    memset(&s, 0, sizeof s);
    assert_int_equal(es_host_elf_fatbins(rdc.p, rdc.n, sec_cb, &s), 0);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.name[0], "__nv_relfatbin");
    assert_true(s.entries >= 1);
    free(ho.p); free(rdc.p);
}

/* The runtime's wrapper: magic, version, pointer to the fatbin. */
static void test_wrapper(void **state)
{
    (void)state;
    blob_t fb = load("fb_default.fatbin");
    struct { uint32_t magic, version; const void *data; void *unused; } w = {
        0x466243b1u, 1, fb.p, NULL };
    size_t sz = 0;
    assert_int_equal(es_image_probe(&w, sizeof w, &sz), ES_IMAGE_WRAPPER);
    assert_int_equal(sz, fb.n);
    int n = 0;
    assert_int_equal(es_fatbin_walk(&w, SIZE_MAX, count_cb, &n), 0);
    assert_int_equal(n, 3);
    w.data = NULL;
    assert_true(es_image_probe(&w, sizeof w, &sz) < 0);
    free(fb.p);
}

static int stop_cb(const es_fatbin_entry_t *e, void *arg)
{
    (void)e;
    (*(int *)arg)++;
    return 42;
}

static void test_callback_stops_walk(void **state)
{
    (void)state;
    blob_t fb = load("fb_default.fatbin");
    int n = 0;
    assert_int_equal(es_fatbin_walk(fb.p, fb.n, stop_cb, &n), 42);
    assert_int_equal(n, 1);
    free(fb.p);
}

/* Every truncation of a fatbin, a cubin and a host object is an error, read
 * from an exactly-sized copy (a sanitizer build catches any over-read). */
static void truncations(const char *file, int want_error)
{
    blob_t b = load(file);
    for (size_t len = 0; len < b.n; len++) {
        unsigned char *p = malloc(len ? len : 1);
        memcpy(p, b.p, len);
        int rc = deep_walk(p, len);
        if (want_error && rc >= 0)
            fail_msg("%s truncated to %zu bytes: no error", file, len);
        free(p);
    }
    assert_int_equal(deep_walk(b.p, b.n), 0);   /* control: the whole file */
    free(b.p);
}

static void test_truncated_fatbins(void **state)
{
    (void)state;
    truncations("fb_default.fatbin", 1);
    truncations("fb_lz.fatbin", 1);
}

static void test_truncated_cubin_and_host(void **state)
{
    (void)state;
    truncations("fb_sm90.cubin", 1);
    truncations("fb_host.o", 1);
}

static void test_truncated_ptx(void **state)
{
    (void)state;
    /* a prefix of PTX text may itself be valid PTX: only no crash, and a
     * cut inside a kernel body is an error */
    blob_t b = load("fb.ptx");
    for (size_t len = 0; len < b.n; len++) {
        char *p = malloc(len ? len : 1);
        memcpy(p, b.p, len);
        int n = 0;
        (void)es_ptx_kernels(p, len, nop_kcb, &n);
        (void)deep_walk(p, len);
        free(p);
    }
    const char *body = strstr((char *)b.p, ".entry");
    body = strchr(body, '{');
    int n = 0;
    assert_int_equal(es_ptx_kernels((char *)b.p, (size_t)(body - (char *)b.p) + 5, nop_kcb, &n),
                     -EBADMSG);
    free(b.p);
}

/* Deterministic mutation fuzzing: random byte changes, and targeted changes
 * of the size fields, in every kind of image. Only "no crash, no over-read"
 * and "result is 0 or a negative errno" are asserted. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* The results fatbin/fatbin.h documents for malformed input. */
static int documented_rc(int rc)
{
    return rc == 0 || rc == -EINVAL || rc == -EBADMSG || rc == -ENOTSUP || rc == -ENOMEM;
}

static void mutate(const char *file, int iters)
{
    blob_t b = load(file);
    unsigned char *p = malloc(b.n);
    static const uint64_t vals[] = { 0, 1, 15, 16, 47, 48, 63, 64, 0x7fffffff, 0xffffffff,
                                     0xffffffffffffffffull, 0x8000000000000000ull };
    for (int it = 0; it < iters; it++) {
        memcpy(p, b.p, b.n);
        int nmut = 1 + (int)(rng() % 4);
        for (int m = 0; m < nmut; m++) {
            size_t at;
            switch (rng() % 3) {
            case 0:   /* random byte */
                p[rng() % b.n] = (unsigned char)rng();
                break;
            case 1:   /* an aligned field gets an interesting value */
                at = (size_t)(rng() % (b.n / 8)) * 8;
                set_u64(p + at, vals[rng() % (sizeof vals / sizeof vals[0])]);
                break;
            default:  /* the first headers, where the size fields are */
                at = (size_t)(rng() % (b.n < 256 ? b.n : 256));
                p[at] ^= (unsigned char)(1u << (rng() % 8));
                break;
            }
        }
        /* an exactly-sized copy, truncated one time in four, so that a
         * read past the end is an over-read for the address sanitizer */
        size_t len = (rng() % 4 == 0) ? (size_t)(rng() % b.n) : b.n;
        unsigned char *q = malloc(len ? len : 1);
        memcpy(q, p, len);
        int rc = deep_walk(q, len);
        free(q);
        if (!documented_rc(rc))
            fail_msg("%s mutation %d: result %d is not 0 or a documented error", file, it, rc);
    }
    free(p);
    free(b.p);
}

static void test_fuzz(void **state)
{
    (void)state;
    mutate("fb_default.fatbin", 3000);
    mutate("fb_lz.fatbin", 3000);
    mutate("fb_zstd.fatbin", 3000);
    mutate("fb_sm90.cubin", 3000);
    mutate("fb_host.o", 2000);
    mutate("fb.ptx", 1000);
    mutate("fb_lto.fatbin", 1000);
    mutate("audit_rdc_sm90.cubin", 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_args),
        cmocka_unit_test(test_probe_kinds),
        cmocka_unit_test(test_elf_header_fields),
        cmocka_unit_test(test_walk_default),
        cmocka_unit_test(test_compression_modes_agree),
        cmocka_unit_test(test_lz_corruption_detected),
        cmocka_unit_test(test_bad_decompressed_size),
        cmocka_unit_test(test_unknown_compression_reported),
        cmocka_unit_test(test_consecutive_containers),
        cmocka_unit_test(test_cubin_and_ptx_images),
        cmocka_unit_test(test_host_objects),
        cmocka_unit_test(test_lto_entry),
        cmocka_unit_test(test_sections_without_file_bytes),
        cmocka_unit_test(test_cubin_callgraph),
        cmocka_unit_test(test_wrapper),
        cmocka_unit_test(test_callback_stops_walk),
        cmocka_unit_test(test_truncated_fatbins),
        cmocka_unit_test(test_truncated_cubin_and_host),
        cmocka_unit_test(test_truncated_ptx),
        cmocka_unit_test(test_fuzz),
    };
    return cmocka_run_group_tests_name("fatbin", tests, NULL, NULL);
}

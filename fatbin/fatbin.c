/* Reader for NVIDIA device-code containers (see fatbin.h): fatbin containers,
 * the runtime's fatbin wrapper, cubin ELF images, PTX text, and the fatbin
 * sections of host ELF files. Pure reader: every size field is checked
 * against the buffer before use; compressed entries (zstd, flag 0x8000, and
 * the older LZ4-style block format, flag 0x2000) are decompressed into a
 * buffer owned by the walk and reused from entry to entry. Thread-safe: no
 * state outside the call. */
#include "fatbin/fatbin.h"

#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define FATBIN_MAGIC 0xBA55ED50u
#define WRAPPER_MAGIC 0x466243b1u
#define EM_CUDA_MACHINE 190
#define FATBIN_HDR_MIN 16
#define FATBIN_VERSION 1
#define WRAPPER_SIZE 16           /* u32 magic, u32 version, fatbin pointer */
#define WRAPPER_OFF_FATBIN 8
#define PTX_PROBE_HEAD 4096       /* .version must appear within this prefix */
#define MAX_SECTIONS (1u << 24)   /* far above any real cubin or library */
/* Unknown-size probing (cuModuleLoadData) trusts no offset or size field
 * above this: no image in a process is a terabyte. */
#define MAX_PROBE_FIELD ((uint64_t)1 << 40)
#define ENTRY_HDR_MIN 48          /* up to and including the flags field */
#define ENTRY_OFF_CSIZE 16        /* u32 compressed size without padding */
#define ENTRY_OFF_ARCH 28
#define ENTRY_OFF_FLAGS 40
#define ENTRY_OFF_DSIZE 56        /* u64 decompressed size */
#define FLAG_COMPRESS_OLD 0x2000u
#define FLAG_COMPRESS_ZSTD 0x8000u
/* Upper bound on a decompressed entry: protects against absurd header values
 * (a real cubin is at most tens of MiB). */
#define MAX_DECOMPRESSED ((uint64_t)1 << 31)
/* The older block format writes at least one input byte per 255 output
 * bytes (a length's extension bytes each add at most 255). */
#define LZ_MAX_EXPANSION 255

static uint16_t rd16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t rd32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static pthread_once_t elf_once = PTHREAD_ONCE_INIT;
static int elf_ok;
static void elf_init(void) { elf_ok = elf_version(EV_CURRENT) != EV_NONE; }

/* ---------------------------------------------------------------- ELF -- */

/* Checks the raw ELF header and the section/program header tables against
 * size, before libelf sees the image. Stores the class and the extent of
 * everything the headers describe (for probing). */
static int elf_precheck(const unsigned char *p, size_t size, int *machine, size_t *extent)
{
    if (size < EI_NIDENT || memcmp(p, ELFMAG, SELFMAG) != 0)
        return -EINVAL;
    int cls = p[EI_CLASS];
    if (p[EI_DATA] != ELFDATA2LSB || (cls != ELFCLASS64 && cls != ELFCLASS32))
        return -EBADMSG;
    uint64_t shoff, phoff, shnum, phnum, shentsz, phentsz, ehsz;
    /* the same fields from the class's own header layout */
#define READ_EHDR(Ehdr, Shdr, Phdr)                                              \
    do {                                                                         \
        Ehdr eh;                                                                 \
        if (size < sizeof eh)                                                    \
            return -EBADMSG;                                                     \
        memcpy(&eh, p, sizeof eh);                                               \
        shoff = eh.e_shoff; phoff = eh.e_phoff; shnum = eh.e_shnum;              \
        phnum = eh.e_phnum; shentsz = eh.e_shentsize; phentsz = eh.e_phentsize;  \
        ehsz = sizeof eh;                                                        \
        *machine = eh.e_machine;                                                 \
        if (((shoff || shnum) && shentsz != sizeof(Shdr)) ||                     \
            (phnum && phentsz != sizeof(Phdr)))                                  \
            return -EBADMSG;                                                     \
    } while (0)
    if (cls == ELFCLASS64)
        READ_EHDR(Elf64_Ehdr, Elf64_Shdr, Elf64_Phdr);
    else
        READ_EHDR(Elf32_Ehdr, Elf32_Shdr, Elf32_Phdr);
#undef READ_EHDR
    uint64_t end = ehsz;
    if (!shoff && shnum)
        return -EBADMSG;   /* sections without a table */
    if (shoff) {
        /* e_shnum 0 with e_shoff set: the count is in section 0's sh_size */
        if (shnum == 0) {
            if (shoff > size || size - shoff < shentsz)
                return -EBADMSG;   /* shentsz is the class's Shdr size here */
            shnum = cls == ELFCLASS64 ? rd64(p + shoff + 32) : rd32(p + shoff + 20);
        }
        if (shnum > MAX_SECTIONS || shoff > size || (size - shoff) / shentsz < shnum)
            return -EBADMSG;
        if (shoff + shnum * shentsz > end)
            end = shoff + shnum * shentsz;
        for (uint64_t i = 0; i < shnum; i++) {
            const unsigned char *s = p + shoff + i * shentsz;
            uint64_t type, off, sz;
            if (cls == ELFCLASS64) { type = rd32(s + 4); off = rd64(s + 24); sz = rd64(s + 32); }
            else { type = rd32(s + 4); off = rd32(s + 16); sz = rd32(s + 20); }
            if (type == SHT_NOBITS || type == SHT_NULL)
                continue;
            if (off > size || sz > size - off) {
                /* processor-specific sections may occupy no file bytes
                 * (.nv_debug.shared in NCCL's relocatable cubins): they are
                 * never read, and the sections that are read are checked
                 * again when used */
                if (type >= SHT_LOPROC)
                    continue;
                return -EBADMSG;
            }
            if (off + sz > end)
                end = off + sz;
        }
    }
    if (phoff && phnum) {
        if (phoff > size || (size - phoff) / phentsz < phnum)
            return -EBADMSG;
        if (phoff + phnum * phentsz > end)
            end = phoff + phnum * phentsz;
    }
    if (end > size)
        return -EBADMSG;
    *extent = (size_t)end;
    return 0;
}

/* Section iteration over an image already prechecked. cb gets the section
 * name, header and bytes; a non-zero return stops and is returned. */
typedef int (*sec_cb)(const char *name, const GElf_Shdr *sh, const unsigned char *data,
                      void *arg);

static int elf_sections(const void *image, size_t size, int want_machine, sec_cb cb, void *arg)
{
    int machine = 0, rc;
    size_t extent;
    Elf *elf = NULL;

    rc = elf_precheck(image, size, &machine, &extent);
    if (rc)
        goto out;
    if (want_machine >= 0 && machine != want_machine) {
        rc = -EINVAL;
        goto out;
    }
    pthread_once(&elf_once, elf_init);
    if (!elf_ok) {
        rc = -ENOTSUP;
        goto out;
    }
    /* libelf only reads through this pointer (ELF_C_READ semantics) */
    elf = elf_memory((char *)(uintptr_t)image, size);
    if (!elf || elf_kind(elf) != ELF_K_ELF) {
        rc = -EBADMSG;
        goto out;
    }
    size_t shstrndx;
    if (elf_getshdrstrndx(elf, &shstrndx) != 0) {
        rc = -EBADMSG;
        goto out;
    }
    for (Elf_Scn *scn = elf_nextscn(elf, NULL); scn; scn = elf_nextscn(elf, scn)) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh)) {
            rc = -EBADMSG;
            goto out;
        }
        const char *name = elf_strptr(elf, shstrndx, sh.sh_name);
        if (!name)
            continue;
        const unsigned char *data = NULL;
        if (sh.sh_type != SHT_NOBITS && sh.sh_type != SHT_NULL) {
            if (sh.sh_offset <= size && sh.sh_size <= size - sh.sh_offset) {
                data = (const unsigned char *)image + sh.sh_offset;
            } else if (sh.sh_type < SHT_LOPROC) {
                rc = -EBADMSG;
                goto out;
            }   /* else: processor-specific without file bytes (see elf_precheck) */
        }
        rc = cb(name, &sh, data, arg);
        if (rc)
            goto out;
    }
    rc = 0;
out:
    if (elf)
        elf_end(elf);
    return rc;
}

/* sm number of a cubin from e_flags: ABI version >= 8 keeps it in bits 8..15,
 * older ones in bits 0..7. */
static unsigned cubin_arch(const unsigned char *p, size_t size)
{
    if (size < sizeof(Elf64_Ehdr) || p[EI_CLASS] != ELFCLASS64)
        return 0;
    uint32_t fl = rd32(p + offsetof(Elf64_Ehdr, e_flags));
    return p[EI_ABIVERSION] >= 8 ? (fl >> 8) & 0xff : fl & 0xff;
}

/* --------------------------------------------------------------- PTX -- */

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static const char *memfind(const char *h, size_t hl, const char *n, size_t nl)
{
    if (nl == 0 || hl < nl)
        return NULL;
    const char *end = h + hl - nl;
    for (const char *p = h; p <= end; p++) {
        p = memchr(p, n[0], (size_t)(end - p) + 1);
        if (!p)
            return NULL;
        if (memcmp(p, n, nl) == 0)
            return p;
    }
    return NULL;
}

/* PTX text: starts (after blanks) with a comment or a directive and has a
 * .version directive in its first 4 KiB. Stores the text length (up to the
 * first NUL or avail). */
static int ptx_probe(const char *s, size_t avail, size_t *len)
{
    size_t head = avail < PTX_PROBE_HEAD ? avail : PTX_PROBE_HEAD;
    size_t n = strnlen(s, head);
    size_t i = 0;
    while (i < n && is_space(s[i]))
        i++;
    if (i >= n || !(s[i] == '/' || s[i] == '.'))
        return -EINVAL;
    if (!memfind(s, n, ".version", 8))
        return -EINVAL;
    if (len)
        *len = n < head ? n : strnlen(s, avail);
    return 0;
}

static unsigned ptx_arch(const char *s, size_t n)
{
    const char *t = memfind(s, n, ".target", 7);
    if (!t)
        return 0;
    const char *e = s + n;
    t += 7;
    while (t < e && is_space(*t))
        t++;
    if (e - t < 4 || memcmp(t, "sm_", 3) != 0)
        return 0;
    unsigned a = 0;
    for (t += 3; t < e && *t >= '0' && *t <= '9' && a < 100000; t++)
        a = a * 10 + (unsigned)(*t - '0');
    return a;
}

/* ------------------------------------------------------------ probing -- */

/* Size of the consecutive fatbin containers at p. When avail is unknown
 * (SIZE_MAX: cuModuleLoadData, the runtime wrapper) only the first container
 * counts: each wrapper points at one container, and reading past it could
 * touch memory that is not the image's. */
static int fatbin_extent(const unsigned char *p, size_t avail, size_t *size_out)
{
    size_t off = 0;
    for (;;) {
        if (avail - off < FATBIN_HDR_MIN || rd32(p + off) != FATBIN_MAGIC)
            break;
        uint16_t hs = rd16(p + off + 6);
        uint64_t body = rd64(p + off + 8);
        if (hs < FATBIN_HDR_MIN || hs > avail - off || body > avail - off - hs)
            return -EBADMSG;
        off += hs + body;
        if (avail == SIZE_MAX)
            break;   /* nothing beyond the first container is known to be ours */
    }
    if (off == 0)
        return -EBADMSG;
    *size_out = off;
    return 0;
}

static int wrapper_target(const unsigned char *p, size_t avail, const unsigned char **fb)
{
    if (avail < WRAPPER_SIZE)
        return -EBADMSG;
    const void *ptr;
    memcpy(&ptr, p + WRAPPER_OFF_FATBIN, sizeof ptr);
    if (!ptr)
        return -EBADMSG;
    *fb = ptr;
    return 0;
}

int es_image_probe(const void *image, size_t avail, size_t *size_out)
{
    const unsigned char *p = image;
    size_t size = 0;
    int rc;

    if (!image || avail < 4)
        return -EINVAL;
    uint32_t m = rd32(p);
    if (m == FATBIN_MAGIC) {
        rc = fatbin_extent(p, avail, &size);
        if (rc)
            return rc;
        rc = ES_IMAGE_FATBIN;
    } else if (m == WRAPPER_MAGIC) {
        const unsigned char *fb;
        rc = wrapper_target(p, avail, &fb);
        if (rc)
            return rc;
        if (rd32(fb) != FATBIN_MAGIC)
            return -EBADMSG;
        rc = fatbin_extent(fb, SIZE_MAX, &size);
        if (rc)
            return rc;
        rc = ES_IMAGE_WRAPPER;
    } else if (memcmp(p, ELFMAG, SELFMAG) == 0) {
        /* bound the header reads by what is available */
        int machine = 0;
        size_t lim = avail;
        if (avail == SIZE_MAX) {
            /* read the headers first, then the tables they name */
            if (p[EI_CLASS] != ELFCLASS64)
                return -EBADMSG;
            Elf64_Ehdr eh;
            memcpy(&eh, p, sizeof eh);
            uint64_t e1 = eh.e_shoff + (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr);
            uint64_t e2 = eh.e_phoff + (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr);
            if (eh.e_shoff > MAX_PROBE_FIELD || eh.e_phoff > MAX_PROBE_FIELD)
                return -EBADMSG;
            lim = (size_t)(e1 > e2 ? e1 : e2);
            if (lim < sizeof eh)
                lim = sizeof eh;
            /* section contents may lie beyond the tables: take the largest,
             * except processor-specific sections, which may claim bytes the
             * file does not have (see elf_precheck); ptxas puts the section
             * header table last, after all of them */
            if (eh.e_shoff && eh.e_shentsize == sizeof(Elf64_Shdr)) {
                for (unsigned i = 0; i < eh.e_shnum; i++) {
                    Elf64_Shdr sh;
                    memcpy(&sh, p + eh.e_shoff + (size_t)i * sizeof sh, sizeof sh);
                    if (sh.sh_type == SHT_NOBITS || sh.sh_type >= SHT_LOPROC)
                        continue;
                    if (sh.sh_offset > MAX_PROBE_FIELD || sh.sh_size > MAX_PROBE_FIELD)
                        return -EBADMSG;
                    if (sh.sh_offset + sh.sh_size > lim)
                        lim = (size_t)(sh.sh_offset + sh.sh_size);
                }
            }
        }
        rc = elf_precheck(p, lim, &machine, &size);
        if (rc)
            return rc;
        if (machine != EM_CUDA_MACHINE)
            return -EINVAL;
        rc = ES_IMAGE_CUBIN;
    } else {
        rc = ptx_probe(image, avail, &size);
        if (rc)
            return rc;
        rc = ES_IMAGE_PTX;
    }
    if (size_out)
        *size_out = size;
    return rc;
}

/* -------------------------------------------------------- decompress -- */

typedef struct walk_buf {
    unsigned char *buf;
    size_t cap;
    ZSTD_DCtx *zd;
} walk_buf_t;

static int buf_reserve(walk_buf_t *w, size_t n)
{
    if (n <= w->cap)
        return 0;
    size_t cap = w->cap ? w->cap : 65536;
    while (cap < n)
        cap = cap > SIZE_MAX / 2 ? n : cap * 2;
    unsigned char *nb = realloc(w->buf, cap);
    if (!nb)
        return -ENOMEM;
    w->buf = nb;
    w->cap = cap;
    return 0;
}

#define LZ_NIBBLE_MORE 15   /* a token nibble of 15: extension bytes follow */
#define LZ_BYTE_MORE 255    /* an extension byte of 255: another follows */
#define LZ_MIN_MATCH 4

/* Adds a length's extension bytes at *ip to *len when its token nibble was
 * LZ_NIBBLE_MORE; a length beyond what dlen allows stops early (the caller
 * rejects it). Returns 0 or -EBADMSG when the input ends inside it. */
static int lz_length(const unsigned char **ip, const unsigned char *iend, size_t dlen,
                     size_t *len)
{
    if (*len != LZ_NIBBLE_MORE)
        return 0;
    unsigned b;
    do {
        if (*ip >= iend)
            return -EBADMSG;
        b = *(*ip)++;
        *len += b;
    } while (b == LZ_BYTE_MORE && *len < dlen + LZ_BYTE_MORE);
    return 0;
}

/* Older fatbin compression (flag 0x2000): an LZ4 block. Each sequence is a
 * token (high nibble literal count, low nibble match length - 4, 15 meaning
 * "more bytes follow, each adding up to 255"), the literals, a 2-byte
 * little-endian back-reference distance and the match; the last sequence has
 * literals only. Output must fill exactly dlen bytes. */
static int lz_decode(const unsigned char *src, size_t slen, unsigned char *dst, size_t dlen)
{
    const unsigned char *ip = src, *iend = src + slen;
    size_t op = 0;

    while (ip < iend) {
        unsigned tok = *ip++;
        size_t lit = tok >> 4;
        if (lz_length(&ip, iend, dlen, &lit) != 0)
            return -EBADMSG;
        if (lit > (size_t)(iend - ip) || lit > dlen - op)
            return -EBADMSG;
        memcpy(dst + op, ip, lit);
        ip += lit;
        op += lit;
        if (ip == iend)
            break;
        if (iend - ip < 2)
            return -EBADMSG;
        size_t dist = rd16(ip);
        ip += 2;
        if (dist == 0 || dist > op)
            return -EBADMSG;
        size_t mlen = tok & 0xf;
        if (lz_length(&ip, iend, dlen, &mlen) != 0)
            return -EBADMSG;
        mlen += LZ_MIN_MATCH;
        if (mlen > dlen - op)
            return -EBADMSG;
        unsigned char *d = dst + op;
        const unsigned char *s = d - dist;
        if (dist >= mlen) {
            memcpy(d, s, mlen);
        } else {
            for (size_t i = 0; i < mlen; i++)
                d[i] = s[i];
        }
        op += mlen;
    }
    return op == dlen ? 0 : -EBADMSG;
}

static int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* The zstd frames of an entry's payload, up to its zero padding: stores
 * their length and checks the decompressed size the frames record (when
 * they all record one) against the header's dlen, before anything is
 * allocated for it. */
static int zstd_frames(const unsigned char *src, size_t slen, uint64_t dlen, size_t *used_out)
{
    size_t used = 0;
    uint64_t total = 0;
    int known = 1;
    while (used < slen && !all_zero(src + used, slen - used)) {
        size_t fs = ZSTD_findFrameCompressedSize(src + used, slen - used);
        if (ZSTD_isError(fs) || fs == 0 || fs > slen - used)
            return -EBADMSG;
        unsigned long long fcs = ZSTD_getFrameContentSize(src + used, fs);
        if (fcs == ZSTD_CONTENTSIZE_ERROR)
            return -EBADMSG;
        if (fcs == ZSTD_CONTENTSIZE_UNKNOWN)
            known = 0;
        else if (fcs > dlen - total)
            return -EBADMSG;
        else
            total += fcs;
        used += fs;
    }
    if (used == 0 || (known && total != dlen))
        return -EBADMSG;
    *used_out = used;
    return 0;
}

static int zstd_decode(walk_buf_t *w, const unsigned char *src, size_t used,
                       unsigned char *dst, size_t dlen)
{
    if (!w->zd) {
        w->zd = ZSTD_createDCtx();
        if (!w->zd)
            return -ENOMEM;
    }
    size_t r = ZSTD_decompressDCtx(w->zd, dst, dlen, src, used);
    if (ZSTD_isError(r) || r != dlen)
        return -EBADMSG;
    return 0;
}

/* --------------------------------------------------------------- walk -- */

static size_t ptx_trim(const unsigned char *d, size_t n)
{
    while (n > 0 && d[n - 1] == 0)
        n--;
    return n;
}

/* One entry at e (header size hs, payload pl of length plen). */
static int walk_entry(walk_buf_t *w, const unsigned char *e, uint32_t hs,
                      const unsigned char *pl, uint64_t plen, size_t offset,
                      es_entry_cb cb, void *arg)
{
    es_fatbin_entry_t ent = {0};
    uint16_t kind = rd16(e);
    uint64_t flags = rd64(e + ENTRY_OFF_FLAGS);
    int rc;

    ent.kind = kind;
    ent.arch = rd32(e + ENTRY_OFF_ARCH);
    ent.flags = flags;
    ent.offset = offset;
    uint64_t comp = flags & (FLAG_COMPRESS_OLD | FLAG_COMPRESS_ZSTD);
    if (kind != ES_ENTRY_PTX && kind != ES_ENTRY_CUBIN) {
        /* LTO-IR or unknown: nothing here reads it, so its payload (whose
         * encoding may differ: nvcc 13's LTO-IR is not plain zstd despite
         * flag 0x8000) is neither decoded nor judged corrupt */
        ent.unreadable = -ENOTSUP;
    } else if (!comp) {
        ent.data = pl;
        ent.size = (size_t)plen;
    } else if (comp == (FLAG_COMPRESS_OLD | FLAG_COMPRESS_ZSTD) || hs < ENTRY_OFF_DSIZE + 8) {
        ent.unreadable = -ENOTSUP;
    } else {
        uint64_t dlen = rd64(e + ENTRY_OFF_DSIZE);
        uint32_t cs = rd32(e + ENTRY_OFF_CSIZE);
        size_t slen = (cs != 0 && cs <= plen) ? cs : (size_t)plen;
        if (dlen == 0 || dlen > MAX_DECOMPRESSED)
            return -EBADMSG;
        /* sizes the payload cannot produce are refused before allocating */
        if (comp == FLAG_COMPRESS_ZSTD)
            rc = zstd_frames(pl, slen, dlen, &slen);
        else
            rc = dlen / LZ_MAX_EXPANSION > slen ? -EBADMSG : 0;
        if (rc)
            return rc;
        rc = buf_reserve(w, (size_t)dlen + 1);
        if (rc)
            return rc;
        if (comp == FLAG_COMPRESS_ZSTD)
            rc = zstd_decode(w, pl, slen, w->buf, (size_t)dlen);
        else
            rc = lz_decode(pl, slen, w->buf, (size_t)dlen);
        if (rc)
            return rc;
        w->buf[dlen] = 0;
        ent.data = w->buf;
        ent.size = (size_t)dlen;
    }
    if (ent.data && kind == ES_ENTRY_PTX)
        ent.size = ptx_trim(ent.data, ent.size);
    if (ent.data && kind == ES_ENTRY_CUBIN && ent.arch == 0)
        ent.arch = cubin_arch(ent.data, ent.size);
    return cb(&ent, arg);
}

/* All containers in [p, p+size): zero padding between containers is skipped;
 * anything else is corrupt. */
static int walk_fatbin(const unsigned char *p, size_t size, es_entry_cb cb, void *arg)
{
    walk_buf_t w = {0};
    size_t off = 0;
    int rc = 0, any = 0;

    while (off < size) {
        if (size - off < FATBIN_HDR_MIN || rd32(p + off) != FATBIN_MAGIC) {
            if (any && p[off] == 0) {
                off++;
                continue;
            }
            rc = -EBADMSG;
            goto out;
        }
        uint16_t ver = rd16(p + off + 4);
        uint16_t hs = rd16(p + off + 6);
        uint64_t body = rd64(p + off + 8);
        if (ver != FATBIN_VERSION || hs < FATBIN_HDR_MIN || hs > size - off ||
            body > size - off - hs) {
            rc = -EBADMSG;
            goto out;
        }
        any = 1;
        size_t e = off + hs, end = off + hs + (size_t)body;
        while (e < end) {
            if (end - e < ENTRY_HDR_MIN) {
                rc = -EBADMSG;
                goto out;
            }
            uint32_t ehs = rd32(p + e + 4);
            uint64_t plen = rd64(p + e + 8);
            if (ehs < ENTRY_HDR_MIN || ehs > end - e || plen > end - e - ehs) {
                rc = -EBADMSG;
                goto out;
            }
            rc = walk_entry(&w, p + e, ehs, p + e + ehs, plen, e, cb, arg);
            if (rc)
                goto out;
            e += ehs + (size_t)plen;
        }
        off = end;
    }
    if (!any)
        rc = -EBADMSG;
out:
    free(w.buf);
    ZSTD_freeDCtx(w.zd);
    return rc;
}

int es_fatbin_walk(const void *image, size_t size, es_entry_cb cb, void *arg)
{
    const unsigned char *p = image;
    size_t sz = 0;

    if (!image || !cb)
        return -EINVAL;
    int kind = es_image_probe(image, size, &sz);
    if (kind < 0)
        return kind;
    switch (kind) {
    case ES_IMAGE_FATBIN:
        return walk_fatbin(p, size == SIZE_MAX ? sz : size, cb, arg);
    case ES_IMAGE_WRAPPER: {
        const unsigned char *fb;
        int rc = wrapper_target(p, size, &fb);
        return rc ? rc : walk_fatbin(fb, sz, cb, arg);
    }
    case ES_IMAGE_CUBIN: {
        es_fatbin_entry_t ent = {0};
        ent.kind = ES_ENTRY_CUBIN;
        ent.data = image;
        ent.size = size == SIZE_MAX ? sz : size;
        ent.arch = cubin_arch(p, ent.size);
        return cb(&ent, arg);
    }
    case ES_IMAGE_PTX: {
        es_fatbin_entry_t ent = {0};
        ent.kind = ES_ENTRY_PTX;
        ent.data = image;
        ent.size = sz;
        ent.arch = ptx_arch(image, sz);
        return cb(&ent, arg);
    }
    }
    return -EINVAL;
}

/* ------------------------------------------------------------ kernels -- */

typedef struct kern_ctx {
    es_kernel_cb cb;
    void *arg;
} kern_ctx_t;

static int cubin_sec(const char *name, const GElf_Shdr *sh, const unsigned char *data, void *arg)
{
    kern_ctx_t *k = arg;
    if (sh->sh_type != SHT_PROGBITS || !data || sh->sh_size == 0 ||
        strncmp(name, ".text.", 6) != 0 || name[6] == 0)
        return 0;
    return k->cb(name + 6, data, (size_t)sh->sh_size, k->arg);
}

int es_cubin_kernels(const void *elf, size_t size, es_kernel_cb cb, void *arg)
{
    if (!elf || !cb)
        return -EINVAL;
    kern_ctx_t k = { cb, arg };
    return elf_sections(elf, size, EM_CUDA_MACHINE, cubin_sec, &k);
}

/* Skips a comment starting at p (// or block); returns the position after
 * it, or p when there is none. */
static const char *skip_comment(const char *p, const char *e)
{
    if (e - p >= 2 && p[0] == '/' && p[1] == '/') {
        const char *nl = memchr(p, '\n', (size_t)(e - p));
        return nl ? nl + 1 : e;
    }
    if (e - p >= 2 && p[0] == '/' && p[1] == '*') {
        const char *c = memfind(p + 2, (size_t)(e - p - 2), "*/", 2);
        return c ? c + 2 : e;
    }
    return p;
}

/* Next ".entry" or ".func" directive at or after p (blank or start before
 * it, blank or '(' after it); stores which. The positions of both are cached
 * in *next so that the text is scanned once. */
static const char *next_directive(const char *ptx, const char *p, const char *e,
                                  const char *next[2], int *is_entry)
{
    static const char *const words[2] = { ".entry", ".func" };
    for (int w = 0; w < 2; w++) {
        size_t wl = strlen(words[w]);
        while (next[w] && next[w] < p)
            next[w] = NULL;
        while (!next[w] && p < e) {
            const char *from = p;
            const char *q = memfind(from, (size_t)(e - from), words[w], wl);
            if (!q) {
                next[w] = e;   /* none left */
                break;
            }
            const char *after = q + wl;
            if ((q == ptx || is_space(q[-1])) && after < e && (is_space(*after) || *after == '('))
                next[w] = q;
            else
                p = after;     /* keep looking for this word */
        }
        if (!next[w])
            next[w] = e;
    }
    const char *best = next[0] <= next[1] ? next[0] : next[1];
    *is_entry = best == next[0];
    return best < e ? best : NULL;
}

int es_ptx_functions(const char *ptx, size_t size, es_ptx_func_cb cb, void *arg)
{
    if (!ptx || !cb)
        return -EINVAL;
    size = strnlen(ptx, size);
    const char *p = ptx, *e = ptx + size;
    const char *next[2] = { NULL, NULL };
    char *name = NULL;
    size_t namecap = 0;
    int rc = 0;

    for (;;) {
        int is_entry;
        const char *q = next_directive(ptx, p, e, next, &is_entry);
        if (!q)
            break;
        p = q + (is_entry ? 6 : 5);
        while (p < e && is_space(*p))
            p++;
        /* .func may declare its return parameters first: (.param ...) */
        if (!is_entry && p < e && *p == '(') {
            int d = 0;
            while (p < e) {
                if (*p == '(') d++;
                else if (*p == ')' && --d == 0) { p++; break; }
                p++;
            }
            while (p < e && is_space(*p))
                p++;
        }
        const char *n0 = p;
        while (p < e && !is_space(*p) && *p != '(' && *p != '{' && *p != ';')
            p++;
        size_t nl = (size_t)(p - n0);
        if (nl == 0) {
            rc = -EBADMSG;
            goto out;
        }
        if (nl + 1 > namecap) {
            char *nn = realloc(name, nl + 1);
            if (!nn) {
                rc = -ENOMEM;
                goto out;
            }
            name = nn;
            namecap = nl + 1;
        }
        memcpy(name, n0, nl);
        name[nl] = 0;
        /* body: first '{' outside comments and the parameter list */
        int paren = 0;
        while (p < e) {
            const char *s = skip_comment(p, e);
            if (s != p) { p = s; continue; }
            if (*p == '(') paren++;
            else if (*p == ')') paren--;
            else if (*p == '{' && paren <= 0) break;
            else if (*p == ';' && paren <= 0) break;   /* declaration only */
            p++;
        }
        if (p >= e) {
            rc = -EBADMSG;
            goto out;
        }
        if (*p == ';') {
            p++;
            continue;
        }
        const char *b0 = p;
        int depth = 0;
        while (p < e) {
            const char *s = skip_comment(p, e);
            if (s != p) { p = s; continue; }
            if (*p == '{') depth++;
            else if (*p == '}' && --depth == 0) break;
            p++;
        }
        if (p >= e) {
            rc = -EBADMSG;
            goto out;
        }
        p++;
        rc = cb(name, b0, (size_t)(p - b0), is_entry, arg);
        if (rc)
            goto out;
    }
out:
    free(name);
    return rc;
}

typedef struct ptx_entries {
    es_kernel_cb cb;
    void *arg;
} ptx_entries_t;

static int ptx_entry_only(const char *name, const char *code, size_t size, int is_entry, void *arg)
{
    ptx_entries_t *x = arg;
    return is_entry ? x->cb(name, code, size, x->arg) : 0;
}

int es_ptx_kernels(const char *ptx, size_t size, es_kernel_cb cb, void *arg)
{
    if (!ptx || !cb)
        return -EINVAL;
    ptx_entries_t x = { cb, arg };
    return es_ptx_functions(ptx, size, ptx_entry_only, &x);
}

/* ---------------------------------------------------- cubin callgraph -- */

#define STO_CUDA_ENTRY_BIT 0x10
#define SHT_CUDA_CALLGRAPH (SHT_LOPROC + 1)

int es_cubin_callgraph(const void *image, size_t size, es_cubin_func_cb fcb,
                       es_cubin_call_cb ccb, void *arg)
{
    int machine = 0, rc;
    size_t extent, shnum = 0, shstrndx;
    Elf *elf = NULL;
    const char **names = NULL;     /* by section index: ".text." suffix or NULL */
    unsigned char *entry = NULL;   /* by section index */

    if (!image || (!fcb && !ccb))
        return -EINVAL;
    rc = elf_precheck(image, size, &machine, &extent);
    if (rc)
        goto out;
    if (machine != EM_CUDA_MACHINE || ((const unsigned char *)image)[EI_CLASS] != ELFCLASS64) {
        rc = -EINVAL;
        goto out;
    }
    pthread_once(&elf_once, elf_init);
    elf = elf_ok ? elf_memory((char *)(uintptr_t)image, size) : NULL;
    if (!elf || elf_kind(elf) != ELF_K_ELF || elf_getshdrnum(elf, &shnum) != 0 ||
        elf_getshdrstrndx(elf, &shstrndx) != 0) {
        rc = -EBADMSG;
        goto out;
    }
    names = calloc(shnum ? shnum : 1, sizeof *names);
    entry = calloc(shnum ? shnum : 1, 1);
    if (!names || !entry) {
        rc = -ENOMEM;
        goto out;
    }
    const unsigned char *syms = NULL, *cg = NULL;
    size_t nsyms = 0, cgsz = 0;
    for (Elf_Scn *scn = elf_nextscn(elf, NULL); scn; scn = elf_nextscn(elf, scn)) {
        GElf_Shdr sh;
        size_t idx = elf_ndxscn(scn);
        if (!gelf_getshdr(scn, &sh) || idx >= shnum) {
            rc = -EBADMSG;
            goto out;
        }
        const char *name = elf_strptr(elf, shstrndx, sh.sh_name);
        int inside = sh.sh_offset <= size && sh.sh_size <= size - sh.sh_offset;
        if (!name || sh.sh_type == SHT_NOBITS || !inside)
            continue;
        const unsigned char *data = (const unsigned char *)image + sh.sh_offset;
        if (sh.sh_type == SHT_PROGBITS && sh.sh_size > 0 && strncmp(name, ".text.", 6) == 0 &&
            name[6])
            names[idx] = name + 6;
        else if (sh.sh_type == SHT_SYMTAB) {
            if (sh.sh_entsize != sizeof(Elf64_Sym)) {
                rc = -EBADMSG;
                goto out;
            }
            syms = data;
            nsyms = (size_t)sh.sh_size / sizeof(Elf64_Sym);
        } else if (sh.sh_type == SHT_CUDA_CALLGRAPH && strcmp(name, ".nv.callgraph") == 0) {
            cg = data;
            cgsz = (size_t)sh.sh_size;
        }
    }
    /* entry points: functions marked STO_CUDA_ENTRY */
    for (size_t i = 0; i < nsyms; i++) {
        Elf64_Sym sym;
        memcpy(&sym, syms + i * sizeof sym, sizeof sym);
        if (ELF64_ST_TYPE(sym.st_info) == STT_FUNC && (sym.st_other & STO_CUDA_ENTRY_BIT) &&
            sym.st_shndx < shnum)
            entry[sym.st_shndx] = 1;
    }
    if (fcb)
        for (size_t i = 0; i < shnum; i++)
            if (names[i] && (rc = fcb(names[i], entry[i], arg)) != 0)
                goto out;
    /* .nv.callgraph: (u32 caller symbol, i32 callee symbol) pairs; a negative
     * callee starts a block: -1 direct calls, -2.. other records */
    if (ccb && cg && syms) {
        int in_calls = 0;
        for (size_t off = 0; off + 8 <= cgsz; off += 8) {
            uint32_t caller;
            int32_t callee;
            memcpy(&caller, cg + off, 4);
            memcpy(&callee, cg + off + 4, 4);
            if (callee < 0) {
                in_calls = callee == -1;
                continue;
            }
            if (!in_calls)
                continue;
            if (caller >= nsyms || (size_t)callee >= nsyms) {
                rc = -EBADMSG;
                goto out;
            }
            Elf64_Sym a, b;
            memcpy(&a, syms + (size_t)caller * sizeof a, sizeof a);
            memcpy(&b, syms + (size_t)callee * sizeof b, sizeof b);
            if (a.st_shndx >= shnum || b.st_shndx >= shnum || !names[a.st_shndx] ||
                !names[b.st_shndx])
                continue;   /* a callee outside this image (resolved at link time) */
            rc = ccb(names[a.st_shndx], names[b.st_shndx], arg);
            if (rc)
                goto out;
        }
    }
    rc = 0;
out:
    free(names);
    free(entry);
    if (elf)
        elf_end(elf);
    return rc;
}

typedef struct host_ctx {
    es_section_cb cb;
    void *arg;
} host_ctx_t;

static int host_sec(const char *name, const GElf_Shdr *sh, const unsigned char *data, void *arg)
{
    host_ctx_t *h = arg;
    if (!data || sh->sh_size == 0)
        return 0;
    if (strcmp(name, ".nv_fatbin") != 0 && strcmp(name, "__nv_relfatbin") != 0)
        return 0;
    return h->cb(name, data, (size_t)sh->sh_size, h->arg);
}

int es_host_elf_fatbins(const void *elf, size_t size, es_section_cb cb, void *arg)
{
    if (!elf || !cb)
        return -EINVAL;
    host_ctx_t h = { cb, arg };
    return elf_sections(elf, size, -1, host_sec, &h);
}

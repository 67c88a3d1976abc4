/* easyscale-audit: lists the kernels with floating-point atomics (and CAS
 * loops that may emulate them) in host ELF files (executables, shared
 * libraries: their .nv_fatbin / __nv_relfatbin sections) and in raw fatbin,
 * cubin and PTX files. Exit 0 when nothing is flagged, 1 when something is,
 * 2 on error. C only: the C++ demangler is looked up at run time. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audit/audit.h"
#include "fatbin/fatbin.h"

#define MAX_ARCH 1024   /* sm numbers counted per architecture (all real ones) */
#define NVERDICTS (ES_AUDIT_UNREADABLE + 1)

typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);

typedef struct file_stats {
    unsigned long kernels, by_verdict[NVERDICTS];
    unsigned long arch_kernels[MAX_ARCH], arch_flagged[MAX_ARCH], arch_float[MAX_ARCH];
    unsigned long ptx_kernels, ptx_float;
    unsigned long functions, functions_flagged;
} file_stats_t;

typedef struct cli {
    int json, all;
    demangle_fn demangle;
    const char *file;
    file_stats_t st;
    int first_kernel;   /* JSON comma handling */
} cli_t;

static void usage(FILE *f)
{
    fputs("usage: easyscale-audit [--json] [--all] FILE...\n"
          "Lists the GPU kernels with floating-point atomics in host ELF files\n"
          "(executables, shared libraries) and raw fatbin/cubin/PTX files.\n"
          "  --json   machine-readable output (one JSON document)\n"
          "  --all    list clean kernels too\n"
          "  --help   this text\n"
          "Verdicts: float-atomic (atomic add/reduction on a float type),\n"
          "cas-loop (compare-and-swap: possibly an emulated float atomic),\n"
          "unknown-arch (no opcode table for the SASS), unreadable (entry\n"
          "compressed in a form not read, or LTO-IR: not audited), clean.\n"
          "A kernel also takes the verdict of the functions it calls\n"
          "(via-call); device functions kept in their own sections are listed\n"
          "too (device-function).\n"
          "Exit status: 0 nothing flagged, 1 something flagged, 2 error.\n",
          f);
}

/* Length of the well-formed UTF-8 sequence at s (1 to 4), or 0. */
static int utf8_len(const unsigned char *s)
{
    int n = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3
          : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 2 && s[0] < 0xc2)
        return 0;   /* overlong */
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

/* A JSON string. Names come from the files audited, which may be corrupt:
 * control characters are escaped and bytes that are not UTF-8 become
 * U+FFFD, so that the document stays valid whatever the input. */
static void json_str(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    putchar('"');
    while (*s) {
        int n = utf8_len(s);
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if (*s < 0x20 || *s == 0x7f)
            printf("\\u%04x", *s);
        else if (n == 0)
            fputs("\\ufffd", stdout);
        else
            fwrite(s, 1, (size_t)n, stdout);
        s += n ? n : 1;
    }
    putchar('"');
}

/* A name on one text line: control characters (a corrupt image may hold
 * any byte) are shown as \xNN so that each kernel stays one line. */
static void text_str(const char *str)
{
    for (const unsigned char *s = (const unsigned char *)str; *s; s++) {
        if (*s < 0x20 || *s == 0x7f)
            printf("\\x%02x", *s);
        else
            putchar(*s);
    }
}

static const char *form_names[] = { "red", "atom", "ldgmc", "bulk", "tensor", "multimem", "shared" };

/* What stands for the name of an entry that was not audited. */
static const char *entry_label(const es_audit_kernel_t *k, char *buf, size_t len)
{
    if (k->entry_kind == ES_ENTRY_LTOIR)
        snprintf(buf, len, "(LTO-IR entry: device-linker input, not audited)");
    else if (k->entry_kind == ES_ENTRY_PTX || k->entry_kind == ES_ENTRY_CUBIN)
        snprintf(buf, len, "(entry compressed in a form not read)");
    else
        snprintf(buf, len, "(entry of unknown kind %d)", k->entry_kind);
    return buf;
}

static int on_kernel(const es_audit_kernel_t *k, void *arg)
{
    cli_t *c = arg;
    int v = k->verdict;
    if (v < 0 || v >= NVERDICTS)
        v = ES_AUDIT_UNREADABLE;
    if (k->name && !k->is_entry) {
        /* a device function in its own section: listed when flagged, its
         * verdict already folded into the kernels that call it */
        c->st.functions++;
        c->st.functions_flagged += v != ES_AUDIT_CLEAN;
        if (v == ES_AUDIT_CLEAN && !c->all)
            return 0;
        goto show;
    }
    c->st.kernels++;
    c->st.by_verdict[v]++;
    if (k->is_ptx) {
        c->st.ptx_kernels++;
        c->st.ptx_float += v == ES_AUDIT_FLOAT_ATOMIC;
    } else if (k->entry_kind == ES_ENTRY_CUBIN && k->arch < MAX_ARCH) {
        c->st.arch_kernels[k->arch]++;
        c->st.arch_flagged[k->arch] += v != ES_AUDIT_CLEAN;
        c->st.arch_float[k->arch] += v == ES_AUDIT_FLOAT_ATOMIC;
    }
    if (v == ES_AUDIT_CLEAN && !c->all)
        return 0;
show:;
    char *dm = NULL, label[64];
    const char *name = k->name ? k->name : entry_label(k, label, sizeof label);
    if (c->demangle && k->name && strncmp(k->name, "_Z", 2) == 0) {
        int st = 0;
        dm = c->demangle(k->name, NULL, NULL, &st);
        if (st != 0) {
            free(dm);
            dm = NULL;
        }
    }
    const char *shown = dm ? dm : name;
    char forms[64] = "";
    for (unsigned i = 0; i < sizeof form_names / sizeof form_names[0]; i++)
        if (k->forms & (1u << i)) {
            if (forms[0])
                strcat(forms, ",");
            strcat(forms, form_names[i]);
        }
    if (c->json) {
        printf("%s\n    {\"name\": ", c->first_kernel ? "" : ",");
        c->first_kernel = 0;
        json_str(name);
        printf(", \"demangled\": ");
        json_str(shown);
        printf(", \"arch\": %u, \"code\": \"%s\", \"verdict\": \"%s\", \"instructions\": %u, "
               "\"float_atomics\": %u, \"cas\": %u, \"int_atomics\": %u, \"tensor_reduce\": %u, "
               "\"forms\": \"%s\", \"entry\": %s, \"via_call\": %s, \"entry_offset\": %zu, "
               "\"entry_kind\": %d}",
               k->arch, k->is_ptx ? "ptx" : "sass", es_audit_verdict_name(v), k->counts.instructions,
               k->counts.float_atomics, k->counts.cas, k->counts.int_atomics,
               k->counts.tensor_reduce, forms, k->is_entry ? "true" : "false",
               k->via_call ? "true" : "false", k->entry_offset, k->entry_kind);
    } else {
        printf("%s: %-12s %s_%u  ", c->file, es_audit_verdict_name(v),
               k->is_ptx ? "compute" : k->entry_kind == ES_ENTRY_LTOIR ? "lto" : "sm", k->arch);
        text_str(shown);
        printf("  [insns=%u float-atomics=%u cas=%u int-atomics=%u%s%s%s%s]\n",
               k->counts.instructions, k->counts.float_atomics, k->counts.cas,
               k->counts.int_atomics, forms[0] ? " forms=" : "", forms,
               k->via_call ? " via-call" : "",
               k->name && !k->is_entry ? " device-function" : "");
    }
    free(dm);
    return 0;
}

static const char *err_text(int rc)
{
    switch (rc) {
    case -EINVAL: return "not an ELF file, fatbin, cubin or PTX text";
    case -EBADMSG: return "corrupt or truncated device code";
    case -ENOTSUP: return "unsupported format";
    case -ENOMEM: return "out of memory";
    }
    return strerror(-rc);
}

/* Audits one file; returns 0 or a negative errno (message already printed
 * in text mode; in JSON mode the caller prints it). */
static int audit_file(cli_t *c, const char *path, const char **why)
{
    int fd = -1, rc;
    void *map = MAP_FAILED;
    struct stat st;

    *why = NULL;
    /* O_NONBLOCK: opening a FIFO without a writer must not hang */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 || fstat(fd, &st) != 0) {
        rc = -errno;
        *why = strerror(errno);
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
        *why = S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file";
        goto out;
    }
    if (st.st_size == 0) {
        rc = -EINVAL;
        *why = "empty file";
        goto out;
    }
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        rc = -errno;
        *why = strerror(errno);
        goto out;
    }
    madvise(map, (size_t)st.st_size, MADV_SEQUENTIAL);
    size_t size = (size_t)st.st_size;
    const unsigned char *p = map;
    /* a runtime wrapper holds a pointer into the process that made it:
     * never follow one read from a file */
    static const unsigned char wrapper_magic[4] = { 0xb1, 0x43, 0x62, 0x46 };
    if (size >= 4 && memcmp(p, wrapper_magic, 4) == 0) {
        rc = -EINVAL;
        *why = "a runtime fatbin wrapper (pointers into another process): give the fatbin";
        goto out;
    }
    size_t probe_sz;
    int kind = es_image_probe(p, size, &probe_sz);
    if (kind > 0)
        rc = es_audit_image(p, size, on_kernel, c);
    else if (size >= 4 && memcmp(p, "\177ELF", 4) == 0)
        rc = es_audit_host_elf(p, size, on_kernel, c);
    else
        rc = kind;
    if (rc < 0)
        *why = err_text(rc);
out:
    if (map != MAP_FAILED)
        munmap(map, (size_t)st.st_size);
    if (fd >= 0)
        close(fd);
    return rc;
}

static void summary_text(const cli_t *c)
{
    const file_stats_t *s = &c->st;
    printf("%s: %lu kernels: %lu float-atomic, %lu cas-loop, %lu clean, %lu unknown-arch, "
           "%lu unreadable\n",
           c->file, s->kernels, s->by_verdict[ES_AUDIT_FLOAT_ATOMIC],
           s->by_verdict[ES_AUDIT_CAS_LOOP], s->by_verdict[ES_AUDIT_CLEAN],
           s->by_verdict[ES_AUDIT_UNKNOWN_ARCH], s->by_verdict[ES_AUDIT_UNREADABLE]);
    if (s->functions)
        printf("%s:   and %lu device functions in their own sections (%lu flagged)\n", c->file,
               s->functions, s->functions_flagged);
    if (s->kernels == 0)
        return;
    printf("%s:   per arch (kernels/float-atomic/flagged):", c->file);
    for (unsigned a = 0; a < MAX_ARCH; a++)
        if (s->arch_kernels[a])
            printf(" sm_%u %lu/%lu/%lu", a, s->arch_kernels[a], s->arch_float[a],
                   s->arch_flagged[a]);
    if (s->ptx_kernels)
        printf(" ptx %lu/%lu", s->ptx_kernels, s->ptx_float);
    printf("\n");
}

static void summary_json(const cli_t *c)
{
    const file_stats_t *s = &c->st;
    printf("\n  ], \"summary\": {\"kernels\": %lu, \"float_atomic\": %lu, \"cas_loop\": %lu, "
           "\"clean\": %lu, \"unknown_arch\": %lu, \"unreadable\": %lu, "
           "\"device_functions\": %lu, \"device_functions_flagged\": %lu, \"per_arch\": {",
           s->kernels, s->by_verdict[ES_AUDIT_FLOAT_ATOMIC], s->by_verdict[ES_AUDIT_CAS_LOOP],
           s->by_verdict[ES_AUDIT_CLEAN], s->by_verdict[ES_AUDIT_UNKNOWN_ARCH],
           s->by_verdict[ES_AUDIT_UNREADABLE], s->functions, s->functions_flagged);
    int first = 1;
    for (unsigned a = 0; a < MAX_ARCH; a++)
        if (s->arch_kernels[a]) {
            printf("%s\"sm_%u\": {\"kernels\": %lu, \"float_atomic\": %lu, \"flagged\": %lu}",
                   first ? "" : ", ", a, s->arch_kernels[a], s->arch_float[a], s->arch_flagged[a]);
            first = 0;
        }
    if (s->ptx_kernels)
        printf("%s\"ptx\": {\"kernels\": %lu, \"float_atomic\": %lu}", first ? "" : ", ",
               s->ptx_kernels, s->ptx_float);
    printf("}}");
}

int main(int argc, char **argv)
{
    static cli_t c;
    int nfiles = 0, flagged = 0, error = 0, opts_done = 0;

    for (int i = 1; i < argc; i++) {
        if (!opts_done && strcmp(argv[i], "--") == 0) {
            opts_done = 1;
        } else if (!opts_done && (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)) {
            usage(stdout);
            return 0;
        } else if (!opts_done && strcmp(argv[i], "--json") == 0) {
            c.json = 1;
        } else if (!opts_done && strcmp(argv[i], "--all") == 0) {
            c.all = 1;
        } else if (!opts_done && argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "easyscale-audit: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        } else {
            nfiles++;
        }
    }
    if (nfiles == 0) {
        usage(stderr);
        return 2;
    }
    void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
    if (h)
        c.demangle = (demangle_fn)(uintptr_t)dlsym(h, "__cxa_demangle");

    if (c.json)
        printf("{\"files\": [");
    int firstfile = 1;
    opts_done = 0;
    for (int i = 1; i < argc; i++) {
        if (!opts_done && strcmp(argv[i], "--") == 0) {
            opts_done = 1;
            continue;
        }
        if (!opts_done && argv[i][0] == '-' && argv[i][1])
            continue;
        const char *why;
        memset(&c.st, 0, sizeof c.st);
        c.file = argv[i];
        c.first_kernel = 1;
        if (c.json) {
            printf("%s\n {\"file\": ", firstfile ? "" : ",");
            json_str(argv[i]);
            printf(", \"kernels\": [");
        }
        firstfile = 0;
        int rc = audit_file(&c, argv[i], &why);
        if (rc < 0) {
            error = 1;
            fprintf(stderr, "easyscale-audit: %s: %s\n", argv[i], why ? why : err_text(rc));
        }
        unsigned long nflag =
            c.st.kernels - c.st.by_verdict[ES_AUDIT_CLEAN] + c.st.functions_flagged;
        if (nflag)
            flagged = 1;
        if (c.json) {
            summary_json(&c);
            if (rc < 0) {
                printf(", \"error\": ");
                json_str(why ? why : err_text(rc));
            }
            printf("}");
        } else {
            if (rc < 0)
                printf("%s: error: %s\n", argv[i], why ? why : err_text(rc));
            else if (c.st.kernels == 0 && c.st.functions == 0)
                printf("%s: no device code\n", argv[i]);
            if (rc >= 0 || c.st.kernels || c.st.functions)
                summary_text(&c);
        }
    }
    if (c.json)
        printf("\n]}\n");
    fflush(stdout);
    if (h)
        dlclose(h);
    return error ? 2 : flagged ? 1 : 0;
}

/* libFuzzer harness for the device-code readers (fatbin/fatbin.c) and the
 * float-atomic audit (audit/audit.c, audit/sass_tables.c): every input is
 * tried as a module image, as a host ELF file, as one kernel's SASS and as
 * PTX text, from an exactly-sized heap copy so that the address sanitizer
 * sees any read past the end. Built and run by `make fuzz` (clang with
 * -fsanitize=fuzzer,address,undefined), never by `make test`.
 *
 * Property checked besides "no crash, no over-read": every call returns 0 or
 * one of the documented negative errnos (fatbin/fatbin.h), and a probe never
 * claims more bytes than it was given. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit.h"
#include "fatbin/fatbin.h"

/* The errors fatbin/fatbin.h and audit/audit.h document. */
static void check_rc(int rc)
{
    if (rc == 0 || rc == -EINVAL || rc == -EBADMSG || rc == -ENOTSUP || rc == -ENOMEM)
        return;
    abort();
}

/* Touches every byte of what the audit reports, so that a name or a count
 * pointing outside valid memory is caught. */
static int on_kernel(const es_audit_kernel_t *k, void *arg)
{
    size_t *sum = arg;
    if (k->name)
        *sum += strlen(k->name);
    if (k->verdict < ES_AUDIT_CLEAN || k->verdict > ES_AUDIT_UNREADABLE)
        abort();
    if (k->counts.float_atomics > k->counts.instructions && !k->is_ptx)
        abort();
    return 0;
}

static int on_kernel_code(const char *name, const void *code, size_t size, void *arg)
{
    size_t *sum = arg;
    *sum += strlen(name);
    if (size)
        *sum += ((const unsigned char *)code)[size - 1];
    return 0;
}

static int on_func(const char *name, const char *code, size_t size, int is_entry, void *arg)
{
    (void)is_entry;
    return on_kernel_code(name, code, size, arg);
}

static int on_cg_func(const char *name, int is_entry, void *arg)
{
    size_t *sum = arg;
    *sum += strlen(name) + (size_t)is_entry;
    return 0;
}

static int on_cg_call(const char *caller, const char *callee, void *arg)
{
    size_t *sum = arg;
    *sum += strlen(caller) + strlen(callee);
    return 0;
}

/* Every reader on one entry's payload. */
static int on_entry(const es_fatbin_entry_t *e, void *arg)
{
    if (!e->data)
        return 0;
    if (e->kind == ES_ENTRY_CUBIN) {
        check_rc(es_cubin_kernels(e->data, e->size, on_kernel_code, arg));
        check_rc(es_cubin_callgraph(e->data, e->size, on_cg_func, on_cg_call, arg));
    } else if (e->kind == ES_ENTRY_PTX) {
        check_rc(es_ptx_functions(e->data, e->size, on_func, arg));
    }
    return 0;
}

static int on_section(const char *name, const void *data, size_t size, void *arg)
{
    (void)name;
    check_rc(es_fatbin_walk(data, size, on_entry, arg));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* keeps the callbacks' reads from being optimised away */
static volatile size_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* an exact copy: libFuzzer's own buffer may be followed by readable bytes */
    unsigned char *p;
    size_t sum = 0, probed = 0;
    es_audit_counts_t c;
    unsigned forms;

    /* a runtime wrapper holds a pointer that is followed by contract
     * (fatbin/fatbin.h): only a process's own wrappers may be passed, so
     * inputs that start like one are not images this harness may give */
    static const unsigned char wrapper_magic[4] = { 0xb1, 0x43, 0x62, 0x46 };
    if (size >= sizeof wrapper_magic && memcmp(data, wrapper_magic, sizeof wrapper_magic) == 0)
        return 0;
    p = malloc(size ? size : 1);
    if (!p)
        return 0;
    memcpy(p, data, size);

    int kind = es_image_probe(p, size, &probed);
    if (kind > 0 && probed > size)
        abort();
    if (kind <= 0)
        check_rc(kind);
    check_rc(es_audit_image(p, size, on_kernel, &sum));
    check_rc(es_audit_host_elf(p, size, on_kernel, &sum));
    check_rc(es_fatbin_walk(p, size, on_entry, &sum));
    check_rc(es_host_elf_fatbins(p, size, on_section, &sum));
    if (es_audit_sass(90, p, size, &c, &forms) < 0 ||
        es_audit_sass(80, p, size, &c, &forms) < 0 ||
        es_audit_ptx_text((const char *)p, size, &c, &forms) < 0)
        abort();
    free(p);
    sink = sum;
    return 0;
}

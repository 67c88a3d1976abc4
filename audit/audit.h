/* Float-atomic audit of device code: classifies every kernel of a module
 * image (fatbin, runtime wrapper, cubin, PTX) or of a host ELF file's fatbin
 * sections as clean, float-atomic (a floating-point atomic add, whose result
 * depends on the order the hardware applies it), cas-loop (a compare-and-swap
 * loop: possibly a float atomic emulated) or unknown-arch (SASS of an
 * architecture without an opcode table). Used by the easyscale-audit CLI and
 * by the shim once per loaded module.
 *
 * Contract: no global state, thread-safe, allocation only inside the call;
 * reads never go beyond the given size (an image of unknown size may pass
 * SIZE_MAX, see es_image_probe). Errors as fatbin/fatbin.h: -EINVAL not an
 * image, -EBADMSG corrupt or truncated, -ENOMEM. Entries compressed in a form
 * the reader cannot decode are reported (verdict ES_AUDIT_UNREADABLE), never
 * skipped.
 */
#ifndef ES_AUDIT_H
#define ES_AUDIT_H

#include <stddef.h>
#include <stdint.h>

enum es_audit_verdict {
    ES_AUDIT_CLEAN = 0,
    ES_AUDIT_CAS_LOOP,       /* compare-and-swap (loop): maybe an emulated float atomic */
    ES_AUDIT_FLOAT_ATOMIC,   /* float atomic add / reduction */
    ES_AUDIT_UNKNOWN_ARCH,   /* SASS of an architecture with no opcode table */
    ES_AUDIT_UNREADABLE,     /* entry compressed in a form not read, or not PTX
                                or SASS (LTO-IR): not audited (name NULL) */
};

/* Bits of es_audit_kernel_t.forms: which float-atomic forms were seen. */
enum es_audit_form {
    ES_AUDIT_FORM_RED = 1 << 0,       /* RED/REDG float add (red.add.f*) */
    ES_AUDIT_FORM_ATOM = 1 << 1,      /* ATOM/ATOMG float add (atom.add.f*) */
    ES_AUDIT_FORM_LDGMC = 1 << 2,     /* multimem load-reduce float add */
    ES_AUDIT_FORM_BULK = 1 << 3,      /* UBLKRED: bulk copy-reduce float add */
    ES_AUDIT_FORM_TENSOR = 1 << 4,    /* UTMAREDG: tensor bulk reduce add (type in the tensor map) */
    ES_AUDIT_FORM_MULTIMEM = 1 << 5,  /* PTX multimem.red float add */
    ES_AUDIT_FORM_SHARED = 1 << 6,    /* shared-memory float add: the compiler's
                                         32-bit ATOMS.CAST.SPIN loop (SASS), or
                                         atom/red.shared float add (PTX) */
};

typedef struct es_audit_counts {
    uint32_t instructions;   /* SASS instructions, or PTX statements */
    uint32_t float_atomics;  /* float atomic adds / reductions */
    uint32_t cas;            /* compare-and-swap instructions */
    uint32_t int_atomics;    /* other atomics (integer, exchange, min/max...) */
    uint32_t tensor_reduce;  /* tensor bulk reduce-add (also in float_atomics) */
} es_audit_counts_t;

typedef struct es_audit_kernel {
    const char *name;        /* mangled name, valid during the callback; NULL for
                                ES_AUDIT_UNREADABLE */
    unsigned arch;           /* sm number */
    int is_ptx;              /* 1: from a PTX entry, 0: from a cubin */
    int verdict;             /* enum es_audit_verdict */
    unsigned forms;          /* enum es_audit_form bits */
    es_audit_counts_t counts;   /* this function's own instructions */
    size_t entry_offset;     /* the entry's offset in the walked container */
    int is_entry;            /* 1: a kernel entry point; 0: a device function's
                                own section (relocatable/linked cubins) */
    int via_call;            /* 1: the verdict comes from a function it calls
                                (cubin .nv.callgraph, PTX call instructions) */
    int entry_kind;          /* the fatbin entry's kind (enum es_entry_kind,
                                e.g. ES_ENTRY_LTOIR for an unreadable LTO-IR
                                entry, or another value found) */
} es_audit_kernel_t;

/* Called once per kernel (cubin: once per `.text.<name>` section, device
 * functions included, is_entry telling them apart; PTX: once per `.entry`).
 * A kernel's verdict is the most severe of its own code and of every function
 * it calls directly or indirectly by name (float-atomic > cas-loop > clean);
 * calls through pointers are not followed. A non-zero return stops the
 * audit and is returned. */
typedef int (*es_audit_report_cb)(const es_audit_kernel_t *k, void *arg);

/* Audits every kernel of a module image (fatbin, wrapper, cubin, PTX). */
int es_audit_image(const void *image, size_t size, es_audit_report_cb cb, void *arg);

/* Audits every fatbin in a host ELF file's .nv_fatbin / __nv_relfatbin
 * sections. Returns -EINVAL if the file is not ELF. */
int es_audit_host_elf(const void *elf, size_t size, es_audit_report_cb cb, void *arg);

/* One kernel's SASS (`code`, 16-byte instructions) for architecture `arch`:
 * fills *counts and *forms, returns the verdict (ES_AUDIT_UNKNOWN_ARCH when no
 * table covers arch) or -EINVAL. */
int es_audit_sass(unsigned arch, const void *code, size_t size, es_audit_counts_t *counts,
                  unsigned *forms);

/* One kernel's PTX body text: same as es_audit_sass. */
int es_audit_ptx_text(const char *text, size_t size, es_audit_counts_t *counts, unsigned *forms);

/* "clean", "float-atomic", "cas-loop", "unknown-arch", "unreadable". */
const char *es_audit_verdict_name(int verdict);

/* 1 when an opcode table covers SASS of this sm number. */
int es_audit_arch_known(unsigned arch);

/* ---- per-architecture opcode tables (audit/sass_tables.c) ------------ */

enum es_sass_class {
    ES_SASS_NONE = 0,
    ES_SASS_FLOAT,      /* float atomic/reduction, whatever the other bits */
    ES_SASS_TYPED,      /* atomic whose data type is a field of the second word */
    ES_SASS_BULK,       /* UBLKRED: data type in another field */
    ES_SASS_TENSOR,     /* UTMAREDG: type from the tensor map, op field */
    ES_SASS_CAS,        /* compare-and-swap */
    ES_SASS_SPIN,       /* ATOMS.CAS / ATOMS.CAST.SPIN: the SPIN form on 32 bits is
                           the compiler's emulation of a shared float add */
    ES_SASS_INT,        /* integer / exchange atomic */
};

typedef struct es_sass_table {
    unsigned arch_lo, arch_hi;        /* sm numbers covered, inclusive */
    const char *family;
    const uint8_t *cls;               /* 4096 entries, by opcode (low 12 bits) */
    const uint8_t *form;              /* 4096 entries: es_audit_form of FLOAT opcodes */
    /* ES_SASS_TYPED: type = (w1 >> typed_shift) & 0xf; float if bit set in typed_float */
    unsigned typed_shift;
    uint16_t typed_float;
    /* ES_SASS_BULK: type = (w1 >> bulk_shift) & 0xf, float if bit set in bulk_float */
    unsigned bulk_shift;
    uint16_t bulk_float;
    /* ES_SASS_TENSOR: add when ((w1 >> tensor_op_shift) & 0xf) == tensor_op_add */
    unsigned tensor_op_shift, tensor_op_add;
    /* ES_SASS_SPIN: (w1 & spin_mask) == spin_mask marks the SPIN form, and
     * (w1 >> spin_size_shift) & 3 == 0 a 32-bit one */
    uint64_t spin_mask;
    unsigned spin_size_shift;
} es_sass_table_t;

/* The table for an sm number, or NULL. */
const es_sass_table_t *es_sass_table(unsigned arch);

#endif

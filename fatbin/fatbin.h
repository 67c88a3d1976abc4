/* Reader for NVIDIA device-code containers: fatbin containers (as found in a
 * host ELF's `.nv_fatbin` / `__nv_relfatbin` sections or passed to
 * cuModuleLoadData), the runtime's fatbin wrapper, raw cubin ELF images and
 * PTX text. One implementation, compiled into simcuda, the audit tool and the
 * shim. Uses libelf and libzstd.
 *
 * All functions are pure readers: they never write to the image, never
 * trust a size field without bounds-checking it against the buffer, and
 * return a negative errno on malformed input (-EINVAL not a container,
 * -EBADMSG corrupt or truncated, -ENOTSUP a compression it cannot read,
 * -ENOMEM).
 */
#ifndef ES_FATBIN_H
#define ES_FATBIN_H

#include <stddef.h>
#include <stdint.h>

enum es_image_kind {
    ES_IMAGE_UNKNOWN = 0,
    ES_IMAGE_FATBIN,      /* fatbin container (magic 0xBA55ED50) */
    ES_IMAGE_WRAPPER,     /* runtime fatbin wrapper (magic 0x466243b1) */
    ES_IMAGE_CUBIN,       /* ELF with e_machine EM_CUDA (190) */
    ES_IMAGE_PTX,         /* NUL-terminated PTX text */
};

/* Note: a runtime wrapper holds a pointer to its fatbin, which is followed:
 * pass wrappers only from this process's own memory, never from a file. */

/* Classifies an image and computes its size when the caller does not know
 * it (cuModuleLoadData receives no size): for a fatbin from its headers
 * (all consecutive containers), for a cubin from its ELF headers, for PTX
 * from the terminating NUL, for a wrapper the size of the fatbin it points
 * to. `avail` bounds the reading (SIZE_MAX when unknown; then a fatbin's
 * size is that of its first container only, since nothing after it is known
 * to belong to the image). Returns the kind
 * (> 0) and stores the size, or a negative errno. */
int es_image_probe(const void *image, size_t avail, size_t *size_out);

/* Entry kinds. nvcc -dlto also writes kind 8 entries (LTO-IR, NVVM
 * bitcode for the device linker, never loaded by the driver): those and any
 * other kind are walked with unreadable -ENOTSUP and no data. */
enum es_entry_kind { ES_ENTRY_PTX = 1, ES_ENTRY_CUBIN = 2, ES_ENTRY_LTOIR = 8 };

typedef struct es_fatbin_entry {
    int kind;               /* enum es_entry_kind, or another value found */
    unsigned arch;          /* sm number, e.g. 80, 90 */
    uint64_t flags;         /* raw entry flags */
    const void *data;       /* payload, decompressed (valid during callback) */
    size_t size;            /* payload size (PTX: without trailing NULs) */
    int unreadable;         /* -ENOTSUP when compressed in a form not read, or of
                               a kind other than PTX and cubin: data NULL */
    size_t offset;          /* entry header's offset in the walked buffer */
} es_fatbin_entry_t;

/* Calls cb for every entry of every container in an image of any kind (a
 * cubin or PTX image is reported as one entry). A non-zero return from cb
 * stops the walk and is returned. */
typedef int (*es_entry_cb)(const es_fatbin_entry_t *e, void *arg);
int es_fatbin_walk(const void *image, size_t size, es_entry_cb cb, void *arg);

/* Calls cb for every kernel of a cubin: `.text.<name>` sections of type
 * PROGBITS with code. `code` points at the section's bytes. */
typedef int (*es_kernel_cb)(const char *name, const void *code, size_t code_size,
                            void *arg);
int es_cubin_kernels(const void *elf, size_t size, es_kernel_cb cb, void *arg);

/* Calls cb for every `.entry` kernel of a PTX text, with the kernel's body
 * text as code (from its opening to its closing brace). */
int es_ptx_kernels(const char *ptx, size_t size, es_kernel_cb cb, void *arg);

/* Like es_ptx_kernels for every function of a PTX text: `.entry` kernels
 * (is_entry 1) and `.func` device functions with a body (is_entry 0). */
typedef int (*es_ptx_func_cb)(const char *name, const char *code, size_t code_size,
                              int is_entry, void *arg);
int es_ptx_functions(const char *ptx, size_t size, es_ptx_func_cb cb, void *arg);

/* Function structure of a cubin, with the names es_cubin_kernels gives:
 * fcb(name, is_entry) for every `.text.<name>` section in section order
 * (is_entry: it holds a kernel entry point, STO_CUDA_ENTRY, rather than only
 * device functions), then ccb(caller, callee) for every direct call that
 * `.nv.callgraph` records between two of them (relocatable and linked
 * cubins keep called functions in their own sections). Either cb may be
 * NULL; a non-zero return stops and is returned. */
typedef int (*es_cubin_func_cb)(const char *name, int is_entry, void *arg);
typedef int (*es_cubin_call_cb)(const char *caller, const char *callee, void *arg);
int es_cubin_callgraph(const void *elf, size_t size, es_cubin_func_cb fcb,
                       es_cubin_call_cb ccb, void *arg);

/* Calls cb for the host ELF file's `.nv_fatbin` and `__nv_relfatbin`
 * sections (data, size, section name). */
typedef int (*es_section_cb)(const char *section, const void *data, size_t size,
                             void *arg);
int es_host_elf_fatbins(const void *elf, size_t size, es_section_cb cb, void *arg);

#endif

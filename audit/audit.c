/* Float-atomic audit (see audit.h): walks module images with fatbin/fatbin.c
 * and classifies each kernel from its SASS (per-architecture opcode tables in
 * sass_tables.c, one table lookup per 128-bit instruction) or its PTX text
 * (atom/red/bulk/multimem instruction names). Stateless and thread-safe. */
#include "audit/audit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fatbin/fatbin.h"

#define SASS_INSN_BYTES 16        /* sm_70 and later: 128-bit instructions */
#define SASS_OPCODE_MASK 0xfffu   /* opcode: low 12 bits of the first word */
#define SASS_TYPE_MASK 0xfu       /* type and op fields are 4 bits wide */
#define SASS_SIZE_MASK 0x3u       /* operand size field: 0 means 32 bits */

const char *es_audit_verdict_name(int v)
{
    switch (v) {
    case ES_AUDIT_CLEAN: return "clean";
    case ES_AUDIT_CAS_LOOP: return "cas-loop";
    case ES_AUDIT_FLOAT_ATOMIC: return "float-atomic";
    case ES_AUDIT_UNKNOWN_ARCH: return "unknown-arch";
    case ES_AUDIT_UNREADABLE: return "unreadable";
    }
    return "?";
}

int es_audit_arch_known(unsigned arch)
{
    return es_sass_table(arch) != NULL;
}

static int verdict_of(const es_audit_counts_t *c)
{
    if (c->float_atomics)
        return ES_AUDIT_FLOAT_ATOMIC;
    if (c->cas)
        return ES_AUDIT_CAS_LOOP;
    return ES_AUDIT_CLEAN;
}

/* ---------------------------------------------------------------- SASS -- */

/* An atomic whose data type is the 4-bit field at `shift` of the second
 * word: float when that type's bit is set in `float_types`. */
static void count_typed(es_audit_counts_t *c, unsigned *f, unsigned form, uint64_t w1,
                        unsigned shift, uint16_t float_types)
{
    if (float_types & (1u << ((w1 >> shift) & SASS_TYPE_MASK))) {
        c->float_atomics++;
        *f |= form;
    } else {
        c->int_atomics++;
    }
}

int es_audit_sass(unsigned arch, const void *code, size_t size, es_audit_counts_t *counts,
                  unsigned *forms)
{
    es_audit_counts_t c = {0};
    unsigned f = 0;
    if ((!code && size) || !counts)
        return -EINVAL;
    c.instructions = (uint32_t)(size / SASS_INSN_BYTES);
    const es_sass_table_t *t = es_sass_table(arch);
    if (!t) {
        *counts = c;
        if (forms)
            *forms = 0;
        return ES_AUDIT_UNKNOWN_ARCH;
    }
    const unsigned char *p = code;
    for (size_t i = 0; i + SASS_INSN_BYTES <= size; i += SASS_INSN_BYTES) {
        uint64_t w0, w1;
        memcpy(&w0, p + i, 8);
        unsigned op = (unsigned)(w0 & SASS_OPCODE_MASK);
        unsigned k = t->cls[op];
        if (k == ES_SASS_NONE)
            continue;
        memcpy(&w1, p + i + 8, 8);
        switch (k) {
        case ES_SASS_FLOAT:
            c.float_atomics++;
            f |= t->form[op];
            break;
        case ES_SASS_TYPED:
            count_typed(&c, &f, t->form[op], w1, t->typed_shift, t->typed_float);
            break;
        case ES_SASS_BULK:
            count_typed(&c, &f, t->form[op], w1, t->bulk_shift, t->bulk_float);
            break;
        case ES_SASS_TENSOR:
            if (((w1 >> t->tensor_op_shift) & SASS_TYPE_MASK) == t->tensor_op_add) {
                c.float_atomics++;
                c.tensor_reduce++;
                f |= t->form[op];
            } else {
                c.int_atomics++;
            }
            break;
        case ES_SASS_CAS:
            c.cas++;
            break;
        case ES_SASS_SPIN:
            if ((w1 & t->spin_mask) == t->spin_mask &&
                ((w1 >> t->spin_size_shift) & SASS_SIZE_MASK) == 0) {
                c.float_atomics++;
                f |= t->form[op];
            } else {
                c.cas++;
            }
            break;
        default:
            c.int_atomics++;
            break;
        }
    }
    *counts = c;
    if (forms)
        *forms = f;
    return verdict_of(&c);
}

/* ----------------------------------------------------------------- PTX -- */

static int pblank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Does the dotted instruction name contain the component `w`? */
static int has_part(const char *ins, size_t n, const char *w)
{
    size_t wl = strlen(w);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && ins[j] != '.')
            j++;
        if (j - i == wl && memcmp(ins + i, w, wl) == 0)
            return 1;
        i = j + 1;
    }
    return 0;
}

static int starts(const char *ins, size_t n, const char *w)
{
    size_t wl = strlen(w);
    return n >= wl && memcmp(ins, w, wl) == 0;
}

static int float_type(const char *ins, size_t n)
{
    static const char *const types[] = { "f32", "f64", "f16", "f16x2", "bf16", "bf16x2", "e4m3",
                                         "e5m2", "e4m3x2", "e5m2x2", "e4m3x4", "e5m2x4" };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (has_part(ins, n, types[i]))
            return 1;
    return 0;
}

/* Classifies one PTX instruction name (e.g. "atom.global.add.f32"). */
static void ptx_insn(const char *ins, size_t n, es_audit_counts_t *c, unsigned *f)
{
    int is_atom = starts(ins, n, "atom.") || (n == 4 && memcmp(ins, "atom", 4) == 0);
    int is_red = starts(ins, n, "red.");
    int is_mm = starts(ins, n, "multimem.red.") || starts(ins, n, "multimem.ld_reduce.");
    int is_bulk = starts(ins, n, "cp.reduce.async.bulk.");
    if (!is_atom && !is_red && !is_mm && !is_bulk)
        return;
    if (is_atom && (has_part(ins, n, "cas") || has_part(ins, n, "cast"))) {
        c->cas++;
        return;
    }
    int add = has_part(ins, n, "add");
    if (is_bulk && has_part(ins, n, "tensor")) {
        /* element type comes from the tensor map */
        if (add) {
            c->float_atomics++;
            c->tensor_reduce++;
            *f |= ES_AUDIT_FORM_TENSOR;
        } else {
            c->int_atomics++;
        }
        return;
    }
    if (add && float_type(ins, n)) {
        c->float_atomics++;
        if ((is_atom || is_red) && (has_part(ins, n, "shared") || has_part(ins, n, "shared::cta") ||
                                    has_part(ins, n, "shared::cluster")))
            *f |= ES_AUDIT_FORM_SHARED;
        if (is_atom)
            *f |= ES_AUDIT_FORM_ATOM;
        else if (is_red)
            *f |= ES_AUDIT_FORM_RED;
        else if (is_mm)
            *f |= starts(ins, n, "multimem.ld_reduce.") ? ES_AUDIT_FORM_LDGMC
                                                        : ES_AUDIT_FORM_MULTIMEM;
        else
            *f |= ES_AUDIT_FORM_BULK;
        return;
    }
    c->int_atomics++;
}

typedef int (*call_cb)(const char *callee, size_t len, void *arg);

/* The callee of a PTX call statement ("call.uni (r), name, (args)"), or NULL
 * for an indirect call through a register. */
static const char *ptx_call_target(const char *q, const char *end, size_t *len)
{
    while (q < end && !pblank(*q))
        q++;   /* call{.uni} */
    while (q < end && pblank(*q))
        q++;
    if (q < end && *q == '(') {   /* return parameters */
        while (q < end && *q != ')')
            q++;
        if (q < end)
            q++;
        while (q < end && (pblank(*q) || *q == ','))
            q++;
    }
    const char *n0 = q;
    while (q < end && !pblank(*q) && *q != ',' && *q != '(' && *q != ';')
        q++;
    if (q == n0 || *n0 == '%')
        return NULL;
    *len = (size_t)(q - n0);
    return n0;
}

static int ptx_text(const char *text, size_t size, es_audit_counts_t *counts, unsigned *forms,
                    call_cb ccb, void *carg);

int es_audit_ptx_text(const char *text, size_t size, es_audit_counts_t *counts, unsigned *forms)
{
    return ptx_text(text, size, counts, forms, NULL, NULL);
}

static int ptx_text(const char *text, size_t size, es_audit_counts_t *counts, unsigned *forms,
                    call_cb ccb, void *carg)
{
    es_audit_counts_t c = {0};
    unsigned f = 0;
    if ((!text && size) || !counts)
        return -EINVAL;
    const char *p = text, *e = text + size;
    while (p < e) {
        /* one statement: skip blanks, comments, braces, labels, predicates */
        while (p < e && (pblank(*p) || *p == '{' || *p == '}' || *p == ';'))
            p++;
        if (p >= e || *p == 0)
            break;
        if (e - p >= 2 && p[0] == '/' && p[1] == '/') {
            const char *nl = memchr(p, '\n', (size_t)(e - p));
            p = nl ? nl + 1 : e;
            continue;
        }
        if (e - p >= 2 && p[0] == '/' && p[1] == '*') {
            const char *q = p + 2;
            while (q + 1 < e && !(q[0] == '*' && q[1] == '/'))
                q++;
            p = q + 1 < e ? q + 2 : e;
            continue;
        }
        const char *s = p;
        while (p < e && *p != ';' && *p != '{' && *p != '}' && *p != 0)
            p++;
        const char *end = p;
        /* label "name:" at the start (no '.' in a label; "shared::cta" is
         * part of an instruction name) */
        const char *q = s;
        while (q < end && !pblank(*q) && *q != ':' && *q != '.')
            q++;
        if (q < end && *q == ':') {
            p = q + 1;
            continue;
        }
        q = s;
        if (*q == '@') {
            while (q < end && !pblank(*q))
                q++;
            while (q < end && pblank(*q))
                q++;
        }
        if (q >= end || *q == '.')
            continue;   /* directive (.reg, .pragma, ...) */
        const char *n0 = q;
        while (q < end && !pblank(*q))
            q++;
        c.instructions++;
        ptx_insn(n0, (size_t)(q - n0), &c, &f);
        if (ccb && (size_t)(q - n0) >= 4 && memcmp(n0, "call", 4) == 0 &&
            (q - n0 == 4 || n0[4] == '.')) {
            size_t tl;
            const char *t = ptx_call_target(n0, end, &tl);
            if (t) {
                int rc = ccb(t, tl, carg);
                if (rc)
                    return rc;
            }
        }
    }
    *counts = c;
    if (forms)
        *forms = f;
    return verdict_of(&c);
}

/* --------------------------------------------------------------- walk -- */

typedef struct audit_ctx {
    es_audit_report_cb cb;
    void *arg;
    const es_fatbin_entry_t *ent;
} audit_ctx_t;

/* The functions of one cubin or PTX entry, their own verdicts and the calls
 * between them; verdicts are then raised along the calls. */
typedef struct func {
    const char *name;   /* cubin: into the image; PTX: owned copy */
    es_audit_counts_t counts;
    unsigned forms;
    int verdict, own, is_entry;
} func_t;

typedef struct module {
    func_t *f;
    size_t n, cap;
    uint32_t *calls;    /* pairs (caller, callee) of indices */
    size_t ncalls, capcalls;
    size_t *order;      /* indices sorted by name, for lookups */
    int own_names;
    size_t fill;        /* es_cubin_callgraph's fcb position */
} module_t;

static void module_free(module_t *m)
{
    if (m->own_names)
        for (size_t i = 0; i < m->n; i++)
            free((char *)m->f[i].name);
    free(m->f);
    free(m->calls);
    free(m->order);
}

static int module_add(module_t *m, const char *name, int own_name)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        func_t *nf = realloc(m->f, cap * sizeof *nf);
        if (!nf)
            return -ENOMEM;
        m->f = nf;
        m->cap = cap;
    }
    func_t *f = &m->f[m->n];
    memset(f, 0, sizeof *f);
    if (own_name) {
        f->name = strdup(name);
        if (!f->name)
            return -ENOMEM;
    } else {
        f->name = name;
    }
    m->n++;
    return 0;
}

static int by_name(const void *a, const void *b)
{
    const func_t *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

/* Builds the name index: order[] holds indices sorted by name. */
static int module_index(module_t *m)
{
    const func_t **tmp = malloc((m->n ? m->n : 1) * sizeof *tmp);
    m->order = malloc((m->n ? m->n : 1) * sizeof *m->order);
    if (!tmp || !m->order) {
        free(tmp);
        return -ENOMEM;
    }
    for (size_t i = 0; i < m->n; i++)
        tmp[i] = &m->f[i];
    qsort(tmp, m->n, sizeof *tmp, by_name);
    for (size_t i = 0; i < m->n; i++)
        m->order[i] = (size_t)(tmp[i] - m->f);
    free(tmp);
    return 0;
}

static long module_find(const module_t *m, const char *name, size_t len)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *s = m->f[m->order[mid]].name;
        int c = strncmp(s, name, len);
        if (c == 0 && s[len] != 0)
            c = 1;
        if (c == 0)
            return (long)m->order[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static int module_call(module_t *m, const char *caller, size_t cl, const char *callee, size_t el)
{
    long a = module_find(m, caller, cl), b = module_find(m, callee, el);
    if (a < 0 || b < 0 || a == b)
        return 0;   /* outside this image */
    if (m->ncalls == m->capcalls) {
        size_t cap = m->capcalls ? m->capcalls * 2 : 64;
        uint32_t *nc = realloc(m->calls, cap * 2 * sizeof *nc);
        if (!nc)
            return -ENOMEM;
        m->calls = nc;
        m->capcalls = cap;
    }
    m->calls[2 * m->ncalls] = (uint32_t)a;
    m->calls[2 * m->ncalls + 1] = (uint32_t)b;
    m->ncalls++;
    return 0;
}

static int severity(int v)
{
    return v == ES_AUDIT_FLOAT_ATOMIC ? 3 : v == ES_AUDIT_CAS_LOOP ? 2 : v == ES_AUDIT_CLEAN ? 0 : 1;
}

/* Raises each caller's verdict to its callees' until nothing changes (at
 * most n rounds: a longest call chain has n functions). */
static void module_propagate(module_t *m)
{
    for (size_t round = 0; round < m->n; round++) {
        int changed = 0;
        for (size_t i = 0; i < m->ncalls; i++) {
            func_t *a = &m->f[m->calls[2 * i]], *b = &m->f[m->calls[2 * i + 1]];
            if (severity(b->verdict) > severity(a->verdict) &&
                (b->verdict == ES_AUDIT_FLOAT_ATOMIC || b->verdict == ES_AUDIT_CAS_LOOP)) {
                a->verdict = b->verdict;
                changed = 1;
            }
        }
        if (!changed)
            break;
    }
}

static int module_report(const module_t *m, audit_ctx_t *a, int is_ptx, int entries_only)
{
    for (size_t i = 0; i < m->n; i++) {
        const func_t *f = &m->f[i];
        if (entries_only && !f->is_entry)
            continue;
        es_audit_kernel_t k = {0};
        k.name = f->name;
        k.arch = a->ent->arch;
        k.is_ptx = is_ptx;
        k.entry_offset = a->ent->offset;
        k.verdict = f->verdict;
        k.forms = f->forms;
        k.counts = f->counts;
        k.is_entry = f->is_entry;
        k.via_call = f->verdict != f->own;
        k.entry_kind = a->ent->kind;
        int rc = a->cb(&k, a->arg);
        if (rc)
            return rc;
    }
    return 0;
}

typedef struct sass_fill {
    module_t *m;
    unsigned arch;
} sass_fill_t;

static int sass_kernel(const char *name, const void *code, size_t size, void *arg)
{
    sass_fill_t *s = arg;
    int rc = module_add(s->m, name, 0);
    if (rc)
        return rc;
    func_t *f = &s->m->f[s->m->n - 1];
    f->verdict = es_audit_sass(s->arch, code, size, &f->counts, &f->forms);
    if (f->verdict < 0)
        return f->verdict;
    f->own = f->verdict;
    f->is_entry = 1;   /* until the symbol table says otherwise */
    return 0;
}

static int cubin_func(const char *name, int is_entry, void *arg)
{
    module_t *m = arg;
    /* same sections in the same order as es_cubin_kernels */
    if (m->fill < m->n && strcmp(m->f[m->fill].name, name) == 0)
        m->f[m->fill].is_entry = is_entry;
    m->fill++;
    return 0;
}

static int cubin_call(const char *caller, const char *callee, void *arg)
{
    return module_call(arg, caller, strlen(caller), callee, strlen(callee));
}

static int audit_cubin(audit_ctx_t *a, const es_fatbin_entry_t *e)
{
    module_t m = {0};
    sass_fill_t s = { &m, e->arch };
    int rc = es_cubin_kernels(e->data, e->size, sass_kernel, &s);
    if (rc == 0 && m.n > 0) {
        rc = module_index(&m);
        if (rc == 0)
            rc = es_cubin_callgraph(e->data, e->size, cubin_func, cubin_call, &m);
        if (rc == 0)
            module_propagate(&m);
    }
    if (rc == 0)
        rc = module_report(&m, a, 0, 0);
    module_free(&m);
    return rc;
}

typedef struct ptx_fill {
    module_t *m;
    const char **code;
    size_t *size;
    size_t cap;
} ptx_fill_t;

static int ptx_func(const char *name, const char *code, size_t size, int is_entry, void *arg)
{
    ptx_fill_t *p = arg;
    int rc = module_add(p->m, name, 1);
    if (rc)
        return rc;
    func_t *f = &p->m->f[p->m->n - 1];
    f->is_entry = is_entry;
    if (p->m->n > p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        const char **nc = realloc(p->code, cap * sizeof *nc);
        if (!nc)
            return -ENOMEM;
        p->code = nc;
        size_t *ns = realloc(p->size, cap * sizeof *ns);
        if (!ns)
            return -ENOMEM;
        p->size = ns;
        p->cap = cap;
    }
    p->code[p->m->n - 1] = code;
    p->size[p->m->n - 1] = size;
    return 0;
}

typedef struct ptx_caller {
    module_t *m;
    const char *caller;
} ptx_caller_t;

static int ptx_call(const char *callee, size_t len, void *arg)
{
    ptx_caller_t *c = arg;
    return module_call(c->m, c->caller, strlen(c->caller), callee, len);
}

static int audit_ptx(audit_ctx_t *a, const es_fatbin_entry_t *e)
{
    module_t m = { .own_names = 1 };
    ptx_fill_t p = { &m, NULL, NULL, 0 };
    int rc = es_ptx_functions(e->data, e->size, ptx_func, &p);
    if (rc == 0)
        rc = module_index(&m);
    for (size_t i = 0; rc == 0 && i < m.n; i++) {
        func_t *f = &m.f[i];
        ptx_caller_t c = { &m, f->name };
        f->verdict = ptx_text(p.code[i], p.size[i], &f->counts, &f->forms, ptx_call, &c);
        if (f->verdict < 0)
            rc = f->verdict;
        f->own = f->verdict;
    }
    if (rc == 0) {
        module_propagate(&m);
        rc = module_report(&m, a, 1, 1);
    }
    free(p.code);
    free(p.size);
    module_free(&m);
    return rc;
}

static int audit_entry(const es_fatbin_entry_t *e, void *arg)
{
    audit_ctx_t *a = arg;
    a->ent = e;
    if (e->unreadable || !e->data || (e->kind != ES_ENTRY_CUBIN && e->kind != ES_ENTRY_PTX)) {
        /* compressed in a form not read, or a kind of entry we do not know */
        es_audit_kernel_t k = {0};
        k.arch = e->arch;
        k.is_ptx = e->kind == ES_ENTRY_PTX;
        k.verdict = ES_AUDIT_UNREADABLE;
        k.entry_offset = e->offset;
        k.entry_kind = e->kind;
        return a->cb(&k, a->arg);
    }
    return e->kind == ES_ENTRY_CUBIN ? audit_cubin(a, e) : audit_ptx(a, e);
}

int es_audit_image(const void *image, size_t size, es_audit_report_cb cb, void *arg)
{
    if (!image || !cb)
        return -EINVAL;
    audit_ctx_t a = { cb, arg, NULL };
    return es_fatbin_walk(image, size, audit_entry, &a);
}

static int audit_section(const char *name, const void *data, size_t size, void *arg)
{
    audit_ctx_t *a = arg;
    (void)name;
    return es_fatbin_walk(data, size, audit_entry, a);
}

int es_audit_host_elf(const void *elf, size_t size, es_audit_report_cb cb, void *arg)
{
    if (!elf || !cb)
        return -EINVAL;
    audit_ctx_t a = { cb, arg, NULL };
    return es_host_elf_fatbins(elf, size, audit_section, &a);
}

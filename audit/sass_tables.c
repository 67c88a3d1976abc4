/* Per-architecture SASS opcode tables for the float-atomic audit.
 *
 * An sm_70+ instruction is 128 bits; the low 12 bits of its first 64-bit word
 * are the opcode (docs/VENDOR-FACTS.md). No disassembler ships with the
 * toolkit here, so every value below was derived by compiling
 * tests/audit/audit_kernels.cu with `nvcc -cubin -arch=sm_XX` and diffing
 * kernels that differ only in the atomic's type, operation, scope or space,
 * then checked by tests/audit/library_test.c on every architecture listed.
 *
 * Families (identical atomic encodings within each, verified by compiling
 * the same kernels for every member):
 *   sm_75            RED 0x98e, ATOMG 0x3a8, ATOM 0x38a share opcodes between
 *                    integer and float; the type is (w1 >> 9) & 0xf:
 *                    0 U32, 1 S32, 2 U64, 3 F32, 4 F16x2, 5 S64, 6 F64.
 *   sm_80..sm_89     the same with ATOMG 0x9a8 and ATOM 0x98a (sm_80, 86, 87,
 *                    88, 89 give identical bits).
 *   sm_90            float atomics have their own opcodes: REDG 0x9a6,
 *                    ATOMG 0x9a3, ATOM (generic) 0x9a2, LDGMC 0x9a5; integer
 *                    ones REDG 0x98e, ATOMG 0x9a8, ATOM 0x98a, ATOMS 0x98c,
 *                    LDGMC 0x9a4 (on sm_90 (w1 >> 9) & 0xf == 3 is S64 on
 *                    0x98e, so the sm_80 type rule must not be applied).
 *                    UBLKRED 0x3bb with type (w1 >> 17) & 0xf: 0 U32, 1 S32,
 *                    2 U64, 4 F16, 5 F32, 7 F64, 8 BF16. UTMAREDG 0x3b6 with
 *                    op (w1 >> 23) & 0xf: 0 add, 2 max.
 *   sm_100..sm_121   as sm_90, plus ATOMS.CAST.SPIN 0x58d (sm_100, 103, 110,
 *                    120, 121 give identical atomic bits).
 *                    One value comes from NVIDIA's code, not from a test
 *                    kernel: 0x3a3 (w1 type byte 0xff = F64, as on ATOMG
 *                    float, no memory descriptor) occurs in libcublasLt only,
 *                    128 times in each sm_90/100/120 build of the
 *                    cutlass_80_tensorop_z884gemm (imma_emu) kernels whose
 *                    sm_80/86 builds have RED.ADD.F64 (0x98e, type 6) at the
 *                    same 128 places; ptxas did not emit it for the test
 *                    kernels (memory descriptor forms 0x9xx instead).
 * CAS forms on all: ATOMG.CAS 0x3a9, ATOM.CAS 0x38b, ATOMS.CAS(T) 0x38d;
 * shared-memory integer atomics: 0x38c (sm_75..89).
 * 16-bit scalar float atomics (f16, bf16) compile to CAS loops (ATOM.CAS /
 * ATOMG.CAS: verdict cas-loop), bf16x2 does on sm_75..89; shared-memory float
 * adds compile to ATOMS.CAST.SPIN loops (see SPIN_MASK: 32-bit ones are
 * classed float-atomic, 64-bit ones cas-loop).
 */
#include "audit/audit.h"

#include <stddef.h>

/* Type values treated as floating point, as bit masks over the 4-bit type
 * field: every value except the integer types seen (sm_75..89: 0 U32,
 * 1 S32, 2 U64, 5 S64; UBLKRED: 0 U32, 1 S32, 2 U64). A value no test
 * kernel produced (7..15 on sm_75..89; 3, 6, 9..15 on UBLKRED; none occurs
 * in libcublas, libcublasLt, libcudnn_ops, libcudnn_adv or
 * libcudnn_engines_precompiled of CUDA 13 / cuDNN 9.19 either) is thus
 * flagged, never passed as clean: the audit errs towards a false alarm. */
#define TYPE_MASK_ALL 0xffffu
#define TYPED_INT_SM75_89 ((1u << 0) | (1u << 1) | (1u << 2) | (1u << 5))
#define TYPED_FLOAT_SM75_89 (TYPE_MASK_ALL & ~TYPED_INT_SM75_89)
#define BULK_INT_SM90 ((1u << 0) | (1u << 1) | (1u << 2))
#define BULK_FLOAT_SM90 (TYPE_MASK_ALL & ~BULK_INT_SM90)
/* ATOMS.CAST.SPIN vs ATOMS.CAS: bits 23-24 of w1 (0x01800000 in the
 * compiler's loops, 0 in an explicit atomicCAS); operand size in bits 9-10
 * (0: 32 bits, 2: 64 bits). All 32-bit integer operations exist natively on
 * shared memory (ATOMS), so a 32-bit SPIN loop is the compiler's emulation of
 * a float add (f32, f16x2, bf16x2); a 64-bit one may be f64 or u64 add. */
#define SPIN_MASK 0x01800000ull
#define SPIN_SIZE_SHIFT 9

static const uint8_t cls_turing[4096] = {
    [0x98e] = ES_SASS_TYPED,   /* RED */
    [0x3a8] = ES_SASS_TYPED,   /* ATOMG */
    [0x38a] = ES_SASS_TYPED,   /* ATOM (generic) */
    [0x3a9] = ES_SASS_CAS,     /* ATOMG.CAS */
    [0x38b] = ES_SASS_CAS,     /* ATOM.CAS */
    [0x38d] = ES_SASS_SPIN,    /* ATOMS.CAS / ATOMS.CAST.SPIN */
    [0x38c] = ES_SASS_INT,     /* ATOMS (integer) */
};
static const uint8_t form_turing[4096] = {
    [0x38d] = ES_AUDIT_FORM_SHARED,
    [0x98e] = ES_AUDIT_FORM_RED,
    [0x3a8] = ES_AUDIT_FORM_ATOM,
    [0x38a] = ES_AUDIT_FORM_ATOM,
};

static const uint8_t cls_ampere[4096] = {
    [0x98e] = ES_SASS_TYPED,   /* RED */
    [0x9a8] = ES_SASS_TYPED,   /* ATOMG */
    [0x98a] = ES_SASS_TYPED,   /* ATOM (generic) */
    [0x3a9] = ES_SASS_CAS,
    [0x38b] = ES_SASS_CAS,
    [0x38d] = ES_SASS_SPIN,
    [0x38c] = ES_SASS_INT,
};
static const uint8_t form_ampere[4096] = {
    [0x38d] = ES_AUDIT_FORM_SHARED,
    [0x98e] = ES_AUDIT_FORM_RED,
    [0x9a8] = ES_AUDIT_FORM_ATOM,
    [0x98a] = ES_AUDIT_FORM_ATOM,
};

/* sm_90 and later: float atomics have opcodes of their own */
#define CLS_SM90_COMMON                                                  \
    [0x9a6] = ES_SASS_FLOAT,   /* REDG float (also multimem.red float) */ \
    [0x9a3] = ES_SASS_FLOAT,   /* ATOMG float */                          \
    [0x9a2] = ES_SASS_FLOAT,   /* ATOM float (generic) */                 \
    [0x9a5] = ES_SASS_FLOAT,   /* LDGMC float (multimem.ld_reduce) */     \
    [0x3a3] = ES_SASS_FLOAT,   /* float atomic, other operand form (see top) */ \
    [0x3bb] = ES_SASS_BULK,    /* UBLKRED */                              \
    [0x3b6] = ES_SASS_TENSOR,  /* UTMAREDG */                             \
    [0x3a9] = ES_SASS_CAS,     /* ATOMG.CAS */                            \
    [0x38b] = ES_SASS_CAS,     /* ATOM.CAS */                             \
    [0x98e] = ES_SASS_INT,     /* REDG integer */                         \
    [0x9a8] = ES_SASS_INT,     /* ATOMG integer / EXCH */                 \
    [0x98a] = ES_SASS_INT,     /* ATOM integer (generic) */               \
    [0x98c] = ES_SASS_INT,     /* ATOMS integer */                        \
    [0x9a4] = ES_SASS_INT      /* LDGMC integer */

static const uint8_t cls_hopper[4096] = {
    CLS_SM90_COMMON,
    [0x38d] = ES_SASS_SPIN,    /* ATOMS.CAS / ATOMS.CAST.SPIN */
};
static const uint8_t cls_blackwell[4096] = {
    CLS_SM90_COMMON,
    [0x38d] = ES_SASS_SPIN,    /* ATOMS.CAS (explicit atomicCAS on shared) */
    [0x58d] = ES_SASS_SPIN,    /* ATOMS.CAST.SPIN (compiler's loop) */
};
static const uint8_t form_hopper[4096] = {
    [0x38d] = ES_AUDIT_FORM_SHARED,
    [0x58d] = ES_AUDIT_FORM_SHARED,
    [0x9a6] = ES_AUDIT_FORM_RED,
    [0x9a3] = ES_AUDIT_FORM_ATOM,
    [0x9a2] = ES_AUDIT_FORM_ATOM,
    [0x9a5] = ES_AUDIT_FORM_LDGMC,
    [0x3a3] = ES_AUDIT_FORM_RED,
    [0x3bb] = ES_AUDIT_FORM_BULK,
    [0x3b6] = ES_AUDIT_FORM_TENSOR,
};

static const es_sass_table_t tables[] = {
    { 75, 75, "turing", cls_turing, form_turing, 9, TYPED_FLOAT_SM75_89, 0, 0, 0, 0,
      SPIN_MASK, SPIN_SIZE_SHIFT },
    { 80, 89, "ampere/ada", cls_ampere, form_ampere, 9, TYPED_FLOAT_SM75_89, 0, 0, 0, 0,
      SPIN_MASK, SPIN_SIZE_SHIFT },
    { 90, 90, "hopper", cls_hopper, form_hopper, 0, 0, 17, BULK_FLOAT_SM90, 23, 0,
      SPIN_MASK, SPIN_SIZE_SHIFT },
    { 100, 121, "blackwell", cls_blackwell, form_hopper, 0, 0, 17, BULK_FLOAT_SM90, 23, 0,
      SPIN_MASK, SPIN_SIZE_SHIFT },
};

const es_sass_table_t *es_sass_table(unsigned arch)
{
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        if (arch >= tables[i].arch_lo && arch <= tables[i].arch_hi)
            return &tables[i];
    return NULL;
}

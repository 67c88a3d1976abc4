/* IEEE binary16 ("half") and bfloat16 conversions, the one implementation
 * shared by simcuda's libraries: cuBLAS and cuBLASLt (half / bf16 GEMM
 * inputs, outputs and input rounding, computed in float), cuDNN (the
 * backend's half / bf16 <-> fp32 conversion) and NCCL (half / bf16
 * reductions, computed exactly in double and rounded once).
 *
 * Narrowing rounds to nearest, ties to even, with gradual underflow to the
 * 16-bit subnormals and overflow to infinity (as the device's __float2half_rn
 * and __float2bfloat16_rn). A float converts exactly to double, so the float
 * and the double entry points share one rounding and agree on every non-NaN
 * value. They differ only for NaN, where each keeps what its library has
 * always produced:
 *   float  (cuBLAS, cuBLASLt, cuDNN)
 *                    NaN keeps its sign and the top payload bits, made quiet
 *                    (a NaN half widens with its whole payload);
 *   double (NCCL)    narrowing gives the canonical NaN (0x7e00, 0x7fc0, sign
 *                    dropped); a NaN half widens to the default NaN with the
 *                    half's sign, a NaN bf16 to its float widened to double.
 * Widening is exact. All functions are pure and thread-safe. */
#ifndef SIM_F16_H
#define SIM_F16_H

#include <stdint.h>

/* Half (binary16 bits) to float / double: exact. */
float sim_f16_half_to_float(uint16_t h);
double sim_f16_half_to_double(uint16_t h);

/* Float / double to half bits, round to nearest even; |x| >= 65520 gives
 * infinity, |x| <= 2^-25 gives (signed) zero. */
uint16_t sim_f16_float_to_half(float f);
uint16_t sim_f16_double_to_half(double d);

/* Bfloat16 (the top 16 bits of a float) to float / double: exact. */
float sim_f16_bf16_to_float(uint16_t h);
double sim_f16_bf16_to_double(uint16_t h);

/* Float / double to bfloat16 bits, round to nearest even (overflow to
 * infinity, gradual underflow as for float). */
uint16_t sim_f16_float_to_bf16(float f);
uint16_t sim_f16_double_to_bf16(double d);

#endif

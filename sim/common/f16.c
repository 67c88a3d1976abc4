/* IEEE half and bfloat16 conversions (see f16.h): the entry points of the
 * one implementation in f16_impl.h, which the libraries' kernels include
 * too. */
#include "sim/common/f16.h"
#include "sim/common/f16_impl.h"

float sim_f16_half_to_float(uint16_t h) { return sim_f16_half_to_float_(h); }
double sim_f16_half_to_double(uint16_t h) { return sim_f16_half_to_double_(h); }
uint16_t sim_f16_float_to_half(float f) { return sim_f16_float_to_half_(f); }
uint16_t sim_f16_double_to_half(double d) { return sim_f16_double_to_half_(d); }
float sim_f16_bf16_to_float(uint16_t h) { return sim_f16_bf16_to_float_(h); }
double sim_f16_bf16_to_double(uint16_t h) { return sim_f16_bf16_to_double_(h); }
uint16_t sim_f16_float_to_bf16(float f) { return sim_f16_float_to_bf16_(f); }
uint16_t sim_f16_double_to_bf16(double d) { return sim_f16_double_to_bf16_(d); }

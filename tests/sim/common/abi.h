/* Shared by the simcuda library tests (cuBLAS, cuDNN, NCCL): checks a built
 * library's ELF interface against what NVIDIA ships. */
#ifndef SIM_TEST_ABI_H
#define SIM_TEST_ABI_H

#include <stddef.h>

/* Checks the library at $ES_BUILD/<rel>:
 *  - its soname is `soname`, it has no NEEDED entry naming libcuda and
 *    imports no cu* symbol (VENDOR-FACTS: NVIDIA's libraries dlopen
 *    libcuda.so.1 and get every entry point through cuGetProcAddress);
 *  - every defined dynamic symbol carries NVIDIA's version: "@@<version>"
 *    when version is non-NULL, none at all when it is NULL (NCCL);
 *  - when NVIDIA's library is installed ($CUDA_HOME or /usr/local/cuda,
 *    lib64/<soname>), every export, name and version together, is one of its
 *    exports.
 * Returns 0, or -1 with the reason (offending names) in why. */
int sim_abi_check(const char *rel, const char *soname, const char *version, char *why,
                  size_t len);

#endif

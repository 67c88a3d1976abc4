/* CUCPU_HD: marks a function that both host code and kernels call
 * (__host__ __device__ under nvcc, nothing for a host C or C++ compiler),
 * so one header of such functions serves a library's C sources and its
 * .cu kernels alike. Keep these functions in the common subset of C and
 * C++ (no C++ features, no C-only designated initialisers). */
#ifndef CUCPU_HD_H
#define CUCPU_HD_H

#ifdef __CUDACC__
#define CUCPU_HD static __host__ __device__ __forceinline__
#else
#define CUCPU_HD static inline
#endif

#endif

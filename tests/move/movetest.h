/* Helpers shared by the tests of move/ (memory registry, swap engine,
 * virtual handles): they drive simcuda's real driver directly, with the
 * engine's table (move/drv.h) loaded from the same library. */
#ifndef ES_TESTS_MOVE_MOVETEST_H
#define ES_TESTS_MOVE_MOVETEST_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

/* A private capacity table (SIMCUDA_SHM_NAME, removed at exit), cuInit,
 * es_drv_load from libcuda.so.1, es_memreg_init. Aborts on failure. */
void ct_setup(const char *tag);

/* Like ct_setup, keeping the SIMCUDA_SHM_NAME the caller set (processes
 * forked from one test share a capacity table). */
void ct_setup_shared(void);

/* The primary context of device dev, retained and made current. */
CUcontext ct_primary(int dev);
/* Releases the primary context of dev until the driver reports it
 * inactive (the application's retains included). */
void ct_primary_drop(int dev);

/* Bytes used on device dev as every process sees it (total - free). */
size_t ct_used(int dev);

/* Fills / checks n bytes at device address p with a pattern derived from
 * seed, through host copies (never touching device memory from the host).
 * ct_check returns 1 when equal. */
void ct_fill(CUdeviceptr p, size_t n, uint32_t seed);
/* The pattern itself: words from word index first. */
void ct_pattern(uint32_t *buf, size_t words, size_t first, uint32_t seed);
int ct_check(CUdeviceptr p, size_t n, uint32_t seed);

#define CK(x) assert_int_equal((x), CUDA_SUCCESS)

#endif

/* cucpu: one lane's int8 MMA share (sim/cucpu/mma.h), plain C and AVX2. */
#include "sim/cucpu/mma.h"

#include <errno.h>
#include <stdint.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static void mma_plain(int d[8], const signed char a[16], const signed char b[128],
                      const int c[8])
{
    for (int j = 0; j < 8; j++) {
        uint32_t s = (uint32_t)c[j];
        for (int k = 0; k < 16; k++)
            s += (uint32_t)((int)a[k] * (int)b[16 * j + k]);
        d[j] = (int)s;
    }
}

#if defined(__x86_64__)
/* Each column's 16 products summed in pairs by vpmaddwd (exact: a pair is at
 * most 2 x 128 x 128), the eight columns' pair sums reduced together by two
 * rounds of horizontal adds inside each 128-bit half and one add across the
 * halves: column j ends in element j. */
__attribute__((target("avx2"))) static void mma_avx2(int d[8], const signed char a[16],
                                                      const signed char b[128], const int c[8])
{
    const __m256i va = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a));
    __m256i p[8];
    for (int j = 0; j < 8; j++) {
        __m256i vb = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 16 * j)));
        p[j] = _mm256_madd_epi16(va, vb);
    }
    __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
    __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
    __m256i lo = _mm256_hadd_epi32(h01, h23), hi = _mm256_hadd_epi32(h45, h67);
    /* lo: columns 0-3 of each half; hi: columns 4-7 */
    __m256i s = _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20),
                                 _mm256_permute2x128_si256(lo, hi, 0x31));
    s = _mm256_add_epi32(s, _mm256_loadu_si256((const __m256i *)c));
    _mm256_storeu_si256((__m256i *)d, s);
}

static int have_avx2(void)
{
    static int known; /* 0 unknown, 1 no, 2 yes */
    int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (!k) {
        __builtin_cpu_init();
        k = __builtin_cpu_supports("avx2") ? 2 : 1;
        __atomic_store_n(&known, k, __ATOMIC_RELAXED);
    }
    return k == 2;
}
#else
static int have_avx2(void)
{
    return 0;
}
#endif

int cucpu_mma_s8_path(int path, int d[8], const signed char a[16], const signed char b[128],
                      const int c[8])
{
    if (path == 0) {
        mma_plain(d, a, b, c);
        return 0;
    }
    if (path != 1 || !have_avx2())
        return -ENOTSUP;
#if defined(__x86_64__)
    mma_avx2(d, a, b, c);
#endif
    return 0;
}

void cucpu_mma_s8(int d[8], const signed char a[16], const signed char b[128], const int c[8])
{
#if defined(__x86_64__)
    if (have_avx2()) {
        mma_avx2(d, a, b, c);
        return;
    }
#endif
    mma_plain(d, a, b, c);
}

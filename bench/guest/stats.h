/* Shared by the guest measuring programs: monotonic time, a seeded PRNG, and the one summary
 * line every program prints: "<name> n=N p50_us=.. p90_us=.. p99_us=.. max_us=.. mean_us=.." */
#ifndef VMTUNE_BENCH_STATS_H
#define VMTUNE_BENCH_STATS_H
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static inline uint64_t rng_next(void) /* xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* nearest-rank percentile of a sorted array */
static inline double pct_us(const int64_t *sorted, size_t n, double q)
{
    size_t rank = (size_t)(q * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return (double)sorted[rank - 1] / 1000.0;
}

static inline void summary(const char *name, int64_t *ns, size_t n, const char *extra)
{
    if (n == 0) {
        printf("%s n=0 %s\n", name, extra ? extra : "");
        fflush(stdout);
        return;
    }
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)ns[i];
    qsort(ns, n, sizeof *ns, cmp_i64);
    printf("%s n=%zu p50_us=%.1f p90_us=%.1f p99_us=%.1f p999_us=%.1f max_us=%.1f min_us=%.1f mean_us=%.1f %s\n",
           name, n, pct_us(ns, n, 0.50), pct_us(ns, n, 0.90), pct_us(ns, n, 0.99), pct_us(ns, n, 0.999),
           (double)ns[n - 1] / 1000.0, (double)ns[0] / 1000.0, sum / (double)n / 1000.0, extra ? extra : "");
    fflush(stdout);
}
#endif

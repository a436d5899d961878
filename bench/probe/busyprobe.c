/* busyprobe: a busy vCPU stand-in on the host, for bench/host_isolation.py.
 *
 *   busyprobe CPU PERIODS WARMUP [WORK_US [PERIOD_US]]
 *       Pin this thread to CPU (sched_setaffinity, as libvirt pins a vCPU thread), then every
 *       PERIOD_US (default 1000) on absolute CLOCK_MONOTONIC deadlines: consume WORK_US (default
 *       300) of this thread's own CPU time (CLOCK_THREAD_CPUTIME_ID, so time preempted does not
 *       count as work) and record "work done" minus "deadline". A deadline already past when a
 *       period ends is skipped and counted in "missed". WARMUP periods first, not recorded; then
 *       PERIODS recorded. Prints one JSON object on stdout; errors go to stderr, exit 2.
 *   busyprobe spin
 *       A busy loop, unpinned (the "backup job" hog). Dies with its parent (PR_SET_PDEATHSIG), so
 *       even a SIGKILLed benchmark leaves no hog behind.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static int64_t ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die_with_parent(void)
{
    pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) /* the parent died before prctl */
        _exit(0);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* nearest-rank percentile of a sorted array, in microseconds (as bench/guest/stats.h) */
static double pct_us(const int64_t *sorted, long n, double q)
{
    long rank = (long)(q * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return (double)sorted[rank - 1] / 1000.0;
}

static long arg(const char *s, const char *what, long min)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < min) {
        fprintf(stderr, "busyprobe: bad %s %s\n", what, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "spin") == 0) {
        die_with_parent();
        for (volatile unsigned long i = 0;; i++)
            ;
    }
    if (argc < 4 || argc > 6) {
        fprintf(stderr, "usage: busyprobe CPU PERIODS WARMUP [WORK_US [PERIOD_US]] | busyprobe spin\n");
        return 2;
    }
    int cpu = (int)arg(argv[1], "CPU", 0);
    long periods = arg(argv[2], "PERIODS", 1), warmup = arg(argv[3], "WARMUP", 0);
    long work_us = argc > 4 ? arg(argv[4], "WORK_US", 1) : 300;
    long period_us = argc > 5 ? arg(argv[5], "PERIOD_US", 1) : 1000;
    if (work_us >= period_us) {
        fprintf(stderr, "busyprobe: WORK_US must be below PERIOD_US\n");
        return 2;
    }
    die_with_parent();
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        fprintf(stderr, "busyprobe: sched_setaffinity(CPU %d): %s\n", cpu, strerror(errno));
        return 2;
    }
    int64_t *lat = malloc(sizeof *lat * (size_t)periods);
    if (!lat) {
        fprintf(stderr, "busyprobe: out of memory\n");
        return 2;
    }
    memset(lat, 0, sizeof *lat * (size_t)periods); /* fault the pages in before measuring */

    const int64_t period = period_us * 1000, work = work_us * 1000;
    struct rusage ru0 = {0}, ru1;
    long done = 0, missed = 0, migrated = 0;
    int64_t deadline = ns(CLOCK_MONOTONIC) + period;
    while (done < warmup + periods) {
        if (done == warmup)
            getrusage(RUSAGE_THREAD, &ru0);
        struct timespec ts = {.tv_sec = deadline / 1000000000LL, .tv_nsec = deadline % 1000000000LL};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
        int64_t c0 = ns(CLOCK_THREAD_CPUTIME_ID);
        while (ns(CLOCK_THREAD_CPUTIME_ID) - c0 < work)
            ;
        int64_t now = ns(CLOCK_MONOTONIC);
        if (done >= warmup) {
            lat[done - warmup] = now - deadline;
            migrated += sched_getcpu() != cpu;
        }
        done++;
        deadline += period;
        if (now >= deadline) { /* fell behind: skip the deadlines already past, and count them */
            int64_t behind = (now - deadline) / period + 1;
            if (done > warmup)
                missed += behind;
            deadline += behind * period;
        }
    }
    getrusage(RUSAGE_THREAD, &ru1);

    double sum = 0;
    for (long i = 0; i < periods; i++)
        sum += (double)lat[i];
    qsort(lat, (size_t)periods, sizeof *lat, cmp_i64);
    printf("{\"cpu\": %d, \"periods\": %ld, \"warmup\": %ld, \"work_us\": %ld, \"period_us\": %ld, "
           "\"missed\": %ld, \"off_cpu_samples\": %ld, "
           "\"p50_us\": %.1f, \"p90_us\": %.1f, \"p99_us\": %.1f, \"p999_us\": %.1f, "
           "\"max_us\": %.1f, \"min_us\": %.1f, \"mean_us\": %.1f, "
           "\"voluntary_switches\": %ld, \"involuntary_switches\": %ld}\n",
           cpu, periods, warmup, work_us, period_us, missed, migrated,
           pct_us(lat, periods, 0.50), pct_us(lat, periods, 0.90), pct_us(lat, periods, 0.99),
           pct_us(lat, periods, 0.999), (double)lat[periods - 1] / 1000.0, (double)lat[0] / 1000.0,
           sum / (double)periods / 1000.0, ru1.ru_nvcsw - ru0.ru_nvcsw, ru1.ru_nivcsw - ru0.ru_nivcsw);
    free(lat);
    return 0;
}

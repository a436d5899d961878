/* timerlat OPS [PERIOD_US]: a 1 ms (default) timer loop. Each iteration sleeps until an absolute
 * deadline PERIOD_US after the previous wake-up (clock_nanosleep, CLOCK_MONOTONIC, TIMER_ABSTIME)
 * and records the overshoot: wake-up time minus deadline. Prints the overshoot summary. */
#include "stats.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s OPS [PERIOD_US]\n", argv[0]);
        return 2;
    }
    size_t ops = strtoul(argv[1], NULL, 10);
    long period = argc > 2 ? atol(argv[2]) * 1000L : 1000000L;
    int64_t *lat = calloc(ops ? ops : 1, sizeof *lat);
    int64_t start = now_ns(), wake = start;
    for (size_t i = 0; i < ops; i++) {
        int64_t deadline = wake + period;
        struct timespec ts = {.tv_sec = deadline / 1000000000LL, .tv_nsec = deadline % 1000000000LL};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL))
            ; /* EINTR: sleep again until the deadline */
        wake = now_ns();
        lat[i] = wake - deadline;
    }
    char extra[48];
    snprintf(extra, sizeof extra, "wall_ms=%.0f", (double)(now_ns() - start) / 1e6);
    summary("timer", lat, ops, extra);
    return 0;
}

/* disklat DEVICE OPS [WARMUP]: 4 KiB random reads with O_DIRECT over the whole device, one at a
 * time (queue depth 1); prints the latency summary of the OPS timed reads (WARMUP untimed first). */
#include "stats.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define BLOCK 4096

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s DEVICE OPS [WARMUP]\n", argv[0]);
        return 2;
    }
    size_t ops = strtoul(argv[2], NULL, 10), warm = argc > 3 ? strtoul(argv[3], NULL, 10) : 0;
    int fd = open(argv[1], O_RDONLY | O_DIRECT);
    if (fd < 0) {
        printf("disk error=open:%s\n", strerror(errno));
        return 1;
    }
    uint64_t size = 0;
    if (ioctl(fd, BLKGETSIZE64, &size) < 0 || size < 16 * BLOCK) {
        printf("disk error=size:%llu\n", (unsigned long long)size);
        return 1;
    }
    uint64_t blocks = size / BLOCK;
    void *buf;
    if (posix_memalign(&buf, BLOCK, BLOCK)) {
        printf("disk error=memalign\n");
        return 1;
    }
    int64_t *lat = calloc(ops ? ops : 1, sizeof *lat);
    size_t errors = 0;
    for (size_t i = 0; i < warm + ops; i++) {
        off_t off = (off_t)(rng_next() % blocks) * BLOCK;
        int64_t t0 = now_ns();
        ssize_t got = pread(fd, buf, BLOCK, off);
        int64_t t1 = now_ns();
        if (got != BLOCK)
            errors++;
        if (i >= warm)
            lat[i - warm] = t1 - t0;
    }
    char extra[96];
    snprintf(extra, sizeof extra, "errors=%zu size_mib=%llu", errors, (unsigned long long)(size >> 20));
    summary("disk", lat, ops, extra);
    return errors ? 1 : 0;
}

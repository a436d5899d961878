/* netlat HOST PORT OPS [WARMUP]: UDP round trips (64-byte datagrams) to an echo server, one in
 * flight at a time; prints the round-trip summary. A reply that does not come within 1 s is lost
 * and not timed. The warm-up waits (up to about 30 s) until the first reply comes back: ARP and
 * link-up happen there. */
#include "stats.h"
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s HOST PORT OPS [WARMUP]\n", argv[0]);
        return 2;
    }
    size_t ops = strtoul(argv[3], NULL, 10), warm = argc > 4 ? strtoul(argv[4], NULL, 10) : 0;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
    if (fd < 0 || inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1 || connect(fd, (void *)&sa, sizeof sa) < 0) {
        printf("net error=socket:%s\n", strerror(errno));
        return 1;
    }
    struct timeval tv = {.tv_sec = 1};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char out[64], in[128];
    memset(out, 'v', sizeof out);
    int up = 0;
    for (int tries = 0; tries < 30 && !up; tries++) { /* first contact */
        send(fd, out, sizeof out, 0);
        up = recv(fd, in, sizeof in, 0) > 0;
    }
    if (!up) {
        printf("net error=no-reply\n");
        return 1;
    }
    int64_t *lat = calloc(ops ? ops : 1, sizeof *lat);
    size_t n = 0, lost = 0;
    uint32_t seq = 0;
    for (size_t i = 0; i < warm + ops; i++) {
        seq++;
        memcpy(out, &seq, sizeof seq);
        int64_t t0 = now_ns();
        if (send(fd, out, sizeof out, 0) < 0) {
            lost++;
            continue;
        }
        int64_t t1;
        for (;;) { /* skip late replies to earlier, lost datagrams */
            ssize_t got = recv(fd, in, sizeof in, 0);
            t1 = now_ns();
            if (got < 0) {
                t1 = -1;
                break;
            }
            if (got >= (ssize_t)sizeof seq && memcmp(in, &seq, sizeof seq) == 0)
                break;
        }
        if (t1 < 0) {
            lost++;
            continue;
        }
        if (i >= warm)
            lat[n++] = t1 - t0;
    }
    char extra[48];
    snprintf(extra, sizeof extra, "lost=%zu", lost);
    summary("net", lat, n, extra);
    return 0;
}

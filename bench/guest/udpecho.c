/* udpecho ADDR PORT: the host side of netlat. Sends every datagram back to where it came from,
 * until killed or until the process that started it dies. Prints "udpecho ready" once bound. */
#include <arpa/inet.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s ADDR PORT\n", argv[0]);
        return 2;
    }
    pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* the benchmark was killed: do not outlive it */
    if (getppid() != parent)
        return 1;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
    if (fd < 0 || inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1 || bind(fd, (void *)&sa, sizeof sa) < 0) {
        perror("udpecho: bind");
        return 1;
    }
    printf("udpecho ready\n");
    fflush(stdout);
    char buf[2048];
    for (;;) {
        struct sockaddr_in from;
        socklen_t len = sizeof from;
        ssize_t got = recvfrom(fd, buf, sizeof buf, 0, (void *)&from, &len);
        if (got >= 0)
            sendto(fd, buf, (size_t)got, 0, (void *)&from, len);
    }
}

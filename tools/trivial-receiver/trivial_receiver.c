/*
 * trivial_receiver: the machine's UDP receive ceiling, for comparison with
 * sonde. It binds a UDP port on 127.0.0.1 and takes datagrams off the
 * socket as fast as the kernel hands them over, parsing nothing; the rate
 * it reaches is the most any agent could do on one core with this kernel.
 * scripts/bench-ceiling.sh drives it with `sonde bench` and compares.
 *
 *   trivial_receiver PORT [recv|recvmmsg] [RCVBUF_BYTES]
 *
 * It runs until no datagram has arrived for one second after the first
 * one, then prints one line:
 *
 *   datagrams=N bytes=N seconds=S per_second=R
 *
 * where seconds spans the first to the last datagram. RCVBUF_BYTES (default
 * 8 MiB, sonde's default) is set with SO_RCVBUFFORCE when allowed (root),
 * else SO_RCVBUF, which the kernel caps at net.core.rmem_max.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define MAX_DATAGRAM 65536

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PORT [recv|recvmmsg] [RCVBUF_BYTES]\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]);
    int use_mmsg = argc > 2 && strcmp(argv[2], "recvmmsg") == 0;
    int rcvbuf = argc > 3 ? atoi(argv[3]) : 8 << 20;

    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) {
        perror("socket");
        return 1;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) != 0) {
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    }
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((unsigned short)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        perror("bind");
        return 1;
    }
    /* The script waits for this line before it starts the load. */
    printf("ready\n");
    fflush(stdout);

    static char bufs[BATCH][MAX_DATAGRAM];
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    for (int i = 0; i < BATCH; i++) {
        iov[i].iov_base = bufs[i];
        iov[i].iov_len = MAX_DATAGRAM;
        memset(&msgs[i], 0, sizeof msgs[i]);
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }

    unsigned long long datagrams = 0, bytes = 0;
    double first = 0, last = 0;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    for (;;) {
        /* Block until data, but give up one second after the last datagram
         * (or never, before the first). */
        int ready = poll(&pfd, 1, datagrams == 0 ? -1 : 1000);
        if (ready == 0) {
            break;
        }
        if (ready < 0) {
            if (errno == EINTR) {
                continue;
            }
            perror("poll");
            return 1;
        }
        /* Drain without blocking, like an agent's receive loop. */
        for (;;) {
            if (use_mmsg) {
                int n = recvmmsg(fd, msgs, BATCH, MSG_DONTWAIT, NULL);
                if (n <= 0) {
                    break;
                }
                for (int i = 0; i < n; i++) {
                    bytes += msgs[i].msg_len;
                }
                datagrams += (unsigned long long)n;
            } else {
                ssize_t n = recv(fd, bufs[0], MAX_DATAGRAM, MSG_DONTWAIT);
                if (n < 0) {
                    break;
                }
                bytes += (unsigned long long)n;
                datagrams++;
            }
            if (first == 0) {
                first = now();
            }
        }
        last = now();
    }
    double seconds = last - first;
    printf("datagrams=%llu bytes=%llu seconds=%.3f per_second=%.0f\n", datagrams, bytes, seconds,
           seconds > 0 ? (double)datagrams / seconds : 0.0);
    return 0;
}

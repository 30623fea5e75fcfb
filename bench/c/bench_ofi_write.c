/* bench_ofi_write.c - one-sided 64 KiB writes over "ofi:tcp" on loopback
 * against a raw TCP socket stream moving the same bytes, side by side.
 *
 * Each round forks a receiver. ofi: the receiver exposes a ring of 16 slots
 * and drives progress until a marker written after the last write appears
 * (writes are placed in order), then acknowledges with a control message.
 * tcp: the receiver recv()s into a buffer of the same size until it has every
 * byte, then acknowledges with one byte. Time runs from the first write or
 * send() to the acknowledgement. Rounds alternate; the best of each is shown.
 *
 * Usage: bench_ofi_write [writes per round (default 20000)] [rounds (3)]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "slash/backoff.h"
#include "slash/transport.h"

#define WRITE (64 * 1024)
#define SLOTS 16
#define TMO 30000

static void die(const char *what, slash_status st)
{
    fprintf(stderr, "bench_ofi_write: %s: %s (%s)\n", what, slash_strerror(st), slash_last_error());
    exit(1);
}
#define OK(expr)                          \
    do {                                  \
        slash_status s_ = (expr);         \
        if (s_ != SLASH_OK)               \
            die(#expr, s_);               \
    } while (0)

/* ---- ofi -------------------------------------------------------------------- */

static void ofi_receiver(int up)
{
    slash_transport *tp;
    slash_listener *l;
    slash_endpoint *ep;
    slash_region *ring;
    OK(slash_transport_open("ofi:tcp", &tp));
    OK(slash_listen(tp, NULL, "bench", &l));
    dprintf(up, "%s\n", slash_listener_addr(l));
    OK(slash_accept(l, TMO, &ep));
    OK(slash_region_alloc(tp, SLOTS * WRITE + 8, &ring));
    OK(slash_endpoint_expose(ep, ring));
    volatile uint64_t *marker = (uint64_t *)((char *)slash_region_addr(ring) + SLOTS * WRITE);
    slash_backoff b;
    slash_backoff_reset(&b);
    while (__atomic_load_n(marker, __ATOMIC_ACQUIRE) != 1) {
        OK(slash_endpoint_progress(ep));
        if (b.rounds < SLASH_BACKOFF_SPINS) /* stay hot: this is a throughput test */
            slash_backoff_wait(&b);
    }
    OK(slash_endpoint_send_msg(ep, "ack", 3));
    char buf[8];
    size_t n;
    OK(slash_endpoint_recv_msg(ep, buf, sizeof buf, &n, TMO));
    slash_endpoint_close(ep);
    slash_region_free(ring);
    slash_listener_close(l);
    slash_transport_close(tp);
}

static double ofi_round(long writes)
{
    int p[2];
    if (pipe(p) != 0)
        exit(1);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        ofi_receiver(p[1]);
        _exit(0);
    }
    close(p[1]);
    char addr[SLASH_ADDR_MAX] = "";
    FILE *f = fdopen(p[0], "r");
    if (!f || !fgets(addr, sizeof addr, f))
        exit(1);
    addr[strcspn(addr, "\n")] = '\0';
    fclose(f);
    slash_transport *tp;
    slash_endpoint *ep;
    slash_region *src;
    slash_remote *ring;
    OK(slash_transport_open("ofi:tcp", &tp));
    OK(slash_connect(tp, addr, "bench", TMO, &ep));
    OK(slash_region_alloc(tp, WRITE, &src));
    OK(slash_endpoint_attach(ep, TMO, &ring));
    memset(slash_region_addr(src), 0x5A, WRITE);
    uint64_t t0 = slash_now_ns();
    for (long i = 0; i < writes; i++)
        OK(slash_endpoint_write(ep, src, 0, ring, (size_t)(i % SLOTS) * WRITE, WRITE));
    *(uint64_t *)slash_region_addr(src) = 1; /* the marker, placed after every write */
    OK(slash_endpoint_write(ep, src, 0, ring, SLOTS * WRITE, 8));
    char buf[8];
    size_t n;
    OK(slash_endpoint_recv_msg(ep, buf, sizeof buf, &n, TMO));
    double secs = (double)(slash_now_ns() - t0) / 1e9;
    OK(slash_endpoint_flush(ep, TMO)); /* before "bye": the receiver closes on it */
    OK(slash_endpoint_send_msg(ep, "bye", 3));
    slash_remote_detach(ring);
    slash_endpoint_close(ep);
    slash_region_free(src);
    slash_transport_close(tp);
    waitpid(pid, NULL, 0);
    return secs;
}

/* ---- raw tcp ------------------------------------------------------------------ */

static double tcp_round(long writes)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 1) != 0 ||
        getsockname(ls, (struct sockaddr *)&a, &alen) != 0) {
        perror("bench_ofi_write: tcp listen");
        exit(1);
    }
    size_t total = (size_t)writes * WRITE;
    pid_t pid = fork();
    if (pid == 0) {
        int s = accept(ls, NULL, NULL);
        char *ring = malloc(SLOTS * WRITE);
        size_t got = 0;
        while (s >= 0 && ring && got < total) {
            ssize_t r = recv(s, ring + got % (SLOTS * WRITE),
                             SLOTS * WRITE - got % (SLOTS * WRITE), 0);
            if (r <= 0)
                _exit(1);
            got += (size_t)r;
        }
        _exit(send(s, "a", 1, 0) == 1 ? 0 : 1);
    }
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
        perror("bench_ofi_write: tcp connect");
        exit(1);
    }
    char *buf = malloc(WRITE);
    memset(buf, 0x5A, WRITE);
    uint64_t t0 = slash_now_ns();
    for (long i = 0; i < writes; i++)
        for (size_t off = 0; off < WRITE;) {
            ssize_t w = send(s, buf + off, WRITE - off, MSG_NOSIGNAL);
            if (w <= 0) {
                perror("bench_ofi_write: send");
                exit(1);
            }
            off += (size_t)w;
        }
    char ack;
    if (recv(s, &ack, 1, MSG_WAITALL) != 1)
        exit(1);
    double secs = (double)(slash_now_ns() - t0) / 1e9;
    free(buf);
    close(s);
    close(ls);
    waitpid(pid, NULL, 0);
    return secs;
}

int main(int argc, char **argv)
{
    if (!slash_transport_have_ofi()) {
        printf("bench_ofi_write: skipped, the ofi transport is not compiled in\n");
        return 0;
    }
    long writes = argc > 1 ? atol(argv[1]) : 20000;
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    double best_ofi = 1e30, best_tcp = 1e30;
    for (int r = 0; r < rounds; r++) {
        double o = ofi_round(writes), t = tcp_round(writes);
        best_ofi = o < best_ofi ? o : best_ofi;
        best_tcp = t < best_tcp ? t : best_tcp;
    }
    double bytes = (double)writes * WRITE;
    printf("%ld x 64 KiB per round, best of %d rounds (loopback)\n", writes, rounds);
    printf("  ofi:tcp one-sided writes: %6.2f GB/s  (%.0f writes/s)\n", bytes / best_ofi / 1e9,
           writes / best_ofi);
    printf("  raw TCP socket stream   : %6.2f GB/s\n", bytes / best_tcp / 1e9);
    printf("  ratio ofi/raw           : %6.2f\n", best_tcp / best_ofi);
    return 0;
}

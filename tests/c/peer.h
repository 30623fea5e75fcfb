/* peer.h - fork a peer process for the C tests of transports and channels.
 *
 * The parent listens (after the fork, so no fabric state crosses fork) and
 * passes its address to the child through a pipe; the child connects and runs
 * the given role, exiting with 0 on success. Used by test_channel.c.
 */
#ifndef SLASH_TEST_PEER_H
#define SLASH_TEST_PEER_H

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "slash/transport.h"

typedef struct peer {
    pid_t pid;
    int addr_pipe[2];
} peer;

typedef int (*peer_fn)(const char *spec, const char *addr, void *arg);

/* Forks; the child waits for the address and runs fn, then _exit()s with its
 * return value. */
static inline void peer_start(peer *p, const char *spec, peer_fn fn, void *arg)
{
    if (pipe(p->addr_pipe) != 0)
        abort();
    p->pid = fork();
    if (p->pid == 0) {
        close(p->addr_pipe[1]);
        char addr[SLASH_ADDR_MAX] = {0};
        size_t got = 0;
        ssize_t r;
        while (got < sizeof addr - 1 &&
               (r = read(p->addr_pipe[0], addr + got, sizeof addr - 1 - got)) > 0) {
            got += (size_t)r;
            if (addr[got - 1] == '\n')
                break;
        }
        if (got == 0)
            _exit(3);
        addr[got - 1] = '\0';
        _exit(fn(spec, addr, arg));
    }
    close(p->addr_pipe[0]);
}

/* Tells the child where to connect. */
static inline void peer_send_addr(peer *p, const char *addr)
{
    size_t n = strlen(addr);
    if (write(p->addr_pipe[1], addr, n) != (ssize_t)n || write(p->addr_pipe[1], "\n", 1) != 1)
        abort();
    close(p->addr_pipe[1]);
}

/* Waits for the child; returns its exit code, or 128+signal. */
static inline int peer_wait(peer *p)
{
    int status = 0;
    while (waitpid(p->pid, &status, 0) < 0)
        ;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

#endif

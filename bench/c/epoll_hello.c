/* The floor of the aio bench's hello workload: a keep-alive HTTP hello server in plain C.
 *
 * serve(listen_fd) runs a level-triggered epoll loop on a listening socket until SIGTERM or
 * SIGINT (then returns 0; -errno on a failure). Like the Python hello server
 * (bench/child/aio_servers.py), it reads once per readiness (64 KiB buffer), counts the request
 * terminators "\r\n\r\n" (across reads) and answers that many fixed replies with one write;
 * new connections get TCP_NODELAY, as asyncio's transports do. Nothing else: no parsing, no
 * buffering of a short write (a reply this small always fits an empty socket buffer).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static const char HELLO[] = "HTTP/1.1 200 OK\r\nServer: fdkit-ring\r\nContent-Type: text/plain\r\n"
                            "Content-Length: 6\r\nConnection: keep-alive\r\n\r\nhallo\n";
#define HELLO_LEN (sizeof(HELLO) - 1)
#define MAX_FDS 65536
#define BATCH 64 /* replies per write */

static volatile sig_atomic_t stop;
static unsigned char matched[MAX_FDS]; /* per fd: how much of "\r\n\r\n" ended the last read */
static char in[65536], out[BATCH * HELLO_LEN];

static void on_signal(int sig) { (void)sig; stop = 1; }

int serve(int listen_fd) {
    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: epoll_wait sees EINTR */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    for (int i = 0; i < BATCH; i++)
        memcpy(out + i * HELLO_LEN, HELLO, HELLO_LEN);
    int ep = epoll_create1(EPOLL_CLOEXEC), one = 1;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = listen_fd}, evs[256];
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, listen_fd, &ev) < 0)
        return -errno;
    while (!stop) {
        int n = epoll_wait(ep, evs, 256, -1);
        if (n < 0 && errno != EINTR)
            return -errno;
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd, c;
            if (fd == listen_fd) {
                while ((c = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    if (c >= MAX_FDS) { close(c); continue; }
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                    matched[c] = 0;
                    ev.data.fd = c;
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
                }
                continue;
            }
            ssize_t got = read(fd, in, sizeof(in)), replies = 0;
            if (got < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            int s = matched[fd];
            for (ssize_t k = 0; k < got; k++) { /* the "\r\n\r\n" matcher, one state per fd */
                if (in[k] == "\r\n\r\n"[s]) { if (++s == 4) { replies++; s = 0; } }
                else s = in[k] == '\r';
            }
            matched[fd] = (unsigned char)s;
            while (replies > 0) {
                size_t k = replies < BATCH ? (size_t)replies : BATCH;
                if (write(fd, out, k * HELLO_LEN) != (ssize_t)(k * HELLO_LEN)) { got = 0; break; }
                replies -= (ssize_t)k;
            }
            if (got <= 0)
                close(fd); /* EOF, an error or a short write: the connection is done */
        }
    }
    close(ep);
    return 0;
}

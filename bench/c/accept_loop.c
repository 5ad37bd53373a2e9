/* The practical limit for draining a listener: accept4 in a tight C loop.
 *
 * drain(listen_fd, max, out_fds) accepts from a non-blocking listener until EAGAIN (or `max`
 * connections), storing each new fd in out_fds. No peer address is fetched (NULL, NULL): this
 * is the cheapest accept the kernel offers. Returns the count, or -errno if the very first
 * accept failed with anything but EAGAIN. ECONNABORTED and EINTR are skipped, as
 * fdkit.fd.accept_many does. The caller closes the fds.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <sys/socket.h>

int drain(int listen_fd, int max, int *out_fds) {
    int n = 0;
    while (n < max) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return n ? n : -errno;
        }
        out_fds[n++] = fd;
    }
    return n;
}

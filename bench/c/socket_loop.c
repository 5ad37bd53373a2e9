/* socket_loop(n): socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC) + close, n times.
 * Returns 0, or -errno on the first failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

int socket_loop(int n) {
    for (int i = 0; i < n; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -errno;
        close(fd);
    }
    return 0;
}

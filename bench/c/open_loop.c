/* open_loop(path, n): open(path, O_RDONLY | O_CLOEXEC) + close, n times.
 * Returns 0, or -errno on the first failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

int open_loop(const char *path, int n) {
    for (int i = 0; i < n; i++) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return -errno;
        close(fd);
    }
    return 0;
}

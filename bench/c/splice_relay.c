/* The practical limit for relaying bytes: a C loop, called once per measurement.
 *
 * Both functions move `k` messages of `size` bytes from `src` to `dst` (blocking fds). With
 * `src_is_file` every message is read from offset 0 of the source (pread-style, the file
 * position is untouched: a small file served k times); otherwise the source is a stream and
 * messages simply follow each other. The destination is written at its current position.
 * Return the bytes moved (short when the source hit EOF early), or -errno.
 *
 * relay_splice: splice src -> pipe -> dst, the pipe raised to `pipe_size` with F_SETPIPE_SZ
 * (EPERM keeps the default size); each splice asks for at most the pipe's size. The pipe size
 * obtained is stored in *got_pipe_size. SPLICE_F_MORE is not used (it corks TCP).
 *
 * relay_rw: read into a `bufsize` buffer, write it all out.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

long long relay_splice(int src, int dst, long long size, long long k, int src_is_file,
                       int pipe_size, int *got_pipe_size) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    int cap = fcntl(p[1], F_GETPIPE_SZ);
    if (pipe_size > 0) {
        int r = fcntl(p[1], F_SETPIPE_SZ, pipe_size);
        if (r > 0)
            cap = r;
        else if (errno != EPERM) {
            int e = errno;
            close(p[0]);
            close(p[1]);
            return -e;
        }
    }
    if (cap <= 0)
        cap = 65536;
    if (got_pipe_size)
        *got_pipe_size = cap;
    long long total = 0;
    int err = 0;
    for (long long i = 0; i < k && !err; i++) {
        loff_t off = 0;
        long long left = size;
        while (left > 0) {
            size_t want = left < cap ? (size_t)left : (size_t)cap;
            ssize_t n = splice(src, src_is_file ? &off : NULL, p[1], NULL, want, SPLICE_F_MOVE);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                err = errno;
                break;
            }
            if (n == 0)
                goto done; /* EOF: report the short count */
            ssize_t m = n;
            while (m > 0) {
                ssize_t w = splice(p[0], NULL, dst, NULL, (size_t)m, SPLICE_F_MOVE);
                if (w < 0) {
                    if (errno == EINTR)
                        continue;
                    err = errno;
                    break;
                }
                m -= w;
            }
            if (err)
                break;
            left -= n;
            total += n;
        }
    }
done:
    close(p[0]);
    close(p[1]);
    return err ? -err : total;
}

long long relay_rw(int src, int dst, long long size, long long k, int src_is_file,
                   int bufsize) {
    char *buf = malloc((size_t)bufsize);
    if (!buf)
        return -ENOMEM;
    long long total = 0;
    int err = 0;
    for (long long i = 0; i < k && !err; i++) {
        off_t off = 0;
        long long left = size;
        while (left > 0) {
            size_t want = left < bufsize ? (size_t)left : (size_t)bufsize;
            ssize_t n = src_is_file ? pread(src, buf, want, off) : read(src, buf, want);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                err = errno;
                break;
            }
            if (n == 0)
                goto done;
            off += n;
            ssize_t done_w = 0;
            while (done_w < n) {
                ssize_t w = write(dst, buf + done_w, (size_t)(n - done_w));
                if (w < 0) {
                    if (errno == EINTR)
                        continue;
                    err = errno;
                    break;
                }
                done_w += w;
            }
            if (err)
                break;
            left -= n;
            total += n;
        }
    }
done:
    free(buf);
    return err ? -err : total;
}

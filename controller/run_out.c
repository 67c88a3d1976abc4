/* easyscale-ctl run's output (run_int.h): the ESTs' lines, read from their
 * pipes and written whole, each prefixed with its rank ([RANK], or
 * [HOSTNAME:RANK] in a job across hosts); run's own messages between them
 * (run_say); the progress line on a terminal, cleared and drawn again
 * around both. Called by run's other files; calls none of them. */
#include "controller/run_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- output ------------------------------------------------------------------------ */

static void write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

void run_progress_clear(void)
{
    if (R.line_shown) {
        write_all(2, "\r\033[K", 4);
        R.line_shown = 0;
    }
}

void run_progress_show(void)
{
    if (R.progress_mode == 1 && R.line[0]) {
        char b[600];
        int n = snprintf(b, sizeof(b), "\r\033[K%s", R.line);
        write_all(2, b, (size_t)(n < (int)sizeof(b) ? n : (int)sizeof(b) - 1));
        R.line_shown = 1;
    }
}

/* A message of run itself, between EST lines. */
void run_say(const char *fmt, ...)
{
    char m[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof(m), fmt, ap);
    va_end(ap);
    run_progress_clear();
    es_ctl_err("%s", m);
    run_progress_show();
}

void run_emit_line(int rank, int to, const char *p, size_t n)
{
    char pre[96];
    int pl = R.nnodes > 1 ? snprintf(pre, sizeof(pre), "[%s:%d] ", R.host, R.base + rank)
                          : snprintf(pre, sizeof(pre), "[%d] ", rank);
    run_progress_clear();
    /* one write per line: lines of ESTs never interleave mid-line */
    char *b = malloc((size_t)pl + n + 1);
    if (b) {
        memcpy(b, pre, (size_t)pl);
        memcpy(b + pl, p, n);
        b[pl + n] = '\n';
        write_all(to, b, (size_t)pl + n + 1);
        free(b);
    }
    run_progress_show();
}

/* Reads what the pipe has; emits whole lines (and over-long pieces). */
void run_pipe_input(int rank, outpipe_t *o)
{
    if (!o->buf && !(o->buf = malloc(LINE_MAX_BYTES)))
        return;
    ssize_t n = read(o->fd, o->buf + o->len, LINE_MAX_BYTES - o->len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        if (o->len)
            run_emit_line(rank, o->to, o->buf, o->len);
        o->len = 0;
        close(o->fd);
        o->fd = -1;
        return;
    }
    o->len += (size_t)n;
    size_t start = 0;
    for (size_t k = 0; k < o->len; k++)
        if (o->buf[k] == '\n') {
            run_emit_line(rank, o->to, o->buf + start, k - start);
            start = k + 1;
        }
    if (start == 0 && o->len == LINE_MAX_BYTES) {
        run_emit_line(rank, o->to, o->buf, o->len);
        start = o->len;
    }
    memmove(o->buf, o->buf + start, o->len - start);
    o->len -= start;
}

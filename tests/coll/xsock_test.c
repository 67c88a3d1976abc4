/* coll/xsock.c, the links between the hosts' leaders of a communicator
 * across hosts in host memory, on loopback in one process (each "host" a
 * thread):
 *  - four hosts join (host 0 accepts, three connect), then messages both
 *    ways, every byte checked, also one of 3 MiB (larger than a socket's
 *    buffers);
 *  - a message with another tag or length than the receiver expects is
 *    refused (-EPROTO), the message naming the host;
 *  - a host whose link closes: -ECONNRESET at once, named; a host that
 *    says nothing: -ETIMEDOUT once the timeout passed;
 *  - a stray connection (garbage, no secret) is ignored while host 0 waits
 *    for the real leaders; a leader with another layout (GROUP_WORLD_SIZE)
 *    is refused on both sides; host 0 waiting for a leader that never
 *    comes gives up, saying how many it heard from; host 0 in a process
 *    that did not make the id, and an id without an address, refused;
 *  - NCCL_SOCKET_IFNAME naming no interface: -ENODEV with the reason.
 * The library's log and error store are stubbed here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "coll/xhost_int.h"

/* ---- stubs of what xsock.o calls ------------------------------------------------ */

static __thread char g_err[1024];

es_config_t es_cfg; /* the log's level: zero, nothing printed */

void es_coll_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof(g_err), fmt, ap);
    va_end(ap);
}

void es_log_write(int level, const char *fmt, ...)
{
    (void)level;
    (void)fmt;
}

uint64_t es_coll_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- helpers ---------------------------------------------------------------------- */

#define T_MS 60000 /* generous: a loaded machine */

typedef struct host_arg {
    es_xw_addr_t a;
    int host, nhosts, k, rc;
    es_xs_t *s;
    char err[1024];
} host_arg_t;

static void *host_join(void *p)
{
    host_arg_t *h = p;
    h->rc = es_xs_join(&h->s, &h->a, h->host, h->nhosts, h->k, T_MS);
    snprintf(h->err, sizeof(h->err), "%s", g_err);
    return NULL;
}

/* Hosts 1..n-1 joining in threads, host 0 here: every link made. */
static void join_all(int n, es_xw_addr_t *a, es_xs_t **s0, host_arg_t *h, pthread_t *t)
{
    for (int i = 1; i < n; i++) {
        h[i] = (host_arg_t){ .a = *a, .host = i, .nhosts = n, .k = 2 };
        assert_int_equal(pthread_create(&t[i], NULL, host_join, &h[i]), 0);
    }
    int rc = es_xs_join(s0, a, 0, n, 2, T_MS);
    if (rc != 0)
        fail_msg("host 0 join: %d (%s)", rc, g_err);
    for (int i = 1; i < n; i++) {
        pthread_join(t[i], NULL);
        if (h[i].rc != 0)
            fail_msg("host %d join: %d (%s)", i, h[i].rc, h[i].err);
    }
}

static int setup(void **state)
{
    (void)state;
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    return 0;
}

/* ---- tests ------------------------------------------------------------------------ */

static unsigned char word(int host, size_t i)
{
    return (unsigned char)(host * 37 + i * 11 + (i >> 9));
}

static void *host_echo(void *p)
{
    host_arg_t *h = p;
    size_t n = 3u << 20;
    unsigned char *b = malloc(n);
    for (size_t i = 0; i < n; i++)
        b[i] = word(h->host, i);
    h->rc = es_xs_send(h->s, 0, 0x100 | (uint64_t)h->host, b, n, T_MS);
    if (h->rc == 0)
        h->rc = es_xs_recv(h->s, 0, 0x200, b, n, T_MS);
    for (size_t i = 0; h->rc == 0 && i < n; i++)
        if (b[i] != word(0, i))
            h->rc = -EBADMSG;
    free(b);
    return NULL;
}

static void test_four_hosts(void **state)
{
    (void)state;
    es_xw_addr_t a;
    assert_int_equal(es_xs_listen(&a), 0);
    assert_int_equal(a.magic, ES_XW_MAGIC);
    assert_int_equal(a.ipv4, htonl(INADDR_LOOPBACK));
    assert_int_not_equal(a.port, 0);
    es_xs_t *s0;
    host_arg_t h[4];
    pthread_t t[4];
    join_all(4, &a, &s0, h, t);
    for (int i = 1; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, host_echo, &h[i]), 0);
    size_t n = 3u << 20;
    unsigned char *b = malloc(n);
    assert_non_null(b);
    for (int i = 1; i < 4; i++) { /* each host's bytes, in host order */
        assert_int_equal(es_xs_recv(s0, i, 0x100 | (uint64_t)i, b, n, T_MS), 0);
        for (size_t j = 0; j < n; j++)
            if (b[j] != word(i, j))
                fail_msg("host %d byte %zu: %u, wanted %u", i, j, b[j], word(i, j));
    }
    for (size_t j = 0; j < n; j++)
        b[j] = word(0, j);
    for (int i = 1; i < 4; i++)
        assert_int_equal(es_xs_send(s0, i, 0x200, b, n, T_MS), 0);
    for (int i = 1; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(h[i].rc, 0);
        es_xs_close(h[i].s);
    }
    /* host 1 has a link to host 0 only */
    es_xs_close(s0);
    free(b);
}

static void test_wrong_message(void **state)
{
    (void)state;
    es_xw_addr_t a;
    assert_int_equal(es_xs_listen(&a), 0);
    es_xs_t *s0;
    host_arg_t h[2];
    pthread_t t[2];
    join_all(2, &a, &s0, h, t);
    char b[64] = "partial";
    assert_int_equal(es_xs_send(h[1].s, 0, 0x10101, b, sizeof(b), T_MS), 0);
    assert_int_equal(es_xs_recv(s0, 1, 0x20101, b, sizeof(b), T_MS), -EPROTO);
    assert_non_null(strstr(g_err, "host 1's leader sent message 0x10101 of 64 bytes where "
                                  "0x20101 of 64 was due (the hosts issued different"));
    assert_int_equal(es_xs_send(h[1].s, 0, 0x30101, b, sizeof(b), T_MS), 0);
    assert_int_equal(es_xs_recv(s0, 1, 0x30101, b, 32, T_MS), -EPROTO); /* another length */
    /* no link from host 1 to host 2 (a star) */
    assert_int_equal(es_xs_send(h[1].s, 2, 1, b, 1, T_MS), -ENOTCONN);
    es_xs_close(h[1].s);
    es_xs_close(s0);
}

static void test_peer_gone_or_silent(void **state)
{
    (void)state;
    es_xw_addr_t a;
    assert_int_equal(es_xs_listen(&a), 0);
    es_xs_t *s0;
    host_arg_t h[3];
    pthread_t t[3];
    join_all(3, &a, &s0, h, t);
    char b[16];
    es_xs_close(h[1].s); /* host 1 gone */
    assert_int_equal(es_xs_recv(s0, 1, 1, b, sizeof(b), T_MS), -ECONNRESET);
    assert_non_null(strstr(g_err, "receiving from host 1's leader: the link closed"));
    /* host 2 there but silent: the timeout */
    assert_int_equal(es_xs_recv(s0, 2, 1, b, sizeof(b), 200), -ETIMEDOUT);
    assert_non_null(strstr(g_err, "host 2's leader: no answer within the collective timeout"));
    es_xs_close(h[2].s);
    es_xs_close(s0);
}

static void *stray(void *p)
{
    es_xw_addr_t *a = p;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = a->port,
                              .sin_addr.s_addr = a->ipv4 };
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
        char junk[32];
        memset(junk, 0x5a, sizeof(junk));
        (void)!write(fd, junk, sizeof(junk));
        usleep(100000);
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

static void test_bad_joins(void **state)
{
    (void)state;
    es_xw_addr_t a;
    es_xs_t *s0 = NULL;
    /* a stray connection first, then the real leader: joined */
    assert_int_equal(es_xs_listen(&a), 0);
    pthread_t ts, t1;
    assert_int_equal(pthread_create(&ts, NULL, stray, &a), 0);
    pthread_join(ts, NULL);
    host_arg_t h1 = { .a = a, .host = 1, .nhosts = 2, .k = 2 };
    assert_int_equal(pthread_create(&t1, NULL, host_join, &h1), 0);
    assert_int_equal(es_xs_join(&s0, &a, 0, 2, 2, T_MS), 0);
    pthread_join(t1, NULL);
    assert_int_equal(h1.rc, 0);
    es_xs_close(h1.s);
    es_xs_close(s0);
    /* a leader of a job of 3 hosts at one of 2: refused on both sides */
    assert_int_equal(es_xs_listen(&a), 0);
    h1 = (host_arg_t){ .a = a, .host = 1, .nhosts = 3, .k = 2 };
    assert_int_equal(pthread_create(&t1, NULL, host_join, &h1), 0);
    assert_int_equal(es_xs_join(&s0, &a, 0, 2, 2, T_MS), -EPROTO);
    assert_non_null(strstr(g_err, "host 1's leader says 3 hosts of 2 ranks, host 0 has 2 of 2"));
    assert_null(s0);
    pthread_join(t1, NULL);
    assert_int_equal(h1.rc, -EPROTO);
    assert_non_null(strstr(h1.err, "host 0 refused it"));
    /* nobody comes */
    assert_int_equal(es_xs_listen(&a), 0);
    assert_int_equal(es_xs_join(&s0, &a, 0, 2, 2, 300), -ETIMEDOUT);
    assert_non_null(strstr(g_err, "host 0 heard from 0 of the 1 other hosts' leaders in time"));
    /* host 0 without the listener (the id made elsewhere), an id without
     * an address */
    assert_int_equal(es_xs_join(&s0, &a, 0, 2, 2, 300), -EINVAL);
    assert_non_null(strstr(g_err, "rank 0 must make the unique id"));
    es_xw_addr_t bad = a;
    bad.magic = 0;
    assert_int_equal(es_xs_join(&s0, &bad, 1, 2, 2, 300), -EINVAL);
    assert_non_null(strstr(g_err, "the unique id carries no address of host 0"));
}

static void test_no_interface(void **state)
{
    (void)state;
    es_xw_addr_t a;
    setenv("NCCL_SOCKET_IFNAME", "=esnosuch0", 1);
    int rc = es_xs_listen(&a);
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    assert_int_equal(rc, -ENODEV);
    assert_non_null(strstr(g_err, "no interface up with an IPv4 address matching "
                                  "NCCL_SOCKET_IFNAME=\"=esnosuch0\""));
    /* excluding every prefix but loopback's still finds loopback only when listed */
    setenv("NCCL_SOCKET_IFNAME", "^lo", 1);
    rc = es_xs_listen(&a);
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    if (rc == 0)
        assert_int_not_equal(a.ipv4, htonl(INADDR_LOOPBACK));
    else
        assert_int_equal(rc, -ENODEV);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_four_hosts),
        cmocka_unit_test(test_wrong_message),
        cmocka_unit_test(test_peer_gone_or_silent),
        cmocka_unit_test(test_bad_joins),
        cmocka_unit_test(test_no_interface),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}

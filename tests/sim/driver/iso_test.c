/* simcuda isolation tests (SIMCUDA_ISOLATION=1): what each simulated GPU
 * reaches, as on an x86 GPU machine without HMM.
 * - A kernel on device X touching device Y's memory works only with peer
 *   access (cuCtxEnablePeerAccess) or VMM access granted to X; otherwise
 *   CUDA_ERROR_ILLEGAL_ADDRESS. A copy between the two devices likewise,
 *   but cuMemcpyPeer, which the driver stages.
 * - Kernels reach host memory only when it is pinned or registered; a
 *   registered shared mapping stays shared (the device writes the file the
 *   program and others see); a registered private buffer keeps its contents
 *   and address.
 * - A device server keeps its own mappings out of the area where a client's
 *   mmaps land: memory the client maps there can be registered (every one
 *   of the server's own mappings inside it is tried). Host memory whose
 *   registration a server refuses (its own mapping is at that address,
 *   provoked here) stays pageable memory: copies to and from it are
 *   correct, its contents and its file are kept.
 * - A device server that dies is a lost device: CUDA_ERROR_DEVICE_UNAVAILABLE
 *   from then on, never a hang. A client that dies takes its servers with
 *   it and its memory is given back.
 * - The setting: isolation is the default; "0" (debugging) maps device
 *   memory in the process; any other value fails cuInit.
 * Every case that provokes a (sticky) error runs in a child process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/harness.h"
#include "tests/sim/driver/common.h"

#define GRAN ((size_t)2 << 20)

static void *g_fatbin;

static int setup(void **state)
{
    (void)state;
    size_t len;
    g_fatbin = es_read_file(es_build_path("tests/sim/driver/kernels.fatbin"), &len);
    return g_fatbin ? 0 : -1;
}

/* sim_crash writes 1 to p[0] (tests/sim/driver/kernels.cu). */
static CUfunction crash_fn(void)
{
    CUmodule m;
    CUfunction f;
    CK(cuModuleLoadData(&m, g_fatbin));
    CK(cuModuleGetFunction(&f, m, "sim_crash"));
    return f;
}

/* Launches sim_crash(p) on the current context and synchronises. */
static CUresult poke(CUfunction f, CUdeviceptr p)
{
    void *args[] = {&p};
    CUresult r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
    return r != CUDA_SUCCESS ? r : cuCtxSynchronize();
}

static int peek(CUdeviceptr p)
{
    int v = -1;
    CK(cuMemcpyDtoH(&v, p, sizeof(v)));
    return v;
}

/* ---- peer access ------------------------------------------------------------- */
enum { PEER_NONE, PEER_ENABLED, PEER_DISABLED_AGAIN, COPY_NONE, COPY_PEER_API, COPY_ENABLED };

/* Device 0 owns x; device 1 works on it. Exit 0: worked, 2: illegal
 * address (then sticky), other: setup failure. */
static int peer_child(void *arg)
{
    int mode = *(int *)arg;
    CUcontext c0 = st_primary(0);
    CUdeviceptr x;
    if (cuMemAlloc(&x, 4096) || cuMemsetD32(x, 0, 1024))
        return 10;
    CUcontext c1 = st_primary(1);
    CUfunction f = crash_fn();
    CUdeviceptr y;
    if (cuMemAlloc(&y, 4096) || cuMemsetD32(y, 7, 1024))
        return 11;
    if (mode == PEER_ENABLED || mode == PEER_DISABLED_AGAIN || mode == COPY_ENABLED)
        if (cuCtxEnablePeerAccess(c0, 0) != CUDA_SUCCESS)
            return 12;
    if (mode == PEER_DISABLED_AGAIN && cuCtxDisablePeerAccess(c0) != CUDA_SUCCESS)
        return 13;
    CUresult r;
    if (mode == COPY_NONE || mode == COPY_ENABLED)
        r = cuMemcpyDtoD(x, y, 4096);
    else if (mode == COPY_PEER_API)
        r = cuMemcpyPeer(x, c0, y, c1, 4096);
    else
        r = poke(f, x);
    if (r == CUDA_ERROR_ILLEGAL_ADDRESS)
        return cuMemAlloc(&y, 64) == CUDA_ERROR_ILLEGAL_ADDRESS ? 2 : 14; /* and sticky */
    if (r != CUDA_SUCCESS)
        return 15;
    /* It really happened on x (read by its own device). */
    CK(cuCtxSetCurrent(c0));
    int want = mode >= COPY_NONE ? 7 : 1;
    return peek(x) == want ? 0 : 16;
}

static int peer_case(int mode)
{
    return st_wait(st_fork(peer_child, &mode));
}

static void test_peer_access(void **state)
{
    (void)state;
    assert_int_equal(peer_case(PEER_NONE), 2);
    assert_int_equal(peer_case(PEER_ENABLED), 0);
    assert_int_equal(peer_case(PEER_DISABLED_AGAIN), 2);
    assert_int_equal(peer_case(COPY_NONE), 2);
    assert_int_equal(peer_case(COPY_PEER_API), 0); /* staged by the driver */
    assert_int_equal(peer_case(COPY_ENABLED), 0);
}

/* ---- VMM access for another device --------------------------------------------- */
static int vmm_child(void *arg)
{
    int grant1 = *(int *)arg;
    st_primary(0);
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    if (cuMemAddressReserve(&va, GRAN, 0, 0, 0) || cuMemCreate(&h, GRAN, &p, 0) ||
        cuMemMap(va, GRAN, 0, h, 0))
        return 10;
    CUmemAccessDesc d[2] = {
        {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE},
        {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1},
         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE},
    };
    if (cuMemSetAccess(va, GRAN, d, grant1 ? 2 : 1) || cuMemsetD32(va, 0, 4))
        return 11;
    CUcontext c1 = st_primary(1);
    (void)c1;
    CUfunction f = crash_fn();
    CUresult r = poke(f, va + 8);
    if (r == CUDA_ERROR_ILLEGAL_ADDRESS)
        return 2;
    if (r != CUDA_SUCCESS)
        return 12;
    st_primary(0);
    return peek(va + 8) == 1 ? 0 : 13;
}

static void test_vmm_access_for_another_device(void **state)
{
    (void)state;
    int no = 0, yes = 1;
    assert_int_equal(st_wait(st_fork(vmm_child, &no)), 2);
    assert_int_equal(st_wait(st_fork(vmm_child, &yes)), 0);
}

/* ---- host memory --------------------------------------------------------------- */
enum { HOST_MALLOC, HOST_PINNED, HOST_REGISTERED, HOST_UNREGISTERED };

static int host_child(void *arg)
{
    int mode = *(int *)arg;
    st_primary(0);
    CUfunction f = crash_fn();
    int *buf = NULL;
    if (mode == HOST_PINNED) {
        if (cuMemAllocHost((void **)&buf, 4096))
            return 10;
    } else {
        /* Ordinary private memory (mmap'ed: not from a heap that a
         * sanitizer puts at the same place in every process, device
         * servers included). */
        buf = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf == MAP_FAILED)
            return 10;
    }
    buf[0] = 0;
    buf[1] = 1234;
    if (mode == HOST_REGISTERED || mode == HOST_UNREGISTERED)
        if (cuMemHostRegister(buf, 8192, 0) != CUDA_SUCCESS)
            return 11;
    if (mode == HOST_UNREGISTERED && cuMemHostUnregister(buf) != CUDA_SUCCESS)
        return 12;
    if (buf[1] != 1234)
        return 13; /* registering (or unregistering) kept the contents */
    CUdeviceptr dp = (CUdeviceptr)(uintptr_t)buf;
    if (mode == HOST_REGISTERED || mode == HOST_PINNED) {
        CUdeviceptr via;
        if (cuMemHostGetDevicePointer(&via, buf, 0) || via != dp)
            return 14;
    }
    CUresult r = poke(f, dp);
    if (r == CUDA_ERROR_ILLEGAL_ADDRESS)
        return 2;
    if (r != CUDA_SUCCESS)
        return 15;
    return buf[0] == 1 && buf[1] == 1234 ? 0 : 16; /* the program's own buffer */
}

static void test_kernels_reach_host_memory(void **state)
{
    (void)state;
    int modes[] = {HOST_MALLOC, HOST_PINNED, HOST_REGISTERED, HOST_UNREGISTERED};
    int want[] = {2, 0, 0, 2};
    for (int i = 0; i < 4; i++)
        if (st_wait(st_fork(host_child, &modes[i])) != want[i])
            fail_msg("host memory case %d: not %d", i, want[i]);
}

/* A shared mapping stays shared when registered: the device writes the
 * file, so another mapping of it (here a second one, as another process
 * would have) sees the write. */
static void test_registered_shared_mapping(void **state)
{
    (void)state;
    st_primary(0);
    CUfunction f = crash_fn();
    int fd = memfd_create("iso-test-shared", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 8192), 0);
    int *a = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int *b = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(a != MAP_FAILED && b != MAP_FAILED);
    a[1] = 55;
    CK(cuMemHostRegister(a, 8192, 0));
    CK(poke(f, (CUdeviceptr)(uintptr_t)a));
    assert_int_equal(a[0], 1);
    assert_int_equal(b[0], 1); /* the other mapping of the file */
    b[1] = 66;                 /* and the other way round */
    assert_int_equal(a[1], 66);
    CK(cuMemHostUnregister(a));
    b[2] = 77;
    assert_int_equal(a[2], 77); /* still the file after unregistering */
    munmap(a, 8192);
    munmap(b, 8192);
    close(fd);
    /* Shared anonymous memory has no file to give a device: refused. */
    int *anon = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(anon != MAP_FAILED);
    CUresult r = cuMemHostRegister(anon, 8192, 0);
    if (r == CUDA_SUCCESS) /* possible only with /proc/self/map_files (privileged) */
        CK(cuMemHostUnregister(anon));
    else
        assert_int_equal(r, CUDA_ERROR_NOT_SUPPORTED);
    munmap(anon, 8192);
}

/* ---- server and client death ------------------------------------------------------ */
/* Pids of the device servers of client (their command line names it). */
static int server_pids(pid_t client, pid_t *out, int max)
{
    char want[48];
    snprintf(want, sizeof(want), "--client=%d", (int)client);
    DIR *d = opendir("/proc");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) && n < max) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        char path[64], cmd[512];
        snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t k = read(fd, cmd, sizeof(cmd) - 1);
        close(fd);
        if (k <= 0)
            continue;
        cmd[k] = '\0';
        int is_server = strstr(cmd, "simcuda-gpu") != NULL;
        for (ssize_t i = 0; i < k; i++)
            if (!cmd[i])
                cmd[i] = ' ';
        if (is_server && strstr(cmd, want))
            out[n++] = (pid_t)pid;
    }
    if (d)
        closedir(d);
    return n;
}

static int alive(pid_t pid)
{
    char path[64], st[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t k = read(fd, st, sizeof(st) - 1);
    close(fd);
    if (k <= 0)
        return 0;
    st[k] = '\0';
    char *p = strrchr(st, ')');
    return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

static int server_death_child(void *arg)
{
    (void)arg;
    st_primary(0);
    CUfunction f = crash_fn();
    CUdeviceptr x;
    if (cuMemAlloc(&x, 4096) || poke(f, x) != CUDA_SUCCESS)
        return 10;
    pid_t srv[4];
    if (server_pids(getpid(), srv, 4) != 1)
        return 11;
    kill(srv[0], SIGKILL);
    /* The next device work finds the device gone: an error, not a hang
     * (alarm(60) in st_fork would end a hang). */
    if (poke(f, x) != CUDA_ERROR_DEVICE_UNAVAILABLE)
        return 12;
    CUdeviceptr y;
    if (cuMemAlloc(&y, 64) != CUDA_ERROR_DEVICE_UNAVAILABLE)
        return 13;
    if (cuCtxSynchronize() != CUDA_ERROR_DEVICE_UNAVAILABLE)
        return 14;
    return 0;
}

static void test_server_death_is_a_lost_device(void **state)
{
    (void)state;
    assert_int_equal(st_wait(st_fork(server_death_child, NULL)), 0);
}

static int client_child(void *arg)
{
    int *pipefd = arg;
    st_primary(0);
    st_primary(1);
    CUdeviceptr big;
    if (cuMemAlloc(&big, (size_t)3 << 30) != CUDA_SUCCESS)
        return 10;
    pid_t srv[4];
    int n = server_pids(getpid(), srv, 4);
    if (write(pipefd[1], &n, sizeof(n)) != sizeof(n) ||
        write(pipefd[1], srv, sizeof(srv[0]) * (size_t)n) != (ssize_t)(sizeof(srv[0]) * (size_t)n))
        return 11;
    pause(); /* killed here, holding its memory */
    return 0;
}

static void test_client_death_ends_its_servers(void **state)
{
    (void)state;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    int child = st_fork(client_child, pfd);
    int n = 0;
    pid_t srv[4];
    assert_int_equal(read(pfd[0], &n, sizeof(n)), sizeof(n));
    assert_int_equal(n, 2); /* one server per device it used */
    assert_int_equal(read(pfd[0], srv, sizeof(srv[0]) * 2), (ssize_t)sizeof(srv[0]) * 2);
    assert_true(alive(srv[0]) && alive(srv[1]));
    kill(child, SIGKILL);
    assert_int_equal(st_wait(child), 128 + SIGKILL);
    for (int i = 0; i < 200 && (alive(srv[0]) || alive(srv[1])); i++)
        usleep(50000);
    assert_false(alive(srv[0]));
    assert_false(alive(srv[1]));
    /* Its 3 GiB of the 4 GiB device are free again. */
    st_primary(0);
    CUdeviceptr p;
    CK(cuMemAlloc(&p, (size_t)3 << 30));
    CK(cuMemFree(p));
    close(pfd[0]);
    close(pfd[1]);
}

/* ---- a server's own mappings and registered host memory --------------------------- */
typedef struct {
    uintptr_t lo, hi;
    char perms[8];
    char name[256];
} smap_t;

/* The mappings of process pid (at most max). */
static int read_maps(pid_t pid, smap_t *out, int max)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "re");
    int n = 0;
    while (f && n < max && fgets(line, sizeof(line), f)) {
        unsigned long a, b;
        int pos = 0;
        smap_t *m = &out[n];
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &a, &b, m->perms, &pos) < 3)
            continue;
        m->lo = a;
        m->hi = b;
        snprintf(m->name, sizeof(m->name), "%s", line + pos);
        m->name[strcspn(m->name, "\n")] = '\0';
        n++;
    }
    if (f)
        fclose(f);
    return n;
}

/* A server's own memory: not what it maps for the client (shared: the
 * window's memfds, registered shared memory), nor the kernel's pages. */
static int server_own(const smap_t *m)
{
    return m->perms[3] == 'p' && m->perms[0] != '-' && strncmp(m->name, "[v", 2) != 0 &&
           strcmp(m->name, "[stack]") != 0;
}

/* Where an ordinary process's own mmaps land: top-down from a random base
 * in the highest terabytes below its stack (28 bits of page randomisation:
 * 1 TiB, and what the process maps below that). */
#define CLIENT_MMAP_LO 0x7e0000000000ULL
#define CLIENT_MMAP_HI 0x7ffffffff000ULL

static pid_t the_server(void)
{
    st_primary(0);
    CUdeviceptr x;
    CK(cuMemAlloc(&x, 4096));
    CK(cuMemsetD32(x, 0, 1024));
    CK(cuCtxSynchronize());
    CK(cuMemFree(x));
    pid_t srv[4];
    assert_int_equal(server_pids(getpid(), srv, 4), 1);
    return srv[0];
}

/* Host memory a client maps where its mmaps usually land can be
 * registered: the server keeps its own libraries, heap and stacks out of
 * that area. Every one of the server's own mappings inside it is tried: the
 * client maps the same addresses (where it has nothing there itself) and
 * registers them. With the server's ordinary randomised layout its libc
 * sits there and the registration is refused. */
static void test_server_keeps_off_client_mmap_area(void **state)
{
    (void)state;
    pid_t srv = the_server();
    static smap_t maps[4096];
    int n = read_maps(srv, maps, 4096), own = 0, tried = 0;
    int libc = 0;
    for (int i = 0; i < n; i++) {
        const smap_t *m = &maps[i];
        if (!server_own(m))
            continue;
        own++;
        libc |= strstr(m->name, "libc.so") != NULL;
        if (m->hi <= CLIENT_MMAP_LO || m->lo >= CLIENT_MMAP_HI)
            continue;
        size_t len = m->hi - m->lo;
        void *p = mmap((void *)m->lo, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == MAP_FAILED)
            continue; /* the client has something of its own there */
        assert_ptr_equal(p, (void *)m->lo);
        memset(p, 0x5a, len);
        tried++;
        CUresult r = cuMemHostRegister(p, len, 0);
        if (r != CUDA_SUCCESS)
            fail_msg("registering [%#lx, %#lx) (the server's %s): CUresult %d",
                     (unsigned long)m->lo, (unsigned long)m->hi, m->name, (int)r);
        CK(cuMemHostUnregister(p));
        assert_int_equal(((unsigned char *)p)[len - 1], 0x5a);
        munmap(p, len);
    }
    /* the server's maps were read: its libc at least */
    assert_true(own > 4);
    assert_true(libc);
    print_message("server %d: %d mappings of its own, %d in the client mmap area tried\n",
                  (int)srv, own, tried);
}

/* Copies between the device and host memory whose registration a server
 * refused (its own mapping is at those addresses: here, by construction)
 * are copies with pageable memory: correct, and the memory keeps its
 * contents and, for a shared mapping, its file. */
static void refused_case(uintptr_t at, size_t len, int shared)
{
    int fd = -1;
    unsigned char *p, *other = NULL;
    if (shared) {
        fd = memfd_create("iso-test-refused", MFD_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(ftruncate(fd, (off_t)len), 0);
        p = mmap((void *)at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
        other = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        assert_true(other != MAP_FAILED);
    } else {
        p = mmap((void *)at, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    }
    assert_ptr_equal(p, (void *)at);
    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)(i * 7 + 3);
    assert_int_equal(cuMemHostRegister(p, len, 0), CUDA_ERROR_OPERATING_SYSTEM);
    for (size_t i = 0; i < len; i++)
        if (p[i] != (unsigned char)(i * 7 + 3))
            fail_msg("byte %zu changed by the refused registration", i);
    if (shared) { /* still the file */
        other[1] = 0xee;
        assert_int_equal(p[1], 0xee);
        p[1] = (unsigned char)(1 * 7 + 3);
    }
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr d;
    CK(cuMemAlloc(&d, len));
    CK(cuMemcpyHtoD(d, p, len));
    CK(cuMemsetD8(d, 0x11, 16));
    CK(cuMemcpyDtoHAsync(p, d, len, s)); /* to pageable: done when it returns */
    for (size_t i = 0; i < len; i++)
        if (p[i] != (i < 16 ? 0x11 : (unsigned char)(i * 7 + 3)))
            fail_msg("byte %zu: %#x after the copy back", i, p[i]);
    memset(p, 0x22, len);
    CK(cuMemcpyHtoDAsync(d, p, len, s));
    CK(cuStreamSynchronize(s));
    unsigned char last = 0;
    CK(cuMemcpyDtoH(&last, d + len - 1, 1));
    assert_int_equal(last, 0x22);
    if (shared)
        assert_int_equal(other[len - 1], 0x22);
    /* and the server is none the worse */
    CUfunction f = crash_fn();
    CK(poke(f, d));
    assert_int_equal(peek(d), 1);
    CK(cuMemFree(d));
    CK(cuStreamDestroy(s));
    munmap(p, len);
    if (other)
        munmap(other, len);
    if (fd >= 0)
        close(fd);
}

static void test_refused_registration_is_pageable_memory(void **state)
{
    (void)state;
    pid_t srv = the_server();
    static smap_t maps[4096];
    int n = read_maps(srv, maps, 4096);
    /* A private mapping of the server's (its libc's, say) that is free
     * in the client. */
    uintptr_t at = 0;
    size_t len = 0;
    for (int i = 0; i < n && !at; i++) {
        const smap_t *m = &maps[i];
        if (!server_own(m) || m->hi - m->lo < 4 * 4096)
            continue;
        void *p = mmap((void *)m->lo, m->hi - m->lo, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == MAP_FAILED)
            continue;
        munmap(p, m->hi - m->lo);
        if (p != (void *)m->lo)
            continue;
        at = m->lo;
        len = 4 * 4096;
    }
    assert_true(at != 0);
    refused_case(at, len, 0);
    refused_case(at, len, 1);
}

/* ---- the setting itself ------------------------------------------------------------ */
static const char *g_self;

/* Fresh process (exec'd, so cuInit reads the environment it is given):
 * device memory written by the device, then read from the host. Prints
 * "init R" when cuInit refuses, "read V" when the host read works. */
static int child_host_read(void)
{
    CUresult r = cuInit(0);
    if (r != CUDA_SUCCESS) {
        printf("init %d\n", (int)r);
        return 0;
    }
    st_primary(0);
    CUdeviceptr p;
    if (cuMemAlloc(&p, 4096) || cuMemsetD32(p, 42, 1) || cuCtxSynchronize())
        return 10;
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
    fflush(stdout);
    printf("read %d\n", *(volatile int *)(uintptr_t)p);
    return 0;
}

static es_proc_result_t host_read(const char *isolation)
{
    char *argv[] = {(char *)g_self, (char *)"--child-host-read", NULL};
    char *env[] = {(char *)isolation, NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, 60, &r), 0);
    return r;
}

/* Isolation is the default (SIMCUDA_ISOLATION unset: the host read
 * faults); "0", the debugging setting, maps device memory in the
 * process (the read works: the control showing this test tells the two
 * apart); any other value is refused by cuInit with a message. */
static void test_isolation_setting(void **state)
{
    (void)state;
    es_proc_result_t r = host_read("SIMCUDA_ISOLATION="); /* unset */
    if (r.status != 128 + SIGSEGV || strstr(r.out, "read 42"))
        fail_msg("SIMCUDA_ISOLATION unset: status %d\n%s", r.status, r.out);
    es_proc_result_free(&r);
    r = host_read("SIMCUDA_ISOLATION=0");
    if (r.status != 0 || !strstr(r.out, "read 42\n"))
        fail_msg("SIMCUDA_ISOLATION=0: status %d\n%s", r.status, r.out);
    es_proc_result_free(&r);
    static const char *const bad[] = {"SIMCUDA_ISOLATION=yes", "SIMCUDA_ISOLATION=01",
                                      "SIMCUDA_ISOLATION=1 "};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        r = host_read(bad[i]);
        if (r.status != 0 || !strstr(r.out, "init 1\n") || !strstr(r.out, "is not 0 or 1"))
            fail_msg("%s: status %d\n%s", bad[i], r.status, r.out);
        es_proc_result_free(&r);
    }
}

int main(int argc, char **argv)
{
    g_self = argv[0];
    setenv("SIMCUDA_DEVICES", "a100:4G,a100:4G", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    if (argc > 1 && strcmp(argv[1], "--child-host-read") == 0)
        return child_host_read();
    st_private_shm("iso");
    setenv("SIMCUDA_ISOLATION", "1", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_isolation_setting),
        cmocka_unit_test(test_peer_access),
        cmocka_unit_test(test_vmm_access_for_another_device),
        cmocka_unit_test(test_kernels_reach_host_memory),
        cmocka_unit_test(test_registered_shared_mapping),
        cmocka_unit_test(test_server_death_is_a_lost_device),
        cmocka_unit_test(test_client_death_ends_its_servers),
        cmocka_unit_test(test_server_keeps_off_client_mmap_area),
        cmocka_unit_test(test_refused_registration_is_pageable_memory),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}

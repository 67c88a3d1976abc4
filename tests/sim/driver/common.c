/* Helpers shared by simcuda's driver tests: private capacity table, gates,
 * forked children. */
#include "tests/sim/driver/common.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_shm[64];

static void unlink_shm(void)
{
    if (g_shm[0])
        shm_unlink(g_shm);
}

void st_private_shm(const char *tag)
{
    snprintf(g_shm, sizeof(g_shm), "/simcuda-test-%s-%d", tag, (int)getpid());
    setenv("SIMCUDA_SHM_NAME", g_shm, 1);
    shm_unlink(g_shm);
    atexit(unlink_shm);
}

const char *st_shm_name(void) { return g_shm; }

CUcontext st_primary(int dev)
{
    CUdevice d;
    CUcontext c = NULL;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&d, dev) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&c, d) != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS) {
        fprintf(stderr, "st_primary(%d) failed\n", dev);
        abort();
    }
    return c;
}

struct st_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open;
};

st_gate_t *st_gate_new(void)
{
    st_gate_t *g = calloc(1, sizeof(*g));
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    return g;
}

static void gate_fn(void *arg)
{
    st_gate_t *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

void st_gate_wait(st_gate_t *g) { gate_fn(g); }

void st_gate_block(st_gate_t *g, CUstream s)
{
    if (cuLaunchHostFunc(s, gate_fn, g) != CUDA_SUCCESS)
        abort();
}

void st_gate_open(st_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void st_gate_free(st_gate_t *g)
{
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

int st_fork(int (*fn)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60);
        _exit(fn(arg));
    }
    return (int)pid;
}

int st_wait(int pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return WEXITSTATUS(st);
}

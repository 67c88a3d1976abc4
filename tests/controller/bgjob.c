/* Jobs in the background for the controller's whole-process tests
 * (bgjob.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/controller/bgjob.h"
#include "tests/harness.h"

static char g_dir[256] = "/tmp";
static pid_t g_jobs[64]; /* background jobs not waited for yet */

void msleep(int ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

void bg_dir(const char *dir)
{
    snprintf(g_dir, sizeof(g_dir), "%s", dir);
}

static void job_track(pid_t p, int add)
{
    for (int i = 0; i < 64; i++)
        if (add ? g_jobs[i] == 0 : g_jobs[i] == p) {
            g_jobs[i] = add ? p : 0;
            return;
        }
}

void bg_kill_all(void)
{
    for (int i = 0; i < 64; i++)
        if (g_jobs[i] > 0) {
            kill(-g_jobs[i], SIGKILL);
            waitpid(g_jobs[i], NULL, 0);
            g_jobs[i] = 0;
        }
}

void bg_start(bg_t *b, char *const env[], char *const argv[])
{
    static int seq;
    memset(b, 0, sizeof(*b));
    snprintf(b->out, sizeof(b->out), "%s/out-%d.txt", g_dir, ++seq);
    int fd = open(b->out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    b->pid = fork();
    assert_true(b->pid >= 0);
    if (b->pid == 0) {
        setpgid(0, 0);
        for (size_t i = 0; env && env[i]; i++) {
            const char *eq = strchr(env[i], '=');
            char name[128];
            size_t k = (size_t)(eq - env[i]);
            memcpy(name, env[i], k);
            name[k] = '\0';
            if (eq[1])
                setenv(name, eq + 1, 1);
            else
                unsetenv(name);
        }
        dup2(fd, 1);
        dup2(fd, 2);
        int nul = open("/dev/null", O_RDONLY);
        dup2(nul, 0);
        execv(argv[0], argv);
        _exit(127);
    }
    setpgid(b->pid, b->pid);
    job_track(b->pid, 1);
    close(fd);
}

/* Whether the job has ended (its status recorded). */
int bg_ended(bg_t *b)
{
    int st;
    if (b->done)
        return 1;
    if (waitpid(b->pid, &st, WNOHANG) != b->pid)
        return 0;
    b->done = 1;
    b->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    kill(-b->pid, SIGKILL); /* anything it left behind */
    job_track(b->pid, 0);
    return 1;
}

/* Exit code (128+signal for a signal), or -1 after timeout_s (the whole
 * group is killed then). */
int bg_wait(bg_t *b, int timeout_s)
{
    for (int i = 0; i < timeout_s * 20; i++) {
        if (bg_ended(b))
            return b->status;
        msleep(50);
    }
    kill(-b->pid, SIGKILL);
    waitpid(b->pid, NULL, 0);
    job_track(b->pid, 0);
    b->done = 1;
    b->status = -1;
    return -1;
}

/* Ends a job of fake ESTs now (each exits 0 at its next heartbeat: the
 * test, not the clock, says when it is done) and waits for it. */
int bg_finish(bg_t *b, int timeout_s)
{
    int fd = open(b->until, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    close(fd);
    return bg_wait(b, timeout_s);
}

char *bg_output(const bg_t *b)
{
    size_t len;
    char *s = es_read_file(b->out, &len);
    return s ? s : strdup("");
}


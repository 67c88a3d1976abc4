/* Test harness: run a process with a time limit, capture its output; the
 * build outputs a test needs. */
#include "tests/harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void apply_env(char *const env[])
{
    for (size_t i = 0; env && env[i]; i++) {
        const char *eq = strchr(env[i], '=');
        if (!eq)
            continue;
        char name[256];
        size_t n = (size_t)(eq - env[i]);
        if (n >= sizeof(name))
            continue;
        memcpy(name, env[i], n);
        name[n] = '\0';
        if (eq[1] == '\0')
            unsetenv(name);
        else
            setenv(name, eq + 1, 1);
    }
}

/* The runner's time limit for this program (ES_TEST_TIMEOUT, seconds), or 0
 * when not run by scripts/run-tests. */
static int runner_limit(void)
{
    const char *v = getenv("ES_TEST_TIMEOUT");
    char *end;
    long n = v && *v ? strtol(v, &end, 10) : 0;
    return n > 0 && *end == '\0' && n <= 86400 ? (int)n : 0;
}

int es_run(char *const argv[], char *const env[], int timeout_s, es_proc_result_t *r)
{
    int pfd[2];
    int ret = 0;
    memset(r, 0, sizeof(*r));
    int limit = runner_limit();
    if (limit && timeout_s > limit) {
        /* es_run_sh: name the command line, not the shell */
        const char *what = strcmp(argv[0], "bash") == 0 && argv[1] && argv[2] ? argv[2] : argv[0];
        fprintf(stderr, "es_run: a timeout of %d s is above the runner's limit of %d s for the whole "
                "program (ES_TEST_TIMEOUT), which would end the program first: lower the test's "
                "timeout (%.120s)\n", timeout_s, limit, what);
        return -ERANGE;
    }
    /* A program named by its path that is not there is a build output that
     * is missing: say which, rather than leave an exit status of 127. */
    if (strchr(argv[0], '/') && access(argv[0], X_OK) != 0) {
        ret = -errno;
        fprintf(stderr, "es_run: %s: %s (not built?)\n", argv[0], strerror(errno));
        return ret;
    }
    if (pipe2(pfd, O_CLOEXEC) < 0)
        return -errno;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        ret = -errno;
        close(pfd[0]);
        close(pfd[1]);
        return ret;
    }
    if (pid == 0) {
        setpgid(0, 0);
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        apply_env(env);
        execvp(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    close(pfd[1]);
    size_t cap = 4096;
    r->out = malloc(cap);
    double deadline = now_s() + timeout_s;
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0) {
            r->timed_out = 1;
            kill(-pid, SIGKILL);
            break;
        }
        struct pollfd p = { .fd = pfd[0], .events = POLLIN };
        int pr = poll(&p, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue;
        if (r->out_len + 4096 + 1 > cap) {
            cap *= 2;
            r->out = realloc(r->out, cap);
        }
        ssize_t n = read(pfd[0], r->out + r->out_len, cap - r->out_len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        r->out_len += (size_t)n;
    }
    r->out[r->out_len] = '\0';
    close(pfd[0]);
    int st = 0;
    if (r->timed_out) {
        waitpid(pid, &st, 0);
        r->status = -1;
    } else {
        /* Output closed: the process (or what holds its pipe) ended. */
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    kill(-pid, SIGKILL); /* leftovers of the process group */
    return ret;
}

int es_run_sh(const char *cmd, char *const env[], int timeout_s, es_proc_result_t *r)
{
    char *argv[] = { "bash", "-c", (char *)cmd, NULL };
    return es_run(argv, env, timeout_s, r);
}

void es_proc_result_free(es_proc_result_t *r)
{
    free(r->out);
    r->out = NULL;
}

static const char *join(const char *var, const char *dflt, const char *rel)
{
    static __thread char buf[8][4096];
    static __thread int k;
    const char *base = getenv(var);
    char *b = buf[k++ & 7];
    snprintf(b, 4096, "%s/%s", base && *base ? base : dflt, rel);
    return b;
}

const char *es_build_path(const char *rel) { return join("ES_BUILD", "build", rel); }
const char *es_root_path(const char *rel) { return join("ES_ROOT", ".", rel); }

int es_count(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)) != NULL; p++)
        n++;
    return n;
}

const char *es_find_last(const char *text, const char *key, char *buf, size_t len)
{
    const char *found = NULL;
    size_t kl = strlen(key);
    for (const char *p = text; p && *p; ) {
        if (strncmp(p, key, kl) == 0)
            found = p + kl;
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    if (!found || len == 0)
        return NULL;
    size_t n = strcspn(found, "\r\n");
    if (n >= len)
        n = len - 1;
    memcpy(buf, found, n);
    buf[n] = '\0';
    return buf;
}

const char *es_preload_env(const char *lib, char *buf, size_t len)
{
    const char *cur = getenv("LD_PRELOAD");
    int have = cur && *cur;
    snprintf(buf, len, "LD_PRELOAD=%s%s%s", have ? cur : "", have ? ":" : "", lib);
    return buf;
}

void *es_read_file(const char *path, size_t *len)
{
    char *p = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0)
        goto out;
    long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0)
        goto out;
    p = malloc((size_t)n + 1);
    if (!p)
        goto out;
    if (fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
        errno = EIO;
        goto out;
    }
    p[n] = '\0';
    *len = (size_t)n;
out:
    fclose(f);
    return p;
}

int es_file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

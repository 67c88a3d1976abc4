/* Test harness shared by the integration tests: runs a whole process with a
 * time limit and captures what it printed; skips a test with its reason;
 * fails a test whose build output is missing. */
#ifndef ES_TEST_HARNESS_H
#define ES_TEST_HARNESS_H

#include <stddef.h>

typedef struct es_proc_result {
    int status;       /* exit code, 128+signal if killed, -1 if timed out */
    int timed_out;
    char *out;        /* stdout and stderr together, NUL-terminated (free) */
    size_t out_len;
} es_proc_result_t;

/* Runs argv (argv[0] searched in PATH) with extra environment assignments
 * "NAME=VALUE" (NULL-terminated list, may be NULL; "NAME=" with nothing after
 * '=' unsets NAME), killing the process group after timeout_s seconds.
 * Returns 0 and fills *r, or a negative errno if it could not start (a
 * program named by a path that does not exist is said on stderr: a build
 * output that is missing).
 * Under scripts/run-tests (which exports its limit per program as
 * ES_TEST_TIMEOUT) a timeout_s above that limit is refused: it prints why
 * and returns -ERANGE, since the runner would kill the whole program before
 * this timeout could fire. */
int es_run(char *const argv[], char *const env[], int timeout_s, es_proc_result_t *r);

/* Like es_run with a shell command line (bash -c). */
int es_run_sh(const char *cmd, char *const env[], int timeout_s, es_proc_result_t *r);

void es_proc_result_free(es_proc_result_t *r);

/* Path of a build output: $ES_BUILD/<rel> (ES_BUILD set by scripts/simenv),
 * in a static buffer per call site; or of a source file: $ES_ROOT/<rel>. */
const char *es_build_path(const char *rel);
const char *es_root_path(const char *rel);

/* "LD_PRELOAD=<what this process has>:<lib>" into buf, for a child's
 * environment: whatever scripts/simenv preloaded (a sanitizer build's
 * runtime) must stay first. Returns buf. */
const char *es_preload_env(const char *lib, char *buf, size_t len);

/* The whole file at path, NUL-terminated (free), its size in *len; NULL
 * with errno set if it cannot be read. */
void *es_read_file(const char *path, size_t *len);

/* How many times what occurs in text (overlaps counted). */
int es_count(const char *text, const char *what);

/* Returns the value following "key " on the last line that starts with it
 * in text (e.g. "checksum "), copied into buf; NULL if none. */
const char *es_find_last(const char *text, const char *key, char *buf, size_t len);

/* Skips the current cmocka test (needs cmocka.h; nothing of harness.c) with
 * its reason, printed first as one line "SKIP-REASON: <reason>" that
 * scripts/run-tests lists with the test's name; fmt is a string literal.
 * Only for what the machine may lack and no package install provides (a
 * second GPU, another version of a vendor library); a missing build output
 * is a failure (es_need_built). */
#define es_test_skip(fmt, ...)                                          \
    do {                                                                \
        print_message("SKIP-REASON: " fmt "\n", ##__VA_ARGS__);         \
        skip();                                                         \
    } while (0)

/* es_build_path(rel), failing the current cmocka test (needs cmocka.h) with
 * a message naming the file when that build output does not exist: make
 * builds everything a test needs before running it, so a missing one is a
 * broken build, never a reason to skip. */
#define es_need_built(rel)                                                              \
    __extension__({                                                                     \
        const char *es_nb_ = es_build_path(rel);                                        \
        if (!es_file_exists(es_nb_))                                                    \
            fail_msg("%s is not built (make builds it before the tests run)", es_nb_);  \
        es_nb_;                                                                         \
    })
int es_file_exists(const char *path);

#endif

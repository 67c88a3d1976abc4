/* Test harness shared by the integration tests: runs a whole process with a
 * time limit and captures what it printed. */
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
 * Returns 0 and fills *r, or a negative errno if it could not start. */
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

/* Returns the value following "key " on the last line that starts with it
 * in text (e.g. "checksum "), copied into buf; NULL if none. */
const char *es_find_last(const char *text, const char *key, char *buf, size_t len);

#endif

/* Jobs in the background for the controller's whole-process tests: each in
 * its own process group, its output into a file of the test's directory;
 * waited for with a time limit, and killed (group and all) by the test's
 * teardown when a test failed midway. Needs cmocka.h before it. */
#ifndef ES_TESTS_CONTROLLER_BGJOB_H
#define ES_TESTS_CONTROLLER_BGJOB_H

#include <sys/types.h>

typedef struct bg {
    pid_t pid;
    char out[300];
    char until[300]; /* fake ESTs end when this file exists (bg_finish) */
    int status;
    int done;
} bg_t;

/* The directory the jobs' output files go to (the test's). */
void bg_dir(const char *dir);
/* argv[0] (a path) with env ("NAME=VALUE"; "NAME=" unsets) added. */
void bg_start(bg_t *b, char *const env[], char *const argv[]);
/* Whether the job has ended (its status recorded). */
int bg_ended(bg_t *b);
/* Exit code (128+signal for a signal), or -1 after timeout_s (the whole
 * group is killed then). */
int bg_wait(bg_t *b, int timeout_s);
/* Ends a job of fake ESTs now (each exits 0 at its next heartbeat: the
 * test, not the clock, says when it is done) and waits for it. */
int bg_finish(bg_t *b, int timeout_s);
/* What it printed so far (free). */
char *bg_output(const bg_t *b);
/* Kills every job not waited for yet (teardown). */
void bg_kill_all(void);
void msleep(int ms);

#endif

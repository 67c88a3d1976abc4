/* libeasyscale.so's constructor: reads the configuration (a bad value ends
 * the process with status 2 and a message, before main), sets the
 * environment the vendor libraries read for determinism, installs the
 * fork handlers, and starts the control thread when EASYSCALE_CONTROL is
 * set. Loads no CUDA library: those are loaded on first use. */
#include "shim/config.h"
#include "shim/control.h"
#include "shim/hooks.h"
#include "shim/internal.h"
#include "shim/log.h"
#include "shim/move.h"
#include "shim/real.h"

#include <pthread.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

pthread_mutex_t es_state_lock = PTHREAD_MUTEX_INITIALIZER;


/* Equal NCCL_MIN_CTAS / NCCL_MAX_CTAS: a fixed channel count. */
#define ES_NCCL_CTAS "2"

static void es_setenv_default(const char *name, const char *value)
{
    const char *cur = getenv(name);
    if (cur) {
        if (strcmp(cur, value) != 0)
            ES_INFO("%s=%s kept (set by the user; the deterministic default is %s)", name, cur,
                    value);
        return;
    }
    setenv(name, value, 0);
    ES_DEBUG("%s=%s", name, value);
}

void es_env_defaults(void)
{
    if (es_cfg.determinism == ES_DET_OFF)
        return;
    /* cuBLAS: one of the two documented deterministic workspace configs. */
    const char *ws = getenv("CUBLAS_WORKSPACE_CONFIG");
    if (!ws || (strcmp(ws, ":4096:8") != 0 && strcmp(ws, ":16:8") != 0)) {
        if (ws)
            ES_WARN("CUBLAS_WORKSPACE_CONFIG=%s is not deterministic: using :4096:8", ws);
        setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 1);
    }
    /* NCCL: fixed algorithm, protocol and channel count; no switch
     * reductions. */
    es_setenv_default("NCCL_ALGO", "Ring");
    es_setenv_default("NCCL_PROTO", "Simple");
    es_setenv_default("NCCL_NVLS_ENABLE", "0");
    /* With the virtual collectives the real NCCL only carries bytes between
     * the GPUs (coll/transport/nccl.c): never NVLink SHARP there, whatever
     * the user set (set here, before any thread could read the
     * environment). */
    const char *nvls = getenv("NCCL_NVLS_ENABLE");
    if (es_cfg.collectives == ES_COLL_VIRTUAL && (!nvls || strcmp(nvls, "0") != 0))
        setenv("NCCL_NVLS_ENABLE", "0", 1);
    const char *mn = getenv("NCCL_MIN_CTAS"), *mx = getenv("NCCL_MAX_CTAS");
    if (!mn && !mx) {
        setenv("NCCL_MIN_CTAS", ES_NCCL_CTAS, 0);
        setenv("NCCL_MAX_CTAS", ES_NCCL_CTAS, 0);
    } else if (!mn) {
        setenv("NCCL_MIN_CTAS", mx, 0);
    } else if (!mx) {
        setenv("NCCL_MAX_CTAS", mn, 0);
    } else if (strcmp(mn, mx) != 0) {
        ES_WARN("NCCL_MIN_CTAS=%s differs from NCCL_MAX_CTAS=%s: the channel count may vary", mn,
                mx);
    }
}

static void es_fork_prepare(void)
{
    es_resolve_atfork(0);
    pthread_mutex_lock(&es_state_lock);
}

static void es_fork_parent(void)
{
    pthread_mutex_unlock(&es_state_lock);
    es_resolve_atfork(1);
}

static void es_fork_child(void)
{
    pthread_mutex_unlock(&es_state_lock);
    es_resolve_atfork(2);
}

__attribute__((constructor)) static void es_init(void)
{
    char msg[512] = "";
    if (es_config_parse(&es_cfg, msg, sizeof(msg)) < 0 ||
        es_intercept_start(msg, sizeof(msg)) < 0) {
        char line[600];
        int n = snprintf(line, sizeof(line), "easyscale: %s\n", msg);
        if (n > 0) {
            ssize_t w = write(2, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
            (void)w;
        }
        _exit(2);
    }
    es_env_defaults();
    es_move_setup();
    pthread_atfork(es_fork_prepare, es_fork_parent, es_fork_child);
    es_control_start(); /* EASYSCALE_CONTROL: the controller's channel (own thread) */
    ES_DEBUG("loaded: determinism %s, audit %s",
             es_cfg.determinism == ES_DET_OFF ? "off" : es_cfg.determinism == ES_DET_D1 ? "d1" : "d2",
             es_cfg.audit == ES_AUDIT_MODE_OFF ? "off" : es_cfg.audit == ES_AUDIT_MODE_WARN ? "warn" : "strict");
}

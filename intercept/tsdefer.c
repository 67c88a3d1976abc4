/* The time-slicing check before a wrapped call (intercept/tsdefer.h): does
 * the application's call depend on a collective its EST keeps? The
 * driver functions' classes come from the one list (shim/funcs.h), by
 * name, once. */
#include "intercept/tsdefer.h"
#include "intercept/virtual/libh.h"
#include "move/door.h"
#include "shim/log.h"
#include "shim/real.h"

#include <pthread.h>
#include <string.h>

__thread int es_ts_in_nccl;

enum {
    ES_TSC_PLAIN = 0,
    ES_TSC_RECORD,   /* cuEventRecord*: kept when its stream has kept work */
    ES_TSC_EQUERY,   /* cuEventQuery: not ready when kept */
    ES_TSC_SQUERY,   /* cuStreamQuery*: not ready when its stream has kept work */
    ES_TSC_WAIT,     /* cuStreamWaitEvent*: yields for a kept event only */
    ES_TSC_LEGACY,   /* synchronous copies and memsets: the legacy stream */
    ES_TSC_SYNC,     /* synchronises or releases: yields when anything is kept */
};

#define ES_TS_NAME(kind, sym, gp, ver, fl, ret, params, args, err) #sym,
static const char *const es_ts_cuda_names[] = { ES_CUDA_FUNCS(ES_TS_NAME) };
#undef ES_TS_NAME
#define ES_TS_NCUDA ((int)(sizeof(es_ts_cuda_names) / sizeof(es_ts_cuda_names[0])))

static unsigned char es_ts_class[ES_TS_NCUDA];
static pthread_once_t es_ts_once = PTHREAD_ONCE_INIT;

static int es_starts(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

static int es_ts_classify(const char *n)
{
    static const char *const sync[] = {
        "cuCtxSynchronize", "cuCtxDestroy", "cuDevicePrimaryCtxRelease",
        "cuDevicePrimaryCtxReset", "cuMemFree", "cuMemHostUnregister", "cuModuleUnload",
        "cuLibraryUnload", "cuMemUnmap", "cuMemRelease", "cuMemAddressFree",
    };
    if (es_starts(n, "cuEventRecord"))
        return ES_TSC_RECORD;
    if (strcmp(n, "cuEventQuery") == 0)
        return ES_TSC_EQUERY;
    if (es_starts(n, "cuStreamQuery"))
        return ES_TSC_SQUERY;
    if (es_starts(n, "cuStreamWaitEvent"))
        return ES_TSC_WAIT;
    if ((es_starts(n, "cuMemcpy") || es_starts(n, "cuMemset")) && !strstr(n, "Async"))
        return ES_TSC_LEGACY;
    for (size_t i = 0; i < sizeof(sync) / sizeof(sync[0]); i++)
        if (es_starts(n, sync[i]) && !strstr(n, "Async"))
            return ES_TSC_SYNC;
    return ES_TSC_PLAIN;
}

static void es_ts_init(void)
{
    for (int i = 0; i < ES_TS_NCUDA; i++)
        es_ts_class[i] = (unsigned char)es_ts_classify(es_ts_cuda_names[i]);
}

/* The streams and events of the call (a cuBLAS/cuDNN handle: its stream). */
static void es_ts_split(const es_ts_notes_t *t, CUstream *s, int *ns, CUevent *e, int *ne)
{
    *ns = *ne = 0;
    for (int i = 0; i < t->n; i++) {
        void *hs = NULL;
        if (t->kind[i] == ES_TS_STREAM)
            s[(*ns)++] = (CUstream)t->h[i];
        else if (t->kind[i] == ES_TS_EVENT)
            e[(*ne)++] = (CUevent)t->h[i];
        else if (es_libh_stream(t->h[i], &hs))
            s[(*ns)++] = (CUstream)hs;
    }
}

/* Whether the call must wait for what is kept; sets *answer (1) with
 * *status for the calls answered here. */
static int es_ts_depends(int cls, const CUstream *s, int ns, const CUevent *e, int ne,
                         int *answer, int *status)
{
    switch (cls) {
    case ES_TSC_RECORD: {
        CUstream st = ns ? s[0] : NULL;
        if (ne && es_coll_ts_stream_kept(st, 1)) {
            if (es_coll_ts_keep_record(e[0], st) < 0)
                return 1; /* no room: yield instead */
            *answer = 1;
            *status = CUDA_SUCCESS;
            return 0;
        }
        if (ne)
            es_coll_ts_forget_event(e[0]);
        return 0;
    }
    case ES_TSC_EQUERY:
    case ES_TSC_SQUERY:
        if ((cls == ES_TSC_EQUERY && ne && es_coll_ts_event_kept(e[0])) ||
            (cls == ES_TSC_SQUERY && es_coll_ts_stream_kept(ns ? s[0] : NULL, 1))) {
            *answer = 1;
            *status = CUDA_ERROR_NOT_READY;
        }
        return 0;
    case ES_TSC_WAIT:
        return ne && es_coll_ts_event_kept(e[0]);
    case ES_TSC_LEGACY:
        return es_coll_ts_stream_kept(NULL, 1);
    case ES_TSC_SYNC:
        return 1;
    default:
        break;
    }
    for (int i = 0; i < ns; i++)
        if (es_coll_ts_stream_kept(s[i], 1))
            return 1;
    for (int i = 0; i < ne; i++)
        if (es_coll_ts_event_kept(e[i]))
            return 1;
    return 0;
}

int es_ts_check(int lib, int idx, const es_ts_notes_t *t, int *status)
{
    /* the engine's, a move's, a flush's own calls, or a library's inside
     * a wrapped call */
    if (es_ts_in_nccl || es_door_tls.moving || es_door_tls.depth > 1 || es_coll_ts_busy())
        return 0;
    pthread_once(&es_ts_once, es_ts_init);
    int cls = lib == ES_LIB_CUDA && idx >= 0 && idx < ES_TS_NCUDA ? es_ts_class[idx]
                                                                    : ES_TSC_PLAIN;
    CUstream s[ES_TS_NOTES];
    CUevent e[ES_TS_NOTES];
    int ns, ne, answer = 0;
    es_ts_split(t, s, &ns, e, &ne);
    if (!es_ts_depends(cls, s, ns, e, ne, &answer, status))
        return answer;
    if (es_coll_ts_flush() == 0)
        return 0;
    ES_ERROR("time-slicing: the collectives this call depends on could not run: %s",
             es_coll_last_error());
    switch (lib) {
    case ES_LIB_CUDA:
        *status = CUDA_ERROR_LAUNCH_FAILED;
        break;
    case ES_LIB_CUDNN:
        *status = CUDNN_STATUS_EXECUTION_FAILED;
        break;
    default:
        *status = CUBLAS_STATUS_EXECUTION_FAILED;
        break;
    }
    return 1;
}

/* The cuDNN backend's engines as the determinism levels see them (see
 * intercept/cudnn_heur.h): engine configs read back, the canonical engine
 * of an operation graph (the first deterministic engine of cuDNN's own
 * INSTANT ranking), the heuristics result the shim answers with. */
#include "intercept/cudnn_heur.h"

#include "shim/log.h"
#include "shim/real.h"

/* The engine global index of an engine config and whether the engine
 * carries the nondeterministic note (-1 when it cannot be read). */
int64_t es_cfg_engine(cudnnBackendDescriptor_t cfg, int *nondet)
{
    cudnnBackendDescriptor_t eng = NULL;
    int64_t gidx = -1, n = 0;
    *nondet = 0;
    if (ES_REAL(cudnn, cudnnBackendCreateDescriptor)(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) !=
        CUDNN_STATUS_SUCCESS)
        return -1;
    if (ES_REAL(cudnn, cudnnBackendGetAttribute)(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) ==
            CUDNN_STATUS_SUCCESS &&
        n == 1) {
        cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
        int64_t nn = 0;
        if (ES_REAL(cudnn, cudnnBackendGetAttribute)(
                eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn, notes) == CUDNN_STATUS_SUCCESS)
            for (int64_t i = 0; i < nn && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++)
                if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)
                    *nondet = 1;
        if (ES_REAL(cudnn, cudnnBackendGetAttribute)(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
                                                     CUDNN_TYPE_INT64, 1, &n, &gidx) !=
            CUDNN_STATUS_SUCCESS)
            gidx = -1;
    }
    ES_REAL(cudnn, cudnnBackendDestroyDescriptor)(eng);
    return gidx;
}

void es_dnn_destroy_all(cudnnBackendDescriptor_t *d, int n)
{
    for (int i = 0; i < n; i++)
        if (d[i])
            ES_REAL(cudnn, cudnnBackendDestroyDescriptor)(d[i]);
}

/* Every result of a finalized heuristics descriptor, read into descriptors
 * of the shim's own: each one's engine index and note. Returns the number
 * of results (at most max), or -1. */
static int es_heur_scan(cudnnBackendDescriptor_t heur, int64_t *gidx, int *nondet, int max)
{
    cudnnBackendDescriptor_t cfgs[ES_BK_MAX_RES] = { NULL };
    int64_t n = 0, got = 0;
    int ret = -1;
    if (ES_REAL(cudnn, cudnnBackendGetAttribute)(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL) !=
        CUDNN_STATUS_SUCCESS)
        goto out;
    if (n > max)
        n = max;
    for (int64_t i = 0; i < n; i++)
        if (ES_REAL(cudnn, cudnnBackendCreateDescriptor)(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
                                                         &cfgs[i]) != CUDNN_STATUS_SUCCESS)
            goto out;
    if (n && ES_REAL(cudnn, cudnnBackendGetAttribute)(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got,
                                                      cfgs) != CUDNN_STATUS_SUCCESS)
        goto out;
    if (got > n)
        got = n;
    for (int64_t i = 0; i < got; i++)
        gidx[i] = es_cfg_engine(cfgs[i], &nondet[i]);
    ret = (int)got;
out:
    es_dnn_destroy_all(cfgs, ES_BK_MAX_RES);
    return ret;
}

/* The canonical engine of an operation graph: the engine of the first
 * deterministic config in cuDNN's INSTANT ranking (-1: none or unknown). */
static int64_t es_canonical_engine(cudnnBackendDescriptor_t graph)
{
    cudnnBackendDescriptor_t h = NULL;
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_INSTANT;
    int64_t gidx[ES_BK_MAX_RES], ret = -1;
    int nondet[ES_BK_MAX_RES];
    if (!graph ||
        ES_REAL(cudnn, cudnnBackendCreateDescriptor)(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &h) !=
            CUDNN_STATUS_SUCCESS)
        return -1;
    if (ES_REAL(cudnn, cudnnBackendSetAttribute)(h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph) ||
        ES_REAL(cudnn, cudnnBackendSetAttribute)(h, CUDNN_ATTR_ENGINEHEUR_MODE,
                                                 CUDNN_TYPE_HEUR_MODE, 1, &mode) ||
        ES_REAL(cudnn, cudnnBackendFinalize)(h))
        goto out;
    int n = es_heur_scan(h, gidx, nondet, ES_BK_MAX_RES);
    for (int i = 0; i < n && ret < 0; i++)
        if (!nondet[i] && gidx[i] >= 0)
            ret = gidx[i];
out:
    ES_REAL(cudnn, cudnnBackendDestroyDescriptor)(h);
    return ret;
}

/* Which result of heuristics descriptor heur the application gets: its
 * config of the graph's canonical engine, else its first deterministic one;
 * -1 when none is deterministic (or the results cannot be read). */
int es_heur_choose(cudnnBackendDescriptor_t heur, cudnnBackendDescriptor_t graph)
{
    int64_t gidx[ES_BK_MAX_RES];
    int nondet[ES_BK_MAX_RES], pick = -1;
    int n = es_heur_scan(heur, gidx, nondet, ES_BK_MAX_RES);
    int64_t canon = es_canonical_engine(graph);
    for (int i = 0; i < n && pick < 0; i++)
        if (!nondet[i] && gidx[i] >= 0 && gidx[i] == canon)
            pick = i;
    for (int i = 0; i < n && pick < 0; i++)
        if (!nondet[i] && gidx[i] >= 0)
            pick = i;
    if (n > 0)
        ES_DEBUG("cudnn heuristics: result %d of %d kept (canonical engine %lld)", pick, n,
                 (long long)canon);
    return pick;
}

/* Result `pick` of heur copied into the caller's descriptor out: the real
 * call with the caller's descriptor at position pick and descriptors of
 * the shim's own before it (cuDNN copies result i into element i). */
cudnnStatus_t es_heur_fill(cudnnBackendDescriptor_t heur, int pick,
                                  cudnnBackendDescriptor_t out)
{
    cudnnBackendDescriptor_t arr[ES_BK_MAX_RES] = { NULL };
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    int64_t got = 0;
    for (int i = 0; i < pick && !st; i++)
        st = ES_REAL(cudnn, cudnnBackendCreateDescriptor)(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
                                                          &arr[i]);
    if (!st) {
        arr[pick] = out;
        st = ES_REAL(cudnn, cudnnBackendGetAttribute)(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, pick + 1,
                                                      &got, arr);
        arr[pick] = NULL;
    }
    es_dnn_destroy_all(arr, pick);
    if (!st && got < pick + 1)
        st = CUDNN_STATUS_INTERNAL_ERROR;
    return st;
}

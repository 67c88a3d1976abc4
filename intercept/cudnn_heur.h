/* The cuDNN backend's engines as the determinism levels see them
 * (intercept/cudnn_heur.c): which engine a config names and whether it
 * carries the nondeterministic note, and the ONE heuristics result the
 * shim answers with (intercept/cudnn_backend.c explains the rule). Used by
 * the backend's wrappers and by the descriptor journal that re-makes
 * descriptors after a move (intercept/virtual/cudnn_journal.c). All
 * arguments are cuDNN's real descriptors. */
#ifndef ES_INTERCEPT_CUDNN_HEUR_H
#define ES_INTERCEPT_CUDNN_HEUR_H

#include <cudnn.h>
#include <stdint.h>

#define ES_BK_MAX_OPS 8   /* descriptor elements read without allocating */
#define ES_BK_MAX_RES 64  /* heuristics results read */

/* The global engine index of engine config cfg (-1: unknown); *nondet set
 * when the engine carries CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC. */
int64_t es_cfg_engine(cudnnBackendDescriptor_t cfg, int *nondet);

/* Destroys the first n descriptors of d (NULL entries skipped). */
void es_dnn_destroy_all(cudnnBackendDescriptor_t *d, int n);

/* Which result of finalized heuristics descriptor heur the application
 * gets: its config of graph's canonical engine, else its first
 * deterministic one; -1 when none is deterministic (or the results cannot
 * be read). */
int es_heur_choose(cudnnBackendDescriptor_t heur, cudnnBackendDescriptor_t graph);

/* Result `pick` of heur copied into the caller's descriptor out (cuDNN
 * copies result i into element i: descriptors of the shim's own stand
 * before it). */
cudnnStatus_t es_heur_fill(cudnnBackendDescriptor_t heur, int pick,
                           cudnnBackendDescriptor_t out);

#endif

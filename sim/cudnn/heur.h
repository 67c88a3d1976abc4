/* simcuda cuDNN: the algorithm heuristics (what cudnnGet*Algorithm_v7 and
 * the backend's engine heuristics rank first), as a pure function of the
 * device (compute capability, model) and the problem shape, so GPU models
 * pick different algorithms as real cuDNN does. The rules are documented in
 * heur.c and in the module's report; tests in tests/sim/cudnn pin them. */
#ifndef SIM_CUDNN_HEUR_H
#define SIM_CUDNN_HEUR_H

#include "sim/cudnn/kern.h"

typedef struct sim_heur_dev {
    int cc_major, cc_minor;
    int sm_count;
    char model[16];
} sim_heur_dev_t;

/* Fills algos[0..sim_conv_algo_count(dir)) with every algorithm of dir:
 * the ones that can run p in preference order first, then the unsupported
 * ones in id order. Returns how many are supported. */
int sim_heur_rank(int dir, const sim_heur_dev_t *dev, const sim_conv_t *p, int *algos);

#endif

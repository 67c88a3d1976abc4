/* The spine's private cross-file prototypes (the .c files of shim/ only). */
#ifndef ES_SHIM_INTERNAL_H
#define ES_SHIM_INTERNAL_H

/* Constructor pieces. */
void es_env_defaults(void);          /* CUBLAS_WORKSPACE_CONFIG, NCCL_* */
void es_resolve_atfork(int phase);   /* 0 prepare, 1 parent, 2 child */
void es_log_atfork(int phase);

#endif

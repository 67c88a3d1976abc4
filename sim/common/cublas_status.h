/* cuBLAS status names and messages, shared by simcuda's cuBLAS
 * (cublasGetStatusName / cublasGetStatusString) and cuBLASLt
 * (cublasLtGetStatusName / cublasLtGetStatusString), which answer alike
 * for the one cublasStatus_t. */
#ifndef SIM_CUBLAS_STATUS_H
#define SIM_CUBLAS_STATUS_H

#include <cublas_api.h>

/* The enumerator's name ("CUBLAS_STATUS_SUCCESS", ...), or
 * "CUBLAS_STATUS_UNKNOWN" for a value cublas_api.h does not define. */
const char *sim_cublas_status_name(cublasStatus_t status);

/* A short description ("success", ...), or "unknown error". */
const char *sim_cublas_status_string(cublasStatus_t status);

#endif

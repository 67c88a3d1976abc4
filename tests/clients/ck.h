/* The test clients' check (programs written against NVIDIA's headers and
 * run as whole processes by the tests): CK(x) prints
 * "FAIL <expression> = <status> (line N)" and exits 1 when x, a status of
 * any of the libraries' types, is not 0. Needs <stdio.h> and <stdlib.h>. */
#ifndef ES_TESTS_CLIENTS_CK_H
#define ES_TESTS_CLIENTS_CK_H

#define CK(x)                                                                                 \
    do {                                                                                      \
        long long _r = (long long)(x);                                                        \
        if (_r != 0) {                                                                        \
            printf("FAIL %s = %lld (line %d)\n", #x, _r, __LINE__);                          \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

#endif

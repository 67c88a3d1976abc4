/* Open MPI's MPI_Allreduce (float sum, in place) on host buffers, the
 * comparison figures of tests/coll/bench_coll.c: the same sizes and
 * iteration counts, the slowest rank's time per operation, printed as
 * "result BYTES SECONDS". Built only where Open MPI is installed (mpicc);
 * run by coll_bench with mpirun over shared memory (btl self,vader). */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSIZES 9
static const size_t g_sizes[NSIZES] = { 4u << 10, 16u << 10, 64u << 10, 256u << 10, 1u << 20,
                                        4u << 20, 16u << 20, 64u << 20, 256u << 20 };

static int iters_for(size_t bytes)
{
    size_t k = (64u << 20) / bytes;
    return k < 3 ? 3 : k > 200 ? 200 : (int)k;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    size_t maxb = g_sizes[NSIZES - 1];
    float *b = malloc(maxb);
    if (!b)
        MPI_Abort(MPI_COMM_WORLD, 1);
    for (size_t i = 0; i < maxb / 4; i++)
        b[i] = 1.0f;
    for (int k = 0; k < NSIZES; k++) {
        int cnt = (int)(g_sizes[k] / 4), it = iters_for(g_sizes[k]);
        MPI_Allreduce(MPI_IN_PLACE, b, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < it; i++)
            MPI_Allreduce(MPI_IN_PLACE, b, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double t = (MPI_Wtime() - t0) / it, tmax = 0;
        MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0)
            printf("result %zu %.9f\n", g_sizes[k], tmax);
    }
    free(b);
    MPI_Finalize();
    return 0;
}

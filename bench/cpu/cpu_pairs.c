/* How a machine's CPUs share their cores: what limits the CPU engine's scaling to 16 threads.
 *
 * The CPU engine's work is OpenBLAS's single-threaded sgemm, one call per block of a tile's
 * convolution (core/cpu/ops/Gemm.cpp, cpu::gemmBlocks). This runs the same kind of work, one
 * process per CPU, pinned with sched_setaffinity, and prints how long each took:
 *
 *   cpu_pairs CPU [CPU ...]   one worker per listed CPU, all started together (a barrier in shared
 *                             memory), each runs ITER sgemms of 256 x 256 x 256; prints
 *                             "cpu,seconds,gflops" per worker
 *
 * bench/gpu/run.sh cpu-pairs calls it solo, for every pair (0, j) and for 1, 2, 4, 8, 12, 16 CPUs
 * at once. A pair that slows both of its workers by well over 1.1x shares a core
 * (SMT siblings the VM does not show in lscpu) or its cache; the all-at-once rows are the
 * machine's sgemm throughput ceiling, the most the CPU engine's threads can scale.
 *
 * Build: cc -O2 -o cpu_pairs bench/cpu/cpu_pairs.c -lopenblas
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { N = 256 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: cpu_pairs CPU [CPU ...]   (ITER=300 sgemms of %d^3 each)\n", N);
        return 2;
    }
    const int iters = getenv("ITER") ? atoi(getenv("ITER")) : 300;
    const int workers = argc - 1;
    // Shared: a start barrier and each worker's seconds.
    struct Shared {
        atomic_int ready;
        atomic_int go;
        double seconds[256];
    }* shared = mmap(NULL, sizeof(struct Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED || workers > 256) return 1;
    atomic_store(&shared->ready, 0);
    atomic_store(&shared->go, 0);
    for (int w = 0; w < workers; ++w) {
        const pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid > 0) continue;
        const int cpu = atoi(argv[w + 1]);
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) {
            perror("sched_setaffinity");
            _exit(1);
        }
        openblas_set_num_threads(1);
        float* a = malloc(sizeof(float) * N * N);
        float* b = malloc(sizeof(float) * N * N);
        float* c = malloc(sizeof(float) * N * N);
        for (int i = 0; i < N * N; ++i) {
            a[i] = (float)(((long)i * 7919) % 1000) / 1000.0f - 0.5f;
            b[i] = (float)(((long)i * 104729) % 1000) / 1000.0f - 0.5f;
            c[i] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);  // warm
        atomic_fetch_add(&shared->ready, 1);
        while (!atomic_load(&shared->go)) {
        }
        const double t0 = now();
        for (int i = 0; i < iters; ++i)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.5f, c, N);
        shared->seconds[w] = now() - t0;
        _exit(c[17] != c[17]);  // NaN: the work was not what it should be
    }
    while (atomic_load(&shared->ready) < workers) usleep(100);
    atomic_store(&shared->go, 1);
    int status = 0;
    for (int w = 0; w < workers; ++w) {
        int st = 0;
        wait(&st);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) status = 1;
    }
    const double flop = 2.0 * N * N * (double)N * iters;
    for (int w = 0; w < workers; ++w)
        printf("%s,%.4f,%.1f\n", argv[w + 1], shared->seconds[w], flop / shared->seconds[w] / 1e9);
    return status;
}

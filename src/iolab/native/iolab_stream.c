/* iolab_stream: a STREAM-style memory bandwidth kernel (iolab's own code, not STREAM's
 * source; it follows STREAM's rules so its numbers are comparable in kind).
 *
 *   iolab_stream --elements N --ntimes K
 *
 * Three arrays of N doubles, single-threaded, four kernels per iteration:
 *   Copy  c = a          16 bytes per element
 *   Scale b = s*c        16 bytes per element
 *   Add   c = a + b      24 bytes per element
 *   Triad a = b + s*c    24 bytes per element
 * K iterations; each kernel's rate is taken from its best (minimum) time over iterations
 * 2..K (the first is excluded), in MB/s with MB = 10^6 bytes. Arrays are written once
 * (first touch) before anything is timed. After the run the arrays are checked against
 * the values computed analytically from K (STREAM's check: the average absolute error per
 * array, relative to the expected value, must be below 1e-13).
 *
 * Output (stdout, one line of JSON), exit status 0 ok, 3 validation failed (JSON still
 * printed), 2 bad arguments, 1 out of memory.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MIN_ELEMENTS 1000ULL
#define MAX_ELEMENTS (1ULL << 33) /* 64 GiB per array */
#define MAX_NTIMES 100            /* values grow 15x per iteration; 15^100 fits a double */
#define EPSILON 1e-13
#define SCALAR 3.0
#define PAD 64 /* doubles between arrays, so they do not start on the same cache set */

/* Global so the kernels' stores are visible to any external call (the timer): the compiler
 * must finish them before taking the time and cannot drop them. */
double *a, *b, *c;

static const char *const names[4] = {"copy", "scale", "add", "triad"};
static const double bytes_per_elem[4] = {16, 16, 24, 24};

static inline void barrier(void) { __asm__ __volatile__("" ::: "memory"); }

static double now(void)
{
    struct timespec ts;
    barrier();
    clock_gettime(CLOCK_MONOTONIC, &ts);
    barrier();
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void kernel(int k, size_t n)
{
    const double s = SCALAR;
    double *restrict pa = a, *restrict pb = b, *restrict pc = c;
    switch (k) {
    case 0:
        for (size_t j = 0; j < n; j++)
            pc[j] = pa[j];
        break;
    case 1:
        for (size_t j = 0; j < n; j++)
            pb[j] = s * pc[j];
        break;
    case 2:
        for (size_t j = 0; j < n; j++)
            pc[j] = pa[j] + pb[j];
        break;
    default:
        for (size_t j = 0; j < n; j++)
            pa[j] = pb[j] + s * pc[j];
        break;
    }
}

static int parse_u64(const char *s, unsigned long long lo, unsigned long long hi,
                     unsigned long long *out)
{
    if (!s || !s[0] || s[0] == '-' || s[0] == '+')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static double avg_rel_err(const double *x, size_t n, double expected)
{
    double sum = 0;
    for (size_t j = 0; j < n; j++)
        sum += fabs(x[j] - expected);
    return sum / (double)n / fabs(expected);
}

static void usage(const char *prog)
{
    fprintf(stderr, "usage: %s --elements N --ntimes K  (N %llu..%llu doubles per array, K 2..%d)\n",
            prog, MIN_ELEMENTS, MAX_ELEMENTS, MAX_NTIMES);
}

int main(int argc, char **argv)
{
    unsigned long long n = 0, ntimes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--elements") && i + 1 < argc) {
            if (parse_u64(argv[++i], MIN_ELEMENTS, MAX_ELEMENTS, &n)) {
                fprintf(stderr, "iolab_stream: bad --elements %s\n", argv[i]);
                usage(argv[0]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--ntimes") && i + 1 < argc) {
            if (parse_u64(argv[++i], 2, MAX_NTIMES, &ntimes)) {
                fprintf(stderr, "iolab_stream: bad --ntimes %s\n", argv[i]);
                usage(argv[0]);
                return 2;
            }
        } else {
            fprintf(stderr, "iolab_stream: unknown argument %s\n", argv[i]);
            usage(argv[0]);
            return 2;
        }
    }
    if (!n || !ntimes) {
        usage(argv[0]);
        return 2;
    }

    size_t total = 3 * (size_t)n + 2 * PAD;
    double *mem = NULL;
    if (posix_memalign((void **)&mem, 4096, total * sizeof(double))) {
        fprintf(stderr, "iolab_stream: out of memory: %zu bytes for 3 arrays\n",
                total * sizeof(double));
        return 1;
    }
    a = mem;
    b = a + n + PAD;
    c = b + n + PAD;

    /* First touch: every page is written before the timing starts. */
    for (size_t j = 0; j < n; j++) {
        a[j] = 1.0;
        b[j] = 2.0;
        c[j] = 0.0;
    }

    double *times = malloc(4 * ntimes * sizeof(double));
    if (!times) {
        fprintf(stderr, "iolab_stream: out of memory\n");
        return 1;
    }
    for (unsigned long long it = 0; it < ntimes; it++) {
        for (int k = 0; k < 4; k++) {
            double t0 = now();
            kernel(k, n);
            times[4 * it + k] = now() - t0;
        }
    }

    /* Expected values: the same sequence of operations on scalars. */
    double ea = 1.0, eb = 2.0, ec = 0.0;
    for (unsigned long long it = 0; it < ntimes; it++) {
        ec = ea;
        eb = SCALAR * ec;
        ec = ea + eb;
        ea = eb + SCALAR * ec;
    }
    double err_a = avg_rel_err(a, n, ea), err_b = avg_rel_err(b, n, eb),
           err_c = avg_rel_err(c, n, ec);
    int ok = err_a <= EPSILON && err_b <= EPSILON && err_c <= EPSILON;

    struct timespec res;
    clock_getres(CLOCK_MONOTONIC, &res);
    printf("{\"variant\":\"iolab STREAM-style kernel (not STREAM's source)\","
           "\"threads\":1,\"elements\":%llu,\"bytes_per_array\":%llu,\"total_bytes\":%llu,"
           "\"ntimes\":%llu,\"mb\":1000000,\"timer_resolution_ns\":%ld,\"kernels\":{",
           n, n * 8ULL, 3ULL * n * 8ULL, ntimes, res.tv_nsec + res.tv_sec * 1000000000L);
    for (int k = 0; k < 4; k++) {
        double mn = INFINITY, mx = 0, sum = 0;
        for (unsigned long long it = 1; it < ntimes; it++) {
            double t = times[4 * it + k];
            mn = t < mn ? t : mn;
            mx = t > mx ? t : mx;
            sum += t;
        }
        double bytes = bytes_per_elem[k] * (double)n;
        printf("%s\"%s\":{\"best_mb_s\":%.3f,\"avg_s\":%.9f,\"min_s\":%.9f,\"max_s\":%.9f,"
               "\"bytes_per_iteration\":%.0f,\"first_s\":%.9f}",
               k ? "," : "", names[k], mn > 0 ? 1e-6 * bytes / mn : 0.0,
               sum / (double)(ntimes - 1), mn, mx, bytes, times[k]);
    }
    printf("},\"validation\":{\"ok\":%s,\"epsilon\":%g,\"avg_rel_err\":{\"a\":%.3e,\"b\":%.3e,"
           "\"c\":%.3e},\"expected\":{\"a\":%.17g,\"b\":%.17g,\"c\":%.17g}}}\n",
           ok ? "true" : "false", EPSILON, err_a, err_b, err_c, ea, eb, ec);
    free(times);
    free(mem);
    if (fflush(stdout))
        return 1;
    return ok ? 0 : 3;
}

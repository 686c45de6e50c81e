/* iolab_primes: count the primes below each limit given on the command line, single-threaded.
 *
 *   iolab_primes LIMIT [LIMIT...]
 *
 * Method: a plain (not segmented) sieve of Eratosthenes over the odd numbers only, one bit
 * per odd number (bit i stands for 2i+1; a set bit means composite). Each limit is a fresh
 * sieve, timed with clock_gettime(CLOCK_MONOTONIC) from before the bit array is allocated
 * to after the primes are counted (allocation, zeroing, sieving and counting all included).
 *
 * Output (stdout, one line of JSON):
 *   {"method":"odd-only bit sieve","results":[{"limit":1000000,"count":78498,"seconds":0.0012},...]}
 * Exit status: 0 ok, 2 bad arguments, 1 out of memory.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_LIMIT 10000000000ULL /* 10^10: 625 MB of bits */
#define MAX_LIMITS 64

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Number of primes p < limit, or -1 if the bit array cannot be allocated. */
static int64_t count_primes_below(uint64_t limit)
{
    if (limit <= 2)
        return 0;
    uint64_t n = limit / 2; /* odd numbers 1, 3, ..., below limit: indices 0..n-1 */
    uint64_t words = (n + 63) / 64;
    uint64_t *bits = calloc(words, sizeof *bits);
    if (!bits)
        return -1;
    bits[0] |= 1; /* 1 is not prime */
    for (uint64_t i = 1;; i++) {
        uint64_t p = 2 * i + 1;
        if (p * p >= limit)
            break;
        if (bits[i >> 6] & (1ULL << (i & 63)))
            continue;
        for (uint64_t j = (p * p) / 2; j < n; j += p) /* p*p, p*p+2p, ... */
            bits[j >> 6] |= 1ULL << (j & 63);
    }
    uint64_t composite = 0;
    for (uint64_t w = 0; w + 1 < words; w++)
        composite += (uint64_t)__builtin_popcountll(bits[w]);
    uint64_t tail = n - 64 * (words - 1); /* 1..64 valid bits in the last word */
    uint64_t mask = tail == 64 ? ~0ULL : ((1ULL << tail) - 1);
    composite += (uint64_t)__builtin_popcountll(bits[words - 1] & mask);
    free(bits);
    return (int64_t)(1 + (n - composite)); /* 2, plus the odd primes */
}

static int parse_limit(const char *s, uint64_t *out)
{
    if (!s[0] || s[0] == '-' || s[0] == '+')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < 2 || v > MAX_LIMIT)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc - 1 > MAX_LIMITS) {
        fprintf(stderr, "usage: %s LIMIT [LIMIT...]  (1 to %d limits, each 2..%llu)\n", argv[0],
                MAX_LIMITS, (unsigned long long)MAX_LIMIT);
        return 2;
    }
    uint64_t limits[MAX_LIMITS];
    for (int k = 1; k < argc; k++) {
        if (parse_limit(argv[k], &limits[k - 1])) {
            fprintf(stderr, "iolab_primes: bad limit %s (an integer 2..%llu)\n", argv[k],
                    (unsigned long long)MAX_LIMIT);
            return 2;
        }
    }
    int64_t counts[MAX_LIMITS];
    double seconds[MAX_LIMITS];
    for (int k = 0; k < argc - 1; k++) {
        double t0 = now();
        counts[k] = count_primes_below(limits[k]);
        seconds[k] = now() - t0;
        if (counts[k] < 0) {
            fprintf(stderr, "iolab_primes: out of memory for limit %llu (%llu bytes)\n",
                    (unsigned long long)limits[k], (unsigned long long)(limits[k] / 16 + 8));
            return 1;
        }
    }
    printf("{\"method\":\"odd-only bit sieve\",\"results\":[");
    for (int k = 0; k < argc - 1; k++)
        printf("%s{\"limit\":%llu,\"count\":%lld,\"seconds\":%.9f}", k ? "," : "",
               (unsigned long long)limits[k], (long long)counts[k], seconds[k]);
    printf("]}\n");
    return fflush(stdout) == 0 ? 0 : 1;
}

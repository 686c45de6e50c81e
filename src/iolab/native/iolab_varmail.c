/*
 * iolab_varmail: Filebench's varmail personality (workloads/varmail.f) as one small program.
 *
 * Filebench is not packaged for Debian; this does what its varmail personality does, with
 * the same defaults, and reports counters that can be checked against a count by hand.
 * docs/workloads-varmail.md says where each rule comes from and where this differs.
 *
 *   iolab_varmail --dir DIR (--duration SECONDS | --iterations N) [--nfiles 1000]
 *       [--meanfilesize 16384] [--filesize-gamma 1.5] [--meandirwidth 1000000]
 *       [--nthreads 16] [--iosize 1048576] [--meanappendsize 16384] [--prealloc 80]
 *       [--seed N] [--min-free BYTES]
 *
 * File set (Filebench's `define fileset ... prealloc=80`): nfiles entries, entry i is
 * DIR/<i/meandirwidth+1>/<i%meandirwidth+1> (8-digit names). Every entry gets a size drawn
 * from a gamma distribution (shape --filesize-gamma, mean --meanfilesize; shape 0 = every
 * file exactly the mean); each entry exists at the start with probability --prealloc %,
 * written with that size in 1 MiB writes. Then syncfs(), so the timed phase does not pay
 * for the preallocation's writeback.
 *
 * Each of --nthreads threads loops over the flow, one iteration = 13 operations:
 *   deletefile; createfile, appendfilerand, fsync, closefile;
 *   openfile, readwholefile, appendfilerand, fsync, closefile; openfile, readwholefile, closefile
 * Files are picked as Filebench picks them: one rotor over the existing entries (shared by
 * delete and open) and one over the absent entries (create), skipping entries another
 * thread is deleting/creating/opening. A delete that picks a file some thread has open is
 * skipped and counted (delete_skipped), as Filebench does. appendfilerand appends a
 * uniformly drawn 0 .. meanappendsize-2 bytes at the end (lseek SEEK_END + write); a draw
 * of 0 writes nothing but counts as an operation. readwholefile reads from offset 0 in
 * --iosize reads until read() returns 0. Data written is a non-zero pattern.
 *
 * --duration: each thread starts iterations until the time is up (a started iteration is
 * finished, so creates == deletes + skipped == iterations). --iterations: N in total.
 *
 * Output: one JSON object on stdout: counters, and per operation the count and latency
 * (mean exact; p50/p95/p99 from a log-bucket histogram, 16 buckets per power of two, so
 * within 3.2 % of the true value). Failure: message on stderr, exit 1 (2: usage error).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define ALLOC_BLOCK ((size_t)1 << 20)   /* Filebench's FILE_ALLOC_BLOCK */
#define MAX_NFILES 10000000ULL
#define MAX_THREADS 1024
#define MAX_IO ((uint64_t)1 << 30)
#define MAX_FILESIZE ((uint64_t)1 << 40)

enum op { OP_DELETE, OP_CREATE, OP_APPEND, OP_FSYNC, OP_OPEN, OP_READ, OP_CLOSE, N_OPS };
static const char *const op_names[N_OPS] = {"delete", "create", "append", "fsync", "open", "read", "close"};

/* Latency histogram in ns: values below 32 exact, then 16 sub-buckets per power of two. */
#define SUB_BITS 4
#define SUB (1u << SUB_BITS)
#define N_BUCKETS ((64 - SUB_BITS + 1) * SUB)

struct hist {
    uint64_t count, sum_ns, max_ns;
    uint64_t b[N_BUCKETS];
};

struct opts {
    const char *dir;
    uint64_t nfiles, meanfilesize, meandirwidth, iosize, meanappendsize, iterations, seed, min_free;
    double gamma, duration;
    unsigned nthreads, prealloc;
    int have_duration, have_iterations;
};

struct entry {
    uint64_t size;       /* drawn at start; only the preallocation uses it, as in Filebench */
    uint32_t open_cnt;   /* descriptors open on it, all threads */
    uint8_t exists, busy;
};

struct fileset {
    pthread_mutex_t lock;
    struct entry *e;
    uint64_t n, width, exrotor, nerotor;
    const char *dir;
};

struct thread {
    pthread_t tid;
    unsigned id;
    uint64_t rng;
    char *buf;
    struct hist h[N_OPS];
    uint64_t iterations, delete_skipped, appends_zero, append_writes, bytes_appended, read_calls, bytes_read;
};

static struct opts O;
static struct fileset FS;
static atomic_uint_fast64_t next_iteration;
static atomic_int stop_all;
static double deadline;
static pthread_mutex_t norsc_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *norsc_op;   /* the operation that found no file: the run stopped early */

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
    va_list ap;
    fputs("iolab_varmail: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static void usage(const char *msg) __attribute__((noreturn));
static void usage(const char *msg)
{
    fprintf(stderr, "iolab_varmail: %s\n"
            "usage: iolab_varmail --dir DIR (--duration SECONDS | --iterations N) [--nfiles N] "
            "[--meanfilesize BYTES] [--filesize-gamma SHAPE] [--meandirwidth N] [--nthreads N] "
            "[--iosize BYTES] [--meanappendsize BYTES] [--prealloc PERCENT] [--seed N] "
            "[--min-free BYTES]\n", msg);
    exit(2);
}

static uint64_t parse_u64(const char *what, const char *s, uint64_t lo, uint64_t hi)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s must be an integer in %" PRIu64 "..%" PRIu64 ", got '%.40s'",
                 what, lo, hi, s);
        usage(msg);
    }
    return (uint64_t)v;
}

static double parse_double(const char *what, const char *s, double lo, double hi)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s must be a number in %g..%g, got '%.40s'", what, lo, hi, s);
        usage(msg);
    }
    return v;
}

static void parse_args(int argc, char **argv)
{
    O = (struct opts){.nfiles = 1000, .meanfilesize = 16384, .gamma = 1.5, .meandirwidth = 1000000,
                      .nthreads = 16, .iosize = 1 << 20, .meanappendsize = 16384, .prealloc = 80,
                      .seed = 1};
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            usage("missing value after an option");
        const char *k = argv[i], *v = argv[++i];
        if (!strcmp(k, "--dir"))
            O.dir = v;
        else if (!strcmp(k, "--nfiles"))
            O.nfiles = parse_u64("--nfiles", v, 1, MAX_NFILES);
        else if (!strcmp(k, "--meanfilesize"))
            O.meanfilesize = parse_u64("--meanfilesize", v, 0, MAX_FILESIZE);
        else if (!strcmp(k, "--filesize-gamma"))
            O.gamma = parse_double("--filesize-gamma", v, 0, 1000);
        else if (!strcmp(k, "--meandirwidth"))
            O.meandirwidth = parse_u64("--meandirwidth", v, 1, UINT32_MAX);
        else if (!strcmp(k, "--nthreads"))
            O.nthreads = (unsigned)parse_u64("--nthreads", v, 1, MAX_THREADS);
        else if (!strcmp(k, "--iosize"))
            O.iosize = parse_u64("--iosize", v, 1, MAX_IO);
        else if (!strcmp(k, "--meanappendsize"))
            O.meanappendsize = parse_u64("--meanappendsize", v, 1, MAX_IO);
        else if (!strcmp(k, "--prealloc"))
            O.prealloc = (unsigned)parse_u64("--prealloc", v, 0, 100);
        else if (!strcmp(k, "--duration")) {
            O.duration = parse_double("--duration", v, 0.001, 30 * 86400.0);
            O.have_duration = 1;
        } else if (!strcmp(k, "--iterations")) {
            O.iterations = parse_u64("--iterations", v, 1, UINT64_MAX / 2);
            O.have_iterations = 1;
        } else if (!strcmp(k, "--seed"))
            O.seed = parse_u64("--seed", v, 0, UINT64_MAX);
        else if (!strcmp(k, "--min-free"))
            O.min_free = parse_u64("--min-free", v, 0, UINT64_MAX);
        else
            usage("unknown option");
    }
    if (!O.dir)
        usage("--dir is required");
    if (O.have_duration == O.have_iterations)
        usage("give exactly one of --duration and --iterations");
    if (strlen(O.dir) > PATH_MAX - 40)
        usage("--dir is too long");
}

/* ---------------------------------------------------------------- random numbers */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static double unit(uint64_t *s)
{
    return (double)(splitmix64(s) >> 11) * 0x1.0p-53;
}

static double std_normal(uint64_t *s)
{
    double u1;
    do
        u1 = unit(s);
    while (u1 <= 0.0);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * unit(s));
}

/* Gamma(shape, scale 1): Marsaglia & Tsang (2000); shape < 1 through Gamma(shape+1) * U^(1/shape). */
static double gamma_draw(uint64_t *s, double shape)
{
    if (shape < 1.0) {
        double u;
        do
            u = unit(s);
        while (u <= 0.0);
        return gamma_draw(s, shape + 1.0) * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = std_normal(s), v = 1.0 + c * x;
        if (v <= 0.0)
            continue;
        v = v * v * v;
        double u = unit(s);
        if (u > 0.0 && log(u) < 0.5 * x * x + d - d * v + d * log(v))
            return d * v;
    }
}

/* A file size: gamma with mean `mean` (scale mean/shape), truncated to whole bytes. */
static uint64_t file_size(uint64_t *s)
{
    if (O.gamma == 0.0)
        return O.meanfilesize;
    double v = gamma_draw(s, O.gamma) * ((double)O.meanfilesize / O.gamma);
    return v >= (double)MAX_FILESIZE ? MAX_FILESIZE : (uint64_t)v;
}

/* appendfilerand's size: uniform on 0 .. meanappendsize-2 (Filebench: random x (iosize - 1), truncated). */
static uint64_t append_size(uint64_t *s)
{
    return (uint64_t)(unit(s) * (double)(O.meanappendsize - 1));
}

/* ---------------------------------------------------------------- timing */

static uint64_t now_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts))
        die("clock_gettime: %s", strerror(errno));
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static unsigned bucket(uint64_t v)
{
    if (v < 2 * SUB)
        return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v);
    return (e - SUB_BITS + 1) * SUB + (unsigned)((v >> (e - SUB_BITS)) & (SUB - 1));
}

/* The middle of bucket i's range of ns values. */
static double bucket_mid(unsigned i)
{
    if (i < 2 * SUB)
        return (double)i;
    unsigned e = i / SUB + SUB_BITS - 1, sub = i % SUB;
    double lo = (double)((uint64_t)(SUB + sub) << (e - SUB_BITS));
    double width = (double)((uint64_t)1 << (e - SUB_BITS));
    return lo + (width - 1.0) / 2.0;
}

static void record(struct hist *h, uint64_t t0)
{
    uint64_t d = now_ns() - t0;
    h->count++;
    h->sum_ns += d;
    if (d > h->max_ns)
        h->max_ns = d;
    h->b[bucket(d)]++;
}

static void merge(struct hist *into, const struct hist *h)
{
    into->count += h->count;
    into->sum_ns += h->sum_ns;
    if (h->max_ns > into->max_ns)
        into->max_ns = h->max_ns;
    for (unsigned i = 0; i < N_BUCKETS; i++)
        into->b[i] += h->b[i];
}

/* The q-quantile in µs: the bucket holding the ceil(q*count)-th value, never above the maximum. */
static double quantile_us(const struct hist *h, double q)
{
    if (!h->count)
        return 0.0;
    uint64_t rank = (uint64_t)ceil(q * (double)h->count), seen = 0;
    if (rank < 1)
        rank = 1;
    for (unsigned i = 0; i < N_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank) {
            double v = bucket_mid(i);
            return (v > (double)h->max_ns ? (double)h->max_ns : v) / 1e3;
        }
    }
    return (double)h->max_ns / 1e3;
}

/* ---------------------------------------------------------------- the file set */

static void entry_path(char *out, size_t len, uint64_t i)
{
    snprintf(out, len, "%s/%08" PRIu64 "/%08" PRIu64, FS.dir, i / FS.width + 1, i % FS.width + 1);
}

static void leaf_dir(char *out, size_t len, uint64_t d)
{
    snprintf(out, len, "%s/%08" PRIu64, FS.dir, d + 1);
}

/*
 * Filebench's fileset_pick: the first entry in the wanted state (existing or absent) at or
 * after the rotor, wrapping; the rotor moves past it; if it is busy, the next one in that
 * state that is not. -1: none (Filebench: "could not obtain a file", the run stops).
 */
static int64_t pick(int want_exists)
{
    int64_t got = -1;
    pthread_mutex_lock(&FS.lock);
    uint64_t *rotor = want_exists ? &FS.exrotor : &FS.nerotor, n = FS.n, first = n;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t i = (*rotor + k) % n;
        if (FS.e[i].exists == want_exists) {
            first = i;
            break;
        }
    }
    if (first < n) {
        *rotor = first + 1;
        for (uint64_t k = 0; k < n; k++) {
            uint64_t i = (first + k) % n;
            if (FS.e[i].exists == want_exists && !FS.e[i].busy) {
                FS.e[i].busy = 1;
                got = (int64_t)i;
                break;
            }
        }
    }
    pthread_mutex_unlock(&FS.lock);
    return got;
}

/* Release a picked entry: its new state, and the change of its open count. */
static void unbusy(uint64_t i, int exists, int open_delta)
{
    pthread_mutex_lock(&FS.lock);
    FS.e[i].busy = 0;
    FS.e[i].exists = (uint8_t)exists;
    FS.e[i].open_cnt = (uint32_t)((int)FS.e[i].open_cnt + open_delta);
    pthread_mutex_unlock(&FS.lock);
}

static void closed(uint64_t i)
{
    pthread_mutex_lock(&FS.lock);
    FS.e[i].open_cnt--;
    pthread_mutex_unlock(&FS.lock);
}

static void fill(char *buf, size_t n)
{
    /* Non-zero data: zero blocks could be turned into holes or unmaps downstream (QEMU detect-zeroes). */
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)((0x5a ^ (i * 131u)) | 1u);
}

static void write_all(int fd, const char *buf, size_t n, const char *path)
{
    while (n) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("write %s: %s", path, w < 0 ? strerror(errno) : "wrote nothing");
        buf += w;
        n -= (size_t)w;
    }
}

struct prealloc {
    uint64_t files, bytes, writes, dirs;
    double seconds;
};

static void check_space(void)
{
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", O.dir);
    char *slash = strrchr(parent, '/');
    if (!slash)
        snprintf(parent, sizeof parent, ".");
    else if (slash == parent)
        parent[1] = 0;
    else
        *slash = 0;
    struct statvfs sv;
    if (statvfs(parent, &sv))
        die("statvfs %s: %s", parent, strerror(errno));
    uint64_t free_b = (uint64_t)sv.f_bavail * sv.f_frsize;
    uint64_t dirs = (O.nfiles + O.meandirwidth - 1) / O.meandirwidth;
    if (free_b < O.min_free)
        die("not enough space in %s for the file set: it may take %.1f MiB (--min-free), %.1f MiB are free",
            parent, (double)O.min_free / 1048576.0, (double)free_b / 1048576.0);
    if (sv.f_files && (uint64_t)sv.f_favail < O.nfiles + dirs + 1)
        die("not enough inodes in %s for the file set: %" PRIu64 " files and %" PRIu64 " directories, "
            "%" PRIu64 " inodes free", parent, O.nfiles, dirs + 1, (uint64_t)sv.f_favail);
}

static struct prealloc preallocate(void)
{
    struct prealloc p = {0};
    uint64_t t0 = now_ns(), s = O.seed ^ 0x76617266696c6573ULL;   /* "varfiles" */
    FS.n = O.nfiles;
    FS.width = O.meandirwidth;
    FS.dir = O.dir;
    FS.e = calloc(FS.n, sizeof *FS.e);
    if (!FS.e)
        die("out of memory for %" PRIu64 " file set entries", FS.n);
    if (pthread_mutex_init(&FS.lock, NULL))
        die("pthread_mutex_init failed");
    if (mkdir(O.dir, 0755))
        die("mkdir %s: %s (the file set needs a directory of its own)", O.dir, strerror(errno));
    char path[PATH_MAX];
    p.dirs = (FS.n + FS.width - 1) / FS.width;
    for (uint64_t d = 0; d < p.dirs; d++) {
        leaf_dir(path, sizeof path, d);
        if (mkdir(path, 0755))
            die("mkdir %s: %s", path, strerror(errno));
    }
    char *buf = malloc(ALLOC_BLOCK);
    if (!buf)
        die("out of memory");
    fill(buf, ALLOC_BLOCK);
    for (uint64_t i = 0; i < FS.n; i++) {
        FS.e[i].size = file_size(&s);
        if (unit(&s) * 100.0 >= (double)O.prealloc)
            continue;
        entry_path(path, sizeof path, i);
        int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0)
            die("create %s: %s", path, strerror(errno));
        for (uint64_t done = 0; done < FS.e[i].size;) {
            size_t n = FS.e[i].size - done < ALLOC_BLOCK ? (size_t)(FS.e[i].size - done) : ALLOC_BLOCK;
            write_all(fd, buf, n, path);
            p.writes++;
            done += n;
        }
        if (close(fd))
            die("close %s: %s", path, strerror(errno));
        FS.e[i].exists = 1;
        p.files++;
        p.bytes += FS.e[i].size;
    }
    free(buf);
    int dfd = open(O.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || syncfs(dfd) || close(dfd))
        die("syncfs %s: %s", O.dir, strerror(errno));
    p.seconds = (double)(now_ns() - t0) / 1e9;
    return p;
}

/* ---------------------------------------------------------------- the flow */

static int no_file(const char *op)
{
    pthread_mutex_lock(&norsc_lock);
    if (!norsc_op)
        norsc_op = op;
    pthread_mutex_unlock(&norsc_lock);
    atomic_store(&stop_all, 1);
    return -1;
}

static void op_delete(struct thread *t)   /* deletefile */
{
    int64_t i = pick(1);
    if (i < 0) {
        no_file("deletefile");
        return;
    }
    pthread_mutex_lock(&FS.lock);
    int open_elsewhere = FS.e[i].open_cnt > 0;
    pthread_mutex_unlock(&FS.lock);
    if (open_elsewhere) {   /* Filebench: "can't delete file opened by other threads" */
        t->delete_skipped++;
        unbusy((uint64_t)i, 1, 0);
        return;
    }
    char path[PATH_MAX];
    entry_path(path, sizeof path, (uint64_t)i);
    uint64_t t0 = now_ns();
    if (unlink(path))
        die("unlink %s: %s", path, strerror(errno));
    record(&t->h[OP_DELETE], t0);
    unbusy((uint64_t)i, 0, 0);
}

/* createfile (create != 0) or openfile: the descriptor, or -1 if no file could be picked. */
static int op_open(struct thread *t, int create, int64_t *which)
{
    int64_t i = pick(!create);
    if (i < 0)
        return no_file(create ? "createfile" : "openfile");
    char path[PATH_MAX];
    entry_path(path, sizeof path, (uint64_t)i);
    uint64_t t0 = now_ns();
    if (create) {   /* Filebench makes the parent directory first if it is missing */
        char dir[PATH_MAX];
        struct stat st;
        leaf_dir(dir, sizeof dir, (uint64_t)i / FS.width);
        if (stat(dir, &st) && mkdir(dir, 0755) && errno != EEXIST)
            die("mkdir %s: %s", dir, strerror(errno));
    }
    int fd = open(path, (create ? O_CREAT : 0) | O_RDWR | O_CLOEXEC, 0666);
    if (fd < 0)
        die("%s %s: %s", create ? "create" : "open", path, strerror(errno));
    record(&t->h[create ? OP_CREATE : OP_OPEN], t0);
    unbusy((uint64_t)i, 1, 1);
    *which = i;
    return fd;
}

static void op_append(struct thread *t, int fd)   /* appendfilerand */
{
    uint64_t n = append_size(&t->rng);
    uint64_t t0 = now_ns();
    if (n) {
        if (lseek(fd, 0, SEEK_END) < 0)
            die("lseek: %s", strerror(errno));
        ssize_t w;
        do
            w = write(fd, t->buf, (size_t)n);
        while (w < 0 && errno == EINTR);
        if (w != (ssize_t)n)
            die("append of %" PRIu64 " bytes: %s", n, w < 0 ? strerror(errno) : "short write");
    }
    record(&t->h[OP_APPEND], t0);
    if (n) {
        t->append_writes++;
        t->bytes_appended += n;
    } else {
        t->appends_zero++;
    }
}

static void op_fsync(struct thread *t, int fd)
{
    uint64_t t0 = now_ns();
    if (fsync(fd))
        die("fsync: %s", strerror(errno));
    record(&t->h[OP_FSYNC], t0);
}

static void op_read_whole(struct thread *t, int fd)   /* readwholefile */
{
    uint64_t t0 = now_ns();
    if (lseek(fd, 0, SEEK_SET) < 0)
        die("lseek: %s", strerror(errno));
    for (;;) {
        ssize_t r = read(fd, t->buf, (size_t)O.iosize);
        if (r < 0 && errno == EINTR)
            continue;
        t->read_calls++;
        if (r < 0)
            die("read: %s", strerror(errno));
        if (r == 0)
            break;
        t->bytes_read += (uint64_t)r;
    }
    record(&t->h[OP_READ], t0);
}

static void op_close(struct thread *t, int fd, int64_t i)
{
    uint64_t t0 = now_ns();
    if (close(fd))
        die("close: %s", strerror(errno));
    record(&t->h[OP_CLOSE], t0);
    closed((uint64_t)i);
}

/*
 * The step varmail.f takes twice: append to the open file, fsync it, close it, then open another
 * file of the set and read it whole (appendfilerand, fsync, closefile, openfile, readwholefile).
 * Returns the newly opened descriptor (its file index in *i), or -1 if no file could be picked.
 */
static int append_sync_then_read_next(struct thread *t, int fd, int64_t *i)
{
    op_append(t, fd);
    op_fsync(t, fd);
    op_close(t, fd, *i);
    if ((fd = op_open(t, 0, i)) < 0)
        return -1;
    op_read_whole(t, fd);
    return fd;
}

/* One pass of varmail.f's flow; -1 if a file could not be picked (the run stops there). */
static int iteration(struct thread *t)
{
    int64_t i;
    op_delete(t);
    if (atomic_load(&stop_all))
        return -1;
    int fd = op_open(t, 1, &i);
    if (fd < 0)
        return -1;
    if ((fd = append_sync_then_read_next(t, fd, &i)) < 0)   /* flowops 3-7 */
        return -1;
    if ((fd = append_sync_then_read_next(t, fd, &i)) < 0)   /* flowops 8-12 */
        return -1;
    op_close(t, fd, i);
    return 0;
}

static double now_s(void)
{
    return (double)now_ns() / 1e9;
}

static void *worker(void *arg)
{
    struct thread *t = arg;
    while (!atomic_load(&stop_all)) {
        if (O.have_iterations) {
            if (atomic_fetch_add(&next_iteration, 1) >= O.iterations)
                break;
        } else if (now_s() >= deadline) {
            break;
        }
        if (iteration(t))
            break;
        t->iterations++;
    }
    return NULL;
}

/* ---------------------------------------------------------------- output */

static void print_hist(const char *name, const struct hist *h, int comma)
{
    printf("%s\"%s\": {\"count\": %" PRIu64 ", \"mean_us\": %.3f, \"p50_us\": %.3f, \"p95_us\": %.3f, "
           "\"p99_us\": %.3f, \"max_us\": %.3f}",
           comma ? ", " : "", name, h->count, h->count ? (double)h->sum_ns / (double)h->count / 1e3 : 0.0,
           quantile_us(h, 0.50), quantile_us(h, 0.95), quantile_us(h, 0.99), (double)h->max_ns / 1e3);
}

static void print_json(const struct prealloc *p, struct thread *th, double elapsed)
{
    struct thread sum = {0};
    struct hist all = {0};
    for (unsigned k = 0; k < O.nthreads; k++) {
        struct thread *t = &th[k];
        for (int o = 0; o < N_OPS; o++) {
            merge(&sum.h[o], &t->h[o]);
            merge(&all, &t->h[o]);
        }
        sum.iterations += t->iterations;
        sum.delete_skipped += t->delete_skipped;
        sum.appends_zero += t->appends_zero;
        sum.append_writes += t->append_writes;
        sum.bytes_appended += t->bytes_appended;
        sum.read_calls += t->read_calls;
        sum.bytes_read += t->bytes_read;
    }
    uint64_t exist = 0;
    for (uint64_t i = 0; i < FS.n; i++)
        exist += FS.e[i].exists;
    printf("{\"tool\": \"iolab_varmail\", \"personality\": \"filebench varmail.f\", "
           "\"params\": {\"nfiles\": %" PRIu64 ", \"meanfilesize\": %" PRIu64 ", \"filesize_gamma\": %g, "
           "\"meandirwidth\": %" PRIu64 ", \"nthreads\": %u, \"iosize\": %" PRIu64 ", \"meanappendsize\": %"
           PRIu64 ", \"prealloc\": %u, \"duration_s\": %.3f, \"iterations\": %" PRIu64 ", \"seed\": %" PRIu64 "}, ",
           O.nfiles, O.meanfilesize, O.gamma, O.meandirwidth, O.nthreads, O.iosize, O.meanappendsize,
           O.prealloc, O.have_duration ? O.duration : 0.0, O.have_iterations ? O.iterations : 0, O.seed);
    printf("\"prealloc\": {\"files\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"writes\": %" PRIu64
           ", \"dirs\": %" PRIu64 ", \"seconds\": %.6f}, ",
           p->files, p->bytes, p->writes, p->dirs, p->seconds);
    printf("\"iterations\": %" PRIu64 ", \"elapsed_s\": %.9f, \"files_at_end\": %" PRIu64
           ", \"delete_skipped\": %" PRIu64 ", \"appends_zero\": %" PRIu64 ", \"append_writes\": %" PRIu64
           ", \"bytes_appended\": %" PRIu64 ", \"read_calls\": %" PRIu64 ", \"bytes_read\": %" PRIu64 ", ",
           sum.iterations, elapsed, exist, sum.delete_skipped, sum.appends_zero, sum.append_writes,
           sum.bytes_appended, sum.read_calls, sum.bytes_read);
    printf("\"histogram\": {\"sub_buckets_per_octave\": %u, \"max_relative_error\": %.4f}, \"ops\": {",
           SUB, 1.0 / (2.0 * SUB));
    for (int o = 0; o < N_OPS; o++)
        print_hist(op_names[o], &sum.h[o], o > 0);
    printf("}, ");
    print_hist("all", &all, 0);
    printf("}\n");
    if (fflush(stdout) || ferror(stdout))
        die("writing the result to stdout failed");
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    check_space();
    struct prealloc p = preallocate();

    size_t bufsize = (size_t)(O.iosize > O.meanappendsize ? O.iosize : O.meanappendsize);
    struct thread *th = calloc(O.nthreads, sizeof *th);
    if (!th)
        die("out of memory");
    for (unsigned k = 0; k < O.nthreads; k++) {
        th[k].id = k;
        th[k].rng = O.seed ^ (0x9e3779b97f4a7c15ULL * (k + 1));
        if (!(th[k].buf = malloc(bufsize)))
            die("out of memory for %u buffers of %zu bytes", O.nthreads, bufsize);
        fill(th[k].buf, bufsize);
    }

    double start = now_s();
    deadline = start + O.duration;
    for (unsigned k = 0; k < O.nthreads; k++) {
        int rc = pthread_create(&th[k].tid, NULL, worker, &th[k]);
        if (rc)
            die("pthread_create: %s", strerror(rc));
    }
    for (unsigned k = 0; k < O.nthreads; k++)
        pthread_join(th[k].tid, NULL);
    double elapsed = now_s() - start;

    if (norsc_op)
        die("%s could not obtain a file (every one in the needed state was busy or there was none): "
            "the run stopped early, as Filebench's does; raise nfiles or lower nthreads", norsc_op);
    print_json(&p, th, elapsed);
    for (unsigned k = 0; k < O.nthreads; k++)
        free(th[k].buf);
    free(th);
    free(FS.e);
    return 0;
}

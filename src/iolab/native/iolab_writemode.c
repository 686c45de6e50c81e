/*
 * iolab_writemode: write a fresh file in fixed-size blocks with one write mode and time it.
 *
 * A corrected version of reference study R2's program. The published one mapped
 * BUF_SIZE*DATA_SIZE bytes, reused the O_DIRECT descriptor for the map, never closed and
 * unmapped the wrong length. This one also proves each mode took effect: it reads the
 * open flags back with fcntl(F_GETFL) and, after the timed phase, counts with mincore()
 * how many of the file's pages sit in the page cache (O_DIRECT should leave ~none).
 *
 *   iolab_writemode --mode buffered|o_sync|o_direct|mmap --bs BYTES --size BYTES --path FILE
 *
 * Timed phase (CLOCK_MONOTONIC), each mode paying for durability:
 *   buffered  write() every block, then fsync()
 *   o_sync    write() every block on an O_SYNC descriptor
 *   o_direct  write() every block from an aligned buffer on an O_DIRECT descriptor, then fsync()
 *             (fsync makes the size/extent metadata durable, as fio's end_fsync=1 does)
 *   mmap      ftruncate() + mmap(MAP_SHARED) of the exact length, memcpy() every block,
 *             msync(MS_SYNC)
 *
 * Output: one JSON object on stdout. Any failure: message on stderr, exit status 1
 * (2 for a usage error).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif
#ifndef RAMFS_MAGIC
#define RAMFS_MAGIC 0x858458f6
#endif

#define MAX_BS ((size_t)1 << 30)
#define MAX_SIZE ((uint64_t)1 << 40)
#define MAX_NOTES 8

enum mode { M_BUFFERED, M_O_SYNC, M_O_DIRECT, M_MMAP };
static const char *const mode_names[] = {"buffered", "o_sync", "o_direct", "mmap"};

struct opts {
    enum mode mode;
    size_t bs;
    uint64_t size;      /* requested */
    const char *path;
};

struct result {
    uint64_t bytes;     /* size rounded up to whole blocks: what was written */
    uint64_t calls;
    double seconds;
    int flag_direct;
    int flag_sync;
    uint64_t resident_pages;
    uint64_t total_pages;
    long page_size;
    size_t dio_align;   /* offset alignment O_DIRECT needs, 0 if not applicable/unknown */
    const char *notes[MAX_NOTES];   /* non-fatal problems, reported in "errors" */
    int n_notes;
};

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
    va_list ap;
    fputs("iolab_writemode: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static void usage(const char *msg)
{
    fprintf(stderr, "iolab_writemode: %s\n"
            "usage: iolab_writemode --mode buffered|o_sync|o_direct|mmap "
            "--bs BYTES --size BYTES --path FILE\n", msg);
    exit(2);
}

static void note(struct result *r, const char *msg)
{
    if (r->n_notes < MAX_NOTES)
        r->notes[r->n_notes++] = msg;
}

static uint64_t parse_u64(const char *name, const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-')
        usage(name);
    return (uint64_t)v;
}

static struct opts parse_args(int argc, char **argv)
{
    struct opts o = {.mode = M_BUFFERED, .bs = 0, .size = 0, .path = NULL};
    int have_mode = 0;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            usage("missing value after an option");
        const char *k = argv[i], *v = argv[++i];
        if (!strcmp(k, "--mode")) {
            have_mode = 0;
            for (int m = 0; m < 4; m++)
                if (!strcmp(v, mode_names[m])) {
                    o.mode = (enum mode)m;
                    have_mode = 1;
                }
            if (!have_mode)
                usage("--mode must be buffered, o_sync, o_direct or mmap");
        } else if (!strcmp(k, "--bs")) {
            o.bs = (size_t)parse_u64("--bs must be a number of bytes", v);
        } else if (!strcmp(k, "--size")) {
            o.size = parse_u64("--size must be a number of bytes", v);
        } else if (!strcmp(k, "--path")) {
            o.path = v;
        } else {
            usage("unknown option");
        }
    }
    if (!have_mode || !o.path || !o.bs || !o.size)
        usage("--mode, --bs, --size and --path are all required");
    if (o.bs > MAX_BS)
        usage("--bs must be at most 1 GiB");
    if (o.size > MAX_SIZE)
        usage("--size must be at most 1 TiB");
    return o;
}

static double now_s(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts))
        die("clock_gettime: %s", strerror(errno));
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Logical block size of the device holding fd's file, from sysfs; 0 if unknown. */
static size_t sysfs_logical_block_size(int fd)
{
    struct stat st;
    if (fstat(fd, &st))
        return 0;
    static const char *const fmts[] = {
        "/sys/dev/block/%u:%u/queue/logical_block_size",
        "/sys/dev/block/%u:%u/../queue/logical_block_size", /* a partition */
    };
    for (size_t i = 0; i < 2; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, fmts[i], major(st.st_dev), minor(st.st_dev));
        FILE *f = fopen(p, "r");
        if (!f)
            continue;
        unsigned long v = 0;
        int ok = fscanf(f, "%lu", &v) == 1;
        fclose(f);
        if (ok && v)
            return (size_t)v;
    }
    return 0;
}

/*
 * Offset/length alignment O_DIRECT needs on this file (and, via *mem_align, the buffer's).
 * statx(STATX_DIOALIGN) asks the filesystem itself (Linux >= 6.1); else fall back to the
 * device's logical block size, which is what the block layer checks.
 */
static size_t dio_offset_align(int fd, struct result *r, size_t *mem_align)
{
#ifdef STATX_DIOALIGN
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
        if (sx.stx_dio_offset_align == 0)
            die("the filesystem does not support O_DIRECT on this file (statx reports no "
                "direct I/O alignment)");
        *mem_align = sx.stx_dio_mem_align;
        return sx.stx_dio_offset_align;
    }
#endif
    size_t lbs = sysfs_logical_block_size(fd);
    *mem_align = lbs;
    if (!lbs)
        note(r, "direct I/O alignment unknown (no statx DIOALIGN, no sysfs device)");
    return lbs;
}

static void check_not_tmpfs(const char *path)
{
    /* tmpfs/ramfs have no backing device: "direct" I/O there still lands in memory. */
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    struct statfs sf;
    if (statfs(dir, &sf))
        die("statfs %s: %s", dir, strerror(errno));
    if (sf.f_type == TMPFS_MAGIC || sf.f_type == RAMFS_MAGIC)
        die("o_direct on %s: it is on tmpfs/ramfs, which has no backing device, so O_DIRECT "
            "cannot bypass the page cache; use a directory on a disk filesystem", dir);
}

static int open_file(const struct opts *o)
{
    int flags = O_CREAT | O_TRUNC | O_CLOEXEC | (o->mode == M_MMAP ? O_RDWR : O_WRONLY);
    if (o->mode == M_O_SYNC)
        flags |= O_SYNC;
    if (o->mode == M_O_DIRECT) {
        check_not_tmpfs(o->path);
        flags |= O_DIRECT;
    }
    int fd = open(o->path, flags, 0644);
    if (fd < 0) {
        if (o->mode == M_O_DIRECT && errno == EINVAL)
            die("open %s with O_DIRECT: the filesystem does not support O_DIRECT (%s)",
                o->path, strerror(errno));
        die("open %s: %s", o->path, strerror(errno));
    }
    return fd;
}

static void read_flags(int fd, struct result *r)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        die("fcntl(F_GETFL): %s", strerror(errno));
    r->flag_direct = (fl & O_DIRECT) == O_DIRECT;
    r->flag_sync = (fl & O_SYNC) == O_SYNC;
}

static void *alloc_block(size_t bs, size_t align)
{
    void *buf = NULL;
    int rc = posix_memalign(&buf, align, bs);
    if (rc)
        die("posix_memalign(%zu, %zu): %s", align, bs, strerror(rc));
    /* Non-zero data: zero pages could be deduplicated or compressed away downstream. */
    unsigned char *p = buf;
    for (size_t i = 0; i < bs; i++)
        p[i] = (unsigned char)(0x5a ^ (i * 131u)) | 1u;
    return buf;
}

static void write_all(int fd, const void *buf, size_t n, int exact, uint64_t *calls)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        ++*calls;
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EINVAL && exact)
                die("O_DIRECT write of %zu bytes rejected (%s): the block size or buffer is "
                    "not aligned to what the device needs", n, strerror(errno));
            die("write: %s", strerror(errno));
        }
        if (w == 0)
            die("write returned 0");
        if (exact && (size_t)w != n)
            die("short O_DIRECT write: %zd of %zu bytes", w, n);
        p += w;
        n -= (size_t)w;
    }
}

/* buffered, o_sync and o_direct: the same write loop on differently opened descriptors. */
static void run_write(const struct opts *o, int fd, struct result *r)
{
    size_t align = (size_t)r->page_size;
    int direct = o->mode == M_O_DIRECT;
    if (direct) {
        size_t mem_align = 0;
        r->dio_align = dio_offset_align(fd, r, &mem_align);
        if (r->dio_align && (o->bs < r->dio_align || o->bs % r->dio_align))
            die("o_direct needs --bs to be a multiple of %zu bytes (the direct I/O alignment "
                "of %s), got %zu", r->dio_align, o->path, o->bs);
        if (mem_align > align)   /* page alignment already covers the usual 512/4096 */
            align = mem_align;
    }
    void *buf = alloc_block(o->bs, align);
    uint64_t blocks = r->bytes / o->bs;

    double t0 = now_s();
    for (uint64_t i = 0; i < blocks; i++)
        write_all(fd, buf, o->bs, direct, &r->calls);
    if (o->mode != M_O_SYNC && fsync(fd))
        die("fsync: %s", strerror(errno));
    r->seconds = now_s() - t0;

    free(buf);
}

static void run_mmap(const struct opts *o, int fd, struct result *r)
{
    if (r->bytes > (uint64_t)SIZE_MAX)
        die("--size too large to map");
    size_t len = (size_t)r->bytes;
    void *buf = alloc_block(o->bs, (size_t)r->page_size);

    double t0 = now_s();
    if (ftruncate(fd, (off_t)len))
        die("ftruncate: %s", strerror(errno));
    char *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
        die("mmap %zu bytes: %s", len, strerror(errno));
    for (size_t off = 0; off < len; off += o->bs) {
        memcpy(map + off, buf, o->bs);
        r->calls++;
    }
    if (msync(map, len, MS_SYNC))
        die("msync: %s", strerror(errno));
    r->seconds = now_s() - t0;

    if (munmap(map, len))
        die("munmap: %s", strerror(errno));
    free(buf);
}

/* Count the file's pages in the page cache, through a fresh read-only mapping. */
static void count_resident(const struct opts *o, struct result *r)
{
    size_t len = (size_t)r->bytes;
    r->total_pages = (r->bytes + (uint64_t)r->page_size - 1) / (uint64_t)r->page_size;
    int fd = open(o->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        die("reopen %s: %s", o->path, strerror(errno));
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
        die("mmap for mincore: %s", strerror(errno));
    unsigned char *vec = malloc(r->total_pages);
    if (!vec)
        die("out of memory");
    if (mincore(map, len, vec))
        die("mincore: %s", strerror(errno));
    r->resident_pages = 0;
    for (uint64_t i = 0; i < r->total_pages; i++)
        r->resident_pages += vec[i] & 1;
    free(vec);
    if (munmap(map, len))
        die("munmap: %s", strerror(errno));
    if (close(fd))
        die("close: %s", strerror(errno));
}

static void print_json(const struct opts *o, const struct result *r)
{
    double bps = r->seconds > 0 ? (double)r->bytes / r->seconds : 0.0;
    printf("{\"mode\": \"%s\", \"bs\": %zu, \"size\": %" PRIu64 ", \"requested_size\": %" PRIu64
           ", \"calls\": %" PRIu64 ", \"seconds\": %.9f, \"bytes_per_s\": %.3f, "
           "\"flags_effective\": {\"o_direct\": %s, \"o_sync\": %s}, "
           "\"resident_pages\": %" PRIu64 ", \"total_pages\": %" PRIu64 ", \"page_size\": %ld, "
           "\"dio_align\": %zu, \"errors\": [",
           mode_names[o->mode], o->bs, r->bytes, o->size, r->calls, r->seconds, bps,
           r->flag_direct ? "true" : "false", r->flag_sync ? "true" : "false",
           r->resident_pages, r->total_pages, r->page_size, r->dio_align);
    for (int i = 0; i < r->n_notes; i++)
        printf("%s\"%s\"", i ? ", " : "", r->notes[i]);  /* notes are fixed ASCII literals */
    printf("]}\n");
    if (fflush(stdout) || ferror(stdout))
        die("writing the result to stdout failed");
}

int main(int argc, char **argv)
{
    struct opts o = parse_args(argc, argv);
    struct result r = {0};
    r.page_size = sysconf(_SC_PAGESIZE);
    if (r.page_size <= 0)
        die("sysconf(_SC_PAGESIZE) failed");
    uint64_t blocks = (o.size + o.bs - 1) / o.bs;
    r.bytes = blocks * (uint64_t)o.bs;

    int fd = open_file(&o);
    read_flags(fd, &r);
    if (o.mode == M_MMAP)
        run_mmap(&o, fd, &r);
    else
        run_write(&o, fd, &r);
    if (close(fd))
        die("close: %s", strerror(errno));
    count_resident(&o, &r);
    print_json(&o, &r);
    return 0;
}

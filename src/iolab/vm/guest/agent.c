/* iolab guest agent: runs commands sent by the host over a virtio-serial port.
 *
 * Why C: the guest has only busybox; a static binary frames binary payloads exactly,
 * measures child CPU with wait4() and needs nothing else in the image.
 *
 * Frame (both directions, little endian):
 *   "IOLB" | u8 version=1 | u8 type | u32 id | u32 len | payload[len]
 * Payload: fields, each u8 tag | u32 len | bytes[len].
 * Host -> guest types: 'R' run, 'K' kill (id = the run to kill), 'P' ping, 'Q' power off,
 *                      'T' set the wall clock and reseed the RNG (after a restore from a saved state).
 * Guest -> host types: 'H' hello (k=kernel release, v=agent version), 'D' done, 'E' error.
 * Run fields: a=argv (repeated), t=timeout ms, f=file name then d=its content,
 *             e=env "K=V", c=collect path, g=cgroup.procs path.
 * Done fields: r=exit code (negative signal), o=stdout, e=stderr, w=wall ns, u/s=cpu us,
 *              x=timed out, k=killed, n=collected name then d=its content, z=agent error.
 * Clock fields: t=host CLOCK_REALTIME ns, r=random bytes to mix into the guest's pool; answered
 *              by 'D' with b=guest CLOCK_REALTIME ns before the step, r=0 or -errno of
 *              clock_settime, s=0 or -errno of the reseed (only when bytes were sent).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/random.h>

#define AGENT_VERSION "3" /* 2: the T frame (clock and RNG after a restore); 3: a run ends every process it started */
#define PORT_NAME "org.iolab.agent"
#define WORKDIR "/run/iolab/work"
#define OUTDIR "/run/iolab/out"
#define LOCKFILE "/run/iolab/lock"
#define MAX_FRAME (256u << 20)
#define MAX_OUTPUT (64u << 20)
#define MAX_JOBS 256
#define MAX_PROCS 8192
#define STRAGGLER_WAIT_NS (10LL * 1000000000LL) /* under the host's grace (vm/executor.py HOST_GRACE_S) */

static int port_fd = -1;

struct buf { char *p; size_t len, cap; };

static void die(const char *what) { fprintf(stderr, "iolab-agent: %s: %s\n", what, strerror(errno)); exit(1); }

static void buf_put(struct buf *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) die("realloc");
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void put_u32(struct buf *b, uint32_t v) {
    unsigned char c[4] = {v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff, (v >> 24) & 0xff};
    buf_put(b, c, 4);
}

static uint32_t get_u32(const unsigned char *c) { return c[0] | c[1] << 8 | c[2] << 16 | (uint32_t)c[3] << 24; }

static void field(struct buf *b, char tag, const void *data, size_t n) {
    buf_put(b, &tag, 1);
    put_u32(b, (uint32_t)n);
    buf_put(b, data, n);
}

static void field_str(struct buf *b, char tag, const char *s) { field(b, tag, s, strlen(s)); }

static void field_num(struct buf *b, char tag, long long v) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%lld", v);
    field_str(b, tag, tmp);
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR || errno == EAGAIN) { usleep(1000); continue; }
            return -1;
        }
        p += w; n -= (size_t)w;
    }
    return 0;
}

/* One frame per write under an flock: supervisors answer concurrently. */
static void send_frame(char type, uint32_t id, struct buf *payload) {
    struct buf f = {0};
    buf_put(&f, "IOLB", 4);
    char hdr[2] = {1, type};
    buf_put(&f, hdr, 2);
    put_u32(&f, id);
    put_u32(&f, (uint32_t)payload->len);
    if (payload->len) buf_put(&f, payload->p, payload->len);
    int lk = open(LOCKFILE, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lk >= 0) flock(lk, LOCK_EX);
    write_all(port_fd, f.p, f.len);
    if (lk >= 0) close(lk);
    free(f.p);
}

static void send_error(uint32_t id, const char *msg) {
    struct buf p = {0};
    field_str(&p, 'z', msg);
    send_frame('E', id, &p);
    free(p.p);
}

/* Blocking exact read; a closed host side reads as 0 bytes, so wait and retry. */
static int read_exact(unsigned char *p, size_t n) {
    while (n) {
        ssize_t r = read(port_fd, p, n);
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return -1;
        }
        if (r == 0) { usleep(50000); continue; }
        p += r; n -= (size_t)r;
    }
    return 0;
}

static void send_hello(void) {
    struct utsname u;
    struct buf p = {0};
    uname(&u);
    field_str(&p, 'k', u.release);
    field_str(&p, 'v', AGENT_VERSION);
    send_frame('H', 0, &p);
    free(p.p);
}

/* ---- parsed run request ---- */
struct req {
    char **argv; int argc;
    char **env; int nenv;
    char **cg; int ncg;
    char **collect; int ncollect;
    char **fname; char **fdata; size_t *flen; int nfiles;
    long long timeout_ms;
};

static char *dup_n(const unsigned char *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) die("malloc");
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}

static void push(char ***arr, int *n, char *s) {
    *arr = realloc(*arr, sizeof(char *) * (size_t)(*n + 2));
    (*arr)[(*n)++] = s;
    (*arr)[*n] = NULL;
}

static int safe_name(const char *s) {
    return s[0] && s[0] != '/' && !strstr(s, "..") && !strchr(s, '/');
}

static const char *parse_req(const unsigned char *p, size_t len, struct req *r) {
    memset(r, 0, sizeof *r);
    r->timeout_ms = 3600 * 1000LL;
    size_t off = 0;
    while (off < len) {
        if (len - off < 5) return "truncated field header";
        char tag = (char)p[off];
        uint32_t n = get_u32(p + off + 1);
        off += 5;
        if (n > len - off) return "truncated field";
        char *s = dup_n(p + off, n);
        switch (tag) {
        case 'a': push(&r->argv, &r->argc, s); break;
        case 'e': push(&r->env, &r->nenv, s); break;
        case 'g': push(&r->cg, &r->ncg, s); break;
        case 'c': push(&r->collect, &r->ncollect, s); break;
        case 't': r->timeout_ms = atoll(s); free(s); break;
        case 'f':
            if (!safe_name(s)) return "file name must be a plain name";
            r->fname = realloc(r->fname, sizeof(char *) * (size_t)(r->nfiles + 1));
            r->fdata = realloc(r->fdata, sizeof(char *) * (size_t)(r->nfiles + 1));
            r->flen = realloc(r->flen, sizeof(size_t) * (size_t)(r->nfiles + 1));
            r->fname[r->nfiles] = s; r->fdata[r->nfiles] = NULL; r->flen[r->nfiles] = 0;
            r->nfiles++;
            break;
        case 'd':
            if (!r->nfiles || r->fdata[r->nfiles - 1]) return "file data without a name";
            r->fdata[r->nfiles - 1] = s; r->flen[r->nfiles - 1] = n;
            break;
        default: free(s); return "unknown field tag";
        }
        off += n;
    }
    if (!r->argc) return "empty argv";
    return NULL;
}

static void free_list(char **arr, int n) {
    for (int i = 0; i < n; i++) free(arr[i]);
    free(arr);
}

static void free_req(struct req *r) {
    free_list(r->argv, r->argc);
    free_list(r->env, r->nenv);
    free_list(r->cg, r->ncg);
    free_list(r->collect, r->ncollect);
    for (int i = 0; i < r->nfiles; i++) free(r->fdata[i]);
    free_list(r->fname, r->nfiles);
    free(r->fdata);
    free(r->flen);
}

static void read_file_into(struct buf *b, char tag, const char *path, size_t cap) {
    struct buf content = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char tmp[65536];
        ssize_t r;
        while ((r = read(fd, tmp, sizeof tmp)) > 0 && content.len < cap) buf_put(&content, tmp, (size_t)r);
        close(fd);
    }
    if (content.len > cap) content.len = cap;
    field(b, tag, content.p ? content.p : "", content.len);
    free(content.p);
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static volatile sig_atomic_t kill_requested = 0;
static void on_usr1(int sig) { (void)sig; kill_requested = 1; }

/* The child: own process group (fio forks per job), cgroups joined before exec. */
static void exec_child(struct req *r, const char *out, const char *err) {
    setpgid(0, 0);
    for (int i = 0; i < r->ncg; i++) {
        int fd = open(r->cg[i], O_WRONLY);
        char pid[32];
        int n = snprintf(pid, sizeof pid, "%d", getpid());
        if (fd < 0 || write(fd, pid, (size_t)n) != n) { fprintf(stderr, "join cgroup %s: %s\n", r->cg[i], strerror(errno)); _exit(126); }
        close(fd);
    }
    int in = open("/dev/null", O_RDONLY);
    int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || o < 0 || e < 0) _exit(126);
    dup2(in, 0); dup2(o, 1); dup2(e, 2);
    if (chdir(WORKDIR) < 0) _exit(126);
    for (int i = 0; i < r->nenv; i++) putenv(r->env[i]);
    signal(SIGPIPE, SIG_DFL);
    execvp(r->argv[0], r->argv);
    fprintf(stderr, "iolab-agent: exec %s: %s\n", r->argv[0], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
}

static const char *write_files(struct req *r) {
    static char msg[4400];
    for (int i = 0; i < r->nfiles; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", WORKDIR, r->fname[i]);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || write_all(fd, r->fdata[i] ? r->fdata[i] : "", r->flen[i]) < 0) {
            snprintf(msg, sizeof msg, "write %s: %s", path, strerror(errno));
            if (fd >= 0) close(fd);
            return msg;
        }
        close(fd);
    }
    return NULL;
}

/* Every live process descended from this one. The supervisor is a child subreaper, so the
 * command's orphans are re-parented to it and stay its descendants: fio's job processes call
 * setsid() (fio backend.c thread_main), leave the command's process group, and outlived a
 * killpg() of it, doing I/O on the disk into the next trial. */
static int descendants(pid_t self, pid_t *out, int max) {
    static pid_t pid[MAX_PROCS], ppid[MAX_PROCS];
    int n = 0, found = 0;
    DIR *d = opendir("/proc");
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < MAX_PROCS) {
        char *end;
        long v = strtol(e->d_name, &end, 10);
        if (*end || v <= 0) continue;
        char path[64], stat[512];
        snprintf(path, sizeof path, "/proc/%ld/stat", v);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t k = read(fd, stat, sizeof stat - 1);
        close(fd);
        if (k <= 0) continue;
        stat[k] = 0;
        char *rp = strrchr(stat, ')'); /* the name may hold spaces and parentheses: fields follow the last ')' */
        char st;
        int pp;
        if (!rp || sscanf(rp + 1, " %c %d", &st, &pp) != 2) continue;
        pid[n] = (pid_t)v; ppid[n] = (pid_t)pp; n++;
    }
    closedir(d);
    for (int i = 0; i < n && found < max; i++) {
        pid_t up = ppid[i];
        for (int depth = 0; depth < 64 && up > 1 && up != self; depth++) {
            int j = 0;
            while (j < n && pid[j] != up) j++;
            up = j < n ? ppid[j] : 0;
        }
        if (up == self) out[found++] = pid[i];
    }
    return found;
}

/* SIGKILL every descendant and reap it, until none is left (0) or the deadline passes (how many
 * remain: a process that cannot die, e.g. waiting in the kernel for I/O that never completes). */
static int end_descendants(long long deadline) {
    static pid_t list[MAX_PROCS];
    for (;;) {
        int n = descendants(getpid(), list, MAX_PROCS);
        for (int i = 0; i < n; i++) kill(list[i], SIGKILL);
        while (waitpid(-1, NULL, WNOHANG) > 0) {}
        if (n == 0 || now_ns() > deadline) return n;
        usleep(10000);
    }
}

/* The supervisor: one per run request; waits with a deadline, answers with a 'D' frame. */
static void supervise(uint32_t id, struct req *r) {
    signal(SIGCHLD, SIG_DFL);
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); /* the command's orphans stay ours to end (descendants) */
    signal(SIGUSR1, on_usr1);
    const char *werr = write_files(r);
    if (werr) { send_error(id, werr); _exit(0); }
    char out[256], err[256];
    snprintf(out, sizeof out, "%s/%u.out", OUTDIR, id);
    snprintf(err, sizeof err, "%s/%u.err", OUTDIR, id);
    long long t0 = now_ns();
    pid_t child = fork();
    if (child < 0) { send_error(id, "fork failed"); _exit(0); }
    if (child == 0) exec_child(r, out, err);
    setpgid(child, child);
    long long deadline = t0 + r->timeout_ms * 1000000LL;
    int status = 0, timed_out = 0, killed = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    for (;;) {
        pid_t w = wait4(child, &status, WNOHANG, &ru);
        if (w == child) break;
        if (w < 0 && errno != EINTR) break;
        if (kill_requested || now_ns() > deadline) {
            if (kill_requested) killed = 1; else timed_out = 1;
            killpg(child, SIGKILL);
            while (wait4(child, &status, 0, &ru) < 0 && errno == EINTR) {}
            break;
        }
        usleep(5000);
    }
    long long wall = now_ns() - t0;
    killpg(child, SIGKILL); /* stragglers left in the group */
    /* and every other process the command started, wherever it went (its own session): the next
     * command must find the guest as quiet as this one did */
    int left = end_descendants(now_ns() + STRAGGLER_WAIT_NS);
    if (left) {
        int fd = open(err, O_WRONLY | O_APPEND | O_CLOEXEC);
        if (fd >= 0) {
            dprintf(fd, "\niolab-agent: %d process(es) the command started did not end within %lld s of SIGKILL "
                        "(waiting in the kernel, e.g. for I/O that never completes)\n",
                    left, STRAGGLER_WAIT_NS / 1000000000LL);
            close(fd);
        }
    }
    struct buf p = {0};
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? -WTERMSIG(status) : -1;
    field_num(&p, 'r', rc);
    read_file_into(&p, 'o', out, MAX_OUTPUT);
    read_file_into(&p, 'e', err, MAX_OUTPUT);
    field_num(&p, 'w', wall);
    field_num(&p, 'u', (long long)ru.ru_utime.tv_sec * 1000000LL + ru.ru_utime.tv_usec);
    field_num(&p, 's', (long long)ru.ru_stime.tv_sec * 1000000LL + ru.ru_stime.tv_usec);
    field_num(&p, 'x', timed_out);
    field_num(&p, 'k', killed);
    for (int i = 0; i < r->ncollect; i++) {
        char path[4096];
        const char *c = r->collect[i];
        if (c[0] == '/') snprintf(path, sizeof path, "%s", c);
        else snprintf(path, sizeof path, "%s/%s", WORKDIR, c);
        if (access(path, R_OK) != 0) continue;
        field_str(&p, 'n', c);
        read_file_into(&p, 'd', path, MAX_OUTPUT);
    }
    /* gone before the answer: a guest saved right after it (vm/restore.py) must not, once restored,
     * unlink the files of a later run that reuses this id */
    unlink(out);
    unlink(err);
    send_frame('D', id, &p);
    _exit(0);
}

static struct { uint32_t id; pid_t pid; } jobs[MAX_JOBS];

static void reap(void) {
    pid_t pid;
    while ((pid = waitpid(-1, NULL, WNOHANG)) > 0)
        for (int i = 0; i < MAX_JOBS; i++)
            if (jobs[i].pid == pid) jobs[i].pid = 0;
}

static void start_run(uint32_t id, const unsigned char *payload, size_t len) {
    struct req r;
    const char *perr = parse_req(payload, len, &r);
    if (perr) { send_error(id, perr); free_req(&r); return; }
    pid_t pid = fork();
    if (pid < 0) { send_error(id, "fork failed"); return; }
    if (pid == 0) supervise(id, &r);
    for (int i = 0; i < MAX_JOBS; i++)
        if (!jobs[i].pid) { jobs[i].id = id; jobs[i].pid = pid; break; }
    free_req(&r);
}

static void kill_run(uint32_t id) {
    for (int i = 0; i < MAX_JOBS; i++)
        if (jobs[i].pid && jobs[i].id == id) kill(jobs[i].pid, SIGUSR1);
}

/* A guest restored from a saved state wakes with the wall clock of the moment it was saved and
 * the RNG state every other guest restored from that state has. The host sends its time and
 * fresh random bytes: the clock is stepped, the bytes are credited to the input pool and the
 * CRNG is reseeded from it (RNDRESEEDCRNG), so no two restored guests share their random stream. */
static void set_clock(uint32_t id, const unsigned char *p, size_t len) {
    long long host_ns = -1;
    const unsigned char *rnd = NULL;
    uint32_t nrnd = 0;
    size_t off = 0;
    while (off + 5 <= len) {
        char tag = (char)p[off];
        uint32_t n = get_u32(p + off + 1);
        off += 5;
        if (n > len - off) break;
        if (tag == 't') { char *s = dup_n(p + off, n); host_ns = atoll(s); free(s); }
        else if (tag == 'r') { rnd = p + off; nrnd = n; }
        off += n;
    }
    if (host_ns < 0) { send_error(id, "clock frame without a time"); return; }
    struct timespec before, ts = {(time_t)(host_ns / 1000000000LL), (long)(host_ns % 1000000000LL)};
    clock_gettime(CLOCK_REALTIME, &before);
    int rc = clock_settime(CLOCK_REALTIME, &ts) == 0 ? 0 : -errno;
    int seeded = 0;
    if (rnd && nrnd) {
        int fd = open("/dev/urandom", O_RDWR | O_CLOEXEC);
        struct rand_pool_info *info = malloc(sizeof *info + nrnd);
        if (fd < 0 || !info) seeded = -errno;
        else {
            info->entropy_count = (int)nrnd * 8;
            info->buf_size = (int)nrnd;
            memcpy(info->buf, rnd, nrnd);
            if (ioctl(fd, RNDADDENTROPY, info) < 0 || ioctl(fd, RNDRESEEDCRNG) < 0) seeded = -errno;
        }
        free(info);
        if (fd >= 0) close(fd);
    }
    struct buf out = {0};
    field_num(&out, 'b', (long long)before.tv_sec * 1000000000LL + before.tv_nsec);
    field_num(&out, 'r', rc);
    if (rnd && nrnd) field_num(&out, 's', seeded);
    send_frame('D', id, &out);
    free(out.p);
}

static int open_port(void) {
    for (int tries = 0; tries < 600; tries++) {
        DIR *d = opendir("/sys/class/virtio-ports");
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char path[512], name[128] = {0};
            snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", e->d_name);
            int fd = open(path, O_RDONLY);
            if (fd < 0) continue;
            ssize_t n = read(fd, name, sizeof name - 1);
            close(fd);
            if (n > 0 && name[n - 1] == '\n') name[n - 1] = 0;
            if (strcmp(name, PORT_NAME) == 0) {
                snprintf(path, sizeof path, "/dev/%s", e->d_name);
                closedir(d);
                return open(path, O_RDWR | O_CLOEXEC);
            }
        }
        if (d) closedir(d);
        usleep(50000);
    }
    return -1;
}

int main(void) {
    mkdir("/run/iolab", 0755);
    mkdir(WORKDIR, 0755);
    mkdir(OUTDIR, 0755);
    signal(SIGPIPE, SIG_IGN);
    port_fd = open_port();
    if (port_fd < 0) die("no virtio-serial port named " PORT_NAME);
    send_hello();
    for (;;) {
        struct pollfd pf = {port_fd, POLLIN, 0};
        int pr = poll(&pf, 1, 200);
        reap();
        if (pr <= 0 || !(pf.revents & POLLIN)) {
            if (pr > 0 && (pf.revents & POLLHUP)) usleep(50000);
            continue;
        }
        unsigned char hdr[14];
        if (read_exact(hdr, 4) < 0) die("read");
        while (memcmp(hdr, "IOLB", 4) != 0) {
            /* resynchronise: slide one byte at a time until the magic lines up */
            memmove(hdr, hdr + 1, 3);
            if (read_exact(hdr + 3, 1) < 0) die("read");
        }
        if (read_exact(hdr + 4, 10) < 0) die("read");
        char type = (char)hdr[5];
        uint32_t id = get_u32(hdr + 6), len = get_u32(hdr + 10);
        if (len > MAX_FRAME) { send_error(id, "frame too large"); continue; }
        unsigned char *payload = malloc(len ? len : 1);
        if (!payload) die("malloc");
        if (read_exact(payload, len) < 0) die("read");
        switch (type) {
        case 'R': start_run(id, payload, len); break;
        case 'K': kill_run(id); break;
        case 'P': send_hello(); break;
        case 'Q': sync(); reboot(RB_POWER_OFF); break;
        case 'T': set_clock(id, payload, len); break;
        default: send_error(id, "unknown frame type");
        }
        free(payload);
    }
}

/* A workload for the hot-spot classes of tests/profile.rs: each round it
 * spends a set share of its CPU time on each of five activities, and
 * prints how much CPU time each really took.
 *
 *   deflate   zlib's deflate of a 64 KiB buffer       compression
 *   churn     malloc and free of random sizes          allocation
 *   fault     touching freshly mapped pages, given     page faults (and the
 *             back with madvise(MADV_DONTNEED)         madvise: syscalls)
 *   write     one-byte writes to /dev/null             syscalls
 *   plain     an arithmetic loop                       no class
 *
 * The split is in CPU time, not in work: a calibration first measures
 * each activity's CPU time per unit of work (CLOCK_THREAD_CPUTIME_ID),
 * then each round does the units that make its share, so the split holds
 * however often the process is preempted. Every activity's CPU time is
 * also measured as it runs, per round (two clock reads a round), and
 * printed on exit: the test compares the classes with what each activity
 * really took.
 *
 * usage: classes SECONDS SHARES [SHARES2]
 *   (SHARES: five percentages, "30,20,20,10,20"; after SIGUSR1 the split
 *   is SHARES2)
 * prints "running" once calibrated, "phase 2" once the split changed,
 * then at exit one line per activity: "NAME CPU_SECONDS" (of the whole
 * run). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define ACTIVITIES 5
#define ROUND_MS 20.0
#define FAULT_REGION (16UL << 20)

static const char *names[ACTIVITIES] = {"deflate", "churn", "fault", "write", "plain"};

static unsigned char input[64 << 10], output[80 << 10];
static void *slots[256];
static unsigned char *region;
static int devnull;
static volatile unsigned long sink;
static unsigned long rng = 88172645463325252UL;
static volatile sig_atomic_t swapped;

static void on_usr1(int sig) {
    (void)sig;
    swapped = 1;
}

/* Reads five comma-separated percentages into `share`. */
static void parse_shares(char *p, double *share) {
    for (int i = 0; i < ACTIVITIES; i++) {
        share[i] = strtod(p, &p) / 100.0;
        if (*p == ',')
            p++;
    }
}

static unsigned long next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double wall_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* One unit of each activity. */
__attribute__((noinline)) static void do_deflate(void) {
    z_stream z;
    memset(&z, 0, sizeof z);
    deflateInit(&z, 6);
    z.next_in = input;
    z.avail_in = sizeof input;
    z.next_out = output;
    z.avail_out = sizeof output;
    deflate(&z, Z_FINISH);
    deflateEnd(&z);
}

__attribute__((noinline)) static void do_churn(void) {
    for (int i = 0; i < 64; i++) {
        unsigned long r = next();
        int s = r % 256;
        free(slots[s]);
        slots[s] = malloc(16 + (r >> 8) % 4096);
    }
}

/* Touches every page of the region, then hands the pages back: the next
 * unit faults each one in again. */
__attribute__((noinline)) static void do_fault(void) {
    for (unsigned long off = 0; off < FAULT_REGION; off += 4096)
        region[off] = 1;
    madvise(region, FAULT_REGION, MADV_DONTNEED);
}

__attribute__((noinline)) static void do_write(void) {
    char c = 'x';
    for (int i = 0; i < 64; i++)
        if (write(devnull, &c, 1) != 1)
            abort();
}

__attribute__((noinline)) static void do_plain(void) {
    unsigned long x = sink + 1;
    for (int i = 0; i < 100000; i++) {
        x = x * 6364136223846793005UL + 1;
        __asm__ volatile("" : "+r"(x));
    }
    sink = x;
}

static void (*const units[ACTIVITIES])(void) = {do_deflate, do_churn, do_fault, do_write,
                                                 do_plain};

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: classes SECONDS SHARES\n");
        return 2;
    }
    double secs = atof(argv[1]);
    double share[ACTIVITIES], share2[ACTIVITIES];
    parse_shares(argv[2], share);
    parse_shares(argc > 3 ? argv[3] : argv[2], share2);
    signal(SIGUSR1, on_usr1);
    for (size_t i = 0; i < sizeof input; i++)
        input[i] = (next() % 16) + 'a'; /* compressible, not trivially */
    region = mmap(NULL, FAULT_REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    devnull = open("/dev/null", O_WRONLY);
    if (region == MAP_FAILED || devnull < 0)
        return 1;

    /* Calibration: CPU seconds per unit of each activity. */
    double per_unit[ACTIVITIES];
    for (int a = 0; a < ACTIVITIES; a++) {
        int n = 0;
        double start = cpu_now(), spent;
        do {
            units[a]();
            n++;
        } while ((spent = cpu_now() - start) < 0.05);
        per_unit[a] = spent / n;
    }
    printf("running\n");
    fflush(stdout);

    double took[ACTIVITIES] = {0};
    double start = wall_now();
    int phase = 1;
    while (wall_now() - start < secs) {
        if (swapped && phase == 1) {
            phase = 2;
            memcpy(share, share2, sizeof share);
            printf("phase 2\n");
            fflush(stdout);
        }
        for (int a = 0; a < ACTIVITIES; a++) {
            /* The units that make this activity's share of a round;
             * fractions carried by chance so that small shares hold. */
            double want = share[a] * ROUND_MS / 1000.0 / per_unit[a];
            long n = (long)want + ((next() % 1000) / 1000.0 < want - (long)want);
            double t0 = cpu_now();
            for (long i = 0; i < n; i++)
                units[a]();
            took[a] += cpu_now() - t0;
        }
    }
    for (int a = 0; a < ACTIVITIES; a++)
        printf("%s %.6f\n", names[a], took[a]);
    return 0;
}

/* A CPU burner for tests/profile.rs: `main` calls `work` in a loop, and
 * `work` calls `hot` then `cold`, which spin for 7 and 3 units of work:
 * hot holds 70% of the process's CPU time and cold 30%, however often
 * the process is preempted, since the split is counted in work done,
 * not in time. After SIGUSR1 the split swaps to 30/70 ("phase 2").
 * Each round's length is drawn at random (1 to 16 ms) so that a sampler
 * ticking at a fixed rate does not lock onto one phase of the round.
 *
 * usage: burn SECONDS   (exits by itself after SECONDS of wall time)
 * prints "phase 1" once running and "phase 2" once the split swapped. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define UNIT 90000UL /* iterations: about 0.1 ms */

static volatile unsigned long sink;
static volatile unsigned long calls;
static volatile sig_atomic_t swapped;
static unsigned long hot_units = 7, cold_units = 3;
static unsigned long rng = 88172645463325252UL;

static inline __attribute__((always_inline)) void spin(unsigned long units) {
    unsigned long x = sink + 1;
    for (unsigned long i = 0; i < units * UNIT; i++) {
        x = x * 6364136223846793005UL + 1;
        __asm__ volatile("" : "+r"(x)); /* keep the loop a loop */
    }
    sink = x;
}

__attribute__((noinline)) void hot(unsigned long scale) { spin(hot_units * scale); }
__attribute__((noinline)) void cold(unsigned long scale) { spin(cold_units * scale); }

/* The store after the calls keeps `cold()` from becoming a tail jump,
 * which would take `work` off the stack during cold's samples. */
__attribute__((noinline)) void work(void) {
    rng ^= rng << 13; /* xorshift64 */
    rng ^= rng >> 7;
    rng ^= rng << 17;
    unsigned long scale = 1 + rng % 16;
    hot(scale);
    cold(scale);
    calls++;
}

static void on_usr1(int sig) {
    (void)sig;
    swapped = 1;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 10;
    signal(SIGUSR1, on_usr1);
    double start = now();
    printf("phase 1\n");
    fflush(stdout);
    int phase = 1;
    while (now() - start < secs) {
        if (swapped && phase == 1) {
            phase = 2;
            hot_units = 3;
            cold_units = 7;
            printf("phase 2\n");
            fflush(stdout);
        }
        work();
    }
    return 0;
}

/* Two named threads running different functions, for tests/profile.rs:
 * thread "spin-a" runs spin_a() and starts at once; thread "spin-b" runs
 * spin_b() and is created only on SIGUSR1, so that a profiler already
 * running sees it born and rename itself (the perf stream's fork and
 * comm records) rather than finding its name in /proc. The main thread
 * waits and burns nothing.
 *
 * usage: threads SECONDS   (exits by itself after SECONDS)
 * prints "a running" once spin-a is named, "b running" once spin-b is. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile unsigned long sink;

static inline __attribute__((always_inline)) void spin(void) {
    unsigned long x = sink + 1;
    for (unsigned long i = 0; i < 1000000UL; i++) {
        x = x * 6364136223846793005UL + 1;
        __asm__ volatile("" : "+r"(x));
    }
    sink = x;
}

__attribute__((noinline)) void spin_a(void) { spin(); }
__attribute__((noinline)) void spin_b(void) { spin(); }

static void *run(void *arg) {
    const char *name = arg;
    pthread_setname_np(pthread_self(), name);
    printf("%c running\n", name[5]);
    fflush(stdout);
    for (;;) {
        if (name[5] == 'a')
            spin_a();
        else
            spin_b();
    }
    return NULL;
}

int main(int argc, char **argv) {
    unsigned seconds = argc > 1 ? (unsigned)atoi(argv[1]) : 60;
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    /* Blocked before any thread exists, so every thread inherits it and
     * sigwait below is the only taker. */
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    pthread_t a, b;
    pthread_create(&a, NULL, run, "spin-a");
    alarm(seconds);
    int sig;
    sigwait(&usr1, &sig);
    pthread_create(&b, NULL, run, "spin-b");
    pthread_join(a, NULL);
    return 0;
}

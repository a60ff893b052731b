/* A short-lived burner for tests/profile.rs: spins in
 * `shortburn_spin` for about 150 ms of CPU, then exits. */
#include <stdlib.h>

#define ITERATIONS 130000000UL /* about 150 ms */

static volatile unsigned long sink;

__attribute__((noinline)) void shortburn_spin(void) {
    unsigned long x = sink + 1;
    for (unsigned long i = 0; i < ITERATIONS; i++) {
        x = x * 6364136223846793005UL + 1;
        __asm__ volatile("" : "+r"(x));
    }
    sink = x;
}

int main(void) {
    shortburn_spin();
    sink++; /* not a tail call: main stays on the stack */
    return 0;
}

/* Starts a program again and again, one at a time, for tests/profile.rs:
 * each run is a fresh fork + exec of a short-lived process.
 *
 * usage: spawner SECONDS PROGRAM   (stops starting new runs after SECONDS)
 * prints "spawning" before the first run. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: spawner SECONDS PROGRAM\n");
        return 2;
    }
    double secs = atof(argv[1]);
    double start = now();
    printf("spawning\n");
    fflush(stdout);
    int runs = 0;
    while (now() - start < secs) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            execl(argv[2], argv[2], (char *)NULL);
            perror("exec");
            _exit(127);
        }
        int status;
        if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "run %d failed\n", runs);
            return 1;
        }
        runs++;
    }
    printf("%d runs\n", runs);
    return 0;
}

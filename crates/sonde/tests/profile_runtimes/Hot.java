// A CPU burner for tests/profile_runtimes.rs: main calls work in a loop,
// and work calls hot then cold, which spin for 7 and 3 units of work: hot
// holds 70% of the process's CPU time and cold 30%, however often the
// process is preempted, since the split is counted in work done, not in
// time (the two loops are the same code but for their length: a different
// constant, as `+ 3`, makes C2 emit a loop 50% slower per iteration). A
// round takes about 7 us, so the JIT sees many calls early and a sampler
// ticking every 10 ms cannot lock onto one phase of a round.
// Run it with -XX:CompileCommand=dontinline,Hot::* so that hot, cold and
// work stay methods of their own once compiled (main may be interpreted
// or compiled, and recompiled, at any time; work is compiled once).
//
// usage: java Hot SECONDS   (exits by itself SECONDS after "ready")
// prints "ready" after a warm-up that gets hot and cold JIT-compiled.
public class Hot {
    static long sink;

    static long hot(long x) {
        for (int i = 0; i < 7_000; i++) {
            x = x * 6364136223846793005L + 1;
        }
        return x;
    }

    static long cold(long x) {
        for (int i = 0; i < 3_000; i++) {
            x = x * 6364136223846793005L + 1;
        }
        return x;
    }

    static void work() {
        sink = hot(sink);
        sink = cold(sink);
    }

    public static void main(String[] args) {
        double secs = args.length > 0 ? Double.parseDouble(args[0]) : 10;
        // Warm-up: far more calls than the JIT's top tier waits for before
        // compiling hot, cold and work (thousands).
        for (int i = 0; i < 50_000; i++) {
            work();
        }
        System.out.println("ready");
        System.out.flush();
        long deadline = System.nanoTime() + (long) (secs * 1e9);
        while (System.nanoTime() < deadline) {
            work();
        }
        System.out.println(sink == 42 ? "" : "done");
    }
}

// A CPU burner for tests/profile_runtimes.rs: main.main calls main.work
// in a loop, and main.work calls hotLoop then coldLoop, which spin for 7
// and 3 units of work: hotLoop holds 70% of the process's CPU time and
// coldLoop 30%, however often the process is preempted, since the split
// is counted in work done, not in time. Each round's length is drawn at
// random (1 to 16 units of each) so that a sampler ticking at a fixed
// rate does not lock onto one phase of the round.
//
// usage: burn SECONDS   (exits by itself after SECONDS of wall time)
// prints "ready" once running.
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// unit is about 0.1 ms of spinning.
const unit = 90000

var (
	sink  uint64
	calls uint64
	rng   uint64 = 88172645463325252
)

func spin(x uint64, n int) uint64 {
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1
	}
	return x
}

//go:noinline
func hotLoop(scale int) {
	sink = spin(sink, 7*scale*unit)
}

//go:noinline
func coldLoop(scale int) {
	sink = spin(sink+1, 3*scale*unit)
}

//go:noinline
func work() {
	rng ^= rng << 13 // xorshift64
	rng ^= rng >> 7
	rng ^= rng << 17
	scale := 1 + int(rng%16)
	hotLoop(scale)
	coldLoop(scale)
	calls++
}

func main() {
	secs := 10.0
	if len(os.Args) > 1 {
		s, err := strconv.ParseFloat(os.Args[1], 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "usage: burn SECONDS")
			os.Exit(2)
		}
		secs = s
	}
	deadline := time.Now().Add(time.Duration(secs * float64(time.Second)))
	fmt.Println("ready")
	for time.Now().Before(deadline) {
		work()
	}
}

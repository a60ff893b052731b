// A Go program for the hot-spot classes of tests/profile_runtimes.rs: it
// appends to slices it never pre-sizes, so its CPU goes to the runtime's
// growslice, mallocgc and the memmove of each growth (class allocation)
// and to the collector freeing what it dropped (class gc).
//
// usage: grow SECONDS   (exits by itself after SECONDS of wall time)
// prints "ready" once running.
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

var sink int

// grow builds small slices (8 KiB at most), whose memory the runtime
// reuses from its spans: large ones would be fresh pages each time, and
// their page faults would outweigh the growth itself.
//
//go:noinline
func grow() {
	for n := 0; n < 64; n++ {
		var s []int
		for i := 0; i < 1<<10; i++ {
			s = append(s, i)
		}
		sink += len(s)
	}
}

func main() {
	secs, _ := strconv.Atoi(os.Args[1])
	end := time.Now().Add(time.Duration(secs) * time.Second)
	grow()
	fmt.Println("ready")
	for time.Now().Before(end) {
		grow()
	}
}

package sonde

import (
	"runtime"
	"strconv"
	"testing"
	"time"
)

// drain reads and discards everything sent to r, so a benchmark's flushes
// never wait on a full socket queue.
func drain(r *receiver) {
	conn := r.conn
	go func() {
		buf := make([]byte, 1<<16)
		for {
			if _, err := conn.Read(buf); err != nil {
				return
			}
		}
	}()
}

// warm fills and flushes both batches once, so their slices, the sum map
// and the datagram buffer have reached the size the measured calls need.
func warm(t testing.TB, c *Client, emit func()) {
	for round := 0; round < 2; round++ {
		for i := 0; i < 2000; i++ {
			emit()
		}
		must(t, c.Flush())
	}
}

var threeTags = []Tag{{"host", "web-042"}, {"dc", "eu-west-1"}, {"route", "/api/v1/orders"}}

func emitCounter(c *Client) func() {
	return func() {
		if err := c.Counter("http.requests", 1, T("host", "web-042"), T("dc", "eu-west-1"), T("route", "/api/v1/orders")); err != nil {
			panic(err)
		}
	}
}

func emitTimer(c *Client) func() {
	return func() {
		if err := c.Timer("http.latency", 12.5, T("host", "web-042")); err != nil {
			panic(err)
		}
	}
}

func emitStore(c *Client) func() {
	return func() {
		if err := c.Store("queue.depth", 7, T("host", "web-042"), T("dc", "eu-west-1"), T("route", "/api/v1/orders")); err != nil {
			panic(err)
		}
	}
}

// emitCounter500 cycles over 500 series, as a hot loop over many keys would.
func emitCounter500(c *Client) func() {
	names := make([]string, 500)
	for i := range names {
		names[i] = "http.requests." + strconv.Itoa(i)
	}
	i := 0
	return func() {
		if err := c.Counter(names[i], 1, T("host", "web-042"), T("dc", "eu-west-1"), T("route", "/api/v1/orders")); err != nil {
			panic(err)
		}
		i = (i + 1) % len(names)
	}
}

// mallocs counts the heap allocations made while f runs n times. It is
// stricter than testing.AllocsPerRun, whose integer average rounds one
// allocation in 1,000 runs down to zero. The runtime's counter covers every
// goroutine, and the runtime itself now and then allocates in the
// background (starting a thread, growing a timer heap), so this takes the
// least of five trials: an allocation in the measured code shows up in
// every trial, background noise does not.
func mallocs(n int, f func()) uint64 {
	least := ^uint64(0)
	for trial := 0; trial < 5; trial++ {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := 0; i < n; i++ {
			f()
		}
		runtime.ReadMemStats(&after)
		least = min(least, after.Mallocs-before.Mallocs)
	}
	return least
}

func TestAWarmClientEmitsWithoutAllocating(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("instrumented builds allocate on their own")
	}
	r := newReceiver(t)
	drain(r)
	c := newTestClient(t, Options{Address: r.address()})
	for name, emit := range map[string]func(){
		"Counter with three tags": emitCounter(c),
		"Counter over 500 series": emitCounter500(c),
		"Store with three tags":   emitStore(c),
		"Timer":                   emitTimer(c),
	} {
		warm(t, c, emit)
		if avg := testing.AllocsPerRun(1000, emit); avg != 0 {
			t.Errorf("%s: %v allocations per call", name, avg)
		}
		must(t, c.Flush())
		// Flushing after each 1,000 keeps every trial inside the capacity
		// warm reached; flushes allocate nothing (the next test).
		if n := mallocs(1, func() {
			for i := 0; i < 1000; i++ {
				emit()
			}
			must(t, c.Flush())
		}); n != 0 {
			t.Errorf("%s: %d allocations in 1000 calls", name, n)
		}
		must(t, c.Flush())
	}
	if c.Dropped() != 0 {
		t.Fatalf("dropped %d: the measured path was the drop path", c.Dropped())
	}
}

// A warm flush (encode, split, send) allocates nothing either, so a busy
// client does not feed the garbage collector in the background.
func TestAWarmFlushDoesNotAllocate(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("instrumented builds allocate on their own")
	}
	r := newReceiver(t)
	drain(r)
	c := newTestClient(t, Options{Address: r.address()})
	emit, count := emitTimer(c), emitCounter(c)
	both := func() { emit(); count() }
	warm(t, c, both)
	if n := mallocs(4, func() {
		for i := 0; i < 500; i++ {
			both()
		}
		must(t, c.Flush())
	}); n != 0 {
		t.Errorf("%d allocations in 4 flushes of 501 points", n)
	}
}

// flushEvery is how many emits a benchmark makes between two flushes:
// well under the default buffer of 10,000, so no emit takes the (cheaper)
// drop path and the numbers are those of points actually sent.
const flushEvery = 4096

// benchmarkEmit measures emit on a warm client. With withSend the
// synchronous flush every flushEvery emits is timed too, so ns/op is the
// whole client-side cost of a point: emit, summing, encoding and its share
// of the send system call. Without it, flushes happen with the timer
// stopped and ns/op is what the calling goroutine pays.
func benchmarkEmit(b *testing.B, emit func(*Client) func(), withSend bool) {
	r := newReceiver(b)
	drain(r)
	// The background flusher is held off (1 h) so that it neither adds
	// noise nor decides when flushes happen; the loop flushes instead.
	c, err := New(Options{Address: r.address(), FlushInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	f := emit(c)
	warm(b, c, f)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		f()
		if i%flushEvery == 0 {
			if !withSend {
				b.StopTimer()
			}
			if err := c.Flush(); err != nil {
				b.Fatal(err)
			}
			if !withSend {
				b.StartTimer()
			}
		}
	}
	b.StopTimer()
	if c.Dropped() != 0 || c.SendErrors() != 0 {
		b.Fatalf("dropped %d, send errors %d: not the path meant to be measured", c.Dropped(), c.SendErrors())
	}
}

func BenchmarkCounterThreeTags(b *testing.B) { benchmarkEmit(b, emitCounter, false) }

func BenchmarkCounter500Series(b *testing.B) { benchmarkEmit(b, emitCounter500, false) }

func BenchmarkStoreThreeTags(b *testing.B) { benchmarkEmit(b, emitStore, false) }

func BenchmarkTimer(b *testing.B) { benchmarkEmit(b, emitTimer, false) }

func BenchmarkTimerIncludingSend(b *testing.B) { benchmarkEmit(b, emitTimer, true) }

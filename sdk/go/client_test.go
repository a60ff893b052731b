package sonde

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestInvalidNamesAreRejectedWithErrInvalidName(t *testing.T) {
	r := newReceiver(t)
	c := newTestClient(t, Options{Address: r.address()})
	// "é b": the check of forbidden bytes must go on past a multi-byte
	// character.
	for _, name := range []string{"", "a|b", "a=b", "a b", "a\nb", "a\rb", "bad\xffutf8", "\xc3", "é b", "é|"} {
		err := c.Counter(name, 1)
		if !errors.Is(err, ErrInvalidName) {
			t.Errorf("name %q: got %v, want ErrInvalidName", name, err)
		}
	}
	must(t, c.Flush())
	r.quiet()
}

func TestInvalidTagsAreRejectedWithErrInvalidTag(t *testing.T) {
	r := newReceiver(t)
	c := newTestClient(t, Options{Address: r.address()})
	bad := []Tag{T("", "v"), T("", "")}
	for _, c := range []string{"|", "=", " ", "\n", "\r"} {
		bad = append(bad, T("k"+c, "v"), T("k", "v"+c))
	}
	bad = append(bad, T("k", "\xff"), T("\xfe", "v"), T("k", "ü=1"), T("ключ ", "v"))
	for _, tag := range bad {
		// The bad tag comes second: the first, good one must not be sent
		// on its own either.
		err := c.Timer("ok", 1, T("host", "a"), tag)
		if !errors.Is(err, ErrInvalidTag) {
			t.Errorf("tag %q=%q: got %v, want ErrInvalidTag", tag.Key, tag.Value, err)
		}
	}
	must(t, c.Flush())
	r.quiet()
}

func TestErrorsNameTheOffendingInput(t *testing.T) {
	c := newTestClient(t, Options{Address: "udp://127.0.0.1:9"})
	err := c.Store("queue depth", 1)
	if err == nil || !strings.Contains(err.Error(), `"queue depth"`) || !strings.Contains(err.Error(), `' '`) {
		t.Errorf("got %v", err)
	}
	err = c.Store("q", 1, T("env", "a=b"))
	if err == nil || !strings.Contains(err.Error(), `"a=b"`) {
		t.Errorf("got %v", err)
	}
}

func TestNonASCIINamesAndTagsAreSentAsUTF8(t *testing.T) {
	r := newReceiver(t)
	c := newTestClient(t, Options{Address: r.address(), Prefix: "préfixe"})
	must(t, c.Store("température", 21.5, T("pièce", "séjour"), T("城市", "東京")))
	must(t, c.Flush())
	want := msg{"store", "préfixe.température", "21.5", "pièce=séjour|城市=東京", ""}
	if got := r.messages(1)[0]; got != want {
		t.Errorf("got %v", got)
	}
}

func TestEmptyTagValuesAreAccepted(t *testing.T) {
	r := newReceiver(t)
	c := newTestClient(t, Options{Address: r.address()})
	must(t, c.Store("q", 1, T("urgent", ""), T("host", "a")))
	must(t, c.Flush())
	if got := r.messages(1)[0].tags; got != "urgent=|host=a" {
		t.Errorf("tags %q", got)
	}
}

func TestNonFiniteValuesAreRejectedBeforeAnythingIsBuffered(t *testing.T) {
	r := newReceiver(t)
	c := newTestClient(t, Options{Address: r.address()})
	for _, v := range []float64{nan(), inf(1), inf(-1)} {
		if err := c.Histogram("h", v); !errors.Is(err, ErrInvalidValue) {
			t.Errorf("%v: got %v", v, err)
		}
	}
	must(t, c.Flush())
	r.quiet()
}

func nan() float64      { z := 0.0; return z / z }
func inf(s int) float64 { z := 0.0; return float64(s) / z }
func sortedKeys(m map[string]float64) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestNewRejectsABadPrefixAddressOrSize(t *testing.T) {
	for _, prefix := range []string{"a|b", "a=b", "a b", "a\n", "\r", "\xff"} {
		if _, err := New(Options{Prefix: prefix, Address: "udp://127.0.0.1:9"}); !errors.Is(err, ErrInvalidPrefix) {
			t.Errorf("prefix %q: got %v", prefix, err)
		}
	}
	for _, addr := range []string{"tcp://127.0.0.1:9", "/tmp/metric.sock", "unixgram://", "unixseq://", "udp://127.0.0.1", "udp://"} {
		if _, err := New(Options{Address: addr}); !errors.Is(err, ErrInvalidAddress) {
			t.Errorf("address %q: got %v", addr, err)
		}
	}
	if _, err := New(Options{Address: "udp://127.0.0.1:9", BufferSize: -1}); err == nil {
		t.Error("negative BufferSize accepted")
	}
	if _, err := New(Options{Address: "udp://127.0.0.1:9", FlushInterval: -time.Second}); err == nil {
		t.Error("negative FlushInterval accepted")
	}
}

func TestThePrefixIsJoinedToEveryNameWithADot(t *testing.T) {
	r := newReceiver(t)
	c := newTestClient(t, Options{Address: r.address(), Prefix: "web.api"})
	must(t, c.Counter("hits", 1))
	must(t, c.TsStore("daily", 2, 1763800200))
	must(t, c.Flush())
	got := r.messages(2)
	if got[0].name != "web.api.hits" || got[1].name != "web.api.daily" {
		t.Errorf("names %v", got)
	}

	r2 := newReceiver(t)
	bare := newTestClient(t, Options{Address: r2.address()})
	must(t, bare.Counter("hits", 1))
	must(t, bare.Flush())
	if got := r2.messages(1)[0].name; got != "hits" {
		t.Errorf("without a prefix: %q", got)
	}
}

func TestTagsAreRenderedInTheCallersOrder(t *testing.T) {
	r := newReceiver(t)
	c := newTestClient(t, Options{Address: r.address()})
	must(t, c.Timer("t", 1, T("zone", "b"), T("app", "x"), T("host", "a")))
	must(t, c.Timer("t", 1))
	must(t, c.Flush())
	got := r.messages(2)
	if got[0].tags != "zone=b|app=x|host=a" || got[1].tags != "" {
		t.Errorf("tags %q and %q", got[0].tags, got[1].tags)
	}
}

func TestEveryMethodSendsItsTypeAndOnlyTsStoreCarriesATimestamp(t *testing.T) {
	r := newReceiver(t)
	c := newTestClient(t, Options{Address: r.address()})
	must(t, c.Counter("a", 1))
	must(t, c.RateCounter("b", 2))
	must(t, c.Meter("c", 3))
	must(t, c.Timer("d", 4.5))
	must(t, c.Store("e", -5))
	must(t, c.TsStore("f", 6, 1763800230))
	must(t, c.Histogram("g", 0.7))
	must(t, c.Flush())
	want := []msg{
		{"counter", "a", "1", "", ""},
		{"rate_counter", "b", "2", "", ""},
		{"meter", "c", "3", "", ""},
		{"timer", "d", "4.5", "", ""},
		{"store", "e", "-5", "", ""},
		{"ts_store", "f", "6", "", "1763800230"},
		{"histogram", "g", "0.7", "", ""},
	}
	if got := r.messages(len(want)); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

func TestCountersAndRateCountersAreSummedPerSeriesWithinAFlush(t *testing.T) {
	r := newReceiver(t)
	c := newTestClient(t, Options{Address: r.address()})
	must(t, c.Counter("req", 1, T("host", "a")))
	must(t, c.Timer("lat", 5))
	must(t, c.Counter("req", 2, T("host", "a")))
	must(t, c.Counter("req", 4, T("host", "b")))
	must(t, c.RateCounter("req", 3, T("host", "a"))) // same name, other type
	must(t, c.Meter("m", 1))
	must(t, c.Counter("req", 0.5, T("host", "a")))
	must(t, c.RateCounter("req", 7, T("host", "a")))
	must(t, c.Meter("m", 1)) // meters are not summed
	must(t, c.Timer("lat", 5))
	must(t, c.Counter("req", 1, T("host", "a"), T("dc", "x"))) // more tags: another series
	must(t, c.Flush())
	want := []msg{
		{"counter", "req", "3.5", "host=a", ""},
		{"timer", "lat", "5", "", ""},
		{"counter", "req", "4", "host=b", ""},
		{"rate_counter", "req", "10", "host=a", ""},
		{"meter", "m", "1", "", ""},
		{"meter", "m", "1", "", ""},
		{"timer", "lat", "5", "", ""},
		{"counter", "req", "1", "host=a|dc=x", ""},
	}
	if got := r.messages(len(want)); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

func TestAStoreReplacesThePendingValueOfItsSeries(t *testing.T) {
	r := newReceiver(t)
	// Three entries of four: the buffer never fills, so nothing is sent
	// before Flush.
	c := newTestClient(t, Options{Address: r.address(), BufferSize: 4})
	must(t, c.Store("depth", 5, T("q", "a")))
	must(t, c.Timer("lat", 1))
	must(t, c.Store("depth", 7, T("q", "b"))) // other tags: another series
	for i := 0; i < 100; i++ {
		must(t, c.Store("depth", float64(i), T("q", "a"))) // takes no room
	}
	if c.Dropped() != 0 {
		t.Errorf("dropped %d", c.Dropped())
	}
	must(t, c.Flush())
	want := []msg{
		{"store", "depth", "99", "q=a", ""},
		{"timer", "lat", "1", "", ""},
		{"store", "depth", "7", "q=b", ""},
	}
	if got := r.messages(len(want)); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

func TestASumThatWouldOverflowIsRejectedAndTheSumKept(t *testing.T) {
	r := newReceiver(t)
	c := newTestClient(t, Options{Address: r.address()})
	must(t, c.Counter("big", 1e308))
	if err := c.Counter("big", 1e308); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("got %v", err)
	}
	must(t, c.Flush())
	if got := r.messages(1)[0].value; got != "1e+308" {
		t.Errorf("sent %s", got)
	}
}

func TestSumsStartAfreshInEachFlush(t *testing.T) {
	r := newReceiver(t)
	c := newTestClient(t, Options{Address: r.address()})
	for i, v := range []float64{1, 2, 3} {
		must(t, c.Counter("req", v))
		must(t, c.Counter("req", v))
		must(t, c.Flush())
		if got := r.messages(1)[0].value; got != strconv.Itoa(2*(i+1)) {
			t.Errorf("flush %d: %s", i, got)
		}
	}
}

// With BufferSize 2 the sum map is cleared at every flush that saw more
// than two series; the series it forgets must still be summed correctly
// afterwards.
func TestSummingSurvivesTheSeriesMapBeingCleared(t *testing.T) {
	r := newReceiver(t)
	c := newTestClient(t, Options{Address: r.address(), BufferSize: 2})
	for round := 0; round < 3; round++ {
		c.sendMu.Lock() // keep the woken flusher out until both are in
		must(t, c.Counter("a", 1))
		must(t, c.Counter("b", 1))
		must(t, c.Counter("a", 1))
		must(t, c.Counter("b", 1))
		c.sendMu.Unlock()
		must(t, c.Flush())
		got := r.messages(2)
		if got[0].value != "2" || got[1].value != "2" {
			t.Fatalf("round %d: %v", round, got)
		}
		// A third series in the map makes the next flush clear it.
		must(t, c.Counter(fmt.Sprint("other", round), 1))
		must(t, c.Flush())
		r.messages(1)
	}
	if c.Dropped() != 0 {
		t.Errorf("dropped %d", c.Dropped())
	}
}

func TestBunchesStayUnder32KiBAreTightlyPackedAndKeepOrder(t *testing.T) {
	r := newReceiver(t)
	c := newTestClient(t, Options{Address: r.address()})
	const n = 700
	tag := T("payload", strings.Repeat("x", 150))
	for i := 0; i < n; i++ {
		must(t, c.Timer("svc.latency", float64(i), tag))
	}
	must(t, c.Flush())
	var sizes []int
	seen := 0
	for seen < n {
		d := r.datagram(5 * time.Second)
		if d == nil {
			t.Fatalf("only %d of %d messages arrived", seen, n)
		}
		ms, bunch, err := decodeDatagram(d)
		if err != nil {
			t.Fatal(err)
		}
		if !bunch || len(d) >= 32768 {
			t.Fatalf("datagram of %d bytes, bunch %v", len(d), bunch)
		}
		for _, m := range ms {
			if m.value != strconv.Itoa(seen) {
				t.Fatalf("message %d has value %s", seen, m.value)
			}
			seen++
		}
		sizes = append(sizes, len(d))
	}
	r.quiet()
	// Every message here is the same size, so each datagram but the last
	// must be one message short of the limit.
	msgLen := len(appendRawMessage(nil, "timer", "svc.latency", "100", tag.Key+"="+tag.Value, ""))
	for i, s := range sizes[:len(sizes)-1] {
		if s+msgLen < 32768-2 { // values 0..699 vary in length by 2 bytes
			t.Errorf("datagram %d is %d bytes: another %d-byte message fits", i, s, msgLen)
		}
	}
	if len(sizes) < 3 {
		t.Errorf("want the flush split over several datagrams, got %d", len(sizes))
	}
}

func TestTheLargestAcceptedSeriesIsSentAndOneByteMoreIsRejected(t *testing.T) {
	r := newReceiver(t)
	c := newTestClient(t, Options{Address: r.address()})
	// NAME of n bytes (str16 header) and TAGS "k=v" (fixstr).
	n := maxSeriesBytes - 3 - 4
	err := c.TsStore(strings.Repeat("n", n+1), 1, -1<<63, T("k", "v"))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v", err)
	}
	long := strings.Repeat("n", n)
	// Two of them with the longest VALUE and TS: each must go alone.
	must(t, c.TsStore(long, -2.2250738585072014e-308, -1<<63, T("k", "v")))
	must(t, c.TsStore(long, -2.2250738585072014e-308, -1<<63, T("k", "v")))
	must(t, c.Flush())
	for i := 0; i < 2; i++ {
		d := r.datagram(5 * time.Second)
		ms, bunch, err := decodeDatagram(d)
		if err != nil || bunch || len(ms) != 1 || ms[0].name != long || len(d) >= 32768 {
			t.Fatalf("datagram %d: %d bytes, bunch %v, err %v", i, len(d), bunch, err)
		}
	}
	if c.SendErrors() != 0 {
		t.Errorf("send errors %d", c.SendErrors())
	}
}

func TestAFullBufferDropsAndCountsPointsButStillSumsKnownSeries(t *testing.T) {
	r := newReceiver(t)
	c := newTestClient(t, Options{Address: r.address(), BufferSize: 3})
	// Hold the flush lock so the flusher, woken by the full buffer, cannot
	// empty it while the test fills it.
	c.sendMu.Lock()
	must(t, c.Counter("a", 1))
	must(t, c.Timer("b", 1))
	must(t, c.Timer("c", 1))
	must(t, c.Timer("d", 1)) // dropped
	must(t, c.Counter("e", 1))
	must(t, c.Counter("a", 2)) // summed into an existing entry: kept
	if got := c.Dropped(); got != 2 {
		t.Errorf("dropped %d, want 2", got)
	}
	c.sendMu.Unlock()
	must(t, c.Flush())
	want := []msg{
		{"counter", "a", "3", "", ""},
		{"timer", "b", "1", "", ""},
		{"timer", "c", "1", "", ""},
	}
	if got := r.messages(3); !reflect.DeepEqual(got, want) {
		t.Errorf("got %v", got)
	}
	r.quiet()
}

func TestAFullBufferWakesTheFlusherAtOnce(t *testing.T) {
	r := newReceiver(t)
	c := newTestClient(t, Options{Address: r.address(), BufferSize: 2}) // interval 1 h
	must(t, c.Store("a", 1))
	must(t, c.Store("b", 2))
	r.messages(2) // fails after 5 s if the flusher waits for its tick
}

func TestTheFlusherSendsEvery200msByDefault(t *testing.T) {
	r := newReceiver(t)
	c, err := New(Options{Address: r.address()})
	must(t, err)
	defer c.Close()
	if c.interval != 200*time.Millisecond || c.capacity != 10000 {
		t.Fatalf("defaults: interval %v, capacity %d", c.interval, c.capacity)
	}
	start := time.Now()
	must(t, c.Store("a", 1))
	r.messages(1)
	if e := time.Since(start); e > 2*time.Second {
		t.Errorf("took %v", e)
	}
}

func TestFlushHasWrittenEverythingWhenItReturns(t *testing.T) {
	r := newReceiver(t)
	c := newTestClient(t, Options{Address: r.address()})
	must(t, c.Store("a", 1))
	must(t, c.Flush())
	// Already in the socket queue: no wait needed.
	if d := r.datagram(time.Millisecond); d == nil {
		t.Fatal("nothing queued after Flush returned")
	}
	must(t, c.Flush()) // nothing pending: sends nothing
	r.quiet()
}

func TestCloseSendsWhatIsPendingAndLaterCallsReturnErrClosed(t *testing.T) {
	r := newReceiver(t)
	c, err := New(Options{Address: r.address(), FlushInterval: time.Hour})
	must(t, err)
	must(t, c.Counter("a", 1))
	must(t, c.Close())
	if got := r.messages(1); got[0].name != "a" {
		t.Errorf("got %v", got)
	}
	if err := c.Counter("a", 1); !errors.Is(err, ErrClosed) {
		t.Errorf("emit after Close: %v", err)
	}
	if err := c.Flush(); !errors.Is(err, ErrClosed) {
		t.Errorf("Flush after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	select {
	case <-c.stopped:
	default:
		t.Error("flusher still running")
	}
	r.quiet()
}

func TestSendErrorsAreCountedAndNeverReturnedToEmitters(t *testing.T) {
	dir := shortTempDir(t)
	c := newTestClient(t, Options{Address: "unixgram://" + dir + "/nobody.sock"})
	for i := 0; i < 3; i++ {
		must(t, c.Counter("a", 1))
	}
	if err := c.Flush(); err == nil {
		t.Error("Flush to a missing socket returned nil")
	}
	if got := c.SendErrors(); got != 1 {
		t.Errorf("send errors %d, want 1", got)
	}
	must(t, c.Counter("a", 1)) // emitting still works
}

func TestTheClientReconnectsAfterTheAgentSocketIsReCreated(t *testing.T) {
	dir := shortTempDir(t)
	path := dir + "/agent.sock"
	r := listenUnixgram(t, path)
	c := newTestClient(t, Options{Address: "unixgram://" + path})
	must(t, c.Store("first", 1))
	must(t, c.Flush())
	r.messages(1)

	// The agent restarts between two flushes: the connected socket now
	// points at a closed peer, and a new socket sits at the same path.
	r.close()
	r = listenUnixgram(t, path)
	must(t, c.Store("second", 2))
	must(t, c.Flush())
	if got := r.messages(1); got[0].name != "second" {
		t.Errorf("got %v", got)
	}
	if c.SendErrors() != 0 {
		t.Errorf("the first datagram after a restart was lost: %d send errors", c.SendErrors())
	}

	// The agent is down for a flush: that datagram is lost and counted,
	// and the client connects again once the socket is back.
	r.close()
	must(t, c.Store("lost", 3))
	if err := c.Flush(); err == nil {
		t.Error("Flush with the agent down returned nil")
	}
	if c.SendErrors() != 1 {
		t.Errorf("send errors %d, want 1", c.SendErrors())
	}
	r = listenUnixgram(t, path)
	must(t, c.Store("third", 4))
	must(t, c.Flush())
	if got := r.messages(1); got[0].name != "third" {
		t.Errorf("got %v", got)
	}
	r.quiet()
}

func TestAnAgentThatStopsReadingCostsAFlushOneTimeoutNotOnePerDatagram(t *testing.T) {
	r := newReceiver(t) // never read until the end: its queue fills up
	c := newTestClient(t, Options{Address: r.address(), BufferSize: 20000})
	c.tr.timeout = 100 * time.Millisecond
	tag := T("payload", strings.Repeat("x", 150))
	for i := 0; i < 10000; i++ { // about 56 datagrams of 32 KiB
		must(t, c.Timer("t", 1, tag))
	}
	start := time.Now()
	err := c.Flush()
	elapsed := time.Since(start)
	if !isTimeout(err) {
		t.Fatalf("Flush returned %v, want a timeout", err)
	}
	// Without giving up after the first timeout this takes 100 ms per
	// datagram that does not fit in the queue: seconds.
	if elapsed > time.Second {
		t.Errorf("Flush took %v", elapsed)
	}
	delivered := 0
	for d := r.datagram(10 * time.Millisecond); d != nil; d = r.datagram(10 * time.Millisecond) {
		delivered++
	}
	msgLen := len(appendRawMessage(nil, "timer", "t", "1", tag.Key+"="+tag.Value, ""))
	perDatagram := (maxDatagram - 1 - bunchHeaderLen) / msgLen
	total := (10000 + perDatagram - 1) / perDatagram
	if delivered == 0 || c.SendErrors() == 0 || delivered+int(c.SendErrors()) != total {
		t.Errorf("delivered %d datagrams, %d send errors: want the %d datagrams split between them", delivered, c.SendErrors(), total)
	}
}

func TestUDPAddressesSendOverUDP(t *testing.T) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	must(t, err)
	defer conn.Close()
	c := newTestClient(t, Options{Address: "udp://" + conn.LocalAddr().String()})
	must(t, c.Counter("via.udp", 2, T("t", "1")))
	must(t, c.Timer("via.udp.t", 3))
	must(t, c.Flush())
	buf := make([]byte, 65536)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(buf)
	must(t, err)
	ms, bunch, err := decodeDatagram(buf[:n])
	must(t, err)
	want := []msg{{"counter", "via.udp", "2", "t=1", ""}, {"timer", "via.udp.t", "3", "", ""}}
	if !bunch || !reflect.DeepEqual(ms, want) {
		t.Errorf("got %v", ms)
	}
}

func TestUnixseqAddressesSendOnePacketPerDatagram(t *testing.T) {
	path := shortTempDir(t) + "/seq.sock"
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	must(t, err)
	defer l.Close()
	c := newTestClient(t, Options{Address: "unixseq://" + path})
	must(t, c.Store("one", 1))
	must(t, c.Flush())
	must(t, c.Store("two", 2))
	must(t, c.Store("three", 3))
	must(t, c.Flush())
	l.SetDeadline(time.Now().Add(5 * time.Second))
	conn, err := l.AcceptUnix()
	must(t, err)
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 65536)
	var got [][]msg
	for i := 0; i < 2; i++ {
		n, err := conn.Read(buf)
		must(t, err)
		ms, _, err := decodeDatagram(buf[:n])
		must(t, err)
		got = append(got, ms)
	}
	if len(got[0]) != 1 || got[0][0].name != "one" || len(got[1]) != 2 || got[1][1].name != "three" {
		t.Errorf("packets %v", got)
	}
}

func TestAddressesAreParsedByScheme(t *testing.T) {
	for addr, want := range map[string][2]string{
		"unixgram:///tmp/metric.sock": {"unixgram", "/tmp/metric.sock"},
		"unixseq:///run/sonde.sock":   {"unixpacket", "/run/sonde.sock"},
		"udp://127.0.0.1:9123":        {"udp", "127.0.0.1:9123"},
		"udp://[::1]:9123":            {"udp", "[::1]:9123"},
		"udp://localhost:9123":        {"udp", "localhost:9123"},
	} {
		network, target, err := parseAddress(addr)
		if err != nil || network != want[0] || target != want[1] {
			t.Errorf("%s: %s %s %v", addr, network, target, err)
		}
	}
}

func TestTheDefaultAddressIsTheEnvironmentThenTheSocketFileThenUDP(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "SONDE_ADDRESS" {
				return v
			}
			return ""
		}
	}
	exists := func(e bool) func(string) bool {
		return func(p string) bool { return e && p == "/tmp/metric.sock" }
	}
	for _, c := range []struct {
		given, env string
		sock       bool
		want       string
	}{
		{"udp://10.0.0.1:1", "udp://10.0.0.2:2", true, "udp://10.0.0.1:1"},
		{"", "udp://10.0.0.2:2", true, "udp://10.0.0.2:2"},
		{"", "", true, "unixgram:///tmp/metric.sock"},
		{"", "", false, "udp://127.0.0.1:9123"},
	} {
		if got := resolveAddress(c.given, env(c.env), exists(c.sock)); got != c.want {
			t.Errorf("%+v: got %s", c, got)
		}
	}
}

func TestNewUsesSONDE_ADDRESSWhenNoAddressIsGiven(t *testing.T) {
	r := newReceiver(t)
	t.Setenv("SONDE_ADDRESS", r.address())
	c := newTestClient(t, Options{})
	if c.Address() != r.address() {
		t.Fatalf("address %s", c.Address())
	}
	must(t, c.Store("a", 1))
	must(t, c.Flush())
	r.messages(1)
}

func TestTimeRecordsTheElapsedMilliseconds(t *testing.T) {
	r := newReceiver(t)
	c := newTestClient(t, Options{Address: r.address()})
	stop := c.Time("block", T("k", "v"))
	time.Sleep(30 * time.Millisecond)
	must(t, stop())
	must(t, c.TimeFunc("fn", func() { time.Sleep(20 * time.Millisecond) }))
	must(t, c.Flush())
	got := r.messages(2)
	for i, min := range []float64{30, 20} {
		v, err := strconv.ParseFloat(got[i].value, 64)
		// A scheduler can stretch a sleep, not shorten it; 10 s means the
		// unit is wrong (microseconds or nanoseconds).
		if err != nil || got[i].typ != "timer" || v < min || v > 10000 {
			t.Errorf("%v: want a timer of at least %v ms", got[i], min)
		}
	}
	if got[0].name != "block" || got[0].tags != "k=v" || got[1].name != "fn" {
		t.Errorf("got %v", got)
	}
	if err := c.Time("bad name")(); !errors.Is(err, ErrInvalidName) {
		t.Errorf("got %v", err)
	}
}

func TestConcurrentEmitsAreAllSentAndSummed(t *testing.T) {
	r := newReceiver(t)
	// The default interval: the flusher runs while the goroutines emit.
	c, err := New(Options{Address: r.address(), BufferSize: 64})
	must(t, err)
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := c.Counter("hits", 1, T("w", strconv.Itoa(w%2))); err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	must(t, c.Close())
	total := map[string]float64{}
	for {
		d := r.datagram(100 * time.Millisecond)
		if d == nil {
			break
		}
		ms, _, err := decodeDatagram(d)
		must(t, err)
		for _, m := range ms {
			v, _ := strconv.ParseFloat(m.value, 64)
			total[m.tags] += v
		}
	}
	// Counters always fit (two series, 64 slots), so nothing is dropped.
	if c.Dropped() != 0 || total["w=0"] != workers/2*each || total["w=1"] != workers/2*each {
		t.Errorf("totals %v (keys %v), dropped %d", total, sortedKeys(total), c.Dropped())
	}
}

package sonde

// End-to-end: the real agent binary, started with a config of our own,
// receiving from this SDK over every transport (sdk/SPEC.md, End-to-end
// test). The harness mirrors crates/sonde/tests/common/mod.rs.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const e2eWait = 20 * time.Second

// agentBinary returns the sonde binary to test against, or skips the test
// when there is none (fails instead when SONDE_REQUIRE_E2E=1).
func agentBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("SONDE_BIN")
	if bin == "" {
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			t.Fatal(err)
		}
		bin = filepath.Join(root, "target", "debug", "sonde")
	}
	if _, err := os.Stat(bin); err != nil {
		msg := fmt.Sprintf("no sonde binary at %s (build it with `cargo build` at the repo root, or set SONDE_BIN): %v", bin, err)
		if os.Getenv("SONDE_REQUIRE_E2E") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// waitFor polls cond until it returns true, failing the test at the deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", e2eWait, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort returns a loopback port that was free for both UDP and TCP.
func freePort(t *testing.T) int {
	t.Helper()
	for {
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		port := u.LocalAddr().(*net.UDPAddr).Port
		l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		u.Close()
		if err == nil {
			l.Close()
			return port
		}
	}
}

type agent struct {
	t       *testing.T
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	admin   int
	out     string
	stderr  string
}

// startAgent runs the binary on a config with the given receivers, an
// hour-long window (nothing is written until SIGTERM), a file sink and an
// admin listener, and waits until /health answers.
func startAgent(t *testing.T, bin, dir, receivers string) *agent {
	t.Helper()
	a := &agent{
		t:      t,
		exited: make(chan struct{}),
		admin:  freePort(t),
		out:    filepath.Join(dir, "points.jsonl"),
		stderr: filepath.Join(dir, "stderr.log"),
	}
	config := fmt.Sprintf("[agent]\ninterval = \"1h\"\nadmin_listen = \"127.0.0.1:%d\"\n\n%s\n[[sinks]]\ntype = \"file\"\npath = %q\n",
		a.admin, receivers, a.out)
	cfg := filepath.Join(dir, "sonde.toml")
	must(t, os.WriteFile(cfg, []byte(config), 0o644))
	errFile, err := os.Create(a.stderr)
	must(t, err)
	defer errFile.Close()
	a.cmd = exec.Command(bin, "run", "--config", cfg)
	a.cmd.Stderr = errFile
	must(t, a.cmd.Start())
	go func() {
		a.waitErr = a.cmd.Wait()
		close(a.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-a.exited:
		default:
			a.cmd.Process.Kill()
			<-a.exited
		}
	})
	waitFor(t, "sonde /health", func() bool {
		select {
		case <-a.exited:
			t.Fatalf("sonde exited early (%v): %s", a.waitErr, a.stderrText())
		default:
		}
		body, ok := a.get("/health")
		return ok && strings.HasPrefix(body, "ok")
	})
	return a
}

func (a *agent) stderrText() string {
	b, _ := os.ReadFile(a.stderr)
	return string(b)
}

// get fetches a path from the admin listener; ok is false until it answers 200.
func (a *agent) get(path string) (string, bool) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d%s", a.admin, path))
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err == nil && resp.StatusCode == http.StatusOK
}

// metric returns the value of one exact series of the agent's /metrics.
func (a *agent) metric(series string) float64 {
	text, ok := a.get("/metrics")
	if !ok {
		return -1
	}
	for _, line := range strings.Split(text, "\n") {
		if rest, found := strings.CutPrefix(line, series+" "); found {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// stop sends SIGTERM (the agent flushes its open window) and waits for a
// clean exit.
func (a *agent) stop() {
	a.t.Helper()
	must(a.t, a.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-a.exited:
	case <-time.After(e2eWait):
		a.t.Fatalf("sonde did not exit within %v of SIGTERM", e2eWait)
	}
	if a.waitErr != nil {
		a.t.Fatalf("sonde exited with %v: %s", a.waitErr, a.stderrText())
	}
}

type point struct {
	Name      string            `json:"name"`
	Tags      map[string]string `json:"tags"`
	Value     float64           `json:"value"`
	Timestamp int64             `json:"timestamp"`
}

// points reads the file sink's JSON lines.
func (a *agent) points() []point {
	a.t.Helper()
	raw, err := os.ReadFile(a.out)
	must(a.t, err)
	var out []point
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var p point
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			a.t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		out = append(out, p)
	}
	return out
}

func named(points []point, name string) []point {
	var out []point
	for _, p := range points {
		if p.Name == name {
			out = append(out, p)
		}
	}
	return out
}

// emitEveryType sends one series of every type through c and returns the
// number of messages the agent will count as points. It flushes by hand
// (the client's interval is an hour) so that count is exact.
func emitEveryType(t *testing.T, c *Client) int {
	host := T("host", "e2e")
	for i := 0; i < 3; i++ {
		must(t, c.Counter("hits", 1, host)) // summed: one message
	}
	must(t, c.Flush())
	must(t, c.Counter("hits", 2, host)) // a second flush: the total runs on
	for _, v := range []float64{10, 20, 30} {
		must(t, c.Timer("lat", v, host))
	}
	for _, v := range []float64{1, 2, 300} {
		must(t, c.Histogram("size", v))
	}
	must(t, c.Store("depth", 5))
	must(t, c.Store("depth", 7)) // replaces the pending 5: one message
	must(t, c.TsStore("daily", 42, 1763800200))
	must(t, c.Meter("m", 2))
	must(t, c.Meter("m", 3))
	must(t, c.RateCounter("rc", 10))
	must(t, c.RateCounter("rc", 20)) // summed with the one before
	must(t, c.TimeFunc("fn", func() {}))
	must(t, c.Flush())
	return 2 + 3 + 3 + 1 + 1 + 2 + 1 + 1
}

func TestEveryTypeReachesTheRealAgentOverEveryTransport(t *testing.T) {
	bin := agentBinary(t)
	dir := shortTempDir(t)
	udpPort := freePort(t)
	gram := "unixgram://" + filepath.Join(dir, "gram.sock")
	seq := "unixseq://" + filepath.Join(dir, "seq.sock")
	udp := fmt.Sprintf("udp://127.0.0.1:%d", udpPort)
	var receivers strings.Builder
	for _, addr := range []string{gram, seq, udp} {
		fmt.Fprintf(&receivers, "[[receivers]]\nprotocol = \"msgpack\"\nlisten = %q\n\n", addr)
	}
	started := time.Now().Unix()
	a := startAgent(t, bin, dir, receivers.String())

	transports := []struct{ address, prefix string }{
		{gram, "e2e.gram"},
		{udp, "e2e.udp"},
		{seq, "e2e.seq"},
	}
	for _, tr := range transports {
		c := newTestClient(t, Options{Address: tr.address, Prefix: tr.prefix})
		sent := emitEveryType(t, c)
		series := fmt.Sprintf("sonde_receiver_points_total{receiver=%q,protocol=\"msgpack\"}", tr.address)
		waitFor(t, fmt.Sprintf("%d points at %s", sent, tr.address), func() bool {
			return a.metric(series) >= float64(sent)
		})
		if got := a.metric(series); got != float64(sent) {
			t.Errorf("%s: agent counted %v points, want %d", tr.address, got, sent)
		}
		must(t, c.Close())
		if c.Dropped() != 0 || c.SendErrors() != 0 {
			t.Errorf("%s: dropped %d, send errors %d", tr.address, c.Dropped(), c.SendErrors())
		}
	}
	a.stop()
	// The open window is the run's first: stamped with the time the agent
	// started receiving, rounded up to the second (or the hour, should one
	// have begun since).
	stopped := time.Now().Unix() + 1

	points := a.points()
	for _, tr := range transports {
		p := tr.prefix
		// one returns the single point of a name; an hour window means
		// every name has exactly one, unless the test straddles the hour.
		one := func(name string) point {
			t.Helper()
			got := named(points, p+"."+name)
			if len(got) != 1 {
				t.Fatalf("%s.%s: %d points: %+v", p, name, len(got), got)
			}
			return got[0]
		}
		hits := one("hits")
		if hits.Value != 5 || hits.Tags["host"] != "e2e" || len(hits.Tags) != 1 {
			t.Errorf("%s.hits: %+v, want running total 5 with host=e2e", p, hits)
		}
		if hits.Timestamp < started || hits.Timestamp > stopped {
			t.Errorf("%s.hits at %d: want the agent's start, within [%d, %d]", p, hits.Timestamp, started, stopped)
		}
		for name, want := range map[string]float64{
			"lat.counter": 3, "lat.max": 30, "lat.min": 10, "lat.sum": 60,
			"size.count": 3, "size.sum": 303,
			"depth":      7,
			"m":          5,
			"fn.counter": 1,
		} {
			if got := one(name).Value; got != want {
				t.Errorf("%s.%s = %v, want %v", p, name, got, want)
			}
		}
		daily := one("daily")
		if daily.Value != 42 || daily.Timestamp != 1763800200 {
			t.Errorf("%s.daily: %+v, want 42 at 1763800200", p, daily)
		}
		for _, name := range []string{"m.rate", "rc"} {
			if v := one(name).Value; !(v > 0) {
				t.Errorf("%s.%s = %v, want > 0", p, name, v)
			}
		}
	}
}

// A hot loop of 20,000 increments over 500 series is twice the default
// buffer of 10,000 points but only 500 series: every increment must be
// summed into its series' entry (SPEC.md, Client behaviour). The hour-long
// interval sends everything in Close, one message per series, so the
// agent's count of received messages says when all of them have arrived.
func TestAHotLoopOfCountersOver500SeriesLosesNothing(t *testing.T) {
	const sent, series = 20000, 500
	bin := agentBinary(t)
	dir := shortTempDir(t)
	gram := "unixgram://" + filepath.Join(dir, "gram.sock")
	a := startAgent(t, bin, dir, fmt.Sprintf("[[receivers]]\nprotocol = \"msgpack\"\nlisten = %q\n", gram))

	c := newTestClient(t, Options{Address: gram, Prefix: "burst"})
	names := make([]string, series)
	for i := range names {
		names[i] = fmt.Sprintf("hits.%d", i)
	}
	host := T("host", "a")
	for i := 0; i < sent; i++ {
		must(t, c.Counter(names[i%series], 1, host))
	}
	must(t, c.Close())
	if c.SendErrors() != 0 {
		t.Errorf("send errors: %d", c.SendErrors())
	}
	received := fmt.Sprintf("sonde_receiver_points_total{receiver=%q,protocol=\"msgpack\"}", gram)
	waitFor(t, fmt.Sprintf("%d messages at the agent", series), func() bool {
		return a.metric(received) >= series
	})
	text, _ := a.get("/metrics")
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "sonde_receiver_dropped_total{") && !strings.HasSuffix(line, " 0") {
			t.Errorf("the agent dropped input: %s", line)
		}
	}
	a.stop()

	points := a.points()
	total := 0.0
	for _, name := range names {
		// A counter reports its running total: the last point of the series.
		got := named(points, "burst."+name)
		if len(got) == 0 {
			t.Fatalf("no point for burst.%s", name)
		}
		total += got[len(got)-1].Value
	}
	dropped := c.Dropped()
	if total+float64(dropped) != sent {
		t.Errorf("received %v plus dropped %d, want %d sent", total, dropped, sent)
	}
	if dropped != 0 {
		t.Errorf("dropped %d, want 0", dropped)
	}
}

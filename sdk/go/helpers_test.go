package sonde

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// msg is one decoded message: the six fields after "emit" is checked.
type msg struct {
	typ, name, value, tags, ts string
}

func (m msg) String() string {
	return fmt.Sprintf("[%s %s %s %q %q]", m.typ, m.name, m.value, m.tags, m.ts)
}

// decodeDatagram is a strict reader of what the SDK may send: one fixarray
// message of six strs, or an array16 bunch of them. It is independent of
// the encoder (it parses rather than re-encodes), so encoder bugs show up.
func decodeDatagram(d []byte) ([]msg, bool, error) {
	if len(d) == 0 {
		return nil, false, errors.New("empty datagram")
	}
	count, bunch := 1, false
	if d[0] == 0xdc {
		if len(d) < 3 {
			return nil, false, errors.New("short bunch header")
		}
		count, bunch = int(binary.BigEndian.Uint16(d[1:3])), true
		d = d[3:]
	}
	var out []msg
	for i := 0; i < count; i++ {
		if len(d) == 0 || d[0] != 0x96 {
			return nil, bunch, fmt.Errorf("message %d: want fixarray 6, got % x", i, d[:min(len(d), 4)])
		}
		d = d[1:]
		var f [6]string
		for j := range f {
			s, rest, err := readStr(d)
			if err != nil {
				return nil, bunch, fmt.Errorf("message %d field %d: %w", i, j, err)
			}
			f[j], d = s, rest
		}
		if f[0] != "emit" {
			return nil, bunch, fmt.Errorf("message %d: command %q", i, f[0])
		}
		out = append(out, msg{f[1], f[2], f[3], f[4], f[5]})
	}
	if len(d) != 0 {
		return nil, bunch, fmt.Errorf("%d trailing bytes", len(d))
	}
	return out, bunch, nil
}

// readStr reads one str and insists it used the smallest header.
func readStr(d []byte) (string, []byte, error) {
	if len(d) == 0 {
		return "", nil, errors.New("truncated")
	}
	var n, h int
	switch b := d[0]; {
	case b&0xe0 == 0xa0:
		n, h = int(b&0x1f), 1
	case b == 0xd9 && len(d) >= 2:
		n, h = int(d[1]), 2
	case b == 0xda && len(d) >= 3:
		n, h = int(binary.BigEndian.Uint16(d[1:])), 3
	case b == 0xdb && len(d) >= 5:
		n, h = int(binary.BigEndian.Uint32(d[1:])), 5
	default:
		return "", nil, fmt.Errorf("not a str: %#x", b)
	}
	if h != strHeaderLen(n) {
		return "", nil, fmt.Errorf("str of %d bytes with a %d-byte header", n, h)
	}
	if len(d) < h+n {
		return "", nil, errors.New("truncated str")
	}
	return string(d[h : h+n]), d[h+n:], nil
}

// shortTempDir returns a temp dir with a short path: unix socket paths are
// limited to 107 bytes, and t.TempDir embeds the (long) test name.
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sonde-go")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// receiver is a unixgram socket the test owns, standing in for the agent.
type receiver struct {
	t    testing.TB
	path string
	conn *net.UnixConn
}

func listenUnixgram(t testing.TB, path string) *receiver {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{t: t, path: path, conn: conn}
	t.Cleanup(func() { r.close() })
	return r
}

func newReceiver(t testing.TB) *receiver {
	return listenUnixgram(t, filepath.Join(shortTempDir(t), "r.sock"))
}

func (r *receiver) address() string { return "unixgram://" + r.path }

// close closes the socket and removes its file, as an exiting agent does.
func (r *receiver) close() {
	if r.conn != nil {
		r.conn.Close()
		os.Remove(r.path)
		r.conn = nil
	}
}

// datagram returns the next datagram, or nil once timeout passes.
func (r *receiver) datagram(timeout time.Duration) []byte {
	r.t.Helper()
	buf := make([]byte, 1<<16)
	r.conn.SetReadDeadline(time.Now().Add(timeout))
	n, err := r.conn.Read(buf)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		r.t.Fatalf("read: %v", err)
	}
	return buf[:n]
}

// messages reads datagrams until want messages have arrived, failing the
// test after a 5 s deadline.
func (r *receiver) messages(want int) []msg {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	var out []msg
	for len(out) < want {
		left := time.Until(deadline)
		if left <= 0 {
			r.t.Fatalf("got %d messages, want %d: %v", len(out), want, out)
		}
		d := r.datagram(left)
		if d == nil {
			continue
		}
		ms, _, err := decodeDatagram(d)
		if err != nil {
			r.t.Fatalf("bad datagram % x: %v", d, err)
		}
		out = append(out, ms...)
	}
	return out
}

// quiet fails the test if a datagram arrives within a short wait.
func (r *receiver) quiet() {
	r.t.Helper()
	if d := r.datagram(50 * time.Millisecond); d != nil {
		r.t.Fatalf("unexpected datagram % x", d)
	}
}

// newTestClient returns a client whose flusher only runs when a test says
// so (Flush, Close, or a full buffer).
func newTestClient(t testing.TB, opts Options) *Client {
	t.Helper()
	if opts.FlushInterval == 0 {
		opts.FlushInterval = time.Hour
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

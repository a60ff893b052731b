package sonde

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// Address defaults (SPEC.md, Transports and addresses).
const (
	// DefaultSocket is the agent's default unix datagram socket.
	DefaultSocket = "/tmp/metric.sock"
	// DefaultUDPAddress is the agent's default msgpack UDP address.
	DefaultUDPAddress = "udp://127.0.0.1:9123"
	// AddressEnv names the environment variable that overrides the default
	// address (but not an address given in Options).
	AddressEnv = "SONDE_ADDRESS"
)

// defaultSendTimeout bounds one datagram write. A unix datagram socket
// blocks the writer while the agent's receive queue is full; the flusher
// must not hang behind a stuck agent, so after this long the datagram
// counts as a send error and the flusher moves on.
const defaultSendTimeout = time.Second

// resolveAddress applies the default rule to an address from Options:
// given > $SONDE_ADDRESS > unixgram:///tmp/metric.sock if that file exists >
// udp://127.0.0.1:9123.
func resolveAddress(given string, getenv func(string) string, exists func(string) bool) string {
	if given != "" {
		return given
	}
	if env := getenv(AddressEnv); env != "" {
		return env
	}
	if exists(DefaultSocket) {
		return "unixgram://" + DefaultSocket
	}
	return DefaultUDPAddress
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// parseAddress splits an address into a net.Dial network and target.
func parseAddress(address string) (network, target string, err error) {
	scheme, rest, ok := strings.Cut(address, "://")
	if !ok {
		return "", "", fmt.Errorf("%w %q: want unixgram:///path, unixseq:///path or udp://host:port", ErrInvalidAddress, address)
	}
	switch scheme {
	case "unixgram":
		network = "unixgram"
	case "unixseq":
		// SOCK_SEQPACKET is "unixpacket" in Go's net package.
		network = "unixpacket"
	case "udp":
		if _, _, err := net.SplitHostPort(rest); err != nil {
			return "", "", fmt.Errorf("%w %q: %v", ErrInvalidAddress, address, err)
		}
		return "udp", rest, nil
	default:
		return "", "", fmt.Errorf("%w %q: unknown scheme %q (want unixgram, unixseq or udp)", ErrInvalidAddress, address, scheme)
	}
	if rest == "" {
		return "", "", fmt.Errorf("%w %q: no socket path", ErrInvalidAddress, address)
	}
	return network, rest, nil
}

// transport owns the connection to the agent. Only the flush path uses it,
// one flush at a time, so it needs no lock of its own.
//
// The connection is opened lazily and dropped after any error; the next
// send dials again. That is what picks up a restarted agent: a unix socket
// re-created at the same path is a new socket that an old connection can
// never reach, and a seqpacket connection dies with the agent's process.
type transport struct {
	network, target string
	timeout         time.Duration
	conn            net.Conn
}

// send writes one datagram. On a failed write it reconnects and tries once
// more, so the datagram that discovers a restarted agent is not lost; the
// returned error means the datagram was not delivered.
func (t *transport) send(b []byte) error {
	err := t.write(b)
	if err == nil {
		return nil
	}
	if isTimeout(err) {
		// The agent is there but not reading: retrying would only wait again.
		return err
	}
	return t.write(b)
}

func (t *transport) write(b []byte) error {
	if t.conn == nil {
		conn, err := net.DialTimeout(t.network, t.target, t.timeout)
		if err != nil {
			return err
		}
		t.conn = conn
	}
	if err := t.conn.SetWriteDeadline(time.Now().Add(t.timeout)); err != nil {
		t.close()
		return err
	}
	n, err := t.conn.Write(b)
	if err == nil && n != len(b) {
		err = fmt.Errorf("sonde: short write of %d of %d bytes", n, len(b))
	}
	if err != nil {
		t.close()
	}
	return err
}

func (t *transport) close() error {
	if t.conn == nil {
		return nil
	}
	err := t.conn.Close()
	t.conn = nil
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

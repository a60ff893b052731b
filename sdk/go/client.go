package sonde

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for Options fields left at their zero value.
const (
	// DefaultBufferSize is how many points wait for the flusher before new
	// ones are dropped.
	DefaultBufferSize = 10000
	// DefaultFlushInterval is how often the background flusher sends.
	DefaultFlushInterval = 200 * time.Millisecond
)

// maxPendingBytes bounds the memory one buffer of pending points may use
// for names and tags, whatever BufferSize says: 10,000 points of 400-byte
// series fit, and a caller emitting 30 KiB names cannot make a client hold
// hundreds of megabytes. Past it, points are dropped and counted like a full
// buffer.
const maxPendingBytes = 4 << 20

// Tag is one key=value pair attached to a point.
type Tag struct {
	Key, Value string
}

// T is shorthand for Tag{Key: key, Value: value}.
func T(key, value string) Tag { return Tag{Key: key, Value: value} }

// Options configures a Client. Every field is optional.
type Options struct {
	// Address of the agent: "unixgram:///path", "unixseq:///path" or
	// "udp://host:port". Empty means $SONDE_ADDRESS if set, else
	// unixgram:///tmp/metric.sock if that file exists, else
	// udp://127.0.0.1:9123 (decided once, in New).
	Address string
	// Prefix is joined to every name with a dot ("web" + "hits" sends
	// "web.hits"). Empty sends names as given.
	Prefix string
	// BufferSize is the number of entries held between flushes: one per
	// pending counter, rate counter or store series, one per other emit.
	// When it is reached, new points are dropped and counted (see
	// Client.Dropped) and the flusher is woken. Default 10,000.
	BufferSize int
	// FlushInterval is how often the background flusher sends. Default
	// 200 ms.
	FlushInterval time.Duration
}

// Client sends points to a sonde agent. It is safe for concurrent use.
//
// # Design
//
// An emit validates its input, then, under a mutex, copies the encoded
// name and tags into the client's current batch: one append into a byte
// arena and one into a slice of fixed-size entries, both of which keep
// their capacity from flush to flush, so a warm client allocates nothing
// per point. The mutex is held for a few copies and never across I/O.
//
// The flusher swaps the current batch for an empty one (double
// buffering), and encodes and sends the full one without the mutex, so
// emits carry on while it writes to the socket.
//
// counter and rate_counter emits are summed into their series' first entry
// of the batch as they arrive, and a store replaces that entry's value, so
// a hot loop over fewer series than BufferSize never fills the buffer. The
// entry is found through a map keyed by the encoded kind, name and tags. A lookup with a []byte-to-string conversion does not
// allocate, and keys are kept across flushes (each slot records which batch
// generation it belongs to), so only a series new to the client allocates.
// The map is cleared when it holds more series than BufferSize, which
// bounds its memory at the cost of re-learning keys after a burst of new
// series.
//
// # Shutdown
//
// Close stops the flusher, sends what is pending and closes the socket;
// emits after Close return ErrClosed.
type Client struct {
	prefix   string
	capacity int
	interval time.Duration
	address  string

	// mu guards the fields up to sendMu.
	mu     sync.Mutex
	closed bool
	active *batch // receives emits
	gen    uint64 // counts batch swaps; tells current sum slots from stale ones
	sums   map[string]int32
	slots  []sumSlot

	// sendMu serialises flushes; it guards the fields below it and the
	// batch not in active.
	sendMu sync.Mutex
	spare  *batch
	tr     transport
	dgram  []byte

	dropped    atomic.Uint64
	sendErrors atomic.Uint64

	wake    chan struct{}
	done    chan struct{}
	stopped chan struct{}
}

// batch is the pending points between two flushes.
type batch struct {
	entries []entry
	// arena holds, per entry, the kind byte followed by the NAME and TAGS
	// strs exactly as they go on the wire; the kind byte makes the bytes a
	// complete key for summing.
	arena []byte
}

// entry is one pending message. Its NAME str is arena[start:mid] and its
// TAGS str arena[mid:end].
type entry struct {
	value           float64
	ts              int64
	start, mid, end uint32
	kind            metricKind
}

// sumSlot says where a summable series sits in the batch of generation gen.
type sumSlot struct {
	gen uint64
	idx int32
}

// New returns a client for the agent at opts.Address and starts its
// background flusher. It does not connect: the socket is opened on the
// first send, so a client can start before the agent does.
//
// # Errors
//
// ErrInvalidAddress for an address that is not unixgram://, unixseq:// or
// udp:// with a target; ErrInvalidPrefix for a prefix with '|', '=', a space,
// '\n' or '\r'; a plain error for a negative BufferSize or FlushInterval.
func New(opts Options) (*Client, error) {
	address := resolveAddress(opts.Address, os.Getenv, fileExists)
	network, target, err := parseAddress(address)
	if err != nil {
		return nil, err
	}
	if err := checkPrefix(opts.Prefix); err != nil {
		return nil, err
	}
	capacity := opts.BufferSize
	switch {
	case capacity < 0:
		return nil, fmt.Errorf("sonde: BufferSize %d is negative", capacity)
	case capacity == 0:
		capacity = DefaultBufferSize
	}
	interval := opts.FlushInterval
	switch {
	case interval < 0:
		return nil, fmt.Errorf("sonde: FlushInterval %v is negative", interval)
	case interval == 0:
		interval = DefaultFlushInterval
	}
	c := &Client{
		prefix:   opts.Prefix,
		capacity: capacity,
		interval: interval,
		address:  address,
		active:   &batch{},
		spare:    &batch{},
		sums:     make(map[string]int32),
		tr:       transport{network: network, target: target, timeout: defaultSendTimeout},
		// Room for a full datagram plus the largest message that may
		// overflow it before being moved to the next one, so this buffer
		// never grows.
		dgram:   make([]byte, 0, maxDatagram+messageOverhead+maxSeriesBytes),
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go c.run()
	return c, nil
}

// Address returns the address the client sends to, after the default rule.
func (c *Client) Address() string { return c.address }

// Counter adds value to a counter: the agent reports its running total.
func (c *Client) Counter(name string, value float64, tags ...Tag) error {
	return c.emit(kindCounter, name, value, 0, tags)
}

// RateCounter adds value to a rate counter: the agent reports the window's
// sum per second.
func (c *Client) RateCounter(name string, value float64, tags ...Tag) error {
	return c.emit(kindRateCounter, name, value, 0, tags)
}

// Meter adds value to a meter: the agent reports both the running total and
// the window's rate (NAME.rate).
func (c *Client) Meter(name string, value float64, tags ...Tag) error {
	return c.emit(kindMeter, name, value, 0, tags)
}

// Timer records one duration sample, in milliseconds by convention: the
// agent reports min, max, avg, sum, count and percentiles.
func (c *Client) Timer(name string, value float64, tags ...Tag) error {
	return c.emit(kindTimer, name, value, 0, tags)
}

// Store sets a gauge: the agent reports the last value of the window.
func (c *Client) Store(name string, value float64, tags ...Tag) error {
	return c.emit(kindStore, name, value, 0, tags)
}

// TsStore sets a gauge at the given unix time in seconds: the agent
// reports the last value per timestamp, at that timestamp.
func (c *Client) TsStore(name string, value float64, ts int64, tags ...Tag) error {
	return c.emit(kindTsStore, name, value, ts, tags)
}

// Histogram records one sample into the agent's configured buckets.
func (c *Client) Histogram(name string, value float64, tags ...Tag) error {
	return c.emit(kindHistogram, name, value, 0, tags)
}

// Time starts timing and returns the function that records the elapsed
// milliseconds as a Timer sample:
//
//	defer client.Time("db.query", sonde.T("db", "main"))()
//
// The returned function reports Timer's error, which a bare defer discards.
func (c *Client) Time(name string, tags ...Tag) func() error {
	start := time.Now()
	return func() error { return c.Timer(name, millis(time.Since(start)), tags...) }
}

// TimeFunc runs f and records how long it took, in milliseconds, as a
// Timer sample. If f panics, nothing is recorded.
func (c *Client) TimeFunc(name string, f func(), tags ...Tag) error {
	start := time.Now()
	f()
	return c.Timer(name, millis(time.Since(start)), tags...)
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Dropped returns how many points were dropped because the buffer was full.
func (c *Client) Dropped() uint64 { return c.dropped.Load() }

// SendErrors returns how many datagrams could not be delivered (the
// connection failed and a reconnect did not help).
func (c *Client) SendErrors() uint64 { return c.sendErrors.Load() }

// Flush sends every pending point now and returns when they are written to
// the socket. Delivery failures are counted in SendErrors; the first one of
// this flush is also returned. After Close it returns ErrClosed.
func (c *Client) Flush() error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return c.flush()
}

// Close stops the background flusher, sends what is pending and closes the
// connection. Later emits and Flush return ErrClosed; closing again
// returns nil.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	close(c.done)
	<-c.stopped
	err := c.flush()
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return errors.Join(err, c.tr.close())
}

// emit validates a point and adds it to the current batch.
func (c *Client) emit(kind metricKind, name string, value float64, ts int64, tags []Tag) error {
	if err := checkValue(value); err != nil {
		return err
	}
	if err := checkName(name); err != nil {
		return err
	}
	nameLen, tagsLen := len(name), 0
	if c.prefix != "" {
		nameLen += len(c.prefix) + 1
	}
	for i := range tags {
		if err := checkTag(tags[i]); err != nil {
			return err
		}
		if i > 0 {
			tagsLen++ // the '|' before this tag
		}
		tagsLen += len(tags[i].Key) + 1 + len(tags[i].Value)
	}
	seriesLen := strHeaderLen(nameLen) + nameLen + strHeaderLen(tagsLen) + tagsLen
	if seriesLen > maxSeriesBytes {
		return tooLarge(seriesLen)
	}

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	b := c.active
	keyAt := len(b.arena)
	a := append(b.arena, byte(kind))
	a = appendStrHeader(a, nameLen)
	if c.prefix != "" {
		a = append(a, c.prefix...)
		a = append(a, '.')
	}
	a = append(a, name...)
	mid := len(a)
	a = appendStrHeader(a, tagsLen)
	for i := range tags {
		if i > 0 {
			a = append(a, '|')
		}
		a = append(a, tags[i].Key...)
		a = append(a, '=')
		a = append(a, tags[i].Value...)
	}
	b.arena = a

	slot := int32(-1)
	if kind.merges() {
		var ok bool
		if slot, ok = c.sums[string(a[keyAt:])]; ok {
			if s := &c.slots[slot]; s.gen == c.gen {
				e := &b.entries[s.idx]
				b.arena = a[:keyAt]
				sum := e.value + value
				if kind == kindStore {
					sum = value // the last value wins
				} else if math.IsInf(sum, 0) {
					// The agent would drop the whole sum as a bad value.
					c.mu.Unlock()
					return overflow(e.value, value)
				}
				e.value = sum
				c.mu.Unlock()
				return nil
			}
		} else {
			slot = -1
		}
	}
	if len(b.entries) >= c.capacity || len(a) > maxPendingBytes {
		b.arena = a[:keyAt]
		c.mu.Unlock()
		c.dropped.Add(1)
		c.signal()
		return nil
	}
	b.entries = append(b.entries, entry{
		value: value,
		ts:    ts,
		start: uint32(keyAt + 1),
		mid:   uint32(mid),
		end:   uint32(len(a)),
		kind:  kind,
	})
	if kind.merges() {
		s := sumSlot{gen: c.gen, idx: int32(len(b.entries) - 1)}
		if slot >= 0 {
			c.slots[slot] = s
		} else {
			c.slots = append(c.slots, s)
			c.sums[string(a[keyAt:])] = int32(len(c.slots) - 1)
		}
	}
	full := len(b.entries) >= c.capacity
	c.mu.Unlock()
	if full {
		c.signal()
	}
	return nil
}

//go:noinline
func overflow(sum, value float64) error {
	return fmt.Errorf("%w: adding %v to the pending sum %v overflows", ErrInvalidValue, value, sum)
}

//go:noinline
func tooLarge(n int) error {
	return fmt.Errorf("%w: %d bytes encoded, at most %d fit in a datagram", ErrTooLarge, n, maxSeriesBytes)
}

// signal wakes the flusher without waiting: if a wake-up is already
// pending, this one adds nothing.
func (c *Client) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// run is the background flusher: every interval, and when an emit finds
// the buffer full.
func (c *Client) run() {
	defer close(c.stopped)
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-tick.C:
		case <-c.wake:
		}
		// Errors are counted in SendErrors; nobody is waiting for them here.
		_ = c.flush()
	}
}

// flush swaps the current batch out and sends it.
func (c *Client) flush() error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.mu.Lock()
	b := c.active
	if len(b.entries) == 0 {
		c.mu.Unlock()
		return nil
	}
	c.active, c.spare = c.spare, b
	c.gen++
	if len(c.sums) > c.capacity {
		clear(c.sums)
		c.slots = c.slots[:0]
	}
	c.mu.Unlock()

	err := c.send(b)
	b.entries = b.entries[:0]
	b.arena = b.arena[:0]
	return err
}

// send encodes a batch into datagrams under maxDatagram bytes and writes
// them. It returns the first send error.
//
// After a write times out, the rest of the batch is counted as failed
// without being written: the agent is not reading, and waiting a full
// timeout per datagram would hold Close (or the next flush) for minutes.
func (c *Client) send(b *batch) error {
	var first error
	stuck := false
	put := func(d []byte, n int) {
		if stuck {
			c.sendErrors.Add(1)
			return
		}
		if err := c.sendDatagram(d, n); err != nil {
			c.sendErrors.Add(1)
			stuck = isTimeout(err)
			if first == nil {
				first = err
			}
		}
	}
	// d starts with room for the bunch header, filled in when the count is
	// known; a datagram of one message is sent without it.
	d := c.dgram[:bunchHeaderLen]
	n := 0
	for i := range b.entries {
		e := &b.entries[i]
		at := len(d)
		d = appendMessage(d, e.kind, b.arena[e.start:e.mid], b.arena[e.mid:e.end], e.value, e.ts)
		if n > 0 && (len(d) >= maxDatagram || n == maxBunchCount) {
			// This message does not fit: send the ones before it and move
			// it to the front of the next datagram.
			put(d[:at], n)
			d = d[:bunchHeaderLen+copy(d[bunchHeaderLen:], d[at:])]
			n = 0
		}
		n++
	}
	if n > 0 {
		put(d, n)
	}
	c.dgram = d[:0]
	return first
}

// sendDatagram sends the n messages in d[bunchHeaderLen:], as one message
// or as a bunch.
func (c *Client) sendDatagram(d []byte, n int) error {
	pkt := d[bunchHeaderLen:]
	if n > 1 {
		d[0] = 0xdc
		binary.BigEndian.PutUint16(d[1:bunchHeaderLen], uint16(n))
		pkt = d
	}
	return c.tr.send(pkt)
}

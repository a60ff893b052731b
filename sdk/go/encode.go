package sonde

import (
	"encoding/binary"
	"math"
	"strconv"
)

// The msgpack subset the protocol needs, written by hand.
//
// A message is always a fixarray of six str fields and a bunch is always an
// array16 of messages, so four str headers and two array headers are the
// whole encoder. Hand-writing them (rather than using a general msgpack
// library) keeps emit allocation-free: every function here appends into a
// caller-owned buffer whose capacity is reused from flush to flush, and no
// value goes through an interface or reflection.

const (
	// maxDatagram is the size a datagram must stay under (SPEC.md: a bunch
	// is kept under 32 KiB).
	maxDatagram = 32 * 1024
	// bunchHeaderLen is the array16 header: 0xdc and a big-endian count.
	bunchHeaderLen = 3
	// maxBunchCount is the most elements an array16 header can count.
	maxBunchCount = math.MaxUint16
	// messageOverhead bounds everything in a message except NAME and TAGS:
	// the fixarray header (1), "emit" (5), the longest TYPE "rate_counter"
	// (13), the longest VALUE text (a fixstr header and at most 24 bytes,
	// e.g. "-2.2250738585072014e-308") and the longest TS (a fixstr header
	// and the 20 bytes of math.MinInt64).
	messageOverhead = 1 + 5 + 13 + 25 + 21
	// maxSeriesBytes is the largest encoded NAME plus TAGS that still fits,
	// alone, in a bunch under maxDatagram. Longer ones are rejected at emit
	// so that every accepted point can be sent.
	maxSeriesBytes = maxDatagram - 1 - bunchHeaderLen - messageOverhead
)

// metricKind is a metric type of wire protocol 1.
type metricKind uint8

// The metric types, in the order of SPEC.md.
const (
	kindCounter metricKind = iota
	kindRateCounter
	kindMeter
	kindTimer
	kindStore
	kindTsStore
	kindHistogram
	numKinds
)

var kindNames = [numKinds]string{
	"counter", "rate_counter", "meter", "timer", "store", "ts_store", "histogram",
}

// kindStr holds each TYPE already encoded as a msgpack str, so a message
// copies it instead of re-encoding it.
var kindStr = func() (out [numKinds][]byte) {
	for k, name := range kindNames {
		out[k] = appendStr(nil, name)
	}
	return out
}()

// String returns the TYPE as it goes on the wire (for example "rate_counter").
func (k metricKind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "metricKind(" + strconv.Itoa(int(k)) + ")"
}

// summable reports whether emits of this kind are added together within a
// flush (SPEC.md, Client behaviour: counter and rate_counter).
func (k metricKind) summable() bool { return k == kindCounter || k == kindRateCounter }

// merges reports whether an emit of this kind for a series already pending
// joins its entry instead of taking one: summable kinds add to it, a store
// replaces its value (the agent keeps a window's last).
func (k metricKind) merges() bool { return k.summable() || k == kindStore }

// strHeaderLen is the size of the smallest str header for n bytes.
func strHeaderLen(n int) int {
	switch {
	case n <= 31:
		return 1
	case n <= math.MaxUint8:
		return 2
	case n <= math.MaxUint16:
		return 3
	default:
		return 5
	}
}

// appendStrHeader appends the smallest msgpack str header for n bytes:
// fixstr, str8, str16 or str32.
func appendStrHeader(b []byte, n int) []byte {
	switch {
	case n <= 31:
		return append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		return append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
}

// appendStr appends s as a msgpack str in its smallest form.
func appendStr(b []byte, s string) []byte {
	return append(appendStrHeader(b, len(s)), s...)
}

// appendBunchHeader appends an array16 header for n messages.
func appendBunchHeader(b []byte, n int) []byte {
	return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
}

// maxIntegral is the bound below which an integral value is written as an
// integer (SPEC.md, Message encoding: absolute value below 1e15).
const maxIntegral = 1e15

// appendValue appends the VALUE text of v (SPEC.md): an integer for an
// integral value whose absolute value is below 1e15; else the shortest
// round-trip digits, in plain notation for 1e-6 <= |v| < 1e21 ("12.5",
// "0.000025") and in exponent form outside it ("1e+21", "1.5e-07"). At most
// 25 bytes. The caller has already rejected NaN and the infinities.
func appendValue(b []byte, v float64) []byte {
	if v == math.Trunc(v) && math.Abs(v) < maxIntegral {
		// int64 conversion also turns -0 into "0".
		return strconv.AppendInt(b, int64(v), 10)
	}
	if a := math.Abs(v); a >= 1e-6 && a < 1e21 {
		return strconv.AppendFloat(b, v, 'f', -1, 64)
	}
	return strconv.AppendFloat(b, v, 'e', -1, 64)
}

// appendRawMessage appends ["emit", typ, name, value, tags, ts] with every
// field a str. It takes the six fields exactly as they go on the wire and
// does no validation; the test vectors are checked through it.
func appendRawMessage(b []byte, typ, name, value, tags, ts string) []byte {
	b = append(b, 0x96)
	b = appendStr(b, "emit")
	b = appendStr(b, typ)
	b = appendStr(b, name)
	b = appendStr(b, value)
	b = appendStr(b, tags)
	return appendStr(b, ts)
}

// appendMessage appends one pending point as a message. name and tags are
// the NAME and TAGS already encoded as strs, as emit stored them.
func appendMessage(b []byte, kind metricKind, name, tags []byte, value float64, ts int64) []byte {
	b = append(b, 0x96, 0xa4, 'e', 'm', 'i', 't')
	b = append(b, kindStr[kind]...)
	b = append(b, name...)
	// VALUE and TS are at most 24 and 20 bytes, so both are fixstrs: the
	// header byte is reserved first and patched with the length after the
	// text is appended in place, which avoids a scratch buffer.
	at := len(b)
	b = appendValue(append(b, 0), value)
	b[at] = 0xa0 | byte(len(b)-at-1)
	b = append(b, tags...)
	if kind != kindTsStore {
		return append(b, 0xa0)
	}
	at = len(b)
	b = strconv.AppendInt(append(b, 0), ts, 10)
	b[at] = 0xa0 | byte(len(b)-at-1)
	return b
}

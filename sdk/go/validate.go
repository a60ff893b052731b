package sonde

import (
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// Errors returned by the emit methods and New. Each is wrapped with the
// offending input, so test for them with errors.Is.
var (
	// ErrInvalidName: a metric name is empty or contains '|', '=', a space,
	// '\n' or '\r', or is not UTF-8.
	ErrInvalidName = errors.New("sonde: invalid metric name")
	// ErrInvalidPrefix: the client prefix contains '|', '=', a space, '\n' or
	// '\r', or is not UTF-8.
	ErrInvalidPrefix = errors.New("sonde: invalid prefix")
	// ErrInvalidTag: a tag key is empty, or a key or value contains '|',
	// '=', a space, '\n' or '\r', or is not UTF-8.
	ErrInvalidTag = errors.New("sonde: invalid tag")
	// ErrInvalidValue: the value is NaN or an infinity.
	ErrInvalidValue = errors.New("sonde: invalid value")
	// ErrTooLarge: the name and tags together are too long for one
	// datagram under 32 KiB, so the point could never be sent.
	ErrTooLarge = errors.New("sonde: name and tags too long")
	// ErrClosed: the client has been closed.
	ErrClosed = errors.New("sonde: client closed")
	// ErrInvalidAddress: the address has an unknown scheme or no target.
	ErrInvalidAddress = errors.New("sonde: invalid address")
)

// Bytes that may not appear in a name, prefix, tag key or tag value: '|'
// and ' ' separate tags on the wire, '=' splits a key from its value (and
// is kept out of names too, as the SDK contract says, so a name never
// reads as a tag), and '\n'/'\r' would break line-based outputs
// downstream. Tables rather than comparisons because these checks
// run over every byte of every emit.
var badInName, badInTag [256]bool

func init() {
	for _, c := range "|= \n\r" {
		badInName[c] = true
		badInTag[c] = true
	}
}

// scan returns the index of the first byte of s that bad marks (-1 if
// none) and whether s is valid UTF-8.
//
// UTF-8 is checked too, beyond SPEC.md: the agent drops a new series whose
// name or tags are not UTF-8 (drop reason invalid_utf8), which would be a
// silent loss from the caller's point of view. Go is the one SDK language
// whose strings can hold invalid UTF-8, so this keeps it in line with the
// others. The check costs nothing for ASCII text: utf8.ValidString only
// runs from the first byte >= 0x80, which is also why one pass suffices
// (every forbidden byte is ASCII, and no byte of a multi-byte UTF-8
// sequence is).
func scan(s string, bad *[256]bool) (at int, valid bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if bad[c] {
			return i, true
		}
		if c >= utf8.RuneSelf {
			for j := i + 1; j < len(s); j++ {
				if bad[s[j]] {
					return j, true
				}
			}
			return -1, utf8.ValidString(s[i:])
		}
	}
	return -1, true
}

// The check* functions return nil or the error to hand back. They build
// an error only on the failure path (in separate functions), so the
// success path of an emit stays free of allocations.

func checkName(name string) error {
	if name == "" {
		return emptyName()
	}
	return checkText(name, &badInName, ErrInvalidName, "name")
}

func checkPrefix(prefix string) error {
	return checkText(prefix, &badInName, ErrInvalidPrefix, "prefix")
}

func checkTag(t Tag) error {
	if t.Key == "" {
		return emptyTagKey(t.Value)
	}
	if err := checkText(t.Key, &badInTag, ErrInvalidTag, "tag key"); err != nil {
		return err
	}
	return checkText(t.Value, &badInTag, ErrInvalidTag, "tag value")
}

func checkText(s string, bad *[256]bool, sentinel error, what string) error {
	at, valid := scan(s, bad)
	switch {
	case at >= 0:
		return invalid(sentinel, what, s, s[at])
	case !valid:
		return invalid(sentinel, what, s, 0)
	}
	return nil
}

func checkValue(v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return invalidValue(v)
	}
	return nil
}

// invalid wraps sentinel with what was wrong; bad is the forbidden byte, or
// 0 for invalid UTF-8.
//
//go:noinline
func invalid(sentinel error, what, text string, bad byte) error {
	if bad == 0 {
		return fmt.Errorf("%w: %s %q is not valid UTF-8", sentinel, what, text)
	}
	return fmt.Errorf("%w: %s %q contains %q", sentinel, what, text, rune(bad))
}

//go:noinline
func emptyName() error {
	return fmt.Errorf("%w: the name is empty", ErrInvalidName)
}

//go:noinline
func emptyTagKey(value string) error {
	return fmt.Errorf("%w: empty tag key (value %q)", ErrInvalidTag, value)
}

//go:noinline
func invalidValue(v float64) error {
	return fmt.Errorf("%w: %v is not a finite number", ErrInvalidValue, v)
}

package sonde

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const vectorDir = "../../testdata/vectors"

type vectorEmit struct {
	Type  string `json:"type"`
	Name  string `json:"name"`
	Value string `json:"value"`
	Tags  string `json:"tags"`
	TS    string `json:"ts"`
}

type vector struct {
	file     string
	Name     string        `json:"name"`
	Emits    *[]vectorEmit `json:"emits"`
	BytesHex string        `json:"bytes_hex"`
}

// vectorsWithEmits loads every msgpack vector whose emits are not null.
func vectorsWithEmits(t *testing.T) []vector {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(vectorDir, "msgpack", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out []vector
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		v := vector{file: filepath.Base(f)}
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if v.Emits != nil {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no msgpack vector with emits under %s", vectorDir)
	}
	return out
}

func encodeEmits(emits []vectorEmit) []byte {
	var b []byte
	if len(emits) > 1 {
		b = appendBunchHeader(b, len(emits))
	}
	for _, e := range emits {
		b = appendRawMessage(b, e.Type, e.Name, e.Value, e.Tags, e.TS)
	}
	return b
}

func TestEveryVectorWithEmitsEncodesToItsBytes(t *testing.T) {
	for _, v := range vectorsWithEmits(t) {
		got := hex.EncodeToString(encodeEmits(*v.Emits))
		if got != v.BytesHex {
			t.Errorf("%s (%s):\n got %s\nwant %s", v.file, v.Name, got, v.BytesHex)
		}
	}
}

// The raw encoder above takes the wire strings as given. This sends the
// same points through a Client, for every vector a client can produce:
// values already in canonical text (not "-3e2") and tags the validation
// accepts (not space-separated). It proves the client's own path (value
// formatting, name and tag rendering, one message vs bunch) matches too.
func TestVectorsAClientCanProduceComeOutOfItByteForByte(t *testing.T) {
	sent := 0
	for _, v := range vectorsWithEmits(t) {
		calls, ok := clientCalls(*v.Emits)
		if !ok {
			continue
		}
		r := newReceiver(t)
		c := newTestClient(t, Options{Address: r.address()})
		for _, call := range calls {
			must(t, call(c))
		}
		must(t, c.Flush())
		got := hex.EncodeToString(r.datagram(5 * time.Second))
		if got != v.BytesHex {
			t.Errorf("%s (%s):\n got %s\nwant %s", v.file, v.Name, got, v.BytesHex)
		}
		r.quiet()
		sent++
	}
	// 0001-0004, 0006 and 0009 qualify today; fewer means the filter broke.
	if sent < 6 {
		t.Fatalf("only %d vectors went through a client", sent)
	}
}

// clientCalls turns vector emits into client calls, or reports that a
// client cannot produce them byte for byte.
func clientCalls(emits []vectorEmit) ([]func(*Client) error, bool) {
	var calls []func(*Client) error
	for _, e := range emits {
		value, err := strconv.ParseFloat(e.Value, 64)
		if err != nil || string(appendValue(nil, value)) != e.Value {
			return nil, false
		}
		var tags []Tag
		if e.Tags != "" {
			for _, kv := range strings.Split(e.Tags, "|") {
				k, val, _ := strings.Cut(kv, "=")
				tags = append(tags, T(k, val))
			}
		}
		for _, tag := range tags {
			if checkTag(tag) != nil {
				return nil, false
			}
		}
		var ts int64
		if e.Type == "ts_store" {
			if ts, err = strconv.ParseInt(e.TS, 10, 64); err != nil {
				return nil, false
			}
		} else if e.TS != "" {
			return nil, false
		}
		kind := metricKind(255)
		for k, name := range kindNames {
			if name == e.Type {
				kind = metricKind(k)
			}
		}
		if kind == 255 {
			return nil, false
		}
		name := e.Name
		calls = append(calls, func(c *Client) error {
			return c.emit(kind, name, value, ts, tags)
		})
	}
	return calls, true
}

func TestValuesAreWrittenAsTheSharedValueVectorsSay(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(vectorDir, "values.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases    [][2]json.RawMessage `json:"cases"`
		Rejected []string             `json:"rejected"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) == 0 || len(file.Rejected) == 0 {
		t.Fatal("values.json has no cases")
	}
	for _, c := range file.Cases {
		var v float64
		var want string
		if err := json.Unmarshal(c[0], &v); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(c[1], &want); err != nil {
			t.Fatal(err)
		}
		if got := string(appendValue(nil, v)); got != want {
			t.Errorf("value %s: got %q, want %q", c[0], got, want)
		}
	}
	for _, text := range file.Rejected {
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if err := checkValue(v); !errors.Is(err, ErrInvalidValue) {
			t.Errorf("%s: got %v, want ErrInvalidValue", text, err)
		}
	}
}

func TestValuesOutsideTheIntegerRuleUseShortestRoundTripText(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{
		{-999999999999999, "-999999999999999"},
		{1e15, "1000000000000000"},
		{-1e15, "-1000000000000000"},
		{1e20, "100000000000000000000"},
		{1e21, "1e+21"},
		{2.5e-5, "0.000025"},
		{1e300, "1e+300"},
		{0.1, "0.1"},
		{1e-7, "1e-07"},
		{math.Copysign(0, -1), "0"},
		{math.SmallestNonzeroFloat64, "5e-324"},
		{-math.MaxFloat64, "-1.7976931348623157e+308"},
	} {
		got := string(appendValue(nil, c.v))
		if got != c.want {
			t.Errorf("%v: got %q, want %q", c.v, got, c.want)
		}
		if back, err := strconv.ParseFloat(got, 64); err != nil || back != c.v {
			t.Errorf("%q does not round-trip to %v", got, c.v)
		}
	}
}

func TestStrHeadersUseTheSmallestFormAtEveryBoundary(t *testing.T) {
	for _, c := range []struct {
		n      int
		header string
	}{
		{0, "a0"},
		{31, "bf"},
		{32, "d920"},
		{255, "d9ff"},
		{256, "da0100"},
		{65535, "daffff"},
		{65536, "db00010000"},
	} {
		s := strings.Repeat("x", c.n)
		b := appendStr(nil, s)
		h := hex.EncodeToString(b[:len(b)-c.n])
		if h != c.header || !bytes.Equal(b[len(b)-c.n:], []byte(s)) {
			t.Errorf("%d bytes: header %s, want %s", c.n, h, c.header)
		}
		if strHeaderLen(c.n) != len(c.header)/2 {
			t.Errorf("%d bytes: strHeaderLen %d, want %d", c.n, strHeaderLen(c.n), len(c.header)/2)
		}
	}
}

// appendMessage (the client's path) and appendRawMessage (the vector
// path) must agree for every kind, including the longest VALUE and TS,
// which are patched in place as fixstrs.
func TestTheClientEncoderAgreesWithTheRawEncoder(t *testing.T) {
	name, tags := appendStr(nil, "svc.name"), appendStr(nil, "a=1|b=2")
	for k := kindCounter; k < numKinds; k++ {
		for _, v := range []float64{1, -0.25, -2.2250738585072014e-308} {
			for _, ts := range []int64{0, 1763800200, math.MinInt64} {
				want := appendRawMessage(nil, k.String(), "svc.name", string(appendValue(nil, v)), "a=1|b=2", "")
				if k == kindTsStore {
					want = appendRawMessage(nil, k.String(), "svc.name", string(appendValue(nil, v)), "a=1|b=2", strconv.FormatInt(ts, 10))
				}
				got := appendMessage(nil, k, name, tags, v, ts)
				if !bytes.Equal(got, want) {
					t.Errorf("%v %v %v:\n got % x\nwant % x", k, v, ts, got, want)
				}
				if len(got)-len(name)-len(tags) > messageOverhead {
					t.Errorf("%v %v %v: %d bytes besides NAME and TAGS, messageOverhead is %d", k, v, ts, len(got)-len(name)-len(tags), messageOverhead)
				}
			}
		}
	}
}

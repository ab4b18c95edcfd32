package rowcodec

import (
	"bytes"
	"testing"

	"github.com/redeliver-go/redeliver/stream"
)

func same(a, b []stream.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || !bytes.Equal(a[i].Value, b[i].Value) || (a[i].Value == nil) != (b[i].Value == nil) {
			return false
		}
	}
	return true
}

func TestHeadersRoundTrip(t *testing.T) {
	hs := []stream.Header{
		{Key: "traceparent", Value: []byte("00-abc")},
		{Key: "", Value: []byte{}},
		{Key: "nul\x00key", Value: nil},
		{Key: "bad\xff\xfeutf8", Value: []byte{0, 0xff}},
		{Key: "<&>\u2028", Value: []byte("x")},
	}
	s, ok, err := Headers(hs)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if bytes.Contains([]byte(s), []byte(`\u0000`)) {
		t.Fatalf("%s holds \\u0000, which jsonb refuses", s)
	}
	got, err := ParseHeaders([]byte(s))
	if err != nil || !same(got, hs) {
		t.Fatalf("round trip of %s: %q, %v", s, got, err)
	}
	if _, ok, _ := Headers(nil); ok {
		t.Fatal("no headers written as a value")
	}
}

// TestReadsEarlierFormat: entries parked by earlier versions (json.Marshal
// of the headers) read the same.
func TestReadsEarlierFormat(t *testing.T) {
	got, err := ParseHeaders([]byte(`[{"Key":"a","Value":"AAH/"},{"Key":"b","Value":null},{"Key":"c","Value":""}]`))
	want := []stream.Header{{Key: "a", Value: []byte{0, 1, 0xff}}, {Key: "b"}, {Key: "c", Value: []byte{}}}
	if err != nil || !same(got, want) {
		t.Fatalf("got %q, %v", got, err)
	}
}

func FuzzHeaders(f *testing.F) {
	f.Add("k", []byte("v"), true)
	f.Add("\x00\xff", []byte{}, false)
	f.Fuzz(func(t *testing.T, key string, value []byte, nilValue bool) {
		if nilValue {
			value = nil
		} else if value == nil {
			value = []byte{}
		}
		hs := []stream.Header{{Key: key, Value: value}, {Key: "x"}}
		s, _, err := Headers(hs)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseHeaders([]byte(s))
		if err != nil || !same(got, hs) {
			t.Fatalf("round trip of %q: %q, %v", hs, got, err)
		}
	})
}

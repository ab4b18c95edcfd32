// Package rowcodec is how the re-drive's stores write what a database's
// text types cannot hold as it is: a record's headers, whose keys may hold
// any bytes (a NUL, invalid UTF-8), as JSON that every store keeps as text
// and PostgreSQL accepts as jsonb.
//
// The format is a JSON array of {"Key": key, "Value": base64 or null}, one
// object per header in order: what earlier versions wrote, so entries
// parked by them read the same. A key that is not plain text (see [Text])
// is written as "KeyBase64" instead of "Key", so that no byte is lost or
// replaced and jsonb, which refuses \u0000, takes it.
package rowcodec

import (
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/redeliver-go/redeliver/stream"
)

// Text reports whether s is plain text that every store keeps byte for
// byte in a text column: valid UTF-8 without a NUL.
func Text(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

type header struct {
	Key       *string `json:"Key,omitempty"`
	KeyBase64 []byte  `json:"KeyBase64,omitempty"`
	Value     []byte  `json:"Value"`
}

// Headers returns hs as the stores write them, and false when there are
// none (the column is then NULL).
func Headers(hs []stream.Header) (string, bool, error) {
	if len(hs) == 0 {
		return "", false, nil
	}
	out := make([]header, len(hs))
	for i, h := range hs {
		out[i].Value = h.Value
		if Text(h.Key) {
			out[i].Key = &hs[i].Key
		} else {
			out[i].KeyBase64 = []byte(h.Key)
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", false, err
	}
	return string(b), true, nil
}

// ParseHeaders is the inverse of [Headers].
func ParseHeaders(data []byte) ([]stream.Header, error) {
	var in []header
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, err
	}
	if len(in) == 0 {
		return nil, nil
	}
	hs := make([]stream.Header, len(in))
	for i, h := range in {
		switch {
		case h.Key != nil:
			hs[i].Key = *h.Key
		default:
			hs[i].Key = string(h.KeyBase64)
		}
		hs[i].Value = h.Value
	}
	return hs, nil
}

package rpc

import (
	"bytes"
	"testing"
)

// FuzzGroupUpdate decodes made-up OpGroupUpdate inputs: a decoder that
// accepts one must re-encode it to the same bytes.
func FuzzGroupUpdate(f *testing.F) {
	for _, u := range []groupUpdate{
		{version: 3, op: ModReplace, members: []Member{{Rank: 0, URI: "tcp://127.0.0.1:1"}, {Rank: 7, URI: "v2:10.0.0.1:6800/0"}}},
		{version: 1, op: ModRemove, members: []Member{{Rank: 2}}},
		{version: 9, op: ModAdd},
	} {
		b, err := u.AppendBinary(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{1, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var u groupUpdate
		if err := u.UnmarshalBinary(b); err != nil {
			return
		}
		again, err := u.AppendBinary(nil)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", u, err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("%x decodes to %+v which encodes to %x", b, u, again)
		}
	})
}

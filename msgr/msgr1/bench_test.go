package msgr1

import (
	"bytes"
	"testing"

	"github.com/ferrymsg/ferry/msg"
)

// BenchmarkMessage encodes a message on one engine and decodes it on the
// other (header and payload CRCs, and with cephx the signature, both
// ways of the work).
func BenchmarkMessage(b *testing.B) {
	for _, tc := range []struct {
		name   string
		size   int
		signed bool
	}{{"64B", 64, false}, {"64B-signed", 64, true}, {"1MiB", 1 << 20, false}, {"1MiB-signed", 1 << 20, true}} {
		b.Run(tc.name, func(b *testing.B) {
			cc, sc := clientConfig(), serverConfig()
			if tc.signed {
				cc, sc, _, _ = osdConfigs(false)
			}
			c, s := pair(cc, sc)
			run(&testing.T{}, c, s)
			if !s.e.Ready() {
				b.Fatal("not ready")
			}
			data := bytes.Repeat([]byte{7}, tc.size)
			m := msg.New(2)
			m.SetSegments([]byte("front"), nil, data)
			var wire []byte
			body := make([]byte, 0, tc.size+64)
			b.SetBytes(int64(tc.size))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				m.Header.Seq = uint64(i + 1)
				wire = c.e.AppendMessage(wire[:0], m)
				in := wire
				for len(in) > 0 {
					n, retain := s.e.Need()
					p := in[:n]
					if retain {
						p = append(body[:0], p...)
					}
					if _, err := s.e.Feed(p); err != nil {
						b.Fatal(err)
					}
					in = in[n:]
				}
			}
		})
	}
}

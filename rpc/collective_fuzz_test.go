package rpc

import (
	"bytes"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/coll"
)

// FuzzCollectiveWire feeds arbitrary bytes to the decoders of what peers
// send in collectives (a forward's reply, a request to root a
// collective, its result): they never panic, and what decodes encodes
// back to the same bytes.
func FuzzCollectiveWire(f *testing.F) {
	rep := coll.AppendReport([]byte{collReport}, coll.Report[[]byte]{Value: []byte("v"), HasValue: true,
		Failed: []coll.Failure{{Rank: 3, Reason: coll.ReasonTimedOut, Via: 1, Detail: "late"}}})
	f.Add(byte(0), rep)
	f.Add(byte(0), append([]byte{collRefused, byte(coll.ReasonVersion)}, "rank 2 at version 3"...))
	q := &viaIn{d: CollectiveDesc{Opcode: 7, Topology: coll.KAry(3), Timeout: time.Second, Ranks: []uint32{1, 2}, Excluded: []uint32{2}}}
	qb, _ := q.AppendBinary(nil)
	f.Add(byte(1), qb)
	o := &viaOut{res: CollectiveResult{ID: 9, GroupVersion: 2, Answered: []uint32{0, 1}, Aggregate: []byte("ab"), HasAggregate: true,
		Failed: []RankFailure{{Rank: 4, Reason: coll.ReasonExcluded, Via: 4}}}}
	ob, _ := o.AppendBinary(nil)
	f.Add(byte(2), ob)
	f.Fuzz(func(t *testing.T, which byte, b []byte) {
		switch which % 3 {
		case 0:
			var out collReplyOut
			if out.UnmarshalBinary(b) != nil || out.refused {
				return
			}
			if enc := coll.AppendReport([]byte{collReport}, out.rep); !bytes.Equal(enc, b) {
				t.Fatalf("reply re-encodes differently:\n%x\n%x", enc, b)
			}
		case 1:
			var in viaIn
			if in.UnmarshalBinary(b) != nil {
				return
			}
			if enc, _ := in.AppendBinary(nil); !bytes.Equal(enc, b) {
				t.Fatalf("request re-encodes differently:\n%x\n%x", enc, b)
			}
		case 2:
			var out viaOut
			if out.UnmarshalBinary(b) != nil {
				return
			}
			if enc, _ := out.AppendBinary(nil); !bytes.Equal(enc, b) {
				t.Fatalf("result re-encodes differently:\n%x\n%x", enc, b)
			}
		}
	})
}

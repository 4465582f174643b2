package msgr

import (
	"strconv"
	"sync"
	"testing"

	"github.com/ferrymsg/ferry/metrics"
	"github.com/ferrymsg/ferry/msg"
)

// TestTypeCounterSlots: each message type below maxTypeLabel has a
// counter of its own, the same on every call and whichever goroutine made
// it (the first type seen is kept inline, the others in the lazily made
// table), and the types from maxTypeLabel up share "other".
func TestTypeCounterSlots(t *testing.T) {
	reg := metrics.NewRegistry()
	mm := newMsgrMetrics(reg, &Messenger{})
	r := mm.row(msg.EntityOSD)
	types := []uint16{5, 0, 15, 16, 17, 200, 255, 256, 300, 65535}
	var wg sync.WaitGroup
	got := make([][]*metrics.Counter, 4)
	for g := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				got[g] = got[g][:0]
				for _, ty := range types {
					got[g] = append(got[g], r.typeCounter(&r.recv, r.recvVec, ty))
				}
			}
		}()
	}
	wg.Wait()
	for g := range got {
		for i, ty := range types {
			if got[g][i] != got[0][i] {
				t.Fatalf("type %d: goroutine %d got another counter", ty, g)
			}
			got[g][i].Inc()
		}
	}
	s := reg.Snapshot()
	for i, ty := range types {
		label := strconv.Itoa(int(ty))
		want := float64(len(got))
		if ty >= maxTypeLabel {
			label, want = "other", 3*float64(len(got))
		} else if got[0][i] == got[0][len(types)-1] {
			t.Fatalf("type %d shares the counter of \"other\"", ty)
		}
		if v, _ := s.Value("ferry_msgr_messages_received", "osd", label); v != want {
			t.Errorf("messages_received{osd,%s} = %v, want %v", label, v, want)
		}
	}
	if r.typeCounter(&r.sent, r.sentVec, 5) == got[0][0] {
		t.Fatal("sent and received share a counter")
	}
}

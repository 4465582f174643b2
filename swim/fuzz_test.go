package swim

import (
	"math/rand/v2"
	"testing"
	"time"
)

// checkBounded checks a machine's state stays within its limits.
func checkBounded(t *testing.T, m *Machine) {
	t.Helper()
	if len(m.queue) > m.cfg.QueueLimit {
		t.Fatalf("queue %d > %d", len(m.queue), m.cfg.QueueLimit)
	}
	if len(m.helpers) > m.cfg.HelperLimit {
		t.Fatalf("helpers %d > %d", len(m.helpers), m.cfg.HelperLimit)
	}
	if len(m.susp) > m.tab.len() {
		t.Fatalf("%d suspicions of %d members", len(m.susp), m.tab.len())
	}
	for _, s := range m.susp {
		i := m.find(s.id)
		if i < 0 || m.tab.state[i] != Suspect || m.tab.incs[i] != s.inc {
			t.Fatalf("suspicion %+v of a member that is %v", s, m.tab.member(i))
		}
	}
	for i := range m.tab.len() {
		if m.tab.state[i] == Suspect && m.findSuspicion(m.tab.id(i)) == nil {
			t.Fatalf("suspect %d without a suspicion", m.tab.id(i))
		}
	}
	if m.score < 0 || m.score >= m.cfg.AwarenessMax {
		t.Fatalf("score %d", m.score)
	}
	if m.started && m.next < 0 {
		t.Fatalf("next %v", m.next)
	}
}

// FuzzReceive feeds a machine arbitrary messages (decoded from the fuzz
// input when valid, else built from its bytes) interleaved with ticks: it
// never panics, its state stays bounded and consistent, and what it sends
// encodes and decodes.
func FuzzReceive(f *testing.F) {
	f.Add([]byte{1, 3, 1, 0, 5, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add(sampleMessage().Append(nil))
	f.Add([]byte("some arbitrary bytes that are not a message at all, long enough"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rng := rand.New(rand.NewPCG(uint64(len(data)), 3))
		cfg := Config{QueueLimit: 16, HelperLimit: 4}
		m := New(0, cfg, rng)
		for i := ID(1); i <= 6; i++ {
			m.Add(i, 0)
		}
		now := time.Duration(0)
		m.Tick(now)
		var msg Message
		for len(data) > 0 {
			op := data[0]
			data = data[1:]
			switch op % 4 {
			case 0: // tick at Next, or late
				now = max(now, m.Next())
				if op&0x80 != 0 {
					now += time.Duration(op) * 10 * time.Millisecond
				}
				m.Tick(now)
			case 1: // a decoded message
				n := min(len(data), int(op>>2)+headerSize)
				if DecodeMessage(data[:n], &msg) == nil {
					m.Receive(now, ID(op>>5), &msg)
				}
				data = data[n:]
			default: // a message built from raw bytes
				if len(data) < 10 {
					return
				}
				msg = Message{Kind: Kind(data[0]), Seq: uint32(data[1] % 8), Target: ID(data[2] % 9)}
				k := int(data[3] % 6)
				data = data[4:]
				for range k {
					if len(data) < 4 {
						break
					}
					msg.Updates = append(msg.Updates, upd(ID(data[0]%9), State(data[1]%4), uint64(data[2]%4), ID(data[3]%9)))
					data = data[4:]
				}
				from := ID(op>>2) % 9
				now += time.Duration(op) * time.Millisecond
				m.Receive(now, from, &msg)
			}
			checkBounded(t, m)
			for _, e := range m.Outbox() {
				if len(e.Msg.Updates) > 3+m.cfg.MaxPiggyback {
					t.Fatalf("%d updates", len(e.Msg.Updates))
				}
				var d Message
				if err := DecodeMessage(e.Msg.Append(nil), &d); err != nil {
					t.Fatalf("machine sent an undecodable message: %v", err)
				}
			}
			m.Events()
		}
	})
}

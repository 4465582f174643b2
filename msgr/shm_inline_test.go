//go:build linux

package msgr_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/shm"
)

// fastEcho echoes every message from the reader that read it (a
// FastDispatcher): its reply is written by that reader, inline.
type fastEcho struct{}

func (fastEcho) CanFastDispatch(*msg.Message) bool { return true }
func (fastEcho) FastDispatch(m *msg.Message) {
	r := msg.New(m.Header.Type)
	r.Header.Tid = m.Header.Tid
	r.Front = m.Front
	r.Data = m.Data
	_ = m.Conn.Send(r)
}
func (e fastEcho) Dispatch(m *msg.Message) bool { e.FastDispatch(m); return true }

// TestAwaitShmInline runs round trips over shm, whose connections take
// inline writes (transport.TryWriter): the client sends from its own
// goroutine and reads the reply in Await, the server's reader echoes
// inline. The rings are small (16 KiB) so that messages of up to 1 MiB
// are written partly inline and finished by the writer goroutine. Every
// reply must come back whole, and after the first few the awaiting
// goroutine must be the one that delivers them.
func TestAwaitShmInline(t *testing.T) {
	reg := transport.NewRegistry(shm.NewWithOptions(shm.Options{RingSize: 16 << 10}))
	s, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD}, Transports: reg, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	s.SetDefaultPolicy(msgr.StatelessServer())
	s.AddDispatcherTail(fastEcho{})
	if err := s.Bind("shm://" + filepath.Join(t.TempDir(), "osd.sock")); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)

	c, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityClient}, Transports: reg, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	a := &awaitClient{byGo: map[uint64]string{}, replies: make(chan *msg.Message, 1024), sig: make(chan struct{}, 1)}
	c.AddDispatcherTail(a)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	conn, err := c.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}

	me := goid()
	sizes := []int{0, 100, 16 << 10, 64 << 10, 1 << 20}
	const n = 100
	mine := 0
	for tid := uint64(1); tid <= n; tid++ {
		size := sizes[int(tid)%len(sizes)]
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*13 + int(tid))
		}
		m := msg.New(testType)
		m.Header.Tid = tid
		if size > 0 {
			m.Data = msg.Buffers{data}
		}
		if err := conn.Send(m); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var r *msg.Message
		for r == nil {
			select {
			case r = <-a.replies:
				continue
			default:
			}
			if _, err := conn.Await(ctx, a.sig); err != nil {
				t.Fatalf("tid %d: %v", tid, err)
			}
		}
		cancel()
		if r.Header.Tid != tid {
			t.Fatalf("reply tid %d, want %d", r.Header.Tid, tid)
		}
		if got := r.Data.Bytes(); !bytes.Equal(got, data) {
			t.Fatalf("tid %d: %d bytes back, want %d, or they differ", tid, len(got), size)
		}
		r.Done()
		a.mu.Lock()
		if a.byGo[tid] == me {
			mine++
		}
		a.mu.Unlock()
	}
	if mine < n/2 {
		t.Fatalf("%d of %d replies were delivered on the awaiting goroutine", mine, n)
	}
}

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
// shmEchoPair starts an echo server (fastEcho) and a client messenger
// over shm with the given shm options, and returns the client's
// connection to the server and its dispatcher.
func shmEchoPair(tb testing.TB, o shm.Options) (*msgr.Conn, *awaitClient) {
	tb.Helper()
	reg := transport.NewRegistry(shm.NewWithOptions(o))
	s, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD}, Transports: reg, Logger: quietLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	s.SetDefaultPolicy(msgr.StatelessServer())
	s.AddDispatcherTail(fastEcho{})
	if err := s.Bind("shm://" + filepath.Join(tb.TempDir(), "osd.sock")); err != nil {
		tb.Fatal(err)
	}
	if err := s.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Shutdown)
	c, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityClient}, Transports: reg, Logger: quietLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	a := &awaitClient{byGo: map[uint64]string{}, replies: make(chan *msg.Message, 1024), sig: make(chan struct{}, 1)}
	c.AddDispatcherTail(a)
	if err := c.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Shutdown)
	conn, err := c.Connect(s.ListenAddrs()[0])
	if err != nil {
		tb.Fatal(err)
	}
	return conn, a
}

// await returns the next reply a receives, reading conn in Await while
// none has come.
func (a *awaitClient) await(ctx context.Context, conn *msgr.Conn) (*msg.Message, error) {
	for {
		select {
		case r := <-a.replies:
			return r, nil
		default:
		}
		if _, err := conn.Await(ctx, a.sig); err != nil {
			return nil, err
		}
	}
}

func TestAwaitShmInline(t *testing.T) {
	conn, a := shmEchoPair(t, shm.Options{RingSize: 16 << 10})

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
		r, err := a.await(ctx, conn)
		cancel()
		if err != nil {
			t.Fatalf("tid %d: %v", tid, err)
		}
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

// TestShmFusedCRC sends, over shm with 16 KiB rings, many messages at
// once whose data buffers are each large enough to be written through
// transport.CRCWriter (their CRC folded into the copy and patched into
// the epilogue), mixed with messages that are not, so that batches hold
// several fused messages and their writes stop part-way through a data
// buffer, inline and in the writer goroutine. A wrong or missing CRC
// would fault the connection; every echo must come back whole and in
// order.
func TestShmFusedCRC(t *testing.T) {
	conn, a := shmEchoPair(t, shm.Options{RingSize: 16 << 10})
	shapes := [][]int{
		{1 << 20},
		{20 << 10, 40 << 10, 100 << 10},
		{100, 70 << 10},           // a small buffer first: its CRC computed ahead
		{20 << 10, 100, 20 << 10}, // a small buffer between: not fused
		{64 << 10},
		{16 << 10, 16 << 10, 16 << 10, 16 << 10},
		{300},
	}
	const n = 60
	sent := map[uint64][]byte{}
	for tid := uint64(1); tid <= n; tid++ {
		var data msg.Buffers
		var all []byte
		for k, size := range shapes[int(tid)%len(shapes)] {
			p := make([]byte, size)
			for i := range p {
				p[i] = byte(i*7 + k*31 + int(tid))
			}
			data = append(data, p)
			all = append(all, p...)
		}
		m := msg.New(testType)
		m.Header.Tid = tid
		m.Data = data
		if err := conn.Send(m); err != nil {
			t.Fatal(err)
		}
		sent[tid] = all
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for want := uint64(1); want <= n; want++ {
		var r *msg.Message
		select {
		case r = <-a.replies:
		case <-ctx.Done():
			t.Fatalf("echo %d: %v (connection: %v)", want, ctx.Err(), conn.Err())
		}
		if r.Header.Tid != want {
			t.Fatalf("echo tid %d, want %d", r.Header.Tid, want)
		}
		if got := r.Data.Bytes(); !bytes.Equal(got, sent[want]) {
			t.Fatalf("tid %d: %d bytes back, want %d, or they differ", want, len(got), len(sent[want]))
		}
		r.Done()
	}
}

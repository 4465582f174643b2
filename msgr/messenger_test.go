package msgr_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/inproc"
)

const testType = 0x7001 // a message type no Ceph daemon uses

// quietLogger discards logs unless FERRY_TEST_LOG=debug.
func quietLogger() *slog.Logger {
	if os.Getenv("FERRY_TEST_LOG") == "debug" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// echoServer starts a messenger that answers every message with a copy of
// its front and data, at the same priority, with the same tid.
func echoServer(t testing.TB, reg *transport.Registry, addr string, cfg msgr.Config) *msgr.Messenger {
	t.Helper()
	return echoServerAfter(t, reg, addr, cfg, nil)
}

// echoServerAfter is echoServer that calls before, if not nil, ahead of
// each reply.
func echoServerAfter(t testing.TB, reg *transport.Registry, addr string, cfg msgr.Config, before func()) *msgr.Messenger {
	t.Helper()
	cfg.Name = msg.EntityName{Type: msg.EntityOSD, Num: 0}
	cfg.Transports = reg
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	s, err := msgr.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.SetDefaultPolicy(msgr.StatelessServer())
	s.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		if before != nil {
			before()
		}
		r := msg.New(m.Header.Type)
		r.Header.Tid = m.Header.Tid
		r.Header.Priority = m.Header.Priority
		r.Front = m.Front
		r.Data = m.Data
		_ = m.Conn.Send(r)
		return true
	}))
	if err := s.Bind(addr); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

type collector struct {
	mu    sync.Mutex
	msgs  []*msg.Message
	ch    chan *msg.Message
	reset chan *msgr.Conn
	conn  chan *msgr.Conn
}

func newCollector() *collector {
	return &collector{ch: make(chan *msg.Message, 4096), reset: make(chan *msgr.Conn, 16), conn: make(chan *msgr.Conn, 16)}
}

func (c *collector) Dispatch(m *msg.Message) bool {
	c.ch <- m
	return true
}
func (c *collector) HandleReset(conn *msgr.Conn)   { c.reset <- conn }
func (c *collector) HandleConnect(conn *msgr.Conn) { c.conn <- conn }

func newClient(t testing.TB, reg *transport.Registry, cfg msgr.Config) (*msgr.Messenger, *collector) {
	t.Helper()
	cfg.Transports = reg
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	c, err := msgr.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	col := newCollector()
	c.AddDispatcherTail(col)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	return c, col
}

func recv(t testing.TB, ch <-chan *msg.Message) *msg.Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a message")
		return nil
	}
}

type transportCase struct {
	name   string
	reg    *transport.Registry
	listen string
}

func transports() []transportCase {
	return []transportCase{
		{"tcp", transport.Default, "tcp://127.0.0.1:0"},
		{"inproc", transport.NewRegistry(inproc.NewNetwork()), "inproc://"},
	}
}

func TestEcho(t *testing.T) {
	for _, tc := range transports() {
		t.Run(tc.name, func(t *testing.T) {
			s := echoServer(t, tc.reg, tc.listen, msgr.Config{})
			c, col := newClient(t, tc.reg, msgr.Config{})
			conn, err := c.Connect(s.ListenAddrs()[0])
			if err != nil {
				t.Fatal(err)
			}
			sizes := []int{0, 1, 4096, 16<<10 - 1, 16 << 10, 1 << 20, 3<<20 + 7}
			for i, n := range sizes {
				m := msg.New(testType)
				m.Header.Tid = uint64(i + 1)
				m.Front = msg.Buffers{[]byte(fmt.Sprintf("front-%d", i))}
				data := make([]byte, n)
				for j := range data {
					data[j] = byte(j*7 + i)
				}
				// Split the data over several buffers to exercise writev.
				if n > 2 {
					m.Data = msg.Buffers{data[:n/3], data[n/3 : 2*n/3], data[2*n/3:]}
				} else if n > 0 {
					m.Data = msg.Buffers{data}
				}
				if err := conn.Send(m); err != nil {
					t.Fatal(err)
				}
				r := recv(t, col.ch)
				if r.Header.Tid != uint64(i+1) {
					t.Fatalf("reply tid %d, want %d", r.Header.Tid, i+1)
				}
				if got := r.Front.Bytes(); string(got) != fmt.Sprintf("front-%d", i) {
					t.Fatalf("front %q", got)
				}
				if got := r.Data.Bytes(); !bytes.Equal(got, data) && !(len(got) == 0 && n == 0) {
					t.Fatalf("size %d: data differs (got %d bytes)", n, len(got))
				}
				if r.Header.Seq != uint64(i+1) {
					t.Fatalf("reply seq %d, want %d", r.Header.Seq, i+1)
				}
				if r.Header.Src.Type != msg.EntityOSD || r.Conn == nil {
					t.Fatalf("src %v conn %v", r.Header.Src, r.Conn)
				}
				if r.RecvStamp.IsZero() || r.DispatchStamp.Before(r.RecvStamp) {
					t.Fatalf("stamps not set: recv %v dispatch %v", r.RecvStamp, r.DispatchStamp)
				}
			}
			if !conn.IsConnected() || conn.PeerType() != msg.EntityOSD {
				t.Fatalf("connected %v peer %v", conn.IsConnected(), conn.PeerName())
			}
			if conn.Features()&msg.FeatureMsgAddr2 == 0 {
				t.Fatalf("features %#x", conn.Features())
			}
		})
	}
}

// TestPriorityOrder queues messages before the connection is up; they
// must leave highest priority first and FIFO within a priority.
func TestPriorityOrder(t *testing.T) {
	reg := transport.NewRegistry(inproc.NewNetwork())
	// The server accepts nothing until every message is queued.
	s, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD}, Transports: reg, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	s.SetDefaultPolicy(msgr.StatelessServer())
	s.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		r := msg.New(m.Header.Type)
		r.Header.Tid = m.Header.Tid
		_ = m.Conn.Send(r)
		return true
	}))
	if err := s.Bind("inproc://prio"); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	c, col := newClient(t, reg, msgr.Config{})
	conn, err := c.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	prios := []msg.Priority{msg.PrioLow, msg.PrioDefault, msg.PrioHighest, msg.PrioHigh, msg.PrioLow, msg.PrioHighest}
	for i, p := range prios {
		m := msg.New(testType)
		m.Header.Tid = uint64(i)
		m.Header.Priority = p
		if err := conn.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for range prios {
		got = append(got, recv(t, col.ch).Header.Tid)
	}
	// Server dispatch preserves its arrival order, which is the client's
	// send order: HIGHEST (2,5), HIGH (3), DEFAULT (1), LOW (0,4).
	want := []uint64{2, 5, 3, 1, 0, 4}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// TestInflightOrder sends many messages without waiting; replies arrive
// complete and in order.
func TestInflightOrder(t *testing.T) {
	for _, tc := range transports() {
		t.Run(tc.name, func(t *testing.T) {
			s := echoServer(t, tc.reg, tc.listen, msgr.Config{})
			c, col := newClient(t, tc.reg, msgr.Config{})
			conn, _ := c.Connect(s.ListenAddrs()[0])
			const n = 2000
			go func() {
				for i := 0; i < n; i++ {
					m := msg.New(testType)
					m.Header.Tid = uint64(i)
					m.Data = msg.Buffers{make([]byte, i%300)}
					if err := conn.Send(m); err != nil {
						t.Error(err)
						return
					}
				}
			}()
			for i := 0; i < n; i++ {
				r := recv(t, col.ch)
				if r.Header.Tid != uint64(i) || r.Data.Len() != i%300 {
					t.Fatalf("reply %d: tid %d len %d", i, r.Header.Tid, r.Data.Len())
				}
			}
		})
	}
}

func TestConnectRefused(t *testing.T) {
	reg := transport.NewRegistry(inproc.NewNetwork())
	c, _ := newClient(t, reg, msgr.Config{})
	conn, err := c.Connect("inproc://nobody")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := conn.Ready(ctx); err == nil {
		t.Fatal("Ready succeeded with nothing listening")
	}
	if err := conn.Send(msg.New(testType)); !errors.Is(err, msgr.ErrClosed) {
		t.Fatalf("Send on a failed lossy connection: %v", err)
	}
}

func TestKeepalive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := transport.NewRegistry(inproc.NewNetwork())
		// Server never sends keepalives of its own but answers ours.
		s := echoServer(t, reg, "inproc://ka", msgr.Config{KeepaliveInterval: -1, KeepaliveTimeout: -1})
		c, col := newClient(t, reg, msgr.Config{KeepaliveInterval: 20 * time.Millisecond, KeepaliveTimeout: 2 * time.Second})
		conn, _ := c.Connect(s.ListenAddrs()[0])
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := conn.Ready(ctx); err != nil {
			t.Fatal(err)
		}
		// A second of virtual time is fifty keepalive intervals: acks keep
		// coming, and the server records our keepalives.
		time.Sleep(time.Second)
		synctest.Wait()
		if ack := conn.LastKeepaliveAck(); ack.IsZero() || time.Since(ack) > 100*time.Millisecond {
			t.Fatalf("last keepalive ack %v, %v ago: want one within 100ms", ack, time.Since(ack))
		}
		cs := s.Conns()
		if len(cs) != 1 || cs[0].LastKeepalive().IsZero() {
			t.Fatalf("server: %d conns, no keepalive recorded", len(cs))
		}
		select {
		case <-col.reset:
			t.Fatal("connection reset although keepalives were answered")
		default:
		}
	})
}

func TestKeepaliveTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := transport.NewRegistry(inproc.NewNetwork())
		s := echoServer(t, reg, "inproc://silent", msgr.Config{KeepaliveInterval: -1, KeepaliveTimeout: -1})
		// The client sends no keepalives, so the server stays silent.
		c, col := newClient(t, reg, msgr.Config{KeepaliveInterval: -1, KeepaliveTimeout: 200 * time.Millisecond})
		start := time.Now()
		conn, _ := c.Connect(s.ListenAddrs()[0])
		select {
		case rc := <-col.reset:
			if rc != conn {
				t.Fatal("reset for another connection")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("silent peer not detected")
		}
		// In virtual time the handshake takes no time: the fault comes
		// after the 200ms timeout, at the timer's next check.
		t.Logf("detected after %v", time.Since(start))
		if d := time.Since(start); d <= 200*time.Millisecond || d > 400*time.Millisecond {
			t.Fatalf("silent peer detected after %v, want after 200ms and within 400ms", d)
		}
		if err := conn.Err(); !errors.Is(err, msgr.ErrKeepaliveTimeout) {
			t.Fatalf("close reason %v", err)
		}
	})
}

func TestShutdownNoLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		s, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD}, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		s.SetDefaultPolicy(msgr.StatelessServer())
		if err := s.Bind("tcp://127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		_ = s.Start()
		c, err := msgr.New(msgr.Config{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Start()
		for i := 0; i < 3; i++ {
			conn, _ := c.Connect(s.ListenAddrs()[0])
			_ = conn.Send(msg.New(testType))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := conn.Ready(ctx); err != nil {
				t.Fatal(err)
			}
			cancel()
			conn.MarkDown()
		}
		conn, _ := c.Connect(s.ListenAddrs()[0])
		_ = conn.Ready(context.Background())
		c.Shutdown()
		s.Shutdown()
	}()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEchoSmallSocketBuffers: with socket buffers fixed far below the
// receive low-water mark the reader raises for large data (1 MiB), large
// messages still arrive whole — Linux caps the mark at half a locked
// receive buffer, so the reader is woken and never waits for bytes that
// cannot fit.
// TestEchoMixedDataPieces sends messages whose data mixes small pieces
// (copied into the write buffer) with large ones written from their own
// buffers, whose data CRC the writer computes in stages as each piece of
// at most 256 KiB is written; several such messages share a batch. The
// receiver checks every CRC (a wrong one fails the connection) and the
// echo is compared byte for byte.
func TestEchoMixedDataPieces(t *testing.T) {
	s := echoServer(t, nil, "tcp://127.0.0.1:0", msgr.Config{})
	c, col := newClient(t, nil, msgr.Config{})
	conn, err := c.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	shapes := [][]int{
		{100, 600 << 10, 3 << 10, 20 << 10, 1<<20 + 5, 7},
		{256 << 10},
		{256<<10 + 64<<10 - 1},
		{256<<10 + 64<<10, 1},
		{16 << 10, 16 << 10, 16 << 10},
		{1, 2 << 20, 1 << 20, 5},
		{9, 16<<10 - 1, 300 << 10},
	}
	want := make([][]byte, len(shapes))
	for i, shape := range shapes {
		m := msg.New(testType)
		m.Header.Tid = uint64(i + 1)
		for k, n := range shape {
			p := make([]byte, n)
			for j := range p {
				p[j] = byte(j*31 + k*7 + i)
			}
			m.Data = append(m.Data, p)
			want[i] = append(want[i], p...)
		}
		if err := conn.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	for i := range shapes {
		r := recv(t, col.ch)
		if r.Header.Tid != uint64(i+1) || !bytes.Equal(r.Data.Bytes(), want[i]) {
			t.Fatalf("message %d: tid %d, data intact %v", i+1, r.Header.Tid, bytes.Equal(r.Data.Bytes(), want[i]))
		}
	}
}

// TestNoDataCRC runs messages of every read path (small, CRC computed as
// it lands, raised low-water mark, several pieces) between messengers
// that do and do not set NoDataCRC: data CRCs are left out only when both
// do (Conn.DataCRC), and every message arrives intact
// either way.
func TestNoDataCRC(t *testing.T) {
	for _, tc := range []struct{ client, server, want bool }{
		{true, true, false}, {true, false, true}, {false, true, true},
	} {
		t.Run(fmt.Sprintf("client=%v/server=%v", tc.client, tc.server), func(t *testing.T) {
			s := echoServer(t, nil, "tcp://127.0.0.1:0", msgr.Config{NoDataCRC: tc.server})
			c, col := newClient(t, nil, msgr.Config{NoDataCRC: tc.client})
			conn, err := c.Connect(s.ListenAddrs()[0])
			if err != nil {
				t.Fatal(err)
			}
			for i, shape := range [][]int{{100}, {70 << 10}, {300 << 10}, {5, 2 << 20, 17 << 10, 3}} {
				m := msg.New(testType)
				m.Header.Tid = uint64(i + 1)
				var want []byte
				for k, n := range shape {
					p := make([]byte, n)
					for j := range p {
						p[j] = byte(j*7 + k + i)
					}
					m.Data = append(m.Data, p)
					want = append(want, p...)
				}
				if err := conn.Send(m); err != nil {
					t.Fatal(err)
				}
				r := recv(t, col.ch)
				if r.Header.Tid != uint64(i+1) || !bytes.Equal(r.Data.Bytes(), want) {
					t.Fatalf("message %d: tid %d, data intact %v", i+1, r.Header.Tid, bytes.Equal(r.Data.Bytes(), want))
				}
			}
			if got := conn.DataCRC(); got != tc.want {
				t.Fatalf("DataCRC %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEchoSmallSocketBuffers(t *testing.T) {
	reg := transport.NewRegistry(transport.NewTCP(transport.TCPOptions{ReadBuffer: 64 << 10, WriteBuffer: 64 << 10}))
	s := echoServer(t, reg, "tcp://127.0.0.1:0", msgr.Config{})
	c, col := newClient(t, reg, msgr.Config{})
	conn, err := c.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{300 << 10, 1 << 20, 3<<20 + 7, 8 << 20} {
		data := make([]byte, n)
		for j := range data {
			data[j] = byte(j*13 + i)
		}
		m := msg.New(testType)
		m.Header.Tid = uint64(i + 1)
		m.Data = msg.Buffers{data}
		if err := conn.Send(m); err != nil {
			t.Fatal(err)
		}
		r := recv(t, col.ch)
		if r.Header.Tid != uint64(i+1) || !bytes.Equal(r.Data.Bytes(), data) {
			t.Fatalf("size %d: tid %d, data intact %v", n, r.Header.Tid, bytes.Equal(r.Data.Bytes(), data))
		}
	}
}

package msgr_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// stuckReader is a client dispatcher that never returns from delivering
// a reply: its connection's reader goroutine stops reading, as a peer
// that does not read its replies.
type stuckReader struct{ release chan struct{} }

func (s *stuckReader) CanFastDispatch(*msg.Message) bool { return true }
func (s *stuckReader) FastDispatch(m *msg.Message)       { <-s.release; m.Done() }
func (s *stuckReader) Dispatch(m *msg.Message) bool      { s.FastDispatch(m); return true }

// TestSlowConsumerBounded: a peer sends 64 KiB messages to an echo
// server and never reads the echoes. The server stops reading from it
// once it holds more than its share of the send budget (its queues
// never pass the budget), is not faulted by its keepalive timeout
// meanwhile, and closes it as a slow consumer; an honest client on
// another connection is answered throughout.
func TestSlowConsumerBounded(t *testing.T) {
	const budget = 16 << 20
	scfg := msgr.Config{SendBudget: budget, SlowConsumerTimeout: 1500 * time.Millisecond,
		KeepaliveInterval: 200 * time.Millisecond, KeepaliveTimeout: 500 * time.Millisecond}
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", scfg)

	hconn := stuckClient(t, s.ListenAddrs()[0])

	honest, col := newClient(t, transport.Default, msgr.Config{})
	oconn, err := honest.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}

	// The flood: 600 × 64 KiB (37.5 MiB) queued at once on the hostile
	// side; its writer pushes them as fast as the server reads.
	floodEchoes(t, hconn)

	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			var n int64
			for _, c := range s.Conns() {
				n += int64(c.QueuedBytes())
			}
			if n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()

	deadline := time.Now().Add(20 * time.Second)
	snap := func(name string) float64 { sn := s.Metrics().Snapshot(); return sn.Total(name) }
	for tid := uint64(1); snap("ferry_msgr_slow_consumer_closes") == 0; tid++ {
		if time.Now().After(deadline) {
			t.Fatalf("no slow-consumer close within 20 s (read pauses %v, faults %v)",
				snap("ferry_msgr_read_pauses"), snap("ferry_msgr_faults"))
		}
		m := msg.New(testType)
		m.Header.Tid = tid
		if err := oconn.Send(m); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		r := recv(t, col.ch)
		if r.Header.Tid != tid {
			t.Fatalf("honest echo tid %d, want %d", r.Header.Tid, tid)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("honest echo took %v during the flood", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	<-sampled
	sn := s.Metrics().Snapshot()
	if v := sn.Total("ferry_msgr_read_pauses"); v < 1 {
		t.Fatalf("read_pauses %v: the server never stopped reading", v)
	}
	if v, _ := sn.Value("ferry_msgr_faults", "keepalive_timeout"); v != 0 {
		t.Fatalf("%v keepalive timeouts: a paused connection was faulted for its own silence", v)
	}
	if p := peak.Load(); p > budget {
		t.Fatalf("the server's queues held %d bytes, over the %d budget", p, budget)
	}
	t.Logf("peak queued %.1f MiB of a %d MiB budget", float64(peak.Load())/(1<<20), budget>>20)
}

// TestSlowLosslessPeerSlowedNotClosed: a lossless peer sends 1000 × 64
// KiB to an echo server with an 8 MiB send budget and reads its echoes
// slowly: nothing until the server has stopped reading from it (its
// queue passed its share), then 0.5 ms a message (its dispatch throttle
// is 1 MiB, so its reader stops while the dispatcher is behind). The
// peer reads, so it is never closed as a slow consumer, and every echo
// arrives once, in order.
func TestSlowLosslessPeerSlowedNotClosed(t *testing.T) {
	const n = 1000
	// The echoes are sent by the server's dispatch goroutine: its
	// dispatch throttle (1 MiB) bounds what it still answers once the
	// reader has paused, so the queue never reaches the budget, where
	// Send would fail (ErrSendBudget) and the echo server drop an echo.
	scfg := msgr.Config{SendBudget: 8 << 20, SlowConsumerTimeout: 2 * time.Second, DispatchThrottleBytes: 1 << 20,
		KeepaliveInterval: 100 * time.Millisecond, KeepaliveTimeout: 400 * time.Millisecond}
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", scfg)
	s.SetDefaultPolicy(msgr.LosslessPeer())

	cm, err := msgr.New(msgr.Config{Transports: transport.Default, Logger: quietLogger(), DispatchThrottleBytes: 1 << 20,
		KeepaliveInterval: 100 * time.Millisecond, KeepaliveTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cm.SetDefaultPolicy(msgr.LosslessPeer())
	got := make(chan uint64, n)
	gate := make(chan struct{})
	cm.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		<-gate
		time.Sleep(500 * time.Microsecond) // a slow consumer, but a live one
		got <- m.Header.Tid
		m.Done()
		return true
	}))
	if err := cm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cm.Shutdown)
	c, err := cm.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 64<<10)
	for i := range n {
		m := msg.New(testType)
		m.Header.Tid = uint64(i)
		m.Data = msg.Buffers{data}
		if err := c.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	snap := func(name string) float64 { sn := s.Metrics().Snapshot(); return sn.Total(name) }
	for deadline := time.Now().Add(10 * time.Second); snap("ferry_msgr_read_pauses") == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the server never stopped reading from the peer")
		}
		time.Sleep(time.Millisecond)
	}
	close(gate)
	for want := range uint64(n) {
		select {
		case tid := <-got:
			if tid != want {
				t.Fatalf("echo %d arrived as number %d", tid, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("echo %d did not arrive", want)
		}
	}
	sn := s.Metrics().Snapshot()
	if v := sn.Total("ferry_msgr_slow_consumer_closes"); v != 0 {
		t.Errorf("slow_consumer_closes %v: a peer that reads was closed", v)
	}
	if v := sn.Total("ferry_msgr_faults"); v != 0 {
		t.Errorf("faults %v: the connection was faulted", v)
	}
	if r := c.Reconnects(); r != 0 {
		t.Errorf("%d reconnects", r)
	}
}

// TestSlowConsumerClosedUnpaused: with no send budget nobody is paused,
// but a connection with something queued of which nothing is written
// for SlowConsumerTimeout is closed as a slow consumer all the same.
func TestSlowConsumerClosedUnpaused(t *testing.T) {
	scfg := msgr.Config{SendBudget: -1, OutQueueBytes: 16 << 20, SlowConsumerTimeout: 500 * time.Millisecond}
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", scfg)
	floodEchoes(t, stuckClient(t, s.ListenAddrs()[0]))
	snap := func(name string) float64 { sn := s.Metrics().Snapshot(); return sn.Total(name) }
	for deadline := time.Now().Add(15 * time.Second); snap("ferry_msgr_slow_consumer_closes") == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no slow-consumer close within 15 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v := snap("ferry_msgr_read_pauses"); v != 0 {
		t.Fatalf("read_pauses %v without a send budget", v)
	}
}

// stuckClient connects to addr from a messenger whose dispatcher never
// returns until the test ends (stuckReader), so the echoes it is sent
// pile up in the server's out queue, and returns the connection.
func stuckClient(t *testing.T, addr string) *msgr.Conn {
	t.Helper()
	hostile, err := msgr.New(msgr.Config{Transports: transport.Default, Logger: quietLogger(),
		KeepaliveInterval: time.Hour, KeepaliveTimeout: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	stuck := &stuckReader{release: make(chan struct{})}
	hostile.AddDispatcherTail(stuck)
	if err := hostile.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hostile.Shutdown)
	t.Cleanup(func() { close(stuck.release) }) // runs first: the dispatcher returns before Shutdown
	c, err := hostile.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// floodEchoes queues 600 messages of 64 KiB (37.5 MiB) on c at once.
func floodEchoes(t *testing.T, c *msgr.Conn) {
	t.Helper()
	data := make([]byte, 64<<10)
	for i := range 600 {
		m := msg.New(testType)
		m.Header.Tid = uint64(i)
		m.Data = msg.Buffers{data}
		if err := c.Send(m); err != nil {
			t.Fatal(err)
		}
	}
}

package msgr_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/inproc"
)

// fakeClock is a msgr.Clock that moves only when Advance is called.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c  *fakeClock
	ch chan time.Time
	at time.Time
	on bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) msgr.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1), at: c.now.Add(d), on: true}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock d on and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	var due []*fakeTimer
	for _, t := range c.timers {
		if t.on && !t.at.After(now) {
			t.on = false
			due = append(due, t)
		}
	}
	c.mu.Unlock()
	for _, t := range due {
		select {
		case t.ch <- now:
		default:
		}
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.on
	t.on = false
	return was
}

func (t *fakeTimer) Reset(d time.Duration) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.at, t.on = t.c.now.Add(d), true
}

// TestInjectedClockKeepaliveTimeout: the keepalive timeout is decided on
// Config.Clock. The client's clock jumps past the timeout without any
// real time passing, and its socket is faulted for silence at its next
// timer tick although the server is answering; with the clock still,
// nothing times out however long the test waits.
func TestInjectedClockKeepaliveTimeout(t *testing.T) {
	reg := transport.NewRegistry(inproc.NewNetwork())
	s := echoServer(t, reg, "inproc://", msgr.Config{})
	clk := newFakeClock()
	c, col := newClient(t, reg, msgr.Config{Clock: clk, KeepaliveInterval: 5 * time.Second, KeepaliveTimeout: 20 * time.Second})
	conn, err := c.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	m := msg.New(testType)
	if err := conn.Send(m); err != nil {
		t.Fatal(err)
	}
	recv(t, col.ch)
	time.Sleep(50 * time.Millisecond) // real time: the fake clock stands still
	if st := conn.State(); st == "closed" {
		t.Fatalf("connection %s with the clock still: %v", st, conn.Err())
	}
	clk.Advance(30 * time.Second) // fires the timer loop's tick at now+30s
	select {
	case <-conn.Done():
	case <-time.After(10 * time.Second):
		// On the system clock the timeout would be 20 s away.
		t.Fatal("no keepalive timeout after the clock moved past it")
	}
	if err := conn.Err(); !errors.Is(err, msgr.ErrKeepaliveTimeout) {
		t.Fatalf("connection closed with %v, want ErrKeepaliveTimeout", err)
	}
}

// TestCorkedInlineWriteStamps: a message sent corked and written by the
// Uncork after the clock moved on stamps the slow-consumer clock at the
// write, not only at the Send (an inline write skips its own stamp only
// when it follows the Send's at once).
func TestCorkedInlineWriteStamps(t *testing.T) {
	reg := transport.Default
	s := echoServer(t, reg, "tcp://127.0.0.1:0", msgr.Config{})
	clk := newFakeClock()
	c, col := newClient(t, reg, msgr.Config{Clock: clk, KeepaliveInterval: -1, KeepaliveTimeout: -1})
	conn, err := c.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Send(msg.New(testType)); err != nil {
		t.Fatal(err)
	}
	recv(t, col.ch) // open, and caught up
	conn.Cork()
	if err := conn.Send(msg.New(testType)); err != nil {
		t.Fatal(err)
	}
	sent := clk.Now().UnixNano()
	if got := conn.LastWrite(); got != sent {
		t.Fatalf("lastWrite %d after the Send, want %d", got, sent)
	}
	clk.Advance(10 * time.Second)
	conn.Uncork()
	recv(t, col.ch)
	if got, want := conn.LastWrite(), clk.Now().UnixNano(); got != want {
		t.Fatalf("lastWrite %d after the Uncork wrote, want %d (the Send's was %d)", got, want, sent)
	}
}

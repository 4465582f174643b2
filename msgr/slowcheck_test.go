package msgr

import (
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
)

// stepClock is a Clock whose Now moves only when the test moves it.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *stepClock) NewTimer(d time.Duration) Timer { return SystemClock{}.NewTimer(d) }

// TestSlowConsumerCheckSeesSendStamp: a connection that last wrote an
// hour ago and sends just as the slow-consumer check runs (between the
// check's first look at when it last wrote and its look at the queue)
// is not closed as a slow consumer: its Send stamped the write side as
// caught up until then.
func TestSlowConsumerCheckSeesSendStamp(t *testing.T) {
	clk := &stepClock{now: time.Unix(1_700_000_000, 0)}
	m, err := New(Config{Clock: clk, SlowConsumerTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	m.mu.Lock()
	c := m.newConn(true, m.defaultPolicy)
	m.mu.Unlock()
	c.lastWrite.Store(clk.Now().UnixNano())
	clk.advance(time.Hour)

	testHookSlowConsumerCheck = func() {
		if err := c.Send(msg.New(0x7f01)); err != nil {
			t.Errorf("Send: %v", err)
		}
	}
	defer func() { testHookSlowConsumerCheck = nil }()
	if c.closeIfSlowConsumer(clk.Now(), nil) {
		t.Fatal("an idle connection that had just sent was closed as a slow consumer")
	}
	if q := c.Queued(); q != 1 {
		t.Fatalf("%d messages queued, want the one sent", q)
	}
}

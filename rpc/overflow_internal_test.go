package rpc

import (
	"github.com/ferrymsg/ferry/msg"
	"io"
	"log/slog"
	"testing"
)

func reviewCtx(t *testing.T, limit int) *Context {
	t.Helper()
	in, err := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Bulk: BulkOptions{OverflowLimit: limit}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	c, err := in.NewContext(ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The fake waiters below cannot be answered: drop them before Close.
	t.Cleanup(func() { c.bmu.Lock(); c.ovf.Close(nil); c.bmu.Unlock() })
	return c
}

// connKey stands for a *msgr.Conn (a distinct key per connection).
type connKey struct {
	msg.Connection
	_ byte
}

// A connection that was admitted before is not overtaken by a stream of
// new connections (a connection never admitted used to have the oldest
// turn), and only connections with requests waiting keep a turn (the
// map of turns grew with every connection admitted while others
// waited).
func TestOvfNewConnsDoNotOvertake(t *testing.T) {
	const limit = 1 << 10
	c := reviewCtx(t, limit)
	mkOn := func(k msg.Connection) *Incoming {
		r := &Incoming{in: c.in, c: c}
		r.conn = k
		return r
	}
	old := &connKey{}
	admitted := false
	noop := func() {}
	c.admitOverflow(mkOn(&connKey{}), limit, noop)                // holds the budget
	c.admitOverflow(mkOn(old), limit, noop)                       // waits
	c.admitOverflow(mkOn(&connKey{}), limit, noop)                // keeps the queue busy
	c.overflowDone(nil, limit)                                    // old admitted: it has a turn now
	c.admitOverflow(mkOn(old), limit, func() { admitted = true }) // old's second request
	overtaken := 0
	for range 100 {
		c.admitOverflow(mkOn(&connKey{}), limit, noop) // a new connection
		c.overflowDone(nil, limit)
		if admitted {
			break
		}
		overtaken++
	}
	if n, w := c.ovf.Peers(), c.ovf.Waiting(); n > w {
		t.Fatalf("%d connections kept a turn while %d requests wait", n, w)
	}
	if overtaken > 2 {
		t.Fatalf("old connection's request overtaken by %d newer connections", overtaken)
	}
}

package msgr1

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
)

// realConn drives a client engine over a socket to a real Ceph daemon:
// the test does the I/O, the engine stays pure.
type realConn struct {
	t       *testing.T
	nc      net.Conn
	e       *Engine
	seq     uint64
	log     string // the daemon's log, named in failures
	pending []Event
}

// dialV1 connects cfg's engine to addr ("IP:PORT") and runs the handshake.
func dialV1(t *testing.T, addr string, cfg Config, log string) *realConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(60 * time.Second))
	c := &realConn{t: t, nc: nc, e: NewEngine(cfg), log: log}
	c.e.Start()
	c.flush()
	for !c.e.Ready() {
		c.pending = append(c.pending, c.step()...)
	}
	return c
}

func (c *realConn) flush() {
	if out := c.e.Output(); len(out) > 0 {
		if _, err := c.nc.Write(out); err != nil {
			c.t.Fatal(err)
		}
	}
}

// read feeds the engine the next piece it asks for.
func (c *realConn) read() ([]Event, error) {
	n, _ := c.e.Need()
	if n == 0 {
		return nil, c.e.Err()
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(c.nc, p); err != nil {
		return nil, err
	}
	evs, err := c.e.Feed(p)
	c.flush()
	return evs, err
}

func (c *realConn) step() []Event {
	c.t.Helper()
	evs, err := c.read()
	if err != nil {
		c.t.Fatalf("read: %v (log %s)", err, c.log)
	}
	return evs
}

// send numbers m and sends it.
func (c *realConn) send(m *msg.Message) {
	c.t.Helper()
	c.seq++
	m.Header.Seq = c.seq
	if _, err := c.nc.Write(c.e.AppendMessage(nil, m)); err != nil {
		c.t.Fatal(err)
	}
}

// await returns the next message of type typ, answering keepalives and
// handing every other event to other (if set).
func (c *realConn) await(typ uint16, other func(Event)) *msg.Message {
	c.t.Helper()
	for {
		for len(c.pending) == 0 {
			c.pending = c.step()
		}
		ev := c.pending[0]
		c.pending = c.pending[1:]
		switch {
		case ev.Kind == EvMessage && ev.Msg != nil && ev.Msg.Header.Type == typ:
			return ev.Msg
		case ev.Kind == EvKeepalive && !ev.Bare:
			if _, err := c.nc.Write(c.e.AppendKeepaliveAck(nil, ev.Stamp)); err != nil {
				c.t.Fatal(err)
			}
		case other != nil:
			other(ev)
		}
	}
}

// closedByPeer reads until the daemon closes the connection (true), or
// gives up after d.
func (c *realConn) closedByPeer(d time.Duration) bool {
	_ = c.nc.SetReadDeadline(time.Now().Add(d))
	for {
		_, err := c.read()
		if err == nil {
			continue
		}
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
}

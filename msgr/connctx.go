package msgr

import (
	"context"
	"time"
)

// connCtx is a connection's context, for the waits it makes on its own
// behalf (dispatch queue, throttles, the send budget): done when the
// connection closes, which Shutdown does for every connection it has
// registered (newConn runs under m.mu after a check of m.stopped, and
// Shutdown lists the connections under the same lock), so it ends at
// Shutdown as a child of the messenger's context would. It is the Conn's
// done channel rather than a context.WithCancel of the messenger's: that
// cost each connection a cancelCtx, its Done channel and an entry in the
// parent's map of children, about 0.4 KiB of an idle connection's
// 12 KiB (BenchmarkIdleConnections). Nothing derives a context from it
// (a child of a context the context package does not know is watched by
// a goroutine of its own).
type connCtx struct{ c *Conn }

// Deadline reports no deadline.
func (connCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done is closed when the connection closes.
func (x connCtx) Done() <-chan struct{} { return x.c.done }

// Err is context.Canceled once the connection has closed, else nil.
func (x connCtx) Err() error {
	select {
	case <-x.c.done:
		return context.Canceled
	default:
		return nil
	}
}

// Value is nil: the messenger's context, its parent in spirit, carries
// no values either.
func (connCtx) Value(any) any { return nil }

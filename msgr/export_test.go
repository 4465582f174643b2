package msgr

import (
	"context"
	"time"
)

// SetParkAfter changes how long a connection idles before its reader
// gives its read buffer back, for tests; it returns a function restoring
// the old value.
func SetParkAfter(d time.Duration) func() {
	old := parkAfter.Swap(int64(d))
	return func() { parkAfter.Store(old) }
}

// ReaderParked reports whether c's reader waits without a read buffer.
func (c *Conn) ReaderParked() bool {
	c.mu.Lock()
	r := c.run
	c.mu.Unlock()
	if r == nil {
		return false
	}
	r.role.mu.Lock()
	defer r.role.mu.Unlock()
	return r.role.parked
}

// ParkWithoutPoller makes parked readers wait on a goroutine of their
// own (the path of systems without the poller), for tests; it returns a
// function restoring the poller.
func ParkWithoutPoller() func() {
	return poller.setDisabled(true)
}

// ReadBufGrows returns how many readers have taken a large read buffer.
func ReadBufGrows() int64 { return readBufGrows.Load() }

// Queued reports how many messages wait in c's out queue.
func (c *Conn) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.outq.n
}

// WaitContext is the context c's own waits use (connCtx), for tests.
func (c *Conn) WaitContext() context.Context { return c.ctx }

// LastWrite is c's slow-consumer clock: when (unix ns, Config.Clock) it
// last wrote with progress or a Send found its queue empty.
func (c *Conn) LastWrite() int64 { return c.lastWrite.Load() }

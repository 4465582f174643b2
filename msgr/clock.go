package msgr

import (
	"sync/atomic"
	"time"
)

// Clock is the messenger's source of time: the system clock by default,
// a fake one in tests (Config.Clock). It decides keepalives and their
// timeouts, reconnect backoff, handshake-slot eviction and the stamps
// on received messages. Deadlines the kernel enforces (the handshake's
// socket deadline) and the short scheduling waits of the reader role
// stay on the system clock.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a Clock's timer.
type Timer interface {
	// C delivers the time when the timer fires.
	C() <-chan time.Time
	// Stop stops the timer; it reports whether it was running.
	Stop() bool
	// Reset makes the timer fire after d, as time.Timer.Reset.
	Reset(d time.Duration)
}

// SystemClock is the system's clock.
type SystemClock struct{}

// Now returns the current time, with a monotonic reading as time.Now's.
// It reads the clock once where time.Now reads it twice (wall and
// monotonic; each reading is an lfence and rdtsc, 25 ns alone and 60-150
// ns inside the message path on this VM, where clock readings were 5-6%
// of a client's CPU): the wall time is that of a time.Now taken at most
// sysResync ago plus the monotonic time since. The two clocks advance at
// the same rate (NTP slews both); a step of the wall clock shows within
// sysResync.
func (SystemClock) Now() time.Time {
	if b := sysBase.Load(); b != nil {
		if d := time.Since(*b); d >= 0 && d < sysResync {
			return b.Add(d)
		}
	}
	t := time.Now()
	sysBase.Store(&t)
	return t
}

// sysBase is SystemClock.Now's last time.Now, re-read every sysResync.
var sysBase atomic.Pointer[time.Time]

// sysResync is how long SystemClock.Now derives the wall time from one
// time.Now: wall-clock steps (settimeofday, an NTP step) show this late.
const sysResync = 50 * time.Millisecond

// NewTimer returns a time.Timer.
func (SystemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time   { return t.t.C }
func (t sysTimer) Stop() bool            { return t.t.Stop() }
func (t sysTimer) Reset(d time.Duration) { t.t.Reset(d) }

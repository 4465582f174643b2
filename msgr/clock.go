package msgr

import "time"

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

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer returns a time.Timer.
func (SystemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time   { return t.t.C }
func (t sysTimer) Stop() bool            { return t.t.Stop() }
func (t sysTimer) Reset(d time.Duration) { t.t.Reset(d) }

package msgr_test

import (
	"testing"
	"testing/synctest"
	"time"
)

// Tests of in-process code (the inproc transport, net.Pipe) whose outcome
// depends on time run in synctest bubbles: their timers (backoff,
// keepalives, deadlines) run in virtual time, and synctest.Wait returns
// once every goroutine of the bubble is blocked, so a state observed then
// is settled rather than a guess after a sleep. Real sockets cannot be
// used in a bubble (a goroutine in a socket read is not durably blocked),
// so TCP tests keep real time.

// eventually checks cond each time every goroutine of the bubble is
// blocked, letting virtual time advance by step between checks, and fails
// once d of virtual time has passed. Call it in a bubble.
func eventually(t *testing.T, what string, d, step time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		synctest.Wait()
		if cond() {
			return
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("no %s after %v of virtual time", what, d)
		}
		time.Sleep(step)
	}
}

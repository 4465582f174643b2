package msgr

import (
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ferrymsg/ferry/msg"
)

// ErrInjectedFailure is the reason recorded for a socket shut down by
// Inject.SocketFailures.
var ErrInjectedFailure = errors.New("msgr: injected socket failure")

// injectHit reports a 1-in-n event.
func injectHit(n int) bool { return rand.IntN(n) == 0 }

// injectDelay holds a received message back when Inject says so. It runs
// on the connection's reader, so later messages wait behind it and the
// order is kept.
func (m *Messenger) injectDelay(c *Conn, mm *msg.Message) {
	in := &m.cfg.Inject
	if in.DelayProbability <= 0 || in.DelayMax <= 0 || !slices.Contains(in.DelayTypes, mm.Header.Src.Type) {
		return
	}
	if rand.Float64() >= in.DelayProbability {
		return
	}
	t := time.NewTimer(time.Duration(rand.Int64N(int64(in.DelayMax))))
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.ctx.Done():
	}
}

// injectInternalDelay sleeps at a race point when Inject says so.
func (m *Messenger) injectInternalDelay() {
	if d := m.cfg.Inject.InternalDelays; d > 0 {
		time.Sleep(time.Duration(rand.Int64N(int64(d))))
	}
}

//go:build !linux

package msgr

// idlePoller has no process-wide set off Linux: a parked reader waits on
// a goroutine of its own (waitParked).
type idlePoller struct{}

var poller idlePoller

func (idlePoller) watch(*socketRun) bool { return false }

func (idlePoller) forget(int32) {}

func (idlePoller) setDisabled(bool) func() { return func() {} }

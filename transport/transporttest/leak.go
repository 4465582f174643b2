package transporttest

import (
	"bytes"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// CheckGoroutines records the goroutines running now and, when t's test
// and its subtests are over, fails t if any goroutine started since is
// still running after a grace period of a few seconds (polled, not
// slept). Call it first in a test so that its cleanup runs last. Tests
// that use it must not run in parallel with other tests.
func CheckGoroutines(t testing.TB) {
	t.Helper()
	before := goroutineIDs(nil)
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			leaked := goroutineIDs(before)
			if len(leaked) == 0 {
				return
			}
			if time.Now().After(deadline) {
				var stacks [][]byte
				for _, g := range leaked {
					stacks = append(stacks, g)
				}
				t.Errorf("%d goroutine(s) leaked:\n%s", len(leaked), bytes.Join(stacks, []byte("\n\n")))
				return
			}
			runtime.Gosched()
			time.Sleep(time.Millisecond) // poll interval while goroutines finish
		}
	})
}

// goroutineIDs returns the stacks of all goroutines, keyed by ID, minus
// those in skip. With a nil skip it returns all of them.
func goroutineIDs(skip map[uint64][]byte) map[uint64][]byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := make(map[uint64][]byte)
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		// "goroutine 12 [running]:"
		rest, ok := bytes.CutPrefix(g, []byte("goroutine "))
		if !ok {
			continue
		}
		i := bytes.IndexByte(rest, ' ')
		if i < 0 {
			continue
		}
		id, err := strconv.ParseUint(string(rest[:i]), 10, 64)
		if err != nil {
			continue
		}
		if _, old := skip[id]; old {
			continue
		}
		out[id] = g
	}
	return out
}

//go:build !linux

package msgrbench

import (
	"errors"
	"syscall"
)

// ccControl fails if FERRY_BENCH_CC is set: only Linux chooses the
// congestion control per socket.
func ccControl(_, _ string, _ syscall.RawConn) error {
	if BenchCC() != "" {
		return errors.New("FERRY_BENCH_CC: only on Linux")
	}
	return nil
}

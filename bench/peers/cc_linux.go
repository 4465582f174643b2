package peers

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// ccControl is a net.Dialer / net.ListenConfig Control function that sets
// BenchCC on the socket.
func ccControl(_, _ string, rc syscall.RawConn) error {
	cc := BenchCC()
	if cc == "" {
		return nil
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
	}); err != nil {
		return err
	}
	return serr
}

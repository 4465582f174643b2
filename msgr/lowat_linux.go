package msgr

import (
	"strings"

	"golang.org/x/sys/unix"
)

// lowatPays reports whether raising the receive low-water mark of fd can
// save wake-ups (see lowat): false for a TCP socket whose congestion
// control does not pace its sender, whose data then lands in bursts on a
// fast path; true for one that does (BBR) and for sockets that are not
// TCP (TCP_CONGESTION fails), where the mark keeps its earlier use.
func lowatPays(fd uintptr) bool {
	name, err := unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	if err != nil {
		return true
	}
	return strings.HasPrefix(name, "bbr")
}

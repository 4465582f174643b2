package transport

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// setCongestion sets the socket's TCP congestion control (TCP_CONGESTION)
// to name. An algorithm the kernel does not have (or, unprivileged, one
// not in net.ipv4.tcp_allowed_congestion_control) fails with ErrBadConfig;
// another error (EBUSY while its module unloads) does not.
func setCongestion(rc syscall.RawConn, name string) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
	}); err != nil {
		return err
	}
	switch {
	case serr == nil:
		return nil
	case errors.Is(serr, unix.ENOENT), errors.Is(serr, unix.EPERM):
		// Not in this kernel, or not allowed to this process: no
		// retry can change that.
		return fmt.Errorf("%w: tcp congestion control %q: %w", ErrBadConfig, name, serr)
	}
	return fmt.Errorf("tcp congestion control %q: %w", name, serr) // EBUSY, ENOMEM...: may pass
}

// Congestion returns the TCP congestion control of c, a TCP connection.
func Congestion(c Conn) (string, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return "", fmt.Errorf("%w: %T is not a socket", ErrUnsupported, c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return "", err
	}
	var name string
	var serr error
	if err := rc.Control(func(fd uintptr) {
		name, serr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}); err != nil {
		return "", err
	}
	return name, serr
}

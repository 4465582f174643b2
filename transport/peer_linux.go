//go:build linux

package transport

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// unixPeerPID reads the peer's credentials of a Unix-domain socket
// (SO_PEERCRED: the process that connected, or that listened, as the
// kernel recorded it then).
func unixPeerPID(c *net.UnixConn) (int, error) {
	return SocketPeerPID(c)
}

// SocketPeerPID returns the process ID the kernel recorded for the peer
// of a connected Unix-domain socket (SO_PEERCRED). It is 0, and the error
// matches ErrUnsupported, when the peer's process is not visible from
// this process's PID namespace. Transports built on Unix sockets use it
// to implement PeerProcess.
func SocketPeerPID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, os.NewSyscallError("getsockopt SO_PEERCRED", serr)
	}
	if cred.Pid <= 0 {
		return 0, fmt.Errorf("%w: the peer's process is not in this PID namespace", ErrUnsupported)
	}
	return int(cred.Pid), nil
}

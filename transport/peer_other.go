//go:build !linux

package transport

import (
	"fmt"
	"net"
)

func unixPeerPID(*net.UnixConn) (int, error) {
	return 0, fmt.Errorf("%w: peer credentials on this system", ErrUnsupported)
}

// SocketPeerPID returns the process ID of a Unix-domain socket's peer;
// only Linux supports it, elsewhere the error matches ErrUnsupported.
func SocketPeerPID(c *net.UnixConn) (int, error) { return unixPeerPID(c) }

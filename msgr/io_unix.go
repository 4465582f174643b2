//go:build unix

package msgr

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawSockets: the reader sets SO_RCVLOWAT and the writer calls writev(2)
// on the socket itself (RawConn) rather than through net.Conn.
const rawSockets = true

// iovec is one buffer of a writev(2).
type iovec = unix.Iovec

func makeIovec(p []byte) iovec {
	v := unix.Iovec{Base: unsafe.SliceData(p)}
	v.SetLen(len(p))
	return v
}

// writevFD is one writev(2) of iov on fd (non-blocking: it never
// sleeps), made as a raw system call most of the time (see rawSyscalls).
func writevFD(fd uintptr, iov []iovec) (int, error) {
	p, n := uintptr(unsafe.Pointer(unsafe.SliceData(iov))), uintptr(len(iov))
	var r uintptr
	var errno syscall.Errno
	for {
		if raw() {
			r, _, errno = unix.RawSyscall(unix.SYS_WRITEV, fd, p, n)
		} else {
			r, _, errno = unix.Syscall(unix.SYS_WRITEV, fd, p, n)
		}
		switch errno {
		case 0:
			return int(r), nil
		case unix.EINTR:
			continue // nothing was written
		}
		return 0, errno
	}
}

// writeFD is one write(2) of p on fd: mostly a raw system call
// (rawSyscalls), otherwise, and always in race-detector builds, through
// package syscall, whose race annotations order it before the peer's
// read.
func writeFD(fd uintptr, p []byte) (int, error) {
	if !raw() {
		return syscall.Write(int(fd), p)
	}
	for {
		r, _, errno := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
		switch errno {
		case 0:
			return int(r), nil
		case unix.EINTR:
			continue // nothing was written
		}
		return 0, errno
	}
}

// setRcvLowat sets the socket's receive low-water mark.
func setRcvLowat(fd uintptr, v int) {
	_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, v)
}

// readableFD is the function handed to RawConn.Read to wait until fd has
// something to read (or an error or end of file to report) without
// reading it: a one-byte MSG_PEEK that would block asks for the wait.
func readableFD(fd uintptr) bool {
	var b [1]byte
	_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	return err != unix.EAGAIN && err != unix.EINTR
}

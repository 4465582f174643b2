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

// sockCall is one system call trap(a1, a2, a3) on a non-blocking
// socket, which never sleeps in the kernel: raw when raw() allows (see
// rawSyscalls), else through the path that tells the scheduler. EINTR,
// with nothing transferred, is retried.
func sockCall(trap, a1, a2, a3 uintptr) (int, syscall.Errno) {
	for {
		var r uintptr
		var errno syscall.Errno
		if raw() {
			r, _, errno = unix.RawSyscall(trap, a1, a2, a3)
		} else {
			r, _, errno = unix.Syscall(trap, a1, a2, a3)
		}
		if errno != unix.EINTR {
			return int(r), errno
		}
	}
}

// writevFD is one writev(2) of iov on fd (sockCall).
func writevFD(fd uintptr, iov []iovec) (int, error) {
	n, errno := sockCall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(unsafe.SliceData(iov))), uintptr(len(iov)))
	if errno != 0 {
		return 0, errno
	}
	return n, nil
}

// writeFD is one write(2) of p on fd (sockCall); in race-detector builds
// through package syscall, whose race annotations order it before the
// peer's read.
func writeFD(fd uintptr, p []byte) (int, error) {
	if !rawSyscalls {
		return syscall.Write(int(fd), p)
	}
	n, errno := sockCall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if errno != 0 {
		return 0, errno
	}
	return n, nil
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

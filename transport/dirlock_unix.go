//go:build unix

package transport

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// lockDir takes an exclusive flock on the directory that holds path, so
// that the listeners of this and other processes judging and replacing
// a stale socket file there take turns. The returned function releases
// it. Where the directory cannot be opened or locked (permissions, a
// file system without flock) it returns a no-op and the check is as
// racy as it would be without it.
func lockDir(path string) func() {
	fd, err := unix.Open(filepath.Dir(path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return func() {}
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		_ = unix.Close(fd)
		return func() {}
	}
	f := os.NewFile(uintptr(fd), filepath.Dir(path))
	return func() { _ = f.Close() } // closing the last descriptor drops the lock
}

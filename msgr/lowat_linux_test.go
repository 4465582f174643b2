package msgr

import (
	"bufio"
	"bytes"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrymsg/ferry/msgr/msgr2"
)

// TestLowatPays checks which sockets the reader raises the receive low
// water mark on: TCP under a congestion control that paces (BBR) and
// sockets that are not TCP, not TCP under cubic.
func TestLowatPays(t *testing.T) {
	pays := func(t *testing.T, c net.Conn, cc string) bool {
		t.Helper()
		rc, err := c.(syscall.Conn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var ok bool
		var serr error
		if err := rc.Control(func(fd uintptr) {
			if cc != "" {
				serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
			}
			ok = lowatPays(fd)
		}); err != nil {
			t.Fatal(err)
		}
		if serr != nil {
			t.Skipf("%s is not available here: %v", cc, serr)
		}
		return ok
	}
	dial := func(t *testing.T, network, addr string) net.Conn {
		t.Helper()
		ln, err := net.Listen(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		c, err := net.Dial(network, ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for _, cc := range []string{"cubic", "bbr"} {
		t.Run(cc, func(t *testing.T) {
			if got, want := pays(t, dial(t, "tcp", "127.0.0.1:0"), cc), cc == "bbr"; got != want {
				t.Errorf("lowatPays under %s = %v, want %v", cc, got, want)
			}
		})
	}
	t.Run("unix", func(t *testing.T) {
		if !pays(t, dial(t, "unix", filepath.Join(t.TempDir(), "s")), "") {
			t.Error("lowatPays on a unix socket = false, want true")
		}
	})
}

// TestLowatReadsTrickledData reads large data that arrives in pieces
// through the reader's low-water mark (lowat.read): the bytes and their
// CRC come out whole; under bbr the mark is raised while the reader waits
// for more and is never left above what remains (the last few bytes
// arrive alone and are still read), under cubic it is never raised; and
// set(1) puts the kernel's mark back.
func TestLowatReadsTrickledData(t *testing.T) {
	for _, cc := range []string{"cubic", "bbr"} {
		t.Run(cc, func(t *testing.T) {
			testLowatTrickle(t, cc)
		})
	}
}

func testLowatTrickle(t *testing.T, cc string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	w, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rc, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	_ = rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
	})
	if serr != nil {
		t.Skipf("%s: %v", cc, serr)
	}
	_ = nc.SetReadDeadline(time.Now().Add(20 * time.Second)) // a hang fails instead of stalling the suite

	const size = 3<<20 + 5 // ends in 5 bytes sent on their own
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>11)
	}
	go func() {
		for off := 0; off < size-5; off += 100 << 10 {
			_, _ = w.Write(data[off:min(off+100<<10, size-5)])
			time.Sleep(200 * time.Microsecond)
		}
		time.Sleep(50 * time.Millisecond) // the reader has caught up: a short read under bbr
		_, _ = w.Write(data[size-5:])
	}()

	run := &socketRun{nc: nc, src: socketSource(nc), raw: rc}
	lw := newLowat(run)
	br := bufio.NewReaderSize(run.src, readBufSmall)
	got := make([]byte, size)
	crc := msgr2.SegmentCRCInit
	if err := lw.read(br, got, size, &crc); err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("data read differs from data written")
	}
	if want := msgr2.UpdateSegmentCRC(msgr2.SegmentCRCInit, data); crc != want {
		t.Fatalf("crc %#x, want %#x", crc, want)
	}
	if raised := lw.mark > 1; raised != (cc == "bbr") {
		t.Errorf("under %s the mark is %d after reading trickled data", cc, lw.mark)
	}
	lw.set(1)
	var mark int
	_ = rc.Control(func(fd uintptr) { mark, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT) })
	if serr != nil || mark > 1 { // a socket never set reads 0 on some kernels
		t.Errorf("kernel mark after set(1) = %d (%v), want at most 1", mark, serr)
	}
}

//go:build linux

package msgr

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-acc
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// TestRawReader reads a socket through rawReader as net.Conn.Read would:
// data written before and after the read starts (the second waits in the
// netpoller), a read deadline, end of file, and a closed socket.
func TestRawReader(t *testing.T) {
	a, b := tcpPair(t)
	src := socketSource(b)
	r, ok := src.(*rawReader)
	if !ok {
		t.Fatalf("socketSource of a TCP connection is %T, want *rawReader", src)
	}
	if n, err := r.Read(nil); n != 0 || err != nil {
		t.Fatalf("empty read: %d, %v", n, err)
	}
	if _, err := a.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, err := io.ReadAtLeast(r, buf, 5)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		a.Write([]byte("later"))
	}()
	if n, err = io.ReadAtLeast(r, buf, 5); err != nil || string(buf[:n]) != "later" {
		t.Fatalf("read after a wait: %q, %v", buf[:n], err)
	}

	b.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) || !isTimeout(err) {
		t.Fatalf("past the deadline: %v, want a deadline error", err)
	}
	b.SetReadDeadline(time.Time{})

	a.Close()
	if n, err := r.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("after the peer closed: %d, %v, want io.EOF", n, err)
	}
	b.Close()
	if _, err := r.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("on a closed socket: %v, want net.ErrClosed", err)
	}
}

// TestRawReaderNoAlloc: a read that finds data allocates nothing.
func TestRawReaderNoAlloc(t *testing.T) {
	if !rawSyscalls {
		t.Skip("race-detector build")
	}
	a, b := tcpPair(t)
	r := socketSource(b).(*rawReader)
	msg, buf := make([]byte, 64), make([]byte, 64)
	allocs := testing.AllocsPerRun(100, func() {
		a.Write(msg)
		if _, err := io.ReadFull(r, buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per write and read, want 0", allocs)
	}
}

// TestWriteFDRaw writes through writeFD and writevFD and reads it back.
func TestWriteFDRaw(t *testing.T) {
	a, b := tcpPair(t)
	raw, err := a.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n1, n2 int
	var e1, e2 error
	raw.Write(func(fd uintptr) bool {
		n1, e1 = writeFD(fd, []byte("one "))
		n2, e2 = writevFD(fd, []iovec{makeIovec([]byte("two ")), makeIovec([]byte("three"))})
		return true
	})
	if n1 != 4 || e1 != nil || n2 != 9 || e2 != nil {
		t.Fatalf("writeFD %d, %v; writevFD %d, %v", n1, e1, n2, e2)
	}
	buf := make([]byte, 13)
	if _, err := io.ReadFull(b, buf); err != nil || string(buf) != "one two three" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

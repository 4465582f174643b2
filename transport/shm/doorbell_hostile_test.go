//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/transporttest"
)

// fillDoorbell does what a hostile peer can do to the eventfd the other
// side writes to wake it (it shares both eventfds): fill its counter,
// make it blocking if asked, and raise its wake flag so that the other
// side's next write rings it.
func fillDoorbell(t *testing.T, hostile *Conn, blocking bool) {
	t.Helper()
	rc, err := hostile.own.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var max [8]byte
	binary.NativeEndian.PutUint64(max[:], 0xfffffffffffffffe)
	var werr error
	if err := rc.Control(func(fd uintptr) {
		if _, werr = unix.Write(int(fd), max[:]); werr != nil {
			return
		}
		if blocking {
			fl, _ := unix.FcntlInt(fd, unix.F_GETFL, 0)
			_, werr = unix.FcntlInt(fd, unix.F_SETFL, fl&^unix.O_NONBLOCK)
		}
	}); err != nil || werr != nil {
		t.Fatal(err, werr)
	}
	publish(hostile.myWake, 1) // "I may sleep waiting for bytes"
}

// drainDoorbell lets a test that failed finish: the hostile side reads
// its counter, which unblocks a write stuck on it.
func drainDoorbell(hostile *Conn) {
	rc, _ := hostile.own.SyscallConn()
	rc.Control(func(fd uintptr) {
		fl, _ := unix.FcntlInt(fd, unix.F_GETFL, 0)
		unix.FcntlInt(fd, unix.F_SETFL, fl|unix.O_NONBLOCK)
		var b [8]byte
		unix.Read(int(fd), b[:])
	})
}

// TestDoorbellFullOrBlocking: a peer that fills the counter of the
// eventfd this side rings, or also makes it blocking, cannot make a
// Write outlive its deadline or Close hang (the write used to wait in
// the netpoller for room, under writeMu, for ever). A full counter
// leaves the connection working; a blocking one marks the peer lost.
func TestDoorbellFullOrBlocking(t *testing.T) {
	for _, blocking := range []bool{false, true} {
		name := map[bool]string{false: "full", true: "full-and-blocking"}[blocking]
		t.Run(name, func(t *testing.T) {
			c, s := transporttest.Pair(t, New(), sockAddr(t))
			victim, hostile := c.(*Conn), s.(*Conn)
			fillDoorbell(t, hostile, blocking)
			victim.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
			done := make(chan error, 1)
			go func() {
				_, err := victim.Write([]byte("x"))
				done <- err
			}()
			select {
			case err := <-done:
				if !blocking && err != nil {
					t.Errorf("Write with a full doorbell: %v, want nil (the wake-up is pending already)", err)
				}
			case <-time.After(5 * time.Second):
				drainDoorbell(hostile)
				<-done
				t.Fatal("Write with a 200 ms deadline still blocked after 5 s on the peer's doorbell")
			}
			if blocking {
				if _, err := victim.Write([]byte("y")); !errors.Is(err, ErrPeerLost) {
					t.Errorf("Write after the peer made its doorbell blocking: %v, want ErrPeerLost", err)
				}
			}
			closed := make(chan struct{})
			go func() { victim.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(5 * time.Second):
				drainDoorbell(hostile)
				<-closed
				t.Fatal("Close hung on the peer's doorbell")
			}
		})
	}
}

// TestDoorbellHostileMessengerShutdown: the same through a messenger: a
// local client that fills and blocks its doorbell before the server
// writes its banner does not stall the server's connection writer, and
// Messenger.Shutdown returns.
func TestDoorbellHostileMessengerShutdown(t *testing.T) {
	reg := transport.NewRegistry(New())
	s, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD}, Transports: reg,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	s.SetDefaultPolicy(msgr.StatelessServer())
	addr := "shm://" + filepath.Join(t.TempDir(), "osd.sock")
	if err := s.Bind(addr); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	a, _ := transport.ParseAddr(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc, err := New().Dial(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	hostile := hc.(*Conn)
	defer hostile.Close()
	fillDoorbell(t, hostile, true)
	time.Sleep(300 * time.Millisecond) // the server accepts and writes its banner
	done := make(chan struct{})
	go func() { s.Shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		drainDoorbell(hostile)
		<-done
		t.Fatal("Messenger.Shutdown hung: its shm connection's writer was stuck on the peer's doorbell")
	}
}

//go:build linux

package shm_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/shm"
	"github.com/ferrymsg/ferry/transport/transporttest"
)

const testType = 0x7001 // a message type no Ceph daemon uses

// TestMessengerEcho runs the messenger over shm: a client sends messages
// of 0 B to 4 MiB to an echo server and checks each reply.
func TestMessengerEcho(t *testing.T) {
	transporttest.CheckGoroutines(t)
	reg := transport.NewRegistry(shm.New())
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	s, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD}, Transports: reg, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	s.SetDefaultPolicy(msgr.StatelessServer())
	s.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		r := msg.New(m.Header.Type)
		r.Header.Tid = m.Header.Tid
		r.Front = m.Front
		r.Data = m.Data
		_ = m.Conn.Send(r)
		return true
	}))
	if err := s.Bind("shm://" + filepath.Join(t.TempDir(), "osd.sock")); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()

	c, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityClient}, Transports: reg, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	replies := make(chan *msg.Message, 16)
	c.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		replies <- m
		return true
	}))
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()

	conn, err := c.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{0, 1, 4096, 64 << 10, 1 << 20, 4 << 20} {
		m := msg.New(testType)
		m.Header.Tid = uint64(i + 1)
		m.Front = msg.Buffers{[]byte(fmt.Sprintf("front-%d", i))}
		data := make([]byte, n)
		for j := range data {
			data[j] = byte(j*7 + i)
		}
		if n > 0 {
			m.Data = msg.Buffers{data}
		}
		if err := conn.Send(m); err != nil {
			t.Fatal(err)
		}
		var r *msg.Message
		select {
		case r = <-replies:
		case <-time.After(10 * time.Second):
			t.Fatalf("no reply to the %d-byte message", n)
		}
		if r.Header.Tid != uint64(i+1) {
			t.Fatalf("reply tid %d, want %d", r.Header.Tid, i+1)
		}
		if got := r.Front.Bytes(); string(got) != fmt.Sprintf("front-%d", i) {
			t.Fatalf("front %q", got)
		}
		if got := r.Data.Bytes(); !bytes.Equal(got, data) && !(len(got) == 0 && n == 0) {
			t.Fatalf("size %d: data differs (got %d bytes)", n, len(got))
		}
	}
}

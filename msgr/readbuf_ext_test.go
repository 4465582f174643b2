package msgr_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// TestReadBufferGrowsUnderBursts: a reader starts with a small buffer and
// keeps it for a message now and then, takes a large one when a burst of
// messages arrives faster than it reads them, and every message arrives
// whole and in order across the change.
func TestReadBufferGrowsUnderBursts(t *testing.T) {
	conn, col := tcpEchoPair(t)
	body := func(i int) []byte {
		return []byte(fmt.Sprintf("message %04d %s", i, bytes.Repeat([]byte{byte(i)}, i%300)))
	}
	send := func(i int) {
		m := msg.New(testType)
		m.Header.Tid = uint64(i)
		m.Front = msg.Buffers{body(i)}
		if err := conn.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	before := msgr.ReadBufGrows()
	for i := range 3 { // one at a time: no reader needs more than the small buffer
		send(i)
		if m := recv(t, col.ch); m.Header.Tid != uint64(i) {
			t.Fatalf("echo %d has tid %d", i, m.Header.Tid)
		}
	}
	if g := msgr.ReadBufGrows() - before; g != 0 {
		t.Fatalf("%d readers took a large buffer for single messages", g)
	}
	const n = 2000
	for i := 3; i < n; i++ {
		send(i)
	}
	for i := 3; i < n; i++ {
		m := recv(t, col.ch)
		if m.Header.Tid != uint64(i) || !bytes.Equal(m.Front.Bytes(), body(i)) {
			t.Fatalf("echo %d: tid %d, front %q", i, m.Header.Tid, m.Front.Bytes())
		}
		m.Done()
	}
	if msgr.ReadBufGrows() == before {
		t.Fatal("no reader took a large buffer for a burst of 2,000 messages")
	}
}

// TestReadBufferGrowsForLargeFrames: messages larger than the small
// buffer, one at a time, each take a read of their own past it; after a
// few in a row the reader takes the large buffer (one read a frame
// again), and every message arrives whole.
func TestReadBufferGrowsForLargeFrames(t *testing.T) {
	conn, col := tcpEchoPair(t)
	before := msgr.ReadBufGrows()
	for i := range 8 {
		m := msg.New(testType)
		m.Header.Tid = uint64(i)
		b := bytes.Repeat([]byte{byte(i)}, 2<<10)
		m.Front = msg.Buffers{b}
		if err := conn.Send(m); err != nil {
			t.Fatal(err)
		}
		r := recv(t, col.ch)
		if r.Header.Tid != uint64(i) || !bytes.Equal(r.Front.Bytes(), b) {
			t.Fatalf("echo %d: tid %d, %d bytes", i, r.Header.Tid, r.Front.Len())
		}
		r.Done()
	}
	// Both readers (the server's and the client's) saw 8 frames of 2 KiB.
	if g := msgr.ReadBufGrows() - before; g < 2 {
		t.Fatalf("%d readers took a large buffer for 2 KiB messages one at a time, want 2", g)
	}
}

// tcpEchoPair connects a client to an echo server over TCP, returning the
// client's connection and the collector of its echoes.
func tcpEchoPair(t *testing.T) (*msgr.Conn, *collector) {
	t.Helper()
	reg := transport.NewRegistry(transport.NewTCP(transport.TCPOptions{}))
	srv := echoServer(t, reg, "tcp://127.0.0.1:0", msgr.Config{})
	cli, col := newClient(t, reg, msgr.Config{})
	conn, err := cli.Connect(srv.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	return conn, col
}

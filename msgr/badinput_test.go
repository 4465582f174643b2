package msgr_test

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/msgr/msgr2"
	"github.com/ferrymsg/ferry/transport"
)

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// rawDial opens a plain TCP socket to a messenger address, closed when
// the test ends, with a 10 s deadline on everything done with it.
func rawDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	ta, err := transport.ParseAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.DialTimeout("tcp", ta.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return nc
}

// rawClient performs a client handshake over a real socket with the
// protocol engine and returns the socket, ready for hand-made frames.
func rawClient(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc := rawDial(t, addr)
	e := msgr2.NewEngine(msgr2.Config{
		Role:       msgr2.Client,
		MyName:     msg.EntityName{Type: msg.EntityClient, Num: msg.NewID},
		MyAuthName: msg.AuthName{Type: msg.EntityClient, ID: "admin"},
		Supported:  msg.FeaturesAll,
		Lossy:      true,
	})
	e.Start()
	rawHandshake(t, nc, e)
	_ = nc.SetDeadline(time.Time{})
	return nc
}

// expectClosed waits for the server to close nc.
func expectClosed(t *testing.T, nc net.Conn) {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	for {
		_, err := nc.Read(buf)
		if err == nil {
			continue
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("server did not close the connection")
		}
		return
	}
}

func messageFrame(front, data []byte) []byte {
	mf := msgr2.MessageFrame{Header: msgr2.Header2{Seq: 1, Type: testType, Priority: 127, Flags: 3},
		Front: msg.Buffers{front}, Data: msg.Buffers{data}}
	b := mf.AppendHead(nil, true)
	b = append(b, data...)
	return mf.AppendTail(b, true)
}

func TestBadInputOverSocket(t *testing.T) {
	logs := &syncBuffer{}
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", msgr.Config{
		KeepaliveTimeout:  500 * time.Millisecond,
		KeepaliveInterval: 100 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	addr := s.ListenAddrs()[0]

	// A well-behaved client that must keep working throughout.
	c, col := newClient(t, transport.Default, msgr.Config{})
	good, _ := c.Connect(addr)
	check := func(t *testing.T) {
		t.Helper()
		m := msg.New(testType)
		m.Data = msg.Buffers{[]byte("still here")}
		if err := good.Send(m); err != nil {
			t.Fatal(err)
		}
		if r := recv(t, col.ch); string(r.Data.Bytes()) != "still here" {
			t.Fatalf("echo %q", r.Data.Bytes())
		}
	}
	check(t)

	valid := messageFrame([]byte("front"), []byte("data"))
	cases := []struct {
		name      string
		handshake bool
		send      func() []byte
		logged    string
	}{
		{"garbage banner", false, func() []byte { return []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n") }, "bad banner"},
		{"msgr1 banner", false, func() []byte { return []byte("ceph v027" + strings.Repeat("\x00", 200)) }, "msgr1"},
		{"wrong preamble crc", true, func() []byte {
			b := append([]byte(nil), valid...)
			b[28] ^= 0xff
			return b
		}, "preamble crc"},
		{"wrong segment crc", true, func() []byte {
			b := append([]byte(nil), valid...)
			b[msgr2.PreambleLen+msgr2.Header2Len+4] ^= 1 // first byte of the front
			return b
		}, "crc"},
		{"wrong data crc, large data", true, func() []byte {
			// 300 KiB of data: read with a raised low-water mark, its CRC
			// computed piece by piece as it arrives.
			b := messageFrame([]byte("front"), bytes.Repeat([]byte{7}, 300<<10))
			b[len(b)-1000] ^= 1 // a byte of the data, 987 before its end
			return b
		}, "segment 3"},
		{"unknown tag", true, func() []byte {
			p := msgr2.Preamble{Tag: 99, NumSegments: 1, Segments: [4]msgr2.SegmentDesc{{Len: 8, Align: 8}}}
			return append(p.Append(nil), make([]byte, 12)...)
		}, "unknown"},
		{"length over limit", true, func() []byte {
			p := msgr2.Preamble{Tag: msgr2.TagMessage, NumSegments: 4, Segments: [4]msgr2.SegmentDesc{
				{Len: msgr2.Header2Len, Align: 8}, {}, {}, {Len: 1 << 30, Align: 4096}}}
			return p.Append(nil)
		}, "limit"},
		{"control frame over limit", true, func() []byte {
			p := msgr2.Preamble{Tag: msgr2.TagAck, NumSegments: 1, Segments: [4]msgr2.SegmentDesc{{Len: 1 << 20, Align: 8}}}
			return p.Append(nil)
		}, ""},
		{"handshake frame after ready", true, func() []byte {
			return msgr2.AppendFrame(nil, msgr2.TagHello, true, (&msgr2.Hello{EntityType: msg.EntityClient}).Append(nil))
		}, "unexpected"},
		{"stops mid-frame", true, func() []byte { return valid[:len(valid)-5] }, "keepalive timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var nc net.Conn
			if tc.handshake {
				nc = rawClient(t, addr)
			} else {
				ta, _ := transport.ParseAddr(addr)
				var err error
				nc, err = net.Dial("tcp", ta.Host)
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
			}
			if _, err := nc.Write(tc.send()); err != nil {
				t.Fatal(err)
			}
			expectClosed(t, nc)
			check(t)
			if tc.logged != "" {
				deadline := time.Now().Add(5 * time.Second)
				for !strings.Contains(strings.ToLower(logs.String()), tc.logged) {
					if time.Now().After(deadline) {
						t.Fatalf("no log mentioning %q:\n%s", tc.logged, logs.String())
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	// Only the good client's connection remains.
	deadline := time.Now().Add(5 * time.Second)
	for len(s.Conns()) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("server holds %d connections", len(s.Conns()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDeclaredLengthMemoryBounded: peers that announce large messages and
// never send them cannot make the server hold more than its throttle.
func TestDeclaredLengthMemoryBounded(t *testing.T) {
	const (
		declared = 48 << 20
		conns    = 6
	)
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", msgr.Config{
		DispatchThrottleBytes: 8 << 20,
		KeepaliveInterval:     -1,
		KeepaliveTimeout:      -1,
	})
	addr := s.ListenAddrs()[0]
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < conns; i++ {
		nc := rawClient(t, addr)
		p := msgr2.Preamble{Tag: msgr2.TagMessage, NumSegments: 4, Segments: [4]msgr2.SegmentDesc{
			{Len: msgr2.Header2Len, Align: 8}, {}, {}, {Len: declared, Align: 4096}}}
		if _, err := nc.Write(p.Append(nil)); err != nil {
			t.Fatal(err)
		}
	}
	// Give the server time to read every preamble (it cannot tell us).
	deadline := time.Now().Add(2 * time.Second)
	for len(s.Conns()) < conns && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	// One oversized message may pass an idle throttle (Ceph's rule); the
	// others wait for budget without allocating.
	if grown > 2*declared {
		t.Fatalf("heap grew by %d MiB for %d connections declaring %d MiB each", grown>>20, conns, declared>>20)
	}
	t.Logf("heap grew by %d MiB with %d connections each declaring %d MiB", grown>>20, conns, declared>>20)
}

// rawHandshake drives engine e over nc until the handshake is done.
func rawHandshake(t *testing.T, nc net.Conn, e *msgr2.Engine) {
	t.Helper()
	for !e.Ready() {
		if out := e.Output(); len(out) > 0 {
			if _, err := nc.Write(out); err != nil {
				t.Fatal(err)
			}
		}
		n, _ := e.Need()
		buf := make([]byte, n)
		if _, err := io.ReadFull(nc, buf); err != nil {
			t.Fatalf("raw handshake: %v", err)
		}
		if _, err := e.Feed(buf); err != nil {
			t.Fatalf("raw handshake: %v", err)
		}
	}
}

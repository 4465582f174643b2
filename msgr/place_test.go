package msgr_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/msgr/msgr2"
	"github.com/ferrymsg/ferry/transport"
)

const placeType = 0x7002 // the message type testPlacer places

// placeCall records one PlaceData call.
type placeCall struct {
	h       msg.Header
	front   []byte
	dataLen int
}

// testPlacer places the data of placeType messages into buffers registered
// by tid, and dispatches the messages of that type.
type testPlacer struct {
	mu       sync.Mutex
	bufs     map[uint64][][]byte
	calls    []placeCall
	wrongLen bool // return one byte less than asked
	unplaced chan uint64
	unconn   chan *msgr.Conn
	got      chan *msg.Message
}

func newTestPlacer() *testPlacer {
	return &testPlacer{
		bufs:     make(map[uint64][][]byte),
		unplaced: make(chan uint64, 16),
		unconn:   make(chan *msgr.Conn, 16),
		got:      make(chan *msg.Message, 64),
	}
}

func (p *testPlacer) register(tid uint64, bufs ...[]byte) {
	p.mu.Lock()
	p.bufs[tid] = bufs
	p.mu.Unlock()
}

func (p *testPlacer) Dispatch(m *msg.Message) bool {
	if m.Header.Type != placeType {
		return false
	}
	p.got <- m
	return true
}

func (p *testPlacer) PlaceData(c *msgr.Conn, h *msg.Header, front []byte, dataLen int) [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, placeCall{h: *h, front: bytes.Clone(front), dataLen: dataLen})
	if h.Type != placeType {
		return nil
	}
	b := p.bufs[h.Tid]
	if b == nil {
		return nil
	}
	if p.wrongLen {
		last := b[len(b)-1]
		b = append(append([][]byte(nil), b[:len(b)-1]...), last[:len(last)-1])
	}
	return b
}

func (p *testPlacer) UnplaceData(c *msgr.Conn, h *msg.Header) {
	p.unplaced <- h.Tid
	p.unconn <- c
}

// offered returns the PlaceData calls for tid.
func (p *testPlacer) offered(tid uint64) []placeCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []placeCall
	for _, c := range p.calls {
		if c.h.Tid == tid {
			out = append(out, c)
		}
	}
	return out
}

// nilPlacer is a DataPlacer that never places; it counts its calls.
type nilPlacer struct {
	mu    sync.Mutex
	calls int
}

func (n *nilPlacer) Dispatch(*msg.Message) bool { return false }
func (n *nilPlacer) PlaceData(*msgr.Conn, *msg.Header, []byte, int) [][]byte {
	n.mu.Lock()
	n.calls++
	n.mu.Unlock()
	return nil
}
func (n *nilPlacer) UnplaceData(*msgr.Conn, *msg.Header) { panic("UnplaceData without PlaceData") }

// placeServer starts a messenger with a nilPlacer, a testPlacer and a
// collector for everything else, in that order.
func placeServer(t *testing.T, reg *transport.Registry, listen string, pol msgr.Policy, logger *slog.Logger) (*msgr.Messenger, *testPlacer, *nilPlacer, *collector) {
	t.Helper()
	if logger == nil {
		logger = quietLogger()
	}
	s, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD, Num: 0}, Transports: reg, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	s.SetDefaultPolicy(pol)
	p, np, col := newTestPlacer(), &nilPlacer{}, newCollector()
	s.AddDispatcherTail(p)
	s.AddDispatcherHead(np)
	s.AddDispatcherTail(col)
	if err := s.Bind(listen); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s, p, np, col
}

func fill(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13) ^ seed
	}
	return b
}

func sameBuf(a, b []byte) bool { return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0] }

// TestPlaceData: the data of large messages of the placer's type lands in
// the buffers it registered; everything else arrives as before.
func TestPlaceData(t *testing.T) {
	for _, tc := range transports() {
		t.Run(tc.name, func(t *testing.T) {
			s, p, np, col := placeServer(t, tc.reg, tc.listen, msgr.StatelessServer(), nil)
			c, _ := newClient(t, tc.reg, msgr.Config{})
			conn, err := c.Connect(s.ListenAddrs()[0])
			if err != nil {
				t.Fatal(err)
			}
			send := func(typ uint16, tid uint64, front, data []byte) {
				t.Helper()
				m := msg.New(typ)
				m.Header.Tid = tid
				m.Header.Priority = msg.PrioHigh
				m.Header.Version = 2
				if len(front) > 0 {
					m.Front = msg.Buffers{front}
				}
				if len(data) > 0 {
					// Several buffers on the sending side too.
					m.Data = msg.Buffers{data[:len(data)/2], data[len(data)/2:]}
				}
				if err := conn.Send(m); err != nil {
					t.Fatal(err)
				}
			}

			// One buffer.
			one := make([]byte, 64<<10)
			p.register(1, one)
			d1 := fill(len(one), 1)
			send(placeType, 1, []byte("front-1"), d1)
			m := recv(t, p.got)
			if m.Header.Tid != 1 || len(m.Data) != 1 || !sameBuf(m.Data[0], one) || !bytes.Equal(one, d1) {
				t.Fatalf("tid %d: data in %d buffers, placed %v, content ok %v", m.Header.Tid, len(m.Data), len(m.Data) == 1 && sameBuf(m.Data[0], one), bytes.Equal(one, d1))
			}
			if string(m.Front.Bytes()) != "front-1" || m.Header.Src.Type != msg.EntityClient || m.Conn == nil {
				t.Fatalf("front %q src %v", m.Front.Bytes(), m.Header.Src)
			}
			calls := p.offered(1)
			if len(calls) != 1 || calls[0].dataLen != len(d1) || string(calls[0].front) != "front-1" {
				t.Fatalf("PlaceData calls %+v", calls)
			}
			// The header offered is the one delivered.
			if calls[0].h != m.Header || calls[0].h.Seq != 1 || calls[0].h.Priority != msg.PrioHigh || calls[0].h.Version != 2 {
				t.Fatalf("offered header %+v, delivered %+v", calls[0].h, m.Header)
			}

			// Three buffers of odd sizes, one backing array with gaps.
			back := make([]byte, 30000)
			parts := [][]byte{back[7:1008], back[2000:9777], back[10001:22346]}
			p.register(2, parts...)
			total := 0
			for _, q := range parts {
				total += len(q)
			}
			d2 := fill(total, 2)
			send(placeType, 2, nil, d2)
			m = recv(t, p.got)
			if m.Header.Tid != 2 || len(m.Data) != 3 {
				t.Fatalf("tid %d in %d buffers", m.Header.Tid, len(m.Data))
			}
			for i := range parts {
				if !sameBuf(m.Data[i], parts[i]) {
					t.Fatalf("buffer %d is not the placed one", i)
				}
			}
			if !bytes.Equal(m.Data.Bytes(), d2) || back[0] != 0 || back[1008] != 0 || back[9777] != 0 || back[22346] != 0 {
				t.Fatal("placed data wrong or written outside the buffers")
			}

			// Under PlaceMin: not offered, even with a buffer registered.
			small := make([]byte, msgr.PlaceMin-1)
			p.register(3, small)
			d3 := fill(len(small), 3)
			send(placeType, 3, []byte("f"), d3)
			m = recv(t, p.got)
			if m.Header.Tid != 3 || !bytes.Equal(m.Data.Bytes(), d3) || sameBuf(m.Data[0], small) || len(p.offered(3)) != 0 {
				t.Fatalf("small message: tid %d placed %v offered %d", m.Header.Tid, sameBuf(m.Data[0], small), len(p.offered(3)))
			}

			// Exactly PlaceMin is offered.
			edge := make([]byte, msgr.PlaceMin)
			p.register(4, edge)
			d4 := fill(len(edge), 4)
			send(placeType, 4, nil, d4)
			if m = recv(t, p.got); !sameBuf(m.Data[0], edge) || !bytes.Equal(edge, d4) {
				t.Fatal("PlaceMin bytes not placed")
			}

			// Another type: offered (the placer declines), delivered intact.
			d5 := fill(100<<10, 5)
			send(testType, 5, []byte("other"), d5)
			m = recv(t, col.ch)
			if m.Header.Tid != 5 || !bytes.Equal(m.Data.Bytes(), d5) || string(m.Front.Bytes()) != "other" {
				t.Fatalf("other type: tid %d", m.Header.Tid)
			}
			if len(p.offered(5)) != 1 {
				t.Fatalf("other type offered %d times", len(p.offered(5)))
			}

			// The placer's type without a registered buffer.
			d6 := fill(8192, 6)
			send(placeType, 6, nil, d6)
			if m = recv(t, p.got); m.Header.Tid != 6 || !bytes.Equal(m.Data.Bytes(), d6) {
				t.Fatal("unregistered tid")
			}

			// A head (front) larger than the read buffer, placed and not.
			bigFront := fill(100<<10, 7)
			big := make([]byte, 20000)
			p.register(7, big)
			d7 := fill(len(big), 8)
			send(placeType, 7, bigFront, d7)
			m = recv(t, p.got)
			if m.Header.Tid != 7 || !sameBuf(m.Data[0], big) || !bytes.Equal(big, d7) || !bytes.Equal(m.Front.Bytes(), bigFront) {
				t.Fatal("large head: not placed or corrupted")
			}
			if calls := p.offered(7); len(calls) != 1 || !bytes.Equal(calls[0].front, bigFront) {
				t.Fatal("large head: front offered wrong")
			}
			d8 := fill(20000, 9)
			send(placeType, 8, bigFront, d8)
			if m = recv(t, p.got); m.Header.Tid != 8 || !bytes.Equal(m.Data.Bytes(), d8) || !bytes.Equal(m.Front.Bytes(), bigFront) {
				t.Fatal("large head, not placed: corrupted")
			}

			// The head of the chain was asked first every time.
			np.mu.Lock()
			n := np.calls
			np.mu.Unlock()
			if n != 7 {
				t.Fatalf("first placer asked %d times, want 7", n)
			}
			select {
			case tid := <-p.unplaced:
				t.Fatalf("UnplaceData(%d) without a failure", tid)
			default:
			}
		})
	}
}

// TestPlaceDataWrongLength: buffers of the wrong total length are handed
// back and the messenger allocates.
func TestPlaceDataWrongLength(t *testing.T) {
	logs := &syncBuffer{}
	s, p, _, _ := placeServer(t, transport.Default, "tcp://127.0.0.1:0", msgr.StatelessServer(),
		slog.New(slog.NewTextHandler(logs, nil)))
	p.wrongLen = true
	c, _ := newClient(t, transport.Default, msgr.Config{})
	conn, err := c.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10000)
	p.register(1, buf)
	d := fill(len(buf), 1)
	m := msg.New(placeType)
	m.Header.Tid = 1
	m.Data = msg.Buffers{d}
	if err := conn.Send(m); err != nil {
		t.Fatal(err)
	}
	r := recv(t, p.got)
	if !bytes.Equal(r.Data.Bytes(), d) || sameBuf(r.Data[0], buf) {
		t.Fatal("wrong-length placement used or data corrupted")
	}
	select {
	case tid := <-p.unplaced:
		if tid != 1 {
			t.Fatalf("UnplaceData(%d)", tid)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no UnplaceData for a wrong-length placement")
	}
	if !strings.Contains(logs.String(), "wrong length") {
		t.Fatalf("not logged:\n%s", logs.String())
	}
}

// rawMessage encodes a MESSAGE frame for a raw socket.
func rawMessage(rev1 bool, seq, tid uint64, front, data []byte) []byte {
	mf := msgr2.MessageFrame{Header: msgr2.Header2{Seq: seq, Tid: tid, Type: placeType, Priority: 127, Flags: 3},
		Front: msg.Buffers{front}, Data: msg.Buffers{data}}
	b := mf.AppendHead(nil, rev1)
	b = append(b, data...)
	return mf.AppendTail(b, rev1)
}

// TestPlaceDataFailures: when a placed frame turns out corrupt, or the
// socket fails while its data is read, the placer hears UnplaceData and
// the connection closes with the reason.
func TestPlaceDataFailures(t *testing.T) {
	s, p, _, _ := placeServer(t, transport.Default, "tcp://127.0.0.1:0", msgr.StatelessServer(), nil)
	addr := s.ListenAddrs()[0]
	const dataLen = 3 * 4096
	frame := rawMessage(true, 1, 0, []byte("front"), fill(dataLen, 1))
	dataOff := msgr2.PreambleLen + msgr2.Header2Len + 4 + len("front")
	cases := []struct {
		name    string
		corrupt int  // offset of a byte to flip; -1 none
		cut     int  // bytes to send before closing; 0 all
		placed  bool // PlaceData is called
		want    error
	}{
		{"data crc", dataOff + 5000, 0, true, msgr2.ErrSegmentCRC},
		{"last data byte", dataOff + dataLen - 1, 0, true, msgr2.ErrSegmentCRC},
		{"front crc", dataOff - 2, 0, true, msgr2.ErrSegmentCRC},
		{"epilogue", len(frame) - 1, 0, true, msgr2.ErrSegmentCRC},
		{"header crc", msgr2.PreambleLen + 9, 0, false, msgr2.ErrSegmentCRC},
		{"eof in data", -1, dataOff + 100, true, nil},
		{"eof in tail", -1, len(frame) - 3, true, nil},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tid := uint64(100 + i)
			buf := make([]byte, dataLen)
			p.register(tid, buf)
			b := rawMessage(true, 1, tid, []byte("front"), fill(dataLen, 1))
			if tc.corrupt >= 0 {
				b[tc.corrupt] ^= 0x10
			}
			if tc.cut > 0 {
				b = b[:tc.cut]
			}
			nc := rawClient(t, addr)
			if _, err := nc.Write(b); err != nil {
				t.Fatal(err)
			}
			if tc.cut > 0 {
				nc.Close()
			} else {
				expectClosed(t, nc)
			}
			if !tc.placed {
				// Corrupt before placing: nothing offered, nothing to undo.
				waitFor(t, "the connection to go", 10*time.Second, func() bool { return len(s.Conns()) == 0 })
				if n := len(p.offered(tid)); n != 0 {
					t.Fatalf("offered %d times", n)
				}
				select {
				case got := <-p.unplaced:
					t.Fatalf("UnplaceData(%d)", got)
				default:
				}
				return
			}
			var conn *msgr.Conn
			select {
			case got := <-p.unplaced:
				if got != tid {
					t.Fatalf("UnplaceData(%d), want %d", got, tid)
				}
				conn = <-p.unconn
			case <-time.After(10 * time.Second):
				t.Fatal("no UnplaceData")
			}
			if len(p.offered(tid)) != 1 {
				t.Fatalf("offered %d times", len(p.offered(tid)))
			}
			select {
			case <-conn.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("connection not closed")
			}
			err := conn.Err()
			if tc.want != nil {
				var pe *msgr2.Error
				if !errors.Is(err, tc.want) || !errors.As(err, &pe) {
					t.Fatalf("closed with %v, want %v", err, tc.want)
				}
			} else if err == nil {
				t.Fatal("closed without a reason")
			}
			select {
			case m := <-p.got:
				t.Fatalf("corrupt message delivered: tid %d", m.Header.Tid)
			default:
			}
		})
	}
}

// rawSession performs a lossless client handshake (or, with serverCookie
// set, a session resumption) over a raw socket and returns the socket and
// the server's cookie.
func rawSession(t *testing.T, addr string, serverCookie, connectSeq, globalSeq uint64, peer msg.EntityName) (net.Conn, *msgr2.Engine) {
	t.Helper()
	nc := rawDial(t, addr)
	e := msgr2.NewEngine(msgr2.Config{
		Role:         msgr2.Client,
		MyName:       msg.EntityName{Type: msg.EntityOSD, Num: 5},
		MyAuthName:   msg.AuthName{Type: msg.EntityOSD, ID: "5"},
		Nonce:        4242,
		Supported:    msg.FeaturesAll,
		ClientCookie: 0xc00c1e,
		GlobalSeq:    globalSeq,
		ServerCookie: serverCookie,
		ConnectSeq:   connectSeq,
		PeerName:     peer,
	})
	e.Start()
	rawHandshake(t, nc, e)
	if out := e.Output(); len(out) > 0 {
		if _, err := nc.Write(out); err != nil {
			t.Fatal(err)
		}
	}
	_ = nc.SetDeadline(time.Time{})
	return nc, e
}

// TestPlaceDataReplay: a lossless session resumes and the peer replays a
// message the server already has; the duplicate is dropped without being
// offered to the placer, so its buffer is never written.
func TestPlaceDataReplay(t *testing.T) {
	s, p, _, _ := placeServer(t, transport.Default, "tcp://127.0.0.1:0", msgr.StatefulServer(), nil)
	addr := s.ListenAddrs()[0]
	const n = 8192
	b1, b2, b3 := make([]byte, n), make([]byte, n), make([]byte, n)
	p.register(1, b1)
	p.register(2, b2)
	p.register(3, b3)

	nc, e := rawSession(t, addr, 0, 0, 1, msg.EntityName{})
	rev1 := e.Rev1()
	if _, err := nc.Write(rawMessage(rev1, 1, 1, []byte("one"), fill(n, 1))); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, p.got); m.Header.Tid != 1 || !sameBuf(m.Data[0], b1) {
		t.Fatal("first message not placed")
	}
	cookie, peer := e.Peer().Cookie, e.Peer().Name
	if cookie == 0 {
		t.Fatal("no server cookie: the session is not lossless")
	}
	nc.Close()
	conns := s.Conns()
	if len(conns) != 1 {
		t.Fatalf("%d connections", len(conns))
	}
	waitFor(t, "the server to see the socket go", 10*time.Second, func() bool { return !conns[0].IsConnected() })

	// Resume; the server reports it has seq 1. Replay it anyway (as the
	// same tid 1 and, to tell them apart, as tid 2), then send seq 2.
	nc, e = rawSession(t, addr, cookie, 1, 2, peer)
	if e.InSeq() != 0 || !e.Resumed() {
		t.Fatalf("not resumed")
	}
	var wire []byte
	wire = append(wire, rawMessage(rev1, 1, 1, []byte("one"), fill(n, 9))...)
	wire = append(wire, rawMessage(rev1, 1, 2, []byte("dup"), fill(n, 9))...)
	wire = append(wire, rawMessage(rev1, 2, 3, []byte("three"), fill(n, 3))...)
	if _, err := nc.Write(wire); err != nil {
		t.Fatal(err)
	}
	m := recv(t, p.got)
	if m.Header.Tid != 3 || m.Header.Seq != 2 || !sameBuf(m.Data[0], b3) || !bytes.Equal(b3, fill(n, 3)) {
		t.Fatalf("after the replay: tid %d seq %d placed %v", m.Header.Tid, m.Header.Seq, sameBuf(m.Data[0], b3))
	}
	if conns[0].Reconnects() != 1 || s.Conns()[0] != conns[0] {
		t.Fatal("the session was not resumed")
	}
	if len(p.offered(1)) != 1 || len(p.offered(2)) != 0 {
		t.Fatalf("duplicates offered: tid 1 %d times, tid 2 %d times", len(p.offered(1)), len(p.offered(2)))
	}
	if !bytes.Equal(b1, fill(n, 1)) || !bytes.Equal(b2, make([]byte, n)) {
		t.Fatal("a duplicate's data was written into a placed buffer")
	}
	select {
	case m := <-p.got:
		t.Fatalf("duplicate delivered: tid %d", m.Header.Tid)
	case tid := <-p.unplaced:
		t.Fatalf("UnplaceData(%d)", tid)
	default:
	}
}

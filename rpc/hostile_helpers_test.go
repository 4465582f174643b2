package rpc_test

// Helpers of the hostile-peer tests: a raw messenger that speaks the RPC
// wire format by hand.

import (
	"encoding/binary"
	"testing"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/rpc/internal/wire"
)

// rawPeer is a messenger that hands every message it receives to got.
type rawPeer struct {
	m   *msgr.Messenger
	got chan *msg.Message
	uri string
}

// newRawPeer starts a raw messenger; with listen set it binds
// n.prefix+listen so that rpc instances can add it as a rank.
func newRawPeer(t testing.TB, n *testNet, listen string) *rawPeer {
	t.Helper()
	m, err := msgr.New(msgr.Config{Transports: n.reg, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	p := &rawPeer{m: m, got: make(chan *msg.Message, 1024)}
	m.AddDispatcherTail(msgr.DispatcherFunc(func(mm *msg.Message) bool {
		p.got <- mm
		return true
	}))
	if listen != "" {
		p.uri = n.prefix + listen
		if err := m.Bind(p.uri); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Shutdown)
	return p
}

// next returns the next message of type typ (others are dropped).
func (p *rawPeer) next(t *testing.T, typ uint16, what string) *msg.Message {
	t.Helper()
	for {
		m := recv(t, p.got, what)
		if m.Header.Type == typ {
			return m
		}
	}
}

func rawFront(m *msg.Message) []byte {
	if len(m.Front) == 1 {
		return m.Front[0]
	}
	return m.Front.Bytes()
}

// rpcMsg builds a request or reply with header h, body and data.
func rpcMsg(typ uint16, tid uint64, h wire.Header, body []byte, data []byte) *msg.Message {
	m := msg.New(typ)
	m.Header.Tid = tid
	front := append(h.Append(nil), body...)
	m.SetSegments(front, nil, data)
	return m
}

func ovfDesc(key, n uint64) []byte {
	var d [wire.OverflowLen]byte
	wire.PutOverflow(d[:], key, n)
	return d[:]
}

func rawBulk(h wire.BulkHeader, data []byte) *msg.Message {
	m := msg.New(wire.TypeBulk)
	m.Header.Tid = h.Xfer
	m.SetSegments(h.Append(nil), nil, data)
	return m
}

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// connectRaw starts a raw peer on n and connects it to srv.
func connectRaw(t testing.TB, n *testNet, srv *rpc.Instance) (*rawPeer, *msgr.Conn) {
	t.Helper()
	p := newRawPeer(t, n, "")
	conn, err := p.m.Connect(srv.URI())
	if err != nil {
		t.Fatal(err)
	}
	return p, conn
}

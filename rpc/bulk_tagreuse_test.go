package rpc_test

import (
	"bytes"
	"sync"
	"testing"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/rpc/internal/wire"
)

// gateData holds the first bulk message the instance's reader sees until
// release is closed (the reader is slow, or the network delays it).
type gateData struct {
	once    sync.Once
	arrived chan struct{}
	release chan struct{}
}

func (g *gateData) Dispatch(*msg.Message) bool { return false }

func (g *gateData) CanFastDispatch(m *msg.Message) bool {
	if m.Header.Type == wire.TypeBulk {
		first := false
		g.once.Do(func() { first = true })
		if first {
			close(g.arrived)
			<-g.release
		}
	}
	return false // the rpc dispatcher takes it, as usual
}

func (g *gateData) FastDispatch(*msg.Message) {}

// A context closes while its GET's data is in flight; a new context gets
// the same tag (NewContext reuses free slots). The old data, late, must
// not be taken as the answer to the new context's transfer (with
// per-context transfer ids it was, and the new GET completed with bytes
// from another region of the holder): ids are unique in the instance.
func TestBulkLateDataAfterTagReuse(t *testing.T) {
	const n = 4 << 10 // eager: one span, one piece
	net := newNet()
	h := net.server(t, 0, 1, rpc.Options{})
	a := bytes.Repeat([]byte{0xAA}, n)
	b := bytes.Repeat([]byte{0xBB}, n)
	ha := register(t, h, [][]byte{a}, rpc.BulkRO)
	hb := register(t, h, [][]byte{b}, rpc.BulkRO)
	cl := net.client(t, rpc.Options{}, []*rpc.Instance{h})
	g := &gateData{arrived: make(chan struct{}), release: make(chan struct{})}
	cl.Messenger().AddDispatcherHead(g)
	defer func() {
		select {
		case <-g.release:
		default:
			close(g.release)
		}
	}()

	c1, err := cl.NewContext(rpc.ContextOptions{Auto: true})
	if err != nil {
		t.Fatal(err)
	}
	dst1 := register(t, cl, [][]byte{make([]byte, n)}, rpc.BulkWO)
	if _, err := c1.Transfer(rpc.BulkDesc{Op: rpc.BulkGet, Remote: ha.Handle(), Local: dst1, Len: n, Peer: &rpc.Endpoint{Rank: 0}}, nil); err != nil {
		t.Fatal(err)
	}
	recv(t, g.arrived, "the first GET's data at the reader")
	c1.Close() // its GET fails (ErrShutdown); its data is in flight

	c2, err := cl.NewContext(rpc.ContextOptions{Auto: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	dst2 := register(t, cl, [][]byte{make([]byte, n)}, rpc.BulkWO)
	done := make(chan error, 1)
	tr, err := c2.Transfer(rpc.BulkDesc{Op: rpc.BulkGet, Remote: hb.Handle(), Local: dst2, Len: n, Peer: &rpc.Endpoint{Rank: 0}},
		func(bc rpc.BulkCompletion) { done <- bc.Err })
	if err != nil {
		t.Fatal(err)
	}
	_ = tr
	// c2's transfer is registered (Transfer returned): let the reader go on.
	close(g.release)
	err = recv(t, done, "the second GET")
	got := dst2.Segments()[0]
	if err == nil && !bytes.Equal(got, b) {
		t.Fatalf("the new context's GET succeeded with the wrong bytes: got %#x..., want %#x...", got[:4], b[:4])
	}
	if err != nil {
		t.Fatalf("the new context's GET failed: %v", err)
	}
}

// The same, with a new GET of another length: the late data, which did
// not fit the new transfer's span, faulted the honest holder's
// connection when ids were per context; it is now ignored as late.
func TestBulkLateDataAfterTagReuseIgnored(t *testing.T) {
	const n = 8 << 10
	net := newNet()
	h := net.server(t, 0, 1, rpc.Options{})
	ha := register(t, h, [][]byte{make([]byte, n)}, rpc.BulkRO)
	cl := net.client(t, rpc.Options{}, []*rpc.Instance{h})
	g := &gateData{arrived: make(chan struct{}), release: make(chan struct{})}
	cl.Messenger().AddDispatcherHead(g)
	released := false
	defer func() {
		if !released {
			close(g.release)
		}
	}()
	c1, err := cl.NewContext(rpc.ContextOptions{Auto: true})
	if err != nil {
		t.Fatal(err)
	}
	dst1 := register(t, cl, [][]byte{make([]byte, n)}, rpc.BulkWO)
	if _, err := c1.Transfer(rpc.BulkDesc{Op: rpc.BulkGet, Remote: ha.Handle(), Local: dst1, Len: n, Peer: &rpc.Endpoint{Rank: 0}}, nil); err != nil {
		t.Fatal(err)
	}
	recv(t, g.arrived, "the first GET's data at the reader")
	c1.Close()
	c2, err := cl.NewContext(rpc.ContextOptions{Auto: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	dst2 := register(t, cl, [][]byte{make([]byte, n/2)}, rpc.BulkWO)
	done := make(chan error, 1)
	if _, err := c2.Transfer(rpc.BulkDesc{Op: rpc.BulkGet, Remote: ha.Handle(), Local: dst2, Len: n / 2, Peer: &rpc.Endpoint{Rank: 0}},
		func(bc rpc.BulkCompletion) { done <- bc.Err }); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	released = true
	if err := recv(t, done, "the second GET"); err != nil {
		t.Fatalf("honest GET failed: %v (malformed messages counted: %d)", err, cl.MalformedMessages())
	}
}

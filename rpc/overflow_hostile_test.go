package rpc_test

// Peers that misbehave on the overflow path (large outputs pulled as
// bulk): the requester's memory stays bounded by what it asked for.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/inproc"
)

var opOvfHostile = rpc.MakeOpcode(0x47, 1, 0)

// A second reply to a request whose output is being pulled is a peer
// breaking the protocol (it would make the requester allocate a buffer
// of the advertised size per reply): its connection is closed, and the
// request fails with it.
func TestOverflowHostileDuplicateReplies(t *testing.T) {
	p := newBulkPair(t, rpc.Options{})
	const size, dups = 1 << 20, 5
	out := register(t, p.srv, [][]byte{make([]byte, size)}, rpc.BulkRO)
	err := p.srv.Register(rpc.Protocol{Name: "rv", Base: 0x47, Version: 1, RPCs: []rpc.RPC{{Flags: rpc.Inline,
		Handler: func(r *rpc.Incoming) error {
			if err := rpc.SendOverflowReplies(r, out, dups); err != nil {
				t.Error(err)
			}
			return nil // r stays unanswered: the replies above are its answers
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	var drop atomic.Bool
	drop.Store(true) // a holder slow to serve: the first pull stays in flight
	rpc.DropGetRequests(p.srv.Messenger(), &drop)
	done := make(chan error, 1)
	if _, err := p.cctx.Send(rpc.Request{Endpoint: *p.peer, Opcode: opOvfHostile, Timeout: 30 * time.Second},
		func(c rpc.Completion) { done <- c.Err }); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, done, "the request's end"); rpc.CodeOf(err) != rpc.CodeUnreachable {
		t.Fatalf("request: %v, want its connection's failure", err)
	}
	if n := p.cli.MalformedMessages(); n != 1 {
		t.Fatalf("%d malformed messages counted, want 1 (the second reply)", n)
	}
	waitFor(t, "the pull ended", func() bool { return p.cctx.BulkStats().Active == 0 })
	if s := p.cctx.BulkStats(); s.Completed+s.Failed != 1 {
		t.Fatalf("%d output pulls for one request, want 1", s.Completed+s.Failed)
	}
	// Another connection works.
	drop.Store(false)
	if err := p.cctx.Ping(context.Background(), *p.peer); err != nil {
		t.Fatal(err)
	}
}

// A request whose output is being pulled completes (abort, timeout): its
// pull ends with it. Its credit is given back at once, so a pull that
// went on would let a requester with one credit per rank hold many
// outputs' buffers at once.
func TestOverflowHostileReplyPullOutlivesRequest(t *testing.T) {
	p := newBulkPair(t, rpc.Options{Credits: 1})
	const size, n = 1 << 20, 20
	big := make(rpc.Bytes, size)
	err := p.srv.Register(rpc.Protocol{Name: "rv", Base: 0x47, Version: 1, RPCs: []rpc.RPC{{Flags: rpc.Inline,
		Handler: func(r *rpc.Incoming) error { return r.Reply(&big) }}}})
	if err != nil {
		t.Fatal(err)
	}
	var drop atomic.Bool
	drop.Store(true)
	rpc.DropGetRequests(p.srv.Messenger(), &drop)
	started := func() uint64 { s := p.cctx.BulkStats(); return uint64(s.Active) + s.Completed + s.Failed }
	for i := range n {
		h, err := p.cctx.Send(rpc.Request{Endpoint: *p.peer, Opcode: opOvfHostile, Timeout: 30 * time.Second}, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("pull %d to start", i), func() bool { return started() > uint64(i) })
		if !h.Abort() {
			t.Fatalf("request %d completed before its abort", i)
		}
	}
	if st := p.cctx.Stats(); st.InFlight != 0 || st.Waiting != 0 {
		t.Fatalf("requests still tracked: %+v", st)
	}
	waitFor(t, "no output pull running after their requests were aborted", func() bool { return p.cctx.BulkStats().Active == 0 })
}

// A reply with an overflowing output that the connection refuses
// (ErrOutQueueFull: the peer reads slowly) frees the handle registered
// for it at once (nobody will pull or release it), and Reply says that
// the reply was not sent.
func TestOverflowHostileReplyHandleLeakOnFullQueue(t *testing.T) {
	nw := inproc.NewNetwork()
	nw.SetPartitionTimeout(-1) // a partition stalls the link until Heal
	nw.SetBufferSize(4 << 10)  // a stalled link blocks the writer at once
	srvName := fmt.Sprintf("inproc://rv-srv-%d", time.Now().UnixNano())
	cliName := srvName + "-cli"
	sm, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD, Num: 0}, Transports: transport.NewRegistry(nw),
		OutQueueBytes: 64 << 10, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	sm.SetDefaultPolicy(msgr.LossyClient())
	if err := sm.Bind(srvName); err != nil {
		t.Fatal(err)
	}
	if err := sm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sm.Shutdown)
	held := make(chan *rpc.Incoming, 1)
	srv, err := rpc.New(rpc.Options{Messenger: sm, Rank: 0, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := srv.Register(rpc.Protocol{Name: "rv", Base: 0x47, Version: 1, RPCs: []rpc.RPC{{Handler: hold(held)}}}); err != nil {
		t.Fatal(err)
	}
	newCtx(t, srv, rpc.ContextOptions{Auto: true})
	cctx := clientOfRank0(t, rpc.Options{Transports: transport.NewRegistry(nw.Node(cliName))}, srv)
	sctx := srv.Context(0)
	base := srv.BulkHandles()
	// The writer drains the queue now and then (the stalled link's
	// buffer), so a reply is not always refused: try until one is.
	for attempt := 0; ; attempt++ {
		if attempt == 200 {
			t.Fatal("no reply was refused in 200 attempts")
		}
		h, err := cctx.Send(rpc.Request{Endpoint: rpc.Endpoint{}, Opcode: opOvfHostile, Timeout: 30 * time.Second}, nil)
		if err != nil {
			t.Fatal(err)
		}
		r := recv(t, held, "the request")
		conn := rpc.IncomingConn(r)
		// The client stops reading for a moment: the server's queue fills.
		nw.Partition(srvName, cliName)
		fill := func(n int) {
			for i := 0; ; i++ {
				if i > 100000 {
					t.Fatal("the out queue never filled")
				}
				m := msg.New(0x7777)
				m.SetSegments(nil, nil, make([]byte, n))
				if err := conn.Send(m); err != nil {
					if !errors.Is(err, msgr.ErrOutQueueFull) {
						t.Fatal(err)
					}
					return
				}
			}
		}
		fill(8 << 10)
		fill(1)
		sent := sctx.Stats().Replies
		out := rpc.Bytes(bytes.Repeat([]byte{7}, 1<<20))
		rerr := r.Reply(&out)
		refused := sctx.Stats().Replies == sent
		nw.Heal()
		if !refused {
			h.Abort()
			// Its late reply is released by the client: wait for that.
			waitFor(t, "the sent reply's handle released", func() bool { return srv.BulkHandles() == base })
			continue
		}
		if !h.Abort() {
			t.Fatal("the request completed although its reply was refused")
		}
		select {
		case <-conn.Done():
			t.Fatal("the connection closed; the test wants it up")
		default:
		}
		if rpc.CodeOf(rerr) != rpc.CodeUnreachable {
			t.Fatalf("Reply of a refused reply: %v, want CodeUnreachable", rerr)
		}
		if n := srv.BulkHandles() - base; n != 0 {
			t.Fatalf("%d overflow handle(s) (the refused reply's 1 MiB output) still registered while the connection is up", n)
		}
		return
	}
}

// A target that is slow to serve holds at most its IncomingLimit of
// requests it has not answered, inline inputs included, however much its
// origins send (here with a larger eager limit than its own and no credit
// limit): the requests beyond it are answered CodeBusy at once.
func TestIncomingLimit(t *testing.T) {
	nw := inproc.NewNetwork()
	srvName := fmt.Sprintf("inproc://incoming-limit-%d", time.Now().UnixNano())
	const limit, size, n = 4 << 20, 1 << 20, 16
	srv, err := rpc.New(rpc.Options{Listen: srvName, Transports: transport.NewRegistry(nw), Logger: quietLogger(), IncomingLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := srv.Register(rpc.Protocol{Name: "rv", Base: 0x47, Version: 1, RPCs: []rpc.RPC{{
		Handler: func(r *rpc.Incoming) error { return r.Reply(nil) }}}}); err != nil {
		t.Fatal(err)
	}
	sctx := newCtx(t, srv, rpc.ContextOptions{}) // progressed by nobody: a stalled consumer
	cctx := clientOfRank0(t, rpc.Options{Transports: transport.NewRegistry(nw),
		Credits: rpc.UnlimitedCredits, Bulk: rpc.BulkOptions{EagerLimit: 2 << 20}}, srv)
	in := rpc.Bytes(make([]byte, size))
	errs := make(chan error, n)
	for range n {
		if _, err := cctx.Send(rpc.Request{Endpoint: rpc.Endpoint{}, Opcode: opOvfHostile, In: &in, Timeout: 30 * time.Second},
			func(c rpc.Completion) { errs <- c.Err }); err != nil {
			t.Fatal(err)
		}
	}
	const kept = limit / size // the inputs (rpc.Bytes) are the requests' data segments
	for range n - kept {
		if err := recv(t, errs, "a refused request"); !errors.Is(err, rpc.ErrBusy) {
			t.Fatalf("request beyond the limit: %v, want ErrBusy", err)
		}
	}
	st := sctx.Stats()
	if st.Held > limit || st.Busy != uint64(n-kept) {
		t.Fatalf("target holds %d bytes (limit %d), %d refused, want %d", st.Held, limit, st.Busy, n-kept)
	}
	// Serving them gives the budget back.
	pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sctx.ProgressUntil(pctx, func() bool { return sctx.Stats().Held == 0 }); err != nil {
		t.Fatalf("serving the held requests: %v (%+v)", err, sctx.Stats())
	}
	for range kept {
		if err := recv(t, errs, "a served request"); err != nil {
			t.Fatal(err)
		}
	}
}

// clientOfRank0 starts a client instance with o (quiet) that knows srv as
// rank 0, and returns a context of it with Auto progress.
func clientOfRank0(t *testing.T, o rpc.Options, srv *rpc.Instance) *rpc.Context {
	t.Helper()
	o.Logger = quietLogger()
	cli, err := rpc.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	if err := cli.Group().Add(0, srv.URI()); err != nil {
		t.Fatal(err)
	}
	return newCtx(t, cli, rpc.ContextOptions{Auto: true})
}

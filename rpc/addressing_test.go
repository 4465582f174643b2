package rpc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/rpc"
)

// A target refuses a request for another rank (the group's URI for the
// rank points at it) with ErrWrongRank, runs no handler, and says which
// rank it is; a server whose rank was left unset is rank 0, and answers
// for rank 0 only.
func TestWrongRankRefused(t *testing.T) {
	checkGoroutines(t)
	n := newNet()
	h := newHolder()
	s1 := n.server(t, 1, 1, rpc.Options{}, testProto(h))
	// A server that forgot its rank: Options.Rank unset.
	o := rpc.Options{Listen: n.prefix + "unset", Transports: n.reg, Logger: quietLogger()}
	s0, err := rpc.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s0.Close() })
	if err := s0.Register(testProto(h)); err != nil {
		t.Fatal(err)
	}
	newCtx(t, s0, rpc.ContextOptions{Auto: true})
	if s0.Rank() != 0 {
		t.Fatalf("unset rank is %d, want 0", s0.Rank())
	}

	cli := n.client(t, rpc.Options{}, nil, testProto(nil))
	g := cli.Group()
	// Ranks 0 and 2 point at s1 (rank 1); ranks 3 and 4 at s0 (rank 0).
	for rank, uri := range map[uint32]string{0: s1.URI(), 2: s1.URI(), 3: s0.URI(), 4: s0.URI(), 1: s1.URI()} {
		if err := g.Add(rank, uri); err != nil {
			t.Fatal(err)
		}
	}
	c := newCtx(t, cli, rpc.ContextOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		rank   uint32
		really string
	}{{0, "1"}, {2, "1"}, {3, "0"}, {4, "0"}} {
		ep := rpc.Endpoint{Rank: tc.rank}
		err := c.Call(ctx, ep, op(opEcho), &pair{}, new(pair))
		var e *rpc.Error
		if !errors.As(err, &e) || !errors.Is(err, rpc.ErrWrongRank) {
			t.Fatalf("rank %d: %v, want ErrWrongRank", tc.rank, err)
		}
		if !e.Remote || e.Opcode != op(opEcho) || e.Endpoint != ep || e.Code != rpc.CodeWrongRank {
			t.Errorf("rank %d: %#v", tc.rank, e)
		}
		want := fmt.Sprintf("rpc: wrong rank (opcode %v to %d:0): request for rank %d reached rank %s", op(opEcho), tc.rank, tc.rank, tc.really)
		if e.Error() != want {
			t.Errorf("rank %d: %q, want %q", tc.rank, e.Error(), want)
		}
	}
	// The hold handler never ran for a refused request.
	if err := c.Call(ctx, rpc.Endpoint{Rank: 0}, op(opHold), nil, nil); !errors.Is(err, rpc.ErrWrongRank) {
		t.Fatalf("hold at the wrong rank: %v", err)
	}
	select {
	case r := <-h.held:
		t.Fatalf("a handler ran for another rank's request (from %v)", r.Source())
	default:
	}
	// The right rank answers.
	var out pair
	if err := c.Call(ctx, rpc.Endpoint{Rank: 1}, op(opEcho), &pair{1, 2}, &out); err != nil || out != (pair{2, 3}) {
		t.Fatalf("rank 1: %v %v", out, err)
	}
	if st := s1.Context(0).Stats(); st.Received != 1 {
		t.Errorf("rank 1 handed %d requests to handlers, want 1", st.Received)
	}
}

// Every *rpc.Error names the opcode and the endpoint of its request,
// says "rpc: " once, and each failure has its code.
func TestErrorDetails(t *testing.T) {
	checkGoroutines(t)
	n := newNet()
	h := newHolder()
	p := testProto(h)
	const (
		opInvalid = 100 + iota
		opBusyErr
		opNested
	)
	extra := map[int]rpc.RPC{
		opInvalid: {Name: "invalid", Handler: func(r *rpc.Incoming) error { return fmt.Errorf("%w: offset 7", rpc.ErrInvalid) }},
		opBusyErr: {Name: "busy", Handler: func(r *rpc.Incoming) error { return &rpc.Error{Code: rpc.CodeBusy, Msg: "queue full"} }},
		opNested: {Name: "nested", Handler: func(r *rpc.Incoming) error {
			// A handler passing on the error of a request it made.
			return &rpc.Error{Code: rpc.CodeTimedOut, Opcode: op(opEcho), Endpoint: rpc.Endpoint{Rank: 9}, Msg: "backend"}
		}},
	}
	for len(p.RPCs) <= opNested {
		p.RPCs = append(p.RPCs, rpc.RPC{})
	}
	for i, d := range extra {
		p.RPCs[i] = d
	}
	srv := n.server(t, 3, 1, rpc.Options{}, p)
	cli := n.client(t, rpc.Options{}, []*rpc.Instance{srv}, p)
	if err := cli.Group().Add(4, n.prefix+"nobody"); err != nil {
		t.Fatal(err)
	}
	c := newCtx(t, cli, rpc.ContextOptions{Timeout: 200 * time.Millisecond})
	ctx := context.Background()
	ep3 := rpc.Endpoint{Rank: 3}
	cases := []struct {
		name string
		ep   rpc.Endpoint
		op   rpc.Opcode
		in   rpc.Input
		code rpc.Code
		text string // the whole message, "" to check only the structure
	}{
		{"handler error", ep3, op(opFail), nil, rpc.CodeHandler, fmt.Sprintf("rpc: handler error (opcode %v to 3:0): disk on fire", op(opFail))},
		{"sentinel from handler", ep3, rpc.MakeOpcode(1, 1, opInvalid), nil, rpc.CodeInvalid, fmt.Sprintf("rpc: invalid argument (opcode %v to 3:0): offset 7", rpc.MakeOpcode(1, 1, opInvalid))},
		{"*Error from handler", ep3, rpc.MakeOpcode(1, 1, opBusyErr), nil, rpc.CodeBusy, fmt.Sprintf("rpc: target busy (opcode %v to 3:0): queue full", rpc.MakeOpcode(1, 1, opBusyErr))},
		{"nested *Error", ep3, rpc.MakeOpcode(1, 1, opNested), nil, rpc.CodeTimedOut, ""},
		{"bad input", ep3, op(opEcho), rawIn{1, 2, 3}, rpc.CodeMalformed, ""},
		{"unregistered", ep3, rpc.MakeOpcode(1, 1, 999), nil, rpc.CodeUnregistered, ""},
		{"bad tag", rpc.Endpoint{Rank: 3, Tag: 5}, op(opEcho), &pair{}, rpc.CodeBadTarget, ""},
		{"timeout", ep3, op(opHold), nil, rpc.CodeTimedOut, fmt.Sprintf("rpc: timed out (opcode %v to 3:0)", op(opHold))},
		{"unknown rank", rpc.Endpoint{Rank: 8}, op(opEcho), &pair{}, rpc.CodeNotFound, ""},
		{"nobody listens", rpc.Endpoint{Rank: 4}, op(opEcho), &pair{}, rpc.CodeUnreachable, ""},
	}
	for _, tc := range cases {
		err := c.Call(ctx, tc.ep, tc.op, tc.in, nil)
		var e *rpc.Error
		if !errors.As(err, &e) {
			t.Errorf("%s: %v is not an *rpc.Error", tc.name, err)
			continue
		}
		if e.Code != tc.code || !errors.Is(err, tc.code.Err()) {
			t.Errorf("%s: code %v (%v), want %v", tc.name, e.Code, err, tc.code)
		}
		if e.Opcode != tc.op || e.Endpoint != tc.ep {
			t.Errorf("%s: opcode %v endpoint %v, want %v %v", tc.name, e.Opcode, e.Endpoint, tc.op, tc.ep)
		}
		s := e.Error()
		if got := strings.Count(s, "rpc: "); got != 1 {
			t.Errorf("%s: %q says \"rpc: \" %d times", tc.name, s, got)
		}
		if head := fmt.Sprintf("rpc: %v (opcode %v to %v)", tc.code, tc.op, tc.ep); !strings.HasPrefix(s, head) {
			t.Errorf("%s: %q does not start with %q", tc.name, s, head)
		}
		if strings.Count(s, tc.code.String()) != 1 {
			t.Errorf("%s: %q repeats its code", tc.name, s)
		}
		if tc.text != "" && s != tc.text {
			t.Errorf("%s: %q, want %q", tc.name, s, tc.text)
		}
	}
	for range len(h.held) {
		(<-h.held).Reply(nil)
	}
}

// A target process that goes away fails the requests in flight to it
// with ErrUnreachable, naming their opcode and endpoint.
func TestTargetGoneUnreachable(t *testing.T) {
	checkGoroutines(t)
	n := newNet()
	h := newHolder()
	srv := n.server(t, 2, 1, rpc.Options{}, testProto(h))
	cli := n.client(t, rpc.Options{}, []*rpc.Instance{srv}, testProto(nil))
	c := newCtx(t, cli, rpc.ContextOptions{Auto: true})
	errs := make(chan error, 1)
	ep := rpc.Endpoint{Rank: 2}
	if _, err := c.Send(rpc.Request{Endpoint: ep, Opcode: op(opHold)}, func(cp rpc.Completion) { errs <- cp.Err }); err != nil {
		t.Fatal(err)
	}
	recv(t, h.held, "held request")
	srv.Close()
	err := recv(t, errs, "completion")
	var e *rpc.Error
	if !errors.As(err, &e) || e.Code != rpc.CodeUnreachable || e.Opcode != op(opHold) || e.Endpoint != ep {
		t.Fatalf("got %#v (%v), want CodeUnreachable for %v at %v", e, err, op(opHold), ep)
	}
	if strings.Count(err.Error(), "rpc: ") != 1 {
		t.Errorf("%q", err)
	}
}

package rpc_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/coll"
	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/inproc"
)

// The test collectives: every rank answers its rank as 4 bytes; the
// aggregate is the concatenation, so it names who answered and in which
// order.
const collBase = 0x42

var (
	opRanks     = rpc.MakeOpcode(collBase, 1, 0) // arrival order
	opRanksTree = rpc.MakeOpcode(collBase, 1, 1) // tree order
)

// collHooks lets a test change one rank's handler.
type collHooks struct {
	mu sync.Mutex
	// before runs at the start of the handler of rank; a non-nil error
	// fails it.
	before map[uint32]func(ctx context.Context) error
	ran    map[uint32]int // handler runs per rank
}

func (h *collHooks) set(rank uint32, f func(ctx context.Context) error) {
	h.mu.Lock()
	h.before[rank] = f
	h.mu.Unlock()
}

func (h *collHooks) runs(rank uint32) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ran[rank]
}

func concatAgg(acc, v []byte) ([]byte, error) { return append(acc, v...), nil }

func decodeRanks(b []byte) []uint32 {
	out := make([]uint32, 0, len(b)/4)
	for ; len(b) >= 4; b = b[4:] {
		out = append(out, binary.LittleEndian.Uint32(b))
	}
	return out
}

func (h *collHooks) protocol() rpc.CollectiveProtocol {
	handler := func(ctx context.Context, r *rpc.CollectiveRequest) (rpc.Input, error) {
		var in rpc.Bytes
		if err := r.Decode(&in); err != nil {
			return nil, err
		}
		if string(in) != "collective input" {
			return nil, fmt.Errorf("input %q", in)
		}
		h.mu.Lock()
		h.ran[r.Rank]++
		f := h.before[r.Rank]
		h.mu.Unlock()
		if f != nil {
			if err := f(ctx); err != nil {
				return nil, err
			}
		}
		return rpc.Bytes(binary.LittleEndian.AppendUint32(nil, r.Rank)), nil
	}
	return rpc.CollectiveProtocol{Name: "ranks", Base: collBase, Version: 1, RPCs: []rpc.CollectiveRPC{
		{Name: "ranks", Handler: handler, Aggregate: concatAgg},
		{Name: "ranks-tree", Handler: handler, Aggregate: concatAgg, Order: coll.OrderTree},
	}}
}

// collGroup starts n ranks over an in-process network that all know
// each other at group version 1, with the test collectives registered.
func collGroup(t testing.TB, n int) (*inproc.Network, []*rpc.Instance, *collHooks) {
	t.Helper()
	nw := inproc.NewNetwork()
	prefix := fmt.Sprintf("inproc://coll%d-", netSeq.Add(1))
	h := &collHooks{before: map[uint32]func(context.Context) error{}, ran: map[uint32]int{}}
	ins := make([]*rpc.Instance, n)
	for i := range n {
		// Each rank dials from its own name, so that Partition can cut
		// two ranks apart.
		name := fmt.Sprintf("%srank%d", prefix, i)
		in, err := rpc.New(rpc.Options{Listen: name, Rank: uint32(i), Logger: quietLogger(), Transports: transport.NewRegistry(nw.Node(name))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close() })
		if _, err := in.NewContext(rpc.ContextOptions{Auto: true}); err != nil {
			t.Fatal(err)
		}
		if err := in.RegisterCollective(h.protocol()); err != nil {
			t.Fatal(err)
		}
		ins[i] = in
	}
	joinAll(t, ins, 1)
	return nw, ins, h
}

// tcpCollGroup is collGroup over loopback TCP.
func tcpCollGroup(t testing.TB, n int) ([]*rpc.Instance, *collHooks) {
	t.Helper()
	h := &collHooks{before: map[uint32]func(context.Context) error{}, ran: map[uint32]int{}}
	ins := make([]*rpc.Instance, n)
	for i := range n {
		in, err := rpc.New(rpc.Options{Listen: "tcp://127.0.0.1:0", Rank: uint32(i), Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close() })
		if _, err := in.NewContext(rpc.ContextOptions{Auto: true}); err != nil {
			t.Fatal(err)
		}
		if err := in.RegisterCollective(h.protocol()); err != nil {
			t.Fatal(err)
		}
		ins[i] = in
	}
	joinAll(t, ins, 1)
	return ins, h
}

// joinAll makes every instance know every other at version ver.
func joinAll(t testing.TB, ins []*rpc.Instance, ver uint32) {
	t.Helper()
	for i, in := range ins {
		var ms []rpc.Member
		for j, o := range ins {
			if j != i {
				ms = append(ms, rpc.Member{Rank: o.Rank(), URI: o.URI()})
			}
		}
		if len(ms) == 0 {
			if err := in.Group().Modify(rpc.ModReplace, nil, ver); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := in.Group().Modify(rpc.ModAdd, ms, ver); err != nil {
			t.Fatal(err)
		}
	}
}

func broadcast(t *testing.T, in *rpc.Instance, d rpc.CollectiveDesc) *rpc.CollectiveResult {
	t.Helper()
	if d.Input == nil {
		d.Input = rpc.Bytes("collective input")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := in.Context(0).Broadcast(ctx, d)
	if err != nil {
		t.Fatalf("broadcast: %v", err)
	}
	return res
}

func ranksUpTo(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i)
	}
	return out
}

var collTopologies = []coll.Topology{coll.Flat(), coll.KAry(2), coll.KAry(4), coll.KNomial(2), coll.KNomial(4)}

// TestCollectiveTopologies: over 1, 2, 3 and 64 ranks and every topology,
// every rank runs the handler once and the aggregate holds every rank;
// with tree order, in the tree's pre-order.
func TestCollectiveTopologies(t *testing.T) {
	for _, n := range []int{1, 2, 3, 64} {
		_, ins, h := collGroup(t, n)
		for ti, topo := range collTopologies {
			for _, op := range []rpc.Opcode{opRanks, opRanksTree} {
				root := uint32((ti * 7) % n)
				name := fmt.Sprintf("n%d/%v/root%d/op%v", n, topo, root, op)
				before := make([]int, n)
				for r := range n {
					before[r] = h.runs(uint32(r))
				}
				res := broadcast(t, ins[root], rpc.CollectiveDesc{Opcode: op, Topology: topo})
				if len(res.Failed) != 0 {
					t.Fatalf("%s: failed %v", name, res.Failed)
				}
				if !slices.Equal(res.Answered, ranksUpTo(n)) {
					t.Fatalf("%s: answered %v", name, res.Answered)
				}
				got := decodeRanks(res.Aggregate)
				if op == opRanksTree {
					tree, _ := coll.NewTree(topo, ranksUpTo(n), root)
					var pre []uint32
					var walk func(r uint32)
					walk = func(r uint32) {
						pre = append(pre, r)
						for _, c := range tree.Children(r) {
							walk(c)
						}
					}
					walk(root)
					if !slices.Equal(got, pre) {
						t.Fatalf("%s: tree-order aggregate %v, want %v", name, got, pre)
					}
				}
				slices.Sort(got)
				if !slices.Equal(got, ranksUpTo(n)) {
					t.Fatalf("%s: aggregate %v", name, got)
				}
				for r := range n {
					if h.runs(uint32(r)) != before[r]+1 {
						t.Fatalf("%s: rank %d ran %d times", name, r, h.runs(uint32(r))-before[r])
					}
				}
			}
		}
	}
}

func wantFailed(t *testing.T, res *rpc.CollectiveResult, rank uint32, reason coll.Reason, via uint32, sentinel error) {
	t.Helper()
	f, ok := res.FailedRank(rank)
	if !ok {
		t.Fatalf("rank %d not failed; failed %v answered %v", rank, res.Failed, res.Answered)
	}
	if f.Reason != reason || f.Via != via || !errors.Is(f.Err, sentinel) {
		t.Fatalf("rank %d: %v (err %v), want %v via %d matching %v", rank, f, f.Err, reason, via, sentinel)
	}
}

// covered checks that Answered and Failed partition want.
func covered(t *testing.T, res *rpc.CollectiveResult, want []uint32) {
	t.Helper()
	var all []uint32
	all = append(all, res.Answered...)
	for _, f := range res.Failed {
		all = append(all, f.Rank)
	}
	slices.Sort(all)
	if !slices.Equal(all, want) {
		t.Fatalf("answered %v + failed %v != %v", res.Answered, res.Failed, want)
	}
	got := decodeRanks(res.Aggregate)
	slices.Sort(got)
	if !slices.Equal(got, res.Answered) {
		t.Fatalf("aggregate %v, answered %v", got, res.Answered)
	}
}

// TestCollectiveExcludedAndSubset: excluded ranks and ranks that are not
// members are listed as failed (excluded) and never run the handler; a
// subset reaches only its ranks; a root outside its scope forwards
// without running its handler.
func TestCollectiveExcludedAndSubset(t *testing.T) {
	_, ins, h := collGroup(t, 8)
	for _, topo := range collTopologies {
		res := broadcast(t, ins[0], rpc.CollectiveDesc{Opcode: opRanks, Topology: topo, Excluded: []uint32{3, 5}})
		wantFailed(t, res, 3, coll.ReasonExcluded, 3, rpc.ErrExcluded)
		wantFailed(t, res, 5, coll.ReasonExcluded, 5, rpc.ErrExcluded)
		if len(res.Failed) != 2 {
			t.Fatalf("%v: failed %v", topo, res.Failed)
		}
		covered(t, res, ranksUpTo(8))

		res = broadcast(t, ins[2], rpc.CollectiveDesc{Opcode: opRanks, Topology: topo, Ranks: []uint32{1, 4, 6, 7, 99}, Excluded: []uint32{6}})
		wantFailed(t, res, 99, coll.ReasonExcluded, 99, rpc.ErrExcluded)
		wantFailed(t, res, 6, coll.ReasonExcluded, 6, rpc.ErrExcluded)
		if !slices.Equal(res.Answered, []uint32{1, 4, 7}) {
			t.Fatalf("%v: subset answered %v (root 2 outside it)", topo, res.Answered)
		}
		covered(t, res, []uint32{1, 4, 6, 7, 99})
	}
	// 6 ran only in the first broadcasts, 2 (the root outside the
	// subset) too.
	if n := len(collTopologies); h.runs(3) != 0 || h.runs(5) != 0 || h.runs(6) != n || h.runs(2) != n || h.runs(7) != 2*n {
		t.Fatalf("runs: 3:%d 5:%d 6:%d 2:%d", h.runs(3), h.runs(5), h.runs(6), h.runs(2))
	}
}

// TestCollectiveRankDown: over 2, 3, 16 and 64 ranks and every
// topology, a rank that is closed before the collective and a rank killed
// while its handler runs are listed as unreachable with their whole
// subtrees (via them), an excluded rank as excluded; the rest answers,
// well within the deadline.
func TestCollectiveRankDown(t *testing.T) {
	for _, n := range []int{2, 3, 16, 64} {
		for _, topo := range collTopologies {
			t.Run(fmt.Sprintf("n%d/%v", n, topo), func(t *testing.T) { rankDown(t, n, topo) })
		}
	}
}

// rankDown runs one collective from rank 0 over n ranks with rank 1
// closed before it and, with more than 2 ranks, rank n-1 killed while
// its handler runs, plus an excluded rank with more than 3.
func rankDown(t *testing.T, n int, topo coll.Topology) {
	_, ins, h := collGroup(t, n)
	var excluded []uint32
	if n > 3 {
		excluded = []uint32{2}
	}
	tree, _ := coll.NewScopedTree(topo, ranksUpTo(n), excluded, false, 0)
	// A closed rank: an inner one where the tree has any.
	down := uint32(1)
	ins[down].Close()
	// A rank killed mid-collective: its handler signals, then the test
	// shuts its messenger down.
	killed := uint32(n - 1)
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	if n > 2 {
		h.set(killed, func(ctx context.Context) error {
			close(started)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})
		go func() {
			select {
			case <-started:
				ins[killed].Messenger().Shutdown()
			case <-release: // under the closed rank: never reached
			}
		}()
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := ins[0].Context(0).Broadcast(ctx, rpc.CollectiveDesc{Opcode: opRanks, Topology: topo, Excluded: excluded, Input: rpc.Bytes("collective input")})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Fatalf("took %v", d)
	}
	for _, r := range tree.Subtree(down) {
		wantFailed(t, res, r, coll.ReasonUnreachable, down, rpc.ErrUnreachable)
	}
	if n > 2 {
		for _, r := range tree.Subtree(killed) {
			if _, ok := res.FailedRank(r); !ok {
				t.Fatalf("rank %d (under killed %d) not failed: %v", r, killed, res.Failed)
			}
		}
		if f, _ := res.FailedRank(killed); f.Reason != coll.ReasonUnreachable {
			t.Fatalf("killed rank: %v", f)
		}
	}
	for _, r := range excluded {
		wantFailed(t, res, r, coll.ReasonExcluded, r, rpc.ErrExcluded)
	}
	// Everything else answered, its value in the aggregate.
	for _, r := range ranksUpTo(n) {
		if _, failed := res.FailedRank(r); !failed && !slices.Contains(res.Answered, r) {
			t.Fatalf("rank %d neither answered nor failed", r)
		}
	}
	if !slices.Contains(res.Answered, 0) {
		t.Fatalf("root did not answer: %v", res.Failed)
	}
	covered(t, res, ranksUpTo(n))
}

// TestCollectiveVersionMismatch: a rank at another group version refuses;
// it and its subtree are listed with ReasonVersion, via it.
func TestCollectiveVersionMismatch(t *testing.T) {
	_, ins, _ := collGroup(t, 8)
	// Rank 2 moves to version 2 (it learns of a rank the others do not
	// know).
	if err := ins[2].Group().Modify(rpc.ModAdd, []rpc.Member{{Rank: 100, URI: "inproc://nowhere"}}, 2); err != nil {
		t.Fatal(err)
	}
	topo := coll.KNomial(2) // 0 → {1, 2, 4}, 2 → {3}
	res := broadcast(t, ins[0], rpc.CollectiveDesc{Opcode: opRanks, Topology: topo})
	wantFailed(t, res, 2, coll.ReasonVersion, 2, rpc.ErrGroupVersion)
	wantFailed(t, res, 3, coll.ReasonVersion, 2, rpc.ErrGroupVersion)
	if len(res.Failed) != 2 {
		t.Fatalf("failed %v", res.Failed)
	}
	covered(t, res, ranksUpTo(8))
	// Rooted at rank 2 itself, the others refuse.
	res = broadcast(t, ins[2], rpc.CollectiveDesc{Opcode: opRanks, Topology: coll.Flat()})
	if !slices.Equal(res.Answered, []uint32{2}) {
		t.Fatalf("answered %v", res.Answered)
	}
	for _, r := range []uint32{0, 1, 3, 4, 5, 6, 7} {
		wantFailed(t, res, r, coll.ReasonVersion, r, rpc.ErrGroupVersion)
	}
	wantFailed(t, res, 100, coll.ReasonUnreachable, 100, rpc.ErrUnreachable) // rank 100 does not exist
}

// TestCollectiveTCP runs collectives over loopback TCP: every topology
// over 3 and 16 ranks, then with a rank closed.
func TestCollectiveTCP(t *testing.T) {
	for _, n := range []int{3, 16} {
		ins, _ := tcpCollGroup(t, n)
		for _, topo := range collTopologies {
			res := broadcast(t, ins[n-1], rpc.CollectiveDesc{Opcode: opRanksTree, Topology: topo})
			if len(res.Failed) != 0 || !slices.Equal(res.Answered, ranksUpTo(n)) {
				t.Fatalf("n%d %v: answered %v failed %v", n, topo, res.Answered, res.Failed)
			}
			covered(t, res, ranksUpTo(n))
		}
		if n == 16 {
			ins[4].Close()
			tree, _ := coll.NewTree(coll.KNomial(2), ranksUpTo(n), 0)
			res := broadcast(t, ins[0], rpc.CollectiveDesc{Opcode: opRanks, Topology: coll.KNomial(2)})
			for _, r := range tree.Subtree(4) { // 4, 5, 6, 7
				wantFailed(t, res, r, coll.ReasonUnreachable, 4, rpc.ErrUnreachable)
			}
			covered(t, res, ranksUpTo(n))
			if len(res.Answered) != 12 {
				t.Fatalf("answered %v", res.Answered)
			}
		}
	}
}

// TestCollectiveHandlerError: a rank whose handler fails is listed with
// the handler's error; its children still answer through it.
func TestCollectiveHandlerError(t *testing.T) {
	_, ins, h := collGroup(t, 8)
	h.set(2, func(context.Context) error { return errors.New("disk on fire") })
	res := broadcast(t, ins[0], rpc.CollectiveDesc{Opcode: opRanks, Topology: coll.KNomial(2)}) // 2 → {3}
	wantFailed(t, res, 2, coll.ReasonHandler, 2, rpc.ErrHandler)
	if f, _ := res.FailedRank(2); f.Detail != "disk on fire" {
		t.Fatalf("detail %q", f.Detail)
	}
	if len(res.Failed) != 1 || !slices.Contains(res.Answered, 3) {
		t.Fatalf("failed %v answered %v", res.Failed, res.Answered)
	}
	covered(t, res, ranksUpTo(8))
	// The root's own handler failing.
	h.set(0, func(context.Context) error { return errors.New("root down") })
	res = broadcast(t, ins[0], rpc.CollectiveDesc{Opcode: opRanks, Topology: coll.Flat()})
	wantFailed(t, res, 0, coll.ReasonHandler, 0, rpc.ErrHandler)
	covered(t, res, ranksUpTo(8))
}

// TestCollectiveTimeout: an inner rank whose handler hangs past the
// deadline is listed as timed out while its child, whose answer it
// forwards at its own deadline, answers; a rank cut off by a stalled
// partition times out with its subtree. The collective ends near its
// timeout.
func TestCollectiveTimeout(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		nw, ins, h := collGroup(t, 8)
		nw.SetPartitionTimeout(-1) // a partition stalls links until Heal
		defer nw.Heal()
		hang := make(chan struct{})
		defer close(hang)
		h.set(2, func(ctx context.Context) error {
			<-hang // ignores ctx: the machine must answer without it
			return nil
		})
		topo := coll.KNomial(2) // 0 → {1, 2, 4}; 2 → {3}; 4 → {5, 6}; 6 → {7}
		// Warm the connections up, then stall the one from 0 to 4.
		broadcast(t, ins[0], rpc.CollectiveDesc{Opcode: opRanks, Topology: coll.Flat(), Excluded: []uint32{2}})
		nw.Partition(ins[0].URI(), ins[4].URI())
		const timeout = 1500 * time.Millisecond
		t0 := time.Now()
		res := broadcast(t, ins[0], rpc.CollectiveDesc{Opcode: opRanks, Topology: topo, Timeout: timeout})
		took := time.Since(t0)
		t.Logf("took %v (virtual) for a %v timeout", took, timeout)
		// Virtual time: no slack for a loaded machine; it ends by its timeout.
		if took > timeout || took < timeout/2 {
			t.Fatalf("took %v for a %v timeout", took, timeout)
		}
		wantFailed(t, res, 2, coll.ReasonTimedOut, 2, rpc.ErrTimedOut)
		for _, r := range []uint32{4, 5, 6, 7} {
			wantFailed(t, res, r, coll.ReasonTimedOut, 4, rpc.ErrTimedOut)
		}
		if !slices.Equal(res.Answered, []uint32{0, 1, 3}) {
			t.Fatalf("answered %v failed %v", res.Answered, res.Failed)
		}
		covered(t, res, ranksUpTo(8))
	})
}

// TestCollectiveAbort: canceling Broadcast's context ends the collective
// at once with the ranks still pending listed as canceled, and an error
// matching context.Canceled.
func TestCollectiveAbort(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		_, ins, h := collGroup(t, 4)
		started := make(chan struct{})
		h.set(3, func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-started
			cancel()
		}()
		t0 := time.Now()
		res, err := ins[0].Context(0).Broadcast(ctx, rpc.CollectiveDesc{Opcode: opRanks, Topology: coll.Flat(), Input: rpc.Bytes("collective input"), Timeout: 30 * time.Second})
		if !errors.Is(err, context.Canceled) || !errors.Is(err, rpc.ErrCanceled) {
			t.Fatalf("err %v", err)
		}
		// Virtual time: "at once" means no timer at all.
		if d := time.Since(t0); d != 0 {
			t.Fatalf("took %v", d)
		}
		wantFailed(t, res, 3, coll.ReasonCanceled, 3, rpc.ErrCanceled)
		covered(t, res, ranksUpTo(4))
	})
}

// TestCollectiveRefusals: a rank that has not registered the collective
// refuses it; a client cannot root one; an unregistered opcode or a bad
// topology does not start.
func TestCollectiveRefusals(t *testing.T) {
	net := newNet()
	h := &collHooks{before: map[uint32]func(context.Context) error{}, ran: map[uint32]int{}}
	ins := make([]*rpc.Instance, 3)
	for i := range ins {
		ins[i] = net.server(t, uint32(i), 1, rpc.Options{})
		if i != 1 {
			if err := ins[i].RegisterCollective(h.protocol()); err != nil {
				t.Fatal(err)
			}
		}
	}
	joinAll(t, ins, 1)
	res := broadcast(t, ins[0], rpc.CollectiveDesc{Opcode: opRanks, Topology: coll.Flat()})
	wantFailed(t, res, 1, coll.ReasonRefused, 1, rpc.ErrRefused)
	covered(t, res, ranksUpTo(3))
	// Rank 1 now registers only the collective forwarder (another
	// collective): it refuses this one by name.
	if err := ins[1].RegisterCollective(rpc.CollectiveProtocol{Name: "other", Base: collBase + 1, Version: 0, RPCs: []rpc.CollectiveRPC{
		{Handler: func(context.Context, *rpc.CollectiveRequest) (rpc.Input, error) { return nil, nil }},
	}}); err != nil {
		t.Fatal(err)
	}
	res = broadcast(t, ins[0], rpc.CollectiveDesc{Opcode: opRanks, Topology: coll.Flat()})
	wantFailed(t, res, 1, coll.ReasonRefused, 1, rpc.ErrRefused)

	cli := net.client(t, rpc.Options{}, ins)
	cc, _ := cli.NewContext(rpc.ContextOptions{})
	ctx := context.Background()
	if _, err := cc.Broadcast(ctx, rpc.CollectiveDesc{Opcode: opRanks}); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("client broadcast: %v", err)
	}
	if _, err := ins[0].Context(0).Broadcast(ctx, rpc.CollectiveDesc{Opcode: rpc.MakeOpcode(7, 0, 0)}); !errors.Is(err, rpc.ErrUnregistered) {
		t.Fatalf("unregistered: %v", err)
	}
	if _, err := ins[0].Context(0).Broadcast(ctx, rpc.CollectiveDesc{Opcode: opRanks, Topology: coll.Topology(2 << 16)}); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("bad topology: %v", err)
	}
	// A point-to-point request for a collective opcode is refused.
	if err := ins[0].Context(0).Call(ctx, rpc.Endpoint{Rank: 2}, opRanks, nil, nil); !errors.Is(err, rpc.ErrUnregistered) {
		t.Fatalf("point-to-point: %v", err)
	}
	if err := ins[0].RegisterCollective(h.protocol()); !errors.Is(err, rpc.ErrExists) {
		t.Fatalf("second registration: %v", err)
	}
}

// TestCollectiveVia: a client asks a rank to root a collective for it
// and gets the same result as the rank would; a rank that is down is an
// error (the client tries another).
func TestCollectiveVia(t *testing.T) {
	net := newNet()
	h := &collHooks{before: map[uint32]func(context.Context) error{}, ran: map[uint32]int{}}
	ins := make([]*rpc.Instance, 6)
	for i := range ins {
		ins[i] = net.server(t, uint32(i), 1, rpc.Options{})
		if err := ins[i].RegisterCollective(h.protocol()); err != nil {
			t.Fatal(err)
		}
	}
	joinAll(t, ins, 1)
	cli := net.client(t, rpc.Options{}, ins)
	cc, err := cli.NewContext(rpc.ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d := rpc.CollectiveDesc{Opcode: opRanksTree, Topology: coll.KAry(2), Excluded: []uint32{3}, Input: rpc.Bytes("collective input"), Timeout: 5 * time.Second}
	res, err := cc.BroadcastVia(ctx, 1, d)
	if err != nil {
		t.Fatal(err)
	}
	wantFailed(t, res, 3, coll.ReasonExcluded, 3, rpc.ErrExcluded)
	if !slices.Equal(res.Answered, []uint32{0, 1, 2, 4, 5}) || res.GroupVersion != 1 || res.ID>>32 != 1 {
		t.Fatalf("answered %v version %d id %#x", res.Answered, res.GroupVersion, res.ID)
	}
	covered(t, res, ranksUpTo(6))
	// In tree order from root 1 over {0,1,2,4,5} (3 excluded): tree
	// ranks 0..4 = 1,2,4,5,0; 2-ary: 1 → {2, 4}, 2 → {5, 0}.
	if got := decodeRanks(res.Aggregate); !slices.Equal(got, []uint32{1, 2, 5, 0, 4}) {
		t.Fatalf("aggregate %v", got)
	}
	// A subset via rank 0, and a root that is down.
	d.Ranks, d.Excluded = []uint32{2, 5}, nil
	res, err = cc.BroadcastVia(ctx, 0, d)
	if err != nil || !slices.Equal(res.Answered, []uint32{2, 5}) || len(res.Failed) != 0 {
		t.Fatalf("subset: %+v %v", res, err)
	}
	ins[4].Close()
	if _, err := cc.BroadcastVia(ctx, 4, d); !errors.Is(err, rpc.ErrUnreachable) {
		t.Fatalf("via a closed rank: %v", err)
	}
}

// TestCollectiveDeadInView: a member the root's view has dead is left
// out of the tree and listed as excluded, and the ranks below it in the
// full tree are reached through others.
func TestCollectiveDeadInView(t *testing.T) {
	_, ins, h := collGroup(t, 8)
	ins[2].Close()
	ins[0].Group().SetState(2, rpc.MemberDead, 1)
	res := broadcast(t, ins[0], rpc.CollectiveDesc{Opcode: opRanks, Topology: coll.KNomial(2)}) // 2 → {3} in the full tree
	wantFailed(t, res, 2, coll.ReasonExcluded, 2, rpc.ErrExcluded)
	if len(res.Failed) != 1 || !slices.Contains(res.Answered, 3) {
		t.Fatalf("failed %v answered %v", res.Failed, res.Answered)
	}
	covered(t, res, ranksUpTo(8))
	if h.runs(2) != 0 {
		t.Fatal("the dead rank ran the handler")
	}
}

// TestCollectiveLargeInput: an input beyond the eager limit goes down the
// tree as chained bulk (each rank pulls it from its parent, CaRT's
// co_bulk_hdl store-and-forward) and every handler sees it whole.
func TestCollectiveLargeInput(t *testing.T) {
	_, ins, _ := collGroup(t, 16)
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	proto := rpc.CollectiveProtocol{Name: "big", Base: collBase + 2, Version: 0, RPCs: []rpc.CollectiveRPC{{
		Handler: func(_ context.Context, r *rpc.CollectiveRequest) (rpc.Input, error) {
			if !slices.Equal(r.Input(), big) {
				return nil, fmt.Errorf("rank %d got %d bytes, not the input", r.Rank, len(r.Input()))
			}
			return rpc.Bytes(binary.LittleEndian.AppendUint32(nil, r.Rank)), nil
		},
		Aggregate: concatAgg,
	}}}
	for _, in := range ins {
		if err := in.RegisterCollective(proto); err != nil {
			t.Fatal(err)
		}
	}
	for _, topo := range []coll.Topology{coll.Flat(), coll.KNomial(2)} {
		res := broadcast(t, ins[0], rpc.CollectiveDesc{Opcode: rpc.MakeOpcode(collBase+2, 0, 0), Topology: topo, Input: rpc.Bytes(big)})
		if len(res.Failed) != 0 || len(res.Answered) != 16 {
			t.Fatalf("%v: failed %v answered %v", topo, res.Failed, res.Answered)
		}
		covered(t, res, ranksUpTo(16))
	}
}

// BenchmarkBroadcast measures one collective over 64 in-process ranks
// per topology.
func BenchmarkBroadcast(b *testing.B) {
	_, ins, _ := collGroup(b, 64)
	for _, topo := range collTopologies {
		b.Run(topo.String(), func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			d := rpc.CollectiveDesc{Opcode: opRanks, Topology: topo, Input: rpc.Bytes("collective input")}
			for b.Loop() {
				res, err := ins[0].Context(0).Broadcast(ctx, d)
				if err != nil || len(res.Answered) != 64 {
					b.Fatalf("%v %v", err, res.Failed)
				}
			}
		})
	}
}

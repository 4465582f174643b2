package rpc_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/swim"
)

// eventLog collects a group's membership events.
type eventLog struct {
	mu  sync.Mutex
	evs []rpc.MemberEvent
	sig chan struct{}
}

func watch(t testing.TB, g *rpc.Group) *eventLog {
	l := &eventLog{sig: make(chan struct{}, 1)}
	cancel := g.Watch(func(e rpc.MemberEvent) {
		l.mu.Lock()
		l.evs = append(l.evs, e)
		l.mu.Unlock()
		select {
		case l.sig <- struct{}{}:
		default:
		}
	})
	t.Cleanup(cancel)
	return l
}

// wait waits up to d for an event matching ok.
func (l *eventLog) wait(t testing.TB, d time.Duration, what string, ok func(rpc.MemberEvent) bool) rpc.MemberEvent {
	t.Helper()
	deadline := time.After(d)
	for {
		l.mu.Lock()
		for _, e := range l.evs {
			if ok(e) {
				l.mu.Unlock()
				return e
			}
		}
		l.mu.Unlock()
		select {
		case <-l.sig:
		case <-deadline:
			t.Fatalf("no %s within %v; events: %v", what, d, l.all())
		}
	}
}

func (l *eventLog) all() []rpc.MemberEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.evs)
}

// A rank this instance knows dead is excluded at once: requests in
// flight and waiting for credits fail with ErrExcluded, new ones fail
// without being transmitted (it is not dialled), until it is alive at a
// higher incarnation; older verdicts are ignored; watchers hear it all.
func TestDeadRankExcluded(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		checkGoroutines(t)
		n := newNet()
		h := newHolder()
		s0 := n.server(t, 0, 1, rpc.Options{}, testProto(h))
		s1 := n.server(t, 1, 1, rpc.Options{}, testProto(h))
		cli := n.client(t, rpc.Options{Credits: 1}, []*rpc.Instance{s0, s1}, testProto(nil))
		g := cli.Group()
		log := watch(t, g)
		c := newCtx(t, cli, rpc.ContextOptions{Auto: true})
		errs := make(chan error, 8)
		for range 3 {
			if _, err := c.Send(rpc.Request{Endpoint: rpc.Endpoint{Rank: 1}, Opcode: op(opHold)}, func(cp rpc.Completion) { errs <- cp.Err }); err != nil {
				t.Fatal(err)
			}
		}
		held := recv(t, h.held, "request at rank 1")
		defer held.Reply(nil)
		if st := c.EndpointStats(1); st.InFlight != 1 || st.Waiting != 2 {
			t.Fatalf("stats %+v", st)
		}
		v := g.Version()
		if !g.SetState(1, rpc.MemberDead, 7) {
			t.Fatal("SetState dead changed nothing")
		}
		for range 3 {
			if err := recv(t, errs, "excluded completion"); !errors.Is(err, rpc.ErrExcluded) {
				t.Fatalf("got %v, want ErrExcluded", err)
			}
		}
		if g.Version() != v || !g.Has(1) || !g.Excluded(1) {
			t.Fatalf("version %d (was %d), member %v, excluded %v", g.Version(), v, g.Has(1), g.Excluded(1))
		}
		tx := c.Stats().Transmitted
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for range 5 {
			start := time.Now()
			err := c.Call(ctx, rpc.Endpoint{Rank: 1}, op(opEcho), &pair{}, nil)
			var e *rpc.Error
			if !errors.As(err, &e) || e.Code != rpc.CodeExcluded || e.Endpoint.Rank != 1 || e.Opcode != op(opEcho) {
				t.Fatalf("call to a dead rank: %v", err)
			}
			// Virtual time: "at once" means no timer at all.
			if d := time.Since(start); d != 0 {
				t.Fatalf("call to a dead rank took %v", d)
			}
		}
		// Another tag of the dead rank: no URI lookup either.
		if err := c.Call(ctx, rpc.Endpoint{Rank: 1, Tag: 3}, op(opEcho), &pair{}, nil); !errors.Is(err, rpc.ErrExcluded) {
			t.Fatalf("other tag: %v", err)
		}
		if st := c.Stats(); st.Transmitted != tx || st.URILookups != 0 {
			t.Fatalf("requests to a dead rank went out: %+v (transmitted %d before)", st, tx)
		}
		// Rank 0 is unaffected.
		if err := c.Call(ctx, rpc.Endpoint{Rank: 0}, op(opEcho), &pair{}, new(pair)); err != nil {
			t.Fatal(err)
		}
		// A verdict at an older incarnation, or at the one it died at, does
		// not revive it.
		if g.SetState(1, rpc.MemberAlive, 6) || !g.Excluded(1) {
			t.Fatal("an older verdict revived the rank")
		}
		if g.SetState(1, rpc.MemberAlive, 7) || g.SetState(1, rpc.MemberSuspect, 7) || !g.Excluded(1) {
			t.Fatal("a verdict at the incarnation it died at revived the rank")
		}
		if st, inc, ok := g.State(1); st != rpc.MemberDead || inc != 7 || !ok {
			t.Fatalf("State(1) = %v %d %v", st, inc, ok)
		}
		// Alive again (restarted higher): dialled again.
		if !g.SetState(1, rpc.MemberAlive, 8) {
			t.Fatal("SetState alive changed nothing")
		}
		var out pair
		if err := c.Call(ctx, rpc.Endpoint{Rank: 1}, op(opEcho), &pair{1, 1}, &out); err != nil || out != (pair{2, 2}) {
			t.Fatalf("rank 1 alive again: %v %v", out, err)
		}
		log.wait(t, 5*time.Second, "alive event", func(e rpc.MemberEvent) bool { return e.Kind == rpc.EventAlive && e.Rank == 1 && e.Incarnation == 8 })
		var kinds []rpc.EventKind
		for _, e := range log.all() {
			if e.Rank == 1 {
				kinds = append(kinds, e.Kind)
			}
		}
		if !slices.Equal(kinds, []rpc.EventKind{rpc.EventDead, rpc.EventAlive}) {
			t.Fatalf("events for rank 1: %v", log.all())
		}
		if live := g.Live(); !slices.Equal(live, []uint32{0, 1}) {
			t.Fatalf("live %v", live)
		}
	})
}

// RPCs registered with CheckGroupVersion are refused with
// ErrGroupVersion when the origin's version is not the target's.
func TestGroupVersionChecked(t *testing.T) {
	checkGoroutines(t)
	n := newNet()
	p := rpc.Protocol{Name: "v", Base: 2, Version: 1, RPCs: []rpc.RPC{
		{Name: "checked", Flags: rpc.CheckGroupVersion | rpc.Inline, Handler: func(r *rpc.Incoming) error {
			return r.Reply(&pair{A: r.GroupVersion()})
		}},
		{Name: "unchecked", Flags: rpc.Inline, Handler: func(r *rpc.Incoming) error { return r.Reply(&pair{A: r.GroupVersion()}) }},
	}}
	srv := n.server(t, 0, 1, rpc.Options{}, p)
	cli := n.client(t, rpc.Options{}, []*rpc.Instance{srv}, p)
	c := newCtx(t, cli, rpc.ContextOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	checked, unchecked := rpc.MakeOpcode(2, 1, 0), rpc.MakeOpcode(2, 1, 1)
	if cli.Group().Version() == srv.Group().Version() {
		t.Fatalf("versions already equal: %d", srv.Group().Version())
	}
	err := c.Call(ctx, rpc.Endpoint{}, checked, nil, new(pair))
	var e *rpc.Error
	if !errors.As(err, &e) || e.Code != rpc.CodeGroupVersion || !e.Remote || !errors.Is(err, rpc.ErrGroupVersion) {
		t.Fatalf("mismatched version: %v", err)
	}
	var out pair
	if err := c.Call(ctx, rpc.Endpoint{}, unchecked, nil, &out); err != nil || out.A != cli.Group().Version() {
		t.Fatalf("unchecked: %v %v", out, err)
	}
	// Bring the server to the client's version.
	for srv.Group().Version() < cli.Group().Version() {
		if err := srv.Group().Modify(rpc.ModRemove, nil, cli.Group().Version()); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Call(ctx, rpc.Endpoint{}, checked, nil, &out); err != nil || out.A != srv.Group().Version() {
		t.Fatalf("matching version: %v %v", out, err)
	}
}

// Propose applies a membership change at the next version here and at
// every rank; a removed rank is told, and learns it was excluded.
func TestProposeReachesEveryRank(t *testing.T) {
	checkGoroutines(t)
	n := newNet()
	var srv []*rpc.Instance
	for r := range uint32(4) {
		srv = append(srv, n.server(t, r, 1, rpc.Options{}))
	}
	// Ranks 0-2 form the group; rank 3 is not a member yet.
	for _, s := range srv[:3] {
		for _, o := range srv[:3] {
			if o != s {
				if err := s.Group().Add(o.Rank(), o.URI()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	logs := make([]*eventLog, 4)
	for i, s := range srv {
		logs[i] = watch(t, s.Group())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	auth := srv[0]
	c := auth.Context(0)
	// Remove rank 2.
	v, failed, err := auth.Group().Propose(ctx, c, rpc.ModRemove, []rpc.Member{{Rank: 2}})
	if err != nil || len(failed) != 0 {
		t.Fatalf("remove: v %d failed %v err %v", v, failed, err)
	}
	for _, s := range srv[:2] {
		if s.Group().Version() != v || !slices.Equal(s.Group().Ranks(), []uint32{0, 1}) {
			t.Fatalf("rank %d: version %d ranks %v, want %d [0 1]", s.Rank(), s.Group().Version(), s.Group().Ranks(), v)
		}
	}
	logs[1].wait(t, 5*time.Second, "rank 1 hearing rank 2 left", func(e rpc.MemberEvent) bool {
		return e.Kind == rpc.EventLeft && e.Rank == 2 && e.Version == v
	})
	logs[2].wait(t, 5*time.Second, "rank 2 learning it was excluded", func(e rpc.MemberEvent) bool {
		return e.Kind == rpc.EventExcluded && e.Rank == 2 && e.Version == v
	})
	if got := srv[2].Group().ExcludedAt(); got != v {
		t.Fatalf("rank 2 ExcludedAt %d, want %d", got, v)
	}
	// Requests to the removed rank fail with ErrExcluded at once.
	if err := c.Call(ctx, rpc.Endpoint{Rank: 2}, rpc.OpPing, nil, nil); !errors.Is(err, rpc.ErrExcluded) {
		t.Fatalf("ping removed rank: %v", err)
	}
	// Add rank 3: it gets the whole membership.
	v2, failed, err := auth.Group().Propose(ctx, c, rpc.ModAdd, []rpc.Member{{Rank: 3, URI: srv[3].URI()}})
	if err != nil || len(failed) != 0 || v2 != v+1 {
		t.Fatalf("add: v %d failed %v err %v", v2, failed, err)
	}
	for _, s := range []*rpc.Instance{srv[0], srv[1], srv[3]} {
		if s.Group().Version() != v2 || !slices.Equal(s.Group().Ranks(), []uint32{0, 1, 3}) {
			t.Fatalf("rank %d: version %d ranks %v", s.Rank(), s.Group().Version(), s.Group().Ranks())
		}
	}
	logs[3].wait(t, 5*time.Second, "rank 3 hearing rank 1 joined", func(e rpc.MemberEvent) bool {
		return e.Kind == rpc.EventJoined && e.Rank == 1
	})
	// Replace: rank 2 back, rank 1 out.
	v3, failed, err := auth.Group().Propose(ctx, c, rpc.ModReplace, []rpc.Member{{Rank: 0, URI: srv[0].URI()}, {Rank: 2, URI: srv[2].URI()}, {Rank: 3, URI: srv[3].URI()}})
	if err != nil || len(failed) != 0 {
		t.Fatalf("replace: v %d failed %v err %v", v3, failed, err)
	}
	for _, s := range []*rpc.Instance{srv[0], srv[2], srv[3]} {
		if s.Group().Version() != v3 || !slices.Equal(s.Group().Ranks(), []uint32{0, 2, 3}) {
			t.Fatalf("rank %d: version %d ranks %v", s.Rank(), s.Group().Version(), s.Group().Ranks())
		}
	}
	logs[1].wait(t, 5*time.Second, "rank 1 learning it was excluded", func(e rpc.MemberEvent) bool {
		return e.Kind == rpc.EventExcluded && e.Rank == 1 && e.Version == v3
	})
	// A stale version is refused.
	if err := srv[3].Group().Modify(rpc.ModRemove, nil, v3); !errors.Is(err, rpc.ErrGroupVersion) {
		t.Fatalf("stale version: %v", err)
	}
}

// fastSWIM is a SWIM configuration for in-process tests: 50 ms periods.
var fastSWIM = swim.Config{
	Period:           50 * time.Millisecond,
	PingTimeout:      20 * time.Millisecond,
	IndirectTimeout:  40 * time.Millisecond,
	SuspicionTimeout: 500 * time.Millisecond,
}

// swimGroup starts n ranks that all know each other, each with SWIM.
func swimGroup(t *testing.T, n int, o rpc.SWIMOptions) ([]*rpc.Instance, []*eventLog) {
	t.Helper()
	net := newNet()
	var srv []*rpc.Instance
	for r := range n {
		srv = append(srv, net.server(t, uint32(r), 1, rpc.Options{}))
	}
	for _, s := range srv {
		for _, o := range srv {
			if o != s {
				if err := s.Group().Add(o.Rank(), o.URI()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	logs := make([]*eventLog, n)
	for i, s := range srv {
		logs[i] = watch(t, s.Group())
		if o.Config == (swim.Config{}) {
			o.Config = fastSWIM
		}
		if _, err := s.StartSWIM(o); err != nil {
			t.Fatal(err)
		}
	}
	return srv, logs
}

// SWIM over ferry RPCs: a rank that goes away is declared dead by every
// live rank, excluded at once, and the lowest live rank removes it from
// the group at a new version that every live rank applies.
func TestSWIMDeadRankRemoved(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		checkGoroutines(t)
		srv, logs := swimGroup(t, 4, rpc.SWIMOptions{})
		// Let SWIM run a few periods with everyone alive.
		time.Sleep(300 * time.Millisecond) // virtual: six periods
		for i, s := range srv {
			if live := s.Group().Live(); len(live) != 4 {
				t.Fatalf("rank %d: live %v before any failure; events %v", i, live, logs[i].all())
			}
		}
		v := srv[0].Group().Version()
		srv[2].Close()
		for _, i := range []int{0, 1, 3} {
			logs[i].wait(t, 10*time.Second, "rank 2 dead or left", func(e rpc.MemberEvent) bool {
				return e.Rank == 2 && (e.Kind == rpc.EventDead || e.Kind == rpc.EventLeft)
			})
		}
		for _, i := range []int{0, 1, 3} {
			s := srv[i]
			waitFor(t, "the new membership at every live rank", func() bool {
				return s.Group().Version() > v && !s.Group().Has(2)
			})
			if err := s.Context(0).Ping(context.Background(), rpc.Endpoint{Rank: 2}); !errors.Is(err, rpc.ErrExcluded) {
				t.Fatalf("rank %d pinging rank 2: %v", i, err)
			}
		}
		if a, b := srv[1].Group().Version(), srv[3].Group().Version(); a != b {
			t.Fatalf("versions differ: %d %d", a, b)
		}
		// No false positive among the live ranks.
		for _, i := range []int{0, 1, 3} {
			for _, e := range logs[i].all() {
				if e.Rank != 2 && e.Kind == rpc.EventDead {
					t.Errorf("rank %d: false positive %v", i, e)
				}
			}
		}
	})
}

// A rank removed from the group while it was not told (here: by the
// application, on the other ranks only) learns it was excluded from the
// first member its SWIM messages reach, and with AuthorityApplication it
// is not re-added.
func TestSWIMTellsExcludedRank(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		checkGoroutines(t)
		srv, logs := swimGroup(t, 3, rpc.SWIMOptions{Authority: rpc.AuthorityApplication})
		v := srv[0].Group().Version()
		for _, s := range srv[:2] {
			if err := s.Group().Modify(rpc.ModRemove, []rpc.Member{{Rank: 2}}, v+1); err != nil {
				t.Fatal(err)
			}
		}
		e := logs[2].wait(t, 10*time.Second, "rank 2 learning it was excluded", func(e rpc.MemberEvent) bool {
			return e.Kind == rpc.EventExcluded && e.Rank == 2
		})
		if e.Version != v+1 || srv[2].Group().ExcludedAt() != v+1 || srv[2].Group().Version() != v+1 {
			t.Fatalf("event %v; rank 2 ExcludedAt %d version %d, want %d", e, srv[2].Group().ExcludedAt(), srv[2].Group().Version(), v+1)
		}
		time.Sleep(2 * time.Second) // virtual: forty periods, and the application's authority re-adds nothing
		for _, s := range srv[:2] {
			if s.Group().Has(2) || s.Group().Version() != v+1 {
				t.Fatalf("rank %d: has 2 %v, version %d", s.Rank(), s.Group().Has(2), s.Group().Version())
			}
		}
	})
}

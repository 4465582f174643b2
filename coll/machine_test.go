package coll

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// fate is what happens to one rank in a simulated collective.
type fate uint8

const (
	fOK          fate = iota
	fHandler          // its handler fails; it still forwards
	fUnreachable      // the forward to it fails at once
	fTimeout          // it never answers
	fVersion          // it refuses: its group version differs
	fKilled           // it forwards to its children, then dies
)

var fateReason = map[fate]Reason{fUnreachable: ReasonUnreachable, fTimeout: ReasonTimedOut, fVersion: ReasonVersion, fKilled: ReasonUnreachable}

func concat(acc, v []Rank) []Rank { return append(slices.Clip(acc), v...) }

// event is a delivery in the simulated network.
type event struct {
	to    Rank // the machine it is for
	local bool
	from  Rank
	rep   *Report[[]Rank]
	fail  Reason
}

// runCollective runs one machine per reached rank over tree, delivering
// events in a random order, and returns the root's result.
func runCollective(t *testing.T, rng *rand.Rand, tr *Tree, fates map[Rank]fate, rootLocal bool, order Order) Result[[]Rank] {
	t.Helper()
	const D = 1000
	ms := map[Rank]*Machine[[]Rank]{}
	var queue []event
	var start func(r Rank)
	start = func(r Rank) {
		local := r != tr.Root() || rootLocal
		m, err := New(Config[[]Rank]{Tree: tr, Self: r, Local: local, Aggregate: concat, Order: order, Deadline: int64(D - tr.Level(r))})
		if err != nil {
			t.Fatal(err)
		}
		ms[r] = m
		for _, c := range m.Children() {
			switch fates[c] {
			case fUnreachable, fVersion:
				queue = append(queue, event{to: r, from: c, fail: fateReason[fates[c]]})
			case fTimeout:
			default: // fKilled forwards, then its parent learns it died
				start(c)
				if fates[c] == fKilled {
					queue = append(queue, event{to: r, from: c, fail: ReasonUnreachable})
				}
			}
		}
		if local {
			queue = append(queue, event{to: r, local: true})
		}
	}
	start(tr.Root())
	finished := map[Rank]bool{}
	// report sends a done machine's report to its parent.
	report := func(r Rank) {
		if finished[r] {
			return
		}
		finished[r] = true
		p, ok := tr.Parent(r)
		if !ok || fates[r] == fKilled {
			return
		}
		res, _ := ms[r].Result()
		rep := res.Report
		queue = append(queue, event{to: p, from: r, rep: &rep})
	}
	for now := int64(D - tr.Depth() - 1); now <= D; now++ {
		for len(queue) > 0 {
			i := rng.IntN(len(queue))
			e := queue[i]
			queue = slices.Delete(queue, i, i+1)
			m := ms[e.to]
			var err error
			switch {
			case e.local && fates[e.to] == fHandler:
				err = m.LocalFailed(ReasonHandler, fmt.Sprintf("rank %d failed", e.to))
			case e.local:
				err = m.Local([]Rank{e.to})
			case e.rep != nil:
				err = m.Reply(e.from, *e.rep)
			default:
				err = m.ChildFailed(e.from, e.fail, "")
			}
			if err != nil && !errors.Is(err, ErrFinished) {
				t.Fatalf("event %+v: %v", e, err)
			}
			if m.Done() {
				report(e.to)
			}
		}
		for r, m := range ms {
			if m.Tick(now) {
				report(r)
			}
		}
	}
	res, ok := ms[tr.Root()].Result()
	if !ok {
		t.Fatal("the root's machine is not done after its deadline")
	}
	return res
}

// reference computes the expected outcome simply: a rank failed with the
// reason of its ancestor (or itself) nearest the root that was not
// reached, else with its handler's failure; the aggregate is the
// pre-order of the ranks that answered.
func reference(tr *Tree, fates map[Rank]fate, rootLocal bool) (answered []Rank, failed []Failure, preorder []Rank) {
	for _, r := range tr.Ranks() {
		var path []Rank // r up to the root's child
		for x := r; x != tr.Root(); x, _ = tr.Parent(x) {
			path = append(path, x)
		}
		var f *Failure
		for i := len(path) - 1; i >= 0; i-- {
			if why, ok := fateReason[fates[path[i]]]; ok {
				f = &Failure{Rank: r, Reason: why, Via: path[i]}
				break
			}
		}
		switch {
		case f != nil:
			failed = append(failed, *f)
		case r == tr.Root() && !rootLocal:
		case fates[r] == fHandler:
			failed = append(failed, Failure{Rank: r, Reason: ReasonHandler, Via: r})
		default:
			answered = append(answered, r)
		}
	}
	ans := map[Rank]bool{}
	for _, r := range answered {
		ans[r] = true
	}
	var walk func(r Rank)
	walk = func(r Rank) {
		if ans[r] {
			preorder = append(preorder, r)
		}
		for _, c := range tr.Children(r) {
			walk(c)
		}
	}
	walk(tr.Root())
	return answered, failed, preorder
}

// TestMachineAgainstReference runs whole collectives of machines with
// failures injected (handler errors, unreachable, silent, refusing and
// dying ranks) in random delivery orders, for every topology, and checks
// the root's result against the reference.
func TestMachineAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, n := range []int{1, 2, 3, 64, 200} {
		for _, topo := range topologies {
			for iter := range 6 {
				tr := mustTree(t, topo, seq(n), Rank(rng.IntN(n)))
				fates := map[Rank]fate{}
				rate := []float64{0, 0.05, 0.2}[iter%3]
				for _, r := range tr.Ranks() {
					if rng.Float64() < rate {
						fates[r] = fate(1 + rng.IntN(5))
					}
				}
				// The root itself is reached; at most its handler fails.
				if fates[tr.Root()] != fHandler {
					delete(fates, tr.Root())
				}
				rootLocal := iter != 4
				order := Order(iter % 2)
				name := fmt.Sprintf("%v/n%d/%d", topo, n, iter)
				res := runCollective(t, rng, tr, fates, rootLocal, order)
				ans, failed, pre := reference(tr, fates, rootLocal)
				if !slices.Equal(res.Answered, ans) {
					t.Fatalf("%s: answered %v, want %v", name, res.Answered, ans)
				}
				got := slices.Clone(res.Failed)
				for i := range got {
					got[i].Detail = ""
				}
				if !slices.Equal(got, failed) {
					t.Fatalf("%s: failed %v, want %v", name, got, failed)
				}
				if len(ans)+len(failed)+map[bool]int{true: 0, false: 1}[rootLocal] != n {
					t.Fatalf("%s: %d answered + %d failed of %d", name, len(ans), len(failed), n)
				}
				if res.HasValue != (len(pre) > 0) {
					t.Fatalf("%s: has value %v with %d answers", name, res.HasValue, len(pre))
				}
				v := res.Value
				if order == OrderArrival {
					v = slices.Clone(v)
					slices.Sort(v)
					pre = ans
				}
				if !slices.Equal(v, pre) {
					t.Fatalf("%s (%v): aggregate %v, want %v", name, order, v, pre)
				}
			}
		}
	}
}

func TestMachineInputs(t *testing.T) {
	tr := mustTree(t, KNomial(2), seq(8), 0) // 0 → {1, 2, 4}
	m, err := New(Config[int]{Tree: tr, Self: 0, Local: true, Aggregate: func(a, b int) int { return a*10 + b }, Deadline: 100})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Children(); !slices.Equal(got, []Rank{1, 2, 4}) {
		t.Fatalf("children %v", got)
	}
	// A child's report before the local value is parked: the local value
	// is the base.
	if err := m.Reply(4, Report[int]{Value: 4, HasValue: true, Failed: []Failure{{Rank: 6, Reason: ReasonTimedOut, Via: 6}, {Rank: 3, Reason: ReasonHandler, Via: 3}}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Reply(4, Report[int]{}); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("second reply: %v", err)
	}
	if err := m.Reply(3, Report[int]{}); !errors.Is(err, ErrNotChild) {
		t.Fatalf("grandchild: %v", err)
	}
	if err := m.Local(9); err != nil {
		t.Fatal(err)
	}
	if err := m.Local(9); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("second local: %v", err)
	}
	if err := m.ChildFailed(2, ReasonUnreachable, "connection refused"); err != nil {
		t.Fatal(err)
	}
	if m.Done() || !slices.Equal(m.Pending(), []Rank{1}) {
		t.Fatalf("done %v pending %v", m.Done(), m.Pending())
	}
	if m.Tick(99) {
		t.Fatal("done before the deadline")
	}
	if !m.Tick(100) {
		t.Fatal("not done at the deadline")
	}
	if err := m.Reply(1, Report[int]{}); !errors.Is(err, ErrFinished) {
		t.Fatalf("reply after the end: %v", err)
	}
	res, ok := m.Result()
	if !ok || res.Value != 94 || !res.HasValue {
		t.Fatalf("result %+v %v", res, ok)
	}
	// 1 timed out; 2 (and its child 3) unreachable; 6 from 4's report;
	// 3 listed by 4 is outside 4's subtree and ignored.
	want := []Failure{
		{Rank: 1, Reason: ReasonTimedOut, Via: 1, Detail: "deadline passed"},
		{Rank: 2, Reason: ReasonUnreachable, Via: 2, Detail: "connection refused"},
		{Rank: 3, Reason: ReasonUnreachable, Via: 2, Detail: "connection refused"},
		{Rank: 6, Reason: ReasonTimedOut, Via: 6},
	}
	if !slices.Equal(res.Failed, want) {
		t.Fatalf("failed %v", res.Failed)
	}
	if !slices.Equal(res.Answered, []Rank{0, 4, 5, 7}) {
		t.Fatalf("answered %v", res.Answered)
	}
}

func TestMachineAbortAndEdges(t *testing.T) {
	tr := mustTree(t, Flat(), seq(4), 0)
	m, _ := New(Config[int]{Tree: tr, Self: 0, Local: true})
	m.Local(1)
	m.Reply(2, Report[int]{Value: 2, HasValue: true})
	if !m.Abort(ReasonCanceled, "context canceled") || m.Abort(ReasonCanceled, "") {
		t.Fatal("abort")
	}
	res, _ := m.Result()
	if res.Value != 1 || len(res.Failed) != 2 || res.Failed[0].Reason != ReasonCanceled || !slices.Equal(res.Answered, []Rank{0, 2}) {
		t.Fatalf("after abort: %+v", res)
	}
	// A root outside its scope with no children is done at once.
	one := mustTree(t, Flat(), seq(1), 0)
	m2, _ := New(Config[int]{Tree: one, Self: 0})
	if !m2.Done() {
		t.Fatal("empty collective not done")
	}
	if err := m2.Local(1); !errors.Is(err, ErrFinished) {
		t.Fatalf("local: %v", err)
	}
	m3, _ := New(Config[int]{Tree: one, Self: 0, Local: true})
	if m3.Done() || m3.Local(5) != nil || !m3.Done() {
		t.Fatal("single rank")
	}
	if r, _ := m3.Result(); r.Value != 5 || !slices.Equal(r.Answered, []Rank{0}) {
		t.Fatalf("single %+v", r)
	}
	if _, err := New(Config[int]{Tree: one, Self: 3}); !errors.Is(err, ErrNotInTree) {
		t.Fatalf("self outside: %v", err)
	}
	// Root not local with a child: the first child's value is the base.
	m4, _ := New(Config[int]{Tree: mustTree(t, Flat(), seq(3), 0), Self: 0, Aggregate: func(a, b int) int { return a - b }, Order: OrderTree})
	if err := m4.Local(1); !errors.Is(err, ErrNoLocal) {
		t.Fatalf("local on root outside scope: %v", err)
	}
	m4.Reply(2, Report[int]{Value: 2, HasValue: true})
	m4.Reply(1, Report[int]{Value: 10, HasValue: true})
	if r, _ := m4.Result(); r.Value != 8 || !slices.Equal(r.Answered, []Rank{1, 2}) {
		t.Fatalf("tree order: %+v", r)
	}
}

func TestMachineCombineError(t *testing.T) {
	tr := mustTree(t, KAry(2), seq(5), 0) // 0 → {1, 2}, 1 → {3, 4}
	m, _ := New(Config[int]{Tree: tr, Self: 0, Local: true, Order: OrderTree, Combine: func(a, b int) (int, error) {
		if b < 0 {
			return 0, errors.New("negative")
		}
		return a + b, nil
	}})
	m.Local(1)
	m.Reply(1, Report[int]{Value: -1, HasValue: true, Failed: []Failure{{Rank: 4, Reason: ReasonTimedOut, Via: 4}}})
	m.Reply(2, Report[int]{Value: 2, HasValue: true})
	res, _ := m.Result()
	want := []Failure{
		{Rank: 1, Reason: ReasonHandler, Via: 1, Detail: "aggregating: negative"},
		{Rank: 3, Reason: ReasonHandler, Via: 1, Detail: "aggregating: negative"},
		{Rank: 4, Reason: ReasonTimedOut, Via: 4},
	}
	if res.Value != 3 || !slices.Equal(res.Failed, want) || !slices.Equal(res.Answered, []Rank{0, 2}) {
		t.Fatalf("%+v", res)
	}
}

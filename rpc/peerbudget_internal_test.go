package rpc

import "testing"

// TestPeerBudgetOwes checks owe's rule against its statement: a peer
// owed nothing takes what the budget has left, one owed something stops
// at three quarters of the budget and, past half, at its share.
func TestPeerBudgetOwes(t *testing.T) {
	const b = 1000
	tests := []struct {
		tot, mine, n, peers int64
		ok                  bool
	}{
		{0, 0, 5000, 1, true},   // nothing owed at all: one item goes
		{990, 0, 10, 4, true},   // owed nothing: the last quarter is for it
		{995, 0, 10, 4, false},  // but not past the budget
		{740, 100, 10, 4, true}, // within three quarters, its share 187
		{745, 100, 10, 4, false},
		{600, 180, 10, 4, false}, // past half: beyond its share of 187
		{600, 170, 10, 4, true},
		{400, 390, 10, 4, true}, // below half: no share
	}
	for _, tc := range tests {
		if got := owes(b, tc.tot, tc.mine, tc.n, tc.peers); got != tc.ok {
			t.Errorf("owes(%d, tot %d, mine %d, n %d, peers %d) = %v, want %v", b, tc.tot, tc.mine, tc.n, tc.peers, got, tc.ok)
		}
	}
}

// TestPeerBudgetShared: four peers that take all the outputs they can
// stop at three quarters of the budget, each within its share; a fifth
// owed nothing is admitted; what they give back is the budget's again;
// a take refused by its per-peer limit leaves the budget as it was.
func TestPeerBudgetShared(t *testing.T) {
	in := &Instance{}
	in.opts.PeerBudget = 1000
	in.nPeers.Store(5)
	peers := make([]*peer, 5)
	for i := range peers {
		peers[i] = &peer{in: in}
	}
	for took := true; took; {
		took = false
		for _, a := range peers[:4] {
			if a.take(chOutputs, 10, 1<<40) {
				took = true
			}
		}
	}
	if o := in.owed.Load(); o > 750 {
		t.Fatalf("four flooding peers are owed %d of 1000", o)
	}
	for i, a := range peers[:4] {
		if o := a.owed.Load(); o > 750/5+10 {
			t.Errorf("peer %d is owed %d, over its share %d", i, o, 750/5)
		}
	}
	if in.budgetRefusals.Load() == 0 {
		t.Error("no refusal counted")
	}
	honest := peers[4]
	if !honest.take(chUnanswered, 100, 1<<40) {
		t.Fatalf("a peer owed nothing is refused at %d of 1000", in.owed.Load())
	}
	for honest.take(chOutputs, 10, 1<<40) {
	}
	if o := in.owed.Load(); o > 750 {
		t.Fatalf("the peers are owed %d of 1000: past three quarters", o)
	}
	before := in.owed.Load()
	if peers[0].take(chOutputs, 10, 5) {
		t.Fatal("the per-peer limit did not hold")
	}
	if in.owed.Load() != before {
		t.Fatalf("a refused take left %d owed, was %d", in.owed.Load(), before)
	}
	for _, a := range peers {
		a.add(chOutputs, -a.held[chOutputs].Load())
		a.add(chUnanswered, -a.held[chUnanswered].Load())
	}
	if in.owed.Load() != 0 {
		t.Fatalf("%d owed after everything was given back", in.owed.Load())
	}
}

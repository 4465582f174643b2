package coll

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func seq(n int) []Rank {
	out := make([]Rank, n)
	for i := range out {
		out[i] = Rank(i)
	}
	return out
}

func mustTree(t *testing.T, topo Topology, ranks []Rank, root Rank) *Tree {
	t.Helper()
	tr, err := NewTree(topo, ranks, root)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestTreeExamples checks small trees worked out by hand from CaRT's
// crt_tree_{flat,kary,knomial}.c (cart-cluster.md §3.2).
func TestTreeExamples(t *testing.T) {
	type kids map[Rank][]Rank
	cases := []struct {
		name string
		topo Topology
		n    int
		root Rank
		want kids
		par  map[Rank]Rank
	}{
		{"binomial16", KNomial(2), 16, 0,
			kids{0: {1, 2, 4, 8}, 1: nil, 2: {3}, 4: {5, 6}, 8: {9, 10, 12}, 12: {13, 14}, 14: {15}, 6: {7}, 10: {11}},
			map[Rank]Rank{15: 14, 13: 12, 12: 8, 9: 8, 7: 6, 3: 2}},
		{"4nomial20", KNomial(4), 20, 0,
			kids{0: {1, 2, 3, 4, 8, 12, 16}, 4: {5, 6, 7}, 16: {17, 18, 19}, 8: {9, 10, 11}, 3: nil},
			map[Rank]Rank{7: 4, 19: 16, 16: 0, 12: 0}},
		// k-nomial with a root in the middle: tree rank = (index - 5) mod 8.
		// tree 0..7 ↔ ranks 5,6,7,0,1,2,3,4; binomial: 0→{1,2,4}, 2→{3}, 4→{5,6}, 6→{7}.
		{"binomial8root5", KNomial(2), 8, 5,
			kids{5: {6, 7, 1}, 7: {0}, 1: {2, 3}, 3: {4}, 6: nil},
			map[Rank]Rank{6: 5, 7: 5, 0: 7, 1: 5, 2: 1, 3: 1, 4: 3}},
		{"3ary10", KAry(3), 10, 0,
			kids{0: {1, 2, 3}, 1: {4, 5, 6}, 2: {7, 8, 9}, 3: nil},
			map[Rank]Rank{4: 1, 9: 2, 3: 0}},
		// k-ary rooted at 3 of 5: tree 0..4 ↔ ranks 3,4,0,1,2.
		{"2ary5root3", KAry(2), 5, 3,
			kids{3: {4, 0}, 4: {1, 2}, 0: nil},
			map[Rank]Rank{4: 3, 0: 3, 1: 4, 2: 4}},
		// Flat: the root's children in group order, not tree order.
		{"flat5root2", Flat(), 5, 2,
			kids{2: {0, 1, 3, 4}, 0: nil, 4: nil},
			map[Rank]Rank{0: 2, 4: 2}},
		{"single", KNomial(2), 1, 0, kids{0: nil}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := mustTree(t, c.topo, seq(c.n), c.root)
			for r, want := range c.want {
				if got := tr.Children(r); !slices.Equal(got, want) {
					t.Errorf("children(%d) = %v, want %v", r, got, want)
				}
			}
			for r, want := range c.par {
				if got, ok := tr.Parent(r); !ok || got != want {
					t.Errorf("parent(%d) = %d %v, want %d", r, got, ok, want)
				}
			}
			if _, ok := tr.Parent(c.root); ok {
				t.Error("the root has a parent")
			}
		})
	}
}

// refChildren is a naive reference: tree ranks whose parent (by the
// definition in CaRT's sources) is tr, in tree-rank order for k-ary and
// k-nomial trees, in group order for a flat tree.
func refTree(topo Topology, n int) (parent []int, children [][]int) {
	parent = make([]int, n)
	children = make([][]int, n)
	parent[0] = -1
	k := topo.Ratio()
	for c := 1; c < n; c++ {
		switch topo.Type() {
		case TypeFlat:
			parent[c] = 0
		case TypeKAry:
			parent[c] = (c - 1) / k
		case TypeKNomial:
			// base-k digits, clear the lowest non-zero one
			digits := []int{}
			for x := c; x > 0; x /= k {
				digits = append(digits, x%k)
			}
			for i := range digits {
				if digits[i] != 0 {
					digits[i] = 0
					break
				}
			}
			p := 0
			for i := len(digits) - 1; i >= 0; i-- {
				p = p*k + digits[i]
			}
			parent[c] = p
		}
		children[parent[c]] = append(children[parent[c]], c)
	}
	return parent, children
}

var topologies = []Topology{Flat(), KAry(2), KAry(3), KAry(4), KAry(32), KAry(64),
	KNomial(2), KNomial(3), KNomial(4), KNomial(32), KNomial(64)}

// TestTreeAgainstReference checks every topology over 1, 2, 3, 64 and
// 1000 ranks (sparse rank numbers, several roots) against the reference:
// children, parents, levels and subtrees; every rank is reached from the
// root exactly once.
func TestTreeAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 64, 1000} {
		// Sparse, unsorted rank numbers with duplicates.
		ranks := make([]Rank, 0, n+3)
		for i := range n {
			ranks = append(ranks, Rank(3*i+1))
		}
		rng.Shuffle(len(ranks), func(i, j int) { ranks[i], ranks[j] = ranks[j], ranks[i] })
		ranks = append(ranks, ranks[:min(3, n)]...)
		sorted := slices.Clone(ranks)
		slices.Sort(sorted)
		sorted = slices.Compact(sorted)
		for _, topo := range topologies {
			roots := []int{0, n - 1, rng.IntN(n)}
			for _, ri := range roots {
				root := sorted[ri]
				t.Run(fmt.Sprintf("%v/n%d/root%d", topo, n, root), func(t *testing.T) {
					tr := mustTree(t, topo, ranks, root)
					if tr.Size() != n || tr.Root() != root {
						t.Fatalf("size %d root %d", tr.Size(), tr.Root())
					}
					rp, rc := refTree(topo, n)
					toRank := func(x int) Rank { return sorted[(x+ri)%n] }
					depth := 0
					for x := range n {
						r := toRank(x)
						var want []Rank
						for _, c := range rc[x] {
							want = append(want, toRank(c))
						}
						if topo.Type() == TypeFlat {
							slices.Sort(want) // group order
						}
						if got := tr.Children(r); !slices.Equal(got, want) {
							t.Fatalf("children(%d) = %v, want %v", r, got, want)
						}
						p, ok := tr.Parent(r)
						if (rp[x] < 0) == ok || (ok && p != toRank(rp[x])) {
							t.Fatalf("parent(%d) = %d %v, want tree rank %d", r, p, ok, rp[x])
						}
						lvl := 0
						for y := x; rp[y] >= 0; y = rp[y] {
							lvl++
						}
						if got := tr.Level(r); got != lvl {
							t.Fatalf("level(%d) = %d, want %d", r, got, lvl)
						}
						depth = max(depth, lvl)
					}
					if got := tr.Depth(); got != depth {
						t.Fatalf("depth %d, want %d", got, depth)
					}
					// Every rank exactly once from the root; parent/child
					// consistent; subtree sizes add up.
					all := tr.Subtree(root)
					if len(all) != n {
						t.Fatalf("root's subtree has %d ranks, want %d", len(all), n)
					}
					seen := map[Rank]bool{}
					for _, r := range all {
						if seen[r] {
							t.Fatalf("rank %d reached twice", r)
						}
						seen[r] = true
						sum := 1
						for _, c := range tr.Children(r) {
							if p, _ := tr.Parent(c); p != r {
								t.Fatalf("child %d of %d has parent %d", c, r, p)
							}
							sum += tr.SubtreeSize(c)
						}
						if got := tr.SubtreeSize(r); got != sum || got != len(tr.Subtree(r)) {
							t.Fatalf("subtree size of %d: %d, children sum %d, list %d", r, got, sum, len(tr.Subtree(r)))
						}
					}
				})
			}
		}
	}
}

// TestTreeDepths checks depths worked out by hand.
func TestTreeDepths(t *testing.T) {
	cases := []struct {
		topo  Topology
		n     int
		depth int
	}{
		{Flat(), 1, 0}, {Flat(), 2, 1}, {Flat(), 1000, 1},
		{KAry(2), 64, 6},    // 1+2+4+8+16+32 = 63 ranks to level 5; rank 63 at 6
		{KAry(4), 1000, 5},  // 1+4+16+64+256 = 341 to level 4; 341..999 at 5
		{KNomial(2), 64, 6}, // 63 = 111111b
		{KNomial(2), 1000, 9},
		{KNomial(4), 1000, 5}, // 341 = 11111 base 4
		{KNomial(32), 1000, 2},
		{KNomial(2), 3, 1}, // 0→{1,2}
		{KAry(2), 3, 1},
		{KNomial(2), 2, 1},
	}
	for _, c := range cases {
		if got := mustTree(t, c.topo, seq(c.n), 0).Depth(); got != c.depth {
			t.Errorf("%v over %d: depth %d, want %d", c.topo, c.n, got, c.depth)
		}
	}
}

func TestTopology(t *testing.T) {
	if KNomial(32) != Topology(3<<16|32) || KAry(4) != Topology(2<<16|4) || Flat() != Topology(1<<16) {
		t.Fatal("encoding differs from crt_tree_topo")
	}
	for _, bad := range []Topology{0, 2 << 16, 2<<16 | 1, 3<<16 | 65, 4<<16 | 2} {
		if bad.Validate() == nil {
			t.Errorf("%#x valid", uint32(bad))
		}
		if _, err := NewTree(bad, seq(3), 0); err == nil {
			t.Errorf("tree with %#x", uint32(bad))
		}
	}
	if _, err := MakeTopology(TypeKNomial, 1); err == nil {
		t.Error("ratio 1 accepted")
	}
	if topo, err := MakeTopology(TypeFlat, 7); err != nil || topo != Flat() {
		t.Errorf("flat with ratio: %v %v", topo, err)
	}
	if _, err := NewTree(Flat(), seq(3), 5); err == nil {
		t.Error("root outside the ranks accepted")
	}
	if _, err := NewTree(Flat(), nil, 0); err == nil {
		t.Error("empty tree accepted")
	}
}

func TestScope(t *testing.T) {
	members := []Rank{5, 1, 3, 3, 9, 7}
	cases := []struct {
		filter []Rank
		invert bool
		root   Rank
		want   []Rank
	}{
		{nil, false, 1, []Rank{1, 3, 5, 7, 9}},
		{[]Rank{3, 9, 11}, false, 1, []Rank{1, 5, 7}},
		{[]Rank{3, 9, 11}, true, 3, []Rank{3, 9}},
		{[]Rank{1, 3}, false, 1, []Rank{1, 5, 7, 9}}, // excluded root put back
		{[]Rank{7, 9}, true, 1, []Rank{1, 7, 9}},     // root outside the subset put back
	}
	for _, c := range cases {
		if got := Scope(members, c.filter, c.invert, c.root); !slices.Equal(got, c.want) {
			t.Errorf("Scope(%v, %v, %v, %d) = %v, want %v", members, c.filter, c.invert, c.root, got, c.want)
		}
	}
}

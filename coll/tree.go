package coll

import (
	"errors"
	"fmt"
	"slices"
)

// Tree errors.
var (
	// ErrRootNotInScope: the root given to NewTree is not in its ranks.
	ErrRootNotInScope = errors.New("coll: root not in the collective's scope")
	// ErrEmptyScope: a tree over no ranks.
	ErrEmptyScope = errors.New("coll: empty scope")
)

// Tree is the spanning tree of one collective: a topology over a scope
// (sorted, de-duplicated ranks) from a root. It is immutable and safe for
// concurrent use. Its queries cost O(log size) for the rank's position
// plus O(result).
type Tree struct {
	topo  Topology
	ranks []Rank // ascending, unique
	root  int    // index of the root in ranks
}

// NewTree returns the tree of topo over ranks rooted at root. ranks need
// not be sorted or unique: the tree is over their sorted, de-duplicated
// copy (as CaRT sorts its membership list). The root must be one of them;
// to root a collective outside its scope, add the root to it (Scope does,
// as CaRT puts an excluded root back).
func NewTree(topo Topology, ranks []Rank, root Rank) (*Tree, error) {
	if err := topo.Validate(); err != nil {
		return nil, err
	}
	rs := slices.Clone(ranks)
	slices.Sort(rs)
	rs = slices.Compact(rs)
	return newSortedTree(topo, rs, root)
}

// newSortedTree takes ownership of rs, which must be ascending and unique.
func newSortedTree(topo Topology, rs []Rank, root Rank) (*Tree, error) {
	if len(rs) == 0 {
		return nil, ErrEmptyScope
	}
	ri, ok := slices.BinarySearch(rs, root)
	if !ok {
		return nil, fmt.Errorf("%w: rank %d", ErrRootNotInScope, root)
	}
	return &Tree{topo: topo, ranks: rs, root: ri}, nil
}

// Topology returns the tree's topology.
func (t *Tree) Topology() Topology { return t.topo }

// Root returns the root rank.
func (t *Tree) Root() Rank { return t.ranks[t.root] }

// Size returns the number of ranks in the tree.
func (t *Tree) Size() int { return len(t.ranks) }

// Ranks returns the scope, ascending. The slice must not be modified.
func (t *Tree) Ranks() []Rank { return t.ranks }

// Has reports whether rank r is in the tree.
func (t *Tree) Has(r Rank) bool {
	_, ok := slices.BinarySearch(t.ranks, r)
	return ok
}

// treeRank returns r's tree rank (its distance from the root's index).
func (t *Tree) treeRank(r Rank) (uint64, bool) {
	i, ok := slices.BinarySearch(t.ranks, r)
	if !ok {
		return 0, false
	}
	n := len(t.ranks)
	return uint64((i - t.root + n) % n), true
}

// rankOf maps a tree rank back to a group rank.
func (t *Tree) rankOf(tr uint64) Rank {
	n := uint64(len(t.ranks))
	return t.ranks[(tr+uint64(t.root))%n]
}

// Children returns r's children in CaRT's order (nil for a leaf or a rank
// not in the tree).
func (t *Tree) Children(r Rank) []Rank { return t.AppendChildren(nil, r) }

// AppendChildren appends r's children to dst and returns it.
func (t *Tree) AppendChildren(dst []Rank, r Rank) []Rank {
	tr, ok := t.treeRank(r)
	if !ok {
		return dst
	}
	n := uint64(len(t.ranks))
	switch t.topo.Type() {
	case TypeFlat:
		if tr != 0 {
			return dst
		}
		// crt_flat_get_children: every other rank in group (scope)
		// order, not in tree-rank order.
		for i, x := range t.ranks {
			if i != t.root {
				dst = append(dst, x)
			}
		}
	case TypeKAry:
		k := uint64(t.topo.Ratio())
		for i := uint64(1); i <= k; i++ {
			c := tr*k + i
			if c >= n {
				break
			}
			dst = append(dst, t.rankOf(c))
		}
	case TypeKNomial:
		k := uint64(t.topo.Ratio())
		inc := uint64(1)
		for x := tr; x%k == 0; x /= k {
			// Digit position d (inc = k^d) of tr is 0: children
			// tr + i·k^d. Beyond tr's top digit every digit is 0, so
			// this goes on until a child is past the end.
			for i := uint64(1); i < k; i++ {
				c := tr + i*inc
				if c >= n {
					return dst
				}
				dst = append(dst, t.rankOf(c))
			}
			inc *= k
			if inc >= n {
				return dst
			}
		}
	}
	return dst
}

// Parent returns r's parent; false for the root and for ranks not in the
// tree.
func (t *Tree) Parent(r Rank) (Rank, bool) {
	tr, ok := t.treeRank(r)
	if !ok || tr == 0 {
		return 0, false
	}
	return t.rankOf(t.parentTR(tr)), true
}

func (t *Tree) parentTR(tr uint64) uint64 {
	switch t.topo.Type() {
	case TypeKAry:
		return (tr - 1) / uint64(t.topo.Ratio())
	case TypeKNomial:
		k := uint64(t.topo.Ratio())
		// Clear the least significant non-zero digit.
		for p := uint64(1); ; p *= k {
			if d := tr / p % k; d != 0 {
				return tr - d*p
			}
		}
	}
	return 0
}

// Level returns r's distance from the root (0 for the root); -1 if r is
// not in the tree.
func (t *Tree) Level(r Rank) int {
	tr, ok := t.treeRank(r)
	if !ok {
		return -1
	}
	return t.levelTR(tr)
}

func (t *Tree) levelTR(tr uint64) int {
	if tr == 0 {
		return 0
	}
	switch t.topo.Type() {
	case TypeKAry:
		l, k := 0, uint64(t.topo.Ratio())
		for tr != 0 {
			tr = (tr - 1) / k
			l++
		}
		return l
	case TypeKNomial:
		// The number of non-zero base-k digits.
		l, k := 0, uint64(t.topo.Ratio())
		for ; tr != 0; tr /= k {
			if tr%k != 0 {
				l++
			}
		}
		return l
	}
	return 1
}

// Depth returns the largest level of the tree (0 for a tree of one rank).
func (t *Tree) Depth() int {
	n := uint64(len(t.ranks))
	if n == 1 {
		return 0
	}
	switch t.topo.Type() {
	case TypeKAry:
		return t.levelTR(n - 1) // levels never decrease with the tree rank
	case TypeKNomial:
		d := 0
		for tr := uint64(1); tr < n; tr++ {
			d = max(d, t.levelTR(tr))
		}
		return d
	}
	return 1
}

// Subtree returns r and its descendants, r first, then breadth first in
// child order (nil if r is not in the tree).
func (t *Tree) Subtree(r Rank) []Rank { return t.AppendSubtree(nil, r) }

// AppendSubtree appends r's subtree (see Subtree) to dst and returns it.
func (t *Tree) AppendSubtree(dst []Rank, r Rank) []Rank {
	if !t.Has(r) {
		return dst
	}
	start := len(dst)
	dst = append(dst, r)
	for i := start; i < len(dst); i++ {
		dst = t.AppendChildren(dst, dst[i])
	}
	return dst
}

// SubtreeSize returns the number of ranks in r's subtree (0 if r is not
// in the tree).
func (t *Tree) SubtreeSize(r Rank) int {
	tr, ok := t.treeRank(r)
	if !ok {
		return 0
	}
	n := uint64(len(t.ranks))
	switch t.topo.Type() {
	case TypeFlat:
		if tr == 0 {
			return int(n)
		}
		return 1
	case TypeKNomial:
		// tr's subtree is the tree ranks [tr, tr+k^z) where k^z is
		// the weight of tr's least significant non-zero digit (the
		// whole tree for the root).
		if tr == 0 {
			return int(n)
		}
		k, p := uint64(t.topo.Ratio()), uint64(1)
		for tr/p%k == 0 {
			p *= k
		}
		return int(min(tr+p, n) - tr)
	}
	return len(t.Subtree(r))
}

// Scope returns the ranks a collective covers: the members (sorted and
// de-duplicated), without the filter ranks, or, with invert, only the
// members that are filter ranks (CaRT's CRT_RPC_FLAG_FILTER_INVERT); and
// the root, which is put back if the filter left it out (CaRT's
// root_excluded: such a root forwards but does not run its handler).
func Scope(members, filter []Rank, invert bool, root Rank) []Rank {
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	f := slices.Clone(filter)
	slices.Sort(f)
	f = slices.Compact(f)
	out := ms[:0]
	for _, r := range ms {
		_, in := slices.BinarySearch(f, r)
		if in == invert || r == root {
			out = append(out, r)
		}
	}
	if _, ok := slices.BinarySearch(out, root); !ok {
		i, _ := slices.BinarySearch(out, root)
		out = slices.Insert(out, i, root)
	}
	return out
}

// NewScopedTree is NewTree over Scope(members, filter, invert, root).
func NewScopedTree(topo Topology, members, filter []Rank, invert bool, root Rank) (*Tree, error) {
	if err := topo.Validate(); err != nil {
		return nil, err
	}
	return newSortedTree(topo, Scope(members, filter, invert, root), root)
}

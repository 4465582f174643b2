package swim

import "slices"

// table is the member table: three parallel slices sorted by id, 13 bytes
// per member (no map, no per-member allocation). Self is not in it.
type table struct {
	ids   []ID
	incs  []uint64
	state []State
}

func (t *table) len() int { return len(t.ids) }

// find returns the index of id, or -1. Ranks are usually dense (0…n−1
// without self), so the index is tried at id and id−1 before a binary
// search.
func (t *table) find(id ID) int {
	n := len(t.ids)
	if i := int(id); i < n && t.ids[i] == id {
		return i
	}
	if i := int(id) - 1; i >= 0 && i < n && t.ids[i] == id {
		return i
	}
	i, ok := slices.BinarySearch(t.ids, id)
	if !ok {
		return -1
	}
	return i
}

// insert adds id at its place and returns its index, or the index of the
// existing entry and false.
func (t *table) insert(id ID, inc uint64) (int, bool) {
	n := len(t.ids)
	if n == 0 || t.ids[n-1] < id { // the common case: ranks added in order
		t.ids = append(t.ids, id)
		t.incs = append(t.incs, inc)
		t.state = append(t.state, Alive)
		return n, true
	}
	i, ok := slices.BinarySearch(t.ids, id)
	if ok {
		return i, false
	}
	t.ids = slices.Insert(t.ids, i, id)
	t.incs = slices.Insert(t.incs, i, inc)
	t.state = slices.Insert(t.state, i, Alive)
	return i, true
}

func (t *table) delete(i int) {
	t.ids = slices.Delete(t.ids, i, i+1)
	t.incs = slices.Delete(t.incs, i, i+1)
	t.state = slices.Delete(t.state, i, i+1)
}

func (t *table) member(i int) Member {
	return Member{ID: t.ids[i], Incarnation: t.incs[i], State: t.state[i]}
}

// order is the probe order over table indices: the random permutation
// p ↦ (a·p + b) mod n, walked round-robin, so every member is probed once
// per pass of n probes. It costs no memory per member; a and b are drawn
// afresh when the table has changed (DAOS reshuffles on membership changes only, so a
// prober's gap between two probes of one member is n−1 probes).
type order struct {
	a, b, n, pos int
	dirty        bool // the table changed: draw a and b again before use
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

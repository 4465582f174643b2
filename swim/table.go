package swim

import "slices"

// table is the member table: parallel slices sorted by id, no map and no
// per-member allocation. Self is not in it. While the members are exactly
// the ranks 0…n without self (how groups are usually made) the ids are
// implicit and an entry costs 9 bytes (incarnation and state); the first
// insertion or deletion that breaks that pattern writes the ids out (13
// bytes an entry).
type table struct {
	self  ID
	ids   []ID // nil while dense
	incs  []uint64
	state []State
}

func (t *table) len() int { return len(t.incs) }

func (t *table) dense() bool { return t.ids == nil }

// id returns the id at index i.
func (t *table) id(i int) ID {
	if t.ids != nil {
		return t.ids[i]
	}
	if ID(i) < t.self {
		return ID(i)
	}
	return ID(i + 1)
}

// find returns the index of id, or -1.
func (t *table) find(id ID) int {
	n := len(t.incs)
	if t.ids == nil {
		i := int(id)
		switch {
		case id == t.self:
			return -1
		case id > t.self:
			i--
		}
		if i < n {
			return i
		}
		return -1
	}
	// Ranks are usually nearly dense: try the index at id and id−1.
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

// sparse writes the ids out.
func (t *table) sparse() {
	if t.ids != nil {
		return
	}
	ids := make([]ID, len(t.incs), cap(t.incs))
	for i := range ids {
		ids[i] = t.id(i)
	}
	t.ids = ids
}

// insert adds id (not self) at its place and returns its index, or the
// index of the existing entry and false.
func (t *table) insert(id ID, inc uint64) (int, bool) {
	n := len(t.incs)
	if t.ids == nil && id == t.id(n) { // the dense case: ranks added in order
		t.incs = append(t.incs, inc)
		t.state = append(t.state, Alive)
		return n, true
	}
	if i := t.find(id); i >= 0 {
		return i, false
	}
	t.sparse()
	i, _ := slices.BinarySearch(t.ids, id)
	t.ids = slices.Insert(t.ids, i, id)
	t.incs = slices.Insert(t.incs, i, inc)
	t.state = slices.Insert(t.state, i, Alive)
	return i, true
}

func (t *table) delete(i int) {
	if t.ids == nil && i == len(t.incs)-1 {
		t.incs, t.state = t.incs[:i], t.state[:i]
		return
	}
	t.sparse()
	t.ids = slices.Delete(t.ids, i, i+1)
	t.incs = slices.Delete(t.incs, i, i+1)
	t.state = slices.Delete(t.state, i, i+1)
}

func (t *table) grow(n int) {
	if t.ids != nil {
		t.ids = slices.Grow(t.ids, n)
	}
	t.incs = slices.Grow(t.incs, n)
	t.state = slices.Grow(t.state, n)
}

func (t *table) member(i int) Member {
	return Member{ID: t.id(i), Incarnation: t.incs[i], State: t.state[i]}
}

// order is the probe order over table indices: the random permutation
// p ↦ (a·p + b) mod n, walked round-robin, so every member is probed once
// per pass of n probes. It costs no memory per member; a and b are drawn
// afresh when the table has changed (DAOS reshuffles on membership changes
// only, so a prober's gap between two probes of one member is n−1 probes).
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

package swim

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTableAgainstModel: the table (dense while it can be, then sparse)
// against a sorted slice, over random inserts and deletes; adding ranks in
// order keeps it dense.
func TestTableAgainstModel(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 5))
		self := ID(rng.IntN(8))
		tab := table{self: self}
		var model []ID
		// Often start dense: ranks in order.
		if seed%2 == 0 {
			for id := ID(0); id < 10; id++ {
				if id != self {
					tab.insert(id, uint64(id))
					model = append(model, id)
				}
			}
			if !tab.dense() {
				t.Fatal("ranks in order made the table sparse")
			}
		}
		for step := range 100 {
			id := ID(rng.IntN(24))
			if rng.IntN(3) > 0 && id != self {
				i, added := tab.insert(id, uint64(id))
				j, found := slices.BinarySearch(model, id)
				if added == found || i != j {
					t.Fatalf("seed %d step %d: insert %d: %d %v, model %d %v", seed, step, id, i, added, j, found)
				}
				if !found {
					model = slices.Insert(model, j, id)
				}
			} else if len(model) > 0 {
				k := rng.IntN(len(model))
				if i := tab.find(model[k]); i != k {
					t.Fatalf("seed %d: find %d = %d, want %d", seed, model[k], i, k)
				}
				tab.delete(k)
				model = slices.Delete(model, k, k+1)
			}
			if tab.len() != len(model) {
				t.Fatalf("seed %d: len %d, model %d", seed, tab.len(), len(model))
			}
			for i, id := range model {
				if tab.id(i) != id || tab.find(id) != i || tab.incs[i] != uint64(id) {
					t.Fatalf("seed %d step %d: entry %d is %d (find %d), model %d", seed, step, i, tab.id(i), tab.find(id), id)
				}
			}
			for id := ID(0); id < 26; id++ {
				if _, in := slices.BinarySearch(model, id); !in && tab.find(id) >= 0 {
					t.Fatalf("seed %d: found absent %d", seed, id)
				}
			}
		}
	}
}

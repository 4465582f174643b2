package bufpool

import "testing"

func TestClasses(t *testing.T) {
	for _, n := range []int{Min, Min + 1, 96 << 10, 96<<10 + 1, 1 << 20, 3 << 19, 3<<19 + 1, 1 << maxShift} {
		i, size := class(n)
		if size < n || size > n*2 {
			t.Fatalf("n %d: class size %d", n, size)
		}
		if j, s := class(size); j != i || s != size {
			t.Fatalf("n %d: class %d/%d, its size maps to %d/%d", n, i, size, j, s)
		}
	}
}

func TestGetPut(t *testing.T) {
	if b, p := Get(100); len(b) != 100 || p != nil {
		t.Fatalf("small buffer: len %d pooled %v", len(b), p != nil)
	}
	if b, p := Get(1<<maxShift + 1); len(b) != 1<<maxShift+1 || p != nil {
		t.Fatalf("huge buffer: pooled %v", p != nil)
	}
	b, p := Get(100 << 10)
	if len(b) != 100<<10 || p == nil || cap(*p) < len(b) || &(*p)[0] != &b[0] {
		t.Fatal("pooled buffer: bad handle")
	}
	Put(p)
	Put(nil)
	odd := make([]byte, 100<<10) // not a class size: ignored
	Put(&odd)
}

func TestReuse(t *testing.T) {
	// sync.Pool may drop anything, so only check that reuse happens at
	// all within a few tries and that a reused buffer has the right size.
	for range 100 {
		b, p := Get(200 << 10)
		b[0] = 42
		Put(p)
		c, q := Get(200 << 10)
		if len(c) != 200<<10 {
			t.Fatalf("len %d", len(c))
		}
		Put(q)
		if q == p {
			return
		}
	}
	t.Fatal("a put buffer was never handed out again")
}

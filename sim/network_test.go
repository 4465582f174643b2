package sim

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestNetLossAndDelay(t *testing.T) {
	cfg := Network{Loss: 0.25, DelayMin: time.Millisecond, DelayMax: 3 * time.Millisecond}
	n := newNet(&cfg, 4, rand.New(rand.NewPCG(1, 1)))
	const total = 100000
	lost := 0
	for range total {
		d, drop := n.send(0, 1)
		switch drop {
		case dropLoss:
			lost++
		case 0:
			if d < int64(time.Millisecond) || d > int64(3*time.Millisecond) {
				t.Fatalf("delay %v out of range", time.Duration(d))
			}
		default:
			t.Fatalf("drop reason %d", drop)
		}
	}
	if f := float64(lost) / total; math.Abs(f-0.25) > 0.01 {
		t.Fatalf("lost %.3f, want 0.25", f)
	}
}

func TestNetPartition(t *testing.T) {
	cfg := Network{Partitions: []Partition{{Start: 0, End: time.Second, Side: []int{0, 1}}, {Side: []int{1, 2}}}}
	n := newNet(&cfg, 4, rand.New(rand.NewPCG(1, 1)))
	if n.cut(0, 2) {
		t.Fatal("cut before any partition is in force")
	}
	n.active = 1
	for _, c := range []struct {
		a, b uint32
		cut  bool
	}{{0, 1, false}, {0, 2, true}, {1, 3, true}, {2, 3, false}} {
		if got := n.cut(c.a, c.b); got != c.cut {
			t.Errorf("partition 0: cut(%d, %d) = %v", c.a, c.b, got)
		}
		if _, drop := n.send(c.a, c.b); (drop == dropPartition) != c.cut {
			t.Errorf("partition 0: send(%d, %d) drop %d", c.a, c.b, drop)
		}
	}
	n.active = 3
	if !n.cut(0, 1) || !n.cut(0, 3) || !n.cut(3, 0) {
		t.Error("two partitions: 0|1 split by the second, 0|3 by the first")
	}
}

func TestNetworkValidate(t *testing.T) {
	for _, n := range []Network{
		{Loss: -0.1}, {Loss: 1.5}, {Loss: math.NaN()},
		{DelayMin: 2, DelayMax: 1},
		{Partitions: []Partition{{Start: 2, End: 1}}},
		{Partitions: []Partition{{Side: []int{5}}}},
	} {
		if err := n.validate(5); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", n, err)
		}
	}
	if err := (&Network{Loss: 1}).validate(5); err != nil {
		t.Error(err)
	}
}

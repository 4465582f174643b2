package coll

import (
	"errors"
	"fmt"
)

// Rank is a member of a group (CaRT's d_rank_t).
type Rank = uint32

// TreeType is a tree's shape. Wire constants (CaRT's crt_tree_type_t);
// append only.
type TreeType uint8

// Tree types.
const (
	TypeFlat    TreeType = 1 // the root sends to every other rank
	TypeKAry    TreeType = 2 // every rank has up to ratio children
	TypeKNomial TreeType = 3 // k-nomial: binomial for ratio 2
)

func (t TreeType) String() string {
	switch t {
	case TypeFlat:
		return "flat"
	case TypeKAry:
		return "kary"
	case TypeKNomial:
		return "knomial"
	}
	return fmt.Sprintf("tree type %d", uint8(t))
}

// Ratio limits for k-ary and k-nomial trees (CRT_TREE_MIN_RATIO,
// CRT_TREE_MAX_RATIO).
const (
	MinRatio = 2
	MaxRatio = 64
)

// typeShift is CRT_TREE_TYPE_SHIFT.
const typeShift = 16

// Topology is a tree shape as CaRT encodes it (crt_tree_topo): the type
// in bits 16 and up, the ratio in the low 16 bits. The zero Topology is
// invalid.
type Topology uint32

// ErrTopology: a topology's type or ratio is out of range.
var ErrTopology = errors.New("coll: invalid tree topology")

// MakeTopology returns the topology of type t with ratio (ignored, and
// encoded as 0, for TypeFlat), or an error matching ErrTopology.
func MakeTopology(t TreeType, ratio int) (Topology, error) {
	if t == TypeFlat {
		return Topology(uint32(t) << typeShift), nil
	}
	if (t == TypeKAry || t == TypeKNomial) && (ratio < MinRatio || ratio > MaxRatio) {
		return 0, fmt.Errorf("%w: %v ratio %d (%d to %d)", ErrTopology, t, ratio, MinRatio, MaxRatio)
	}
	topo := Topology(uint32(t)<<typeShift | uint32(ratio))
	if err := topo.Validate(); err != nil {
		return 0, err
	}
	return topo, nil
}

// Flat returns the flat topology.
func Flat() Topology { return Topology(uint32(TypeFlat) << typeShift) }

// KAry returns the k-ary topology of ratio k; it panics unless
// MinRatio <= k <= MaxRatio (use MakeTopology for untrusted values).
func KAry(k int) Topology { return mustTopo(TypeKAry, k) }

// KNomial returns the k-nomial topology of ratio k; it panics unless
// MinRatio <= k <= MaxRatio (use MakeTopology for untrusted values).
func KNomial(k int) Topology { return mustTopo(TypeKNomial, k) }

func mustTopo(t TreeType, k int) Topology {
	topo, err := MakeTopology(t, k)
	if err != nil {
		panic(err)
	}
	return topo
}

// Type returns the tree type.
func (t Topology) Type() TreeType { return TreeType(uint32(t) >> typeShift) }

// Ratio returns the branching ratio (0 for a flat tree).
func (t Topology) Ratio() int { return int(uint32(t) & 0xFFFF) }

// Validate returns nil if t is a valid topology, else an error matching
// ErrTopology.
func (t Topology) Validate() error {
	switch t.Type() {
	case TypeFlat:
		return nil
	case TypeKAry, TypeKNomial:
		if r := t.Ratio(); r < MinRatio || r > MaxRatio {
			return fmt.Errorf("%w: %v ratio %d (%d to %d)", ErrTopology, t.Type(), r, MinRatio, MaxRatio)
		}
		return nil
	}
	return fmt.Errorf("%w: type %d (topology %#x)", ErrTopology, uint8(t.Type()), uint32(t))
}

func (t Topology) String() string {
	if t.Type() == TypeFlat {
		return "flat"
	}
	return fmt.Sprintf("%v:%d", t.Type(), t.Ratio())
}

package rpc_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/ferrymsg/ferry/coll"
	"github.com/ferrymsg/ferry/rpc"
)

// A collective over four ranks on loopback TCP: every rank answers its
// rank plus one, summed on the way up a binomial tree; rank 2 is
// excluded and listed as such.
func ExampleContext_Broadcast() {
	sum := rpc.CollectiveProtocol{Name: "sum", Base: 2, Version: 1, RPCs: []rpc.CollectiveRPC{{
		Name: "sum",
		Handler: func(_ context.Context, r *rpc.CollectiveRequest) (rpc.Input, error) {
			return rpc.Bytes(binary.LittleEndian.AppendUint64(nil, uint64(r.Rank)+1)), nil
		},
		Aggregate: func(acc, v []byte) ([]byte, error) {
			s := binary.LittleEndian.Uint64(acc) + binary.LittleEndian.Uint64(v)
			return binary.LittleEndian.AppendUint64(acc[:0], s), nil
		},
	}}}
	var ranks []*rpc.Instance
	for i := range 4 {
		in, err := rpc.New(rpc.Options{Listen: "tcp://127.0.0.1:0", Rank: uint32(i)})
		if err != nil {
			panic(err)
		}
		defer in.Close()
		if err := in.RegisterCollective(sum); err != nil {
			panic(err)
		}
		if _, err := in.NewContext(rpc.ContextOptions{Auto: true}); err != nil {
			panic(err)
		}
		ranks = append(ranks, in)
	}
	for _, in := range ranks { // every rank knows every other, at version 1
		var others []rpc.Member
		for _, o := range ranks {
			if o != in {
				others = append(others, rpc.Member{Rank: o.Rank(), URI: o.URI()})
			}
		}
		if err := in.Group().Modify(rpc.ModAdd, others, 1); err != nil {
			panic(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := ranks[0].Context(0).Broadcast(ctx, rpc.CollectiveDesc{
		Opcode:   rpc.MakeOpcode(2, 1, 0),
		Topology: coll.KNomial(2),
		Excluded: []uint32{2},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("sum:", binary.LittleEndian.Uint64(res.Aggregate))
	fmt.Println("answered:", res.Answered)
	for _, f := range res.Failed {
		fmt.Println("failed:", f.Rank, f.Reason)
	}
	// Output:
	// sum: 7
	// answered: [0 1 3]
	// failed: 2 excluded
}

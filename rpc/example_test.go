package rpc_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ferrymsg/ferry/rpc"
)

// A server rank with one protocol ("upper": one RPC that upper-cases its
// input) and a client that calls it, over loopback TCP.
func Example() {
	srv, err := rpc.New(rpc.Options{Listen: "tcp://127.0.0.1:0", Rank: 0})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	err = srv.Register(rpc.Protocol{Name: "upper", Base: 1, Version: 1, RPCs: []rpc.RPC{{
		Name: "upper",
		Handler: func(r *rpc.Incoming) error {
			var in rpc.Bytes
			if err := r.Decode(&in); err != nil {
				return err
			}
			return r.Reply(rpc.Bytes(strings.ToUpper(string(in))))
		},
	}}})
	if err != nil {
		panic(err)
	}
	if _, err := srv.NewContext(rpc.ContextOptions{Auto: true}); err != nil { // tag 0
		panic(err)
	}

	cli, err := rpc.New(rpc.Options{})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	if err := cli.Group().Add(0, srv.URI()); err != nil {
		panic(err)
	}
	c, err := cli.NewContext(rpc.ContextOptions{})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out rpc.Bytes
	err = c.Call(ctx, rpc.Endpoint{Rank: 0, Tag: 0}, rpc.MakeOpcode(1, 1, 0), rpc.Bytes("hello, rank 0"), &out)
	fmt.Println(string(out), err)
	// Output: HELLO, RANK 0 <nil>
}

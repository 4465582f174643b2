package rpc_test

import (
	"bytes"
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

// ExampleCopyBytes reads large outputs into one reused CopyBytes: each
// call copies the output into its capacity, and the received buffers go
// back to the pools, where receiving into Bytes would take a fresh 1 MiB
// buffer every call.
func ExampleCopyBytes() {
	block := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	srv, err := rpc.New(rpc.Options{Listen: "tcp://127.0.0.1:0", Rank: 0})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	err = srv.Register(rpc.Protocol{Name: "store", Base: 2, Version: 1, RPCs: []rpc.RPC{{
		Name: "read",
		Handler: func(r *rpc.Incoming) error {
			out := rpc.Bytes(block) // sent from the server's memory as it is
			return r.Reply(&out)
		},
	}}})
	if err != nil {
		panic(err)
	}
	if _, err := srv.NewContext(rpc.ContextOptions{Auto: true}); err != nil {
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
	c, err := cli.NewContext(rpc.ContextOptions{Auto: true})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out rpc.CopyBytes
	for range 3 {
		if err := c.Call(ctx, rpc.Endpoint{Rank: 0, Tag: 0}, rpc.MakeOpcode(2, 1, 0), nil, &out); err != nil {
			panic(err)
		}
	}
	fmt.Println(len(out), bytes.Equal(out, block))
	// Output: 1048576 true
}

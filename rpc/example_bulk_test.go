package rpc_test

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/ferrymsg/ferry/rpc"
)

// The CaRT way to write an object: the client registers its buffer and
// sends a small RPC carrying the handle; the server's handler pulls the
// data (GET) straight into its own registered buffer, then replies.
func ExampleContext_Transfer() {
	srv, err := rpc.New(rpc.Options{Listen: "tcp://127.0.0.1:0", Rank: 0})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	store := make([]byte, 4<<20) // the server's object store
	target, err := srv.NewBulk([][]byte{store}, rpc.BulkWO)
	if err != nil {
		panic(err)
	}
	sc, err := srv.NewContext(rpc.ContextOptions{Auto: true}) // tag 0
	if err != nil {
		panic(err)
	}
	err = srv.Register(rpc.Protocol{Name: "obj", Base: 1, Version: 1, RPCs: []rpc.RPC{{
		Name: "write",
		Handler: func(r *rpc.Incoming) error {
			var h rpc.BulkHandle
			if err := r.Decode(&h); err != nil {
				return err
			}
			// Start the pull; reply when it completes (the callback runs
			// in the context's progress, here its own goroutine).
			_, err := sc.Transfer(rpc.BulkDesc{Op: rpc.BulkGet, Remote: h, Local: target, Len: h.Len, Via: r},
				func(c rpc.BulkCompletion) {
					if c.Err != nil {
						r.Fail(c.Err)
						return
					}
					r.Reply(nil)
				})
			return err
		},
	}}})
	if err != nil {
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
	obj := bytes.Repeat([]byte("ferry"), 600_000) // 3 MB
	src, err := cli.NewBulk([][]byte{obj}, rpc.BulkRO)
	if err != nil {
		panic(err)
	}
	defer src.Free()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = c.Call(ctx, rpc.Endpoint{Rank: 0, Tag: 0}, rpc.MakeOpcode(1, 1, 0), src.Handle(), nil)
	fmt.Println(err, bytes.Equal(store[:len(obj)], obj))
	// Output: <nil> true
}

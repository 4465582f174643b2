package rpc_test

import (
	"context"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/rpc"
)

// TestProgressWindowCallbacks keeps 16 requests in flight the CaRT way,
// each callback sending the next, as the self-test's --inflight does:
// progress runs the callbacks of a burst of replies as one batch with the
// connection corked (msgr's Conn.Cork), and some callbacks make a
// blocking Call meanwhile, whose request must go out although the
// connection is corked.
func TestProgressWindowCallbacks(t *testing.T) {
	checkGoroutines(t)
	_, cli, _ := setup(t, rpc.Options{}, rpc.Options{})
	c := newCtx(t, cli, rpc.ContextOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const window, total = 16, 2000
	sent, done, calls := 0, 0, 0
	var failed error
	var cb rpc.Callback
	send := func() {
		i := sent
		sent++
		if _, err := c.Send(rpc.Request{Opcode: op(opEcho), In: &pair{uint32(i), 0}, Out: new(pair), Arg: i}, cb); err != nil && failed == nil {
			failed = err
		}
	}
	cb = func(cp rpc.Completion) {
		done++
		if cp.Err != nil {
			if failed == nil {
				failed = cp.Err
			}
			return
		}
		i := cp.Request.Arg.(int)
		if p := cp.Request.Out.(*pair); p.A != uint32(i)+1 {
			failed = &rpc.Error{Msg: "wrong echo"}
			return
		}
		if i%97 == 0 {
			// A callback waiting for a reply of its own while its
			// batch's sends are held.
			var out pair
			if err := c.Call(ctx, rpc.Endpoint{}, op(opEcho), &pair{7, 0}, &out); err != nil || out.A != 8 {
				failed = &rpc.Error{Msg: "call from a callback failed"}
				return
			}
			calls++
		}
		if sent < total {
			send()
		}
	}
	for range window {
		send()
	}
	if err := c.ProgressUntil(ctx, func() bool { return done == total || failed != nil }); err != nil {
		t.Fatalf("%v after %d of %d callbacks", err, done, total)
	}
	if failed != nil {
		t.Fatal(failed)
	}
	if calls != (total+96)/97 {
		t.Fatalf("%d calls from callbacks, want %d", calls, (total+96)/97)
	}
}

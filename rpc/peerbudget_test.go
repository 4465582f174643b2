package rpc_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/rpc"
)

// TestPeerBudgetFlood: eight origins each send 32 self-test requests
// asking for 1 MiB outputs (overflowing: the target holds each until it
// is pulled) as fast as they can, 256 MiB asked in all. The target never
// owes them more than its 64 MiB PeerBudget, refuses what it does not
// cover with CodeBusy (counted), and an honest origin on a new
// connection gets its 1 MiB output meanwhile: the budget's last quarter
// (16 MiB) covers one output of each flooder and the honest one's.
func TestPeerBudgetFlood(t *testing.T) {
	const budget = 64 << 20
	srv, err := rpc.New(rpc.Options{Listen: "tcp://127.0.0.1:0", Logger: quietLogger(), Timeout: time.Minute, PeerBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	newCtx(t, srv, rpc.ContextOptions{Auto: true})
	metric := func(name string) float64 {
		s := srv.Metrics().Snapshot()
		v, _ := s.Value("ferry_rpc_" + name)
		return v
	}
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if o := int64(metric("peer_owed_bytes")); o > peak.Load() {
				peak.Store(o)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	origin := func() *rpc.Context {
		cli, err := rpc.New(rpc.Options{Logger: quietLogger(), Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		if err := cli.Group().Add(0, srv.URI()); err != nil {
			t.Fatal(err)
		}
		return newCtx(t, cli, rpc.ContextOptions{Auto: true})
	}
	in := &rpc.SelfTestInput{ReplySize: 1 << 20}
	var busy, ok atomic.Int64
	done := make(chan struct{}, 8*32)
	for range 8 {
		c := origin()
		for range 32 {
			_, err := c.Send(rpc.Request{Endpoint: rpc.Endpoint{}, Opcode: rpc.OpSelfTest, In: in, Out: new(rpc.Bytes)}, func(cp rpc.Completion) {
				switch {
				case cp.Err == nil:
					ok.Add(1)
				case errors.Is(cp.Err, rpc.ErrBusy):
					busy.Add(1)
				default:
					t.Errorf("a flooding request: %v", cp.Err)
				}
				done <- struct{}{}
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	honest := origin()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	var out rpc.Bytes
	if err := honest.Call(ctx, rpc.Endpoint{}, rpc.OpSelfTest, in, &out); err != nil {
		t.Fatalf("honest call during the flood: %v", err)
	}
	took := time.Since(start)
	if len(out) != 1<<20 {
		t.Fatalf("honest output of %d bytes", len(out))
	}
	for range 8 * 32 {
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("the flooding requests were not all answered")
		}
	}
	close(stop)
	<-sampled
	t.Logf("peak owed %d of %d; flooders: %d outputs, %d ErrBusy; the honest call took %v", peak.Load(), budget, ok.Load(), busy.Load(), took)
	if p := peak.Load(); p > budget {
		t.Fatalf("the target owed %d bytes, over its %d budget", p, budget)
	}
	if busy.Load() == 0 || metric("peer_budget_refusals") == 0 {
		t.Fatal("256 MiB of outputs asked and none refused")
	}
}

package rpc_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/rpc"
)

// TestBusyPollCall: with Options.BusyPoll on both instances, the
// replies of null RPCs through Call and the requests the server reads
// are found by polling the sockets (the messengers' busy_poll_hits),
// not after sleeping.
func TestBusyPollCall(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("sockets are polled on Linux only")
	}
	srv, cli, c := benchPair(t, rpc.Options{BusyPoll: 10 * time.Millisecond})
	const calls = 200
	for range calls {
		if err := c.Call(context.Background(), rpc.Endpoint{}, rpc.MakeOpcode(2, 0, 0), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	hits := func(in *rpc.Instance) float64 {
		sn := in.Metrics().Snapshot()
		return sn.Total("ferry_msgr_busy_poll_hits")
	}
	if h, s := hits(cli), hits(srv); h < calls/2 || s < calls/2 {
		t.Fatalf("busy_poll_hits: client %v, server %v in %d calls: the sockets were not polled", h, s, calls)
	}
}

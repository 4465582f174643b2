package rpc_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ferrymsg/ferry/rpc"
)

// TestMetricsAfterCalls: after known calls, the per-opcode counters,
// the error counts by code and the summed Stats families hold exactly
// those calls, on both sides.
func TestMetricsAfterCalls(t *testing.T) {
	srv, cli, _ := setup(t, rpc.Options{}, rpc.Options{})
	c := newCtx(t, cli, rpc.ContextOptions{})
	ctx := context.Background()
	for range 5 {
		var out pair
		if err := c.Call(ctx, rpc.Endpoint{}, op(opEcho), &pair{1, 2}, &out); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if err := c.Call(ctx, rpc.Endpoint{}, op(opFail), nil, nil); err == nil {
			t.Fatal("opFail succeeded")
		}
	}
	s := cli.Metrics().Snapshot()
	echo, fail := fmt.Sprintf("%#08x", uint32(op(opEcho))), fmt.Sprintf("%#08x", uint32(op(opFail)))
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"ferry_rpc_requests_completed", []string{echo}, 5},
		{"ferry_rpc_requests_completed", []string{fail}, 3},
		{"ferry_rpc_request_errors", []string{fail, "handler_error"}, 3},
		{"ferry_rpc_request_latency_seconds", []string{echo}, 5}, // the histogram's count
		{"ferry_rpc_requests_submitted", nil, 8},
		{"ferry_rpc_requests_in_flight", nil, 0},
	} {
		if got, _ := s.Value(c.name, c.labels...); got != c.want {
			t.Errorf("client %s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if got, ok := s.Value("ferry_rpc_request_errors", echo, "handler_error"); ok || got != 0 {
		t.Errorf("echo errors %v %v", got, ok)
	}
	ss := srv.Metrics().Snapshot()
	if got := ss.Total("ferry_rpc_requests_received"); got != 8 {
		t.Errorf("server requests_received = %v, want 8", got)
	}
	if got := ss.Total("ferry_rpc_error_replies_sent"); got != 3 {
		t.Errorf("server error_replies_sent = %v, want 3", got)
	}
	// The messenger's families are in the same registry.
	if got := ss.Total("ferry_msgr_messages_received"); got < 8 {
		t.Errorf("server msgr messages_received = %v, want at least 8", got)
	}
}

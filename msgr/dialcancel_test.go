package msgr_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// stuckDial is a transport whose dials connect nowhere: they wait for
// their context, and report on ended when it is done.
type stuckDial struct{ ended chan error }

func (s *stuckDial) Name() string { return "stuck" }
func (s *stuckDial) Listen(context.Context, transport.Addr) (transport.Listener, error) {
	return nil, errors.New("stuck: no listening")
}
func (s *stuckDial) Dial(ctx context.Context, a transport.Addr) (transport.Conn, error) {
	<-ctx.Done()
	s.ended <- ctx.Err()
	return nil, ctx.Err()
}

// TestMarkDownCancelsDial: marking a connection down while it dials
// cancels the dial at once (not at the handshake timeout), and the
// messenger then shuts down without waiting for it.
func TestMarkDownCancelsDial(t *testing.T) {
	sd := &stuckDial{ended: make(chan error, 4)}
	reg := transport.NewRegistry(sd)
	cli, _ := newClient(t, reg, msgr.Config{HandshakeTimeout: time.Minute})
	conn, err := cli.Connect("stuck://nowhere")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-sd.ended:
		t.Fatalf("the dial ended before the mark-down: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	conn.MarkDown()
	select {
	case err := <-sd.ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the dial ended with %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the dial went on after the connection was marked down")
	}
	done := make(chan struct{})
	go func() { cli.Shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown waited for the dial")
	}
}

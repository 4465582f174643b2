package rpc_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ferrymsg/ferry/rpc"
)

// TestInterceptors: the server's interceptors run around every handler
// in order and may refuse a request; the client's wrap every Call.
func TestInterceptors(t *testing.T) {
	var order []string
	var served atomic.Int32
	so := rpc.Options{Interceptors: []rpc.Interceptor{
		func(r *rpc.Incoming, next rpc.Handler) error {
			served.Add(1)
			if r.Opcode() == op(opFail) {
				return errors.New("refused by policy")
			}
			return next(r)
		},
	}}
	var calls atomic.Int32
	co := rpc.Options{CallInterceptors: []rpc.CallInterceptor{
		func(ctx context.Context, ep rpc.Endpoint, o rpc.Opcode, in rpc.Input, out rpc.Output, invoke rpc.Invoker) error {
			order = append(order, "outer")
			calls.Add(1)
			return invoke(ctx, ep, o, in, out)
		},
		func(ctx context.Context, ep rpc.Endpoint, o rpc.Opcode, in rpc.Input, out rpc.Output, invoke rpc.Invoker) error {
			order = append(order, "inner")
			if o == op(opPanic) {
				return errors.New("not sent")
			}
			return invoke(ctx, ep, o, in, out)
		},
	}}
	_, cli, _ := setup(t, so, co)
	c := newCtx(t, cli, rpc.ContextOptions{})
	ctx := context.Background()
	var out pair
	if err := c.Call(ctx, rpc.Endpoint{}, op(opEcho), &pair{1, 2}, &out); err != nil || out != (pair{2, 3}) {
		t.Fatalf("echo through interceptors: %v %+v", err, out)
	}
	err := c.Call(ctx, rpc.Endpoint{}, op(opFail), nil, nil)
	var e *rpc.Error
	if !errors.As(err, &e) || e.Code != rpc.CodeHandler || !strings.Contains(err.Error(), "refused by policy") {
		t.Errorf("refused request: %v", err)
	}
	if err := c.Call(ctx, rpc.Endpoint{}, op(opPanic), nil, nil); err == nil || err.Error() != "not sent" {
		t.Errorf("call refused by the client interceptor: %v", err)
	}
	if served.Load() != 2 || calls.Load() != 3 {
		t.Errorf("served %d (want 2), calls %d (want 3)", served.Load(), calls.Load())
	}
	if strings.Join(order[:2], ",") != "outer,inner" {
		t.Errorf("interceptor order %v", order)
	}
}

// TestHandlerCtx: Incoming.Ctx carries the request's deadline and ends
// when the request is answered.
func TestHandlerCtx(t *testing.T) {
	got := make(chan context.Context, 1)
	var dl time.Time
	var hasDL bool
	so := rpc.Options{Interceptors: []rpc.Interceptor{func(r *rpc.Incoming, next rpc.Handler) error {
		ctx := r.Ctx()
		if r.Ctx() != ctx {
			t.Error("Ctx made a second context")
		}
		dl, hasDL = ctx.Deadline()
		err := next(r)
		got <- ctx
		return err
	}}}
	_, cli, _ := setup(t, so, rpc.Options{})
	c := newCtx(t, cli, rpc.ContextOptions{Timeout: 5 * time.Second})
	start := time.Now()
	var out pair
	if err := c.Call(context.Background(), rpc.Endpoint{}, op(opEcho), &pair{}, &out); err != nil {
		t.Fatal(err)
	}
	ctx := <-got
	if !hasDL || dl.Before(start.Add(4*time.Second)) || dl.After(start.Add(6*time.Second)) {
		t.Errorf("handler context deadline %v (%v), want about 5s from the call", dl.Sub(start), hasDL)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Error("the handler's context did not end when the request was answered")
	}
}

// TestSendContext: a request sent with a context is aborted when the
// context ends, and its callback runs once with CodeCanceled.
func TestSendContext(t *testing.T) {
	_, cli, h := setup(t, rpc.Options{}, rpc.Options{})
	c := newCtx(t, cli, rpc.ContextOptions{Auto: true})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	if _, err := c.SendContext(ctx, rpc.Request{Endpoint: rpc.Endpoint{}, Opcode: op(opHold)}, func(cp rpc.Completion) { done <- cp.Err }); err != nil {
		t.Fatal(err)
	}
	<-h.held // the target holds it
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, rpc.ErrCanceled) {
			t.Errorf("callback error %v, want ErrCanceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelling the context did not complete the request")
	}
	// A context that has ended refuses at once.
	if _, err := c.SendContext(ctx, rpc.Request{Opcode: op(opEcho)}, nil); !errors.Is(err, rpc.ErrCanceled) {
		t.Errorf("SendContext on an ended context: %v", err)
	}
	// A completed request's abort is unregistered: cancelling later does
	// nothing.
	ctx2, cancel2 := context.WithCancel(context.Background())
	if _, err := c.SendContext(ctx2, rpc.Request{Opcode: op(opEcho), In: &pair{}, Out: &pair{}}, func(cp rpc.Completion) { done <- cp.Err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("echo: %v", err)
	}
	cancel2()
}

// TestSendContextDeadline: a request sent with a ctx whose deadline
// passes while the target holds it completes with ErrTimedOut, matching
// context.DeadlineExceeded, every time (ctx's end and the request's own
// timeout race to complete it; both must say timed out).
func TestSendContextDeadline(t *testing.T) {
	_, cli, h := setup(t, rpc.Options{}, rpc.Options{})
	c := newCtx(t, cli, rpc.ContextOptions{Auto: true})
	for i := range 8 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		done := make(chan error, 1)
		if _, err := c.SendContext(ctx, rpc.Request{Opcode: op(opHold)}, func(cp rpc.Completion) { done <- cp.Err }); err != nil {
			t.Fatal(err)
		}
		held := <-h.held
		select {
		case err := <-done:
			if !errors.Is(err, rpc.ErrTimedOut) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("request %d: %v, want ErrTimedOut and context.DeadlineExceeded", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the deadline did not complete the request")
		}
		held.Reply(nil)
		cancel()
	}
}

// TestNoProgressWarning: a context without Auto whose callback waits,
// and on which Progress is never called, says so in the log; one that
// is progressed, by Progress or by ProgressUntil, does not.
func TestNoProgressWarning(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		var mu sync.Mutex
		var logged strings.Builder
		log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return logged.Write(p)
		}), nil))
		text := func() string {
			mu.Lock()
			defer mu.Unlock()
			return logged.String()
		}
		clk := newFakeClock()
		_, cli, _ := setup(t, rpc.Options{}, rpc.Options{Logger: log, Clock: clk})
		for _, how := range []string{"Progress", "ProgressUntil", ""} {
			c := newCtx(t, cli, rpc.ContextOptions{})
			var ran atomic.Bool
			if _, err := c.Send(rpc.Request{Opcode: op(opEcho), In: &pair{}, Out: &pair{}}, func(rpc.Completion) { ran.Store(true) }); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the reply", func() bool { return c.Stats().Replied == 1 })
			switch how {
			case "Progress":
				if _, err := c.Progress(0); err != nil {
					t.Fatal(err)
				}
			case "ProgressUntil":
				if err := c.ProgressUntil(context.Background(), ran.Load); err != nil {
					t.Fatal(err)
				}
			}
			clk.Advance(rpc.NoProgressWarning)
			want := fmt.Sprintf("tag=%d", c.Tag())
			if how != "" {
				synctest.Wait() // every goroutine blocked: a wrong warning would be out
				if strings.Contains(text(), "has not been called") {
					t.Errorf("a context progressed by %s warned:\n%s", how, text())
				}
				continue
			}
			waitFor(t, "the warning", func() bool { return strings.Contains(text(), "has not been called") && strings.Contains(text(), want) })
		}
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

package rpc

import (
	"context"
	"sync"
	"time"
)

// Interceptor wraps the serving of every request an instance handles
// (metrics, tracing, authorization): it may inspect r (its opcode,
// source, the authenticated peer through its connection), call next to
// run the handler, or refuse the request by returning an error without
// calling it, which is answered as the handler's error would be.
type Interceptor func(r *Incoming, next Handler) error

// Invoker performs a Call.
type Invoker func(ctx context.Context, ep Endpoint, op Opcode, in Input, out Output) error

// CallInterceptor wraps every Context.Call of an instance (and the calls
// built on it, such as Ping): it may change the arguments, time the call
// or refuse it, and calls invoke to send it. Send's callbacks are not
// intercepted: they complete in progress, where blocking is not allowed.
type CallInterceptor func(ctx context.Context, ep Endpoint, op Opcode, in Input, out Output, invoke Invoker) error

// chainInterceptors returns the handler runner for the interceptors in
// order (the first is outermost), or nil for none.
func chainInterceptors(is []Interceptor) func(r *Incoming, h Handler) error {
	if len(is) == 0 {
		return nil
	}
	return func(r *Incoming, h Handler) error {
		next := h
		for i := len(is) - 1; i >= 0; i-- {
			ic, inner := is[i], next
			next = func(r *Incoming) error { return ic(r, inner) }
		}
		return next(r)
	}
}

// chainCallInterceptors returns invoke wrapped by the interceptors (the
// first outermost).
func chainCallInterceptors(is []CallInterceptor, invoke Invoker) Invoker {
	for i := len(is) - 1; i >= 0; i-- {
		ic, inner := is[i], invoke
		invoke = func(ctx context.Context, ep Endpoint, op Opcode, in Input, out Output) error {
			return ic(ctx, ep, op, in, out, inner)
		}
	}
	return invoke
}

// runHandler runs h for r through the instance's interceptors.
func (in *Instance) runHandler(r *Incoming, h Handler) error {
	if in.intercept == nil {
		return h(r)
	}
	return in.intercept(r, h)
}

// incomingCtx is what Incoming.Ctx made.
type incomingCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// Ctx returns a context.Context for serving r: it carries the origin's
// deadline and is cancelled when r is answered (Reply, Fail) or its
// Context closes. It is made on the first call, so a handler that never
// asks for it costs nothing. It must not be called after r is answered.
func (r *Incoming) Ctx() context.Context {
	if p := r.ctxp.Load(); p != nil {
		return p.ctx
	}
	var parent context.Context = closedBy(r.c.done)
	p := &incomingCtx{}
	if d, ok := r.Deadline(); ok {
		p.ctx, p.cancel = context.WithDeadline(parent, d)
	} else {
		p.ctx, p.cancel = context.WithCancel(parent)
	}
	if !r.ctxp.CompareAndSwap(nil, p) {
		p.cancel()
		return r.ctxp.Load().ctx
	}
	return p.ctx
}

// endCtx cancels the context Ctx made, if any (r is being answered).
func (r *Incoming) endCtx() {
	if p := r.ctxp.Swap(nil); p != nil {
		p.cancel()
	}
}

// closedBy is a context.Context without deadline or values that ends when
// done is closed: the parent of handlers' contexts.
type closedBy <-chan struct{}

func (c closedBy) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c closedBy) Done() <-chan struct{}       { return c }
func (c closedBy) Value(any) any               { return nil }
func (c closedBy) Err() error {
	select {
	case <-c:
		return context.Canceled
	default:
		return nil
	}
}

// SendContext is Send bound to ctx: the request's timeout is at most
// ctx's deadline, and it is aborted if ctx ends first, its callback
// seeing CodeTimedOut (matching context.DeadlineExceeded) when the
// deadline passed and CodeCanceled when ctx was canceled. A ctx that
// has already ended sends nothing and returns that error.
func (c *Context) SendContext(ctx context.Context, req Request, cb Callback) (Handle, error) {
	if dl, ok := ctx.Deadline(); ok {
		d := time.Until(dl)
		if d <= 0 {
			return Handle{}, &Error{Code: CodeTimedOut, Opcode: req.Opcode, Endpoint: req.Endpoint, Err: context.DeadlineExceeded}
		}
		if req.Timeout <= 0 || d < req.Timeout {
			req.Timeout = d
		}
	}
	if err := ctxEnded(ctx, req.Opcode, req.Endpoint); err != nil {
		return Handle{}, err
	}
	if ctx.Done() == nil {
		return c.Send(req, cb)
	}
	// stop unregisters the abort once the request completes, so a
	// long-lived ctx does not collect one function per request.
	var mu sync.Mutex
	var stop func() bool
	completed := false
	wrapped := func(cp Completion) {
		mu.Lock()
		completed = true
		st := stop
		mu.Unlock()
		if st != nil {
			st()
		}
		if cb != nil {
			cb(cp)
		}
	}
	hd, err := c.Send(req, wrapped)
	if err != nil {
		return hd, err
	}
	st := context.AfterFunc(ctx, func() { // a no-op once completed
		err := ctx.Err()
		hd.c.finishID(hd.id, ctxReason(err), err)
	})
	mu.Lock()
	if completed {
		mu.Unlock()
		st()
	} else {
		stop = st
		mu.Unlock()
	}
	return hd, nil
}

// NoProgressWarning is how long callbacks and handlers may wait on a
// context without Auto progress before a warning is logged if Progress
// has never been called on it: with a zero ContextOptions, nothing runs
// until the application calls Progress (CaRT's crt_progress), which is
// easy to forget.
const NoProgressWarning = 2 * time.Second

// warnIfNoProgress logs a warning, once, if Progress has still not been
// called NoProgressWarning after work was first queued.
func (c *Context) warnIfNoProgress() {
	t := c.in.clock.NewTimer(NoProgressWarning)
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			if !c.progressed.Load() {
				c.in.log.Warn("rpc: callbacks and handlers are waiting for Context.Progress, which has not been called on this context; call Progress (or ProgressUntil) in a loop, or create the context with ContextOptions{Auto: true}",
					"tag", c.tag, "waiting_for", NoProgressWarning)
			}
		case <-c.done:
		}
	}()
}

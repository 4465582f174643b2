package transport

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Registry maps schemes to transports. Its methods are safe for concurrent
// use.
type Registry struct {
	mu sync.RWMutex
	ts map[string]Transport
}

// Default is the process-wide registry. It holds the TCP transport with
// default options and nothing else; add other transports with Register or
// build a separate Registry with NewRegistry.
var Default = NewRegistry(NewTCP(TCPOptions{}))

// NewRegistry returns a registry holding ts, keyed by their Name. When two
// share a name the later one wins, as in a map literal; use Register to get
// an error instead. Nil transports are skipped.
func NewRegistry(ts ...Transport) *Registry {
	r := &Registry{ts: make(map[string]Transport, len(ts))}
	for _, t := range ts {
		if t != nil {
			r.ts[t.Name()] = t
		}
	}
	return r
}

// Register adds t under t.Name(). It returns an error matching ErrDuplicate
// if the scheme is taken, and ErrBadAddr for a name that is not a valid
// URI scheme in lower case.
func (r *Registry) Register(t Transport) error {
	name := t.Name()
	if !isScheme(name) || name != strings.ToLower(name) {
		return &AddrError{Input: name, Reason: "not a lower-case URI scheme", Err: ErrBadAddr}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.ts[name]; ok {
		return fmt.Errorf("%w: %q", ErrDuplicate, name)
	}
	if r.ts == nil {
		r.ts = make(map[string]Transport)
	}
	r.ts[name] = t
	return nil
}

// Lookup returns the transport registered for scheme.
func (r *Registry) Lookup(scheme string) (Transport, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.ts[scheme]
	return t, ok
}

// Schemes returns the registered schemes in sorted order.
func (r *Registry) Schemes() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s := make([]string, 0, len(r.ts))
	for k := range r.ts {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// LookupAddr returns the transport registered for a.Scheme, or an
// *AddrError matching ErrUnknownScheme if there is none.
func (r *Registry) LookupAddr(a Addr) (Transport, error) {
	t, ok := r.Lookup(a.Scheme)
	if !ok {
		return nil, &AddrError{Input: a.String(), Reason: "no transport for " + strconv.Quote(a.Scheme), Err: ErrUnknownScheme}
	}
	return t, nil
}

// Listen parses addr with ParseAddr and listens on it with the transport
// registered for its scheme. Errors match ErrBadAddr, ErrUnknownScheme or
// whatever the transport returns.
func (r *Registry) Listen(ctx context.Context, addr string) (Listener, error) {
	a, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	return r.ListenAddr(ctx, a)
}

// ListenAddr listens on a with the transport registered for a.Scheme.
func (r *Registry) ListenAddr(ctx context.Context, a Addr) (Listener, error) {
	t, err := r.LookupAddr(a)
	if err != nil {
		return nil, err
	}
	return t.Listen(ctx, a)
}

// Dial parses addr with ParseAddr and dials it with the transport
// registered for its scheme, honouring ctx while connecting. Errors match
// ErrBadAddr, ErrUnknownScheme, ErrRefused or whatever the transport
// returns.
func (r *Registry) Dial(ctx context.Context, addr string) (Conn, error) {
	a, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	return r.DialAddr(ctx, a)
}

// DialAddr dials a with the transport registered for a.Scheme.
func (r *Registry) DialAddr(ctx context.Context, a Addr) (Conn, error) {
	t, err := r.LookupAddr(a)
	if err != nil {
		return nil, err
	}
	return t.Dial(ctx, a)
}

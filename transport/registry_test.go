package transport_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/ferrymsg/ferry/transport"
)

// fake is a transport that records the address it was asked for.
type fake struct {
	name string
	last transport.Addr
}

var errFake = errors.New("fake transport")

func (f *fake) Name() string { return f.name }
func (f *fake) Listen(_ context.Context, a transport.Addr) (transport.Listener, error) {
	f.last = a
	return nil, errFake
}
func (f *fake) Dial(_ context.Context, a transport.Addr) (transport.Conn, error) {
	f.last = a
	return nil, errFake
}

func TestRegistry(t *testing.T) {
	ctx := context.Background()
	tcp := &fake{name: "tcp"}
	r := transport.NewRegistry(tcp, nil)
	if got := r.Schemes(); !slices.Equal(got, []string{"tcp"}) {
		t.Fatalf("Schemes() = %v", got)
	}
	if tr, ok := r.Lookup("tcp"); !ok || tr != tcp {
		t.Fatalf("Lookup(tcp) = %v, %v", tr, ok)
	}
	if _, ok := r.Lookup("inproc"); ok {
		t.Fatalf("Lookup(inproc) found a transport")
	}

	// Dial and Listen parse the address and route by scheme.
	if _, err := r.Dial(ctx, "v2:127.0.0.1:3300/9"); !errors.Is(err, errFake) {
		t.Fatalf("Dial: %v", err)
	}
	if want := (transport.Addr{Scheme: "tcp", Host: "127.0.0.1:3300", Nonce: 9}); tcp.last != want {
		t.Fatalf("transport got %+v, want %+v", tcp.last, want)
	}
	if _, err := r.Listen(ctx, "tcp://127.0.0.1:0"); !errors.Is(err, errFake) {
		t.Fatalf("Listen: %v", err)
	}
	if _, err := r.Dial(ctx, "inproc://a"); !errors.Is(err, transport.ErrUnknownScheme) {
		t.Fatalf("Dial to an unregistered scheme = %v, want ErrUnknownScheme", err)
	}
	if _, err := r.Listen(ctx, "inproc://a"); !errors.Is(err, transport.ErrUnknownScheme) {
		t.Fatalf("Listen on an unregistered scheme = %v, want ErrUnknownScheme", err)
	}
	if _, err := r.Dial(ctx, "nonsense"); !errors.Is(err, transport.ErrBadAddr) {
		t.Fatalf("Dial(nonsense) = %v, want ErrBadAddr", err)
	}

	// Register adds schemes and refuses duplicates and bad names.
	inproc := &fake{name: "inproc"}
	if err := r.Register(inproc); err != nil {
		t.Fatalf("Register(inproc): %v", err)
	}
	if _, err := r.Dial(ctx, "inproc://a"); !errors.Is(err, errFake) || inproc.last.Host != "a" {
		t.Fatalf("Dial(inproc://a) = %v, transport got %+v", err, inproc.last)
	}
	if err := r.Register(&fake{name: "tcp"}); !errors.Is(err, transport.ErrDuplicate) {
		t.Fatalf("Register(duplicate) = %v, want ErrDuplicate", err)
	}
	if tr, _ := r.Lookup("tcp"); tr != tcp {
		t.Fatalf("a refused Register replaced the transport")
	}
	for _, name := range []string{"", "TCP2", "1x", "a b"} {
		if err := r.Register(&fake{name: name}); !errors.Is(err, transport.ErrBadAddr) {
			t.Errorf("Register(%q) = %v, want ErrBadAddr", name, err)
		}
	}
	if got := r.Schemes(); !slices.Equal(got, []string{"inproc", "tcp"}) {
		t.Fatalf("Schemes() = %v", got)
	}

	// The zero Registry is usable.
	var zero transport.Registry
	if err := zero.Register(inproc); err != nil {
		t.Fatalf("zero Registry Register: %v", err)
	}
}

func TestDefaultRegistry(t *testing.T) {
	if got := transport.Default.Schemes(); !slices.Equal(got, []string{"tcp"}) {
		t.Fatalf("Default holds %v, want only tcp", got)
	}
	tr, _ := transport.Default.Lookup("tcp")
	if _, ok := tr.(*transport.TCP); !ok {
		t.Fatalf("Default's tcp transport is %T", tr)
	}
}

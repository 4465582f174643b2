package msgr1

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/msg"
)

// fakeClient is a small auth method for tests: its authorizer is
// "authz", a challenge "chal" is answered "authz+ans", and the server's
// final payload must be "reply"; the session key is key.
type fakeClient struct {
	key     []byte
	failReq bool
	calls   []string
}

func (c *fakeClient) Method() uint32 { return auth.MethodCephx }

func (c *fakeClient) Request(pt msg.EntityType) ([]byte, error) {
	c.calls = append(c.calls, "request "+pt.String())
	if c.failReq {
		return nil, auth.ErrNoTicket
	}
	return []byte("authz"), nil
}

func (c *fakeClient) ReplyMore(p []byte) ([]byte, error) {
	c.calls = append(c.calls, "more "+string(p))
	if string(p) != "chal" {
		return nil, fmt.Errorf("%w: challenge %q", auth.ErrMalformed, p)
	}
	return []byte("authz+ans"), nil
}

func (c *fakeClient) Done(gid uint64, mode uint32, p []byte) (auth.Result, error) {
	c.calls = append(c.calls, "done "+string(p))
	if string(p) != "reply" {
		return auth.Result{}, fmt.Errorf("%w: reply %q", auth.ErrBadKey, p)
	}
	return auth.Result{Method: auth.MethodCephx, SessionKey: c.key}, nil
}

// fakeServer verifies fakeClient's authorizers; with challenge it
// challenges the first one.
type fakeServer struct {
	key       []byte
	challenge bool
	refuse    bool
	calls     []string
}

func (s *fakeServer) Methods(msg.EntityType) []uint32 { return []uint32{auth.MethodCephx} }

func (s *fakeServer) Handle(method uint32, pt msg.EntityType, mode uint32, first bool, p []byte) (auth.Reply, error) {
	s.calls = append(s.calls, fmt.Sprintf("handle %d %v %v %q", method, pt, first, p))
	if s.refuse || method != auth.MethodCephx {
		return auth.Reply{}, fmt.Errorf("%w: refused", auth.ErrBadTicket)
	}
	if s.challenge && first {
		return auth.Reply{More: []byte("chal")}, nil
	}
	want := "authz"
	if s.challenge {
		want = "authz+ans"
	}
	if string(p) != want {
		return auth.Reply{}, fmt.Errorf("%w: authorizer %q", auth.ErrBadTicket, p)
	}
	return auth.Reply{Done: true, Payload: []byte("reply"), Result: auth.Result{
		Method: auth.MethodCephx, SessionKey: s.key,
		Name: msg.AuthName{Type: pt, ID: "admin"}, GlobalID: 4100,
	}}, nil
}

var testKey = []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}

func addr(s string) msg.EntityAddr {
	a, err := msg.ParseEntityAddr(s)
	if err != nil {
		panic(err)
	}
	return a
}

func clientConfig() Config {
	return Config{
		Role:      Client,
		MyName:    msg.EntityName{Type: msg.EntityClient, Num: 4100},
		Nonce:     42,
		PeerAddr:  addr("v1:127.0.0.1:6789/0"),
		PeerType:  msg.EntityMon,
		Supported: msg.FeaturesAll,
		Lossy:     true,
		GlobalSeq: 1,
	}
}

func serverConfig() Config {
	return Config{
		Role:      Server,
		MyName:    msg.EntityName{Type: msg.EntityMon, Num: 0},
		MyAddr:    addr("v1:127.0.0.1:6789/0"),
		PeerAddr:  addr("v1:127.0.0.1:50000/0"),
		Supported: msg.FeaturesAll,
		Required:  msg.FeaturesMonRequired,
	}
}

// osdConfigs are a client and an OSD server with the fake auth method.
func osdConfigs(challenge bool) (Config, Config, *fakeClient, *fakeServer) {
	cc, sc := clientConfig(), serverConfig()
	cc.PeerType = msg.EntityOSD
	cc.PeerAddr = addr("v1:127.0.0.1:6800/1927")
	cc.Lossy = false
	fc := &fakeClient{key: testKey}
	cc.Auth = fc
	sc.MyName = msg.EntityName{Type: msg.EntityOSD, Num: 0}
	sc.MyAddr = cc.PeerAddr
	sc.Required = 0
	fs := &fakeServer{key: testKey, challenge: challenge}
	sc.AuthServer = fs
	return cc, sc, fc, fs
}

// side wraps an engine with the bytes not yet fed to it.
type side struct {
	e      *Engine
	in     []byte
	events []Event
	err    error
	// decide answers the events that wait for a decision (server:
	// EvConnect; client: EvRetryGlobal).
	decide func(e *Engine, ev Event) error
}

// feed gives s as much of its pending input as the engine asks for.
func (s *side) feed(t *testing.T) bool {
	t.Helper()
	progressed := false
	for s.err == nil {
		n, retain := s.e.Need()
		if n == 0 || len(s.in) < n {
			return progressed
		}
		p := s.in[:n]
		if retain {
			p = bytes.Clone(p)
		}
		s.in = s.in[n:]
		evs, err := s.e.Feed(p)
		progressed = true
		s.err = err
		for _, ev := range evs {
			s.events = append(s.events, ev)
			if (ev.Kind == EvConnect || ev.Kind == EvRetryGlobal) && s.decide != nil {
				if err := s.decide(s.e, ev); err != nil {
					t.Fatalf("decide: %v", err)
				}
			}
		}
	}
	return progressed
}

// run pumps bytes between a and b until neither makes progress.
func run(t *testing.T, a, b *side) {
	t.Helper()
	for range 1000 {
		b.in = append(b.in, a.e.Output()...)
		a.in = append(a.in, b.e.Output()...)
		pa, pb := a.feed(t), b.feed(t)
		if !pa && !pb && len(a.e.out) == 0 && len(b.e.out) == 0 {
			return
		}
	}
	t.Fatal("did not settle")
}

func acceptNew(e *Engine, ev Event) error {
	return e.Accept(Accept{GlobalSeq: 7, Lossy: e.PendingConnect().Flags&ConnectFlagLossy != 0})
}

func pair(cc, sc Config) (*side, *side) {
	c := &side{e: NewEngine(cc)}
	s := &side{e: NewEngine(sc), decide: acceptNew}
	c.e.Start()
	s.e.Start()
	return c, s
}

func kinds(evs []Event) []EventKind {
	var k []EventKind
	for _, e := range evs {
		k = append(k, e.Kind)
	}
	return k
}

func hasKind(evs []Event, k EventKind) bool {
	for _, e := range evs {
		if e.Kind == k {
			return true
		}
	}
	return false
}

// checkTyped fails unless err is an *Error with a sentinel.
func checkTyped(t *testing.T, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Err == nil {
		t.Fatalf("untyped error %T: %v", err, err)
	}
}

func testMessage(seq uint64, front, middle, data string) *msg.Message {
	m := msg.New(2)
	m.Header.Seq = seq
	m.Header.Tid = 99
	m.Header.Version = 1
	m.SetSegments([]byte(front), []byte(middle), []byte(data))
	return m
}

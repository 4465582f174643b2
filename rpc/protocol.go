package rpc

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// Opcode identifies an RPC: base<<24 | version<<16 | index (CaRT's
// CRT_PROTO_OPC), so 256 protocol bases, 256 versions of each and 65,536
// RPCs per version.
type Opcode uint32

// MakeOpcode returns the opcode of RPC index of version ver of protocol
// base.
func MakeOpcode(base, ver uint8, index uint16) Opcode {
	return Opcode(base)<<24 | Opcode(ver)<<16 | Opcode(index)
}

// Base returns the protocol base.
func (o Opcode) Base() uint8 { return uint8(o >> 24) }

// Version returns the protocol version.
func (o Opcode) Version() uint8 { return uint8(o >> 16) }

// Index returns the RPC's index within its protocol version.
func (o Opcode) Index() uint16 { return uint16(o) }

func (o Opcode) String() string { return fmt.Sprintf("%#08x", uint32(o)) }

// Reserved protocol bases (CaRT's internal bases). Bases from
// MinReservedBase up are reserved for ferry's own protocols; Register
// refuses them. Wire constants; append only.
const (
	MinReservedBase uint8 = 0xF0
	BaseFault       uint8 = 0xF1 // fault injection (reserved, unused)
	BaseSelfTest    uint8 = 0xF2 // the self-test protocol
	BaseCtl         uint8 = 0xF3 // control (reserved, unused)
	BaseIV          uint8 = 0xF4 // incast variables (reserved, unused)
	BaseSWIM        uint8 = 0xFE // membership (reserved for package swim)
	BaseInternal    uint8 = 0xFF // internal: proto-query, URI lookup
)

// Internal opcodes. Wire constants; append only.
var (
	// OpPing is a null RPC every instance answers with an empty output.
	OpPing = MakeOpcode(BaseInternal, 0, 0)
	// OpProtoQuery asks a target for the highest of a list of versions of
	// a protocol base it has registered (crt_proto_query).
	OpProtoQuery = MakeOpcode(BaseInternal, 0, 1)
	// OpURILookup asks a target for the URI of a rank's context (CaRT's
	// CRT_OPC_URI_LOOKUP).
	OpURILookup = MakeOpcode(BaseInternal, 0, 2)
	// OpGroupUpdate carries a new membership and its version from the
	// group's authority to a rank (Group.Propose); the rank applies it if
	// the version is newer than its own.
	OpGroupUpdate = MakeOpcode(BaseInternal, 0, 3)
	// OpSelfTest is the self-test RPC: its input is a reply size and a
	// payload, its output that many bytes.
	OpSelfTest = MakeOpcode(BaseSelfTest, 0, 0)
)

// Flags modify an RPC's handling. They are set when a protocol is
// registered; the origin reads them from its own registration (or uses
// none for an opcode it has not registered).
type Flags uint32

// RPC flags.
const (
	// OneWay: the target sends no reply; the origin's request completes
	// as soon as it is handed to the connection (CRT_RPC_FEAT_NO_REPLY).
	OneWay Flags = 1 << iota
	// NoTimeout: the request never times out; it completes only by its
	// reply, an abort, a connection failure or its target leaving the
	// group (CRT_RPC_FEAT_NO_TIMEOUT).
	NoTimeout
	// QueueFront: when the target's credits are exhausted, the request
	// waits at the head of the wait queue rather than its tail, and it is
	// sent at high message priority (CRT_RPC_FEAT_QUEUE_FRONT).
	QueueFront
	// Inline: the handler runs on the connection's reader goroutine as
	// soon as the request arrives, instead of in the target context's
	// progress. It must not block: while it runs, that connection reads
	// nothing. (ferry's own flag.)
	Inline
	// CheckGroupVersion: the target refuses the request with
	// CodeGroupVersion (ErrGroupVersion) unless the origin's group
	// version, carried in every request's header, equals its own, as
	// CaRT checks collectives (DER_GRPVER); the handler does not run.
	// The target's registration decides. (Collectives check versions
	// themselves; Incoming.GroupVersion gives the origin's.)
	CheckGroupVersion
)

// Handler serves one RPC at the target. It reads the input with
// r.Decode and answers with r.Reply or r.Fail, before or after it
// returns: a handler that returns nil without answering keeps the request
// open, to answer later from any goroutine (CaRT's crt_req_addref). A
// non-nil return answers with that error if the request is still open. A
// panic is recovered and answered as CodeHandler. A request never
// answered times out at its origin.
type Handler func(r *Incoming) error

// RPC is one RPC of a protocol.
type RPC struct {
	// Name is for logs and statistics (optional).
	Name string
	// Handler serves the RPC; nil on an origin that only sends it (a
	// request for an RPC without handler is answered CodeUnregistered).
	Handler Handler
	// Flags modify its handling.
	Flags Flags
}

// Protocol is a set of RPCs registered together: the opcode of RPCs[i]
// is MakeOpcode(Base, Version, i) (crt_proto_format).
type Protocol struct {
	Name    string
	Base    uint8
	Version uint8
	RPCs    []RPC
}

// maxRPCs is the largest number of RPCs in one protocol version.
const maxRPCs = 1 << 16

// rpcDef is a registered RPC.
type rpcDef struct {
	op      Opcode
	name    string
	handler Handler
	flags   Flags
	met     *opMetrics // the opcode's metrics; nil before the instance has any
}

// protoTable is an immutable snapshot of the registrations, replaced as a
// whole on each registration so that lookups take no lock.
type protoTable struct {
	byBaseVer map[uint16][]rpcDef // base<<8 | version
}

// registry holds the protocols of an instance.
type registry struct {
	mu  sync.Mutex
	cur atomic.Pointer[protoTable]
	met *rpcMetrics // set before the first registration
}

func (r *registry) init() {
	r.cur.Store(&protoTable{byBaseVer: map[uint16][]rpcDef{}})
}

func (r *registry) lookup(op Opcode) *rpcDef {
	defs := r.cur.Load().byBaseVer[uint16(op>>16)]
	if i := int(op.Index()); i < len(defs) {
		return &defs[i]
	}
	return nil
}

func (r *registry) register(p Protocol, internal bool) error {
	if !internal && p.Base >= MinReservedBase {
		return fmt.Errorf("%w: protocol base %#x is reserved", ErrInvalid, p.Base)
	}
	if len(p.RPCs) == 0 || len(p.RPCs) > maxRPCs {
		return fmt.Errorf("%w: protocol %q has %d RPCs (1 to %d)", ErrInvalid, p.Name, len(p.RPCs), maxRPCs)
	}
	for i, d := range p.RPCs {
		if d.Flags&OneWay != 0 && d.Flags&NoTimeout != 0 {
			return fmt.Errorf("%w: RPC %d of %q: OneWay with NoTimeout", ErrInvalid, i, p.Name)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.cur.Load()
	key := uint16(p.Base)<<8 | uint16(p.Version)
	if _, ok := old.byBaseVer[key]; ok {
		return fmt.Errorf("%w: protocol base %#x version %d", ErrExists, p.Base, p.Version)
	}
	defs := make([]rpcDef, len(p.RPCs))
	for i, d := range p.RPCs {
		defs[i] = rpcDef{op: MakeOpcode(p.Base, p.Version, uint16(i)), name: d.Name, handler: d.Handler, flags: d.Flags}
		if r.met != nil {
			defs[i].met = r.met.op(opcodeLabel(defs[i].op))
		}
	}
	n := &protoTable{byBaseVer: make(map[uint16][]rpcDef, len(old.byBaseVer)+1)}
	for k, v := range old.byBaseVer {
		n.byBaseVer[k] = v
	}
	n.byBaseVer[key] = defs
	r.cur.Store(n)
	return nil
}

// highest returns the highest of vers registered for base.
func (r *registry) highest(base uint8, vers []uint8) (uint8, bool) {
	t := r.cur.Load()
	best, ok := uint8(0), false
	for _, v := range vers {
		if _, reg := t.byBaseVer[uint16(base)<<8|uint16(v)]; reg && (!ok || v > best) {
			best, ok = v, true
		}
	}
	return best, ok
}

// versions returns the registered versions of base, ascending.
func (r *registry) versions(base uint8) []uint8 {
	var out []uint8
	for k := range r.cur.Load().byBaseVer {
		if uint8(k>>8) == base {
			out = append(out, uint8(k))
		}
	}
	slices.Sort(out)
	return out
}

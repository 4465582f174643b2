package rpc

// Test hooks that make a peer misbehave, for the external tests.

import (
	"sync/atomic"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc/internal/wire"
)

// SendOverflowReplies sends k replies to r, each naming b as its
// overflowing output, without answering r.
func SendOverflowReplies(r *Incoming, b *Bulk, k int) error {
	conn := r.conn.(*msgr.Conn)
	for range k {
		h := r.replyHeader(CodeOK)
		h.Flags |= wire.FlagHasData | wire.FlagBulkOut
		front := insertOverflow(h.Append(nil), b.key, uint64(b.size))
		m := msg.New(wire.TypeReply)
		m.Header.Tid = r.tid
		m.Header.Priority = r.prio
		m.SetSegments(front, nil, nil)
		if err := conn.Send(m); err != nil {
			return err
		}
	}
	return nil
}

// IncomingConn returns the connection r arrived on.
func IncomingConn(r *Incoming) *msgr.Conn { return r.conn.(*msgr.Conn) }

type dropGets struct{ on *atomic.Bool }

func (d dropGets) Dispatch(m *msg.Message) bool { return false }
func (d dropGets) CanFastDispatch(m *msg.Message) bool {
	if !d.on.Load() || m.Header.Type != wire.TypeBulk {
		return false
	}
	h, err := wire.DecodeBulk(frontOf(m))
	return err == nil && h.Op == wire.BulkGetReq
}
func (d dropGets) FastDispatch(m *msg.Message) { m.Done() }

// DropGetRequests makes m drop the bulk GET requests it receives while
// on is set (a holder that does not serve, or serves slowly).
func DropGetRequests(m *msgr.Messenger, on *atomic.Bool) { m.AddDispatcherHead(dropGets{on}) }

// PeerCharges returns what in's peers hold, by charge (the peer
// account's names: "unanswered", "outputs", "pulls"...), released
// accounts included, and how many accounts are live.
func PeerCharges(in *Instance) (map[string]int64, int) {
	sum, n := in.peerCharges()
	m := make(map[string]int64, len(sum))
	for k, v := range sum {
		m[charge(k).String()] = v
	}
	return m, n
}

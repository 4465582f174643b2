package msgr

import "github.com/ferrymsg/ferry/msg"

// Dispatcher receives the messages a Messenger reads (Ceph's Dispatcher).
// Dispatchers form a chain (AddDispatcherHead, AddDispatcherTail); each
// message goes to them in order until one returns true. Dispatch runs on
// the messenger's dispatch goroutine, one message at a time, so messages
// of one connection at one priority arrive in order.
//
// A dispatcher may also implement any of the optional interfaces below to
// hear about connection events or to take messages on the fast path.
type Dispatcher interface {
	// Dispatch handles m and reports whether it did. The dispatcher owns m
	// afterwards; it may call m.Done when finished with its buffers.
	Dispatch(m *msg.Message) bool
}

// DispatcherFunc adapts a function to a Dispatcher.
type DispatcherFunc func(m *msg.Message) bool

// Dispatch calls f(m).
func (f DispatcherFunc) Dispatch(m *msg.Message) bool { return f(m) }

// FastDispatcher handles some messages inline on the connection's reader
// goroutine (Ceph's ms_fast_dispatch), skipping the dispatch queue. It must
// not block: while it runs, the connection reads nothing, and what other
// goroutines send on it meanwhile waits for it to return, for the reader
// writes it then, coalesced with the replies it sent (msgr/write.go);
// only messages sent corked (Conn.Cork) are written by their Uncork.
type FastDispatcher interface {
	// CanFastDispatch reports whether FastDispatch takes m.
	CanFastDispatch(m *msg.Message) bool
	// FastDispatch handles m.
	FastDispatch(m *msg.Message)
}

// ConnectHandler hears that an outgoing connection became ready
// (ms_handle_connect).
type ConnectHandler interface{ HandleConnect(c *Conn) }

// AcceptHandler hears that an incoming connection became ready
// (ms_handle_accept).
type AcceptHandler interface{ HandleAccept(c *Conn) }

// ResetHandler hears that a lossy connection failed: messages queued on it
// were dropped (ms_handle_reset).
type ResetHandler interface{ HandleReset(c *Conn) }

// RemoteResetHandler hears that the peer reset the session
// (ms_handle_remote_reset).
type RemoteResetHandler interface{ HandleRemoteReset(c *Conn) }

// RefusedHandler hears that a connection attempt was refused
// (ms_handle_refused), or failed for good because its address cannot be
// dialled (transport.ErrBadAddr, ErrUnknownScheme, ErrBadConfig): the
// connection's Err says which.
type RefusedHandler interface{ HandleRefused(c *Conn) }

// DataPlacer is an optional Dispatcher interface that chooses where the data
// segment of a received message lands, so that a bulk payload is read from
// the socket straight into a buffer its user registered, with no copy in
// between (Ceph's Connection::post_rx_buffer, generalised). The messenger
// offers each large enough message to the DataPlacers among its dispatchers,
// in chain order, until one places it.
//
// Both methods run on the connection's reader goroutine and must not block:
// while they run, the connection reads nothing.
type DataPlacer interface {
	// PlaceData runs on the connection's reader goroutine after the message's
	// header, front and middle segments are read and before its data segment
	// is, for messages whose data segment is at least PlaceMin bytes and that
	// are not duplicates. It returns buffers whose lengths sum to exactly
	// dataLen to read the data into (they become m.Data of the delivered
	// message, which is then dispatched as usual), or nil to let the
	// messenger allocate. front is valid only during the call, and so is h
	// (copy what you keep). front's CRC is not checked yet: it is verified,
	// with the data's, once the whole frame is read, and a mismatch ends in
	// UnplaceData. Buffers of the wrong total length are a programming
	// error: the messenger logs it, calls UnplaceData and allocates.
	//
	// The buffers must not overlap, and nothing else may write them until
	// the message is delivered or UnplaceData is called: the data's CRC is
	// computed over each piece as it lands (while it is in the CPU's
	// cache), so it vouches for the bytes as received, not for whatever
	// the buffers hold later.
	PlaceData(c *Conn, h *msg.Header, front []byte, dataLen int) [][]byte
	// UnplaceData reports that buffers PlaceData returned for the message
	// with this header will not be delivered (the socket failed or the frame
	// was corrupt, or the connection closed before the message could be
	// queued); the messenger no longer touches them after the call. h is
	// valid only during the call.
	UnplaceData(c *Conn, h *msg.Header)
}

// PlaceMin is the smallest data segment offered to a DataPlacer.
const PlaceMin = 4096

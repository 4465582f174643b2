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
// not block: while it runs, the connection reads nothing.
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
// (ms_handle_refused).
type RefusedHandler interface{ HandleRefused(c *Conn) }

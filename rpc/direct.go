package rpc

import (
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc/internal/wire"
)

// directOK reports whether t can move by reading or writing the peer's
// memory directly (a same-host transport that allows it). It is called
// with the context's bmu held and must not block.
func (c *Context) directOK(t *BulkTransfer) bool { return false }

// startDirect runs a transfer directOK accepted; it completes t itself
// (successfully, or with an error after which the caller may not retry).
// Called without locks.
func (c *Context) startDirect(t *BulkTransfer) {}

// handleDirect handles the bulk operations of the direct path.
func (in *Instance) handleDirect(conn *msgr.Conn, h *wire.BulkHeader, m *msg.Message) {}

// Package rpc is ferry's RPC layer: DAOS's CaRT (contexts with progress,
// registered protocols, requests with completion callbacks, one-way RPCs,
// timeouts, per-endpoint credits with a wait queue, pooled requests, a
// primary group of ranks with a URI per context tag and a per-context
// connection cache, URI lookups and attach files, and the self-test
// service) in Go, on top of the messenger (package msgr).
//
//	srv, _ := rpc.New(rpc.Options{Listen: "tcp://127.0.0.1:0", Rank: 0})
//	srv.Register(rpc.Protocol{Name: "kv", Base: 1, Version: 1, RPCs: []rpc.RPC{
//		{Name: "get", Handler: func(r *rpc.Incoming) error {
//			var k Key
//			if err := r.Decode(&k); err != nil {
//				return err
//			}
//			return r.Reply(lookup(k))
//		}},
//	}})
//	srv.NewContext(rpc.ContextOptions{Auto: true}) // tag 0
//
//	cli, _ := rpc.New(rpc.Options{})
//	cli.Group().Add(0, srv.URI()) // or cli.Group().LoadAttach(path)
//	c, _ := cli.NewContext(rpc.ContextOptions{})
//	err := c.Call(ctx, rpc.Endpoint{Rank: 0, Tag: 0}, rpc.MakeOpcode(1, 1, 0), &key, &val)
//
// # Instances, contexts and progress
//
// New creates an Instance (crt_init): a messenger, listening or client
// only, with a default timeout (60 s), per-rank credits (32, clamped to
// 256, UnlimitedCredits for none) and a bound on contexts (128). An
// Instance may also join an existing messenger (Options.Messenger), taking
// only the RPC message types, so one address serves Ceph messages and
// RPCs alike (`ferry serve` does this).
//
// A Context (crt_context_create) is the unit of progress; its index is the
// endpoint tag. Requests sent with Send complete through a callback that
// runs in the context's progress: Progress (crt_progress) and
// ProgressUntil (crt_progress_cond) run ready callbacks and queued
// handlers in the caller's goroutine; with ContextOptions.Auto the context
// has its own progress goroutine, optionally locked to an OS thread pinned
// to CPUs (DAOS's xstreams). Call blocks its goroutine with a
// context.Context and does not need progress at all: replies, timeouts and
// credit returns are handled where they happen (the connection's reader
// goroutine, the context's timer goroutine), so a context nobody
// progresses still times requests out and drains its wait queues.
//
// # Protocols and opcodes
//
// An Opcode is base<<24 | version<<16 | index (CRT_PROTO_OPC). A Protocol
// registers the RPCs of one base and version, each with a handler and
// flags: OneWay (no reply), NoTimeout, QueueFront (head of the wait
// queue, high message priority) and ferry's Inline (the handler runs on
// the connection's reader goroutine, without a goroutine hop; it must not
// block). Bases from 0xF0 up are reserved: 0xFF carries the internal RPCs
// (OpPing, OpProtoQuery which returns the highest of a list of versions a
// target supports, OpURILookup), 0xF2 the self-test (OpSelfTest). An
// origin needs no registration to send an opcode; its own registration
// gives the flags it sends with.
//
// # Requests, replies, errors
//
// Inputs are encoding.BinaryAppender values and outputs
// encoding.BinaryUnmarshaler values. An input that also implements
// DataAppender sends raw buffers in the message's data segment without
// copying them, and an output that implements DataReceiver takes the data
// segment without a copy; Bytes does both, so a 1 MiB input is neither
// copied by the origin nor by the target. Taking the data segment means
// taking its buffer, though, so every large payload received into Bytes
// costs a fresh one. A caller or handler that receives large payloads
// again and again decodes them into a reused CopyBytes (or any
// DataPeeker) instead: one copy per call, and the received buffers go
// back to the pools (a 1 MiB read RPC over shm in bench/transports: 1.0
// ms into Bytes, 0.19-0.23 ms into CopyBytes).
//
// A handler answers with Incoming.Reply or Incoming.Fail, before or after
// returning (asynchronous handlers keep the Incoming). Every failure is an
// *Error with a Code that travels in the reply (CodeUnregistered,
// CodeMalformed, CodeHandler, CodeBadTarget, CodeWrongRank...) or is
// decided by the origin (CodeTimedOut, CodeCanceled, CodeUnreachable,
// CodeExcluded, CodeShutdown); errors.Is matches the package's sentinels,
// timeouts are net.Errors and match context.DeadlineExceeded. An *Error
// names the opcode and endpoint of its request, and its text says
// "rpc: " once: "rpc: handler error (opcode 0x01010008 to 3:0): disk on
// fire". One failure, one code: a rank removed from the group or known
// dead by the membership fails with ErrExcluded, at once; a rank never
// in the group with ErrNotFound; a target process that died (its
// connection failed, or the dial is refused) with ErrUnreachable, until
// the membership declares it dead; a target that does not answer in
// time (stopped, partitioned) with ErrTimedOut.
//
// Every instance is exactly one rank (Options.Rank; unset means rank 0,
// a client is RankNone and serves nothing), and a target checks each
// request's destination rank against its own: a request for another
// rank (a stale URI, a target started with the wrong rank) is refused
// with ErrWrongRank and no handler runs. The destination tag names the
// context; a tag with no context is refused with ErrBadTarget.
//
// # Tracking: ids, credits, wait queues, timeouts
//
// Each context tracks its requests with a pure state machine
// (rpc/internal/track): it assigns ids (slot and generation, so a late
// reply never matches a newer request), keeps per target rank an
// in-flight count against the credits and a wait queue (QueueFront at its
// head), and a timer heap. Its inputs are submissions, replies, aborts,
// failures and the current time; its outputs are requests to transmit and
// requests completed, with the reason. A request completes exactly once,
// whichever of its reply, deadline, abort, connection failure or
// exclusion comes first; later events find nothing. The goroutines
// around it only move messages and time: the reader goroutines feed
// replies, one timer goroutine per context feeds the time of an injected
// Clock (Options.Clock), and completions are handed to Call or to
// progress.
//
// Timeouts: Request.Timeout, else the context's (SetTimeout), else the
// instance's; at most 3600 s. The origin's deadline (Unix nanoseconds)
// travels in the RPC header, so a handler sees its remaining time
// (Incoming.Remaining). NoTimeout requests carry none.
//
// # Groups, tags and URIs
//
// The primary Group maps ranks to the URI of each of their tags. Members
// are added with the URI of tag 0 (Add, Remove, Modify with ModAdd,
// ModRemove, ModReplace and a growing version, or LoadAttach of an attach
// file that SaveAttach wrote: "name G", "size N", "all", then "RANK URI"
// lines, as crt_group_config_save). A request to a tag whose URI is not
// known starts a URI lookup (OpURILookup to the rank's tag 0, or to
// another member; at most 8 tries; it takes no credit); requests to the
// same endpoint share it. Each context caches its connections by (rank,
// tag). Removing a rank completes its queued and in-flight requests with
// ErrExcluded; a connection failure completes those sent on it with
// ErrUnreachable.
//
// # Membership: states, versions, authority, SWIM
//
// Each member also has a liveness in this instance's view (MemberState:
// alive, suspect, dead) set by a failure detector (Group.SetState). A
// verdict acts here at once: a dead member is excluded, so its queued,
// credit-waiting and in-flight requests complete with ErrExcluded, its
// connections are dropped, and new requests to it fail at once without
// dialling it, until a verdict at a higher incarnation has it alive (a
// restart). Watch delivers the events (alive, suspect, dead, joined,
// left, and this instance's own exclusion) to callbacks, in order, on
// one goroutine.
//
// The group's version changes through one authority: Group.Propose
// applies a change at the next version and sends the whole membership
// (OpGroupUpdate, applied by each rank only if newer) to every member
// and to the ranks it removes, which learn they were excluded
// (EventExcluded, Group.ExcludedAt; CaRT's exclusion detection). RPCs
// registered with CheckGroupVersion are refused with ErrGroupVersion
// when the origin's version (in every request header) is not the
// target's.
//
// Instance.StartSWIM runs package swim's machine in a context of its own:
// its messages are one-way RPCs of the SWIM base (OpSWIM), queued at the
// front, sent at high priority and served inline on the reader
// goroutine; a goroutine ticks it by the instance's Clock. Its verdicts
// go to Group.SetState; its Authority (by default the lowest live rank;
// or a designated rank; or the application) proposes each new
// membership: members dead removed, removed ranks back at a higher
// incarnation re-added. See Authority for the behaviour under
// partition and SWIMOptions for the defaults and the detection bound
// (26.7 s for 5 ranks).
//
// # Collectives
//
// Context.Broadcast runs a collective RPC (CaRT's corpc) rooted at this
// rank: it goes down a tree of a chosen topology (flat, k-ary, k-nomial
// with a ratio, encoded as CaRT encodes them) over the group or a subset
// of it, less excluded ranks; every rank runs the collective's handler,
// forwards to its children (OpCollective, with the collective header
// naming root, group version, topology, filter and id), combines their
// replies with the collective's aggregation function and replies to its
// parent. Collectives are registered with RegisterCollective, their
// aggregation function with them. A rank whose group version differs
// from the root's refuses. The result holds the aggregate and, beyond
// CaRT's one error per subtree, every rank that answered and every rank
// that failed or did not answer with its reason (a failed forward lists
// its whole subtree, via the rank it failed on). A deadline, an abort
// (ctx) or a rank dying always ends a collective with a result. A
// client, which cannot root a collective, asks a member to root one for
// it with BroadcastVia. Inputs beyond the eager limit go down the tree
// as chained bulk (each rank pulls from its parent). The tree and the
// aggregation are package coll's pure machine.
//
// # Bulk transfers
//
// NewBulk registers a scatter-gather list of byte slices as read-only
// (peers GET from it), write-only (peers PUT into it) or read-write
// (crt_bulk_create); Bulk.Handle is the descriptor a peer needs, and it
// travels in RPC inputs and outputs (BulkHandle implements
// BinaryAppender; Bind embeds the origin's rank, tag and URI so a third
// party can use it). Context.Transfer starts a PUT or GET between a local
// Bulk and a remote handle (crt_bulk_transfer), completing through
// progress; TransferWait blocks with a context.Context; BulkTransfer.Abort
// cancels. The remote side is reached through the incoming RPC that
// carried the handle (BulkDesc.Via, as CaRT's bd_rpc), the handle's bound
// origin, or an Endpoint.
//
// Bytes are never copied by ferry on the way: a chunk leaves the
// registered slices by writev, and the messenger reads a chunk's data
// segment straight into the registered slices it is for (msgr.DataPlacer).
// The protocol is chosen by size, as libfabric's rxm does: up to
// BulkOptions.EagerLimit, one message; a PUT up to SegmentLimit is
// pushed in ChunkSize messages, each acknowledged (segmented); larger
// PUTs and all larger GETs are pulled by the receiver (rendezvous): it
// asks for spans of half its window and the holder answers each with
// chunk-sized messages, sent at low priority so that RPCs overtake the
// chunks still queued. Each transfer keeps at most Window bytes in
// flight, and a context at most ConnLimit per connection and
// ContextLimit in all, shared among its transfers in turn; a slow
// receiver therefore slows its senders and no side buffers more than
// these windows.
//
// RPC inputs and outputs larger than the eager limit become bulk
// transfers by themselves (Mercury's overflow): the sender registers the
// data as a read-only handle, the receiver pulls it before it runs the
// handler (input) or completes the request (output) and then releases
// it. A target holds at most OverflowLimit bytes of such inputs for
// requests it has not answered; beyond it requests wait, unpulled,
// connections taking turns (in arrival order within one), until their
// origin's deadline or twice the target's timeout.
//
// A transfer completes exactly once: with success, ErrCanceled (Abort),
// ErrTimedOut, ErrUnreachable (its connection failed), the holder's
// refusal (ErrNoPerm, ErrInvalid, ErrNotFound) or ErrShutdown. Once it
// has completed, nothing more lands in its local buffer.
//
// # Peers that misbehave
//
// A peer can only hurt its own requests and transfers. Whatever it
// sends is checked before anything is allocated or written, and a
// message that breaks the protocol (a header that does not decode, a
// reply to a request that went on another connection or a second reply,
// bulk data or an acknowledgement that is not the next span asked for)
// closes the connection it came on (msgr.Conn.Fault, with the reason;
// MalformedMessages counts them): what was outstanding on it fails with
// ErrUnreachable, and other connections and contexts go on. Bulk keys
// are drawn from a cryptographically seeded generator: a handle's key is
// the credential to its buffer (as in CaRT, a handle passed on to a third
// party works for it), so keys must not be guessable, and an overflowing
// output's handle is served only to the peer it answers. What peers
// make a target hold is bounded: IncomingLimit bytes of unanswered
// requests and OverflowLimit bytes of pulled inputs per context (the
// self-test's bulk sends included), and per connection 256 rendezvous
// PUTs pulled at once and IncomingLimit bytes of overflowing outputs not
// yet pulled; beyond these, requests are answered ErrBusy. A pull
// for a peer ends by the target's own timeout, whatever deadline the
// peer sets, and a pull of a reply's output ends with its request.
// Everything a peer makes an instance hold is charged to one account
// per connection (its unanswered requests, pulled and waiting inputs,
// unpulled outputs, rendezvous pulls, direct leases, transfers and
// bytes in flight), and released in one place when the connection
// fails or closes: its output handles are freed, its leases end, its
// transfers fail with ErrUnreachable and its requests waiting for
// overflow budget are answered at once.
//
// # Wire format
//
// A request is a message of type 0xFE00, a reply of type 0xFE01 (far
// above Ceph's types), whose header tid is the RPC id and whose front
// segment is a 40-byte little-endian RPC header (version, header length,
// opcode, flags, source and destination rank and tag, deadline, rc, group
// version; see rpc/internal/wire) followed by the encoded input or
// output, or by an error text in a reply with a non-zero rc. Raw buffers
// travel in the data segment. Bulk messages are of type 0xFE02: a 72-byte
// bulk header (operation, tags, rc, transfer id, handle key, offsets,
// length) in the front segment and the chunk in the data segment. The RPC messages are fast-dispatched, so
// they never wait in the messenger's dispatch queue.
//
// # Reuse
//
// Request objects (with their message, front buffer and completion
// channel) and the target's Incoming objects are pooled (the seed's
// crt_hg_pool of HG handles). A request's message is reused once every
// connection it was handed to has released it (msg.Message.Release). A
// reply reuses the request's message and, when it fits, its front buffer;
// a request's pooled body goes back to the messenger's pool after the
// reply unless the handler took its data segment. In steady state the
// package itself allocates nothing per RPC; what remains is the
// messenger's receive path.
//
// # Concurrency
//
// Every exported method is safe for concurrent use. Each context owns a
// timer goroutine and, with Auto, a progress goroutine; Close waits for
// them, completes what is left with ErrShutdown (running the callbacks)
// and answers queued incoming requests with CodeShutdown. Queues are
// bounded: the wait queues by the requests their callers submitted, the
// progress queue's incoming requests by 65536 (beyond it, CodeBusy).
package rpc

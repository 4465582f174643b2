package sim

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"io"
)

// Trace record kinds. They are part of the canonical trace encoding:
// append only.
const (
	recDeliver     uint8 = iota + 1 // a message handed to its destination's machine
	recDrop                         // a message lost (the reason follows)
	recMember                       // a membership event a rank's machine emitted
	recCrash                        // a rank crashed
	recPause                        // a rank was paused
	recResume                       // a paused rank resumed
	recSplit                        // a partition began
	recHeal                         // a partition ended
	recColl                         // a collective finished at its root
	recCollDeliver                  // a collective message delivered
	recCollDrop                     // a collective message lost
)

// Reasons a message is dropped, recorded in the trace: append only.
const (
	dropLoss       uint8 = iota + 1 // random loss
	dropPartition                   // sender and receiver on different sides
	dropCrashed                     // the receiver had crashed
	dropPauseFull                   // the receiver was paused and its buffer full
	dropSenderGone                  // the sender crashed before the message left
)

// traceFlush is the size at which the trace buffer is hashed and written.
const traceFlush = 64 << 10

// tracer accumulates the canonical encoding of every delivered and dropped
// message and every membership and fault event, hashes it with SHA-256 and
// optionally copies it to a writer. Records are little-endian:
//
//	deliver: kind u8, time i64 (ns), from u32, to u32, len u32, message bytes
//	drop:    kind u8, time i64, from u32, to u32, reason u8, len u32, bytes
//	member:  kind u8, time i64, observer u32, member u32, incarnation u64, state u8
//	fault:   kind u8, time i64, rank u32 (crash, pause, resume)
//	split, heal: kind u8, time i64, partition u32
//	coll:    kind u8, time i64, root u32, id u32, answered u32, failed u32
//	collective message: see (*tracer).collMsg
type tracer struct {
	h   hash.Hash
	w   io.Writer
	err error
	buf []byte
	n   uint64 // records
}

func newTracer(w io.Writer) *tracer {
	return &tracer{h: sha256.New(), w: w, buf: make([]byte, 0, traceFlush+4096)}
}

func (t *tracer) head(kind uint8, at int64, a uint32) {
	t.n++
	t.buf = append(t.buf, kind)
	t.buf = binary.LittleEndian.AppendUint64(t.buf, uint64(at))
	t.buf = binary.LittleEndian.AppendUint32(t.buf, a)
}

func (t *tracer) message(kind uint8, at int64, from, to uint32, reason uint8, b []byte) {
	t.head(kind, at, from)
	t.buf = binary.LittleEndian.AppendUint32(t.buf, to)
	if kind == recDrop {
		t.buf = append(t.buf, reason)
	}
	t.buf = binary.LittleEndian.AppendUint32(t.buf, uint32(len(b)))
	t.buf = append(t.buf, b...)
	t.maybeFlush()
}

func (t *tracer) member(at int64, observer, member uint32, inc uint64, state uint8) {
	t.head(recMember, at, observer)
	t.buf = binary.LittleEndian.AppendUint32(t.buf, member)
	t.buf = binary.LittleEndian.AppendUint64(t.buf, inc)
	t.buf = append(t.buf, state)
	t.maybeFlush()
}

func (t *tracer) fault(kind uint8, at int64, rank uint32) {
	t.head(kind, at, rank)
	t.maybeFlush()
}

func (t *tracer) coll(at int64, root, id, answered, failed uint32) {
	t.head(recColl, at, root)
	t.buf = binary.LittleEndian.AppendUint32(t.buf, id)
	t.buf = binary.LittleEndian.AppendUint32(t.buf, answered)
	t.buf = binary.LittleEndian.AppendUint32(t.buf, failed)
	t.maybeFlush()
}

func (t *tracer) maybeFlush() {
	if len(t.buf) >= traceFlush {
		t.flush()
	}
}

func (t *tracer) flush() {
	t.h.Write(t.buf)
	if t.w != nil && t.err == nil {
		_, t.err = t.w.Write(t.buf)
	}
	t.buf = t.buf[:0]
}

// sum flushes what is buffered and returns the hex SHA-256 of the trace.
func (t *tracer) sum() string {
	t.flush()
	return hex.EncodeToString(t.h.Sum(nil))
}

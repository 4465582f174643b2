package msgr

import (
	"errors"
	"io"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ferrymsg/ferry/metrics"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr/msgr2"
)

// The messenger's metrics (subsystem "msgr"). Names and labels are
// stable; units are in the names. Prometheus adds ferry_msgr_ and, to
// counters, _total; perf dump shows them as msgr.NAME.
//
//	messages_received{peer_type,msg_type}  messages delivered to the dispatchers
//	messages_sent{peer_type,msg_type}      messages taken for writing (each once; replays are resent_messages)
//	received_bytes{peer_type}              front, middle and data bytes of messages received
//	sent_bytes{peer_type}                  front, middle and data bytes of messages sent
//	frames_received                        msgr2 frames received (handshake, control and message frames)
//	frames_sent                            msgr2 frames sent after the handshake (messages, acks, keepalives)
//	resent_messages                        messages written again after a reconnect (lossless replay)
//	reconnects                             sessions resumed or re-established after a socket fault
//	faults{reason}                         sockets that failed, by reason (see faultReason)
//	throttle_waits                         received messages that did not get throttle budget at once
//	read_pauses                            times a connection was not read from for holding more than its share of the send budget
//	slow_consumer_closes                   connections closed with ErrSlowConsumer
//	busy_poll_hits                         socket reads that found bytes while polling (Config.BusyPoll) instead of sleeping
//	busy_poll_sleeps                       polls that found nothing for their whole length, after which the reader slept
//	keepalive_rtt_seconds                  round trip of KEEPALIVE2 and its ack (histogram)
//	connections                            connections the messenger holds (gauge)
//	out_queue_bytes                        payload bytes queued to send on all connections (gauge)
//
// msg_type is the message type number ("2" for MPing); types from
// maxTypeLabel up share the label "other". Nothing is labelled by
// connection: a connection keeps no metrics words of its own.
type msgrMetrics struct {
	rows          [len(peerTypes) + 1]peerRow
	framesIn      *metrics.Counter
	framesOut     *metrics.Counter
	resent        *metrics.Counter
	reconnects    *metrics.Counter
	faults        metrics.CounterVec
	throttleWaits *metrics.Counter
	readPauses    *metrics.Counter
	slowClosed    *metrics.Counter
	pollHits      *metrics.Counter
	pollSleeps    *metrics.Counter
	keepaliveRTT  *metrics.Histogram
}

// maxTypeLabel bounds the message types labelled by number.
const maxTypeLabel = 256

// peerTypes are the peer types labelled by name; others are "other".
var peerTypes = [...]msg.EntityType{msg.EntityMon, msg.EntityMDS, msg.EntityOSD, msg.EntityClient, msg.EntityMgr, msg.EntityAuth}

// peerRow holds one peer type's counters, the message-type children
// made on first use.
type peerRow struct {
	peer                 string
	recvVec, sentVec     metrics.CounterVec
	recvBytes, sentBytes *metrics.Counter
	recv, sent           typeSlots
}

// typeSlots holds the children of one peer type's message counter by
// message type: the first type seen inline (a messenger mostly exchanges
// one or a few types with a given peer type), the others in a table of
// maxTypeLabel+1 slots (the last one "other") of two levels, each
// allocated on first use. A flat table was 29 KiB per messenger, most of
// the live heap of a client messenger.
type typeSlots struct {
	first  atomic.Uint32 // index+1 of the type in firstC; 0 until set
	firstC atomic.Pointer[metrics.Counter]
	top    atomic.Pointer[[typeChunks]atomic.Pointer[typeChunk]]
}

// typeChunkLen is the number of message types one chunk holds.
const typeChunkLen = 16

// typeChunks is the number of chunks of one peer type and direction.
const typeChunks = (maxTypeLabel + typeChunkLen) / typeChunkLen

type typeChunk [typeChunkLen]atomic.Pointer[metrics.Counter]

// slot returns the table's slot of type index i (at most maxTypeLabel),
// making its levels if need be.
func (s *typeSlots) slot(i int) *atomic.Pointer[metrics.Counter] {
	top := s.top.Load()
	if top == nil {
		top = new([typeChunks]atomic.Pointer[typeChunk])
		if !s.top.CompareAndSwap(nil, top) {
			top = s.top.Load()
		}
	}
	ch := top[i/typeChunkLen].Load()
	if ch == nil {
		ch = new(typeChunk)
		if !top[i/typeChunkLen].CompareAndSwap(nil, ch) {
			ch = top[i/typeChunkLen].Load()
		}
	}
	return &ch[i%typeChunkLen]
}

// typeCounter returns the child of vec for the message type, made once.
func (r *peerRow) typeCounter(slots *typeSlots, vec metrics.CounterVec, t uint16) *metrics.Counter {
	i := min(int(t), maxTypeLabel)
	if slots.first.Load() == uint32(i)+1 {
		return slots.firstC.Load()
	}
	if slots.first.Load() == 0 {
		// The first type: claimed by one caller, which publishes the
		// counter before the type; a caller losing the race takes the
		// table like any later type.
		if slots.first.CompareAndSwap(0, 1<<31) {
			c := r.child(vec, i)
			slots.firstC.Store(c)
			slots.first.Store(uint32(i) + 1)
			return c
		}
	}
	slot := slots.slot(i)
	if c := slot.Load(); c != nil {
		return c
	}
	c := r.child(vec, i)
	slot.Store(c)
	return c
}

// child returns vec's child for the peer type and type index i.
func (r *peerRow) child(vec metrics.CounterVec, i int) *metrics.Counter {
	label := "other"
	if i < maxTypeLabel {
		label = strconv.Itoa(i)
	}
	return vec.With(r.peer, label)
}

func newMsgrMetrics(r *metrics.Registry, m *Messenger) *msgrMetrics {
	d := func(name, help string, labels ...string) metrics.Desc {
		return metrics.Desc{Subsystem: "msgr", Name: name, Help: help, Labels: labels}
	}
	recv := r.CounterVec(d("messages_received", "Messages received and delivered to the dispatchers.", "peer_type", "msg_type"))
	sent := r.CounterVec(d("messages_sent", "Messages taken for writing to their connection, each counted once.", "peer_type", "msg_type"))
	rb := r.CounterVec(d("received_bytes", "Front, middle and data bytes of the messages received.", "peer_type"))
	sb := r.CounterVec(d("sent_bytes", "Front, middle and data bytes of the messages sent.", "peer_type"))
	mm := &msgrMetrics{
		framesIn:      r.Counter(d("frames_received", "msgr2 frames received, control frames and messages.")),
		framesOut:     r.Counter(d("frames_sent", "msgr2 frames sent after the handshake: messages, acks and keepalives.")),
		resent:        r.Counter(d("resent_messages", "Messages written again after a reconnect (lossless replay).")),
		reconnects:    r.Counter(d("reconnects", "Sessions resumed or re-established after a socket fault.")),
		faults:        r.CounterVec(d("faults", "Sockets that failed, by reason.", "reason")),
		throttleWaits: r.Counter(d("throttle_waits", "Received messages that waited for throttle budget before their body was read.")),
		readPauses:    r.Counter(d("read_pauses", "Times a connection was not read from because it held more than its share of the send budget.")),
		slowClosed:    r.Counter(d("slow_consumer_closes", "Connections closed (ErrSlowConsumer) because nothing they had queued was written for SlowConsumerTimeout: their peer read nothing.")),
		pollHits:      r.Counter(d("busy_poll_hits", "Socket reads that found bytes while busy polling (Config.BusyPoll) instead of sleeping.")),
		pollSleeps:    r.Counter(d("busy_poll_sleeps", "Busy polls that found nothing for their whole length, after which the reader slept.")),
		keepaliveRTT:  r.Histogram(d("keepalive_rtt_seconds", "Round trip of a KEEPALIVE2 and its ack, in seconds.")),
	}
	for i := range mm.rows {
		name := "other"
		if i < len(peerTypes) {
			name = peerTypes[i].String()
		}
		row := &mm.rows[i]
		row.peer, row.recvVec, row.sentVec = name, recv, sent
		row.recvBytes, row.sentBytes = rb.With(name), sb.With(name)
	}
	r.GaugeFunc(d("connections", "Connections the messenger holds."), func() float64 {
		m.mu.Lock()
		defer m.mu.Unlock()
		return float64(len(m.conns))
	})
	r.GaugeFunc(d("out_queue_bytes", "Payload bytes queued to send on all connections, in bytes."), func() float64 {
		var n int
		for _, c := range m.Conns() {
			c.mu.Lock()
			n += c.outq.bytes
			c.mu.Unlock()
		}
		return float64(n)
	})
	return mm
}

func (mm *msgrMetrics) row(t msg.EntityType) *peerRow {
	for i, p := range peerTypes {
		if p == t {
			return &mm.rows[i]
		}
	}
	return &mm.rows[len(peerTypes)]
}

// The update methods do nothing on a nil *msgrMetrics (Config.NoMetrics).

// received counts a message delivered from a peer of type peer.
func (mm *msgrMetrics) received(peer msg.EntityType, m *msg.Message) {
	if mm == nil {
		return
	}
	r := mm.row(peer)
	r.typeCounter(&r.recv, r.recvVec, m.Header.Type).Inc()
	r.recvBytes.Add(uint64(m.Len()))
}

// sent counts a message taken for writing to a peer of type peer.
func (mm *msgrMetrics) sent(peer msg.EntityType, m *msg.Message) {
	if mm == nil {
		return
	}
	r := mm.row(peer)
	r.typeCounter(&r.sent, r.sentVec, m.Header.Type).Inc()
	r.sentBytes.Add(uint64(m.Len()))
}

// fault counts a failed socket by reason.
func (mm *msgrMetrics) fault(err error) {
	if mm != nil {
		mm.faults.With(faultReason(err)).Inc()
	}
}

// framesReceived counts n frames received.
func (mm *msgrMetrics) framesReceived(n uint64) {
	if mm != nil {
		mm.framesIn.Add(n)
	}
}

// framesSent counts a batch's frames: its messages and the control
// frames written with them.
func (mm *msgrMetrics) framesSent(msgs int, ka, kaAck, ack bool) {
	if mm == nil {
		return
	}
	n := uint64(msgs)
	for _, b := range [...]bool{ka, kaAck, ack} {
		if b {
			n++
		}
	}
	mm.framesOut.Add(n)
}

// resentAdd counts n messages replayed after a reconnect.
func (mm *msgrMetrics) resentAdd(n int) {
	if mm != nil {
		mm.resent.Add(uint64(n))
	}
}

// reconnect counts a session resumed or re-established.
func (mm *msgrMetrics) reconnect() {
	if mm != nil {
		mm.reconnects.Inc()
	}
}

// throttleWait counts a received message that did not get its throttle
// budget at once.
func (mm *msgrMetrics) throttleWait() {
	if mm != nil {
		mm.throttleWaits.Inc()
	}
}

// readPause counts a connection not read from for its send queue.
func (mm *msgrMetrics) readPause() {
	if mm != nil {
		mm.readPauses.Inc()
	}
}

// busyPollHit counts a busy poll that found bytes.
func (mm *msgrMetrics) busyPollHit() {
	if mm != nil {
		mm.pollHits.Inc()
	}
}

// busyPollSleep counts a busy poll that ended empty.
func (mm *msgrMetrics) busyPollSleep() {
	if mm != nil {
		mm.pollSleeps.Inc()
	}
}

// slowConsumer counts a connection closed with ErrSlowConsumer.
func (mm *msgrMetrics) slowConsumer() {
	if mm != nil {
		mm.slowClosed.Inc()
	}
}

// faultReason names why a socket failed, for the faults counter: a
// small fixed set.
func faultReason(err error) string {
	var pe *msgr2.Error
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, io.EOF):
		return "peer_closed"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, ErrPeerFault):
		return "peer_fault"
	case errors.Is(err, ErrKeepaliveTimeout):
		return "keepalive_timeout"
	case errors.Is(err, ErrInjectedFailure):
		return "injected"
	case errors.Is(err, ErrMarkedDown):
		return "marked_down"
	case errors.Is(err, ErrSlowConsumer):
		return "slow_consumer"
	case errors.As(err, &pe):
		return "protocol"
	}
	return "io"
}

// keepaliveAcked records the round trip of a keepalive sent at sent.
func (mm *msgrMetrics) keepaliveAcked(sent time.Time, now time.Time) {
	if mm == nil {
		return
	}
	if d := now.Sub(sent); d >= 0 && !sent.IsZero() {
		mm.keepaliveRTT.Observe(d)
	}
}

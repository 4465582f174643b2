package rpc

import (
	"fmt"
	"strings"
	"time"

	"github.com/ferrymsg/ferry/metrics"
	"github.com/ferrymsg/ferry/rpc/internal/track"
)

// The rpc layer's metrics (subsystems "rpc" and "bulk"), in the registry
// of the instance's messenger (msgr.Messenger.Metrics), so a process
// exports its messenger's and its ranks' metrics together. Prometheus
// adds ferry_ and, to counters, _total; perf dump shows SUBSYSTEM.NAME.
//
// Per opcode, updated on the request path (two atomic adds and a clock
// read per RPC; errors take a lock to find their code's counter):
//
//	rpc.requests_completed{opcode}        requests this origin completed (any outcome)
//	rpc.request_errors{opcode,code}       of which failed, by code (below)
//	rpc.request_latency_seconds{opcode}   submit to completion (histogram)
//
// The code label is the Code's text in snake case: timed_out,
// target_unreachable, unregistered_opcode, canceled, no_reply,
// handler_error, malformed_payload, bad_target, payload_too_large,
// rank_excluded_from_group, shut_down, not_found, target_busy,
// permission_denied, invalid_argument, wrong_rank,
// group_version_mismatch, and other for a code ferry does not know
// (TestCodeLabelsDocumented keeps this list whole).
//
// Summed over the instance's contexts when read (Stats, BulkStats):
//
//	rpc.requests_submitted, rpc.requests_queued_for_credits, rpc.requests_timed_out,
//	rpc.requests_in_flight (gauge), rpc.requests_waiting_for_credits (gauge),
//	rpc.late_replies, rpc.requests_received, rpc.replies_sent, rpc.error_replies_sent,
//	rpc.busy_refusals, rpc.held_bytes (gauge), rpc.malformed_messages,
//	bulk.transfers_completed, bulk.transfers_failed, bulk.transferred_bytes,
//	bulk.eager_transfers, bulk.segmented_transfers, bulk.rendezvous_transfers,
//	bulk.direct_transfers, bulk.active_transfers (gauge), bulk.in_flight_bytes (gauge),
//	bulk.window_waiting_transfers (gauge), bulk.overflow_held_bytes (gauge),
//	bulk.overflow_waiting_requests (gauge)
//
// From the peer accounts (peer.go), over all of the instance's peers:
//
//	rpc.peer_accounts (gauge), rpc.peer_unpulled_output_bytes (gauge),
//	rpc.peer_rendezvous_pulls (gauge), rpc.peer_direct_leases (gauge),
//	rpc.peer_transfers (gauge), rpc.peer_owed_bytes (gauge),
//	rpc.peer_budget_refusals (counter)
//
// opcode is the opcode in hex ("0x01000002"); opcodes this instance has
// not registered share "unregistered".
type rpcMetrics struct {
	completed metrics.CounterVec
	errors    metrics.CounterVec
	latency   metrics.HistogramVec
	other     *opMetrics
}

// opMetrics are one opcode's metrics, found once per registration.
type opMetrics struct {
	label     string
	completed *metrics.Counter
	latency   *metrics.Histogram
	errors    metrics.CounterVec
}

func newRPCMetrics(reg *metrics.Registry, in *Instance) *rpcMetrics {
	d := func(sub, name, help string, labels ...string) metrics.Desc {
		return metrics.Desc{Subsystem: sub, Name: name, Help: help, Labels: labels}
	}
	rm := &rpcMetrics{
		completed: reg.CounterVec(d("rpc", "requests_completed", "Requests this origin completed, whatever the outcome.", "opcode")),
		errors:    reg.CounterVec(d("rpc", "request_errors", "Requests this origin completed with an error, by code.", "opcode", "code")),
		latency:   reg.HistogramVec(d("rpc", "request_latency_seconds", "Time from submitting a request to its completion, in seconds.", "opcode")),
	}
	rm.other = rm.op("unregistered")
	stat := func(f func(*Stats) float64) func() float64 {
		return func() float64 {
			var v float64
			for _, c := range in.contexts() {
				s := c.Stats()
				v += f(&s)
			}
			return v
		}
	}
	held := func(k charge) func() float64 {
		return func() float64 { return float64(in.charged[k].Load()) }
	}
	bulk := func(f func(*BulkStats) float64) func() float64 {
		return func() float64 {
			var v float64
			for _, c := range in.contexts() {
				s := c.BulkStats()
				v += f(&s)
			}
			return v
		}
	}
	for _, m := range []struct {
		counter   bool
		sub, name string
		help      string
		fn        func() float64
	}{
		{true, "rpc", "requests_submitted", "Requests submitted.", stat(func(s *Stats) float64 { return float64(s.Submitted) })},
		{true, "rpc", "requests_queued_for_credits", "Requests that waited for a credit of their target.", stat(func(s *Stats) float64 { return float64(s.Queued) })},
		{true, "rpc", "requests_timed_out", "Requests completed by their timeout.", stat(func(s *Stats) float64 { return float64(s.TimedOut) })},
		{false, "rpc", "requests_in_flight", "Requests holding a credit now.", stat(func(s *Stats) float64 { return float64(s.InFlight) })},
		{false, "rpc", "requests_waiting_for_credits", "Requests waiting for a credit now.", stat(func(s *Stats) float64 { return float64(s.Waiting) })},
		{true, "rpc", "late_replies", "Replies that came after their request completed.", stat(func(s *Stats) float64 { return float64(s.LateReplies) })},
		{true, "rpc", "requests_received", "Requests handed to a handler (target side).", stat(func(s *Stats) float64 { return float64(s.Received) })},
		{true, "rpc", "replies_sent", "Replies sent, errors included (target side).", stat(func(s *Stats) float64 { return float64(s.Replies) })},
		{true, "rpc", "error_replies_sent", "Error replies sent (target side).", stat(func(s *Stats) float64 { return float64(s.Errors) })},
		{true, "rpc", "busy_refusals", "Requests refused because the progress queue or IncomingLimit was full.", stat(func(s *Stats) float64 { return float64(s.Busy) })},
		{false, "rpc", "held_bytes", "Bytes of requests received and not answered yet, in bytes.", stat(func(s *Stats) float64 { return float64(s.Held) })},
		{true, "rpc", "malformed_messages", "Messages that broke the protocol; their connections were closed.", func() float64 { return float64(in.MalformedMessages()) }},
		{true, "bulk", "transfers_completed", "Bulk transfers that succeeded.", bulk(func(s *BulkStats) float64 { return float64(s.Completed) })},
		{true, "bulk", "transfers_failed", "Bulk transfers that failed or were aborted.", bulk(func(s *BulkStats) float64 { return float64(s.Failed) })},
		{true, "bulk", "transferred_bytes", "Bytes moved by bulk transfers, in bytes.", bulk(func(s *BulkStats) float64 { return float64(s.Bytes) })},
		{true, "bulk", "eager_transfers", "Bulk transfers started as one eager message.", bulk(func(s *BulkStats) float64 { return float64(s.Eager) })},
		{true, "bulk", "segmented_transfers", "Bulk transfers started as chunks pushed within the window.", bulk(func(s *BulkStats) float64 { return float64(s.Segmented) })},
		{true, "bulk", "rendezvous_transfers", "Bulk transfers started as chunks the receiver pulls.", bulk(func(s *BulkStats) float64 { return float64(s.Rendezvous) })},
		{true, "bulk", "direct_transfers", "Bulk transfers done by the direct path (process_vm_readv/writev).", bulk(func(s *BulkStats) float64 { return float64(s.Direct) })},
		{false, "bulk", "active_transfers", "Bulk transfers in progress.", bulk(func(s *BulkStats) float64 { return float64(s.Active) })},
		{false, "bulk", "in_flight_bytes", "Bytes requested or sent and not yet landed, in bytes.", bulk(func(s *BulkStats) float64 { return float64(s.InFlight) })},
		{false, "bulk", "window_waiting_transfers", "Transfers waiting for a shared window.", bulk(func(s *BulkStats) float64 { return float64(s.Parked) })},
		{false, "bulk", "overflow_held_bytes", "Bytes of pulled inputs held for requests not yet answered, in bytes.", bulk(func(s *BulkStats) float64 { return float64(s.OverflowHeld) })},
		{false, "bulk", "overflow_waiting_requests", "Requests whose inputs wait for overflow budget.", bulk(func(s *BulkStats) float64 { return float64(s.OverflowWaiting) })},
		{false, "rpc", "peer_accounts", "Peer connections with an account (something charged to them since they opened).", func() float64 { return float64(in.nPeers.Load()) }},
		{false, "rpc", "peer_unpulled_output_bytes", "Bytes of overflowing outputs peers have not pulled or released, in bytes.", held(chOutputs)},
		{false, "rpc", "peer_rendezvous_pulls", "Rendezvous PUTs being pulled for peers.", held(chPulls)},
		{false, "rpc", "peer_direct_leases", "Ranges of registered memory peers may touch directly.", held(chLeases)},
		{false, "rpc", "peer_transfers", "Bulk transfers running on peer connections, either side.", held(chXfers)},
		{false, "rpc", "peer_owed_bytes", "Bytes the instance owes its peers (requests not answered, outputs not pulled), against Options.PeerBudget, in bytes.", func() float64 { return float64(in.owed.Load()) }},
		{true, "rpc", "peer_budget_refusals", "Requests and outputs refused (CodeBusy) because the instance owed its peers its PeerBudget, or the peer its share.", func() float64 { return float64(in.budgetRefusals.Load()) }},
	} {
		if m.counter {
			reg.CounterFunc(d(m.sub, m.name, m.help), m.fn)
		} else {
			reg.GaugeFunc(d(m.sub, m.name, m.help), m.fn)
		}
	}
	return rm
}

// op returns the metrics of the opcode labelled label.
func (rm *rpcMetrics) op(label string) *opMetrics {
	return &opMetrics{label: label, completed: rm.completed.With(label), latency: rm.latency.With(label), errors: rm.errors}
}

// opcodeLabel is an opcode's label value.
func opcodeLabel(op Opcode) string { return fmt.Sprintf("%#08x", uint32(op)) }

// done records a request's completion at now (monotonic ns since the
// instance's epoch).
func (om *opMetrics) done(r *request, now int64) {
	if om == nil {
		return
	}
	om.completed.Inc()
	if r.start != 0 && now > r.start {
		om.latency.Observe(time.Duration(now - r.start))
	}
	if c := r.code(); c != CodeOK {
		om.errors.With(om.label, codeLabel(c)).Inc()
	}
}

// code is the code r completed with (what result returns as an Error).
func (r *request) code() Code {
	switch r.reason {
	case track.OK:
		if r.oneWay {
			return CodeOK
		}
		return Code(r.rc)
	case track.TimedOut:
		return CodeTimedOut
	case track.Canceled:
		return CodeCanceled
	case track.Excluded:
		return CodeExcluded
	case track.Shutdown:
		return CodeShutdown
	}
	if e, ok := r.failErr.(*Error); ok {
		return e.Code
	}
	return CodeUnreachable
}

// codeLabel names a code for the errors label: its text in snake case
// for the codes ferry knows, "other" for the rest (peers' codes are
// used as sent, so their range is not bounded).
func codeLabel(c Code) string {
	if c.Err() == nil {
		return "other"
	}
	return strings.ReplaceAll(c.String(), " ", "_")
}

// Metrics returns the registry holding the instance's metrics: its
// messenger's (msgr.Messenger.Metrics), with the rpc and bulk families
// beside the messenger's.
func (in *Instance) Metrics() *metrics.Registry { return in.m.Metrics() }

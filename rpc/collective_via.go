package rpc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ferrymsg/ferry/coll"
)

// OpCollectiveRoot asks a rank to root a collective for the origin
// (BroadcastVia): its input is the CollectiveDesc (opcode, topology,
// timeout, ranks, excluded ranks) in the front segment and the
// collective's input in the data segment; its output is the result (id,
// group version, the ranks that answered, then a coll.Report with the
// failures and the aggregate). Wire constant.
var OpCollectiveRoot = MakeOpcode(BaseCollective, 0, 1)

// viaMargin is how much longer than the collective an origin waits for
// the rank it asked to root it.
const viaMargin = 2 * time.Second

// BroadcastVia asks rank root to run the collective d (as its own
// Broadcast) and returns its result, so that a client, which cannot root
// a collective, can run one (as `ferry group stat` does). The request
// waits for the collective's timeout (d.Timeout, else this context's)
// plus two seconds. An error means the collective did not run at root
// (unreachable, not a member, the collective not registered there...):
// try another rank. Ranks that failed are in the result; their errors
// carry no local cause.
func (c *Context) BroadcastVia(ctx context.Context, root uint32, d CollectiveDesc) (*CollectiveResult, error) {
	payload, err := encodeFlat(d.Input)
	if err != nil {
		return nil, &Error{Code: CodeMalformed, Opcode: d.Opcode, Msg: "encoding collective input", Err: err}
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = c.Timeout()
	}
	timeout = min(timeout, MaxTimeout-viaMargin)
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl)-viaMargin/4)
	}
	if timeout <= 0 {
		return nil, &Error{Code: CodeTimedOut, Opcode: OpCollectiveRoot, Endpoint: Endpoint{Rank: root, Tag: c.tag}, Err: context.DeadlineExceeded}
	}
	d.Timeout = timeout
	in := &viaIn{d: d, payload: payload}
	out := &viaOut{}
	cctx, cancel := context.WithTimeout(ctx, timeout+viaMargin)
	defer cancel()
	if err := c.Call(cctx, Endpoint{Rank: root, Tag: c.tag}, OpCollectiveRoot, in, out); err != nil {
		return nil, err
	}
	res := &out.res
	for i := range res.Failed {
		f := &res.Failed[i]
		f.Err = failureErr(d.Opcode, c.tag, coll.Failure{Rank: f.Rank, Reason: f.Reason, Via: f.Via, Detail: f.Detail}, nil)
	}
	return res, nil
}

// handleCollectiveRoot roots a collective for another instance.
func (in *Instance) handleCollectiveRoot(r *Incoming) error {
	var q viaIn
	if err := r.Decode(&q); err != nil {
		return err
	}
	c := r.Target()
	go func() {
		ctx, cancel := r.Context(context.Background())
		defer cancel()
		res, err := c.Broadcast(ctx, q.d)
		if res == nil {
			if err == nil {
				err = errors.New("no result")
			}
			r.Fail(err)
			return
		}
		r.Reply(&viaOut{res: *res})
	}()
	return nil
}

// viaIn is OpCollectiveRoot's input:
//
//	4 opcode, 4 topology, 8 timeout (ns), 1 flags (1: Ranks given),
//	4 n, 4n ranks, 4 m, 4m excluded ranks; the input in the data segment.
type viaIn struct {
	d       CollectiveDesc
	payload []byte
}

func (q *viaIn) AppendBinary(b []byte) ([]byte, error) {
	b = binary.LittleEndian.AppendUint32(b, uint32(q.d.Opcode))
	b = binary.LittleEndian.AppendUint32(b, uint32(q.d.Topology))
	b = binary.LittleEndian.AppendUint64(b, uint64(q.d.Timeout))
	var flags byte
	if q.d.Ranks != nil {
		flags |= 1
	}
	b = append(b, flags)
	b = appendRanks(b, q.d.Ranks)
	return appendRanks(b, q.d.Excluded), nil
}

func (q *viaIn) AppendData(bufs [][]byte) [][]byte {
	if len(q.payload) == 0 {
		return bufs
	}
	return append(bufs, q.payload)
}

func (q *viaIn) UnmarshalBinary(b []byte) error {
	if len(b) < 17 {
		return fmt.Errorf("collective request of %d bytes", len(b))
	}
	q.d.Opcode = Opcode(binary.LittleEndian.Uint32(b))
	q.d.Topology = coll.Topology(binary.LittleEndian.Uint32(b[4:]))
	q.d.Timeout = time.Duration(binary.LittleEndian.Uint64(b[8:]))
	flags := b[16]
	if flags&^1 != 0 {
		return fmt.Errorf("collective request flags %#x", flags)
	}
	if q.d.Timeout <= 0 || q.d.Timeout > MaxTimeout {
		return fmt.Errorf("collective timeout %v", q.d.Timeout)
	}
	rest := b[17:]
	var err error
	if q.d.Ranks, rest, err = decodeRanks(rest); err != nil {
		return err
	}
	switch {
	case flags&1 != 0 && q.d.Ranks == nil:
		q.d.Ranks = []uint32{}
	case flags&1 == 0 && q.d.Ranks != nil:
		return errors.New("collective request lists ranks without the flag that it does")
	}
	if q.d.Excluded, rest, err = decodeRanks(rest); err != nil {
		return err
	}
	if len(rest) != 0 {
		return fmt.Errorf("%d bytes after a collective request", len(rest))
	}
	return nil
}

func (q *viaIn) ReceiveData(data [][]byte) error {
	for _, d := range data {
		q.payload = append(q.payload, d...)
	}
	q.d.Input = Bytes(q.payload)
	return nil
}

func appendRanks(b []byte, rs []uint32) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(rs)))
	for _, r := range rs {
		b = binary.LittleEndian.AppendUint32(b, r)
	}
	return b
}

// decodeRanks decodes a count and that many ranks, checking the count
// against coll.MaxRanks and the input's length before allocating.
func decodeRanks(b []byte) ([]uint32, []byte, error) {
	if len(b) < 4 {
		return nil, nil, errors.New("truncated rank list")
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if n > coll.MaxRanks || uint64(len(b)) < 4*uint64(n) {
		return nil, nil, fmt.Errorf("rank list of %d in %d bytes", n, len(b))
	}
	if n == 0 {
		return nil, b, nil
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out, b[4*n:], nil
}

// viaOut is OpCollectiveRoot's output:
//
//	8 id, 4 group version, 4 n, 4n answered ranks (ascending), then a
//	coll.Report (failures and aggregate).
type viaOut struct {
	res CollectiveResult
}

func (o *viaOut) AppendBinary(b []byte) ([]byte, error) {
	b = binary.LittleEndian.AppendUint64(b, o.res.ID)
	b = binary.LittleEndian.AppendUint32(b, o.res.GroupVersion)
	b = appendRanks(b, o.res.Answered)
	rep := coll.Report[[]byte]{Value: o.res.Aggregate, HasValue: o.res.HasAggregate}
	for _, f := range o.res.Failed {
		rep.Failed = append(rep.Failed, coll.Failure{Rank: f.Rank, Reason: f.Reason, Via: f.Via, Detail: f.Detail})
	}
	return coll.AppendReport(b, rep), nil
}

func (o *viaOut) UnmarshalBinary(b []byte) error {
	if len(b) < 12 {
		return fmt.Errorf("collective result of %d bytes", len(b))
	}
	o.res = CollectiveResult{ID: binary.LittleEndian.Uint64(b), GroupVersion: binary.LittleEndian.Uint32(b[8:])}
	ans, rest, err := decodeRanks(b[12:])
	if err != nil {
		return err
	}
	if !slices.IsSorted(ans) {
		return errors.New("answered ranks not ascending")
	}
	rep, err := coll.DecodeReport(rest)
	if err != nil {
		return err
	}
	o.res.Answered = ans
	if rep.HasValue {
		o.res.Aggregate, o.res.HasAggregate = slices.Clone(rep.Value), true
		if o.res.Aggregate == nil {
			o.res.Aggregate = []byte{}
		}
	}
	o.res.Failed = make([]RankFailure, len(rep.Failed))
	for i, f := range rep.Failed {
		o.res.Failed[i] = RankFailure{Rank: f.Rank, Reason: f.Reason, Via: f.Via, Detail: f.Detail}
	}
	return nil
}

package msgr2

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ferrymsg/ferry/msg"
)

// readyEngine returns an engine past its handshake, as the messenger has
// it when messages flow.
func readyEngine(rev1 bool, inSeq uint64) *Engine {
	e := NewEngine(serverConfig())
	e.state = stReady
	e.rev1 = rev1
	e.peer.Rev1 = rev1
	e.peer.Name = msg.EntityName{Type: msg.EntityClient, Num: 4100}
	e.inSeq = inSeq
	return e
}

// wireMessage encodes a whole MESSAGE frame.
func wireMessage(rev1 bool, h Header2, front, middle, data []byte) []byte {
	mf := MessageFrame{Header: h}
	if len(front) > 0 {
		mf.Front = msg.Buffers{front}
	}
	if len(middle) > 0 {
		mf.Middle = msg.Buffers{middle}
	}
	if len(data) > 0 {
		mf.Data = msg.Buffers{data}
	}
	b := mf.AppendHead(nil, rev1)
	b = append(b, data...)
	return mf.AppendTail(b, rev1)
}

// cutData splits d into buffers at the given offsets (taken modulo the
// length, sorted by use), copying, so the result never aliases d.
func cutData(d []byte, cuts []int) [][]byte {
	var out [][]byte
	rest := bytes.Clone(d)
	for _, c := range cuts {
		if len(rest) == 0 {
			break
		}
		n := c % (len(rest) + 1)
		out = append(out, rest[:n:n])
		rest = rest[n:]
	}
	return append(out, rest)
}

type splitResult struct {
	evs    []Event
	err    error
	dup    bool // PeekMessage said Dup
	atPeek bool // the error came from PeekMessage
}

// feedWhole feeds the frame with Feed.
func feedWhole(t *testing.T, e *Engine, wire []byte) splitResult {
	t.Helper()
	if _, err := e.Feed(wire[:PreambleLen]); err != nil {
		return splitResult{err: err}
	}
	n, retain := e.Need()
	if !retain || len(wire) != PreambleLen+n {
		t.Fatalf("need %d (retain %v) for a %d-byte frame", n, retain, len(wire))
	}
	evs, err := e.Feed(bytes.Clone(wire[PreambleLen:]))
	return splitResult{evs: append([]Event(nil), evs...), err: err}
}

// feedSplit feeds the frame with PeekMessage and FeedSplit, the data
// cut into buffers at cuts.
func feedSplit(t *testing.T, e *Engine, wire []byte, cuts []int) (splitResult, [][]byte) {
	t.Helper()
	return feedParts(t, e, wire, cuts, false, false)
}

// feedAhead feeds the frame as a reader that computes the data's CRC as
// it reads: with FeedSplitCRC (data cut at cuts) or, if whole, with
// FeedBodyCRC (one body buffer). The CRC is computed piece by piece with
// UpdateSegmentCRC over what was received, corruption included.
func feedAhead(t *testing.T, e *Engine, wire []byte, cuts []int, whole bool) (splitResult, [][]byte) {
	t.Helper()
	return feedParts(t, e, wire, cuts, true, whole)
}

// feedParts is feedSplit (ahead false) and feedAhead.
func feedParts(t *testing.T, e *Engine, wire []byte, cuts []int, ahead, whole bool) (splitResult, [][]byte) {
	t.Helper()
	if _, err := e.Feed(wire[:PreambleLen]); err != nil {
		return splitResult{err: err}, nil
	}
	sp, ok := e.Split()
	if !ok {
		t.Fatal("Split not ok for a MESSAGE with data")
	}
	n, _ := e.Need()
	if sp.Head+sp.Data+sp.Tail != n || len(wire) != PreambleLen+n {
		t.Fatalf("split %+v for a body of %d bytes", sp, n)
	}
	body := bytes.Clone(wire[PreambleLen:])
	head, data, tail := body[:sp.Head], body[sp.Head:sp.Head+sp.Data], body[sp.Head+sp.Data:]
	bufs := cutData(data, cuts)
	crc := SegmentCRCInit
	for _, b := range bufs {
		crc = UpdateSegmentCRC(crc, b)
	}
	if whole {
		evs, err := e.FeedBodyCRC(body, crc)
		r := splitResult{evs: append([]Event(nil), evs...), err: err}
		for _, ev := range evs {
			r.dup = r.dup || ev.Kind == EvMessage && ev.Dropped // no peek to compare with
		}
		return r, [][]byte{data}
	}
	pk, err := e.PeekMessage(head)
	if err != nil {
		if e.Err() == nil {
			t.Fatal("PeekMessage failed but the engine is not closed")
		}
		return splitResult{err: err, atPeek: true}, nil
	}
	var evs []Event
	if ahead {
		evs, err = e.FeedSplitCRC(head, bufs, tail, crc)
	} else {
		evs, err = e.FeedSplit(head, bufs, tail)
	}
	return splitResult{evs: append([]Event(nil), evs...), err: err, dup: pk.Dup}, bufs
}

// sameResult checks that the split path produced what Feed did.
func sameResult(t *testing.T, whole, split splitResult, bufs [][]byte) {
	t.Helper()
	if (whole.err == nil) != (split.err == nil) {
		t.Fatalf("Feed error %v, split error %v", whole.err, split.err)
	}
	if whole.err != nil {
		if whole.err.Error() != split.err.Error() {
			t.Fatalf("Feed error %q, split error %q", whole.err, split.err)
		}
		checkTyped(t, split.err)
		return
	}
	if len(whole.evs) != len(split.evs) {
		t.Fatalf("Feed events %v, split events %v", kinds(whole.evs), kinds(split.evs))
	}
	for i := range whole.evs {
		w, s := whole.evs[i], split.evs[i]
		if w.Kind != s.Kind || w.Seq != s.Seq || w.Dropped != s.Dropped || w.Skipped != s.Skipped || (w.Msg == nil) != (s.Msg == nil) {
			t.Fatalf("event %d: Feed %+v, split %+v", i, w, s)
		}
		if w.Msg == nil {
			continue
		}
		wm, sm := w.Msg, s.Msg
		if wm.Header != sm.Header || wm.Footer != sm.Footer {
			t.Fatalf("header %+v footer %+v, want %+v %+v", sm.Header, sm.Footer, wm.Header, wm.Footer)
		}
		if !bytes.Equal(wm.Front.Bytes(), sm.Front.Bytes()) || !bytes.Equal(wm.Middle.Bytes(), sm.Middle.Bytes()) ||
			len(wm.Front) != len(sm.Front) || len(wm.Middle) != len(sm.Middle) {
			t.Fatalf("front/middle differ")
		}
		if !bytes.Equal(wm.Data.Bytes(), sm.Data.Bytes()) {
			t.Fatalf("data differs")
		}
		// The data is the caller's buffers themselves.
		if len(sm.Data) != len(bufs) {
			t.Fatalf("data in %d buffers, fed %d", len(sm.Data), len(bufs))
		}
		for j := range bufs {
			if len(bufs[j]) > 0 && &sm.Data[j][0] != &bufs[j][0] {
				t.Fatalf("data buffer %d is a copy", j)
			}
		}
	}
	for _, ev := range split.evs {
		if ev.Kind == EvMessage && ev.Dropped != split.dup {
			t.Fatalf("PeekMessage Dup %v, event Dropped %v", split.dup, ev.Dropped)
		}
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) + seed
	}
	return b
}

func TestSplitRoundTrip(t *testing.T) {
	h := Header2{Seq: 7, Tid: 99, Type: 0x7001, Priority: 196, Version: 3, DataOff: 512, AckSeq: 4, Flags: 3, CompatVersion: 1}
	for _, rev1 := range []bool{false, true} {
		for _, tc := range []struct {
			front, middle, data int
			cuts                []int
		}{
			{0, 0, 1, nil},
			{5, 0, 4096, nil},
			{100, 7, 10000, []int{1, 333, 4095}},
			{0, 9, 8191, []int{0, 5000}},
			{64, 0, 3 << 16, []int{1 << 16, 1 << 16}},
		} {
			t.Run(fmt.Sprintf("rev1=%v/%d-%d-%d", rev1, tc.front, tc.middle, tc.data), func(t *testing.T) {
				wire := wireMessage(rev1, h, pattern(tc.front, 1), pattern(tc.middle, 2), pattern(tc.data, 3))
				whole := feedWhole(t, readyEngine(rev1, 6), wire)
				split, bufs := feedSplit(t, readyEngine(rev1, 6), wire, tc.cuts)
				if whole.err != nil || len(whole.evs) != 2 {
					t.Fatalf("Feed: %v %v", kinds(whole.evs), whole.err)
				}
				sameResult(t, whole, split, bufs)
				for _, w := range []bool{false, true} {
					ahead, abufs := feedAhead(t, readyEngine(rev1, 6), wire, tc.cuts, w)
					sameResult(t, whole, ahead, abufs)
				}
				m := split.evs[1].Msg
				if m.Header.Src != (msg.EntityName{Type: msg.EntityClient, Num: 4100}) || m.Header.Tid != 99 || m.Header.Seq != 7 {
					t.Fatalf("header %+v", m.Header)
				}
			})
		}
	}
}

func TestSplitPeek(t *testing.T) {
	for _, rev1 := range []bool{false, true} {
		h := Header2{Seq: 3, Tid: 42, Type: 9, Priority: 127, Flags: 3}
		wire := wireMessage(rev1, h, []byte("front"), []byte("mid"), pattern(5000, 0))
		e := readyEngine(rev1, 2)
		if _, ok := e.Split(); ok {
			t.Fatal("Split ok before a preamble")
		}
		if _, err := e.Feed(wire[:PreambleLen]); err != nil {
			t.Fatal(err)
		}
		sp, _ := e.Split()
		want := BodySplit{Head: Header2Len + 5 + 3, Data: 5000, Tail: EpilogueRev0Len}
		if rev1 {
			want = BodySplit{Head: Header2Len + 4 + 5 + 3, Data: 5000, Tail: EpilogueRev1Len}
		}
		if sp != want {
			t.Fatalf("rev1 %v: split %+v, want %+v", rev1, sp, want)
		}
		body := wire[PreambleLen:]
		pk, err := e.PeekMessage(body[:sp.Head])
		if err != nil {
			t.Fatal(err)
		}
		if pk.Dup || pk.Header.Tid != 42 || pk.Header.Seq != 3 || pk.Header.Src.Num != 4100 || pk.Flags != 3 ||
			string(pk.Front) != "front" || string(pk.Middle) != "mid" {
			t.Fatalf("peek %+v", pk)
		}
		// Peeking consumes nothing: Feed still takes the whole body.
		evs, err := e.Feed(bytes.Clone(body))
		if err != nil || len(evs) != 1 || evs[0].Msg == nil || string(evs[0].Msg.Front.Bytes()) != "front" {
			t.Fatalf("Feed after peek: %v %v", kinds(evs), err)
		}
		// Wrong head length is a caller error that closes the engine.
		e2 := readyEngine(rev1, 0)
		_, _ = e2.Feed(wire[:PreambleLen])
		if _, err := e2.PeekMessage(body[:sp.Head-1]); !errors.Is(err, ErrProtocol) || e2.Err() == nil {
			t.Fatalf("short head: %v", err)
		}
	}
	// Frames without a data segment do not split.
	e := readyEngine(true, 0)
	w := wireMessage(true, Header2{Seq: 1}, []byte("f"), nil, nil)
	if _, err := e.Feed(w[:PreambleLen]); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Split(); ok {
		t.Fatal("a 2-segment MESSAGE splits")
	}
	if _, err := e.FeedSplit(nil, nil, nil); !errors.Is(err, ErrProtocol) {
		t.Fatalf("FeedSplit on a 2-segment frame: %v", err)
	}
	ack := AppendFrame(nil, TagAck, true, (&Ack{Seq: 1}).Append(nil))
	e = readyEngine(true, 0)
	if _, err := e.Feed(ack[:PreambleLen]); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Split(); ok {
		t.Fatal("an ACK splits")
	}
}

// A duplicate is known at peek time, and both paths drop it.
func TestSplitDuplicate(t *testing.T) {
	for _, rev1 := range []bool{false, true} {
		wire := wireMessage(rev1, Header2{Seq: 5, AckSeq: 2, Flags: 3}, nil, nil, pattern(4096, 9))
		whole := feedWhole(t, readyEngine(rev1, 5), wire)
		split, bufs := feedSplit(t, readyEngine(rev1, 5), wire, []int{100})
		if !split.dup {
			t.Fatal("PeekMessage missed the duplicate")
		}
		if len(whole.evs) != 2 || !whole.evs[1].Dropped {
			t.Fatalf("Feed events %+v", whole.evs)
		}
		sameResult(t, whole, split, bufs)
		// Not a duplicate once the seq is above in_seq.
		split, _ = feedSplit(t, readyEngine(rev1, 4), wire, nil)
		if split.dup || split.err != nil || split.evs[1].Dropped {
			t.Fatalf("seq 5 after 4: dup %v %+v", split.dup, split.evs)
		}
	}
}

// Corruption anywhere is caught by the split path with the error Feed
// reports: the header's CRC at peek time in msgr2.1 (inline), the front's,
// middle's and data's from the epilogue.
func TestSplitCorruption(t *testing.T) {
	for _, rev1 := range []bool{false, true} {
		h := Header2{Seq: 1, Tid: 5, Type: 7, Flags: 3}
		wire := wireMessage(rev1, h, []byte("front"), []byte("middle"), pattern(6000, 4))
		sp := BodySplit{}
		{
			e := readyEngine(rev1, 0)
			_, _ = e.Feed(wire[:PreambleLen])
			sp, _ = e.Split()
		}
		frontOff := Header2Len
		if rev1 {
			frontOff += 4
		}
		cases := []struct {
			name    string
			off     int // offset in the body
			seg     string
			atPeek  bool
			sentinl error
		}{
			{"header", 8, "segment 0", rev1, ErrSegmentCRC},
			{"front", frontOff + 1, "segment 1", false, ErrSegmentCRC},
			{"middle", frontOff + 5 + 2, "segment 2", false, ErrSegmentCRC},
			{"data start", sp.Head, "segment 3", false, ErrSegmentCRC},
			{"data end", sp.Head + sp.Data - 1, "segment 3", false, ErrSegmentCRC},
			{"data crc", sp.Head + sp.Data + sp.Tail - 1, "segment 3", false, ErrSegmentCRC},
			{"late status", sp.Head + sp.Data, "", false, nil},
		}
		for _, tc := range cases {
			t.Run(fmt.Sprintf("rev1=%v/%s", rev1, tc.name), func(t *testing.T) {
				bad := bytes.Clone(wire)
				bad[PreambleLen+tc.off] ^= 0x01
				whole := feedWhole(t, readyEngine(rev1, 0), bad)
				e := readyEngine(rev1, 0)
				split, bufs := feedSplit(t, e, bad, []int{3000})
				sameResult(t, whole, split, bufs)
				for _, w := range []bool{false, true} {
					ahead, abufs := feedAhead(t, readyEngine(rev1, 0), bad, []int{3000}, w)
					if !tc.atPeek || w {
						// FeedBodyCRC has no peek: a bad header CRC
						// fails there, with Feed's error.
						sameResult(t, whole, ahead, abufs)
					}
				}
				if tc.sentinl == nil {
					// Flipping bit 0 of the late status: the aborted flag
					// (msgr2.0) or a status neither complete nor aborted
					// (msgr2.1).
					if want := map[bool]error{false: ErrAborted, true: ErrProtocol}[rev1]; !errors.Is(split.err, want) {
						t.Fatalf("late status: %v", split.err)
					}
					return
				}
				if !errors.Is(split.err, tc.sentinl) || !bytes.Contains([]byte(split.err.Error()), []byte(tc.seg)) {
					t.Fatalf("error %v, want %v on %s", split.err, tc.sentinl, tc.seg)
				}
				if split.atPeek != tc.atPeek {
					t.Fatalf("error at peek time %v, want %v", split.atPeek, tc.atPeek)
				}
				if e.Err() == nil {
					t.Fatal("engine still open after a CRC error")
				}
				if _, err := e.FeedSplit(nil, nil, nil); err == nil {
					t.Fatal("engine accepts input after failing")
				}
			})
		}
	}
}

// FuzzSplit checks the split path against Feed on arbitrary messages,
// cuts of the data and single-byte corruption anywhere in the body.
func FuzzSplit(f *testing.F) {
	f.Add(true, uint64(3), uint64(2), []byte("front"), []byte(""), []byte("some data bytes"), uint16(3), uint16(0), -1)
	f.Add(false, uint64(1), uint64(0), []byte(""), []byte("mid"), bytes.Repeat([]byte{7}, 300), uint16(100), uint16(7), 50)
	f.Add(true, uint64(1), uint64(1), []byte("f"), []byte("m"), []byte("d"), uint16(0), uint16(0), 0)
	f.Add(true, uint64(2), uint64(1), []byte("f"), []byte(""), bytes.Repeat([]byte{9}, 500), uint16(10), uint16(0x8000|20), 200)
	f.Fuzz(func(t *testing.T, rev1 bool, seq, inSeq uint64, front, middle, data []byte, cut1, cut2 uint16, corrupt int) {
		if len(data) == 0 || len(front)+len(middle)+len(data) > 1<<16 {
			return
		}
		h := Header2{Seq: seq, Tid: seq * 3, Type: uint16(len(front)), Priority: 127, Flags: 3, AckSeq: inSeq / 2}
		wire := wireMessage(rev1, h, front, middle, data)
		if corrupt >= 0 {
			wire[PreambleLen+corrupt%(len(wire)-PreambleLen)] ^= 0x80
		}
		cuts := []int{int(cut1), int(cut2)}
		// The top bit of cut2 runs the session without data CRCs
		// (FeatureNoDataCRC): the three paths must still agree.
		noDataCRC := cut2&0x8000 != 0
		ready := func() *Engine {
			e := readyEngine(rev1, inSeq)
			e.noDataCRC = noDataCRC
			return e
		}
		whole := feedWhole(t, ready(), wire)
		split, bufs := feedSplit(t, ready(), wire, cuts)
		sameResult(t, whole, split, bufs)
		for _, w := range []bool{false, true} {
			ahead, abufs := feedAhead(t, ready(), wire, cuts, w)
			if !ahead.atPeek {
				sameResult(t, whole, ahead, abufs)
			}
		}
	})
}

// TestSplitCRCAhead: the CRC a reader passes is what is checked — one
// that does not match the epilogue fails as corrupt data does, and
// FeedBodyCRC refuses a body of the wrong length.
func TestSplitCRCAhead(t *testing.T) {
	for _, rev1 := range []bool{false, true} {
		h := Header2{Seq: 1, Tid: 5, Type: 7, Flags: 3}
		data := pattern(70000, 9)
		wire := wireMessage(rev1, h, []byte("front"), nil, data)
		good := UpdateSegmentCRC(UpdateSegmentCRC(SegmentCRCInit, data[:1000]), data[1000:])
		if good != SegmentCRC(msg.Buffers{data}) {
			t.Fatalf("piecewise CRC %#x, whole %#x", good, SegmentCRC(msg.Buffers{data}))
		}
		ready := func() (*Engine, BodySplit, []byte) {
			e := readyEngine(rev1, 0)
			if _, err := e.Feed(wire[:PreambleLen]); err != nil {
				t.Fatal(err)
			}
			sp, _ := e.Split()
			return e, sp, bytes.Clone(wire[PreambleLen:])
		}
		for _, whole := range []bool{false, true} {
			e, sp, body := ready()
			var err error
			if whole {
				_, err = e.FeedBodyCRC(body, good^1)
			} else {
				_, err = e.FeedSplitCRC(body[:sp.Head], [][]byte{body[sp.Head : sp.Head+sp.Data]}, body[sp.Head+sp.Data:], good^1)
			}
			if !errors.Is(err, ErrSegmentCRC) || !strings.Contains(err.Error(), "segment 3") || e.Err() == nil {
				t.Fatalf("whole=%v: wrong CRC passed: %v", whole, err)
			}
			e, _, body = ready()
			evs, err := e.FeedBodyCRC(body, good)
			if err != nil || len(evs) == 0 || !bytes.Equal(evs[len(evs)-1].Msg.Data.Bytes(), data) {
				t.Fatalf("good CRC: %v", err)
			}
			if d := evs[len(evs)-1].Msg.Data[0]; cap(d) != len(d) {
				t.Fatalf("data segment of %d bytes has capacity %d: reaches into the epilogue", len(d), cap(d))
			}
		}
		e, _, body := ready()
		if _, err := e.FeedBodyCRC(body[:len(body)-1], good); !errors.Is(err, ErrTruncated) {
			t.Fatalf("short body: %v", err)
		}
		e = readyEngine(rev1, 0)
		if _, err := e.FeedBodyCRC(body, good); !errors.Is(err, ErrProtocol) {
			t.Fatalf("no MESSAGE body awaited: %v", err)
		}
	}
}

// TestNoDataCRC checks FeatureNoDataCRC: it is in force only when both
// banners offer it; then a MESSAGE whose data CRC is zero (as a sender
// leaves it) is taken by Feed and both split paths, a corrupt data byte
// goes unnoticed (the point of the option), and every other CRC is still
// checked.
func TestNoDataCRC(t *testing.T) {
	for _, tc := range []struct{ client, server, want bool }{
		{false, false, true}, {true, false, true}, {false, true, true}, {true, true, false},
	} {
		cc, sc := clientConfig(), serverConfig()
		cc.NoDataCRC, sc.NoDataCRC = tc.client, tc.server
		c, s := pair(t, cc, sc)
		run(t, c, s)
		if c.err != nil || s.err != nil {
			t.Fatalf("handshake: client %v server %v", c.err, s.err)
		}
		if c.e.DataCRC() != tc.want || s.e.DataCRC() != tc.want {
			t.Fatalf("client offers %v, server %v: DataCRC client %v server %v, want %v",
				tc.client, tc.server, c.e.DataCRC(), s.e.DataCRC(), tc.want)
		}
	}

	ready := func(rev1 bool) *Engine {
		e := readyEngine(rev1, 0)
		e.noDataCRC = true
		return e
	}
	for _, rev1 := range []bool{false, true} {
		h := Header2{Seq: 1, Tid: 5, Type: 7}
		data := pattern(100<<10, 9)
		mf := MessageFrame{Header: h, Front: msg.Buffers{[]byte("front")}, Middle: msg.Buffers{[]byte("mid")}, Data: msg.Buffers{data}, DataCRCSet: true}
		wire := mf.AppendTail(append(mf.AppendHead(nil, rev1), data...), rev1)
		if bytes.Equal(wire, wireMessage(rev1, h, []byte("front"), []byte("mid"), data)) {
			t.Fatal("DataCRCSet with a zero CRC made the same frame")
		}
		// A session with data CRCs refuses the zero data CRC.
		if r := feedWhole(t, readyEngine(rev1, 0), wire); !errors.Is(r.err, ErrSegmentCRC) {
			t.Fatalf("rev1=%v: with data CRCs: %v", rev1, r.err)
		}
		var sp BodySplit
		{
			e := ready(rev1)
			_, _ = e.Feed(wire[:PreambleLen])
			sp, _ = e.Split()
		}
		for _, bad := range []struct {
			name string
			off  int // body offset to flip, -1 for none
			err  error
		}{
			{"intact", -1, nil},
			{"data byte", sp.Head + 1234, nil},
			{"front", sp.Head - 5, ErrSegmentCRC},
			{"middle", sp.Head - 1, ErrSegmentCRC},
			{"header", 8, ErrSegmentCRC},
		} {
			w := bytes.Clone(wire)
			if bad.off >= 0 {
				w[PreambleLen+bad.off] ^= 0x10
			}
			whole := feedWhole(t, ready(rev1), w)
			split, bufs := feedSplit(t, ready(rev1), w, []int{7000})
			sameResult(t, whole, split, bufs)
			ahead, abufs := feedAhead(t, ready(rev1), w, []int{7000}, true)
			sameResult(t, whole, ahead, abufs)
			if !errors.Is(whole.err, bad.err) || (bad.err == nil) != (whole.err == nil) {
				t.Fatalf("rev1=%v %s: %v, want %v", rev1, bad.name, whole.err, bad.err)
			}
			if bad.err == nil && (len(whole.evs) != 1 || whole.evs[0].Msg.Data.Len() != len(data)) {
				t.Fatalf("rev1=%v %s: events %v", rev1, bad.name, kinds(whole.evs))
			}
		}
	}
}

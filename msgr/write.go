package msgr

import "runtime"

// The write-ownership protocol: who writes a connection's socket.
//
// One party at a time owns the write side of a connection (Conn.owner,
// guarded by Conn.mu) and, with it, the encoder's state (Conn.ws: the
// batch, the write buffer, the engine's outgoing sequence, and in secure
// mode the GCM nonces, which must follow wire order). The owner collects
// a batch under c.mu (collectLocked: requeued messages first, then the
// out queue by priority, control frames with them), releases c.mu,
// encodes (sealing each frame in secure mode) and writes it, and takes
// c.mu again to release the side or collect the next batch. Whatever is
// queued while it writes goes out in its next batch: senders never wait
// for each other and a burst coalesces into one write.
//
// The owner is whoever asked for a write while the side was free, so a
// round trip with one message in flight costs no goroutine hand-off:
//
//   - Send (tryInline): the sending goroutine writes at once, with a
//     non-blocking write or writev (TryWriteBuffers on a connection
//     that is not a socket but has it, transport.TryWriter), and keeps writing what others queued
//     meanwhile for up to inlineRounds batches. A sender that finds the
//     side owned only queues its message; the owner sees it before it
//     releases the side (both run under c.mu), or pokes the writer
//     goroutine if it stops after inlineRounds.
//   - The holder of the reader role (the socket's reader goroutine or a
//     goroutine waiting in Await) that is delivering a message to a
//     FastDispatcher (ws.rd) leaves what is sent meanwhile queued with
//     ws.pending set, and writes it itself, in one write, before it next
//     waits for the socket or gives up the role (flushPending): a
//     dispatcher's reply and the session's ack go out together. The pair
//     follows Dekker's pattern: a sender stores pending then loads rd, the
//     reader stores rd then loads pending, so at least one of them sees
//     the other and the output is not stranded.
//   - With several goroutines waiting in Await on the connection (many
//     requests in flight), the holder of the reader role that delivered
//     to a FastDispatcher since it last waited for the socket lets the
//     goroutines that delivery woke run before it waits again
//     (deferLocalSends), with ws.rd set meanwhile: the requests they
//     send next are left queued, as a dispatcher's reply would be, and
//     go out in the one write of flushPending instead of one write each.
//     At one request in flight the caller reads its own reply (Await)
//     and nothing is deferred.
//   - Between Cork and Uncork (ws.corks), what is sent is left queued
//     with ws.pending set in the same way, and the last Uncork writes
//     it, in one write (flushPending); the reader role's own flushes
//     (flushLeft) leave it, and what the role left with it, to Uncork:
//     the RPC layer's progress corks the connection while it runs a
//     batch of completion callbacks, which send the next requests. The
//     pairs are Dekker's again (a sender stores pending then loads
//     corks, Uncork decrements corks then loads pending; the role loads
//     pending then corks, so a flush it skips is Uncork's to do). A
//     goroutine that waits in Await while a cork is held writes what is
//     pending first, so that a callback's own request is never held
//     while it waits for its reply.
//   - The writer goroutine (writeLoop, the seed's Pipe::Writer), which
//     poke starts when there is work for it and which exits once it has
//     drained it, writes what nobody else will: keepalives and their acks, replay after a
//     reconnect, messages queued before the socket was up or while an
//     injected fault is armed, and the remainder of an inline write the
//     socket did not take whole (ownHandoff: an inline writer never
//     blocks, so a full socket buffer never stalls a sender).
//
// A partial inline write hands the rest of its batch to the writer
// goroutine of the same socket (ws.restRun); the writer of a later socket
// drops it, because the session replays the batch from its sent list
// instead. Lossless messages join the sent list when they are collected,
// before any byte is written, so a failed write loses nothing.

// Who is writing to the socket: the write state belongs to them.
const (
	ownNone    uint8 = iota
	ownWriter        // the writer goroutine
	ownInline        // a sender or the reader role writing inline (never blocks)
	ownHandoff       // an inline write was partial: the writer goroutine must finish it
)

// inlineRounds bounds the batches one inline writer writes before it
// leaves the rest to the writer goroutine, so that a sender is not kept
// writing other goroutines' messages for long.
const inlineRounds = 4

// writeLoop is the connection's writer goroutine, started by poke when
// there is something for it (startWriter) and, on a socket, gone once it
// has drained it, so that an idle connection costs no goroutine for
// writing: it
// writes onto r with one write or writev per batch, unless another party
// owns the write side, which then writes it.
func (c *Conn) writeLoop(r *socketRun) {
	w := &c.ws
	var stop <-chan struct{} // r.stopCh(), fetched when the loop first blocks on it
	inj := c.m.cfg.Inject.SocketFailures
	// Every way out but writerIdle's gives the writer's flag up, so that
	// the next poke starts another: one returning because the socket is
	// not open yet (a session taking over a new socket) would otherwise
	// leave the flag set and that socket without a writer.
	mine := true
	defer func() {
		if mine {
			r.wmu.Lock()
			r.writerOn = false
			r.wmu.Unlock()
		}
	}()
	for {
		select {
		case <-c.wake: // this goroutine is the answer to that poke
		default:
		}
		if r.failed.Load() {
			return
		}
		select {
		case <-c.ctx.Done():
			return
		default:
		}
		for {
			c.mu.Lock()
			if c.run != r || c.state != stateOpen {
				c.mu.Unlock()
				return
			}
			if c.owner == ownInline {
				c.mu.Unlock()
				break
			}
			if c.owner == ownHandoff {
				c.owner = ownWriter
				mine := w.restRun == r
				c.mu.Unlock()
				var err error
				if mine {
					_, err = w.writeOut(r, true)
				}
				w.restRun = nil
				w.done()
				if err != nil {
					c.release()
					r.fail(err)
					return
				}
				c.mu.Lock()
			}
			ok, failed := c.nextBatchLocked(r, ownWriter)
			if failed {
				return
			}
			if !ok {
				break
			}
			if inj > 0 && injectHit(inj) {
				c.release()
				r.fail(ErrInjectedFailure)
				return
			}
			_, err := w.writeOut(r, true)
			c.lastWrite.Store(c.m.cfg.Clock.Now().UnixNano())
			w.done()
			c.release()
			if err != nil {
				r.fail(err)
				return
			}
		}
		if r.raw == nil {
			// Not a socket (shm, inproc): it stays for the next
			// message rather than being started anew for each (on
			// inproc every message goes through it; on shm, which
			// takes inline writes, the rest of a partial one).
			if stop == nil {
				stop = r.stopCh()
			}
			select {
			case <-c.wake:
			case <-stop:
				return
			case <-c.ctx.Done():
				return
			}
			continue
		}
		if !r.writerIdle(c) {
			mine = false // given up, or another writer has it
			return
		}
	}
}

// startWriter starts r's writer goroutine unless it runs or r's reader
// has stopped (socketRun.stopWriters).
func (r *socketRun) startWriter(c *Conn) {
	r.wmu.Lock()
	if !r.writerOn && !r.writersDone {
		r.writerOn = true
		r.wwg.Add(1)
		go func() {
			defer r.wwg.Done()
			c.writeLoop(r)
		}()
	}
	r.wmu.Unlock()
}

// writerIdle is called by the writer goroutine once it has drained what
// it found. It reports whether the writer must go on after all: a poke
// that came after its last look and found it running started no other.
func (r *socketRun) writerIdle(c *Conn) bool {
	r.wmu.Lock()
	r.writerOn = false
	r.wmu.Unlock()
	c.mu.Lock()
	more := c.run == r && c.state == stateOpen && c.owner != ownInline &&
		(c.owner == ownHandoff || c.outq.n > 0 || len(c.replay) > 0 || c.sendKA || c.sendKAAck || c.ackPending)
	c.mu.Unlock()
	if !more {
		return false
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.writerOn || r.writersDone {
		return false // another writer took over, or the socket is done
	}
	r.writerOn = true
	return true
}

// stopWriters waits for r's writer goroutine to exit and keeps others
// from starting; the reader calls it once it has stopped reading.
func (r *socketRun) stopWriters() {
	r.wmu.Lock()
	r.writersDone = true
	r.wmu.Unlock()
	r.wwg.Wait()
}

// release gives up the write side.
func (c *Conn) release() {
	c.mu.Lock()
	c.owner = ownNone
	c.mu.Unlock()
}

// inlineOK reports whether the calling goroutine may take the free write
// side of socket r now. c.mu must be held.
func (c *Conn) inlineOK(r *socketRun) bool {
	return c.state == stateOpen && r != nil && r == c.run && (r.raw != nil || r.tw != nil) &&
		len(c.replay) == 0 && c.m.cfg.Inject.SocketFailures == 0
}

// tryInline is called by Send with c.mu held after queueing; it releases
// c.mu. It decides who writes what is queued (see the protocol above):
// nobody new if the side is owned (the owner collects it), the reader
// role if it is delivering (ws.rd), else the caller, now. stamped: the
// caller has just stamped lastWrite, under this hold of c.mu, which then
// stands for the inline write's own stamp (writeInline).
func (c *Conn) tryInline(stamped bool) {
	r := c.run
	if c.owner != ownNone {
		// The owner takes the message in its next batch; the writer
		// goroutine is poked in case the owner is finishing a hand-off
		// or stops after inlineRounds without having seen it.
		own := c.owner
		c.mu.Unlock()
		if own != ownInline {
			c.poke()
		}
		return
	}
	if !c.inlineOK(r) {
		// Not open, replaying, or not a socket: the writer goroutine.
		c.mu.Unlock()
		c.poke()
		return
	}
	w := &c.ws
	if w.rd.Load() || w.corks.Load() > 0 {
		w.pending.Store(true)
		if w.rd.Load() || w.corks.Load() > 0 {
			c.mu.Unlock()
			return
		}
		// The reader has just finished delivering and may have looked
		// at pending already: write it here.
		w.pending.Store(false)
	}
	c.writeInline(r, stamped)
}

// nextBatchLocked collects the next batch into c.ws for owner, who then
// owns the write side. c.mu is held on entry and released on return. It
// reports ok=false, with the side released, when there is nothing to
// write, and failed=true as well when the batch could not be encoded
// (secure mode out of nonces), after failing r.
func (c *Conn) nextBatchLocked(r *socketRun, owner uint8) (ok, failed bool) {
	w := &c.ws
	if !c.collectLocked(w, r.e) {
		c.owner = ownNone
		c.mu.Unlock()
		return false, false
	}
	c.owner = owner
	c.mu.Unlock()
	if err := w.takeEncErr(); err != nil {
		w.done()
		c.release()
		r.fail(err)
		return false, true
	}
	return true, false
}

// writeInline writes what is queued from the calling goroutine, batch by
// batch, each with one non-blocking write or writev, while the socket
// takes them whole. c.mu is held on entry, with the write side free and r
// open; it is released on return. stamped: lastWrite was stamped under
// this hold of c.mu (tryInline).
func (c *Conn) writeInline(r *socketRun, stamped bool) {
	w := &c.ws
	for round := 0; ; round, stamped = round+1, false {
		if ok, _ := c.nextBatchLocked(r, ownInline); !ok {
			return
		}
		done, err := w.writeOut(r, false)
		// A batch written whole right after a Send to an empty queue
		// stamped lastWrite (under the hold of c.mu the batch was
		// collected under) leaves that stamp: a clock reading costs
		// 60-150 ns in the message path here.
		if !done || !stamped {
			c.lastWrite.Store(c.m.cfg.Clock.Now().UnixNano())
		}
		if err != nil {
			w.done()
			c.release()
			r.fail(err)
			return
		}
		if !done {
			w.restRun = r
			c.mu.Lock()
			c.owner = ownHandoff
			c.mu.Unlock()
			c.poke()
			return
		}
		w.done()
		c.mu.Lock()
		c.owner = ownNone
		if round+1 >= inlineRounds || !c.inlineOK(r) {
			more := c.outq.n > 0 || len(c.replay) > 0 || c.sendKA || c.sendKAAck || c.ackPending
			c.mu.Unlock()
			if more {
				c.poke()
			}
			return
		}
	}
}

// holdLocalSends is called by the socket's reader goroutine after a
// frame it delivered to a FastDispatcher, while it reads on from its
// buffer: if goroutines wait in Await on c, it keeps ws.rd set until
// deferLocalSends, so that what the callers it woke send meanwhile from
// other processors is left for its flushPending as well.
func (c *Conn) holdLocalSends() {
	w := &c.ws
	if !w.hold && c.awaiters.Load() >= 2 {
		w.hold = true
		w.rd.Store(true)
	}
}

// dropHold ends a hold (holdLocalSends) when the reader goroutine stops
// reading; what is pending stays queued for the writer goroutine, the
// next socket's reader or the next sender.
func (c *Conn) dropHold() {
	w := &c.ws
	if w.hold {
		w.hold = false
		w.rd.Store(false)
	}
}

// deferLocalSends is called by the holder of the reader role that has
// delivered messages to a FastDispatcher and is about to wait for the
// socket, or to yield the processor after burstReads reads from its
// buffer in a row, before it writes what is pending (flushPending). If
// goroutines other than a caller holding the role wait in Await on c,
// the delivery has probably woken some: the holder yields once so they
// run now, and what they send meanwhile, with ws.rd set, is left for its
// flushPending, one write for them all (see the protocol above). The
// yield puts the holder behind the goroutines runnable here, which it
// would wait for anyway once it blocks in the socket. It reports whether
// it yielded.
func (c *Conn) deferLocalSends() bool {
	w := &c.ws
	if !w.hold && c.awaiters.Load() < 2 {
		return false
	}
	w.rd.Store(true)
	runtime.Gosched()
	w.hold = false
	w.rd.Store(false)
	return true
}

// Cork makes c hold the messages sent on it, by any goroutine, instead
// of writing each as it is sent, until the matching Uncork, which writes
// them together: a goroutine about to send several messages in a row
// (the RPC layer's progress running a batch of callbacks) saves a system
// call per message. Corks nest. A goroutine waiting in Await writes what
// is held first; any other wait for a reply to a held message lasts
// until Uncork. Messages that would not be written inline anyway (the
// connection not open, replaying) are not held. Safe for concurrent use;
// every Cork must be paired with one Uncork.
func (c *Conn) Cork() { c.ws.corks.Add(1) }

// Uncork undoes one Cork; the last one writes what was held, inline if
// the write side is free (see the protocol above).
func (c *Conn) Uncork() {
	switch n := c.ws.corks.Add(-1); {
	case n < 0:
		c.ws.corks.Add(1)
		panic("msgr: Conn.Uncork without Cork")
	case n == 0:
		c.flushHeld()
	}
}

// flushHeld writes what is pending (ws.pending) from a goroutine that
// does not hold the reader role, if anything is.
func (c *Conn) flushHeld() {
	if !c.ws.pending.Load() {
		return
	}
	c.mu.Lock()
	r := c.run
	c.mu.Unlock()
	if r == nil {
		c.poke()
		return
	}
	c.flushPending(r)
}

// flushLeft is the reader role's flush (before it waits for the socket
// or for throttle budget, or yields after burstReads): it writes what
// was left for it (flushPending), unless a cork is held, in which case
// the last Uncork writes it, with what the cork holds.
func (c *Conn) flushLeft(r *socketRun) {
	if c.ws.pending.Load() && c.ws.corks.Load() == 0 {
		c.flushPending(r)
	}
}

// flushPending writes, from the holder of the reader role, what was left
// for it to write (ws.pending): inline if the write side is free, else
// the owner or the writer goroutine does.
func (c *Conn) flushPending(r *socketRun) {
	c.ws.pending.Store(false)
	c.mu.Lock()
	if c.owner != ownNone || !c.inlineOK(r) {
		own := c.owner
		c.mu.Unlock()
		if own != ownInline {
			c.poke()
		}
		return
	}
	c.writeInline(r, false)
}

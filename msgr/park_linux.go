//go:build linux

package msgr

import (
	"sync"

	"golang.org/x/sys/unix"
)

// idlePoller watches the sockets of parked readers (park.go) in one
// epoll set for the process, with a goroutine that waits on it while any
// is watched (and for pollLinger after the last, before it exits). Each
// socket is registered one-shot, under a token that leads back to its
// run: an event starts the socket's reader goroutine anew and disarms
// the registration, which the next park arms again. A socket closed
// leaves the set by itself; a run failed while parked is started by
// socketRun.fail, since the set reports nothing for it.
type idlePoller struct {
	mu      sync.Mutex
	fd      int // the epoll set; 0 until first used
	broken  bool
	off     bool // tests: parked readers wait on their own goroutines
	running bool // the goroutine waits on the set
	next    int32
	runs    map[int32]*socketRun // watched, by token
}

// pollLinger is how long the poller's goroutine waits for an event
// (milliseconds) before it looks whether anything is still watched.
const pollLinger = 1000

var poller idlePoller

// setDisabled turns the poller off (parked readers then wait on their
// own goroutines) or back on, for tests; it returns the function that
// undoes it.
func (p *idlePoller) setDisabled(off bool) func() {
	p.mu.Lock()
	old := p.off
	p.off = off
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		p.off = old
		p.mu.Unlock()
	}
}

// watch arms the registration of r's socket. It reports false if the
// poller cannot watch it (the set could not be made, or the socket is
// closed): the caller then waits on a goroutine of its own. r.role.mu
// is held.
func (p *idlePoller) watch(r *socketRun) bool {
	rr := &r.role
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.broken || p.off {
		return false
	}
	if p.fd == 0 {
		fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			p.broken = true
			return false
		}
		p.fd, p.runs = fd, make(map[int32]*socketRun)
	}
	for {
		p.next++
		if _, used := p.runs[p.next]; !used && p.next != 0 {
			break
		}
	}
	tok := p.next
	var err error
	cerr := r.raw.Control(func(fd uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: tok}
		if rr.polled {
			if err = unix.EpollCtl(p.fd, unix.EPOLL_CTL_MOD, int(fd), &ev); err == unix.ENOENT {
				err = unix.EpollCtl(p.fd, unix.EPOLL_CTL_ADD, int(fd), &ev)
			}
		} else {
			if err = unix.EpollCtl(p.fd, unix.EPOLL_CTL_ADD, int(fd), &ev); err == unix.EEXIST {
				err = unix.EpollCtl(p.fd, unix.EPOLL_CTL_MOD, int(fd), &ev)
			}
		}
	})
	if cerr != nil || err != nil {
		return false
	}
	rr.polled, rr.token = true, tok
	p.runs[tok] = r
	if !p.running {
		p.running = true
		go p.loop()
	}
	return true
}

// forget drops token's entry: its reader was started other than by the
// set, whose event for it, if one comes, is then ignored.
func (p *idlePoller) forget(token int32) {
	p.mu.Lock()
	delete(p.runs, token)
	p.mu.Unlock()
}

// loop waits on the set and starts the readers whose sockets it reports.
func (p *idlePoller) loop() {
	var evs [128]unix.EpollEvent
	for {
		n, err := unix.EpollWait(p.fd, evs[:], pollLinger)
		if err != nil && err != unix.EINTR {
			// Not expected: start every watched reader, which then waits
			// on a goroutine of its own when it parks again.
			p.mu.Lock()
			p.broken, p.running = true, false
			runs := p.runs
			p.runs = map[int32]*socketRun{}
			p.mu.Unlock()
			for tok, r := range runs {
				r.role.unpark(r, tok)
			}
			return
		}
		for i := range max(n, 0) {
			tok := evs[i].Fd
			p.mu.Lock()
			r := p.runs[tok]
			delete(p.runs, tok)
			p.mu.Unlock()
			if r != nil {
				r.role.unpark(r, tok)
			}
		}
		p.mu.Lock()
		if n <= 0 && len(p.runs) == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

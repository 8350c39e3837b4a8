//go:build linux

package front

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/upstream"
	"github.com/asyncrl/asyncrl/internal/h1"
	"github.com/asyncrl/asyncrl/internal/rawio"
)

// The loop front (Loop): event loops, one per P, each accepting
// from the listener and serving the client connections it accepted and
// the upstream connections it uses from one epoll set, as an
// event-driven proxy (HAProxy, nginx) does. A request costs no goroutine
// switch: the goroutine-per-connection fronts park twice per request
// (waiting for the request, then for the answer), and on the hop
// benchmark that scheduling was about a third of what separated the
// router from HAProxy (BENCHMARKS.md, issue 22).
//
// The loop waits on its epoll descriptor through Go's own poller
// (os.File + RawConn.Read), so an idle loop parks like any goroutine and
// the process never blocks in a system call; inside, every read, write,
// accept and epoll_wait is a raw non-blocking system call.
//
// It serves the plain case itself: a GET or POST h1.Parse accepts, body
// by Content-Length, to a plain-http replica, answered with a
// Content-Length body of at most Config.LoopMaxAnswer that is not an event
// stream — an engine's JSON answer. Everything else leaves the loop on
// the goroutine path with the bytes already read: a request the fast
// front would hand off (admin, /finish_session, chunked, Expect, odd
// heads) becomes a fastConn; an answer that is not plain (streamed,
// chunked, large, interim) is relayed by a goroutine with the shell's
// relay (Shell.Relay), and a request routed to a replica that is not
// plain http is sent by a goroutine with forward's loop from that
// decision on (Shell.Resume); that connection then stays a fastConn.
// Routing, retries, health accounting, versions and metrics are the
// shell's: the loop calls Shell's steps (Prepare, Route, SendFailed,
// Retry503, Answered, Done, …), forward's loop cut at its waits, and
// none of them blocks.

// loopBuf is the initial input buffer of a connection (grown to a
// request's or answer's size).
const loopBuf = 16 << 10

type loop struct {
	s    *Server
	sh   Shell
	hand *handoffListener
	epfd int
	ef   *os.File
	erc  syscall.RawConn
	evs  []syscall.EpollEvent
	nev  int
	wait func(uintptr) bool
	lfd  int // the listener (a duplicate; -1 once closed)
	wake int // eventfd: commands posted

	conns   fdTable[lconn]
	ups     fdTable[lup]
	idle    map[string][]*lup
	gone    []*lconn // half-closed while waiting: aborted once they waited watchDelay
	stopped bool
	// acceptPaused: the listener left the epoll set after accept failed
	// for want of resources; housekeep puts it back.
	acceptPaused bool
	scratch      []byte
	wakes        atomic.Int64  // batches of events handled (the tests check the loop does not spin)
	werr         syscall.Errno // a failed epoll_wait: run returns it
	// served receives the loop's result for Serve once: when it stops
	// accepting (Stop; it then drains its connections in the
	// background, as the fast front's goroutines do) or when run ends.
	served       chan<- error
	stopReported atomic.Bool
	swept        time.Time // the last idle sweep (housekeep)

	cmu  sync.Mutex
	cmds []func()
	quit chan struct{}
}

// lconn is a client connection of the loop.
type lconn struct {
	l          *loop
	fd         int
	in         []byte
	fill       int
	head       h1.Head
	reqLen     int // bytes of the request being served (head and body)
	out        []byte
	outOff     int
	ev         uint32
	busy       bool // a request is being served
	reading    bool // a request admitted on its head waits for its body: closeClient ends it (Leave)
	closeAfter bool
	rdhup      bool
	idleSince  time.Time

	// The request being served.
	preq      policy.Request
	key       string
	d         policy.Decision
	span      *Span
	attempt   int
	start     time.Time
	upAt      time.Time
	overhead  time.Duration
	up        *lup
	replayed  bool
	hostOfReq string
}

// lup is an upstream connection of the loop.
type lup struct {
	fd     int
	host   string
	in     []byte
	fill   int
	rhead  h1.RespHead
	out    []byte
	outOff int
	ev     uint32
	c      *lconn // the request it carries; nil when idle
	reused bool
	// headDone: the answer's head is parsed (a failure after it cuts the
	// client; before it, forward's retry rules apply).
	headDone bool
}

func (s *Server) serveLoop(ln net.Listener) error {
	tl, ok := ln.(*net.TCPListener)
	if !ok || s.cfg.Upstream == nil {
		return s.serveFast(ln) // the loop needs a TCP listener and the lean upstream client
	}
	hand, ok := s.trackListener(ln)
	if !ok {
		return http.ErrServerClosed
	}
	defer s.untrackListener(ln)
	// One loop per P: each accepts from the listener (registered
	// EPOLLEXCLUSIVE, so a connection wakes one loop) and serves what it
	// accepted.
	n := runtime.GOMAXPROCS(0)
	errs := make(chan error, n)
	for range n {
		l, err := newLoop(s, hand, tl)
		if err != nil {
			if s.frontStopped() {
				// Stop closed the listener before this loop took
				// its copy: that is a stop, not a failure to serve.
				err = http.ErrServerClosed
			}
			errs <- err
			continue
		}
		if !s.addLoop(l) {
			l.close()
			errs <- http.ErrServerClosed
			continue
		}
		l.served = errs
		go l.tick()
		go func() {
			defer s.removeLoop(l)
			err := l.run()
			if l.stopReported.CompareAndSwap(false, true) {
				errs <- err
			}
		}()
	}
	var first error
	for range n {
		if err := <-errs; first == nil || errors.Is(first, http.ErrServerClosed) {
			first = err
		}
	}
	return first
}

func newLoop(s *Server, hand *handoffListener, tl *net.TCPListener) (*loop, error) {
	l := &loop{s: s, sh: s.sh, hand: hand, lfd: -1, wake: -1,
		idle: map[string][]*lup{}, evs: make([]syscall.EpollEvent, 256), quit: make(chan struct{})}
	var err error
	if l.epfd, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err = syscall.SetNonblock(l.epfd, true); err == nil {
		l.ef = os.NewFile(uintptr(l.epfd), "router-loop")
		l.erc, err = l.ef.SyscallConn()
	}
	if err == nil {
		l.lfd, err = dupFD(tl)
	}
	if err == nil {
		w, _, e := syscall.RawSyscall(syscall.SYS_EVENTFD2, 0, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if e != 0 {
			err = os.NewSyscallError("eventfd2", e)
		}
		l.wake = int(w)
	}
	if err == nil {
		err = l.listen(syscall.EPOLL_CTL_ADD)
	}
	if err == nil {
		err = l.ctl(syscall.EPOLL_CTL_ADD, l.wake, syscall.EPOLLIN)
	}
	if err != nil {
		l.close()
		return nil, err
	}
	l.wait = func(fd uintptr) bool {
		n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_WAIT, fd, uintptr(unsafe.Pointer(&l.evs[0])), uintptr(len(l.evs)), 0, 0, 0)
		switch e {
		case 0:
			l.nev = int(n)
			return l.nev > 0
		case syscall.EINTR, syscall.EAGAIN:
			return false
		}
		l.werr = e // not a condition that passes: run ends with it
		return true
	}
	return l, nil
}

// dupFD duplicates a connection's or listener's descriptor (close-on-exec;
// non-blocking like the original, whose file description it shares).
func dupFD(sc syscall.Conn) (int, error) {
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	nfd := -1
	var derr error
	if err := rc.Control(func(fd uintptr) {
		r, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			derr = os.NewSyscallError("fcntl", e)
			return
		}
		nfd = int(r)
	}); err != nil {
		return -1, err
	}
	return nfd, derr
}

func (l *loop) ctl(op, fd int, ev uint32) error {
	e := syscall.EpollEvent{Events: ev, Fd: int32(fd)}
	if err := syscall.EpollCtl(l.epfd, op, fd, &e); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

// close releases the loop's own descriptors (run's end, or a failed start).
func (l *loop) close() {
	l.closeListener()
	l.cmu.Lock() // post writes to wake under cmu: never to a closed (or reused) descriptor
	if l.wake >= 0 {
		_ = syscall.Close(l.wake)
		l.wake = -1
	}
	left := l.cmds
	l.cmds = nil
	l.cmu.Unlock()
	for _, f := range left {
		f() // a dial's result finds its client gone and closes the descriptor
	}
	if l.ef != nil {
		_ = l.ef.Close()
	} else if l.epfd > 0 {
		_ = syscall.Close(l.epfd)
	}
}

// post runs f on the loop's goroutine (from any goroutine).
// Once the loop ended, f is dropped and post returns false.
func (l *loop) post(f func()) bool {
	l.cmu.Lock()
	defer l.cmu.Unlock()
	if l.wake < 0 {
		return false
	}
	l.cmds = append(l.cmds, f)
	one := [8]byte{1}
	_, _, _ = syscall.RawSyscall(syscall.SYS_WRITE, uintptr(l.wake), uintptr(unsafe.Pointer(&one[0])), 8)
	return true
}

// stop makes the loop stop accepting, close its idle connections, and
// close the others after their current answer; run then returns.
func (l *loop) stop() { l.post(l.stopNow) }

// tick posts the loop's housekeeping every watchDelay until it ends.
func (l *loop) tick() {
	t := time.NewTicker(watchDelay)
	defer t.Stop()
	for {
		select {
		case <-l.quit:
			return
		case <-t.C:
			l.post(l.housekeep)
		}
	}
}

func (l *loop) run() (err error) {
	defer func() {
		if p := recover(); p != nil {
			l.s.cfg.Logger.Error().Interface("panic", p).Msg("router loop front: panicked; its connections are closed")
			err = errors.New("front: loop front panicked")
		}
		l.closeAll()
		close(l.quit)
		l.close()
	}()
	for {
		if err := l.erc.Read(l.wait); err != nil {
			return err
		}
		if l.werr != 0 {
			return os.NewSyscallError("epoll_wait", l.werr)
		}
		l.wakes.Add(1)
		for i := range l.nev {
			ev := l.evs[i]
			if c := l.conns.get(ev.Fd); c != nil {
				l.client(c, ev.Events)
				continue
			}
			if up := l.ups.get(ev.Fd); up != nil {
				l.upstream(up, ev.Events)
				continue
			}
			switch {
			case int(ev.Fd) == l.wake:
				l.commands()
			case int(ev.Fd) == l.lfd:
				l.accept()
			}
		}
		l.nev = 0
		if l.stopped && l.conns.n == 0 {
			return http.ErrServerClosed
		}
	}
}

func (l *loop) commands() {
	var b [8]byte
	_, _, _ = syscall.RawSyscall(syscall.SYS_READ, uintptr(l.wake), uintptr(unsafe.Pointer(&b[0])), 8)
	l.cmu.Lock()
	cmds := l.cmds
	l.cmds = nil
	l.cmu.Unlock()
	for _, f := range cmds {
		f()
	}
}

// epollExclusive is EPOLLEXCLUSIVE (Linux 4.5), which package syscall
// does not name: of the loops waiting on the listener, one is woken.
const epollExclusive = 1 << 28

// listen adds the listener to the loop's epoll set (op ADD).
func (l *loop) listen(op int) error {
	err := l.ctl(op, l.lfd, syscall.EPOLLIN|epollExclusive)
	if errors.Is(err, syscall.EINVAL) { // a kernel before 4.5: every loop wakes, one accepts
		err = l.ctl(op, l.lfd, syscall.EPOLLIN)
	}
	return err
}

func (l *loop) accept() {
	for range 64 {
		fd, _, err := syscall.Accept4(l.lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		switch err {
		case nil:
		case syscall.EAGAIN, syscall.EINTR, syscall.ECONNABORTED:
			return
		default:
			// Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS):
			// the listener stays readable, and waiting on it would spin.
			// It leaves the epoll set until the next housekeeping.
			l.sh.Warn("", "router loop front: accept failed; pausing accepts for "+watchDelay.String(), err)
			if l.ctl(syscall.EPOLL_CTL_DEL, l.lfd, 0) == nil {
				l.acceptPaused = true
			}
			return
		}
		setClientOpts(fd)
		c := &lconn{l: l, fd: fd, in: make([]byte, loopBuf), idleSince: time.Now()}
		c.ev = syscall.EPOLLIN | syscall.EPOLLRDHUP
		if l.ctl(syscall.EPOLL_CTL_ADD, fd, c.ev) != nil {
			_ = syscall.Close(fd)
			continue
		}
		l.conns.set(fd, c)
	}
}

// setClientOpts sets what Go's listener sets on an accepted connection:
// no Nagle delay, and TCP keep-alive probes after 15 s idle every 15 s,
// so a client that vanished without a FIN is noticed.
func setClientOpts(fd int) {
	_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1)
	_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, 15)
	_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, 15)
}

// setEv changes what the loop waits for on fd.
func (l *loop) setEv(fd int, cur *uint32, ev uint32) {
	if *cur != ev {
		*cur = ev
		_ = l.ctl(syscall.EPOLL_CTL_MOD, fd, ev)
	}
}

func (l *loop) client(c *lconn, ev uint32) {
	if ev&syscall.EPOLLOUT != 0 && c.outOff < len(c.out) {
		l.flush(c)
		return
	}
	if c.busy {
		// Waiting on the replica: only a hang-up matters; pipelined bytes
		// stay in the socket until the answer is out. A reset or closed
		// socket (HUP, ERR: reported whatever the interest, so it would
		// fire on every wait) ends the request at once; a half-close
		// (RDHUP) once the request waited watchDelay, as the fast front's
		// disconnect watch does: an answer due sooner is still written.
		switch {
		case ev&(syscall.EPOLLHUP|syscall.EPOLLERR) != 0:
			l.abort(c)
		case c.rdhup:
			l.setEv(c.fd, &c.ev, 0) // known half-closed: nothing more to learn from it
		case ev&syscall.EPOLLRDHUP != 0:
			c.rdhup = true
			l.setEv(c.fd, &c.ev, 0)
			if time.Since(c.start) >= watchDelay {
				l.abort(c)
			} else {
				l.gone = append(l.gone, c)
			}
		case ev&syscall.EPOLLIN != 0:
			// A pipelined request: level-triggered, it would wake every
			// wait until read. The loop stops waiting for input until the
			// answer is out (flush waits for it again).
			l.setEv(c.fd, &c.ev, syscall.EPOLLRDHUP)
		}
		return
	}
	if len(c.in) == c.fill {
		l.handOff(c) // a head longer than the buffer: net/http's limits apply
		return
	}
	n, again, err := rawio.Recv(c.fd, c.in[c.fill:])
	if again {
		return
	}
	if err != nil { // io.EOF too
		if c.idleSince.IsZero() && c.outOff >= len(c.out) {
			// Gone inside a request's body (next saw its head, and no
			// answer is pending): counted as the fast front counts it.
			l.sh.Count("", "read_body")
		}
		l.closeClient(c)
		return
	}
	c.fill += n
	l.next(c)
}

// next serves the request at the start of c.in once it is whole.
func (l *loop) next(c *lconn) {
	sh := l.sh
	n, v := h1.Parse(c.in[:c.fill], &c.head)
	if v == h1.Incomplete {
		return
	}
	if v == h1.HandOff || handOffPath(c.head.Target) {
		l.handOff(c)
		return
	}
	cl := c.head.ContentLength
	if !c.reading {
		// The head is in (first seen): admitted or refused now, before
		// its size or body is looked at, as the fast front does.
		c.idleSince = time.Time{} // a request's body is being read: not idle (housekeep)
		c.closeAfter = c.head.Close || l.stopped
		if !sh.Enter() {
			c.closeAfter = true // the body stays unread
			sh.Refuse(c)
			return
		}
		if cl > l.s.cfg.MaxBodyBytes {
			c.closeAfter = true // the body stays unread
			sh.TooLarge(c)
			sh.Leave()
			return
		}
		c.reading = true
	}
	need := n + int(cl)
	if c.fill < need {
		if len(c.in) < need {
			c.in = append(c.in[:c.fill], make([]byte, need-c.fill)...)
		}
		return
	}
	// The body is in: the overhead clock starts (as on the fast front),
	// and the request is busy's to end (its Leave).
	c.reqLen, c.reading = need, false
	c.busy, c.start, c.attempt, c.overhead, c.replayed = true, time.Now(), 0, 0, false
	c.preq, c.key = sh.Prepare(c, c.in[n:need])
	l.attempt(c)
}

// Header is Headers' (Shell.Prepare) for the request being served.
func (c *lconn) Header(name string) string {
	v, _ := c.head.Get(name)
	return string(v)
}

// attempt routes the request and sends it to the chosen replica.
func (l *loop) attempt(c *lconn) {
	sh := l.sh
	d, span := sh.Route(c.preq)
	c.overhead += time.Since(c.start)
	if !d.OK() {
		c.busy = false
		sh.Unrouted(c, d, c.key, c.overhead)
		sh.Leave()
		return
	}
	host, ok := strings.CutPrefix(d.Replica, "http://")
	if !ok || strings.Contains(host, "/") {
		// Not a plain-http replica (a configured replica URL with a
		// scheme or path): forward's loop goes on with this decision on
		// a goroutine, which sends with the shell's Transport.
		l.resumeAway(c, d, span)
		return
	}
	c.d, c.span, c.hostOfReq = d, span, host
	if up := l.idleUp(host); up != nil {
		l.send(c, up)
		return
	}
	l.dial(c, host)
}

func (l *loop) idleUp(host string) *lup {
	ups := l.idle[host]
	if len(ups) == 0 {
		return nil
	}
	up := ups[len(ups)-1]
	l.idle[host] = ups[:len(ups)-1]
	return up
}

// dial connects to host on a goroutine (a dial may take up to its
// timeout) and sends c's request there from the loop.
func (l *loop) dial(c *lconn, host string) {
	d := &l.s.cfg.Upstream.Dialer
	go func() {
		nc, err := d.Dial("tcp", host)
		fd := -1
		if err == nil {
			fd, err = dupFD(nc.(*net.TCPConn))
			_ = nc.Close()
		}
		if !l.post(func() { l.dialed(c, host, fd, err) }) && fd >= 0 {
			_ = syscall.Close(fd) // the loop ended meanwhile
		}
	}()
}

func (l *loop) dialed(c *lconn, host string, fd int, err error) {
	if l.conns.get(int32(c.fd)) != c { // the client went away meanwhile
		if fd >= 0 {
			_ = syscall.Close(fd)
		}
		return
	}
	if err == nil {
		up := &lup{fd: fd, host: host, in: make([]byte, loopBuf), ev: syscall.EPOLLIN | syscall.EPOLLRDHUP}
		if err = l.ctl(syscall.EPOLL_CTL_ADD, fd, up.ev); err == nil {
			l.ups.set(fd, up)
			l.send(c, up)
			return
		}
		_ = syscall.Close(fd)
	}
	l.sendFailed(c, err)
}

// send writes c's request to up.
func (l *loop) send(c *lconn, up *lup) {
	c.up, up.c = up, c
	up.fill, up.headDone = 0, false
	b := up.out[:0]
	b = append(b, c.head.Method...)
	b = append(b, ' ')
	b = append(b, c.head.Target...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, c.hostOfReq...)
	b = append(b, "\r\n"...)
	b = appendFields(b, c.head.Headers, forwarded)
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, c.head.ContentLength, 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, c.in[c.reqLen-int(c.head.ContentLength):c.reqLen]...)
	up.out, up.outOff = b, 0
	l.flushUp(up)
}

// sendOut writes out from *off on until it is all out, the socket is
// full (again) or the write failed.
func sendOut(fd int, out []byte, off *int) (again bool, err error) {
	for *off < len(out) {
		n, again, err := rawio.Send(fd, out[*off:])
		if again || err != nil {
			return again, err
		}
		*off += n
	}
	return false, nil
}

func (l *loop) flushUp(up *lup) {
	again, err := sendOut(up.fd, up.out, &up.outOff)
	switch {
	case again:
		// Writable is all that matters now (ERR and HUP are reported
		// anyway); a replica's half-close (net/http's after an early
		// answer) would otherwise report RDHUP on every wait.
		l.setEv(up.fd, &up.ev, syscall.EPOLLOUT)
		return
	case err != nil:
		l.upFailed(up, err)
		return
	}
	if cap(up.out) > 4*loopBuf {
		up.out = nil // a large request's buffer is not kept per pooled connection
	}
	l.setEv(up.fd, &up.ev, syscall.EPOLLIN|syscall.EPOLLRDHUP)
}

func (l *loop) upstream(up *lup, ev uint32) {
	if up.c == nil { // idle: the replica closed it (or spoke out of turn)
		l.dropIdle(up)
		return
	}
	if up.outOff < len(up.out) {
		if ev&(syscall.EPOLLOUT|syscall.EPOLLERR|syscall.EPOLLHUP) != 0 {
			l.flushUp(up)
		}
		return
	}
	if up.fill == len(up.in) {
		l.relayAway(up.c) // a head longer than the buffer: net/http reads it
		return
	}
	n, again, err := rawio.Recv(up.fd, up.in[up.fill:])
	if again {
		return
	}
	if err == io.EOF {
		err = upstream.ErrNoAnswer
	}
	if err != nil {
		l.upFailed(up, err)
		return
	}
	up.fill += n
	l.answer(up)
}

// answer relays the replica's answer once it is whole, or hands the
// exchange to a goroutine when it is not a plain one.
func (l *loop) answer(up *lup) {
	c := up.c
	n, v := h1.ParseResponse(up.in[:up.fill], &up.rhead)
	switch v {
	case h1.Incomplete:
		return
	case h1.HandOff:
		l.relayAway(c)
		return
	}
	up.headDone = true
	if up.rhead.ContentLength > l.s.cfg.LoopMaxAnswer || upstream.IsEventStream(&up.rhead) {
		l.relayAway(c)
		return
	}
	total := n + int(up.rhead.ContentLength)
	if up.fill < total {
		if len(up.in) < total {
			up.in = append(up.in[:up.fill], make([]byte, total-up.fill)...)
		}
		return
	}
	sh, d := l.sh, c.d
	c.upAt = time.Now() // the answer is in: forward's upstreamAt
	code := up.rhead.Code
	keep := up.fill == total && !up.rhead.Close
	if code == http.StatusServiceUnavailable && sh.Retry503(d, c.span, c.attempt, &c.preq) {
		l.release(up, keep)
		c.up = nil
		c.attempt++
		c.start = time.Now()
		l.attempt(c)
		return
	}
	vs := sh.Answered(c.span)
	c.closeAfter = c.closeAfter || c.rdhup // a half-closed client's last answer
	b := appendRelayedHead(l.scratch[:0], code, &up.rhead, nil, d.Replica, vs)
	b = appendHeadEnd(b, up.rhead.ContentLength, c.closeAfter)
	b = append(b, up.in[n:total]...)
	l.scratch = b[:0]
	sh.Done(d, code, c.overhead+time.Since(c.upAt))
	l.release(up, keep)
	l.finish(c)
	l.write(c, b)
}

// finish ends the request being served (its bytes leave c.in).
func (l *loop) finish(c *lconn) {
	l.sh.Leave()
	c.busy, c.up = false, nil
	l.consume(c)
}

func (l *loop) consume(c *lconn) {
	c.fill = copy(c.in, c.in[c.reqLen:c.fill])
	c.reqLen = 0
	if len(c.in) > loopBuf && c.fill <= loopBuf {
		in := make([]byte, loopBuf)
		copy(in, c.in[:c.fill])
		c.in = in
	}
}

// release puts up back in the idle pool (keep) or closes it.
func (l *loop) release(up *lup, keep bool) {
	up.c, up.fill = nil, 0
	if len(up.in) > loopBuf {
		up.in = make([]byte, loopBuf)
	}
	if !keep || l.stopped || len(l.idle[up.host]) >= l.s.cfg.Upstream.MaxIdle {
		l.closeUp(up)
		return
	}
	up.reused = true
	l.idle[up.host] = append(l.idle[up.host], up)
}

func (l *loop) dropIdle(up *lup) {
	ups := l.idle[up.host]
	for i, x := range ups {
		if x == up {
			l.idle[up.host] = append(ups[:i], ups[i+1:]...)
			break
		}
	}
	l.closeUp(up)
}

func (l *loop) closeUp(up *lup) {
	l.ups.del(up.fd)
	_ = syscall.Close(up.fd) // leaves the epoll set with its last descriptor
	up.fd = -1
}

// upFailed handles a failed upstream read or write: before any byte of
// the answer, a reused connection is replayed once on a new one (the
// replica had closed it); before the answer's head was whole, forward's
// retry rules apply (as the fast front's failed ReadResponse); after it,
// the client connection is cut (the fast front has the head out by then:
// the client must not see a short answer).
func (l *loop) upFailed(up *lup, err error) {
	c := up.c
	fresh, headDone, reused, code := up.fill == 0, up.headDone, up.reused, up.rhead.Code
	up.c, c.up = nil, nil
	l.closeUp(up)
	if headDone {
		// Nothing went out: the overhead is the routing's alone.
		l.sh.StreamFailed(c.d, c.span, code, c.overhead, err)
		l.sh.Leave()
		c.busy = false
		l.closeClient(c)
		return
	}
	if fresh && reused && !c.replayed {
		c.replayed = true
		l.dial(c, c.hostOfReq)
		return
	}
	l.sendFailed(c, err) // no byte reached the client: retried as forward does
}

func (l *loop) sendFailed(c *lconn, err error) {
	sh := l.sh
	c.up = nil
	switch sh.SendFailed(c.d, c.span, err, c.attempt, &c.preq, c.rdhup, c.overhead) {
	case SendRetry:
		c.attempt++
		c.replayed = false
		c.start = time.Now()
		l.attempt(c)
	case SendFail:
		c.busy = false
		sh.Leave()
		c.Fail(http.StatusBadGateway, "upstream "+c.d.Replica+" unreachable", 0)
	case SendGone:
		c.busy = false
		sh.Leave()
		l.closeClient(c)
	}
}

// abort ends a request whose client went away while it waited: the
// upstream connection is closed (the replica sees the request
// cancelled), nothing is answered.
func (l *loop) abort(c *lconn) {
	if !c.busy {
		return
	}
	if c.up != nil {
		c.up.c = nil
		l.closeUp(c.up)
		c.up = nil
	}
	l.sh.Abandon(c.d, c.span) // a dial in flight finds the client gone (dialed)
	l.sh.Leave()
	c.busy = false
	l.closeClient(c)
}

// write sends an answer to c; what the socket does not take is sent
// when it becomes writable.
func (l *loop) write(c *lconn, b []byte) {
	c.out = append(c.out[:0], b...)
	c.outOff = 0
	l.flush(c)
}

func (l *loop) flush(c *lconn) {
	again, err := sendOut(c.fd, c.out, &c.outOff)
	switch {
	case again:
		l.setEv(c.fd, &c.ev, syscall.EPOLLOUT)
		return
	case err != nil:
		l.closeClient(c)
		return
	}
	c.out, c.outOff = c.out[:0], 0
	if cap(c.out) > 4*loopBuf {
		c.out = nil // a large answer's buffer is not kept per connection
	}
	if c.closeAfter {
		l.closeClient(c)
		return
	}
	l.setEv(c.fd, &c.ev, syscall.EPOLLIN|syscall.EPOLLRDHUP)
	c.idleSince = time.Now()
	if c.fill > 0 {
		l.next(c) // a pipelined request
	}
}

func (l *loop) closeClient(c *lconn) {
	if l.conns.get(int32(c.fd)) != c {
		return
	}
	l.conns.del(c.fd)
	_ = syscall.Close(c.fd)
	if c.reading { // admitted, gone (or cut by Stop) inside its body
		c.reading = false
		l.sh.Leave()
	}
}

// detach takes fd out of the loop as a net.Conn.
func (l *loop) detach(fd int) (net.Conn, error) {
	_ = l.ctl(syscall.EPOLL_CTL_DEL, fd, 0)
	f := os.NewFile(uintptr(fd), "")
	nc, err := net.FileConn(f)
	_ = f.Close()
	return nc, err
}

// handOff gives c, with every byte read, to the goroutine path (a
// fastConn, which hands it to net/http when it must).
func (l *loop) handOff(c *lconn) {
	l.conns.del(c.fd)
	pre := append([]byte(nil), c.in[:c.fill]...)
	nc, err := l.detach(c.fd)
	if err != nil {
		return
	}
	go func() {
		fc := l.s.newFastConn(&prefixConn{Conn: nc, pre: pre}, l.hand)
		if fc == nil {
			_ = nc.Close()
			return
		}
		fc.serve()
	}()
}

// relayAway hands an exchange whose answer is not plain to a goroutine:
// the fast front's relay reads the answer from the bytes read so far and
// the upstream connection; the client connection then stays a fastConn.
func (l *loop) relayAway(c *lconn) {
	up := c.up
	l.conns.del(c.fd)
	l.ups.del(up.fd)
	ex := &adopted{
		rest:    append([]byte(nil), c.in[c.reqLen:c.fill]...),
		answer:  append([]byte(nil), up.in[:up.fill]...),
		host:    up.host,
		rt:      Routed{Preq: c.preq, Key: c.key, D: c.d, Span: c.span, Attempt: c.attempt, Overhead: c.overhead},
		upAt:    time.Now(),
		closeAf: c.closeAfter,
	}
	ex.head, ex.body = c.request()
	var uerr, cerr error
	ex.up, uerr = l.detach(up.fd) // detach closes the loop's descriptor either way
	ex.client, cerr = l.detach(c.fd)
	if uerr != nil || cerr != nil {
		for _, nc := range []net.Conn{ex.up, ex.client} {
			if nc != nil {
				_ = nc.Close()
			}
		}
		l.sh.EndAttempt(c.d, c.span)
		l.sh.Leave()
		return
	}
	go l.s.serveAdopted(ex, l.hand)
}

// request copies the head and body of the request being served, in one
// allocation, for a goroutine that takes it over.
func (c *lconn) request() (head, body []byte) {
	b := append([]byte(nil), c.in[:c.reqLen]...)
	hl := c.reqLen - int(c.head.ContentLength)
	return b[:hl:hl], b[hl:]
}

// resumeAway hands a request routed to a replica the loop does not reach
// (not plain http) to a goroutine, where forward's loop goes on from
// this decision (Shell.Resume: the request is routed once, admitted
// once); the client connection then stays a fastConn.
func (l *loop) resumeAway(c *lconn, d policy.Decision, span *Span) {
	l.conns.del(c.fd)
	ex := &adopted{
		rest:    append([]byte(nil), c.in[c.reqLen:c.fill]...),
		rt:      Routed{Preq: c.preq, Key: c.key, D: d, Span: span, Attempt: c.attempt, Overhead: c.overhead},
		closeAf: c.closeAfter,
	}
	ex.head, ex.body = c.request()
	nc, err := l.detach(c.fd) // detach closes the loop's descriptor either way
	if err != nil {
		l.sh.EndAttempt(d, span)
		l.sh.Leave()
		return
	}
	ex.client = nc
	go l.s.serveAdopted(ex, l.hand)
}

// housekeep runs every watchDelay: requests whose client half-closed and
// that waited watchDelay are aborted (the fast front's disconnect
// watch); every quarter of Config.IdleTimeout, connections idle past it
// are closed (reapIdle's rule).
func (l *loop) housekeep() {
	if l.acceptPaused && !l.stopped && l.listen(syscall.EPOLL_CTL_ADD) == nil {
		l.acceptPaused = false
	}
	gone := l.gone[:0]
	for _, c := range l.gone {
		switch {
		case !c.busy || l.conns.get(int32(c.fd)) != c:
		case time.Since(c.start) >= watchDelay:
			l.abort(c)
		default:
			gone = append(gone, c)
		}
	}
	l.gone = gone
	idle := l.s.cfg.IdleTimeout
	now := time.Now()
	if now.Sub(l.swept) < idle/4 {
		return
	}
	l.swept = now
	for _, c := range l.conns.all() {
		if !c.busy && c.outOff >= len(c.out) && !c.idleSince.IsZero() && now.Sub(c.idleSince) > idle {
			l.closeClient(c)
		}
	}
}

func (l *loop) stopNow() {
	if l.stopped {
		return
	}
	l.stopped = true
	l.closeListener()
	if l.stopReported.CompareAndSwap(false, true) && l.served != nil {
		l.served <- http.ErrServerClosed // Serve returns; this loop drains in the background
	}
	for _, c := range l.conns.all() {
		if !c.busy && c.outOff >= len(c.out) {
			l.closeClient(c)
		} else {
			c.closeAfter = true
		}
	}
	for host, ups := range l.idle {
		for _, up := range ups {
			l.closeUp(up)
		}
		delete(l.idle, host)
	}
}

// closeListener takes the loop's copy of the listener out of its epoll
// set, then closes it: the registration belongs to the socket, which the
// other loops' copies keep open, so closing alone would leave events
// reported under a dead (or reused) descriptor number.
func (l *loop) closeListener() {
	if l.lfd < 0 {
		return
	}
	if !l.acceptPaused {
		_ = l.ctl(syscall.EPOLL_CTL_DEL, l.lfd, 0)
	}
	_ = syscall.Close(l.lfd)
	l.lfd = -1
}

// closeAll closes every connection (run's end).
func (l *loop) closeAll() {
	for _, c := range l.conns.all() {
		if c.busy {
			l.abort(c)
		} else {
			l.closeClient(c)
		}
	}
	for _, up := range l.ups.all() {
		l.closeUp(up)
	}
}

// Fail is Failer's: the loop's local answers (appendError's bytes),
// written on the loop's goroutine.
func (c *lconn) Fail(code int, msg string, retryAfter int) {
	l := c.l
	if c.rdhup {
		c.closeAfter = true // half-closed: this is its last answer (as answer does)
	}
	b := appendError(l.scratch[:0], code, msg, retryAfter, c.closeAfter)
	l.scratch = b[:0]
	if c.reqLen > 0 {
		l.consume(c)
	} else if !c.closeAfter {
		c.closeAfter = true // the request's bytes were not all read
	}
	l.write(c, b)
}

// fdTable maps descriptors to the loop's connections: a slice indexed by
// descriptor, one bounds check per event instead of a map lookup.
type fdTable[T any] struct {
	s []*T
	n int
}

func (t *fdTable[T]) get(fd int32) *T {
	if fd >= 0 && int(fd) < len(t.s) {
		return t.s[fd]
	}
	return nil
}

func (t *fdTable[T]) set(fd int, v *T) {
	if fd >= len(t.s) {
		t.s = append(t.s, make([]*T, fd+1-len(t.s)+len(t.s)/2)...)
	}
	if t.s[fd] == nil {
		t.n++
	}
	t.s[fd] = v
}

func (t *fdTable[T]) del(fd int) {
	if fd >= 0 && fd < len(t.s) && t.s[fd] != nil {
		t.s[fd] = nil
		t.n--
	}
}

// all returns the entries (a copy: the caller may delete while it ranges).
func (t *fdTable[T]) all() []*T {
	out := make([]*T, 0, t.n)
	for _, v := range t.s {
		if v != nil {
			out = append(out, v)
		}
	}
	return out
}

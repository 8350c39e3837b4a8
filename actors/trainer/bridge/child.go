package bridge

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Call outcomes besides *ChildError.
var (
	// ErrChildExited: the child exited (or closed its pipes) before it
	// answered.
	ErrChildExited = errors.New("bridge: trainer child exited")
	// ErrDeadline: the child did not answer within the call's deadline.
	ErrDeadline = errors.New("bridge: trainer child missed its deadline")
	// ErrProtocol: the child answered something the protocol does not
	// allow (an undecodable frame, a wrong id or type).
	ErrProtocol = errors.New("bridge: trainer child broke the protocol")
)

// Spec is the command a child runs.
type Spec struct {
	// Argv is the command and its arguments (trainer.exec).
	Argv []string
	// Env is added to this process's environment (KEY=VALUE).
	Env []string
	// Dir is the working directory ("" = this process's).
	Dir string
}

func (s Spec) String() string { return strings.Join(s.Argv, " ") }

type readResult struct {
	rep Reply
	err error
}

// Child is one running child process. Calls are sequential (one in
// flight); a Child is not safe for concurrent calls.
type Child struct {
	spec   Spec
	log    zerolog.Logger
	cmd    *exec.Cmd
	stdin  *os.File
	stdout *os.File
	stderr *os.File
	nextID uint64

	replies  chan readResult
	readDone chan struct{} // the reader stopped (EOF or error)
	exited   chan struct{} // the process was reaped
	waitErr  error         // valid after exited
	stop     chan struct{} // closed by Kill: the reader stops delivering
	killOnce sync.Once
	logDone  chan struct{}
	sent     func(typ string, pid int) // Options.OnSent
}

// StartChild starts spec with its stdin and stdout as the frame channel
// and its stderr logged line by line on log. The child runs in its own
// process group, which Kill ends as a whole, and on Linux it is killed
// when this process dies, even by SIGKILL (no orphaned trainer ranks
// holding a GPU or a rendezvous port after a node is killed).
func StartChild(spec Spec, log zerolog.Logger) (*Child, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, fmt.Errorf("bridge: empty command")
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Dir = spec.Dir
	cmd.Env = append(os.Environ(), spec.Env...)
	setProcessGroup(cmd)
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return nil, fmt.Errorf("bridge: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return nil, fmt.Errorf("bridge: %w", err)
	}
	// *os.File streams go to the child as they are: no copying goroutines,
	// so Wait returns when the process exits, whoever holds the pipes.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	c := &Child{spec: spec, log: log, cmd: cmd, stdin: inW, stdout: outR, stderr: errR,
		replies: make(chan readResult, 1), readDone: make(chan struct{}), exited: make(chan struct{}),
		stop: make(chan struct{}), logDone: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The child dies with this process (Pdeathsig, child_linux.go),
		// but Linux sends that signal when the *thread* that forked it
		// exits. Go ends a thread only when a goroutine locked to it
		// returns, so this goroutine forks and waits on a thread it holds
		// locked for the child's whole life: no other goroutine's exit can
		// take it down and the child with it.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	if err := <-started; err != nil {
		closeAll(inR, inW, outR, outW, errR, errW)
		return nil, fmt.Errorf("bridge: start %s: %w", spec, err)
	}
	closeAll(inR, outW, errW) // the child's ends
	go c.read()
	go c.logStderr()
	return c, nil
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// String names the child for logs.
func (c *Child) String() string { return "pid " + strconv.Itoa(c.Pid()) }

func (c *Child) read() {
	defer close(c.readDone)
	r := bufio.NewReaderSize(c.stdout, 1<<16)
	for {
		body, err := ReadFrame(r, 0)
		var res readResult
		switch {
		case err == io.EOF:
			return
		case err != nil:
			res.err = fmt.Errorf("%w: %w", ErrProtocol, err)
		default:
			if _, herr := DecodeHeader(body); herr != nil {
				res.err = fmt.Errorf("%w: %w", ErrProtocol, herr)
			} else if derr := DecodeFrame(body, &res.rep); derr != nil {
				res.err = fmt.Errorf("%w: %w", ErrProtocol, derr)
			}
		}
		select {
		case c.replies <- res:
		case <-c.stop:
			return
		}
		if res.err != nil {
			return // a broken stream cannot be resynchronised
		}
	}
}

func (c *Child) logStderr() {
	defer close(c.logDone)
	sc := bufio.NewScanner(c.stderr)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		c.log.Info().Int("pid", c.cmd.Process.Pid).Msg(sc.Text())
	}
}

// exitErr describes how the child ended.
func (c *Child) exitErr() error {
	select {
	case <-c.exited:
		if c.waitErr != nil {
			return fmt.Errorf("%w (%s): %v", ErrChildExited, c.spec.Argv[0], c.waitErr)
		}
		return fmt.Errorf("%w (%s): exit status 0", ErrChildExited, c.spec.Argv[0])
	default:
		return fmt.Errorf("%w (%s): its stdout closed", ErrChildExited, c.spec.Argv[0])
	}
}

// Call sends req (its header is filled in: v, type, a new id) and waits
// for the reply of type want, at most timeout (0: no deadline) and while
// ctx lives. An Error frame is returned as *ChildError; the child's exit
// as ErrChildExited; no answer in time as ErrDeadline. After any error but
// *ChildError the child's state is unknown: Kill it.
func (c *Child) Call(ctx context.Context, typ string, req frame, want string, timeout time.Duration) (Reply, error) {
	c.nextID++
	h := req.header()
	h.V, h.Type, h.ID = ProtocolVersion, typ, c.nextID
	body, err := EncodeFrame(req)
	if err != nil {
		return Reply{}, err
	}
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	werr := make(chan error, 1)
	go func() { werr <- WriteFrame(c.stdin, body) }()
	for {
		select {
		case err := <-werr:
			if err != nil {
				// The read end is gone: the child exited or closed stdin.
				c.awaitExit(time.Second)
				return Reply{}, fmt.Errorf("%s: %w", c.exitErr(), err)
			}
			werr = nil
			if c.sent != nil {
				c.sent(typ, c.Pid())
			}
		case res := <-c.replies:
			return c.check(res, h.ID, typ, want)
		case <-c.readDone:
			select {
			case res := <-c.replies:
				return c.check(res, h.ID, typ, want)
			default:
			}
			c.awaitExit(time.Second)
			return Reply{}, c.exitErr()
		case <-c.exited:
			// A reply written just before the exit may still be in the pipe.
			t := time.NewTimer(time.Second)
			select {
			case res := <-c.replies:
				t.Stop()
				return c.check(res, h.ID, typ, want)
			case <-c.readDone:
				t.Stop()
				select {
				case res := <-c.replies:
					return c.check(res, h.ID, typ, want)
				default:
				}
			case <-t.C:
			}
			return Reply{}, c.exitErr()
		case <-deadline:
			return Reply{}, fmt.Errorf("%w: no answer to %s (id %d) within %v", ErrDeadline, typ, h.ID, timeout)
		case <-ctx.Done():
			return Reply{}, ctx.Err()
		}
	}
}

func (c *Child) awaitExit(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.exited:
	case <-t.C:
	}
}

func (c *Child) check(res readResult, id uint64, typ, want string) (Reply, error) {
	if res.err != nil {
		return Reply{}, res.err
	}
	return checkReply(res.rep, id, typ, want)
}

// checkReply is r as the answer to request id of type typ: an Error frame
// is a *ChildError, anything but want with id a protocol error.
func checkReply(r Reply, id uint64, typ, want string) (Reply, error) {
	if r.Type == TypeError {
		if r.ID != id && r.ID != 0 {
			return Reply{}, fmt.Errorf("%w: Error for id %d while %s (id %d) was in flight", ErrProtocol, r.ID, typ, id)
		}
		return Reply{}, &ChildError{Code: r.Code, Field: r.Field, Message: r.Message}
	}
	if r.ID != id || r.Type != want {
		return Reply{}, fmt.Errorf("%w: got %s (id %d), want %s (id %d)", ErrProtocol, r.Type, r.ID, want, id)
	}
	return r, nil
}

// Kill ends the child's process group with SIGKILL, waits for it and
// closes the pipes. It is safe to call more than once.
func (c *Child) Kill() {
	c.killOnce.Do(func() {
		select {
		case <-c.exited: // reaped: its pid may belong to someone else now
		default:
			killGroup(c.cmd)
		}
		close(c.stop)
		c.awaitExit(10 * time.Second)
		closeAll(c.stdin, c.stdout, c.stderr)
		<-c.readDone
		<-c.logDone
	})
}

// Shutdown asks the child to exit (Shutdown → Bye) and waits up to
// timeout for it; a child that does not exit in time is killed.
func (c *Child) Shutdown(ctx context.Context, timeout time.Duration) error {
	_, err := c.Call(ctx, TypeShutdown, &Shutdown{}, TypeBye, timeout)
	if err == nil {
		_ = c.stdin.Close() // EOF for a child that reads on
		c.awaitExit(timeout)
	}
	select {
	case <-c.exited:
		c.Kill()
		if err == nil && c.waitErr != nil {
			err = fmt.Errorf("bridge: trainer child exited after Bye: %v", c.waitErr)
		}
	default:
		c.Kill()
		if err == nil {
			err = fmt.Errorf("bridge: trainer child did not exit within %v of Bye; killed", timeout)
		}
	}
	return err
}

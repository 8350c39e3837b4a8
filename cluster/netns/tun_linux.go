package netns

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// openTUN makes TUN device dev inside namespace ns (a name under
// /run/netns) and returns its file. A TUN device lives in the namespace
// of the thread that opened /dev/net/tun, and its fd keeps working from
// any namespace; so the open happens on a locked OS thread moved into ns
// and moved back. If the move back fails the thread is never unlocked,
// so the runtime ends it instead of reusing a thread in the wrong
// namespace. The device disappears when the file is closed (it is not
// persistent), so a crashed run leaves no device behind.
func openTUN(ns, dev string) (*os.File, error) {
	type res struct {
		f   *os.File
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		f, restored, err := openTUNLocked(ns, dev)
		if restored {
			runtime.UnlockOSThread()
		}
		ch <- res{f, err}
	}()
	r := <-ch
	return r.f, r.err
}

func openTUNLocked(ns, dev string) (f *os.File, restored bool, err error) {
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return nil, false, fmt.Errorf("netns: this thread's namespace: %w", err)
	}
	defer self.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return nil, true, fmt.Errorf("netns: namespace %s: %w", ns, err)
	}
	defer target.Close()
	if err := setns(target); err != nil {
		return nil, true, fmt.Errorf("netns: setns into %s: %w", ns, err)
	}
	fd, openErr := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if openErr == nil {
		// IFF_TUN: a layer-3 device (IP packets, no Ethernet header, no
		// ARP); IFF_NO_PI: no 4-byte packet-information prefix.
		req, err := unix.NewIfreq(dev)
		if err == nil {
			req.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
			err = unix.IoctlIfreq(fd, unix.TUNSETIFF, req)
		}
		if err != nil {
			unix.Close(fd)
			openErr = fmt.Errorf("ioctl TUNSETIFF %s: %w", dev, err)
		}
	}
	restored = setns(self) == nil
	if openErr != nil {
		return nil, restored, fmt.Errorf("netns: TUN device in %s (needs /dev/net/tun and CAP_NET_ADMIN): %w", ns, openErr)
	}
	// O_NONBLOCK: os.NewFile puts the fd in the runtime's poller, so a
	// Close wakes a goroutine blocked in Read.
	return os.NewFile(uintptr(fd), "tun:"+ns+"/"+dev), restored, nil
}

func setns(f *os.File) error { return unix.Setns(int(f.Fd()), unix.CLONE_NEWNET) }

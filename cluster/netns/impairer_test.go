package netns

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// pingResult is what the udpping helper prints: how many probes it sent,
// and the round trip of each that came back.
type pingResult struct {
	Sent int
	RTTs []time.Duration
}

// ping runs a UDP echo server in b and a pinger in a sending count
// probes interval apart, over n's links.
func ping(t *testing.T, n *Net, count int, interval time.Duration) pingResult {
	t.Helper()
	echo := n.Command("b", os.Args[0])
	echo.Env = append(os.Environ(), helperEnv+"=udpecho", argsEnv+`={"Addr":"`+n.Addr(1)+`:9100"}`)
	stdin, _ := echo.StdinPipe()
	out, _ := echo.StdoutPipe()
	if err := echo.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = echo.Wait() }()
	if l, err := readLine(out, 20*time.Second, "LISTEN", "ERR"); err != nil || !strings.HasPrefix(l, "LISTEN") {
		t.Fatalf("UDP echo in b: %q %v", l, err)
	}
	b, _ := json.Marshal(helperArgs{Target: n.Addr(1) + ":9100", Count: count, Interval: interval})
	p := n.Command("a", os.Args[0])
	p.Env = append(os.Environ(), helperEnv+"=udpping", argsEnv+"="+string(b))
	raw, err := p.Output()
	if err != nil {
		t.Fatalf("udpping in a: %v: %s", err, raw)
	}
	var r pingResult
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("udpping output %q: %v", raw, err)
	}
	return r
}

// TestImpairerLossAndDelay: the userspace impairer with "loss 5% delay
// 50ms" on a UDP ping between two namespaces. A probe and its echo each
// cross one impaired direction, so 0.95² of the probes come back (within
// 5 standard deviations), none in less than twice the delay; the
// impairer's own counters show it dropped about 5 % each way.
func TestImpairerLossAndDelay(t *testing.T) {
	enabled(t)
	n, err := New("a", "b")
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	how, err := n.Netem("loss 5% delay 50ms", NetemOptions{Mode: NetemUserspace, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("shaper: %s", how)
	const count = 2000
	r := ping(t, n, count, 2*time.Millisecond)
	if r.Sent != count {
		t.Fatalf("sent %d probes, want %d", r.Sent, count)
	}
	want, sd := 0.95*0.95, math.Sqrt(0.9025*0.0975/count)
	got := float64(len(r.RTTs)) / count
	if math.Abs(got-want) > 5*sd {
		t.Errorf("%d of %d probes came back (%.3f), want %.4f ± %.3f", len(r.RTTs), count, got, want, 5*sd)
	}
	slices.Sort(r.RTTs)
	if len(r.RTTs) == 0 || r.RTTs[0] < 100*time.Millisecond {
		t.Fatalf("fastest round trip %v: want at least 2 × 50ms", r.RTTs)
	}
	t.Logf("%d/%d probes back (%.1f%% lost, want %.2f%%); round trip min %v median %v max %v",
		len(r.RTTs), count, 100*(1-got), 100*(1-want), r.RTTs[0], r.RTTs[len(r.RTTs)/2], r.RTTs[len(r.RTTs)-1])
	t.Logf("impairer: %s", n.ImpairStats())
	n.imp.mu.Lock()
	ab, ba := *n.imp.links[[2]int{0, 1}], *n.imp.links[[2]int{1, 0}]
	n.imp.mu.Unlock()
	// a → b carried every probe, b → a every echo of a probe that got
	// through; every packet the impairer kept reached its host.
	if ab.Offered != count || ba.Offered != ab.Offered-ab.Dropped || len(r.RTTs) != ba.Offered-ba.Dropped {
		t.Errorf("a→b %d/%d dropped, b→a %d/%d dropped, %d back: packets lost or made outside the impairer's decisions",
			ab.Dropped, ab.Offered, ba.Dropped, ba.Offered, len(r.RTTs))
	}
	for name, l := range map[string]Link{"a→b": ab, "b→a": ba} {
		sd := math.Sqrt(float64(l.Offered) * 0.05 * 0.95)
		if math.Abs(float64(l.Dropped)-0.05*float64(l.Offered)) > 5*sd {
			t.Errorf("%s dropped %d of %d, want 5%% ± %.0f", name, l.Dropped, l.Offered, 5*sd)
		}
	}
	if err := n.LinkDown("a"); err == nil {
		t.Error("LinkDown under the userspace impairer claimed to cut a link")
	}
}

// TestImpairerPassesAllWithoutImpairment: the same TUN path with no loss
// and no delay brings every probe back: the losses above are the
// impairer's decisions, not the TUN routing's.
func TestImpairerPassesAllWithoutImpairment(t *testing.T) {
	enabled(t)
	n, err := New("a", "b")
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.Netem("loss 0% delay 0ms", NetemOptions{Mode: NetemUserspace}); err != nil {
		t.Fatal(err)
	}
	r := ping(t, n, 500, 2*time.Millisecond)
	if r.Sent != 500 || len(r.RTTs) != 500 {
		t.Errorf("%d of %d probes came back through the unimpaired TUN path, want all", len(r.RTTs), r.Sent)
	}
	if o, d := n.imp.counts(); o < 1000 || d != 0 {
		t.Errorf("impairer offered %d packets and dropped %d, want ≥ 1000 and 0", o, d)
	}
	n.Close()
	if out, _ := os.ReadFile("/proc/net/dev"); strings.Contains(string(out), tunDev) {
		// The devices lived in the namespaces, never here.
		t.Errorf("a %s device in the test's own namespace:\n%s", tunDev, out)
	}
}

// udpEcho echoes every datagram on a.Addr until stdin closes.
func udpEcho(a helperArgs) int {
	c, err := net.ListenPacket("udp4", a.Addr)
	if err != nil {
		fmt.Println("ERR", err)
		return 3
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			k, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteTo(buf[:k], from)
		}
	}()
	fmt.Println("LISTEN", c.LocalAddr())
	_, _ = os.Stdin.Read(make([]byte, 1))
	return 0
}

// udpPing sends a.Count probes (sequence number, send time) a.Interval
// apart to a.Target, waits 2 s after the last for echoes and prints a
// pingResult; each probe counts once however often it comes back.
func udpPing(a helperArgs) int {
	c, err := net.Dial("udp4", a.Target)
	if err != nil {
		fmt.Println("ERR", err)
		return 3
	}
	rtts := make(chan [2]int64, a.Count)
	go func() {
		buf := make([]byte, 64)
		for {
			k, err := c.Read(buf)
			if err != nil {
				return
			}
			if k == 16 {
				sent := int64(binary.BigEndian.Uint64(buf[8:]))
				rtts <- [2]int64{int64(binary.BigEndian.Uint64(buf)), time.Now().UnixNano() - sent}
			}
		}
	}()
	r := pingResult{}
	msg := make([]byte, 16)
	for i := range a.Count {
		binary.BigEndian.PutUint64(msg, uint64(i))
		binary.BigEndian.PutUint64(msg[8:], uint64(time.Now().UnixNano()))
		if _, err := c.Write(msg); err == nil {
			r.Sent++
		}
		time.Sleep(a.Interval)
	}
	seen := map[int64]bool{}
	end := time.After(2 * time.Second)
	for done := false; !done; {
		select {
		case x := <-rtts:
			if !seen[x[0]] {
				seen[x[0]] = true
				r.RTTs = append(r.RTTs, time.Duration(x[1]))
			}
		case <-end:
			done = true
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
	return 0
}

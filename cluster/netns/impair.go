package netns

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// ErrBadNetem: a netem spec this package cannot apply (see ParseNetem).
var ErrBadNetem = errors.New("netns: bad netem spec")

// Impairment is what one direction of a link does to each packet, as
// netem's "loss P% delay D [J]": drop it with probability Loss, else
// hold it Delay (± a uniform Jitter) before it arrives.
type Impairment struct {
	Loss   float64 // probability in [0, 1]
	Delay  time.Duration
	Jitter time.Duration // uniform in [-Jitter, +Jitter]; 0: a fixed delay
}

// String is the spec ParseNetem reads back.
func (im Impairment) String() string {
	s := "loss " + strconv.FormatFloat(im.Loss*100, 'g', -1, 64) + "% delay " + im.Delay.String()
	if im.Jitter > 0 {
		s += " " + im.Jitter.String()
	}
	return s
}

// ParseNetem reads the subset of tc-netem's syntax the userspace
// impairer applies: "loss P%" and "delay D [J]" in any order, each at
// most once, durations as Go or tc writes them ("50ms", "1.5s", "200us").
// Anything else (rate, duplicate, corrupt, reorder, a correlation) is an
// error naming the word, so a spec is never half applied.
func ParseNetem(spec string) (Impairment, error) {
	var im Impairment
	f := strings.Fields(spec)
	seen := map[string]bool{}
	for i := 0; i < len(f); i++ {
		w := f[i]
		if seen[w] {
			return im, fmt.Errorf("%w %q: %q given twice", ErrBadNetem, spec, w)
		}
		seen[w] = true
		switch w {
		case "loss":
			if i+1 >= len(f) || !strings.HasSuffix(f[i+1], "%") {
				return im, fmt.Errorf("%w %q: loss takes a percentage (loss 5%%)", ErrBadNetem, spec)
			}
			p, err := strconv.ParseFloat(strings.TrimSuffix(f[i+1], "%"), 64)
			if err != nil || p < 0 || p > 100 {
				return im, fmt.Errorf("%w %q: loss %s is not a percentage in [0, 100]", ErrBadNetem, spec, f[i+1])
			}
			im.Loss = p / 100
			i++
		case "delay":
			if i+1 >= len(f) {
				return im, fmt.Errorf("%w %q: delay takes a duration (delay 50ms)", ErrBadNetem, spec)
			}
			d, err := parseTCDuration(f[i+1])
			if err != nil {
				return im, fmt.Errorf("%w %q: delay: %w", ErrBadNetem, spec, err)
			}
			im.Delay = d
			i++
			if i+1 < len(f) {
				if j, err := parseTCDuration(f[i+1]); err == nil {
					if j > d {
						return im, fmt.Errorf("%w %q: jitter %s exceeds the delay %s", ErrBadNetem, spec, j, d)
					}
					im.Jitter = j
					i++
				}
			}
		default:
			return im, fmt.Errorf("%w %q: %q is not applied by the userspace impairer (loss and delay only)", ErrBadNetem, spec, w)
		}
	}
	if len(f) == 0 {
		return im, fmt.Errorf("%w: empty (want e.g. \"loss 5%% delay 50ms\")", ErrBadNetem)
	}
	return im, nil
}

// parseTCDuration reads a non-negative duration; tc writes "usec",
// "msec" and "sec" as well as Go's units.
func parseTCDuration(s string) (time.Duration, error) {
	for long, short := range map[string]string{"usec": "us", "msec": "ms", "sec": "s"} {
		if strings.HasSuffix(s, long) {
			s = strings.TrimSuffix(s, long) + short
			break
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a non-negative duration (50ms)", s)
	}
	return d, nil
}

// Link is the pure core of one direction of one impaired link: it
// decides each offered packet's fate (dropped, or released at a time) and
// holds the packets until then. No clock, goroutine or lock inside: the
// caller passes the time and owns the *rand.Rand, so a seed replays every
// decision. Packets leave in the order they came (a release time is never
// earlier than the one before it): with jitter this is netem under a
// FIFO, not netem's reordering, since the scenario is about loss and
// delay and reordering would only add TCP noise.
type Link struct {
	im      Impairment
	rng     *rand.Rand
	q       []held
	last    time.Time // the newest release time handed out
	Offered int       // packets offered
	Dropped int       // of them, dropped
}

type held struct {
	at  time.Time
	pkt []byte
}

// NewLink is a link with impairment im drawing from rng.
func NewLink(im Impairment, rng *rand.Rand) *Link { return &Link{im: im, rng: rng} }

// Offer takes a packet arriving at now. It reports whether the packet
// was dropped; if not, the link keeps pkt (the caller must not reuse it)
// and Due hands it back at the returned release time.
func (l *Link) Offer(now time.Time, pkt []byte) (release time.Time, dropped bool) {
	l.Offered++
	// Every packet draws the same numbers whatever the outcome, so one
	// packet's fate does not shift the draws of those after it.
	lossDraw, jitterDraw := l.rng.Float64(), l.rng.Float64()
	if lossDraw < l.im.Loss {
		l.Dropped++
		return time.Time{}, true
	}
	d := l.im.Delay
	if l.im.Jitter > 0 {
		d += time.Duration((2*jitterDraw - 1) * float64(l.im.Jitter))
	}
	release = now.Add(max(d, 0))
	if release.Before(l.last) {
		release = l.last
	}
	l.last = release
	l.q = append(l.q, held{at: release, pkt: pkt})
	return release, false
}

// Next is the release time of the oldest held packet (false: none held).
func (l *Link) Next() (time.Time, bool) {
	if len(l.q) == 0 {
		return time.Time{}, false
	}
	return l.q[0].at, true
}

// Due removes and returns, in order, every held packet whose release
// time is not after now.
func (l *Link) Due(now time.Time) [][]byte {
	n := 0
	for n < len(l.q) && !l.q[n].at.After(now) {
		n++
	}
	if n == 0 {
		return nil
	}
	out := make([][]byte, n)
	for i := range n {
		out[i] = l.q[i].pkt
	}
	l.q = append(l.q[:0], l.q[n:]...)
	return out
}

// Held is the number of packets waiting for their release time.
func (l *Link) Held() int { return len(l.q) }

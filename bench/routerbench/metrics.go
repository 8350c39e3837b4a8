package routerbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// sample is one line of the Prometheus text format that we keep: metric
// name, its le label (histogram buckets only) and value.
type sample struct {
	name  string
	le    string
	value float64
}

// parseText reads the Prometheus text exposition format, keeping only
// lines whose metric name is in keep. It is deliberately small: the
// engines' /metrics are flat counters and one-label histograms.
func parseText(r io.Reader, keep map[string]bool) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end < 0 {
			continue
		}
		name := line[:end]
		if !keep[name] {
			continue
		}
		var labels string
		rest := line[end:]
		if rest[0] == '{' {
			close := strings.LastIndexByte(rest, '}')
			if close < 0 {
				return nil, fmt.Errorf("routerbench: metrics line %q: unterminated labels", line)
			}
			labels, rest = rest[1:close], rest[close+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("routerbench: metrics line %q: no value", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("routerbench: metrics line %q: %w", line, err)
		}
		out = append(out, sample{name: name, le: labelValue(labels, "le"), value: v})
	}
	return out, sc.Err()
}

// labelValue returns the value of label k in `a="x",k="y"` ("" if
// absent). Label values of the metrics we keep hold no commas.
func labelValue(labels, k string) string {
	for _, kv := range strings.Split(labels, ",") {
		if name, v, ok := strings.Cut(kv, "="); ok && strings.TrimSpace(name) == k {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	return ""
}

// scrape GETs url/metrics and returns the kept samples.
func scrape(ctx context.Context, c *http.Client, url string, keep map[string]bool) ([]sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("routerbench: scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("routerbench: scrape %s: HTTP %d", url, resp.StatusCode)
	}
	return parseText(resp.Body, keep)
}

// bucket is one cumulative histogram bucket.
type bucket struct {
	le    float64 // upper bound; +Inf for the last
	count float64 // observations ≤ le
}

// histogramQuantile estimates the q-quantile from cumulative buckets the
// way Prometheus' histogram_quantile does: find the bucket holding rank
// q·total and interpolate linearly inside it (from 0 for the first
// bucket); a rank in the +Inf bucket returns the largest finite bound.
// NaN when there are no observations.
func histogramQuantile(q float64, bs []bucket) float64 {
	bs = slices.Clone(bs)
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	if len(bs) == 0 || bs[len(bs)-1].count == 0 {
		return math.NaN()
	}
	total := bs[len(bs)-1].count
	rank := q * total
	lower, below := 0.0, 0.0
	for _, b := range bs {
		if b.count >= rank {
			if math.IsInf(b.le, 1) {
				return lower
			}
			if b.count == below {
				return b.le
			}
			return lower + (b.le-lower)*(rank-below)/(b.count-below)
		}
		lower, below = b.le, b.count
	}
	return lower
}

// percentile returns the p-quantile (0–1) of xs by nearest rank; NaN if
// empty. xs is sorted in place.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	i := int(math.Ceil(p*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// Median returns the median of xs (mean of the middle two for an even
// count), ignoring NaNs; NaN if none.
func Median(xs []float64) float64 {
	ys := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			ys = append(ys, x)
		}
	}
	if len(ys) == 0 {
		return math.NaN()
	}
	slices.Sort(ys)
	n := len(ys)
	if n%2 == 1 {
		return ys[n/2]
	}
	return (ys[n/2-1] + ys[n/2]) / 2
}

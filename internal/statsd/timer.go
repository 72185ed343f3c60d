package statsd

import (
	"math"
	"strconv"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
)

// timerLines turns a histogram's new observations into timer lines in
// milliseconds: one per bucket that grew, at the bucket's midpoint, with
// a sample rate that makes it count as that many observations.
// Observations past the last bound get what the sum leaves them, and at
// least that bound.
func (s *Sink) timerLines(st metrics.RefStat, name, tags string) []line {
	h := st.Timer
	// Cumulative counts by bucket, the last one past every bound.
	cum := make([]uint64, 0, len(h.GetBucket())+1)
	for _, b := range h.GetBucket() {
		cum = append(cum, b.GetCumulativeCount())
	}
	cum = append(cum, h.GetSampleCount())
	prev := s.timers[st.Name]
	if len(prev.counts) != len(cum) || h.GetSampleCount() < prev.counts[len(prev.counts)-1] {
		prev = timerState{counts: make([]uint64, len(cum))} // new, or started again
	}
	var out []line
	rest := h.GetSampleSum() - prev.sum
	var lower float64
	for i := range cum {
		n := cum[i] - prev.counts[i]
		if i > 0 {
			n -= cum[i-1] - prev.counts[i-1]
		}
		if n == 0 || n > cum[i] { // none, or a wrapped difference
			if i < len(cum)-1 {
				lower = h.GetBucket()[i].GetUpperBound()
			}
			continue
		}
		var v float64
		if i < len(cum)-1 {
			upper := h.GetBucket()[i].GetUpperBound()
			v = (lower + upper) / 2
			rest -= v * float64(n)
			lower = upper
		} else {
			v = max(rest/float64(n), lower)
		}
		out = append(out, line{text: timerText(name, v, n, tags)})
	}
	if len(out) == 0 {
		return nil
	}
	// The lines of one timer are settled together, by the last.
	key, state := st.Name, timerState{counts: cum, sum: h.GetSampleSum()}
	for i := range out {
		out[i].settle = func() {}
	}
	out[len(out)-1].settle = func() { s.timers[key] = state }
	return out
}

// timerText is a timer line of n observations of seconds: in
// milliseconds, with a sample rate of 1/n when n > 1.
func timerText(name string, seconds float64, n uint64, tags string) string {
	// In milliseconds to the microsecond: finer is noise.
	text := name + ":" + number(math.Round(seconds*1e6)/1000) + "|ms"
	if n > 1 {
		text += "|@" + strconv.FormatFloat(sampleRate(n), 'g', -1, 64)
	}
	return text + tags
}

// sampleRate is the rate at which a receiver counts a line n times:
// statsd_exporter takes int(1/rate), so the rate is nudged down until
// that is n.
func sampleRate(n uint64) float64 {
	r := 1 / float64(n)
	for range 8 { // one or two steps at most
		if uint64(1/r) >= n {
			break
		}
		r = math.Nextafter(r, 0)
	}
	return r
}

package statsd

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
)

// TestSampleRate: statsd_exporter counts a timer line int(1/rate) times;
// the rate of n observations makes that n, for every n.
func TestSampleRate(t *testing.T) {
	for n := uint64(1); n <= 200_000; n++ {
		r := sampleRate(n)
		if got := uint64(1 / r); got != n {
			t.Fatalf("sampleRate(%d) = %v: counted %d times", n, r, got)
		}
	}
}

type timerSource struct{ h prometheus.Histogram }

func (s timerSource) Stats() []metrics.RefStat {
	var m dto.Metric
	s.h.Write(&m) //nolint:errcheck // a histogram always writes
	return []metrics.RefStat{{Name: "t", Timer: m.GetHistogram()}}
}

// TestTimerLines: a timer's new observations are one line per bucket
// that grew, at its midpoint in milliseconds, counted by the sample rate;
// those past the last bound get what the sum leaves them, at least that
// bound; a second flush sends only the observations since.
func TestTimerLines(t *testing.T) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", Buckets: []float64{0.001, 0.01}})
	s, err := New(Options{Addr: "127.0.0.1:1", Network: "udp", Source: timerSource{h}})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []float64{0.0002, 0.0008, 0.004, 0.5, 0.7} {
		h.Observe(v)
	}
	got := texts(s)
	// 0.5 ms twice; 5.5 ms; the rest of the sum, (1.2045 - 0.001 -
	// 0.0055) / 2 s, twice.
	want := []string{"t:0.5|ms|@0.5", "t:5.5|ms", "t:599.25|ms|@0.5"}
	if !equalRounded(got, want) {
		t.Errorf("first flush: %q, want %q", got, want)
	}
	h.Observe(0.003)
	if got, want := texts(s), []string{"t:5.5|ms"}; !equalRounded(got, want) {
		t.Errorf("second flush: %q, want %q", got, want)
	}
	if got := texts(s); len(got) != 0 {
		t.Errorf("flush with nothing new: %q", got)
	}
}

// texts formats the lines of a flush and settles them, as a send that
// succeeded would.
func texts(s *Sink) []string {
	var out []string
	for _, l := range s.lines(s.o.Source.Stats()) {
		out = append(out, l.text)
		l.settle()
	}
	return out
}

// equalRounded compares lines whose millisecond values may carry float
// noise.
func equalRounded(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		var gv, wv float64
		var gs, ws string
		if !parseTimer(got[i], &gv, &gs) || !parseTimer(want[i], &wv, &ws) || gs != ws || math.Abs(gv-wv) > 1e-6 {
			return false
		}
	}
	return true
}

func parseTimer(line string, v *float64, rest *string) bool {
	var name string
	for i := range line {
		if line[i] == ':' {
			name = line[:i]
			line = line[i+1:]
			break
		}
	}
	for i := range line {
		if line[i] == '|' {
			f, err := parseFloat(line[:i])
			if err != nil {
				return false
			}
			*v, *rest = f, name+line[i:]
			return true
		}
	}
	return false
}

func parseFloat(s string) (float64, error) { return strconv.ParseFloat(s, 64) }

type namesSource []string

func (n namesSource) Stats() []metrics.RefStat {
	var out []metrics.RefStat
	for _, name := range n {
		out = append(out, metrics.RefStat{Name: name, Value: 1})
	}
	return out
}

// TestLineSafe: a name with a request's newline in it (a detailed_metric
// rule's value) stays one line: the client cannot add stats of its own.
func TestLineSafe(t *testing.T) {
	for _, f := range []Format{Statsd, DogStatsD} {
		s, err := New(Options{Addr: "127.0.0.1:1", Network: "udp", Format: f, Tags: map[string]string{"k": "a\nb"},
			Source: namesSource{"ratelimit.service.rate_limit.edge.user_x\nevil:1|c\r.total_hits"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range texts(s) {
			if strings.ContainsAny(l, "\n\r") || strings.Count(l, ":") != 1+strings.Count(l, "|#") || strings.Count(l, "|") != 1+strings.Count(l, "|#") {
				t.Errorf("format %d: line %q is not one stat", f, l)
			}
		}
	}
}

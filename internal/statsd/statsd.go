// Package statsd pushes the sidecar's metrics to a statsd or DogStatsD
// receiver, under the stat names of envoyproxy/ratelimit (the reference),
// so that a statsd_exporter mapping, a Datadog agent and the dashboards
// built on the reference's stats keep working after the swap.
//
// A Sink reads its values from our Prometheus registry at each flush
// (metrics.Reference), so the decisions pay nothing for it. It sends from
// its own goroutine (Run), with every dial and write bounded by a
// timeout; a receiver that is down, refuses or does not read costs the
// decisions nothing and shows in the Errors counter. Nothing is queued:
// what a failed flush did not hand to the network is sent by the next.
package statsd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
)

// Format is how stats and their tags are written.
type Format uint8

const (
	// Statsd is plain statsd, as the reference's statsd client writes
	// it: tags go into the name, as .__key=value after it.
	Statsd Format = iota
	// DogStatsD is Datadog's statsd: tags as |#key:value.
	DogStatsD
)

// ParseFormat parses statsd or dogstatsd.
func ParseFormat(s string) (Format, error) {
	switch s {
	case "statsd":
		return Statsd, nil
	case "dogstatsd":
		return DogStatsD, nil
	}
	return 0, fmt.Errorf("want statsd or dogstatsd, got %q", s)
}

// MaxDatagram is the most bytes of one UDP datagram: Datadog's optimal
// UDP payload, which fits an Ethernet MTU with room for headers.
const MaxDatagram = 1432

// MaxUnixDatagram is the most bytes of one datagram on a Unix socket: the
// Datadog agent's default dogstatsd_buffer_size.
const MaxUnixDatagram = 8192

// Source gives the stats to send: metrics.Reference.
type Source interface {
	Stats() []metrics.RefStat
}

// Options configure a Sink.
type Options struct {
	// Addr is the receiver's host:port, or with unixgram a socket's path.
	Addr string
	// Network is udp, tcp or unixgram (a Datadog agent's socket).
	Network string
	Format  Format
	// GlobalTags, key:value, come first on every DogStatsD line, as a
	// Datadog client adds DD_ENV, DD_SERVICE, DD_VERSION and
	// DD_ENTITY_ID (see DatadogEnvTags).
	GlobalTags []string
	// Tags are added to every stat (the reference's EXTRA_TAGS); their
	// values' '.', ':' and '|' become '_', as the reference's client
	// does. Entries with an empty key or value are dropped.
	Tags map[string]string
	// Mogrifiers rename stats and tag them, with DogStatsD only: the
	// first whose pattern matches a name applies.
	Mogrifiers []Mogrifier
	// Timeout bounds each dial and each flush's writes; 0: 2s.
	Timeout time.Duration
	Source  Source
	// Errors counts failed flushes: dials and writes. Nil: not counted.
	Errors prometheus.Counter
	Log    *zap.Logger
}

// Sink sends stats to one receiver. Flush may be called from one
// goroutine at a time; Run calls it.
type Sink struct {
	o       Options
	tags    string // the tags as each line carries them
	failing bool   // the last flush of Run failed; Run's own

	mu   sync.Mutex // guards the fields below, and serialises Flush
	conn net.Conn   // nil until dialled, and after a failure
	sent map[string]float64
	// timers holds, per timer, the cumulative bucket counts and sum
	// already sent.
	timers map[string]timerState
}

type timerState struct {
	counts []uint64
	sum    float64
}

// New returns a Sink; it dials at its first flush.
func New(o Options) (*Sink, error) {
	switch o.Network {
	case "udp", "tcp":
		if _, _, err := net.SplitHostPort(o.Addr); err != nil {
			return nil, fmt.Errorf("statsd address: want host:port, got %q", o.Addr)
		}
	case "unixgram":
		if o.Addr == "" {
			return nil, errors.New("statsd address: want a socket's path")
		}
	default:
		return nil, fmt.Errorf("statsd network: want udp, tcp or unixgram, got %q", o.Network)
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	tags := formatTags(o.Format, o.Tags)
	if o.Format == DogStatsD && len(o.GlobalTags) > 0 {
		tags = "|#" + strings.Join(o.GlobalTags, ",") + strings.Replace(tags, "|#", ",", 1)
	}
	return &Sink{o: o, tags: tags, sent: map[string]float64{}, timers: map[string]timerState{}}, nil
}

// Run flushes every interval until ctx ends, then flushes once more
// within the timeout, and closes the connection.
func (s *Sink) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.flushLogged()
		case <-ctx.Done():
			s.flushLogged()
			s.Close()
			return
		}
	}
}

// flushLogged flushes, and logs when flushes start failing and when
// they succeed again: a receiver that is down is one line, not one per
// flush (Errors counts each).
func (s *Sink) flushLogged() {
	err := s.Flush()
	switch {
	case err != nil && !s.failing:
		s.o.Log.Warn("statsd flush failed; the stats not sent are sent by the next flush that succeeds", zap.String("addr", s.o.Addr), zap.Error(err))
	case err == nil && s.failing:
		s.o.Log.Info("statsd flushes succeed again", zap.String("addr", s.o.Addr))
	}
	s.failing = err != nil
}

// Close closes the connection, if any.
func (s *Sink) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop()
}

func (s *Sink) drop() {
	if s.conn != nil {
		s.conn.Close() //nolint:errcheck // a connection given up on
		s.conn = nil
	}
}

// line is one stat line and what sending it settles.
type line struct {
	text   string
	settle func()
}

// Flush sends what each stat grew by since the last flush that sent it:
// counters as counts, timers as the observations since. A failure is
// counted in Errors and returned; the stats it did not hand to the
// network are sent by the next flush.
func (s *Sink) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	lines := s.lines(s.o.Source.Stats())
	if len(lines) == 0 {
		return nil
	}
	err := s.send(lines)
	if err != nil {
		s.drop()
		if s.o.Errors != nil {
			s.o.Errors.Inc()
		}
	}
	return err
}

// lines formats the stats that changed. requires s.mu held.
func (s *Sink) lines(stats []metrics.RefStat) []line {
	var out []line
	for _, st := range stats {
		name, tags := s.nameTags(st.Name)
		if st.Timer != nil {
			out = append(out, s.timerLines(st, name, tags)...)
			continue
		}
		delta := st.Value - s.sent[st.Name]
		if delta < 0 { // our counter started again
			delta = st.Value
		}
		if delta == 0 {
			continue
		}
		key, v := st.Name, st.Value
		out = append(out, line{
			text:   name + ":" + number(delta) + "|c" + tags,
			settle: func() { s.sent[key] = v },
		})
	}
	return out
}

// nameTags is the name a stat is sent under and the tags it carries,
// as its line's suffix.
func (s *Sink) nameTags(name string) (string, string) {
	name = nameChars.Replace(lineSafe(name))
	if s.o.Format == Statsd {
		return name + s.tags, ""
	}
	for _, m := range s.o.Mogrifiers {
		if match := m.Pattern.FindStringSubmatch(name); match != nil {
			renamed, tags := m.apply(match)
			return renamed, joinTags(s.tags, tags)
		}
	}
	return name, s.tags
}

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

// number formats a value: an integer without a point, as the
// reference's client does.
func number(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// send writes the lines: in datagrams of at most MaxDatagram bytes over
// UDP, in one stream over TCP, each line ending in a newline. Each line
// handed to the network is settled. requires s.mu held.
func (s *Sink) send(lines []line) error {
	if s.conn == nil {
		d := net.Dialer{Timeout: s.o.Timeout}
		c, err := d.Dial(s.o.Network, s.o.Addr)
		if err != nil {
			return fmt.Errorf("dial %s %s: %w", s.o.Network, s.o.Addr, err)
		}
		s.conn = c
	}
	if err := s.conn.SetWriteDeadline(time.Now().Add(s.o.Timeout)); err != nil {
		return err
	}
	if s.o.Network == "tcp" {
		return s.sendStream(lines)
	}
	return s.sendDatagrams(lines)
}

func (s *Sink) sendStream(lines []line) error {
	var buf []byte
	ends := make([]int, len(lines))
	for i, l := range lines {
		buf = append(append(buf, l.text...), '\n')
		ends[i] = len(buf)
	}
	n, err := s.conn.Write(buf)
	for i, l := range lines {
		if ends[i] <= n {
			l.settle()
		}
	}
	if err != nil {
		return fmt.Errorf("write tcp %s: %w", s.o.Addr, err)
	}
	return nil
}

func (s *Sink) sendDatagrams(lines []line) error {
	var errs []error
	size := MaxDatagram
	if s.o.Network == "unixgram" {
		size = MaxUnixDatagram
	}
	buf := make([]byte, 0, size)
	var pending []line
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if _, err := s.conn.Write(buf); err != nil {
			errs = append(errs, err)
		} else {
			for _, l := range pending {
				l.settle()
			}
		}
		buf, pending = buf[:0], pending[:0]
	}
	for _, l := range lines {
		if len(buf) > 0 && len(buf)+1+len(l.text) > size {
			flush()
		}
		if len(buf) > 0 {
			buf = append(buf, '\n')
		}
		buf = append(buf, l.text...)
		pending = append(pending, l)
	}
	flush()
	if len(errs) > 0 {
		// One error a flush: a receiver that is down refuses them all.
		return fmt.Errorf("write %s %s: %w (%d of the datagrams)", s.o.Network, s.o.Addr, errs[0], len(errs))
	}
	return nil
}

// ddEnvTags are the variables a Datadog client turns into tags of every
// stat, in its order.
var ddEnvTags = []struct{ env, tag string }{
	{"DD_ENTITY_ID", "dd.internal.entity_id"}, {"DD_ENV", "env"}, {"DD_SERVICE", "service"}, {"DD_VERSION", "version"},
}

// DatadogEnvTags returns the global tags a Datadog client adds from the
// environment (Datadog's unified service tagging, and the pod's entity
// ID for origin detection), for Options.GlobalTags.
func DatadogEnvTags(getenv func(string) (string, bool)) []string {
	var out []string
	for _, e := range ddEnvTags {
		if v, ok := getenv(e.env); ok && v != "" {
			out = append(out, e.tag+":"+v)
		}
	}
	return out
}

// lineSafe replaces the control characters of a name, which a request's
// values (in a detailed_metric rule's names) may hold, with '_': a
// newline would end the line and start one of the client's making.
func lineSafe(name string) string {
	if !strings.ContainsFunc(name, unicode.IsControl) {
		return name
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '_'
		}
		return r
	}, name)
}

// nameChars replaces the characters that end a stat's name.
var nameChars = strings.NewReplacer(":", "_", "|", "_")

// replaceChars replaces the characters that the reference's client
// replaces in tag values.
var replaceChars = strings.NewReplacer(".", "_", ":", "_", "|", "_")

// formatTags is the suffix of every line's name (statsd) or line
// (DogStatsD) that carries tags, sorted by key.
func formatTags(f Format, tags map[string]string) string {
	keys := make([]string, 0, len(tags))
	for k, v := range tags {
		if k != "" && v != "" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		v := lineSafe(replaceChars.Replace(tags[k]))
		switch {
		case f == Statsd:
			b.WriteString(".__" + k + "=" + v)
		case i == 0:
			b.WriteString("|#" + k + ":" + v)
		default:
			b.WriteString("," + k + ":" + v)
		}
	}
	return b.String()
}

// joinTags adds DogStatsD tags (key:value) to a line's tag suffix.
func joinTags(suffix string, tags []string) string {
	if len(tags) == 0 {
		return suffix
	}
	if suffix == "" {
		return "|#" + strings.Join(tags, ",")
	}
	return suffix + "," + strings.Join(tags, ",")
}

// Mogrifier renames a DogStatsD stat whose name its pattern matches, and
// tags it: $0, $1, ... in Name and in the values of Tags are the match
// and its groups, as in the reference's DOG_STATSD_MOGRIFIER_* settings.
type Mogrifier struct {
	Pattern *regexp.Regexp
	Name    string
	Tags    map[string]string
}

var groupRef = regexp.MustCompile(`\$\d+`)

func expand(template string, match []string) string {
	return groupRef.ReplaceAllStringFunc(template, func(ref string) string {
		i, err := strconv.Atoi(ref[1:])
		if err != nil || i >= len(match) {
			return ref
		}
		return match[i]
	})
}

// apply returns the new name and the tags, sorted by key.
func (m Mogrifier) apply(match []string) (string, []string) {
	keys := make([]string, 0, len(m.Tags))
	for k := range m.Tags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	tags := make([]string, len(keys))
	for i, k := range keys {
		tags[i] = k + ":" + expand(m.Tags[k], match)
	}
	return expand(m.Name, match), tags
}

// CheckMogrifier reports what is missing from a mogrifier.
func CheckMogrifier(m Mogrifier) error {
	var errs []error
	if m.Pattern == nil {
		errs = append(errs, errors.New("no pattern"))
	}
	if m.Name == "" {
		errs = append(errs, errors.New("no name"))
	}
	for k, v := range m.Tags {
		if k == "" || v == "" {
			errs = append(errs, fmt.Errorf("tag %q: want a key and a value", k))
		}
	}
	return errors.Join(errs...)
}

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
	"strconv"
	"strings"
	"sync"
	"time"

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

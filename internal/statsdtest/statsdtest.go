// Package statsdtest runs, for tests, a real statsd receiver on a
// loopback port, over UDP or TCP: prometheus/statsd_exporter's own line
// parser, mapper and exporter, as a statsd_exporter beside
// envoyproxy/ratelimit runs them, feeding a Prometheus registry that
// tests read. It keeps the raw lines too.
package statsdtest

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/statsd_exporter/pkg/event"
	"github.com/prometheus/statsd_exporter/pkg/exporter"
	"github.com/prometheus/statsd_exporter/pkg/line"
	"github.com/prometheus/statsd_exporter/pkg/mapper"
)

// Receiver is a statsd_exporter on a loopback port. It is safe for
// concurrent use.
type Receiver struct {
	// Addr is the host:port it listens on.
	Addr string
	// Registry holds the Prometheus metrics the exporter made of what it
	// received.
	Registry *prometheus.Registry

	parser       *line.Parser
	sampleErrors *prometheus.CounterVec
	counters     [3]prometheus.Counter // samples, tag errors, tags received
	logger       *slog.Logger

	mu     sync.Mutex // guards lines and serialises handing events over
	lines  []string
	events chan event.Events
	added  chan struct{} // signalled, without blocking, when lines arrive
}

// Start starts a receiver on network (udp or tcp), mapping names with
// mapping (statsd_exporter's YAML; empty: none), with DogStatsD tags
// parsed if dogstatsd. It stops at cleanup.
func Start(t testing.TB, network, mapping string, dogstatsd bool) *Receiver {
	t.Helper()
	return StartOn(t, network, "127.0.0.1:0", mapping, dogstatsd)
}

// StartOn is Start on a loopback address of the caller's choice.
func StartOn(t testing.TB, network, addr, mapping string, dogstatsd bool) *Receiver {
	t.Helper()
	m := &mapper.MetricMapper{}
	if err := m.InitFromYAMLString(mapping); err != nil {
		t.Fatalf("statsd_exporter mapping: %v", err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := &Receiver{
		Registry:     prometheus.NewRegistry(),
		parser:       line.NewParser(),
		sampleErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sample_errors"}, []string{"reason"}),
		logger:       logger,
		events:       make(chan event.Events),
		added:        make(chan struct{}, 1),
	}
	for i := range r.counters {
		r.counters[i] = prometheus.NewCounter(prometheus.CounterOpts{Name: "c"})
	}
	if dogstatsd {
		r.parser.EnableDogstatsdParsing()
	}
	counterVec := func(label string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{label})
	}
	ex := exporter.NewExporter(r.Registry, m, logger, counterVec("action"), prometheus.NewCounter(prometheus.CounterOpts{Name: "u"}),
		counterVec("reason"), counterVec("type"), counterVec("type"), prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g"}, []string{"type"}))
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		ex.Listen(r.events)
	}()
	var wg sync.WaitGroup
	var closer io.Closer
	switch network {
	case "udp":
		ua, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := net.ListenUDP("udp", ua)
		if err != nil {
			t.Fatal(err)
		}
		r.Addr, closer = conn.LocalAddr().String(), conn
		wg.Go(func() { r.readUDP(conn) })
	case "tcp":
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		r.Addr, closer = lis.Addr().String(), lis
		conns := &connSet{}
		wg.Go(func() { r.acceptTCP(lis, conns, &wg) })
		t.Cleanup(conns.closeAll)
	default:
		t.Fatalf("statsdtest: network %q", network)
	}
	t.Cleanup(func() {
		closer.Close()
		wg.Wait()
		close(r.events)
		<-listened
	})
	return r
}

func (r *Receiver) readUDP(conn *net.UDPConn) {
	buf := make([]byte, 65535)
	for {
		n, _, err := conn.ReadFromUDP(buf)
		if err != nil {
			return
		}
		r.handle(strings.Split(string(buf[:n]), "\n"))
	}
}

type connSet struct {
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func (s *connSet) add(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns = append(s.conns, c)
	return true
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, c := range s.conns {
		c.Close()
	}
}

func (r *Receiver) acceptTCP(lis net.Listener, conns *connSet, wg *sync.WaitGroup) {
	for {
		c, err := lis.Accept()
		if err != nil {
			conns.closeAll()
			return
		}
		if !conns.add(c) {
			c.Close()
			return
		}
		wg.Go(func() {
			defer c.Close()
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				r.handle([]string{sc.Text()})
			}
		})
	}
}

// handle parses lines and hands their events to the exporter, returning
// once it has applied them.
func (r *Receiver) handle(lines []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var events event.Events
	for _, l := range lines {
		if l == "" {
			continue
		}
		r.lines = append(r.lines, l)
		events = append(events, r.parser.LineToEvents(l, *r.sampleErrors, r.counters[0], r.counters[1], r.counters[2], r.logger)...)
	}
	r.events <- events
	r.events <- nil // taken once the exporter has applied the events before
	select {
	case r.added <- struct{}{}:
	default:
	}
}

// Lines returns the lines received so far.
func (r *Receiver) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// SampleErrors returns how many samples the parser refused, by reason.
func (r *Receiver) SampleErrors() map[string]float64 {
	out := map[string]float64{}
	ch := make(chan prometheus.Metric, 16)
	go func() {
		r.sampleErrors.Collect(ch)
		close(ch)
	}()
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err == nil {
			out[d.GetLabel()[0].GetValue()] = d.GetCounter().GetValue()
		}
	}
	return out
}

// Wait waits up to timeout until done, called after each arrival, is
// true; it reports whether it was.
func (r *Receiver) Wait(timeout time.Duration, done func() bool) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		if done() {
			return true
		}
		select {
		case <-r.added:
		case <-t.C:
			return done()
		}
	}
}

// Value returns the value of the exporter's series name with exactly
// labels: a counter's or gauge's value, a histogram's sample count.
func (r *Receiver) Value(name string, labels map[string]string) (float64, bool) {
	fams, err := r.Registry.Gather()
	if err != nil {
		return 0, false
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// Names returns the names of the exporter's metric families.
func (r *Receiver) Names() []string {
	fams, _ := r.Registry.Gather()
	var out []string
	for _, f := range fams {
		out = append(out, f.GetName())
	}
	return out
}

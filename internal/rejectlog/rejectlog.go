// Package rejectlog writes the rejection log: a line for each request
// answered OVER_LIMIT saying why and what decided, at a bounded rate,
// with descriptor values hashed unless asked otherwise.
package rejectlog

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// LoggerName names the logger of the rejection log, whose lines the
// log's sampling leaves alone: the log bounds their rate itself, and
// counts what it leaves out.
const LoggerName = "rejections"

// Message is every rejection line's message.
const Message = "request over limit"

// UsageMessage is the message of a line whose over descriptors are
// all usage charges that went over: counted in full, into debt, for a
// request that was served (see charged).
const UsageMessage = "usage charge over limit"

// MaxRate bounds Options.Rate: far above what a log
// should take, and low enough for the bucket's arithmetic in ns.
const MaxRate = 1_000_000

// Values is how logs show descriptor values and counter keys, which may
// hold secrets (API keys, user ids).
type Values bool

const (
	Hashed Values = false // sha256:<first 12 hex digits>
	Plain  Values = true
)

// ParseValues reads "hash" or "plain".
func ParseValues(s string) (Values, error) {
	switch s {
	case "hash":
		return Hashed, nil
	case "plain":
		return Plain, nil
	}
	return Hashed, fmt.Errorf("want hash or plain, got %q", s)
}

// Text shows s, a value or a key.
func (v Values) Text(s string) string {
	if v == Plain {
		return s
	}
	return Hash(s)
}

// Descriptor shows entries as `explain` takes them, values as v says.
func (v Values) Descriptor(entries []limits.Entry) string {
	return limits.FormatEntries(entries, v.Text)
}

// Hash is "sha256:" and the first 12 hex digits of s's SHA-256: enough
// to tell values apart in a log and to check a guess (printf %s VALUE |
// sha256sum), not to read them. Values of few possibilities (an IP
// address) can be found by trying them all.
func Hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:6])
}

// Log writes one line per request answered OVER_LIMIT: the
// domain, the descriptors, and for each descriptor over its limit the
// rule, the limit, the counter's key, what remains and when it resets,
// and what decided: the backend, the deny cache, or a failure mode (a
// lease only admits). It implements envoy.Rejections.
//
// Lines are bounded by a token bucket shared by every request: rate a
// second, in bursts of up to burst. A rejection the bucket leaves out is
// counted (Suppressed, and the next line's not_logged), so a flood of
// rejected requests costs the log a few lines a second. With the log's
// level above the lines' level, a rejection costs one level check.
//
// It is safe for concurrent use; the zero value is not usable.
type Log struct {
	log    *zap.Logger
	level  zapcore.Level
	values Values
	store  string // the backend's name, for decisions it made
	now    func() time.Time

	epoch     time.Time
	interval  int64        // ns between lines at the steady rate
	tolerance int64        // ns the bucket may run ahead: (burst - 1) intervals
	tat       atomic.Int64 // ns after epoch at which the bucket is full again

	notLogged  atomic.Uint64 // rejections left out since the last line
	suppressed atomic.Uint64 // rejections left out, ever
}

// Options configure a Log.
type Options struct {
	Level  zapcore.Level // of the lines
	Rate   float64       // lines a second, in bursts of as many; above 0, at most MaxRate
	Values Values
	Store  string           // the backend's name, for the decisions it made
	Now    func() time.Time // nil: time.Now
}

// New returns a rejection log writing through log.
func New(log *zap.Logger, o Options) *Log {
	if o.Now == nil {
		o.Now = time.Now
	}
	rate := min(max(o.Rate, 1e-9), MaxRate)
	burst := max(1, math.Floor(rate))
	interval := int64(math.Max(1, float64(time.Second)/rate))
	return &Log{
		log:       log.Named(LoggerName),
		level:     o.Level,
		values:    o.Values,
		store:     o.Store,
		now:       o.Now,
		epoch:     o.Now(),
		interval:  interval,
		tolerance: int64(burst-1) * interval,
	}
}

// Rejected logs the rejection of req, decided in d, if the level and the
// rate allow.
func (r *Log) Rejected(req *limits.Request, d *limits.Decision) {
	if !r.log.Core().Enabled(r.level) {
		return
	}
	if !r.take() {
		r.notLogged.Add(1)
		r.suppressed.Add(1)
		return
	}
	msg := Message
	if charged(d) {
		msg = UsageMessage
	}
	ce := r.log.Check(r.level, msg)
	if ce == nil {
		return
	}
	fields := []zap.Field{
		zap.String("domain", req.Domain),
		zap.Array("descriptors", descriptorsField{req, r.values}),
		zap.Array("over", overField{req, d, r.values}),
		zap.String("decided_by", r.decidedBy(d)),
	}
	if refunded(d) {
		// The request's refunds were given back all the same.
		fields = append(fields, zap.Array("refunded", refundedField{d}))
	}
	if d.StoreErr != nil {
		fields = append(fields, zap.NamedError("store_error", d.StoreErr))
	}
	fields = append(fields, zap.Uint64("not_logged", r.notLogged.Swap(0)))
	ce.Write(fields...)
}

// take takes a line from the bucket, if it holds one: GCRA on one atomic,
// so that concurrent rejections share no lock.
func (r *Log) take() bool {
	now := r.now().Sub(r.epoch).Nanoseconds()
	for {
		tat := r.tat.Load()
		t := max(tat, now)
		if t-now > r.tolerance {
			return false
		}
		if r.tat.CompareAndSwap(tat, t+r.interval) {
			return true
		}
	}
}

// Suppressed returns how many rejections the rate left out of the log:
// none for a nil log (--log-rejections off).
func (r *Log) Suppressed() uint64 {
	if r == nil {
		return 0
	}
	return r.suppressed.Load()
}

// decidedBy names what decided d.
func (r *Log) decidedBy(d *limits.Decision) string {
	switch {
	case d.Fallback != limits.FailDefault:
		return "failure_mode_" + d.Fallback.String()
	case d.DecidedBy() != "":
		return d.DecidedBy()
	}
	return r.store
}

// descriptorsField is a request's descriptors, as `explain` takes them.
type descriptorsField struct {
	req    *limits.Request
	values Values
}

func (f descriptorsField) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for i := range f.req.Descriptors {
		enc.AppendString(f.values.Descriptor(f.req.Descriptors[i].Entries))
	}
	return nil
}

// refunded reports whether d has a refund of some hits
// (limits.Check.Refund).
func refunded(d *limits.Decision) bool {
	for _, c := range d.Checks() {
		if c.Refund && c.Hits > 0 {
			return true
		}
	}
	return false
}

// refundedField is the descriptors of a decision that gave hits back:
// their index and the hits, once per descriptor.
type refundedField struct{ d *limits.Decision }

func (f refundedField) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	last := -1
	for j, c := range f.d.Checks() {
		if i := f.d.Descriptor(j); c.Refund && c.Hits > 0 && i != last {
			last = i
			if err := enc.AppendObject(refundedDescriptor{i, c.Hits}); err != nil {
				return err
			}
		}
	}
	return nil
}

type refundedDescriptor struct {
	i    int
	hits uint64
}

func (r refundedDescriptor) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddInt("descriptor", r.i)
	enc.AddUint64("hits", r.hits)
	return nil
}

// overField is the descriptors of a decision that are over their limit.
type overField struct {
	req    *limits.Request
	d      *limits.Decision
	values Values
}

func (f overField) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for i := range f.d.Statuses {
		if f.d.Statuses[i].Code != limits.OverLimit {
			continue
		}
		if err := enc.AppendObject(overStatus{f, i}); err != nil {
			return err
		}
	}
	return nil
}

// overStatus is descriptor i of a decision, over its limit.
type overStatus struct {
	overField
	i int
}

func (s overStatus) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	st := &s.d.Statuses[s.i]
	enc.AddInt("descriptor", s.i)
	switch {
	case s.i < len(s.req.Descriptors) && s.req.Descriptors[s.i].Override != nil:
		enc.AddString("rule", "descriptor.limit") // Envoy's own limit
	case st.Rule != nil:
		enc.AddString("rule", st.Rule.Name)
	}
	if st.Limit != nil {
		enc.AddString("limit", st.Limit.String())
		if c := s.check(st.Limit); c != nil {
			enc.AddString("key", s.values.Text(c.Key))
			if c.Usage && c.Hits > 0 {
				enc.AddUint64("usage_charge", c.Hits)
			}
		}
	}
	enc.AddUint64("remaining", st.Remaining)
	enc.AddString("reset", st.Reset.String())
	return nil
}

// check returns descriptor i's check of l, or nil.
func (s overStatus) check(l *limits.Limit) *limits.Check {
	return checkOf(s.d, s.i, l)
}

// checkOf returns descriptor i's check of l in d, or nil.
func checkOf(d *limits.Decision, i int, l *limits.Limit) *limits.Check {
	checks := d.Checks()
	for j := range checks {
		if d.Descriptor(j) == i && checks[j].Limit == l {
			return &checks[j]
		}
	}
	return nil
}

// charged reports whether every descriptor of d that is over was over
// on a usage charge: the request was served already, and its usage,
// counted in full, took the limit into debt. Envoy ignores the answer to
// such a call (apply_on_stream_done); the line says so, as it is no
// rejection of a request.
func charged(d *limits.Decision) bool {
	any := false
	for i := range d.Statuses {
		st := &d.Statuses[i]
		if st.Code != limits.OverLimit {
			continue
		}
		c := checkOf(d, i, st.Limit)
		if c == nil || !c.Usage || c.Hits == 0 {
			return false
		}
		any = true
	}
	return any
}

// Unsampled returns a log core that hands the rejection log's lines to
// all and every other entry to sampled: the rejection log bounds its rate
// itself, and must not lose lines it counts as written.
func Unsampled(sampled, all zapcore.Core) zapcore.Core {
	return sampledExcept{sampled: sampled, all: all, name: LoggerName}
}

// sampledExcept is a log core that samples every entry but those of the
// logger named name.
type sampledExcept struct {
	sampled, all zapcore.Core
	name         string
}

func (c sampledExcept) Enabled(l zapcore.Level) bool { return c.all.Enabled(l) }

func (c sampledExcept) With(fs []zapcore.Field) zapcore.Core {
	return sampledExcept{c.sampled.With(fs), c.all.With(fs), c.name}
}

func (c sampledExcept) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.LoggerName == c.name {
		return c.all.Check(e, ce)
	}
	return c.sampled.Check(e, ce)
}

// Write is never called: Check hands entries to the chosen core.
func (c sampledExcept) Write(e zapcore.Entry, fs []zapcore.Field) error { return c.all.Write(e, fs) }

func (c sampledExcept) Sync() error { return c.all.Sync() }

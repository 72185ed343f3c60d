package main

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

// rejectionLogger names the logger of the rejection log, whose lines the
// log's sampling leaves alone: the log bounds their rate itself, and
// counts what it leaves out.
const rejectionLogger = "rejections"

// rejectionMessage is every rejection line's message.
const rejectionMessage = "request over limit"

// usageOverMessage is the message of a line whose over descriptors are
// all usage charges that went over: counted in full, into debt, for a
// request that was served (see charged).
const usageOverMessage = "usage charge over limit"

// maxRejectionRate bounds --log-rejections-rate: far above what a log
// should take, and low enough for the bucket's arithmetic in ns.
const maxRejectionRate = 1_000_000

// rejectionSettings are the --log-rejections flags.
type rejectionSettings struct {
	level  string  // off, debug or info
	rate   float64 // lines per second
	values string  // hash or plain
}

// check validates the flags.
func (r *rejectionSettings) check() error {
	switch r.level {
	case "off", "debug", "info":
	default:
		return fmt.Errorf("--log-rejections: want off, debug or info, got %q", r.level)
	}
	if !(r.rate > 0) || r.rate > maxRejectionRate {
		return fmt.Errorf("--log-rejections-rate: want lines per second above 0 and at most %d, got %v", maxRejectionRate, r.rate)
	}
	if _, err := parseValueMode(r.values); err != nil {
		return fmt.Errorf("--log-rejections-values: %w", err)
	}
	return nil
}

// valueMode is how logs show descriptor values and counter keys, which
// may hold secrets (API keys, user ids).
type valueMode bool

const (
	valuesHashed valueMode = false // sha256:<first 12 hex digits>
	valuesPlain  valueMode = true
)

func parseValueMode(s string) (valueMode, error) {
	switch s {
	case "hash":
		return valuesHashed, nil
	case "plain":
		return valuesPlain, nil
	}
	return valuesHashed, fmt.Errorf("want hash or plain, got %q", s)
}

// text shows s, a value or a key.
func (m valueMode) text(s string) string {
	if m == valuesPlain {
		return s
	}
	return hashText(s)
}

// descriptor shows entries as `explain` takes them, values as m says.
func (m valueMode) descriptor(entries []limits.Entry) string {
	return limits.FormatEntries(entries, m.text)
}

// hashText is "sha256:" and the first 12 hex digits of s's SHA-256: enough
// to tell values apart in a log and to check a guess (printf %s VALUE |
// sha256sum), not to read them. Values of few possibilities (an IP
// address) can be found by trying them all.
func hashText(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:6])
}

// rejectionLog writes one line per request answered OVER_LIMIT: the
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
type rejectionLog struct {
	log    *zap.Logger
	level  zapcore.Level
	values valueMode
	store  string // the backend's name, for decisions it made
	now    func() time.Time

	epoch     time.Time
	interval  int64        // ns between lines at the steady rate
	tolerance int64        // ns the bucket may run ahead: (burst - 1) intervals
	tat       atomic.Int64 // ns after epoch at which the bucket is full again

	notLogged  atomic.Uint64 // rejections left out since the last line
	suppressed atomic.Uint64 // rejections left out, ever
}

// newRejectionLog returns the log that c asks for, writing through log,
// or nil for --log-rejections off. store names the backend.
func newRejectionLog(log *zap.Logger, c rejectionSettings, store string, now func() time.Time) *rejectionLog {
	if c.level == "off" {
		return nil
	}
	level := zapcore.DebugLevel
	if c.level == "info" {
		level = zapcore.InfoLevel
	}
	values, _ := parseValueMode(c.values) // checked with the flags
	burst := max(1, math.Floor(c.rate))
	interval := int64(math.Max(1, float64(time.Second)/c.rate))
	return &rejectionLog{
		log:       log.Named(rejectionLogger),
		level:     level,
		values:    values,
		store:     store,
		now:       now,
		epoch:     now(),
		interval:  interval,
		tolerance: int64(burst-1) * interval,
	}
}

// Rejected logs the rejection of req, decided in d, if the level and the
// rate allow.
func (r *rejectionLog) Rejected(req *limits.Request, d *limits.Decision) {
	if !r.log.Core().Enabled(r.level) {
		return
	}
	if !r.take() {
		r.notLogged.Add(1)
		r.suppressed.Add(1)
		return
	}
	msg := rejectionMessage
	if charged(d) {
		msg = usageOverMessage
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
	if d.StoreErr != nil {
		fields = append(fields, zap.NamedError("store_error", d.StoreErr))
	}
	fields = append(fields, zap.Uint64("not_logged", r.notLogged.Swap(0)))
	ce.Write(fields...)
}

// take takes a line from the bucket, if it holds one: GCRA on one atomic,
// so that concurrent rejections share no lock.
func (r *rejectionLog) take() bool {
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
func (r *rejectionLog) Suppressed() uint64 {
	if r == nil {
		return 0
	}
	return r.suppressed.Load()
}

// decidedBy names what decided d.
func (r *rejectionLog) decidedBy(d *limits.Decision) string {
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
	values valueMode
}

func (f descriptorsField) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for i := range f.req.Descriptors {
		enc.AppendString(f.values.descriptor(f.req.Descriptors[i].Entries))
	}
	return nil
}

// overField is the descriptors of a decision that are over their limit.
type overField struct {
	req    *limits.Request
	d      *limits.Decision
	values valueMode
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
			enc.AddString("key", s.values.text(c.Key))
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

// sampledExcept is a log core that samples every entry but those of the
// logger named name, which bound their rate themselves and must not lose
// lines they count as written.
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

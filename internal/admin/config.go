package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// DefaultMaxConfigBytes bounds /debug/config's answer unless
// ConfigOptions.MaxBytes says otherwise: about 40,000 rules of a common
// shape.
const DefaultMaxConfigBytes = 16 << 20

// ConfigView is /debug/config's JSON: what is loaded and the rule tree.
// RulesOmitted is set, and Domains left out, when the tree would not fit
// in the page's bound.
type ConfigView struct {
	Checksum     string                `json:"checksum"`
	LoadedAt     time.Time             `json:"loaded_at"`
	Files        []string              `json:"files"`
	LastError    string                `json:"last_error,omitempty"`
	LastAttempt  *time.Time            `json:"last_attempt,omitempty"`
	Reloads      map[string]int        `json:"reloads"`
	RulesOmitted string                `json:"rules_omitted,omitempty"`
	Domains      map[string]DomainView `json:"domains"`
}

// DomainView is one domain of a ConfigView.
type DomainView struct {
	FailureMode string        `json:"failure_mode,omitempty"`
	Override    *OverrideView `json:"override,omitempty"`
	Descriptors []RuleView    `json:"descriptors"`
}

// OverrideView is how a domain or rule counts the limits Envoy sends
// (limits.OverrideSpec).
type OverrideView struct {
	Algorithm      string `json:"algorithm"`
	UnitMultiplier uint64 `json:"unit_multiplier,omitempty"`
	Burst          uint64 `json:"burst,omitempty"`
	Charge         string `json:"charge,omitempty"`
}

// overrideView is s's view, nil for nil.
func overrideView(s *limits.OverrideSpec) *OverrideView {
	if s == nil {
		return nil
	}
	v := &OverrideView{Algorithm: s.Algorithm.String(), UnitMultiplier: s.Multiplier, Burst: s.Burst}
	if s.Charge != limits.ChargeAuto {
		v.Charge = s.Charge.String()
	}
	return v
}

// RuleView is one rule of a ConfigView, with its children.
type RuleView struct {
	Key            string         `json:"key"`
	Value          string         `json:"value,omitempty"`
	Name           string         `json:"name"`
	Source         string         `json:"source"`
	ShadowMode     bool           `json:"shadow_mode,omitempty"`
	QuotaMode      bool           `json:"quota_mode,omitempty"`
	ShareThreshold bool           `json:"share_threshold,omitempty"`
	DetailedMetric bool           `json:"detailed_metric,omitempty"`
	ValueToMetric  bool           `json:"value_to_metric,omitempty"`
	Limits         []LimitView    `json:"limits,omitempty"`
	Metadata       map[string]any `json:"metadata,omitempty"`
	Override       *OverrideView  `json:"override,omitempty"`
	Descriptors    []RuleView     `json:"descriptors,omitempty"`
}

// LimitView is one limit of a RuleView.
type LimitView struct {
	Unlimited       bool     `json:"unlimited,omitempty"`
	Algorithm       string   `json:"algorithm,omitempty"`
	RequestsPerUnit uint64   `json:"requests_per_unit"`
	Unit            string   `json:"unit,omitempty"`
	UnitMultiplier  uint64   `json:"unit_multiplier,omitempty"`
	Window          string   `json:"window,omitempty"`
	Burst           uint64   `json:"burst,omitempty"`
	Lease           uint64   `json:"lease,omitempty"`
	ReleaseAfter    string   `json:"release_after,omitempty"`
	Name            string   `json:"name,omitempty"`
	Replaces        []string `json:"replaces,omitempty"`
}

// ConfigOptions are what /debug/config shows.
type ConfigOptions struct {
	// Status returns the rule source's status: a config.Reloader's or
	// an xDS client's. Required.
	Status func() config.ReloadStatus
	// Rules returns the rules in use. Required.
	Rules func() *limits.Ruleset
	// MaxBytes bounds the answer; 0 is DefaultMaxConfigBytes. Past it the
	// rule tree is left out (RulesOmitted says so).
	MaxBytes int
}

// ConfigPage answers GET /debug/config. It renders the page once for
// each ruleset and reload status and serves those bytes to every GET
// until either changes: the page of a large rule set costs as much as
// the rules themselves, and rendering it per GET let 32 GETs at once
// take 1 GB. One render runs at a time; GETs meanwhile wait for it.
type ConfigPage struct {
	o       ConfigOptions
	renders atomic.Int64

	mu   sync.Mutex // guards key and body
	key  pageKey
	body []byte
}

// pageKey is what a page depends on: the ruleset and the reload status
// (a reload attempt changes LastAttempt or the counts, and so the key).
type pageKey struct {
	rules       *limits.Ruleset
	loadedAt    time.Time
	lastAttempt time.Time
	successes   int
	failures    int
}

// NewConfigPage returns the page of o.
func NewConfigPage(o ConfigOptions) *ConfigPage {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxConfigBytes
	}
	return &ConfigPage{o: o}
}

// Renders returns how many times the page has been rendered.
func (p *ConfigPage) Renders() int64 { return p.renders.Load() }

func (p *ConfigPage) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	body := p.page()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Write(body) //nolint:errcheck // the client went away
}

// page returns the page for the rules and status now, rendering it if
// they changed. The bytes are shared: callers must not modify them.
func (p *ConfigPage) page() []byte {
	st, rs := p.o.Status(), p.o.Rules()
	key := pageKey{rules: rs, loadedAt: st.LoadedAt, lastAttempt: st.LastAttempt, successes: st.Successes, failures: st.Failures}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.body != nil && p.key == key {
		return p.body
	}
	p.body, p.key = nil, key // the old page may go before the new one is made
	p.body = render(st, rs, p.o.MaxBytes)
	p.renders.Add(1)
	return p.body
}

// maxErrorBytes bounds last_error: a push or file with a problem in
// every one of its descriptors has an error as large as itself, and the
// log has all of it.
const maxErrorBytes = 64 << 10

// cutError cuts msg, a problem a line, at a line's end within
// maxErrorBytes.
func cutError(msg string) string {
	if len(msg) <= maxErrorBytes {
		return msg
	}
	cut := strings.LastIndexByte(msg[:maxErrorBytes], '\n')
	if cut < 0 {
		cut = maxErrorBytes
	}
	return fmt.Sprintf("%s\n(%d more lines in the sidecar's log)", msg[:cut], strings.Count(msg[cut:], "\n"))
}

// errTooLarge stops a render past the page's bound.
var errTooLarge = errors.New("page too large")

// pageWriter collects a page, refusing to grow past max.
type pageWriter struct {
	buf bytes.Buffer
	max int
	err error
}

func (w *pageWriter) write(b []byte) {
	if w.err != nil {
		return
	}
	if w.buf.Len()+len(b) > w.max {
		w.err = errTooLarge
		return
	}
	w.buf.Write(b)
}

func (w *pageWriter) writeString(s string) { w.write([]byte(s)) }

// writeJSON writes v as indented JSON whose lines after the first start
// with prefix, as json.MarshalIndent writes it.
func (w *pageWriter) writeJSON(v any, prefix string) {
	if w.err != nil {
		return
	}
	b, err := json.MarshalIndent(v, prefix, "  ")
	if err != nil {
		w.err = err
		return
	}
	w.write(b)
}

// render renders the page of st and rs, as json.Encoder with a two-space
// indent writes a ConfigView, one rule at a time: its memory is the page
// and one rule's JSON. A page past max leaves the rules out.
func render(st config.ReloadStatus, rs *limits.Ruleset, max int) []byte {
	head := ConfigView{
		Checksum: rs.Checksum, LoadedAt: st.LoadedAt, Files: rs.Files,
		Reloads: map[string]int{"success": st.Successes, "failure": st.Failures},
	}
	if st.LastError != nil {
		head.LastError = cutError(st.LastError.Error())
	}
	if !st.LastAttempt.IsZero() {
		head.LastAttempt = &st.LastAttempt
	}
	w := &pageWriter{max: max}
	writeHead(w, head)
	w.writeString(`,
  "domains": `)
	writeDomains(w, rs)
	w.writeString("\n}\n")
	if w.err == nil {
		// Kept until the next render: hold the page, not the buffer's
		// room to grow (up to twice the page).
		return bytes.Clone(w.buf.Bytes())
	}
	// Too large (or a value JSON cannot say): the head alone, which is
	// small, and why the rules are missing.
	head.RulesOmitted = fmt.Sprintf("the rule tree does not fit in this page's %d bytes (%v); ratelimit-sidecar check --config prints it", max, w.err)
	w = &pageWriter{max: int(^uint(0) >> 1)}
	writeHead(w, head)
	w.writeString(",\n  \"domains\": null\n}\n")
	return w.buf.Bytes()
}

// writeHead writes v's fields but Domains, leaving its object open.
func writeHead(w *pageWriter, v ConfigView) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		w.err = err
		return
	}
	// Cut `,\n  "domains": null\n}`: the domains follow.
	i := bytes.LastIndex(b, []byte(`,
  "domains"`))
	w.write(b[:i])
}

func writeDomains(w *pageWriter, rs *limits.Ruleset) {
	names := rs.Domains()
	if len(names) == 0 {
		w.writeString("{}")
		return
	}
	w.writeString("{")
	for i, d := range names {
		if i > 0 {
			w.writeString(",")
		}
		w.writeString("\n    ")
		w.writeJSON(d, "")
		w.writeString(": {")
		if m := rs.FailureMode(d, limits.FailDefault); m != limits.FailDefault {
			w.writeString("\n      \"failure_mode\": ")
			w.writeJSON(m.String(), "")
			w.writeString(",")
		}
		if o := overrideView(rs.OverrideSpec(d, nil)); o != nil {
			w.writeString("\n      \"override\": ")
			w.writeJSON(o, "      ")
			w.writeString(",")
		}
		w.writeString("\n      \"descriptors\": ")
		writeRules(w, rs.Rules(d), "      ")
		w.writeString("\n    }")
	}
	w.writeString("\n  }")
}

// writeRules writes rules as a JSON list whose lines after the first
// start with prefix.
func writeRules(w *pageWriter, rules []*limits.Rule, prefix string) {
	if len(rules) == 0 {
		w.writeString("[]")
		return
	}
	w.writeString("[")
	inner := prefix + "  "
	for i, r := range rules {
		if w.err != nil {
			return
		}
		if i > 0 {
			w.writeString(",")
		}
		w.writeString("\n" + inner)
		writeRule(w, r, inner)
	}
	w.writeString("\n" + prefix + "]")
}

// writeRule writes one rule, its lines after the first starting with
// prefix, and its children under "descriptors".
func writeRule(w *pageWriter, r *limits.Rule, prefix string) {
	if w.err != nil {
		return
	}
	b, err := json.MarshalIndent(fields(r), prefix, "  ")
	if err != nil {
		w.err = err
		return
	}
	if len(r.Children) == 0 {
		w.write(b)
		return
	}
	// Reopen the object for the children: cut its "\n<prefix>}".
	w.write(b[:len(b)-len(prefix)-2])
	w.writeString(",\n" + prefix + `  "descriptors": `)
	writeRules(w, r.Children, prefix+"  ")
	w.writeString("\n" + prefix + "}")
}

// fields is a rule's own fields for the page: its view without
// Descriptors, which the page writes one rule at a time.
func fields(r *limits.Rule) RuleView {
	v := RuleView{
		Key: r.Key, Value: r.Value, Name: r.Name, Source: source(r),
		ShadowMode: r.ShadowMode, ShareThreshold: r.ShareThreshold, DetailedMetric: r.DetailedMetric, ValueToMetric: r.ValueToMetric,
		QuotaMode: r.QuotaMode, Metadata: r.Metadata, Override: overrideView(r.Override),
	}
	for _, l := range r.Limits {
		if l.Unlimited {
			v.Limits = append(v.Limits, LimitView{Unlimited: true, Name: l.Name, Replaces: l.Replaces})
			continue
		}
		lv := LimitView{
			Algorithm: l.Algorithm.String(), RequestsPerUnit: l.Requests, Unit: l.Unit.String(),
			UnitMultiplier: l.Multiplier, Window: l.Window().String(), Burst: l.Burst, Lease: l.Lease, Name: l.Name, Replaces: l.Replaces,
		}
		if l.ReleaseAfter > 0 {
			lv.ReleaseAfter = l.ReleaseAfter.String()
		}
		v.Limits = append(v.Limits, lv)
	}
	return v
}

// source is where a rule was defined: file:line: path, or name: path
// for rules without a line (an xDS resource's).
func source(r *limits.Rule) string {
	var b strings.Builder
	b.WriteString(r.File)
	if r.Line != 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(r.Line))
	}
	b.WriteString(": ")
	b.WriteString(r.Path)
	return b.String()
}

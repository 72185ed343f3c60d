package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// configView is /debug/config's JSON: what is loaded and the rule tree.
type configView struct {
	Checksum    string                `json:"checksum"`
	LoadedAt    time.Time             `json:"loaded_at"`
	Files       []string              `json:"files"`
	LastError   string                `json:"last_error,omitempty"`
	LastAttempt *time.Time            `json:"last_attempt,omitempty"`
	Reloads     map[string]int        `json:"reloads"`
	Domains     map[string]domainView `json:"domains"`
}

type domainView struct {
	FailureMode string     `json:"failure_mode,omitempty"`
	Descriptors []ruleView `json:"descriptors"`
}

type ruleView struct {
	Key            string         `json:"key"`
	Value          string         `json:"value,omitempty"`
	Name           string         `json:"name"`
	Source         string         `json:"source"`
	ShadowMode     bool           `json:"shadow_mode,omitempty"`
	QuotaMode      bool           `json:"quota_mode,omitempty"`
	ShareThreshold bool           `json:"share_threshold,omitempty"`
	DetailedMetric bool           `json:"detailed_metric,omitempty"`
	ValueToMetric  bool           `json:"value_to_metric,omitempty"`
	Limits         []limitView    `json:"limits,omitempty"`
	Metadata       map[string]any `json:"metadata,omitempty"`
	Descriptors    []ruleView     `json:"descriptors,omitempty"`
}

type limitView struct {
	Unlimited       bool     `json:"unlimited,omitempty"`
	Algorithm       string   `json:"algorithm,omitempty"`
	RequestsPerUnit uint64   `json:"requests_per_unit"`
	Unit            string   `json:"unit,omitempty"`
	UnitMultiplier  uint64   `json:"unit_multiplier,omitempty"`
	Window          string   `json:"window,omitempty"`
	Burst           uint64   `json:"burst,omitempty"`
	Lease           uint64   `json:"lease,omitempty"`
	Name            string   `json:"name,omitempty"`
	Replaces        []string `json:"replaces,omitempty"`
}

func viewRules(rs []*limits.Rule) []ruleView {
	out := make([]ruleView, 0, len(rs))
	for _, r := range rs {
		v := ruleView{
			Key: r.Key, Value: r.Value, Name: r.Name, Source: source(r),
			ShadowMode: r.ShadowMode, ShareThreshold: r.ShareThreshold, DetailedMetric: r.DetailedMetric, ValueToMetric: r.ValueToMetric,
			QuotaMode: r.QuotaMode, Metadata: r.Metadata, Descriptors: viewRules(r.Children),
		}
		for _, l := range r.Limits {
			if l.Unlimited {
				v.Limits = append(v.Limits, limitView{Unlimited: true, Name: l.Name, Replaces: l.Replaces})
				continue
			}
			v.Limits = append(v.Limits, limitView{
				Algorithm: l.Algorithm.String(), RequestsPerUnit: l.Requests, Unit: l.Unit.String(),
				UnitMultiplier: l.Multiplier, Window: l.Window().String(), Burst: l.Burst, Lease: l.Lease, Name: l.Name, Replaces: l.Replaces,
			})
		}
		out = append(out, v)
	}
	return out
}

// source is where a rule was defined: file:line: path, or name: path
// for rules without a line (an xDS resource's).
func source(r *limits.Rule) string {
	if r.Line == 0 {
		return r.File + ": " + r.Path
	}
	return r.File + ":" + strconv.Itoa(r.Line) + ": " + r.Path
}

func debugConfig(rl interface{ Status() config.ReloadStatus }, e *limits.Engine) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		st := rl.Status()
		rs := e.Rules()
		v := configView{
			Checksum: rs.Checksum, LoadedAt: st.LoadedAt, Files: rs.Files,
			Reloads: map[string]int{"success": st.Successes, "failure": st.Failures},
			Domains: map[string]domainView{},
		}
		if st.LastError != nil {
			v.LastError = st.LastError.Error()
		}
		if !st.LastAttempt.IsZero() {
			v.LastAttempt = &st.LastAttempt
		}
		for _, d := range rs.Domains() {
			dv := domainView{Descriptors: viewRules(rs.Rules(d))}
			if m := rs.FailureMode(d, limits.FailDefault); m != limits.FailDefault {
				dv.FailureMode = m.String()
			}
			v.Domains[d] = dv
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(v) //nolint:errcheck // the client went away
	}
}

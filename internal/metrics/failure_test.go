package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// chargeRules: a tenant charged its usage, a token counter given back,
// and a budget that holds each request's estimate until it is settled.
const chargeRules = `
domain: llm
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: tokens
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: budget
    hold_key: request_id
    rate_limit: {unit: hour, requests_per_unit: 10000, release_after: 5s}
`

// TestChargesInFailureModes: while the store cannot decide, failure mode
// local counts a usage charge on the local store; open and closed answer
// it as they answer any request, never refuse a refund or a settlement,
// and count what no store counted (rule_usage_lost_total,
// rule_refund_lost_total); error fails the call.
func TestChargesInFailureModes(t *testing.T) {
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(chargeRules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	charge := &limits.Request{Domain: "llm", Descriptors: []limits.Descriptor{{Entries: []limits.Entry{{Key: "tenant", Value: "t"}}, Hits: 500, HasHits: true}}}
	refund := &limits.Request{Domain: "llm", Descriptors: []limits.Descriptor{{Entries: []limits.Entry{{Key: "tokens", Value: "t"}}, Hits: 5, HasHits: true, Negative: true}}}
	settle := &limits.Request{Domain: "llm", Descriptors: []limits.Descriptor{{Entries: []limits.Entry{{Key: "budget", Value: "t"}, {Key: "request_id", Value: "a"}}, Hits: 4000, HasHits: true, Negative: true}}}
	tests := []struct {
		mode       limits.FailureMode
		wantCharge limits.Code
		usage      string // the charge as usage_total, usage_lost_total
		lost       string // the refund's and the settlement's refund_lost_total
	}{
		{limits.FailLocal, limits.OK, "500 0", "0 0"},
		{limits.FailOpen, limits.OK, "0 500", "5 4000"},
		{limits.FailClosed, limits.OverLimit, "0 500", "5 4000"},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
			e := limits.NewEngine(rs, downStore{}, limits.EngineOptions{Observer: m, FailureMode: tt.mode, Local: memory.New(memory.Options{})})
			for _, c := range []struct {
				name string
				req  *limits.Request
				want limits.Code
			}{{"charge", charge, tt.wantCharge}, {"refund", refund, limits.OK}, {"settlement", settle, limits.OK}} {
				var d limits.Decision
				if err := e.Decide(context.Background(), c.req, &d); err != nil || d.Code != c.want {
					t.Errorf("%s: %v, %v; want %v", c.name, d.Code, err, c.want)
				}
			}
			rule := func(name, rule string) float64 { return value(t, m, "ratelimit_sidecar_"+name, rule) }
			if got := fmt.Sprint(rule("rule_usage_total", "tenant"), " ", rule("rule_usage_lost_total", "tenant")); got != tt.usage {
				t.Errorf("the charge's usage and usage lost: %s, want %s", got, tt.usage)
			}
			if got := fmt.Sprint(rule("rule_refund_lost_total", "tokens"), " ", rule("rule_refund_lost_total", "budget")); got != tt.lost {
				t.Errorf("the refund's and the settlement's refunds lost: %s, want %s", got, tt.lost)
			}
		})
	}
	t.Run("error", func(t *testing.T) {
		e := limits.NewEngine(rs, downStore{}, limits.EngineOptions{FailureMode: limits.FailError})
		var d limits.Decision
		if err := e.Decide(context.Background(), charge, &d); !errors.Is(err, limits.ErrStoreUnavailable) {
			t.Errorf("charge in mode error: %v, want ErrStoreUnavailable", err)
		}
	})
}

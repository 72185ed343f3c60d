package limits_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

const quotaRules = `
domain: q
descriptors:
  - key: s1
    quota_mode: true
    charge: admission
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: s2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: multi
    quota_mode: true
    rate_limits:
      - {unit: minute, requests_per_unit: 1}
      - {unit: hour, requests_per_unit: 10}
  - key: sq
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    quota_mode: true
    rate_limit: {unlimited: true}
  - key: named
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, name: named}
  - key: replacer
    rate_limit: {unit: minute, requests_per_unit: 5, replaces: [{name: named}]}
`

// quotaStep is one request of descriptors [key] (or [key hits=n] as
// "key*n") and what the engine must decide: the code, and per
// descriptor its status as statusText writes it.
type quotaStep struct {
	give []string
	code limits.Code
	want []string
}

// statusText writes a status as its code, then ":remaining" when it
// reports a limit, "!" when Over is set, "unlimited" for an unlimited one.
func statusText(st limits.Status) string {
	s := st.Code.String()
	switch {
	case st.Unlimited:
		return "unlimited"
	case st.Limit != nil:
		s += fmt.Sprintf(":%d", st.Remaining)
	}
	if st.Over {
		s += "!"
	}
	return s
}

func quotaRequest(give []string) *limits.Request {
	req := &limits.Request{Domain: "q"}
	for _, g := range give {
		key, hits, _ := strings.Cut(g, "*")
		d := limits.Descriptor{Entries: []limits.Entry{{Key: key, Value: "x"}}}
		if hits != "" {
			fmt.Sscan(hits, &d.Hits)
			d.HasHits = true
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

func runQuota(t *testing.T, o limits.EngineOptions, steps []quotaStep) {
	t.Helper()
	clk := storetest.NewClock(storetest.Epoch.Add(10 * time.Second))
	e := limits.NewEngine(parseRules(t, quotaRules), memory.New(memory.Options{Now: clk.Now}), o)
	var d limits.Decision
	for i, st := range steps {
		if err := e.Decide(context.Background(), quotaRequest(st.give), &d); err != nil {
			t.Fatalf("step %d %v: %v", i, st.give, err)
		}
		var got []string
		for _, s := range d.Statuses {
			got = append(got, statusText(s))
		}
		if d.Code != st.code || strings.Join(got, " ") != strings.Join(st.want, " ") {
			t.Errorf("step %d %v: %v %v, want %v %v", i, st.give, d.Code, got, st.code, st.want)
		}
	}
}

// TestQuotaMode: quota_mode descriptors reject a request only when every
// one of them is over (as envoyproxy/ratelimit decides), while every
// other descriptor still rejects alone; an admitted request consumes on
// every limit that had room and on none that was over, a rejected one on
// none.
func TestQuotaMode(t *testing.T) {
	ok, over := limits.OK, limits.OverLimit
	tests := []struct {
		name  string
		steps []quotaStep
	}{
		{"every_quota_over_rejects", []quotaStep{
			{[]string{"s1", "s2"}, ok, []string{"OK:0", "OK:1"}},
			// s1 is over, s2 has room: admitted, s1 reported over.
			{[]string{"s1", "s2"}, ok, []string{"OVER_LIMIT:0!", "OK:0"}},
			{[]string{"s1", "s2"}, over, []string{"OVER_LIMIT:0!", "OVER_LIMIT:0!"}},
			// One quota descriptor alone is every quota descriptor.
			{[]string{"s1"}, over, []string{"OVER_LIMIT:0!"}},
		}},
		// s1 (charge: admission) cannot take 3 hits: it is over, and
		// consumes nothing, so it still admits the 1 hit after.
		{"over_quota_consumes_nothing", []quotaStep{
			{[]string{"s1*3", "s2"}, ok, []string{"OVER_LIMIT:0!", "OK:1"}},
			{[]string{"s1"}, ok, []string{"OK:0"}},
		}},
		// s2's own hits_addend makes a usage charge: 3 is over its 2, and
		// counted all the same, so s2 stays over; s1 keeps the request
		// admitted, and consumes its hit.
		{"over_quota_usage_counts", []quotaStep{
			{[]string{"s2*3", "s1"}, ok, []string{"OVER_LIMIT:0!", "OK:0"}},
			{[]string{"s2*0"}, over, []string{"OVER_LIMIT:0!"}},
		}},
		// A descriptor without quota_mode rejects alone, and a rejected
		// request consumes nothing: s2 keeps its 2.
		{"plain_over_rejects", []quotaStep{
			{[]string{"plain"}, ok, []string{"OK:0"}},
			{[]string{"plain", "s2"}, over, []string{"OVER_LIMIT:0!", "OK:2"}},
			{[]string{"s2", "s2"}, ok, []string{"OK:1", "OK:0"}},
		}},
		// A quota limit that is over on a request rejected by another
		// limit, while a quota descriptor had room, did not decide: its
		// status reports nothing, so Envoy is led to plain's.
		{"quota_over_not_deciding", []quotaStep{
			{[]string{"s1", "plain"}, ok, []string{"OK:0", "OK:0"}},
			{[]string{"s1", "s2", "plain"}, over, []string{"OK!", "OK:2", "OVER_LIMIT:0!"}},
		}},
		// Both decide: every quota descriptor is over, and plain too.
		{"quota_and_plain_over", []quotaStep{
			{[]string{"s1", "plain"}, ok, []string{"OK:0", "OK:0"}},
			{[]string{"s1", "plain"}, over, []string{"OVER_LIMIT:0!", "OVER_LIMIT:0!"}},
		}},
		// A quota descriptor with two limits is over when one of them is,
		// though the other has room.
		{"descriptor_is_over_on_one_limit", []quotaStep{
			{[]string{"s2", "s2"}, ok, []string{"OK:1", "OK:0"}},
			{[]string{"multi"}, ok, []string{"OK:0"}},
			{[]string{"multi", "s2"}, over, []string{"OVER_LIMIT:0!", "OVER_LIMIT:0!"}},
		}},
		// A shadow quota descriptor is never over (the reference reports
		// its limit OK), so it keeps every request admitted.
		{"shadow_quota_never_over", []quotaStep{
			{[]string{"sq", "s1"}, ok, []string{"OK:0", "OK:0"}},
			{[]string{"sq", "s1"}, ok, []string{"OK:0", "OVER_LIMIT:0!"}},
		}},
		// An unlimited descriptor is no quota descriptor, nor is one that
		// matches nothing.
		{"unlimited_and_unmatched_not_quota", []quotaStep{
			{[]string{"s1"}, ok, []string{"OK:0"}},
			{[]string{"free", "nomatch", "s1"}, over, []string{"unlimited", "OK", "OVER_LIMIT:0!"}},
		}},
		// A quota limit that another replaces leaves no quota descriptor.
		{"replaced_quota", []quotaStep{
			{[]string{"s1"}, ok, []string{"OK:0"}},
			{[]string{"named", "replacer", "s1"}, over, []string{"OK", "OK:5", "OVER_LIMIT:0!"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runQuota(t, limits.EngineOptions{}, tt.steps) })
	}
}

// TestGlobalQuotaMode: EngineOptions.QuotaMode (QUOTA_MODE) makes every
// descriptor a quota descriptor, overrides and those that match nothing
// too, as envoyproxy/ratelimit counts them; unlimited ones stay out.
func TestGlobalQuotaMode(t *testing.T) {
	ok, over := limits.OK, limits.OverLimit
	runQuota(t, limits.EngineOptions{QuotaMode: true}, []quotaStep{
		{[]string{"plain"}, ok, []string{"OK:0"}},
		{[]string{"plain", "s2"}, ok, []string{"OVER_LIMIT:0!", "OK:1"}},
		{[]string{"plain"}, over, []string{"OVER_LIMIT:0!"}},
		{[]string{"plain", "free"}, over, []string{"OVER_LIMIT:0!", "unlimited"}},
		// A descriptor that matches nothing is a quota descriptor that is
		// never over.
		{[]string{"plain", "nomatch"}, ok, []string{"OVER_LIMIT:0!", "OK"}},
	})
}

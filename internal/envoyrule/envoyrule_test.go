package envoyrule_test

import (
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/envoyrule"
)

const (
	ok     = rlsv3.RateLimitResponse_OK
	over   = rlsv3.RateLimitResponse_OVER_LIMIT
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
)

func st(code rlsv3.RateLimitResponse_Code, name string, unit rlsv3.RateLimitResponse_RateLimit_Unit, rem uint32, reset time.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: 10, Unit: unit},
		LimitRemaining:     rem,
		DurationUntilReset: durationpb.New(reset),
	}
}

func resp(code rlsv3.RateLimitResponse_Code, sts ...*rlsv3.RateLimitResponse_DescriptorStatus) *rlsv3.RateLimitResponse {
	return &rlsv3.RateLimitResponse{OverallCode: code, Statuses: sts}
}

func TestSelect(t *testing.T) {
	noLimit := &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok}
	tests := []struct {
		name      string
		give      *rlsv3.RateLimitResponse
		want      string // selected limit's name; "" for none
		wantReset int64
	}{
		{"none", resp(ok), "", 0},
		{"no status has a limit", resp(ok, noLimit), "", 0},
		{"statuses without a limit are skipped", resp(ok, noLimit, st(ok, "a", minute, 5, 30*time.Second)), "a", 30},
		{"least remaining", resp(ok, st(ok, "a", minute, 5, time.Second), st(ok, "b", hour, 3, time.Hour)), "b", 3600},
		{"the first of equals", resp(over, st(ok, "b", hour, 0, time.Hour), st(over, "a", minute, 0, 50*time.Second)), "b", 3600},
		{"reset truncated to seconds", resp(ok, st(ok, "a", minute, 0, 999*time.Millisecond)), "a", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, found := envoyrule.Select(tt.give)
			if found != (tt.want != "") || sel.Name != tt.want || sel.Reset != tt.wantReset {
				t.Errorf("Select = %+v, %v; want %q with reset %d", sel, found, tt.want, tt.wantReset)
			}
		})
	}
}

// TestProblems checks that Problems finds what misleads a client, as in
// the issue: [b] [a] with a over, b reported as "0 left, reset 0" by a
// deny cache.
func TestProblems(t *testing.T) {
	tests := []struct {
		name string
		give *rlsv3.RateLimitResponse
		want []string // a substring of each problem, in order
	}{
		{"truthful rejection", resp(over, st(ok, "b", hour, 10, time.Hour), st(over, "a", minute, 0, 50*time.Second)), nil},
		{"truthful admission", resp(ok, st(ok, "b", hour, 0, time.Hour), st(ok, "a", minute, 1, 50*time.Second)), nil},
		{"a full limit may reset now", resp(over, st(ok, "b", hour, 10, 0), st(over, "a", minute, 0, 50*time.Second)), nil},
		{"the issue", resp(over, st(ok, "b", hour, 0, 0), st(over, "a", minute, 0, 50*time.Second)), []string{
			`X-RateLimit-Reset 0, want 1 to 3600`,
			`status 0 ("b") reports 0 remaining and X-RateLimit-Reset 0`,
			`status 0 ("b") of a rejected response reports reset 0 s`,
		}},
		{"sub-second reset", resp(over, st(over, "a", minute, 0, 300*time.Millisecond)), []string{
			`X-RateLimit-Reset 0, want 1 to 60`,
			`status 0 ("a") is OVER_LIMIT with reset 0 s`,
		}},
		{"over with some left", resp(over, st(ok, "b", hour, 1, time.Hour), st(over, "a", minute, 1, 50*time.Second)), []string{
			`Envoy selects status 0 ("b") with 1 remaining`,
			`status 1 ("a") is OVER_LIMIT with 1 remaining`,
		}},
		{"reset beyond the window", resp(over, st(over, "a", minute, 0, 61*time.Second)), []string{
			`want 1 to 60`,
			`want 1 to 60`,
		}},
		{"rejected without a limit", resp(over, &rlsv3.RateLimitResponse_DescriptorStatus{Code: over}), []string{
			`no status has a current_limit`,
			`OVER_LIMIT without a current_limit`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := envoyrule.Problems(tt.give)
			if len(got) != len(tt.want) {
				t.Fatalf("Problems = %q, want %d like %q", got, len(tt.want), tt.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tt.want[i]) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

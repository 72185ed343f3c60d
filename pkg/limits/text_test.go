package limits_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

func TestLimitString(t *testing.T) {
	named := newLimit(t, limits.TokenBucket, 5, limits.UnitSecond, 1, 10)
	named.Name, named.Lease = "api", 2
	reserving := newLimit(t, limits.FixedWindow, 10000, limits.UnitHour, 1, 0)
	reserving.ReleaseAfter = 5 * time.Minute
	shadow := newLimit(t, limits.FixedWindow, 100, limits.UnitMinute, 1, 0)
	shadow.Shadow, shadow.Replaces = true, []string{"a", "b"}
	tests := []struct {
		give *limits.Limit
		want string
	}{
		{newLimit(t, limits.SlidingWindow, 3, limits.UnitSecond, 10, 0), "sliding_window 3 per 10s"},
		{named, `token_bucket 5 per 1s, burst 10, lease 2, name "api"`},
		{shadow, `fixed_window 100 per 1m0s, replaces "a" and "b", shadow`},
		{reserving, "fixed_window 10000 per 1h0m0s, reservations released after 5m0s"},
		{newLimit(t, limits.FixedWindow, 0, limits.UnitHour, 1, 0), "fixed_window 0 per 1h0m0s (bans every request)"},
		{&limits.Limit{Unlimited: true, Name: "open"}, `unlimited, name "open"`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.give.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestFormatEntries: what FormatEntries writes, ParseEntries reads back,
// whatever the keys and values hold.
func TestFormatEntries(t *testing.T) {
	tests := [][]limits.Entry{
		{{Key: "a", Value: "b"}},
		{{Key: "tenant", Value: "acme"}, {Key: "user", Value: "42"}},
		{{Key: "k=1", Value: `x,y\z=`}, {Key: `\`, Value: ""}},
	}
	for _, give := range tests {
		text := limits.FormatEntries(give, func(s string) string { return s })
		got, err := limits.ParseEntries(text)
		if err != nil {
			t.Fatalf("limits.ParseEntries(%q): %v", text, err)
		}
		if diff := cmp.Diff(give, got); diff != "" {
			t.Errorf("limits.ParseEntries(limits.FormatEntries(...)) = %q (-want +got):\n%s", text, diff)
		}
	}
	if got := limits.FormatEntries([]limits.Entry{{Key: "user", Value: "alice"}}, func(string) string { return "x" }); got != "user=x" {
		t.Errorf("FormatEntries with a value function = %q, want user=x", got)
	}
}

func TestParseEntries(t *testing.T) {
	tests := []struct {
		give string
		want []limits.Entry
	}{
		{"a=b", []limits.Entry{{Key: "a", Value: "b"}}},
		{"tenant=acme,user=42", []limits.Entry{{Key: "tenant", Value: "acme"}, {Key: "user", Value: "42"}}},
		{"q=a=b", []limits.Entry{{Key: "q", Value: "a=b"}}},
		{"a=", []limits.Entry{{Key: "a", Value: ""}}},
		{`a=x\,y,b=z`, []limits.Entry{{Key: "a", Value: "x,y"}, {Key: "b", Value: "z"}}},
		{`a=x\\,b=z`, []limits.Entry{{Key: "a", Value: `x\`}, {Key: "b", Value: "z"}}},
		{`k\=1=v`, []limits.Entry{{Key: "k=1", Value: "v"}}},
		{"a= b ", []limits.Entry{{Key: "a", Value: " b "}}},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got, err := limits.ParseEntries(tt.give)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("limits.ParseEntries(%q) (-want +got):\n%s", tt.give, diff)
			}
		})
	}
}

func TestParseEntriesErrors(t *testing.T) {
	tests := []struct {
		give    string
		wantErr string
	}{
		{"", "empty descriptor; want key=value[,key=value...]"},
		{"a", `entry 0 "a" has no '='; want key=value`},
		{"a=b,", `entry 1 "" has no '='; want key=value`},
		{",a=b", `entry 0 "" has no '='; want key=value`},
		{"a=b,=c", `entry 1 "=c" has an empty key`},
		{`a=b\`, `entry 0 "a=b\\" ends in a lone backslash`},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got, err := limits.ParseEntries(tt.give)
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("limits.ParseEntries(%q) = %v, %v; want error %q", tt.give, got, err, tt.wantErr)
			}
		})
	}
}

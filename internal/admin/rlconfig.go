package admin

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// RLConfig answers /rlconfig: one line per limit of the rules in use, in
// the reference's format,
//
//	<domain>.<key>[_<value>][.<key>[_<value>]...]: unit=<UNIT> requests_per_unit=<n>, shadow_mode: <bool>, quota_mode: false
//
// sorted by domain and in the files' order within one. An unlimited limit
// has unit UNKNOWN and 0 requests, as in the reference. What the
// reference cannot express follows on the same line: the algorithm and
// window when it is not a fixed window of one unit, and the burst,
// lease and name when set.
//
// The text is written as it is made, through a small buffer: a GET holds
// a few KiB whatever the number of rules, where it used to hold the whole
// text (about 100 bytes a limit) for as long as it was sent.
func RLConfig(rules func() *limits.Ruleset) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		rs := rules()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		b := bufio.NewWriter(w)
		for _, d := range rs.Domains() { // sorted
			dumpRules(b, d, rs.Rules(d))
		}
		b.Flush() //nolint:errcheck // the client went away
	})
}

func dumpRules(b *bufio.Writer, domain string, rules []*limits.Rule) {
	for _, r := range rules {
		for _, l := range r.Limits {
			unit, requests := "UNKNOWN", uint64(0)
			if !l.Unlimited {
				unit, requests = strings.ToUpper(l.Unit.String()), l.Requests
			}
			fmt.Fprintf(b, "%s.%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t",
				domain, r.Name, unit, requests, r.ShadowMode || l.Shadow, r.QuotaMode || l.Quota)
			if !l.Unlimited && (l.Algorithm != limits.FixedWindow || l.Multiplier > 1) {
				fmt.Fprintf(b, ", algorithm: %s, window: %s", l.Algorithm, l.Window())
			}
			if l.Burst > 0 && l.Algorithm.Bucketed() {
				fmt.Fprintf(b, ", burst: %d", l.Burst)
			}
			if l.Lease > 0 {
				fmt.Fprintf(b, ", lease: %d", l.Lease)
			}
			if l.Name != "" {
				fmt.Fprintf(b, ", name: %s", strconv.Quote(l.Name))
			}
			b.WriteByte('\n')
		}
		dumpRules(b, domain, r.Children)
	}
}

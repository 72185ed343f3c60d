package envoy

import (
	"fmt"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// HeaderMode says which rate-limit headers the server asks Envoy to add to
// the client's response (RateLimitResponse.response_headers_to_add). The
// zero value is HeadersNone.
//
// Independently of the mode, Envoy can write the X-RateLimit-* headers of
// draft 03 itself from the descriptor statuses
// (enable_x_ratelimit_headers: DRAFT_VERSION_03).
type HeaderMode uint8

// The header modes.
const (
	// HeadersNone adds no headers.
	HeadersNone HeaderMode = iota
	// HeadersDraft03 adds RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset, as envoyproxy/ratelimit does with
	// LIMIT_RESPONSE_HEADERS_ENABLED: the limit's requests_per_unit, what
	// remains, and the seconds until reset, rounded up.
	HeadersDraft03
	// HeadersIETF adds the structured fields of
	// draft-ietf-httpapi-ratelimit-headers (drafts 07 to 11):
	//
	//	RateLimit-Policy: "name";q=<requests_per_unit>;w=<window seconds>
	//	RateLimit: "name";r=<remaining>;t=<seconds until reset>
	//
	// The policy is the limit's name, or "default" when it has none (or
	// one that is not printable ASCII). w is the rule's whole window,
	// unit_multiplier included.
	HeadersIETF
)

var headerModeNames = [...]string{HeadersNone: "none", HeadersDraft03: "draft03", HeadersIETF: "ietf"}

// ParseHeaderMode parses "none", "draft03" or "ietf".
func ParseHeaderMode(s string) (HeaderMode, error) {
	for m, name := range headerModeNames {
		if name == s {
			return HeaderMode(m), nil
		}
	}
	return HeadersNone, fmt.Errorf("unknown response header mode %q (want none, draft03 or ietf)", s)
}

// String returns the mode's flag value.
func (m HeaderMode) String() string {
	if int(m) < len(headerModeNames) {
		return headerModeNames[m]
	}
	return fmt.Sprintf("HeaderMode(%d)", m)
}

// Set parses s into m, so that *HeaderMode is a flag.Value.
func (m *HeaderMode) Set(s string) error {
	v, err := ParseHeaderMode(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// The header names.
const (
	headerLimit      = "RateLimit-Limit"
	headerRemaining  = "RateLimit-Remaining"
	headerReset      = "RateLimit-Reset"
	headerPolicy     = "RateLimit-Policy"
	headerRateLimit  = "RateLimit"
	headerRetryAfter = "Retry-After"
)

// addHeaders appends to resp.ResponseHeadersToAdd the rate-limit headers
// of mode for decision d, and Retry-After (seconds, rounded up, at least 1)
// when the request is over the limit.
//
// The headers describe the most restrictive limit the request touched:
// among the descriptors that are over the limit, the one that resets
// last, since a retry before then fails again; otherwise the one with the
// least remaining (on a tie, the one that resets last). Shadow limits are
// left out, since they never deny and are not yet policy; so are
// unlimited descriptors. Nothing is added when no limit applies, or when
// the store was down and the domain fails closed, since then no limit
// was counted.
//
// With HeadersNone, addHeaders returns at once and allocates nothing.
func addHeaders(mode HeaderMode, d *limits.Decision, resp *rlsv3.RateLimitResponse) {
	if mode == HeadersNone {
		return
	}
	h := headers{vals: make([]byte, 0, 64)} // enough for most limits
	h.build(mode, d)
	vals := string(h.vals)
	for i := range h.n {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: h.keys[i], Value: vals[h.off[i]:h.off[i+1]]})
	}
}

// maxHeaders is the most headers a mode adds: three, and Retry-After.
const maxHeaders = 4

// headers is the rate-limit headers of one response, as addHeaders
// documents them: the value of keys[i] is value(i). Its zero value holds
// none. The wire encoder writes them without building HeaderValues.
type headers struct {
	n    int
	keys [maxHeaders]string
	off  [maxHeaders + 1]int // value(i) is vals[off[i]:off[i+1]]
	vals []byte
}

func (h *headers) value(i int) []byte { return h.vals[h.off[i]:h.off[i+1]] }

// end ends the value being appended to h.vals as key's.
func (h *headers) end(key string) {
	h.keys[h.n] = key
	h.n++
	h.off[h.n] = len(h.vals)
}

// build sets h to the headers of mode for d, reusing h.vals.
func (h *headers) build(mode HeaderMode, d *limits.Decision) {
	h.n, h.vals = 0, h.vals[:0]
	if mode != HeadersDraft03 && mode != HeadersIETF {
		return
	}
	st := restrictive(d)
	if st == nil {
		return
	}
	l := st.Limit
	reset := ceilSeconds(st.Reset)
	switch mode {
	case HeadersDraft03:
		h.vals = strconv.AppendUint(h.vals, l.Requests, 10)
		h.end(headerLimit)
		h.vals = strconv.AppendUint(h.vals, st.Remaining, 10)
		h.end(headerRemaining)
		h.vals = strconv.AppendUint(h.vals, reset, 10)
		h.end(headerReset)
	case HeadersIETF:
		h.vals = appendPolicyName(h.vals, l.Name) // the first value: h.vals[:name]
		name := len(h.vals)
		h.vals = append(h.vals, ";q="...)
		h.vals = strconv.AppendUint(h.vals, l.Requests, 10)
		h.vals = append(h.vals, ";w="...)
		h.vals = strconv.AppendInt(h.vals, int64(l.Window()/time.Second), 10)
		h.end(headerPolicy)
		h.vals = append(h.vals, h.vals[:name]...)
		h.vals = append(h.vals, ";r="...)
		h.vals = strconv.AppendUint(h.vals, st.Remaining, 10)
		h.vals = append(h.vals, ";t="...)
		h.vals = strconv.AppendUint(h.vals, reset, 10)
		h.end(headerRateLimit)
	}
	if st.Code == limits.OverLimit {
		h.vals = strconv.AppendUint(h.vals, max(reset, 1), 10)
		h.end(headerRetryAfter)
	}
}

// restrictive returns the status the headers describe, or nil.
func restrictive(d *limits.Decision) *limits.Status {
	if d.StoreErr != nil && d.Fallback == limits.FailClosed {
		return nil
	}
	var best *limits.Status
	for i := range d.Statuses {
		st := &d.Statuses[i]
		if st.Limit == nil || st.Unlimited || st.Limit.Shadow {
			continue
		}
		switch {
		case best == nil:
			best = st
		case st.Code != best.Code:
			if st.Code == limits.OverLimit {
				best = st
			}
		case st.Code == limits.OverLimit:
			if st.Reset > best.Reset {
				best = st
			}
		case st.Remaining < best.Remaining, st.Remaining == best.Remaining && st.Reset > best.Reset:
			best = st
		}
	}
	return best
}

// ceilSeconds is d in whole seconds, rounded up, as the statuses report
// it (resetSeconds).
func ceilSeconds(d time.Duration) uint64 { return uint64(resetSeconds(d)) }

// appendPolicyName appends name as a structured-field string (RFC 8941
// sf-string: printable ASCII in quotes, with '"' and '\' escaped), or
// "default" if name is empty or cannot be one.
func appendPolicyName(b []byte, name string) []byte {
	if name == "" {
		return append(b, `"default"`...)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return append(b, `"default"`...)
		}
	}
	b = append(b, '"')
	for i := 0; i < len(name); i++ {
		if name[i] == '"' || name[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, name[i])
	}
	return append(b, '"')
}

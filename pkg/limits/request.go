package limits

import (
	"fmt"
)

// Request is one rate-limit request, as Envoy sends it.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	// Hits is the request's hits_addend; 0 means 1.
	Hits uint64
}

// Descriptor is one request descriptor.
type Descriptor struct {
	Entries []Entry
	// Override, when set, replaces the rule tree's limits with one of its
	// own (Envoy's descriptor.limit), counted as the rules say (see
	// Ruleset.OverrideSpec), by default as a fixed window.
	Override *Override
	// Hits, when HasHits is set, is the descriptor's own hits_addend. It
	// wins over Request.Hits and may be 0, which checks without consuming.
	Hits    uint64
	HasHits bool
	// Negative, Envoy's is_negative_hits, makes the descriptor's hits a
	// refund: they are given back to its limits (Check.Refund), never
	// consumed.
	Negative bool
}

// RequestError is a malformed request. Field names the offending field in
// Envoy's proto terms, e.g. descriptors[1].entries[0].key.
type RequestError struct {
	Field string
	Msg   string
}

func (e *RequestError) Error() string { return e.Field + ": " + e.Msg }

// RequestLimits bounds what a request may carry. The defaults are far
// above anything Envoy sends and only stop abuse. A zero field means its
// default.
type RequestLimits struct {
	MaxDescriptors int    // per request
	MaxEntries     int    // per descriptor
	MaxValueBytes  int    // per key or value
	MaxHits        uint64 // per hits_addend; at most MaxHitsAddend
}

// DefaultRequestLimits are the limits an Engine applies where
// EngineOptions.Limits leaves a field zero.
var DefaultRequestLimits = RequestLimits{
	MaxDescriptors: 64,
	MaxEntries:     32,
	MaxValueBytes:  4096,
	MaxHits:        1_000_000_000,
}

// withDefaults returns l with its zero fields set to the defaults.
func (l RequestLimits) withDefaults() RequestLimits {
	d := DefaultRequestLimits
	if l.MaxDescriptors > 0 {
		d.MaxDescriptors = l.MaxDescriptors
	}
	if l.MaxEntries > 0 {
		d.MaxEntries = l.MaxEntries
	}
	if l.MaxValueBytes > 0 {
		d.MaxValueBytes = l.MaxValueBytes
	}
	if l.MaxHits > 0 {
		d.MaxHits = min(l.MaxHits, MaxHitsAddend)
	}
	return d
}

// check reports, as a *RequestError, the first field of req that l does
// not allow.
func (l *RequestLimits) check(req *Request) error {
	switch {
	case req.Domain == "":
		return &RequestError{"domain", "must not be empty"}
	case len(req.Domain) > l.MaxValueBytes:
		return &RequestError{"domain", fmt.Sprintf("longer than %d bytes", l.MaxValueBytes)}
	case len(req.Descriptors) == 0:
		return &RequestError{"descriptors", "must not be empty"}
	case len(req.Descriptors) > l.MaxDescriptors:
		return &RequestError{"descriptors", fmt.Sprintf("%d descriptors, more than the maximum %d", len(req.Descriptors), l.MaxDescriptors)}
	case req.Hits > l.MaxHits:
		return &RequestError{"hits_addend", fmt.Sprintf("%d is more than the maximum %d", req.Hits, l.MaxHits)}
	}
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		if len(d.Entries) == 0 {
			return &RequestError{fmt.Sprintf("descriptors[%d].entries", i), "must not be empty"}
		}
		if len(d.Entries) > l.MaxEntries {
			return &RequestError{fmt.Sprintf("descriptors[%d].entries", i), fmt.Sprintf("%d entries, more than the maximum %d", len(d.Entries), l.MaxEntries)}
		}
		for j, en := range d.Entries {
			switch {
			case en.Key == "":
				return &RequestError{fmt.Sprintf("descriptors[%d].entries[%d].key", i, j), "must not be empty"}
			case len(en.Key) > l.MaxValueBytes:
				return &RequestError{fmt.Sprintf("descriptors[%d].entries[%d].key", i, j), fmt.Sprintf("longer than %d bytes", l.MaxValueBytes)}
			case len(en.Value) > l.MaxValueBytes:
				return &RequestError{fmt.Sprintf("descriptors[%d].entries[%d].value", i, j), fmt.Sprintf("longer than %d bytes", l.MaxValueBytes)}
			}
		}
		if d.HasHits && d.Hits > l.MaxHits {
			return &RequestError{fmt.Sprintf("descriptors[%d].hits_addend", i), fmt.Sprintf("%d is more than the maximum %d", d.Hits, l.MaxHits)}
		}
		if o := d.Override; o != nil && o.Unit.Duration() == 0 {
			return &RequestError{fmt.Sprintf("descriptors[%d].limit.unit", i), fmt.Sprintf("unknown unit %d", o.Unit)}
		}
	}
	return nil
}

// MaxHoldBytes bounds a hold (Check.Hold): a concurrency limit keeps one
// per request in flight. Envoy's x-request-id is a UUID of 36 bytes.
const MaxHoldBytes = 256

// checkHold checks a hold a request names.
func checkHold(hold string) error {
	switch {
	case hold == "":
		return fmt.Errorf("a hold (the request's id) must not be empty")
	case len(hold) > MaxHoldBytes:
		return fmt.Errorf("a hold (the request's id) of %d bytes; at most %d", len(hold), MaxHoldBytes)
	}
	return nil
}

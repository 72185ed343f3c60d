package redis

import (
	"errors"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// TestReplyMalformed: a reply of the wrong shape is a ReplyError, never a
// panic and never an outage.
func TestReplyMalformed(t *testing.T) {
	i := func(v int64) any { return v }
	tests := []struct {
		name    string
		give    any
		reserve bool
		grants  bool
	}{
		{name: "nil", give: nil},
		{name: "string", give: "OK"},
		{name: "short", give: []any{i(1), i(0)}},
		{name: "long", give: []any{i(1), i(0), i(1), i(2), i(3)}},
		{name: "string_element", give: []any{i(1), i(0), "1", i(2)}},
		{name: "nil_element", give: []any{i(1), i(0), nil, i(2)}},
		{name: "bad_admitted", give: []any{i(2), i(0), i(1), i(2)}},
		{name: "bad_over", give: []any{i(1), i(7), i(1), i(2)}},
		{name: "negative_remaining", give: []any{i(1), i(0), i(-1), i(2)}},
		{name: "negative_reset", give: []any{i(1), i(0), i(1), i(-2)}},
		{name: "reserve_short", give: []any{i(1), i(0), i(1), i(2)}, reserve: true},
		{name: "reserve_long", give: []any{i(1), i(0), i(1), i(2), i(7), i(1)}, reserve: true},
		{name: "reserve_bad_receipt", give: []any{i(1), i(0), i(1), i(2), i(-5)}, reserve: true},
		{name: "reserve_string_receipt", give: []any{i(1), i(0), i(1), i(2), "7"}, reserve: true},
		{name: "grants_missing", give: []any{i(1), i(0), i(1), i(2)}, grants: true},
		{name: "grants_negative", give: []any{i(1), i(0), i(1), i(2), i(-1), i(5)}, grants: true},
		{name: "grants_string", give: []any{i(1), i(0), i(1), i(2), i(1), "5"}, grants: true},
		{name: "reserve_grants_missing", give: []any{i(1), i(0), i(1), i(2), i(7)}, reserve: true, grants: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vals, err := replyInts(tt.give, nil)
			switch {
			case err != nil:
			case tt.reserve:
				err = (&group{idx: []int{0}}).read(vals, tt.grants, false)
			default:
				_, err = readApply(vals, make([]limits.Outcome, 1), tt.grants, false)
			}
			var re *ReplyError
			if !errors.As(err, &re) {
				t.Fatalf("err = %v, want a *ReplyError", err)
			}
			if errors.Is(err, limits.ErrStoreUnavailable) {
				t.Errorf("err = %v wraps ErrStoreUnavailable", err)
			}
		})
	}
}

func TestReplyWellFormed(t *testing.T) {
	outs := make([]limits.Outcome, 1)
	admitted, err := readApply([]int64{0, 1, 3, 1500}, outs, false, false)
	if err != nil || admitted || outs[0] != (limits.Outcome{Over: true, Remaining: 3, Reset: 1500 * 1000}) {
		t.Errorf("readApply = %v, %+v, %v", admitted, outs[0], err)
	}
	admitted, err = readApply([]int64{1, 0, 3, 1500, 4, 2000, 7}, outs, true, false)
	if err != nil || !admitted || outs[0] != (limits.Outcome{Remaining: 3, Reset: 1500 * 1000, Granted: 4, GrantFor: 2 * time.Millisecond, GrantReceipt: 7}) {
		t.Errorf("readApply with grants = %v, %+v, %v", admitted, outs[0], err)
	}
	admitted, err = readApply([]int64{1, 0, 3, 1500, 2}, outs, false, true)
	if err != nil || !admitted || outs[0] != (limits.Outcome{Remaining: 3, Reset: 1500 * 1000, Released: 2}) {
		t.Errorf("readApply with reservations released = %v, %+v, %v", admitted, outs[0], err)
	}
}

package redis

import (
	"errors"
	"fmt"
	"testing"
)

// TestWatchRecordsChangesOnly: a refusal repeated is one change; a new
// message, a new kind or an end is another.
func TestWatchRecordsChangesOnly(t *testing.T) {
	var got []string
	w := newWatch(func(e *ConfigError, cleared bool) { got = append(got, fmt.Sprint(e.Kind, " ", e.Msg, " ", cleared)) })
	h := w.hook(RoleServer, "127.0.0.1:1", false)
	pass := replyError("WRONGPASS invalid username-password pair or user is disabled.")
	for range 3 {
		h.failed(pass, "evalsha")
		h.failed(errors.New("dial tcp: connection refused"), "")
	}
	h.failed(replyError("NOPERM this user has no permissions to run the 'hello' command"), "hello") // tolerated
	h.failed(replyError("NOPERM this user has no permissions to run the 'evalsha' command"), "evalsha")
	w.clear(h.key, KindAuth, KindTLS) // a connection: not an ACL refusal's end
	w.clear(h.key)
	want := []string{
		"auth WRONGPASS invalid username-password pair or user is disabled. false",
		"acl NOPERM this user has no permissions to run the 'evalsha' command false",
		"acl NOPERM this user has no permissions to run the 'evalsha' command true",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("changes:\n%q\nwant\n%q", got, want)
	}
	if w.total[kindIndex(KindAuth)].Load() != 1 || w.total[kindIndex(KindACL)].Load() != 1 || w.n.Load() != 0 {
		t.Errorf("totals auth %d, acl %d, lasting %d; want 1, 1, 0", w.total[0].Load(), w.total[1].Load(), w.n.Load())
	}
}

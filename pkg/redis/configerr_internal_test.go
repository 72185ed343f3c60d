package redis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
)

// replyError is an error reply from Redis, as go-redis types them.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

func TestClassify(t *testing.T) {
	wrapped := func(err error) error { return fmt.Errorf("redis apply: %w", err) }
	tests := []struct {
		name     string
		give     error
		wantKind string
		wantMsg  string
	}{
		{"wrong password", wrapped(replyError("WRONGPASS invalid username-password pair or user is disabled.")), KindAuth, "WRONGPASS invalid username-password pair or user is disabled."},
		{"no password", replyError("NOAUTH Authentication required."), KindAuth, noAuth},
		{"no password, HELLO", replyError("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used"), KindAuth, noAuth},
		{"no password, large argument", replyError("ERR Protocol error: unauthenticated bulk length"), KindAuth, noAuth},
		{"Redis 5 wrong password", replyError("ERR invalid password"), KindAuth, "ERR invalid password"},
		{"password to a Redis without one", replyError("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"), KindAuth, "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"},
		{"command", replyError("NOPERM this user has no permissions to run the 'evalsha' command"), KindACL, "NOPERM this user has no permissions to run the 'evalsha' command"},
		{"in a script", replyError("ERR The user executing the script can't run this command or subcommand script: 8724f5fb, on @user_script:58."), KindACL, "ERR The user executing the script can't run this command or subcommand"},
		{"key named", replyError("NOPERM User app has no permissions to access the 'rls:edge:tenant_secret' key"), KindACL, "NOPERM User app has no permissions to access a key"},
		{"unknown authority", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, KindTLS, "tls: failed to verify certificate: x509: certificate signed by unknown authority"},
		{"not TLS", wrapped(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), KindTLS, "tls: first record does not look like a TLS handshake"},
		{"alert", &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}, KindTLS, "remote error: tls: certificate required"},
		{"host name", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "redis"}, KindTLS, "x509: certificate is not valid for any names, but wanted to match redis"},

		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, "", ""},
		{"closed", io.EOF, "", ""},
		{"deadline", wrapped(context.DeadlineExceeded), "", ""},
		{"loading", replyError("LOADING Redis is loading the dataset in memory"), "", ""},
		{"script error", replyError("ERR user_script:1: attempt to compare nil with number"), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kind, msg := classify(tt.give)
			if kind != tt.wantKind || msg != tt.wantMsg {
				t.Errorf("classify(%v) = %q, %q; want %q, %q", tt.give, kind, msg, tt.wantKind, tt.wantMsg)
			}
			if kind != "" && !unavailable(tt.give) {
				t.Errorf("unavailable(%v) = false; a refusal for the configuration means Redis cannot be used", tt.give)
			}
		})
	}
}

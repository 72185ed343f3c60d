package redis

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// Kinds of ConfigError.
const (
	// KindAuth: Redis or a sentinel refuses the user name or password
	// (WRONGPASS), or wants one that the sidecar did not send (NOAUTH).
	KindAuth = "auth"
	// KindACL: the ACL user may not run a command the store needs
	// (EVALSHA, SCRIPT LOAD, a command its scripts call, CLUSTER SLOTS,
	// SENTINEL) or touch the store's keys (NOPERM).
	KindACL = "acl"
	// KindTLS: the TLS handshake failed: a certificate not trusted or not
	// for the host, a client certificate missing or refused, or TLS
	// spoken to a port that does not speak it, or plain text to one that
	// does (see sniff.go).
	KindTLS = "tls"
)

// ConfigErrorKinds lists every kind of ConfigError.
var ConfigErrorKinds = []string{KindAuth, KindACL, KindTLS}

// Roles of ConfigError: who refused.
const (
	RoleServer   = "redis"        // a standalone Redis
	RoleMaster   = "master"       // the master the sentinels name
	RoleSentinel = "sentinel"     // a sentinel
	RoleNode     = "cluster node" // a node of a Cluster
)

// ConfigError is a refusal of the sidecar by Redis, or a sentinel, for
// its configuration: authentication, ACL or TLS. Unlike a refused
// connection or a timeout, waiting does not end it; changing the
// configuration of one side does. It never holds a password.
type ConfigError struct {
	Kind string // KindAuth, KindACL or KindTLS
	Role string // RoleServer, RoleMaster, RoleSentinel or RoleNode
	// Addr is the host:port that refused; "" for a master the sentinels
	// have yet to name.
	Addr string
	// Msg is the refusal in Redis's own words (or the TLS error's), with
	// what varies from one command to the next left out: the script of
	// an ACL refusal inside one, and a key's name.
	Msg string
}

func (e *ConfigError) Error() string {
	who := e.Role
	if e.Addr != "" {
		who += " " + e.Addr
	}
	return "redis " + kindText[e.Kind] + " by " + who + ": " + e.Msg
}

var kindText = map[string]string{
	KindAuth: "authentication refused",
	KindACL:  "command refused by ACL",
	KindTLS:  "TLS handshake failed",
}

// classify returns the kind of configuration error that err is, and its
// message (see ConfigError.Msg), or "" if err is none: an outage, a
// timeout, a bug.
func classify(err error) (kind, msg string) {
	if err == nil {
		return "", ""
	}
	var rerr goredis.Error
	if errors.As(err, &rerr) {
		m := rerr.Error()
		switch {
		case isAuthRefusal(m):
			return KindAuth, authMessage(m)
		case isACLRefusal(m):
			return KindACL, aclMessage(m)
		}
		return "", ""
	}
	var (
		verr *tls.CertificateVerificationError
		herr tls.RecordHeaderError
		uerr x509.UnknownAuthorityError
		nerr x509.HostnameError
		cerr x509.CertificateInvalidError
		oerr *net.OpError
	)
	switch {
	case errors.As(err, &verr):
		return KindTLS, verr.Error()
	case errors.As(err, &herr):
		return KindTLS, herr.Error()
	case errors.As(err, &uerr):
		return KindTLS, uerr.Error()
	case errors.As(err, &nerr):
		return KindTLS, nerr.Error()
	case errors.As(err, &cerr):
		return KindTLS, cerr.Error()
	case errors.As(err, &oerr) && oerr.Op == "remote error":
		// Only crypto/tls reports an alert from the peer this way: "remote
		// error: tls: certificate required", "...: bad certificate".
		return KindTLS, oerr.Error()
	}
	return "", ""
}

// isAuthRefusal reports whether m, an error reply, refuses the
// credentials. Before Redis 6 a wrong password was "ERR invalid
// password"; since, it is WRONGPASS, and a command before AUTH is
// NOAUTH, or, for a large argument, "Protocol error: unauthenticated
// bulk length".
func isAuthRefusal(m string) bool {
	return strings.HasPrefix(m, "WRONGPASS") ||
		strings.HasPrefix(m, "NOAUTH") ||
		strings.HasPrefix(m, "ERR invalid password") ||
		strings.Contains(m, "invalid username-password pair") ||
		strings.Contains(m, "called without any password configured") ||
		strings.HasPrefix(m, "ERR Protocol error: unauthenticated")
}

// noAuth is the message of every refusal of a connection that has not
// authenticated: Redis words it differently for HELLO, for a small
// command and for a large one, and a Lazy store sends all three.
const noAuth = "NOAUTH Authentication required."

func authMessage(m string) string {
	if strings.HasPrefix(m, "NOAUTH") || strings.HasPrefix(m, "ERR Protocol error: unauthenticated") {
		return noAuth
	}
	return m
}

// isACLRefusal reports whether m refuses a command, or a key, by ACL:
// NOPERM, or, from inside a script on Redis 7.0, "ERR The user executing
// the script can't run this command or subcommand".
func isACLRefusal(m string) bool {
	return strings.HasPrefix(m, "NOPERM") || strings.Contains(m, "can't run this command or subcommand")
}

// aclMessage is m without what differs between the store's scripts (the
// script's hash and line), so that each script's refusal reads the same,
// and without a key's name, which holds descriptor values.
func aclMessage(m string) string {
	if i := strings.Index(m, " script: "); i >= 0 {
		m = m[:i]
	}
	// Redis 7.2 names the key: "... to access the 'rls:...' key".
	if i := strings.Index(m, "access the '"); i >= 0 {
		if j := strings.LastIndex(m, "' key"); j > i {
			m = m[:i] + "access a key" + m[j+len("' key"):]
		}
	}
	return m
}

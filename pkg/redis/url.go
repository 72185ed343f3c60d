package redis

import (
	"errors"
	"net"
	"strconv"
	"strings"
)

// ErrURLScheme is the one-line error of a --redis-url without a scheme
// that is not host:port either. It does not repeat the value, which may
// hold a password.
var ErrURLScheme = errors.New("--redis-url: no scheme: want redis://[user[:password]@]host:port[/db], rediss:// for TLS, or unix:///path")

// HostPortURL returns s, a value for Options.URL, as a URL.
// envoyproxy/ratelimit's REDIS_URL is host:port, and people carry that
// form over; go-redis would read "redis:6379" as a URL of scheme redis
// with no host, and dial localhost. So host:port becomes
// redis://host:port (hostPort reports it, for the start log), and any other
// value without a scheme is ErrURLScheme. "" stays "".
func HostPortURL(s string) (url string, hostPort bool, err error) {
	if s == "" || strings.Contains(s, "://") {
		return s, false, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" || strings.ContainsAny(host, "@/") {
		return "", false, ErrURLScheme
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", false, ErrURLScheme
	}
	return "redis://" + s, true, nil
}

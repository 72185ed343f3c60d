package main

import (
	"errors"
	"net"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// errRedisURLScheme is the one-line hint for a --redis-url without a
// scheme that is not host:port either. It does not repeat the value,
// which may hold a password.
var errRedisURLScheme = errors.New("--redis-url: no scheme: want redis://[user[:password]@]host:port[/db], rediss:// for TLS, or unix:///path")

// redisURL returns --redis-url as a URL. envoyproxy/ratelimit's REDIS_URL
// is host:port, and people carry that form over; go-redis would read
// "redis:6379" as a URL of scheme redis with no host, and dial localhost.
// So host:port becomes redis://host:port (hostPort reports it, for the
// start log), and any other value without a scheme is an error.
func redisURL(s string) (url string, hostPort bool, err error) {
	if s == "" || strings.Contains(s, "://") {
		return s, false, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" || strings.ContainsAny(host, "@/") {
		return "", false, errRedisURLScheme
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", false, errRedisURLScheme
	}
	return "redis://" + s, true, nil
}

// logRedisURL says, at start, that --redis-url was host:port.
func logRedisURL(log *zap.Logger, c *settings) {
	if c.redisHostPort {
		log.Info("--redis-url is host:port, as envoyproxy/ratelimit's REDIS_URL: taken as redis://host:port", zap.String("redis_url", c.redis.URL))
	}
}

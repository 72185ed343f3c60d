package refenv

import (
	"net"
	"slices"
	"strings"
)

// mapRedis maps the reference's Redis topology. REDIS_URL is host:port
// (or a socket's path) for a single Redis, master-name,host:port,... for
// Sentinel, and host:port,... for Cluster.
func mapRedis(v *refValues, out *refOut) {
	switch b := v.str("BACKEND_TYPE"); strings.ToLower(b) {
	case "redis", "":
	case "memcache":
		return // refused: the memory store decides, with a warning
	default:
		v.fail("BACKEND_TYPE", "want redis or memcache, got %q", b)
		return
	}
	url := strings.TrimSpace(v.str("REDIS_URL"))
	if url == "" {
		v.fail("REDIS_URL", "empty")
		return
	}
	switch t := v.str("REDIS_TYPE"); strings.ToLower(t) {
	case "single":
		out.set("redis-url", singleRedisURL(v, url))
	case "sentinel":
		parts := addrList(url)
		if len(parts) < 2 {
			v.fail("REDIS_URL", "with REDIS_TYPE=%s, want <master name>,<sentinel host:port>,..., got %q", t, url)
			return
		}
		out.set("redis-sentinel-master", parts[0])
		out.set("redis-sentinel-addrs", strings.Join(plainAddrs(v, parts[1:]), ","))
	case "cluster":
		out.set("redis-cluster-addrs", strings.Join(plainAddrs(v, addrList(url)), ","))
	default:
		v.fail("REDIS_TYPE", "want SINGLE, SENTINEL or CLUSTER, got %q", t)
	}
}

// singleRedisURL turns a single Redis's REDIS_URL into our URL. The
// reference dials REDIS_URL with REDIS_SOCKET_TYPE as the network, and
// defaults to unix; when REDIS_SOCKET_TYPE is not set, a URL that is not
// a path is taken to be host:port over TCP, since that is what it names.
func singleRedisURL(v *refValues, url string) string {
	for _, scheme := range []string{"redis://", "rediss://", "unix://"} {
		if strings.HasPrefix(url, scheme) {
			return url
		}
	}
	sock := v.str("REDIS_SOCKET_TYPE")
	if !v.isSet("REDIS_SOCKET_TYPE") && !strings.HasPrefix(url, "/") {
		sock = "tcp"
	}
	switch strings.ToLower(sock) {
	case "tcp":
		return "redis://" + url
	case "unix":
		return "unix://" + url
	}
	v.fail("REDIS_SOCKET_TYPE", "want tcp or unix, got %q", sock)
	return ""
}

// plainAddrs checks Sentinel and Cluster addresses, which must be
// host:port.
func plainAddrs(v *refValues, addrs []string) []string {
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			v.fail("REDIS_URL", "want host:port addresses, got %q", a)
		}
	}
	return addrs
}

// splitAuth splits the reference's REDIS_AUTH: user:password, or a
// password alone.
func splitAuth(auth string) (user, password string) {
	if u, pw, ok := strings.Cut(auth, ":"); ok {
		return u, pw
	}
	return "", auth
}

// mapRedisTLS maps TLS to Redis. Without REDIS_TLS the reference uses none
// of the files, and neither do we.
func mapRedisTLS(v *refValues, out *refOut) {
	if !v.boolean("REDIS_TLS") {
		out.set("redis-tls", "false")
		return
	}
	out.set("redis-tls", "true")
	for _, f := range []struct{ env, flag string }{
		{"REDIS_TLS_CACERT", "redis-tls-ca"},
		{"REDIS_TLS_CLIENT_CERT", "redis-tls-cert"},
		{"REDIS_TLS_CLIENT_KEY", "redis-tls-key"},
	} {
		if s := v.str(f.env); s != "" {
			out.set(f.flag, s)
		}
	}
	out.set("redis-tls-skip-hostname-verification", v.boolText("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"))
}

// addrList splits a comma-separated list of addresses, dropping empty
// entries and the spaces around each.
func addrList(s string) []string {
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return slices.DeleteFunc(parts, func(p string) bool { return p == "" })
}

package xds

import (
	"fmt"
	"strconv"
	"strings"
)

// Source names one more management server to take rules from, beside
// the first (the sidecar's --xds-source): Envoy AI Gateway's controller,
// say, beside Envoy Gateway. Its Options are the first's but for the
// fields here.
type Source struct {
	// Name names the source in logs, metrics and conflicts: a-z, 0-9 and
	// '-', starting with a letter, at most 63 bytes.
	Name string
	// Server and NodeID are Options'.
	Server, NodeID string
	// TLS is Options'; nil connects in plaintext.
	TLS *TLSOptions
	// ForceStart is Options.StartWithoutRules: the sidecar's readiness
	// does not wait for this server's first push.
	ForceStart bool
}

// sourceKeys are the keys of a source's text, in the order help lists
// them.
var sourceKeys = []string{"name", "server", "node-id", "force-start", "tls", "tls-ca", "tls-cert", "tls-key", "tls-server-name"}

// ParseSources parses sources separated by ';', each
// key=value,key=value with the keys name, server and node-id (required),
// force-start (true or false), and tls (true or false), tls-ca, tls-cert, tls-key and tls-server-name,
// as the first source's --xds-tls-* flags; any tls-* key implies tls.
// Blank entries are skipped.
func ParseSources(s string) ([]Source, error) {
	var out []Source
	for _, text := range strings.Split(s, ";") {
		if strings.TrimSpace(text) == "" {
			continue
		}
		src, err := parseSource(text)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", strings.TrimSpace(text), err)
		}
		out = append(out, src)
	}
	return out, nil
}

func parseSource(text string) (Source, error) {
	var src Source
	var tls TLSOptions
	useTLS, seen := false, map[string]bool{}
	for _, kv := range strings.Split(text, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok:
			return Source{}, fmt.Errorf("want key=value, got %q", kv)
		case seen[k]:
			return Source{}, fmt.Errorf("%s: set twice", k)
		}
		seen[k] = true
		switch k {
		case "name":
			src.Name = v
		case "server":
			src.Server = v
		case "node-id":
			src.NodeID = v
		case "force-start":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Source{}, fmt.Errorf("force-start: want true or false, got %q", v)
			}
			src.ForceStart = b
		case "tls":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Source{}, fmt.Errorf("tls: want true or false, got %q", v)
			}
			useTLS = useTLS || b
		case "tls-ca":
			tls.CAFile, useTLS = v, true
		case "tls-cert":
			tls.CertFile, useTLS = v, true
		case "tls-key":
			tls.KeyFile, useTLS = v, true
		case "tls-server-name":
			tls.ServerName, useTLS = v, true
		default:
			return Source{}, fmt.Errorf("unknown key %q (want %s)", k, strings.Join(sourceKeys, ", "))
		}
	}
	switch {
	case !validName(src.Name):
		return Source{}, fmt.Errorf("name: want a-z, 0-9 and '-', starting with a letter, at most 63 bytes, got %q", src.Name)
	case src.Server == "":
		return Source{}, fmt.Errorf("server: required (host:port)")
	case src.NodeID == "":
		return Source{}, fmt.Errorf("node-id: required: the server keys its snapshots by it")
	case (tls.CertFile == "") != (tls.KeyFile == ""):
		return Source{}, fmt.Errorf("tls-cert and tls-key: both or neither")
	}
	if useTLS {
		src.TLS = &tls
	}
	return src, nil
}

func validName(s string) bool {
	if s == "" || len(s) > 63 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') }) < 0
}

// String is the source as ParseSources reads it, paths and all.
func (s Source) String() string {
	parts := []string{"name=" + s.Name, "server=" + s.Server, "node-id=" + s.NodeID}
	if s.ForceStart {
		parts = append(parts, "force-start=true")
	}
	if t := s.TLS; t != nil {
		parts = append(parts, "tls=true")
		for _, kv := range [][2]string{{"tls-ca", t.CAFile}, {"tls-cert", t.CertFile}, {"tls-key", t.KeyFile}, {"tls-server-name", t.ServerName}} {
			if kv[1] != "" {
				parts = append(parts, kv[0]+"="+kv[1])
			}
		}
	}
	return strings.Join(parts, ",")
}

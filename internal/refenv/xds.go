package refenv

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"time"
)

// refXDS reports whether the reference's variables take the rules from
// an xDS server.
func refXDS(v *refValues) bool { return v.str("CONFIG_TYPE") == "GRPC_XDS_SOTW" }

// mapConfigType maps CONFIG_TYPE, which the reference compares exactly.
// GRPC_XDS_SOTW allows a push of no resources too: the reference ACKs
// one and runs without rules, and Envoy Gateway sends one whenever the
// last rate-limited route goes, a state it means, which a NACK would
// report as a failed reload for as long as it lasts.
func mapConfigType(v *refValues, out *refOut) {
	switch t := v.str("CONFIG_TYPE"); t {
	case "FILE":
		out.set("config-type", "file")
	case "GRPC_XDS_SOTW":
		out.set("config-type", "xds")
		out.set("allow-empty-rules", "true")
	default:
		v.fail("CONFIG_TYPE", "want FILE or GRPC_XDS_SOTW, got %q", t)
	}
}

// mapNodeMetadata maps the reference's node metadata: entries split at
// commas, each a key and a string value split at its first '=', nothing
// trimmed. The reference skips an entry without '=', which would send
// the server less than was written: that is an error here, but for an
// empty entry (a trailing comma). It is passed on as a JSON object, so
// that --xds-node-metadata reads it exactly.
func mapNodeMetadata(v *refValues, out *refOut) {
	s := v.str("CONFIG_GRPC_XDS_NODE_METADATA")
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if kv == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			v.fail("CONFIG_GRPC_XDS_NODE_METADATA", "want key=value entries, got %q", kv)
			return
		}
		m[k] = val
	}
	b, _ := json.Marshal(m) // strings always marshal
	out.set("xds-node-metadata", string(b))
}

// mapXDSTLS maps TLS to the xDS server. Without
// CONFIG_GRPC_XDS_SERVER_USE_TLS the reference dials in plaintext and
// reads none of the files, and neither do we.
func mapXDSTLS(v *refValues, out *refOut) {
	if !v.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS") {
		out.set("xds-tls", "false")
		return
	}
	out.set("xds-tls", "true")
	for _, f := range []struct{ env, flag string }{
		{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "xds-tls-ca"},
		{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "xds-tls-cert"},
		{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "xds-tls-key"},
		{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "xds-tls-server-name"},
	} {
		if s := v.str(f.env); s != "" {
			out.set(f.flag, s)
		}
	}
}

// mapXDSBackoff maps the reference's reconnect waits (jpillora/backoff):
// the initial interval multiplied by XDS_CLIENT_BACKOFF_RANDOM_FACTOR, a
// growth factor whatever its name says, at each failure, up to the
// longest, and with XDS_CLIENT_BACKOFF_JITTER each drawn between the
// initial interval and that. A factor of 1 or less never grows a wait,
// so with the reference's default, 0.5, every wait is the initial one:
// --xds-backoff-max is then the initial wait. Ours double otherwise (a
// factor other than 2 is named in the start warning), and spread by
// ±--xds-backoff-jitter unless XDS_CLIENT_BACKOFF_JITTER is false. Run as
// Name, the reference's defaults apply when its rules come over xDS.
func mapXDSBackoff(v *refValues, out *refOut) {
	if !refXDS(v) && !slices.ContainsFunc([]string{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
		"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "XDS_CLIENT_BACKOFF_JITTER"}, v.isSet) {
		return
	}
	initial := v.duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL")
	longest := v.duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL")
	factor := v.float("XDS_CLIENT_BACKOFF_RANDOM_FACTOR")
	if math.IsNaN(factor) || math.IsInf(factor, 0) {
		v.fail("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "want a finite number, got %q", v.str("XDS_CLIENT_BACKOFF_RANDOM_FACTOR"))
		return
	}
	jitter := v.boolean("XDS_CLIENT_BACKOFF_JITTER")
	// jpillora/backoff's own defaults for values of 0 or less.
	if initial <= 0 {
		initial = 100 * time.Millisecond
	}
	if longest <= 0 {
		longest = 10 * time.Second
	}
	if factor <= 0 {
		factor = 2
	}
	switch {
	case initial >= longest:
		initial = longest
	case factor <= 1:
		longest = initial
	}
	out.set("xds-backoff-initial", initial.String())
	out.set("xds-backoff-max", longest.String())
	if !jitter {
		out.set("xds-backoff-jitter", "0")
	}
}

package refenv

import (
	"encoding/json"
	"net"
	"regexp"
	"strconv"
	"strings"
)

// mapStatsd maps the reference's stats sinks. As its runner chooses:
// nothing with DISABLE_STATS, else DogStatsD over UDP with
// USE_DOG_STATSD, else statsd over TCP (its statsd client's) with
// USE_STATSD, true by default. The reference refuses to start with both,
// or either beside USE_PROMETHEUS; here Prometheus is served anyway, and
// DogStatsD wins over statsd as in its runner's order.
func mapStatsd(v *refValues, out *refOut) {
	dog := v.boolean("USE_DOG_STATSD")
	if v.boolean("DISABLE_STATS") || !(dog || v.boolean("USE_STATSD")) {
		// Only with a variable set: run as Name with nothing set, the
		// default is USE_STATSD's.
		out.set("statsd-addr", "")
		return
	}
	port := v.integer("STATSD_PORT")
	if port < 1 || port > 65535 {
		v.fail("STATSD_PORT", "want a port from 1 to 65535, got %d", port)
		return
	}
	out.set("statsd-addr", net.JoinHostPort(v.str("STATSD_HOST"), strconv.FormatInt(port, 10)))
	interval := v.duration("STATS_FLUSH_INTERVAL")
	if interval <= 0 {
		v.fail("STATS_FLUSH_INTERVAL", "want more than 0, got %s", interval)
		return
	}
	out.set("statsd-flush-interval", interval.String())
	tags, ok := extraTags(v)
	if !ok {
		return
	}
	out.set("statsd-tags", tags)
	if !dog {
		out.set("statsd-protocol", "tcp")
		out.set("statsd-format", "statsd")
		return
	}
	out.set("statsd-protocol", "udp")
	out.set("statsd-format", "dogstatsd")
	if m, ok := mogrifiers(v); ok {
		out.set("statsd-mogrifiers", m)
	}
}

// extraTags turns EXTRA_TAGS, key:value,key:value as the reference's
// settings parse a map, into --statsd-tags.
func extraTags(v *refValues) (string, bool) {
	var tags []string
	for _, kv := range strings.Split(v.str("EXTRA_TAGS"), ",") {
		if kv == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, ":")
		if !ok {
			v.fail("EXTRA_TAGS", "want key:value entries, got %q", kv)
			return "", false
		}
		tags = append(tags, k+"="+val)
	}
	return strings.Join(tags, ","), true
}

// mogrifierPrefix starts the variables of each of the reference's
// DogStatsD mogrifiers named in USE_DOG_STATSD_MOGRIFIERS:
// DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and _TAGS.
const mogrifierPrefix = "DOG_STATSD_MOGRIFIER_"

// mogrifiers turns the reference's mogrifiers into --statsd-mogrifiers,
// in the order USE_DOG_STATSD_MOGRIFIERS names them, with the checks the
// reference makes at start.
func mogrifiers(v *refValues) (string, bool) {
	type mogrifier struct {
		Pattern string            `json:"pattern"`
		Name    string            `json:"name"`
		Tags    map[string]string `json:"tags,omitempty"`
	}
	var list []mogrifier
	for _, name := range strings.Split(v.str("USE_DOG_STATSD_MOGRIFIERS"), ",") {
		if name == "" {
			continue
		}
		prefix := mogrifierPrefix + strings.ToUpper(name) + "_"
		m := mogrifier{Tags: map[string]string{}}
		m.Pattern, _ = v.getenv(prefix + "PATTERN")
		m.Name, _ = v.getenv(prefix + "NAME")
		if m.Pattern == "" || m.Name == "" {
			v.fail("USE_DOG_STATSD_MOGRIFIERS", "mogrifier %s: needs %sPATTERN and %sNAME", name, prefix, prefix)
			return "", false
		}
		if _, err := regexp.Compile(m.Pattern); err != nil {
			v.fail(prefix+"PATTERN", "%v", err)
			return "", false
		}
		tags, _ := v.getenv(prefix + "TAGS")
		for _, kv := range strings.Split(tags, ",") {
			if kv == "" {
				continue
			}
			k, val, ok := strings.Cut(kv, ":")
			if !ok || k == "" || val == "" {
				v.fail(prefix+"TAGS", "want key:value entries, got %q", kv)
				return "", false
			}
			m.Tags[k] = val
		}
		list = append(list, m)
	}
	if len(list) == 0 {
		return "", false
	}
	b, _ := json.Marshal(list) // strings always marshal
	return string(b), true
}

// mapTracing maps the reference's OTLP tracing. Its protocol is only
// set when TRACING_EXPORTER_PROTOCOL is, so that without it
// OTEL_EXPORTER_OTLP_PROTOCOL may choose (http by default either way). The
// reference samples every trace at a rate of 1 or more and none at 0 or
// less, where --tracing-sampling-rate refuses such rates.
func mapTracing(v *refValues, out *refOut) {
	out.set("tracing", v.boolText("TRACING_ENABLED"))
	if v.isSet("TRACING_EXPORTER_PROTOCOL") {
		switch p := v.str("TRACING_EXPORTER_PROTOCOL"); p {
		case "http", "":
			out.set("tracing-protocol", "http")
		case "grpc":
			out.set("tracing-protocol", "grpc")
		default:
			v.fail("TRACING_EXPORTER_PROTOCOL", "want http or grpc, got %q", p)
		}
	}
	out.set("tracing-service-name", v.str("TRACING_SERVICE_NAME"))
	out.set("tracing-service-namespace", v.str("TRACING_SERVICE_NAMESPACE"))
	out.set("tracing-service-instance-id", v.str("TRACING_SERVICE_INSTANCE_ID"))
	rate := min(max(v.float("TRACING_SAMPLING_RATE"), 0), 1)
	out.set("tracing-sampling-rate", strconv.FormatFloat(rate, 'g', -1, 64))
}

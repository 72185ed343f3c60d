package xds

import (
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
)

// The two parsers below read Options.NodeMetadata and Options.Headers
// from the text forms envoyproxy/ratelimit's variables take, which the
// sidecar's flags take too.

// ParseNodeMetadata parses key=value,key=value (envoyproxy/ratelimit's
// CONFIG_GRPC_XDS_NODE_METADATA) or a JSON object; "" is no metadata.
func ParseNodeMetadata(s string) (*structpb.Struct, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	m := map[string]any{}
	if strings.HasPrefix(s, "{") {
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			return nil, fmt.Errorf("want a JSON object: %w", err)
		}
	} else {
		for _, kv := range strings.Split(s, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if k = strings.TrimSpace(k); !ok || k == "" {
				return nil, fmt.Errorf("want key=value, got %q", kv)
			}
			m[k] = strings.TrimSpace(v)
		}
	}
	st, err := structpb.NewStruct(m)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// ParseHeaders parses name:value,name:value (envoyproxy/ratelimit's
// CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS). Names are lower-cased, as
// HTTP/2 sends them.
func ParseHeaders(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	h := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, ":")
		k = strings.ToLower(strings.TrimSpace(k))
		switch {
		case !ok || k == "":
			return nil, fmt.Errorf("want name:value, got %q", kv)
		case strings.HasPrefix(k, "grpc-"):
			return nil, fmt.Errorf("%s: names that start with grpc- are gRPC's own", k)
		case strings.IndexFunc(k, func(r rune) bool { return !isHeaderNameRune(r) }) >= 0:
			return nil, fmt.Errorf("%q: a header name holds only a-z, 0-9, '-', '_' and '.'", k)
		}
		h[k] = strings.TrimSpace(v)
	}
	return h, nil
}

func isHeaderNameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
}

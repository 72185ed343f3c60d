package xds

import (
	"encoding/json"
	"fmt"
	"strings"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
)

// ReadConfigs reads RateLimitConfigs from files, for a preview of what a
// push of them would make: path is a file or a directory, read as
// config.ReadFiles reads rule files, each holding one RateLimitConfig in
// the proto's JSON mapping, written as YAML or JSON (the form Envoy
// Gateway's test data writes them in). A rule file of ours that uses only
// the proto's fields reads as one too: unit names may be in any case,
// and a config without a name is named as its domain.
func ReadConfigs(path string) ([]*anypb.Any, error) {
	files, err := config.ReadFiles(path)
	if err != nil {
		return nil, err
	}
	out := make([]*anypb.Any, 0, len(files))
	for _, f := range files {
		cfg, err := readConfig(f.Data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		a, err := anypb.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		out = append(out, a)
	}
	return out, nil
}

func readConfig(data []byte) (*rlsconf.RateLimitConfig, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	upperUnits(doc)
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("want a RateLimitConfig: %w", err)
	}
	cfg := &rlsconf.RateLimitConfig{}
	if err := protojson.Unmarshal(js, cfg); err != nil {
		return nil, fmt.Errorf("want a RateLimitConfig: %w", err)
	}
	if cfg.GetName() == "" {
		cfg.Name = cfg.GetDomain()
	}
	return cfg, nil
}

// upperUnits writes every unit's name in capitals, as the proto's JSON
// mapping names them, where rule files may write them in any case.
func upperUnits(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "unit" {
				x[k] = strings.ToUpper(s)
			}
			upperUnits(e)
		}
	case []any:
		for _, e := range x {
			upperUnits(e)
		}
	}
}

package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// An overlay file gives rules that another program renders, such as the
// RateLimitConfigs an xDS server pushes, the fields their form cannot
// carry (an algorithm, a window of several units, a burst, a lease, a
// calendar window, several limits, a domain's failure mode), without
// changing what that
// program sends:
//
//	overlays:
//	  - domain: default/eg/http
//	    path:                       # one key (and value) a level, top first
//	      - {key: httproute/default/api/rule/0/match/0/*, value: httproute/default/api/rule/0/match/0/*}
//	      - {key: rule-0-match-0}
//	    rate_limit: {algorithm: sliding_window}   # fields set on the pushed limit
//	    add_rate_limits:                          # limits enforced beside it
//	      - {unit: day, requests_per_unit: 10000}
//	  - domain: default/eg/http
//	    failure_mode: closed
//	    override: {algorithm: token_bucket}       # how descriptor.limit counts
//
// The overlay is applied to the rendered YAML nodes, so the result goes
// through the very checks a rule file does.

// overlayLimitFields are the fields of a rate_limit mapping, which an
// overlay may set on a pushed limit or give an added one.
var overlayLimitFields = map[string]bool{
	"unit": true, "requests_per_unit": true, "unlimited": true, "name": true, "replaces": true,
	"algorithm": true, "burst": true, "unit_multiplier": true, "lease": true, "release_after": true,
	"calendar": true, "time_zone": true, "week_start": true, "reset_day": true,
}

// overlayDescriptorFields are the fields of a descriptor an overlay may
// set, besides rate_limit and add_rate_limits. key, value and the nested
// descriptors are the pushed rules' own.
var overlayDescriptorFields = map[string]bool{
	"shadow_mode": true, "detailed_metric": true, "value_to_metric": true, "share_threshold": true,
	"quota_mode": true, "charge": true, "metadata": true, "hold_key": true,
}

// Overlay is a parsed overlay file. It is immutable and safe for
// concurrent use: Apply only reads it.
type Overlay struct {
	// File is the overlay's path, for messages.
	File string
	// Checksum is a SHA-256 of the file's bytes.
	Checksum string
	entries  []*overlayEntry
}

// overlayEntry is one item of overlays: what it matches and what it sets.
type overlayEntry struct {
	index  int
	line   int
	domain string
	path   []overlayStep // nil: matches by name, or the domain alone
	name   string        // the rate_limit.name it matches; "" if by path
	// failure is the domain's failure_mode node; nil if not set.
	failure *yaml.Node
	// override is how Envoy's descriptor.limit is counted: the
	// descriptor's, or without path and name the domain's; nil if not
	// set.
	override *yaml.Node
	// limit holds the rate_limit fields to set; add the limits to add.
	limit, add *yaml.Node
	// fields are the other descriptor fields to set, key and value.
	fields []*yaml.Node
}

// overlayStep is one level of an entry's path.
type overlayStep struct{ key, value string }

// where is the entry's YAML path, overlays[i], for messages.
func (e *overlayEntry) where() string { return fmt.Sprintf("overlays[%d]", e.index) }

// LoadOverlay reads and parses the overlay file at path.
func LoadOverlay(path string) (*Overlay, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read overlay: %w", err)
	}
	return ParseOverlay(path, data)
}

// ParseOverlay parses the overlay file name holding data. The error lists
// every problem, each an *Error naming the file, line and YAML path.
// Whether an entry matches any rule is Apply's to say.
func ParseOverlay(name string, data []byte) (*Overlay, error) {
	sum := sha256.Sum256(data)
	o := &Overlay{File: name, Checksum: hex.EncodeToString(sum[:])}
	p := &parser{file: name}
	root := p.decodeOverlay(data)
	if root != nil {
		o.entries = p.overlayEntries(root)
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(listed(p.errs)...)
	}
	return o, nil
}

// decodeOverlay returns the root mapping of an overlay file; an empty
// file is an overlay of no entries, and returns nil without a problem.
func (p *parser) decodeOverlay(data []byte) *yaml.Node {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		p.yamlError(err, data)
		return nil
	}
	if len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if n, msg := checkSize(root); n != nil {
		p.errorf(n, "", "%s", msg)
		return nil
	}
	if root.Kind != yaml.MappingNode {
		p.errorf(root, "", "want a mapping with overlays, got %s", kindName(root))
		return nil
	}
	return root
}

// overlayEntries parses the overlays list of root.
func (p *parser) overlayEntries(root *yaml.Node) []*overlayEntry {
	var entries []*overlayEntry
	seen := map[string]string{} // domain and path or name -> the entry that has it
	p.fields(root, "", func(key string, k, v *yaml.Node) {
		if key != "overlays" {
			p.unknownField(k, key, key, []string{"overlays"})
			return
		}
		if isNull(v) {
			return
		}
		if v.Kind != yaml.SequenceNode {
			p.errorf(v, key, "want a list of overlay entries, got %s", kindName(v))
			return
		}
		for i, item := range v.Content {
			e := p.overlayEntry(deref(item), i)
			if e == nil {
				continue
			}
			id := fmt.Sprintf("%q %q %q", e.domain, e.name, e.path)
			if e.path == nil && e.name == "" {
				id += " domain"
			}
			if first, dup := seen[id]; dup {
				p.errorf(item, e.where(), "matches what %s matches; put both in one entry", first)
				continue
			}
			seen[id] = e.where()
			entries = append(entries, e)
		}
	})
	return entries
}

// overlayEntry parses one entry of overlays, or returns nil after
// recording why it is wrong.
func (p *parser) overlayEntry(n *yaml.Node, i int) *overlayEntry {
	e := &overlayEntry{index: i, line: n.Line}
	at := e.where()
	if n.Kind != yaml.MappingNode {
		p.errorf(n, at, "want an overlay entry mapping, got %s", kindName(n))
		return nil
	}
	nerr := len(p.errs)
	var pathNode, nameNode *yaml.Node
	p.fields(n, at, func(key string, k, v *yaml.Node) {
		fp := join(at, key)
		switch key {
		case "domain":
			e.domain = p.str(v, fp)
		case "path":
			pathNode, e.path = v, p.overlayPath(v, fp)
		case "name":
			nameNode, e.name = v, p.str(v, fp)
		case "failure_mode":
			if _, err := limits.ParseFailureMode(p.str(v, fp)); err != nil {
				p.errorf(v, fp, "%v", err)
			}
			e.failure = v
		case "override":
			e.override = v
			p.override(v, fp)
		case "rate_limit":
			e.limit = v
			p.overlayLimit(v, fp)
		case "add_rate_limits":
			e.add = v
			p.overlayLimits(v, fp)
		default:
			if !overlayDescriptorFields[key] {
				known := append([]string{"domain", "path", "name", "failure_mode", "override", "rate_limit", "add_rate_limits"}, sortedKeys(overlayDescriptorFields)...)
				p.unknownFieldNote(k, fp, key, known, fmt.Sprintf(" (an overlay sets rate_limit, add_rate_limits, failure_mode, override and %s)", strings.Join(sortedKeys(overlayDescriptorFields), ", ")))
				return
			}
			e.fields = append(e.fields, k, v)
		}
	})
	switch {
	case e.domain == "":
		p.errorf(n, join(at, "domain"), "required and must not be empty")
	case pathNode != nil && nameNode != nil:
		p.errorf(nameNode, join(at, "name"), "use path or name, not both")
	case nameNode != nil && e.name == "":
		p.errorf(nameNode, join(at, "name"), "must not be empty")
	case pathNode != nil && len(e.path) == 0 && len(p.errs) == nerr:
		p.errorf(pathNode, join(at, "path"), "must not be empty: list the descriptor's key (and value) at each level, top first")
	case pathNode == nil && nameNode == nil && (e.limit != nil || e.add != nil || len(e.fields) > 0):
		p.errorf(n, at, "sets descriptor fields but says not which descriptor: give path or name")
	case e.failure == nil && e.override == nil && e.limit == nil && e.add == nil && len(e.fields) == 0:
		p.errorf(n, at, "sets nothing: give rate_limit, add_rate_limits, failure_mode, override or a descriptor field")
	}
	if len(p.errs) > nerr {
		return nil
	}
	return e
}

// overlayPath parses an entry's path: a list of {key, value}.
func (p *parser) overlayPath(n *yaml.Node, path string) []overlayStep {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "want a list of {key, value}, one a level, got %s", kindName(n))
		return nil
	}
	if len(n.Content) > MaxDescriptorLevels {
		p.errorf(n, path, "more than %d levels; descriptors nest no deeper", MaxDescriptorLevels)
		return nil
	}
	steps := make([]overlayStep, 0, len(n.Content))
	for i, item := range n.Content {
		item = deref(item)
		ip := fmt.Sprintf("%s[%d]", path, i)
		if item.Kind != yaml.MappingNode {
			p.errorf(item, ip, "want {key, value}, got %s", kindName(item))
			continue
		}
		var s overlayStep
		p.fields(item, ip, func(key string, k, v *yaml.Node) {
			switch key {
			case "key":
				s.key = p.str(v, join(ip, key))
			case "value":
				s.value = p.str(v, join(ip, key))
			default:
				p.unknownFieldNote(k, join(ip, key), key, []string{"key", "value"}, " (a path level has key and value)")
			}
		})
		if s.key == "" {
			p.errorf(item, join(ip, "key"), "required and must not be empty")
		}
		steps = append(steps, s)
	}
	return steps
}

// overlayLimit checks the field names of a rate_limit mapping, and the
// algorithm's name: what the overlay alone can get wrong. Whether the
// fields fit the limit they end up on is checked with the rules.
func (p *parser) overlayLimit(n *yaml.Node, path string) {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "want a rate limit mapping, got %s", kindName(n))
		return
	}
	p.fields(n, path, func(key string, k, v *yaml.Node) {
		fp := join(path, key)
		switch {
		case !overlayLimitFields[key]:
			p.unknownField(k, fp, key, limitFieldNames)
		case key == "algorithm":
			if _, err := limits.ParseAlgorithm(p.str(v, fp)); err != nil {
				p.errorf(v, fp, "%v", err)
			}
		}
	})
}

// overlayLimits checks an add_rate_limits list.
func (p *parser) overlayLimits(n *yaml.Node, path string) {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		p.errorf(n, path, "want a list of one or more rate limits, got %s", kindName(n))
		return
	}
	for i, item := range n.Content {
		p.overlayLimit(deref(item), fmt.Sprintf("%s[%d]", path, i))
	}
}

func sortedKeys(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }

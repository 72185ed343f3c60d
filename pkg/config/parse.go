// Package config reads rule files: envoyproxy/ratelimit's descriptor YAML
// and its superset. It parses and validates them into a *limits.Ruleset,
// reporting every problem with its file, line and YAML path, and reloads
// them when they change (see Reloader). An overlay file (see Overlay)
// adds the fields of our rule files to rules another program renders.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// parser turns one file's YAML nodes into rules, collecting errors.
type parser struct {
	file    string
	opts    Options
	domains map[string]*limits.Domain // every file's so far, by name
	errs    []error
	// generated leaves line numbers out of errors and rules: they would
	// point into text nobody sees (ParseGenerated).
	generated bool
	// release drops each descriptor's nodes once it is read, so that a
	// document's nodes and the rules made from them are not all held at
	// once. Set only for a document without aliases, whose nodes are
	// each read once.
	release bool
	// releaseAfter is set once the descriptor being read has a limit
	// with release_after, compiled or not: its hold_key is then no
	// mistake of its own.
	releaseAfter bool
	// levels indexes each level's rules by key and value, so a duplicate
	// check costs O(1) rather than a scan of the level (which made one
	// level of N descriptors cost O(N^2)). Every file's parser shares it:
	// a domain merged from N files would otherwise be indexed again for
	// each file, O(N^2) too.
	levels map[*[]*limits.Rule]map[[2]string]*limits.Rule
	// zone is the file's time_zone: the default of its calendar limits
	// (nil: UTC).
	zone *time.Location
}

// The fields each mapping of a rule file has, for the nearest-name hint of
// an unknown one. Each parsing function's switch has a case for each.
var (
	fileFields       = []string{"domain", "descriptors", "failure_mode", "override", "time_zone"}
	descriptorFields = []string{"key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode",
		"detailed_metric", "value_to_metric", "share_threshold", "quota_mode", "charge", "metadata", "hold_key",
		"override"}
	limitFieldNames = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm",
		"burst", "unit_multiplier", "lease", "release_after", "calendar", "time_zone", "week_start", "reset_day"}
)

// parseFile parses one file into p.domains. It returns the file's domain
// if the file defines a new one, nil if it adds to one already seen (or
// is broken).
func (p *parser) parseFile(f File) *limits.Domain {
	root := f.Root
	if root == nil {
		if root = p.decode(f.Data); root == nil {
			return nil
		}
	}
	n, msg, aliases := measure(root)
	if n != nil {
		p.errorf(n, "", "%s", msg)
		return nil
	}
	// Without aliases every node is read once, so each descriptor's
	// nodes may go once read.
	p.release = !aliases
	if root.Kind != yaml.MappingNode {
		p.errorf(root, "", "want a mapping with domain and descriptors, got %s", kindName(root))
		return nil
	}
	var domain string
	var domainNode, descNode, failNode, overNode *yaml.Node
	var over *limits.OverrideSpec
	failure := limits.FailDefault
	p.fields(root, "", func(key string, k, v *yaml.Node) {
		switch key {
		case "domain":
			domain = p.str(v, "domain")
			domainNode = v
		case "descriptors":
			descNode = v
		case "failure_mode":
			failNode = v
			m, err := limits.ParseFailureMode(p.str(v, key))
			if err != nil {
				p.errorf(v, key, "%v", err)
			}
			failure = m
		case "override":
			overNode, over = v, p.override(v, key)
		case "time_zone":
			p.zone = p.timeZone(v, key)
		default:
			p.unknownField(k, key, key, fileFields)
		}
	})
	if domain == "" {
		if domainNode == nil {
			domainNode = root
		}
		p.errorf(domainNode, "domain", "required and must not be empty")
		return nil
	}
	d, seen := p.domains[domain]
	switch {
	case !seen:
		d = &limits.Domain{Name: domain, File: p.file}
		p.domains[domain] = d
	case !p.opts.MergeDomains:
		p.errorf(domainNode, "domain", "domain %q is already defined in %s (set --merge-domains to combine files)", domain, d.File)
		return nil
	}
	if failure != limits.FailDefault {
		if d.FailureMode != limits.FailDefault && d.FailureMode != failure {
			p.errorf(failNode, "failure_mode", "%s, but another file of domain %q says %s", failure, domain, d.FailureMode)
		}
		d.FailureMode = failure
	}
	if over != nil {
		if over.Calendar != nil && over.Calendar.Location == nil {
			over.Calendar.Location = p.zone // the file's, wherever it says it
		}
		if d.Override != nil && !sameOverride(d.Override, over) {
			p.errorf(overNode, "override", "another file of domain %q sets a different override", domain)
		}
		d.Override = over
	}
	p.descriptors(domain, &d.Rules, descNode, "descriptors")
	if seen {
		return nil
	}
	return d
}

// decode reads the one YAML document of data and returns its root node,
// or nil after recording why there is none.
func (p *parser) decode(data []byte) *yaml.Node {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		p.yamlError(err, data)
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.errorf(&extra, "", "a second YAML document; put each domain in its own file")
		return nil
	} else if !errors.Is(err, io.EOF) {
		p.yamlError(err, data)
		return nil
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		p.errorf(nil, "domain", "required, and the file is empty")
		return nil
	}
	return doc.Content[0]
}

// fields calls fn for each key of a mapping node, rejecting non-string keys
// and duplicates.
func (p *parser) fields(n *yaml.Node, path string, fn func(key string, k, v *yaml.Node)) {
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			p.errorf(k, path, "keys must be strings")
			continue
		}
		if seen[k.Value] {
			p.errorf(k, join(path, k.Value), "field given twice")
			continue
		}
		seen[k.Value] = true
		fn(k.Value, k, v)
	}
}

// descriptors parses a list of descriptors of domain into the rules of one
// level.
func (p *parser) descriptors(domain string, level *[]*limits.Rule, n *yaml.Node, path string) {
	if n == nil || isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "want a list of descriptors, got %s", kindName(n))
		return
	}
	for i, item := range n.Content {
		p.descriptor(domain, level, deref(item), fmt.Sprintf("%s[%d]", path, i))
		if p.release {
			n.Content[i] = nil
		}
	}
}

func (p *parser) descriptor(domain string, level *[]*limits.Rule, n *yaml.Node, path string) {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "want a descriptor mapping, got %s", kindName(n))
		return
	}
	r := &limits.Rule{Domain: domain, File: p.file, Path: path}
	if !p.generated {
		r.Line = n.Line
	}
	var keyNode, limitNode, limitsNode, childNode, shareNode, holdNode *yaml.Node
	p.fields(n, path, func(key string, k, v *yaml.Node) {
		fp := join(path, key)
		switch key {
		case "key":
			r.Key = p.str(v, fp)
			keyNode = v
		case "value":
			r.Value = p.str(v, fp)
		case "rate_limit":
			limitNode = v
		case "rate_limits":
			limitsNode = v
		case "descriptors":
			childNode = v
		case "shadow_mode":
			r.ShadowMode = p.bool(v, fp)
		case "detailed_metric":
			r.DetailedMetric = p.bool(v, fp)
		case "value_to_metric":
			r.ValueToMetric = p.bool(v, fp)
		case "share_threshold":
			shareNode = v
			r.ShareThreshold = p.bool(v, fp)
		case "quota_mode":
			r.QuotaMode = p.bool(v, fp)
		case "charge":
			c, err := limits.ParseCharge(p.str(v, fp))
			if err != nil {
				p.errorf(v, fp, "%v", err)
			}
			r.Charge = c
		case "metadata":
			r.Metadata = p.metadata(v, fp)
		case "override":
			r.Override = p.override(v, fp)
		case "hold_key":
			holdNode = v
			r.HoldKey = p.str(v, fp)
		default:
			p.unknownField(k, fp, key, descriptorFields)
		}
	})
	if r.Key == "" {
		if keyNode == nil {
			keyNode = n
		}
		p.errorf(keyNode, join(path, "key"), "required and must not be empty")
	}
	if r.ShareThreshold && !strings.Contains(r.Value, "*") {
		p.errorf(shareNode, join(path, "share_threshold"), "needs a wildcard value (one with '*'), got %q", r.Value)
	}
	if limitNode != nil && limitsNode != nil {
		p.errorf(limitsNode, join(path, "rate_limits"), "use rate_limit or rate_limits, not both")
	}
	p.releaseAfter = false
	if limitNode != nil && !isNull(limitNode) {
		if l := p.limit(r, limitNode, join(path, "rate_limit"), true); l != nil {
			r.Limits = append(r.Limits, l)
		}
	}
	if limitsNode != nil && !isNull(limitsNode) {
		p.limitList(r, limitsNode, join(path, "rate_limits"))
	}
	p.checkHold(r, n, holdNode, path)
	if r.Key != "" {
		if other := p.sibling(level, r.Key, r.Value); other != nil {
			p.errorf(n, path, "duplicate descriptor key %q value %q at this level (first at %s)", r.Key, r.Value, where(other))
		} else {
			*level = append(*level, r)
			p.levels[level][[2]string{r.Key, r.Value}] = r
		}
	}
	p.descriptors(domain, &r.Children, childNode, join(path, "descriptors"))
}

// maxInFlight bounds a concurrency limit's requests_per_unit: every
// request in flight is a slot that the store keeps, with its hold.
const maxInFlight = 10000

// checkHold checks a rule's hold_key (holdNode, nil if absent) against
// its limits: a concurrency limit takes its slots by the request's hold,
// and a limit with release_after holds reservations by it, so each needs
// one, and nothing else uses it. n is the rule's node.
func (p *parser) checkHold(r *limits.Rule, n, holdNode *yaml.Node, path string) {
	concurrent, reserves := false, false
	for _, l := range r.Limits {
		if l.ReleaseAfter > 0 {
			reserves = true
			if l.Quota {
				p.errorf(n, join(path, "quota_mode"), "does not apply to a limit with release_after")
			}
			if l.Charge == limits.ChargeUsage {
				p.errorf(n, join(path, "charge"), "usage does not apply to a limit with release_after: a reservation fits or is refused")
			}
		}
		if l.Algorithm != limits.Concurrency {
			continue
		}
		concurrent = true
		switch {
		case l.Requests > maxInFlight:
			p.errorf(n, path, "a concurrency limit of %d requests in flight; at most %d", l.Requests, maxInFlight)
		case l.Quota:
			p.errorf(n, join(path, "quota_mode"), "does not apply to a concurrency limit")
		case l.Charge == limits.ChargeUsage:
			p.errorf(n, join(path, "charge"), "usage does not apply to a concurrency limit: a request takes a slot or is refused")
		}
	}
	switch {
	case concurrent && r.HoldKey == "":
		p.errorf(n, join(path, "hold_key"), "required with algorithm concurrency: the descriptor entry that names the request (Envoy: x-request-id), by which its stream-end call frees its slot")
	case reserves && r.HoldKey == "":
		p.errorf(n, join(path, "hold_key"), "required with release_after: the descriptor entry that names the request (Envoy: x-request-id), by which its stream-end call settles its reservation")
	case !concurrent && !reserves && !p.releaseAfter && holdNode != nil:
		p.errorf(holdNode, join(path, "hold_key"), "applies only to a rule with a concurrency limit or a limit with release_after")
	}
}

// sibling returns the rule of level with key and value, or nil. The
// caller appends any rule it adds to level after this call, so the index
// is rebuilt whenever level holds rules it has not seen.
func (p *parser) sibling(level *[]*limits.Rule, key, value string) *limits.Rule {
	idx := p.levels[level]
	if idx == nil || len(idx) != len(*level) {
		idx = make(map[[2]string]*limits.Rule, len(*level)+1)
		for _, r := range *level {
			if _, ok := idx[[2]string{r.Key, r.Value}]; !ok {
				idx[[2]string{r.Key, r.Value}] = r
			}
		}
		p.levels[level] = idx
	}
	k := [2]string{key, value}
	if r, ok := idx[k]; ok {
		return r
	}
	return nil
}

// where is a rule's place for messages: file:line, or the file alone
// for a rule without a line (a generated document's).
func where(r *limits.Rule) string {
	if r.Line == 0 {
		return r.File
	}
	return r.File + ":" + strconv.Itoa(r.Line)
}

// metadata parses a rule's metadata mapping into the values a
// google.protobuf.Struct holds, as envoyproxy/ratelimit does: numbers
// become float64s, keys and the scalars that are neither numbers, bools
// nor null (timestamps, say) their text. An empty mapping is nil.
func (p *parser) metadata(n *yaml.Node, path string) map[string]any {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "want a mapping, got %s", kindName(n))
		return nil
	}
	m, _ := p.metaValue(n, path).(map[string]any)
	if len(m) == 0 {
		return nil
	}
	return m
}

func (p *parser) metaValue(n *yaml.Node, path string) any {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		p.fields(n, path, func(key string, _, v *yaml.Node) {
			m[key] = p.metaValue(v, join(path, key))
		})
		return m
	case yaml.SequenceNode:
		l := make([]any, len(n.Content))
		for i, item := range n.Content {
			l[i] = p.metaValue(item, fmt.Sprintf("%s[%d]", path, i))
		}
		return l
	}
	switch n.Tag {
	case "!!null":
		return nil
	case "!!bool", "!!int", "!!float":
		var v any
		if err := n.Decode(&v); err != nil {
			p.errorf(n, path, "%v", err)
			return nil
		}
		switch x := v.(type) {
		case int:
			return float64(x)
		case int64:
			return float64(x)
		case uint64:
			return float64(x)
		}
		return v
	}
	return n.Value
}

package config

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

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

// descriptor parses one descriptor of domain, at path, into a rule of
// level, and its children below it.
func (p *parser) descriptor(domain string, level *[]*limits.Rule, n *yaml.Node, path string) {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "want a descriptor mapping, got %s", kindName(n))
		return
	}
	r := &limits.Rule{Domain: domain, File: p.file, Path: path}
	if !p.generated {
		r.Line = n.Line
	}
	dn := p.descriptorFields(r, n, path)
	if r.Key == "" {
		if dn.key == nil {
			dn.key = n
		}
		p.errorf(dn.key, join(path, "key"), "required and must not be empty")
	}
	if r.ShareThreshold && !strings.Contains(r.Value, "*") {
		p.errorf(dn.share, join(path, "share_threshold"), "needs a wildcard value (one with '*'), got %q", r.Value)
	}
	if dn.limit != nil && dn.limits != nil {
		p.errorf(dn.limits, join(path, "rate_limits"), "use rate_limit or rate_limits, not both")
	}
	p.releaseAfter = false
	if dn.limit != nil && !isNull(dn.limit) {
		if l := p.limit(r, dn.limit, join(path, "rate_limit"), true); l != nil {
			r.Limits = append(r.Limits, l)
		}
	}
	if dn.limits != nil && !isNull(dn.limits) {
		p.limitList(r, dn.limits, join(path, "rate_limits"))
	}
	p.checkHold(r, n, dn.hold, path)
	if r.Key != "" {
		if other := p.sibling(level, r.Key, r.Value); other != nil {
			p.errorf(n, path, "duplicate descriptor key %q value %q at this level (first at %s)", r.Key, r.Value, where(other))
		} else {
			*level = append(*level, r)
			p.levels[level][[2]string{r.Key, r.Value}] = r
		}
	}
	p.descriptors(domain, &r.Children, dn.children, join(path, "descriptors"))
}

// descriptorNodes are the fields of a descriptor mapping that are read
// after the others (its limits and children) or named in later errors.
type descriptorNodes struct {
	key, limit, limits, children, share, hold *yaml.Node
}

// descriptorFields reads the fields of descriptor mapping n into r.
func (p *parser) descriptorFields(r *limits.Rule, n *yaml.Node, path string) descriptorNodes {
	var dn descriptorNodes
	p.fields(n, path, func(key string, k, v *yaml.Node) {
		fp := join(path, key)
		switch key {
		case "key":
			r.Key = p.str(v, fp)
			dn.key = v
		case "value":
			r.Value = p.str(v, fp)
		case "rate_limit":
			dn.limit = v
		case "rate_limits":
			dn.limits = v
		case "descriptors":
			dn.children = v
		case "shadow_mode":
			r.ShadowMode = p.bool(v, fp)
		case "detailed_metric":
			r.DetailedMetric = p.bool(v, fp)
		case "value_to_metric":
			r.ValueToMetric = p.bool(v, fp)
		case "share_threshold":
			dn.share = v
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
			dn.hold = v
			r.HoldKey = p.str(v, fp)
		default:
			p.unknownField(k, fp, key, descriptorFieldNames)
		}
	})
	return dn
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

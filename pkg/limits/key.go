package limits

import "strconv"

// AppendKey appends the store key of one limit of one descriptor to dst and
// returns it with the length n of its hash-tag part. key[:n] is the same
// for every limit of every descriptor of the domain that shares the first
// entry, so that a tenant's tiers ([tenant=t] and [tenant=t, user=u]) share
// a Redis Cluster slot and one script decides them.
//
// The layout is
//
//	{<domain><key1><value1>}<key2><value2>…<keyN><valueN><limit id>
//
// where every part is written as <decimal length>:<bytes>. Length
// prefixes make the encoding injective: no two different (domain, entries,
// limit) tuples share a key, whatever bytes the values hold, which matters
// because values come from request headers. The braces are a Redis Cluster
// hash tag. A first value holding '}' ends the tag early, but still inside
// the part that every descriptor with that first entry shares, so they
// stay in one slot. The key holds no config version, so a rule that a
// reload leaves alone keeps its counters.
func AppendKey(dst []byte, domain string, entries []Entry, limit *Limit) ([]byte, int) {
	dst = append(dst, '{')
	dst = appendPart(dst, domain)
	if len(entries) > 0 {
		dst = appendPart(dst, entries[0].Key)
		dst = appendPart(dst, entries[0].Value)
	}
	dst = append(dst, '}')
	tag := len(dst)
	for _, e := range entries[min(len(entries), 1):] {
		dst = appendPart(dst, e.Key)
		dst = appendPart(dst, e.Value)
	}
	dst = appendPart(dst, limit.id)
	return dst, tag
}

func appendPart(dst []byte, s string) []byte {
	dst = strconv.AppendInt(dst, int64(len(s)), 10)
	dst = append(dst, ':')
	return append(dst, s...)
}

// counterEntries returns the entries that name the counters of a
// descriptor whose entries reached r: entries itself, unless a rule on r's
// branch sets share_threshold. Then it returns a copy, in *scratch (whose
// array it reuses), where each entry matched by such a rule carries the
// rule's pattern instead of the request's value, so every value the
// pattern matches shares one counter. r may be nil.
func counterEntries(r *Rule, entries []Entry, scratch *[]Entry) []Entry {
	if r == nil {
		return entries
	}
	share := false
	for _, c := range r.chain {
		share = share || c.ShareThreshold
	}
	if !share {
		return entries
	}
	*scratch = append((*scratch)[:0], entries...)
	for i, c := range r.chain {
		if c.ShareThreshold {
			(*scratch)[i].Value = c.Value
		}
	}
	return *scratch
}

package limits

import "strconv"

// AppendKey appends the store key of one limit of one descriptor to dst and
// returns it with the length of its hash-tag part: key[:n] is the same for
// every limit of the descriptor, so they share a Redis Cluster slot.
//
// The layout is
//
//	{<domain><key1><value1>…<keyN><valueN>}<limit id>
//
// where every part is written as <decimal length>:<bytes>. Length
// prefixes make the encoding injective: no two different (domain, entries,
// limit) tuples share a key, whatever bytes the values hold, which matters
// because values come from request headers. The braces are a Redis Cluster
// hash tag. A value holding '}' ends the tag early, but still inside the
// part shared by all limits of the descriptor, so they stay in one slot.
// The key holds no config version, so a rule that a reload leaves alone
// keeps its counters.
func AppendKey(dst []byte, domain string, entries []Entry, limit *Limit) ([]byte, int) {
	dst = append(dst, '{')
	dst = appendPart(dst, domain)
	for _, e := range entries {
		dst = appendPart(dst, e.Key)
		dst = appendPart(dst, e.Value)
	}
	dst = append(dst, '}')
	slot := len(dst)
	dst = appendPart(dst, limit.id)
	return dst, slot
}

func appendPart(dst []byte, s string) []byte {
	dst = strconv.AppendInt(dst, int64(len(s)), 10)
	dst = append(dst, ':')
	return append(dst, s...)
}

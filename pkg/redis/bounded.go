package redis

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"syscall"

	goredis "github.com/redis/go-redis/v9"
)

// Every connection the store's clients make, to data nodes and sentinels
// alike, reads Redis's replies through a boundedConn, which follows the
// RESP2 and RESP3 stream as its bytes arrive and fails the read, closing
// the connection, when a reply announces more than the bounds below,
// before go-redis reads the announcement. go-redis allocates what a
// reply's header announces: an array of n elements is a make of n, a
// bulk string of n bytes a make of n+2, before the elements or bytes
// arrive, so that a reply of `*250000000` (11 bytes) took 1.7 GB
// (issue 37). It also recurses once per level of nesting and reads a
// line whole, however long, so depth and lines are bounded too.
//
// The bounds are per reply (a top-level value, with any attribute before
// it), and sized from the largest replies the store reads, with room to
// spare (see docs/bounds.md): CLUSTER SLOTS of a cluster of fragmented
// slots (16,384 ranges), COMMAND (read by a Cluster client: 11,507
// elements, 8 levels deep on Redis 7.0), the sliding log Inspect reads (2 × MaxInspectedLog elements),
// apply.lua's replies (a few integers per check, at most maxScriptKeys
// checks a call). A reply past them fails the call as a broken connection
// does, which the store reports as Redis unavailable.
const (
	// maxReplyBulk bounds the bytes of one bulk, verbatim or blob error
	// string: go-redis allocates them as the header arrives.
	maxReplyBulk = 1 << 20
	// maxReplyLine bounds a simple string, error, number or header line.
	maxReplyLine = 64 << 10
	// maxReplyPending bounds the elements announced by the aggregates
	// open in a reply and not yet arrived (a map's pair counts two): what
	// go-redis has allocated ahead of the bytes.
	maxReplyPending = 1 << 17
	// maxReplyElements bounds the elements announced in one reply, in all
	// its aggregates together.
	maxReplyElements = 1 << 20
	// maxReplyBytes bounds one reply's bytes.
	maxReplyBytes = 32 << 20
	// maxReplyDepth bounds the nesting of aggregates in a reply.
	maxReplyDepth = 32
	// maxHeaderDigits bounds a length's digits (leading zeros included).
	maxHeaderDigits = 20
)

// replyBoundError is a reply that a boundedConn refused.
type replyBoundError struct {
	what       string
	got, bound int64
}

func (e *replyBoundError) Error() string {
	return fmt.Sprintf("redis reply refused: %s %d, over the bound of %d", e.what, e.got, e.bound)
}

// The states of a replyReader: what the next byte is.
const (
	stType   uint8 = iota // the type of a value
	stLength              // a length's digits (or its '-')
	stLF                  // the '\n' that ends a length
	stLine                // a simple value's line, to its '\n'
	stBulk                // a string's bytes and its CRLF
)

// replyReader follows a stream of RESP replies, a chunk at a time, and
// reports the first that goes past a bound. It holds no bytes and
// allocates nothing. The zero value is at the start of a reply.
type replyReader struct {
	st    uint8
	kind  byte  // of the length being read
	neg   bool  // the length started with '-'
	n     int64 // the length being read, a string's bytes left, or a line's bytes so far
	width int   // the length's characters so far

	depth   int
	left    [maxReplyDepth]int64 // elements still to come, per open aggregate
	attrs   uint64               // bit d: the aggregate at depth d is an attribute (maxReplyDepth <= 64)
	pending int64                // sum of left
	elems   int64                // elements announced in this reply
	bytes   int64                // bytes of this reply before the chunk being read
	err     error
}

// feed reads the next chunk of the stream. Once it has returned an
// error, it returns that error for good.
func (r *replyReader) feed(b []byte) error {
	if r.err != nil {
		return r.err
	}
	mark := 0 // where the current reply starts in b
	var err error
	for i := 0; i < len(b); {
		switch r.st {
		case stBulk:
			i, mark = r.bulk(b, i, mark)
		case stLine:
			if i, mark, err = r.line(b, i, mark); err != nil {
				return err
			}
		case stType:
			// Read here, not in a step of its own: most values are simple
			// lines (apply.lua's integers), each a type byte and its line.
			c := b[i]
			i++
			switch c {
			case '+', '-', ':', ',', '#', '(', '_':
				// Read one whole here when b holds its line.
				j := bytes.IndexByte(b[i:], '\n')
				if j < 0 {
					r.st, r.n = stLine, 0
					continue
				}
				if j > maxReplyLine {
					return r.fail("a line of bytes:", int64(j), maxReplyLine)
				}
				i += j + 1
				if r.ended() {
					mark = i
				}
			case '$', '=', '!', '*', '~', '>', '%', '|':
				r.st, r.kind, r.n, r.neg, r.width = stLength, c, 0, false, 0
			default:
				return r.malformed(fmt.Sprintf("type byte %q", c))
			}
		case stLength:
			if err := r.lengthByte(b[i]); err != nil {
				return err
			}
			i++
		case stLF:
			if i, mark, err = r.lengthEnd(b, i, mark); err != nil {
				return err
			}
		}
	}
	r.bytes += int64(len(b) - mark)
	if r.bytes > maxReplyBytes {
		return r.fail("bytes in the reply:", r.bytes, maxReplyBytes)
	}
	return nil
}

// The other steps of feed: each reads from b[i] on, in its state, and
// returns where it stopped, and mark moved past a reply it ended.

// bulk reads a string's bytes and its CRLF, as many of them as b holds.
func (r *replyReader) bulk(b []byte, i, mark int) (int, int) {
	k := int64(len(b) - i)
	if k > r.n {
		k = r.n
	}
	i += int(k)
	r.n -= k
	if r.n == 0 {
		r.st = stType
		if r.ended() {
			mark = i
		}
	}
	return i, mark
}

// line reads a simple value's line up to its '\n', or to the end of b.
func (r *replyReader) line(b []byte, i, mark int) (int, int, error) {
	j := bytes.IndexByte(b[i:], '\n')
	if j < 0 {
		r.n += int64(len(b) - i)
		i = len(b)
	} else {
		r.n += int64(j)
		i += j + 1
	}
	if r.n > maxReplyLine {
		return i, mark, r.fail("a line of bytes:", r.n, maxReplyLine)
	}
	if j >= 0 {
		r.st = stType
		if r.ended() {
			mark = i
		}
	}
	return i, mark, nil
}

// lengthByte reads c, a byte of a length: a digit, its '-', or the '\r'
// that ends it.
func (r *replyReader) lengthByte(c byte) error {
	r.width++
	switch {
	case c >= '0' && c <= '9':
		r.n = r.n*10 + int64(c-'0')
		if max := r.maxLength(); r.n > max {
			return r.fail(r.lengthName(), r.n, max)
		}
	case c == '-' && r.width == 1:
		r.neg = true
	case c == '\r' && r.width > 1:
		r.st = stLF
	default:
		return r.malformed(fmt.Sprintf("byte %q in a length", c))
	}
	if r.width > maxHeaderDigits {
		return r.fail("a length of characters:", int64(r.width), maxHeaderDigits)
	}
	return nil
}

// lengthEnd reads the '\n' that ends a length, and acts on the length.
func (r *replyReader) lengthEnd(b []byte, i, mark int) (int, int, error) {
	if b[i] != '\n' {
		return i, mark, r.malformed(fmt.Sprintf("byte %q after a length", b[i]))
	}
	i++
	whole, err := r.header(int64(i-mark) + r.bytes)
	if err != nil {
		return i, mark, err
	}
	if whole && r.ended() {
		mark = i
	}
	return i, mark, nil
}

// header acts on a length just read, seen after so bytes of the reply,
// and reports whether it was a whole value: a null or an empty
// aggregate. It leaves r in stBulk for a string's bytes, else in stType.
func (r *replyReader) header(so int64) (bool, error) {
	r.st = stType
	if r.neg {
		if r.n != 1 {
			return false, r.malformed("negative length")
		}
		return true, nil // a null
	}
	switch r.kind {
	case '$', '=', '!':
		if so+r.n > maxReplyBytes {
			return false, r.fail("bytes in the reply:", so+r.n, maxReplyBytes)
		}
		r.st, r.n = stBulk, r.n+2
		return false, nil
	}
	n := r.n
	if r.kind == '%' || r.kind == '|' {
		n *= 2
	}
	if n == 0 {
		return r.kind != '|', nil // an empty attribute is no value
	}
	switch {
	case r.depth == maxReplyDepth:
		return false, r.fail("nesting depth", int64(r.depth)+1, maxReplyDepth)
	case r.pending+n > maxReplyPending:
		return false, r.fail("elements announced and not arrived:", r.pending+n, maxReplyPending)
	case r.elems+n > maxReplyElements:
		return false, r.fail("elements announced in the reply:", r.elems+n, maxReplyElements)
	}
	if r.kind == '|' {
		r.attrs |= 1 << r.depth
	} else {
		r.attrs &^= 1 << r.depth
	}
	r.left[r.depth] = n
	r.depth++
	r.pending += n
	r.elems += n
	return false, nil
}

// ended records that a value ended, and reports whether it ended the
// reply.
func (r *replyReader) ended() bool {
	for r.depth > 0 {
		d := r.depth - 1
		r.left[d]--
		r.pending--
		if r.left[d] > 0 {
			return false
		}
		r.depth--
		if r.attrs&(1<<d) != 0 {
			return false // an attribute: the value it describes follows
		}
	}
	r.elems, r.bytes = 0, 0
	return true
}

// maxLength is the largest length the header being read may announce.
func (r *replyReader) maxLength() int64 {
	switch r.kind {
	case '$', '=', '!':
		return maxReplyBulk
	case '%', '|':
		return maxReplyPending / 2
	}
	return maxReplyPending
}

// lengthName names the length being read, which is known only to be at
// least its digits so far.
func (r *replyReader) lengthName() string {
	switch r.kind {
	case '$', '=', '!':
		return "a string length (bytes) of at least"
	case '%', '|':
		return "a map length (pairs) of at least"
	}
	return "an array length of at least"
}

// fail stops r at a value past a bound.
func (r *replyReader) fail(what string, got, bound int64) error {
	r.err = &replyBoundError{what: what, got: got, bound: bound}
	return r.err
}

// malformed stops r at bytes that are not RESP as Redis writes it,
// which go-redis would fail on too.
func (r *replyReader) malformed(what string) error {
	r.err = fmt.Errorf("redis reply refused: malformed: %s", what)
	return r.err
}

// boundedConn is a connection to Redis whose reads fail once a reply
// goes past a bound (see replyReader), closing the connection. Only
// go-redis's reader of the connection reads it, one read at a time.
type boundedConn struct {
	net.Conn
	r replyReader
}

func (c *boundedConn) Read(b []byte) (int, error) {
	if c.r.err != nil {
		return 0, c.r.err // the connection is closed
	}
	n, err := c.Conn.Read(b)
	if n > 0 {
		if ferr := c.r.feed(b[:n]); ferr != nil {
			_ = c.Conn.Close()
			return 0, ferr
		}
	}
	return n, err
}

// NetConn returns the connection c reads, as crypto/tls.Conn does, for
// go-redis's look at the socket of a pooled connection.
func (c *boundedConn) NetConn() net.Conn { return c.Conn }

// boundedSyscallConn is a boundedConn over a connection with a socket
// (TCP without TLS), which go-redis's pool looks at to drop connections
// that died while idle, as it does for its own.
type boundedSyscallConn struct {
	*boundedConn
	sc syscall.Conn
}

func (c boundedSyscallConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

// bound returns conn reading replies through a replyReader.
func bound(conn net.Conn) net.Conn {
	bc := &boundedConn{Conn: conn}
	if sc, ok := conn.(syscall.Conn); ok {
		return boundedSyscallConn{bc, sc}
	}
	return bc
}

// replyBounds is the hook that makes a client's connections bounded
// (see boundedConn). Every client the store builds has it: see
// newClient and newSentinelClient.
type replyBounds struct{}

func (replyBounds) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return bound(conn), nil
	}
}

func (replyBounds) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (replyBounds) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// newClient returns a client for opt whose replies are bounded.
func newClient(opt *goredis.Options) *goredis.Client {
	c := goredis.NewClient(opt)
	c.AddHook(replyBounds{})
	return c
}

// newSentinelClient returns a client of a sentinel whose replies are
// bounded.
func newSentinelClient(opt *goredis.Options) *goredis.SentinelClient {
	c := goredis.NewSentinelClient(opt)
	c.AddHook(replyBounds{})
	return c
}

package redis

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// feedAll feeds stream to a fresh replyReader in chunks of size (the
// whole stream if 0), and returns the first error.
func feedAll(stream string, size int) (*replyReader, error) {
	var r replyReader
	b := []byte(stream)
	if size == 0 {
		size = len(b)
	}
	for len(b) > 0 {
		n := min(size, len(b))
		if err := r.feed(b[:n]); err != nil {
			return &r, err
		}
		b = b[n:]
	}
	return &r, nil
}

// aggregate returns a RESP header of kind announcing n.
func header(kind byte, n int) string { return string(kind) + strconv.Itoa(n) + "\r\n" }

// nested returns depth levels of arrays of one element around leaf.
func nested(depth int, leaf string) string { return strings.Repeat("*1\r\n", depth) + leaf }

func TestReplyReaderTakes(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{"apply reply", "*4\r\n:1\r\n:0\r\n:1733100000000000\r\n:-5\r\n"},
		{"pipeline of replies", "*1\r\n:1\r\n+OK\r\n$40\r\n" + strings.Repeat("a", 40) + "\r\n-NOSCRIPT No matching script\r\n"},
		{"nulls", "$-1\r\n*-1\r\n_\r\n*2\r\n$-1\r\n_\r\n"},
		{"empty", "*0\r\n$0\r\n\r\n%0\r\n~0\r\n"},
		{"RESP3 scalars", ",1.5\r\n#t\r\n(123456789012345678901234567890\r\n=15\r\ntxt:Some string\r\n!5\r\nERR x\r\n"},
		{"RESP3 map and set", "%2\r\n+role\r\n+master\r\n+modules\r\n*0\r\n~2\r\n:1\r\n:2\r\n"},
		{"push", ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\nabc\r\n"},
		{"attribute before a reply", "|1\r\n+key\r\n*1\r\n:1\r\n*2\r\n:1\r\n:2\r\n"},
		{"attribute inside an array", "*2\r\n|1\r\n+a\r\n+b\r\n:1\r\n:2\r\n"},
		{"empty attribute", "|0\r\n:1\r\n"},
		{"bulk of CRLFs", "$6\r\n\r\n\r\n\r\n\r\n"},
		{"bulk at the bound", header('$', maxReplyBulk) + strings.Repeat("x", maxReplyBulk) + "\r\n"},
		{"array at the bound", header('*', maxReplyPending) + strings.Repeat(":1\r\n", maxReplyPending)},
		{"map at the bound", header('%', maxReplyPending/2) + strings.Repeat(":1\r\n", maxReplyPending)},
		{"depth at the bound", nested(maxReplyDepth, ":1\r\n")},
		{"depth again after a reply", nested(maxReplyDepth, ":1\r\n") + nested(maxReplyDepth, ":1\r\n")},
		{"line at the bound", "+" + strings.Repeat("a", maxReplyLine-2) + "\r\n"},
		{"replies that together pass every bound", strings.Repeat(header('*', maxReplyPending)+strings.Repeat(":1\r\n", maxReplyPending), 10)},
		// A CLUSTER SLOTS of 16,384 ranges of three nodes, in RESP3.
		{"cluster slots", header('*', 16384) + strings.Repeat("*5\r\n:0\r\n:0\r\n"+strings.Repeat("*4\r\n$9\r\n127.0.0.1\r\n:7000\r\n$40\r\n"+strings.Repeat("a", 40)+"\r\n%1\r\n$8\r\nhostname\r\n$0\r\n\r\n", 3), 16384)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, size := range []int{0, 1, 2, 3, 7, 4096} {
				r, err := feedAll(tt.give, size)
				if err != nil {
					t.Fatalf("chunks of %d: %v", size, err)
				}
				if r.depth != 0 || r.st != stType || r.bytes != 0 || r.elems != 0 || r.pending != 0 {
					t.Fatalf("chunks of %d: reader not at a reply's start: %+v", size, *r)
				}
			}
		})
	}
}

func TestReplyReaderRefuses(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{"issue 37's array", "*250000000\r\n"},
		{"array past the bound", header('*', maxReplyPending+1)},
		{"set past the bound", header('~', maxReplyPending+1)},
		{"push past the bound", header('>', maxReplyPending+1)},
		{"map past the bound", header('%', maxReplyPending/2+1)},
		{"attribute past the bound", header('|', maxReplyPending/2+1)},
		{"bulk past the bound", header('$', maxReplyBulk+1)},
		{"verbatim past the bound", header('=', maxReplyBulk+1)},
		{"blob error past the bound", header('!', maxReplyBulk+1)},
		{"bulk in an array", "*2\r\n:1\r\n$2000000000\r\n"},
		{"huge length", "*99999999999999999999999999\r\n"},
		{"leading zeros", "*" + strings.Repeat("0", 64) + "1\r\n"},
		{"depth past the bound", nested(maxReplyDepth+1, ":1\r\n")},
		{"deep nesting", nested(200_000, ":1\r\n")},
		{"nesting in maps", strings.Repeat("%1\r\n+k\r\n", maxReplyDepth+1)},
		{"pending past the bound", "*2\r\n" + header('*', maxReplyPending-1)},
		{"elements past the bound", header('*', 9) + strings.Repeat(header('*', maxReplyPending-8)+strings.Repeat(":1\r\n", maxReplyPending-8), 9)},
		{"line past the bound", "+" + strings.Repeat("a", maxReplyLine+1)},
		{"error line past the bound", "-" + strings.Repeat("a", maxReplyLine+1) + "\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, size := range []int{0, 1, 5, 4096} {
				_, err := feedAll(tt.give, size)
				var be *replyBoundError
				if !errors.As(err, &be) {
					t.Fatalf("chunks of %d: err = %v, want a replyBoundError", size, err)
				}
			}
		})
	}
}

func TestReplyReaderMalformed(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{"unknown type", "?1\r\n"},
		{"streamed string", "$?\r\n"},
		{"streamed array", "*?\r\n"},
		{"length without digits", "*\r\n"},
		{"negative length", "*-2\r\n"},
		{"sign alone", "$-\r\n"},
		{"no LF", "*1\rx"},
		{"plus sign", "*+1\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := feedAll(tt.give, 1)
			if err == nil {
				t.Fatal("took it")
			}
		})
	}
}

// TestReplyReaderBytesBound sends strings of the largest size in one
// reply until it passes maxReplyBytes, reusing one string's bytes.
func TestReplyReaderBytesBound(t *testing.T) {
	var r replyReader
	if err := r.feed([]byte(header('*', 64))); err != nil {
		t.Fatal(err)
	}
	s := []byte(header('$', maxReplyBulk) + strings.Repeat("x", maxReplyBulk) + "\r\n")
	var err error
	sent := 0
	for range 64 {
		if err = r.feed(s); err != nil {
			break
		}
		sent += len(s)
	}
	var be *replyBoundError
	if !errors.As(err, &be) {
		t.Fatalf("err = %v, want a replyBoundError", err)
	}
	if sent > maxReplyBytes {
		t.Fatalf("took %d bytes of one reply, want at most %d", sent, maxReplyBytes)
	}
}

// TestReplyReaderSticks checks that an error stays.
func TestReplyReaderSticks(t *testing.T) {
	r, err := feedAll("*250000000\r\n", 0)
	if err == nil {
		t.Fatal("took it")
	}
	if err2 := r.feed([]byte(":1\r\n")); err2 != err {
		t.Fatalf("after an error, feed = %v, want %v", err2, err)
	}
}

// BenchmarkReplyReader reads the reply of a batch of 128 calls of three
// checks each (apply.lua's 1 + 3 integers a check), per call.
func BenchmarkReplyReader(b *testing.B) {
	const calls = 128
	var sb strings.Builder
	sb.WriteString(header('*', 1+3*3*calls))
	sb.WriteString(":1\r\n")
	for range 3 * calls {
		sb.WriteString(":0\r\n:99\r\n:1733100000123456\r\n")
	}
	reply := []byte(sb.String())
	var r replyReader
	b.SetBytes(int64(len(reply)))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.feed(reply); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/calls, "ns/call")
}

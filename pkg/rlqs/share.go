package rlqs

import (
	"context"

	"google.golang.org/grpc/peer"
)

// A holder is one client connection's share of the buckets all streams
// hold (MaxTotalBuckets, MaxTotalBytes), so that no client can take what
// another needs. With n connections holding RLQS streams, each one's
// share is a 1/n of either bound. A new bucket is held while the process
// is within its bounds, as before; past them, one is still held for a
// connection within its share, and the connection furthest past its own
// owes one back: its streams abandon that many buckets at their next
// report. So an Envoy within its share is always served; the process
// holds at most twice its bounds meanwhile (what connections past their
// share hold beyond it, owed back, is at most the bounds), and never
// more (overLimit).
type holder struct {
	streams int   // open streams of the connection
	buckets int   // held
	bytes   int64 // counted against MaxTotalBytes, with bucketOverhead
	owed    int   // buckets to give back at the next report
}

// holderKey names the connection of a stream: its client's address and
// port. (Every stream of a Unix socket is one holder.)
func holderKey(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// join adds a stream to its connection's holder.
func (s *Server) join(ctx context.Context) *holder {
	k := holderKey(ctx)
	s.hmu.Lock()
	defer s.hmu.Unlock()
	h := s.holders[k]
	if h == nil {
		h = &holder{}
		s.holders[k] = h
	}
	h.streams++
	return h
}

// leave takes a stream off its holder, once its buckets are released.
func (s *Server) leave(ctx context.Context, h *holder) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if h.streams--; h.streams == 0 {
		delete(s.holders, holderKey(ctx))
	}
}

// hold counts a new bucket of h whose id and store key are n bytes
// against the process's bounds, or returns ErrServerFull and counts
// nothing (see holder).
func (s *Server) hold(h *holder, n int) error {
	c := int64(n) + bucketOverhead
	s.hmu.Lock()
	defer s.hmu.Unlock()
	total, bytes := s.held.Load()+1, s.heldBytes.Load()+c
	over := total > int64(s.o.MaxTotalBuckets) || bytes > s.o.MaxTotalBytes
	if over {
		share, byteShare := s.shareLocked()
		if h.buckets+1 > share || h.bytes+c > byteShare || s.overLimit(total, bytes) {
			return ErrServerFull
		}
		if v := s.furthestPastLocked(share, h); v != nil {
			v.owed++
		}
	}
	h.buckets++
	h.bytes += c
	s.held.Add(1)
	s.heldBytes.Add(c)
	return nil
}

// overLimit reports whether total buckets of bytes would be past twice
// the bounds, which no share may take the process to.
func (s *Server) overLimit(total, bytes int64) bool {
	return total > 2*int64(s.o.MaxTotalBuckets) || bytes > 2*s.o.MaxTotalBytes
}

// shareLocked returns one connection's share of the buckets and of their
// bytes.
// requires s.hmu held
func (s *Server) shareLocked() (int, int64) {
	n := max(1, len(s.holders))
	return s.o.MaxTotalBuckets / n, s.o.MaxTotalBytes / int64(n)
}

// furthestPastLocked returns the holder, other than h, furthest past its
// share of buckets once what it owes is taken off, or nil if none is
// past it.
// requires s.hmu held
func (s *Server) furthestPastLocked(share int, h *holder) *holder {
	var v *holder
	most := share
	for _, o := range s.holders {
		if k := o.buckets - o.owed; o != h && k > most {
			v, most = o, k
		}
	}
	return v
}

// release gives back what hold counted for a bucket of h of n bytes.
func (s *Server) release(h *holder, n int) {
	c := int64(n) + bucketOverhead
	s.hmu.Lock()
	defer s.hmu.Unlock()
	h.buckets--
	h.bytes -= c
	if h.owed > h.buckets {
		h.owed = h.buckets
	}
	s.held.Add(-1)
	s.heldBytes.Add(-c)
}

package redis

// Queued returns how many calls wait in the store's pipe for a round trip.
func Queued(s *Store) int {
	s.pipe.mu.Lock()
	defer s.pipe.mu.Unlock()
	return len(s.pipe.queue)
}

package front

// LoopWakes sums the event batches s's loops handled.
func (s *Server) LoopWakes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for l := range s.loops {
		n += l.(*loop).wakes.Load()
	}
	return n
}

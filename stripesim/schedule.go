package stripesim

// tickLocked applies everything Stripe does by itself that has fallen due on
// the simulator clock: authorizations expire, drafts with auto_advance
// finalize, open invoices with auto_advance charge themselves. It runs before every request,
// after every Advance and before the ground truth is read, so time-driven
// changes look, from outside, as if they happened when due. The caller holds
// s.mu.
func (s *Server) tickLocked() {
	now := s.nowLocked()
	s.expireAuthorizationsLocked(now)
	s.advanceInvoicesLocked(now)
}

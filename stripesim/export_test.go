package stripesim

// Counts returns how many objects of each bounded kind, saved idempotent
// responses and owner entries the simulator holds: what its memory grows
// with.
func (s *Server) Counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	return map[string]int{
		"charges": len(st.Charges), "charges_index": len(st.charges),
		"payment_intents": len(st.PaymentIntents), "payment_intents_index": len(st.paymentIntents),
		"refunds": len(st.Refunds), "transfers": len(st.Transfers), "payouts": len(st.Payouts),
		"idempotency": len(st.Idempotency), "owners": len(st.Owners),
	}
}

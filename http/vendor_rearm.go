package http

import (
	"net/http"

	"github.com/keybrake/keybrake"
)

// rearmReleased turns the replay of a released reservation into a new
// reservation of the same Idempotency-Key (Store.Rearm), under every cap
// and count cap of now. A vendor keeps no answer to a request it refused
// or failed (Resend saves 2xx answers only), so a retry of it runs anew
// upstream and must count anew; forwarded as a replay it would send
// uncounted. Any other outcome of Reserve is returned as it is; a replay
// with another body stays a replay, which the caller refuses.
func (p *vendorProxy) rearmReleased(r *http.Request, rsv *keybrake.Reservation, res keybrake.ReserveResult, err error) (keybrake.ReserveResult, error) {
	if err != nil || !res.Replay || res.Reservation.State != keybrake.StateReleased || res.Reservation.Fingerprint != rsv.Fingerprint {
		return res, err
	}
	return p.s.Store.Rearm(r.Context(), keybrake.ReserveArgs{Reservation: rsv, Now: p.s.Now()})
}

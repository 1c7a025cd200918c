package http

import (
	"net/http"
	"strings"

	"github.com/keybrake/keybrake"
)

// openVendors builds the proxies of the vendors other than Stripe that
// the server is configured for.
func (s *Server) openVendors() {
	s.vendors = map[string]*vendorProxy{}
	if s.Twilio != nil {
		tv := newTwilioVendor(*s.Twilio)
		tv.lookup = &twilioLookup{store: s.Store, now: s.Now, answerWithin: s.UpstreamTimeout, skew: s.Twilio.LookupSkew}
		if tv.lookup.skew <= 0 {
			tv.lookup.skew = defaultTwilioSkew
		}
		s.vendors[keybrake.VendorTwilio] = newVendorProxy(s, tv, s.Twilio.Upstream)
	}
	if s.Resend != nil {
		s.vendors[keybrake.VendorResend] = newVendorProxy(s, &resendVendor{cfg: *s.Resend}, s.Resend.Upstream)
	}
}

// serveVendor picks the vendor by the route's first segment (/twilio/…,
// /resend/…) and serves the rest of the path through it. A vendor that is
// not configured refuses in its own shape.
func (s *Server) serveVendor(w http.ResponseWriter, r *http.Request, raw string) {
	name, rest, _ := strings.Cut(strings.TrimPrefix(raw, "/"), "/")
	if p := s.vendors[name]; p != nil {
		// route marked every answer by Stripe's upstream; this route's
		// own upstream decides.
		w.Header().Del("Keybrake-Upstream")
		if s.vendorSimulated(name) {
			w.Header().Set("Keybrake-Upstream", "simulator")
		}
		p.serve(w, r, "/"+rest)
		return
	}
	err := keybrake.Errorf(keybrake.ENOTFOUND, "keybrake is not configured to proxy %s.", name)
	switch name {
	case keybrake.VendorTwilio:
		(&twilioVendor{}).WriteError(w, err)
	case keybrake.VendorResend:
		(&resendVendor{}).WriteError(w, err)
	default:
		s.writeStripeError(w, r, err, nil)
	}
}

// vendorFor returns the proxy of the vendor whose route a reservation's
// request took, and whether it was another vendor's than Stripe's; the
// proxy is nil when that vendor is not configured on this server.
func (s *Server) vendorFor(rsv *keybrake.Reservation) (*vendorProxy, bool) {
	name, _, _ := strings.Cut(strings.TrimPrefix(rsv.Request.Path, "/"), "/")
	if name != keybrake.VendorTwilio && name != keybrake.VendorResend {
		return nil, false
	}
	return s.vendors[name], true
}

// vendorSimulated reports whether the vendor's upstream is its built-in
// simulator.
func (s *Server) vendorSimulated(name string) bool {
	switch name {
	case keybrake.VendorTwilio:
		return s.Twilio != nil && s.Twilio.Simulated
	case keybrake.VendorResend:
		return s.Resend != nil && s.Resend.Simulated
	}
	return false
}

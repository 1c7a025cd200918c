package http

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/keybrake/keybrake"
)

// vendorRoute is a registered vendor and the upstream its requests go to;
// upstream is nil for a vendor the server is not configured for, whose
// route refuses every request in the vendor's own shape.
type vendorRoute struct {
	Vendor
	upstream *url.URL
}

// openVendors registers every vendor keybrake proxies, by route prefix.
// Adding a vendor is one line here.
func (s *Server) openVendors() {
	s.vendors = map[string]*vendorRoute{
		keybrake.VendorStripe: {newStripeVendor(s), s.Upstream},
		keybrake.VendorTwilio: {&twilioVendor{}, nil},
		keybrake.VendorResend: {&resendVendor{}, nil},
	}
	if s.Twilio != nil {
		tv := newTwilioVendor(*s.Twilio)
		tv.lookup = &twilioLookup{store: s.Store, now: s.Now, answerWithin: s.UpstreamTimeout, skew: s.Twilio.LookupSkew}
		if tv.lookup.skew <= 0 {
			tv.lookup.skew = defaultTwilioSkew
		}
		tv.own = &twilioOwnNumbers{rt: s.Transport, now: s.Now}
		s.vendors[keybrake.VendorTwilio] = &vendorRoute{tv, s.Twilio.Upstream}
	}
	if s.Resend != nil {
		s.vendors[keybrake.VendorResend] = &vendorRoute{&resendVendor{cfg: *s.Resend, now: s.Now}, s.Resend.Upstream}
	}
}

// stripeRoute is Stripe's route, which also serves /v1/… and the MCP
// endpoint's tools.
func (s *Server) stripeRoute() *vendorRoute { return s.vendors[keybrake.VendorStripe] }

// routesVendor reports whether the raw path is under a vendor's prefix
// (/stripe/…, /twilio/…).
func (s *Server) routesVendor(raw string) bool {
	name, _, ok := strings.Cut(strings.TrimPrefix(raw, "/"), "/")
	return ok && s.vendors[name] != nil
}

// serveVendor picks the vendor by the route's first segment and serves the
// rest of the path through the request path. A vendor that is not
// configured refuses in its own shape.
func (s *Server) serveVendor(w http.ResponseWriter, r *http.Request, raw string) {
	name, rest, _ := strings.Cut(strings.TrimPrefix(raw, "/"), "/")
	vr := s.vendors[name]
	if name != keybrake.VendorStripe {
		// route marked every answer by Stripe's upstream; this route's
		// own upstream decides.
		w.Header().Del("Keybrake-Upstream")
		if s.vendorSimulated(name) {
			w.Header().Set("Keybrake-Upstream", "simulator")
		}
	}
	if vr.upstream == nil {
		vr.WriteError(w, r, keybrake.Errorf(keybrake.ENOTFOUND, "keybrake is not configured to proxy %s.", name))
		return
	}
	s.proxy.serve(w, r, vr, "/"+rest)
}

// routeOf returns the route of the vendor whose path a reservation's
// request recorded (Stripe's record their /v1/… API path), nil when that
// vendor is not configured on this server.
func (s *Server) routeOf(rsv *keybrake.Reservation) *vendorRoute {
	name, _, _ := strings.Cut(strings.TrimPrefix(rsv.Request.Path, "/"), "/")
	vr := s.vendors[name]
	if vr == nil {
		vr = s.stripeRoute()
	}
	if vr.upstream == nil {
		return nil
	}
	return vr
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

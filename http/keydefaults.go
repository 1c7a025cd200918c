package http

import (
	"encoding/json"
	"strings"

	"github.com/keybrake/keybrake"
)

// createDefaults fills upd with what a key gets when its creation leaves a
// field out and the zero value would be unsafe, and returns one notice per
// default taken, for the 201 response. A key created without
// allowed_endpoints may call keybrake.DefaultEndpoints, not all of Stripe.
func createDefaults(fields map[string]json.RawMessage, upd *keybrake.KeyUpdate) []string {
	var notices []string
	if _, ok := fields["allowed_endpoints"]; !ok {
		d := keybrake.DefaultEndpoints()
		var vendor string
		if json.Unmarshal(fields["vendor"], &vendor) == nil && vendor != keybrake.VendorStripe && keybrake.KnownVendor(vendor) {
			d = keybrake.DefaultVendorEndpoints(vendor)
			upd.AllowedEndpoints = &d
			return append(notices, `allowed_endpoints was not given; the key allows `+strings.Join(d, ", ")+`. Give allowed_endpoints to choose, or ["*"] for every operation.`)
		}
		upd.AllowedEndpoints = &d
		notices = append(notices, `allowed_endpoints was not given; the key allows the default payments set: `+strings.Join(d, ", ")+`. Give allowed_endpoints to choose, or ["*"] for every operation.`)
	}
	return notices
}

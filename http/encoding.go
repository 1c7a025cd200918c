package http

import (
	"net/http"
	"strings"

	"github.com/keybrake/keybrake"
)

// bodyKinder is a Vendor that names the kind of body its API takes
// ("form", "JSON"), for the refusals that tell a client how to send it.
type bodyKinder interface {
	BodyKind() string
}

// bodyKind is what v's refusals call its request bodies.
func bodyKind(v Vendor) string {
	if bk, ok := v.(bodyKinder); ok {
		return bk.BodyKind() + " body"
	}
	return "request body"
}

// refuseEncoding returns EINVALID, naming Content-Encoding, for a request
// whose body keybrake would not read as the upstream would: a
// Content-Encoding other than identity, an empty one, or the header sent
// more than once. keybrake parses and prices the bytes it received; an
// encoded body would be priced as one thing and read upstream as another
// (fail closed). Every vendor's requests pass here before Parse.
func refuseEncoding(h http.Header, v Vendor) error {
	vals := h.Values("Content-Encoding")
	switch {
	case len(vals) == 0:
		return nil
	case len(vals) > 1:
		return keybrake.ErrorParam("Content-Encoding", "The Content-Encoding header was sent %d times; keybrake accepts it once, with one value, and forwarded nothing.", len(vals))
	}
	ce := strings.Trim(vals[0], " \t")
	switch {
	case strings.EqualFold(ce, "identity"):
		return nil
	case ce == "":
		return keybrake.ErrorParam("Content-Encoding", "The Content-Encoding header is empty; leave it out or give it one value.")
	}
	return keybrake.ErrorParam("Content-Encoding", "keybrake does not read %s-encoded bodies; send the %s uncompressed, without Content-Encoding. Nothing was forwarded.", ce, bodyKind(v))
}

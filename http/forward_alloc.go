package http

import (
	"io"
	"net/http"
)

// maxPrealloc bounds the buffer readAllSized sets aside from a declared
// length; Stripe's requests and answers are far smaller.
const maxPrealloc = 64 << 10

// readAllSized reads r to its end like io.ReadAll, starting from a buffer
// of the size the sender declared (its Content-Length, -1 when unknown)
// when that is at most limit: a charge's answer of a few KiB then costs
// one allocation and no copies, instead of io.ReadAll's doubling from 512
// bytes. The declared size is only a hint: the result is what r returns,
// whatever its length, and at most maxPrealloc bytes are set aside before
// they arrive, so a client declaring a large body and sending it slowly
// holds at most maxPrealloc more than the bytes it sent.
func readAllSized(r io.Reader, declared, limit int64) ([]byte, error) {
	n := int64(512)
	if declared >= 0 && declared <= limit {
		n = min(declared+1, maxPrealloc) // +1: room to read the EOF without growing
	}
	b := make([]byte, 0, n)
	for {
		m, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

// withoutClientHeader returns r, a copy for forwarding, holding of the
// client's headers only User-Agent, the one rewrite reads. ReverseProxy
// clones the inbound headers into the upstream request before Rewrite,
// and rewrite and Vendor.Prepare then replace them from nothing (the
// vendor reads the client's headers from what Parse kept): the clone of
// every client header was garbage on every request.
func withoutClientHeader(r *http.Request) *http.Request {
	h := make(http.Header, 1)
	if ua, ok := r.Header["User-Agent"]; ok {
		h["User-Agent"] = ua
	}
	r.Header = h
	return r
}

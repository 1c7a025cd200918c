package stripe_test

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/keybrake/keybrake/stripe"
)

// referenceFingerprint is Fingerprint as first written, field by field
// into the hash: a stored reservation's fingerprint must stay equal to
// what a retry of the same request computes after an upgrade.
func referenceFingerprint(a stripe.FingerprintArgs) string {
	h := sha256.New()
	field := func(s string) {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	for _, s := range []string{a.KeyID, a.Operation, a.Path, a.Account, a.Version} {
		field(s)
	}
	var pairs []stripe.Pair
	if a.Form != nil {
		pairs = append(pairs, a.Form.Pairs...)
	}
	sort.SliceStable(pairs, func(i, j int) bool { return pairs[i].Key < pairs[j].Key })
	field(strconv.Itoa(len(pairs)))
	for _, p := range pairs {
		field(p.Key)
		field(p.Value)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestFingerprintUnchanged(t *testing.T) {
	bodies := []string{
		"",
		"amount=100&currency=usd&source=tok_visa",
		"source=tok_visa&currency=usd&amount=100",
		"expand[]=b&amount=1&expand[]=a&metadata[z]=1&metadata[a]=2",
		"items[0][price]=p&items[1][price]=q&items[10][price]=r&items[2][price]=s",
		"description=" + strings.Repeat("x", 70000),
		"a=1&b=" + strings.Repeat("é", 3000) + "&c=%00",
	}
	for _, body := range bodies {
		f, err := stripe.ParseForm(body)
		if err != nil {
			t.Fatalf("%.40q: %v", body, err)
		}
		for _, a := range []stripe.FingerprintArgs{
			{KeyID: "vk_1", Operation: "charges.create", Path: "/v1/charges", Form: f},
			{KeyID: "vk_1", Operation: "charges.create", Path: "/v1/charges", Account: "acct_1", Version: "2025-03-31.basil", Form: f},
			{KeyID: "vk_2", Operation: "customers.retrieve", Path: "/v1/customers/cus_1"},
		} {
			// Twice: the second call reuses a pooled buffer.
			for range 2 {
				if got, want := stripe.Fingerprint(a), referenceFingerprint(a); got != want {
					t.Fatalf("%.40q: Fingerprint %s, reference %s", body, got, want)
				}
			}
		}
	}
}

func BenchmarkFingerprint(b *testing.B) {
	f, err := stripe.ParseForm("amount=100&currency=usd&source=tok_visa&metadata[order]=42")
	if err != nil {
		b.Fatal(err)
	}
	a := stripe.FingerprintArgs{KeyID: "vk_1", Operation: "charges.create", Path: "/v1/charges", Form: f}
	b.ReportAllocs()
	for b.Loop() {
		stripe.Fingerprint(a)
	}
}

func BenchmarkParseForm(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := stripe.ParseForm("amount=100&currency=usd&source=tok_visa&metadata[order]=42"); err != nil {
			b.Fatal(err)
		}
	}
}

package stripe_test

import (
	"testing"

	"github.com/keybrake/keybrake/stripe"
)

func TestFingerprint(t *testing.T) {
	fp := func(tb testing.TB, a stripe.FingerprintArgs, body string) string {
		tb.Helper()
		f, err := stripe.ParseForm(body)
		if err != nil {
			tb.Fatal(err)
		}
		a.Form = f
		return stripe.Fingerprint(a)
	}
	base := stripe.FingerprintArgs{KeyID: "vk_1", Operation: "charges.create", Path: "/v1/charges", Account: "acct_1", Version: "2025-03-31.basil"}
	const body = "amount=100&currency=usd&metadata[x]=a b&expand[]=one&expand[]=two"
	want := fp(t, base, body)

	for name, same := range map[string]string{
		"OKReordered":       "expand[]=one&metadata[x]=a b&currency=usd&expand[]=two&amount=100",
		"OKEncodedName":     "amount=100&currency=usd&metadata%5Bx%5D=a b&expand%5B%5D=one&expand[]=two",
		"OKPlusIsSpace":     "amount=100&currency=usd&metadata[x]=a+b&expand[]=one&expand[]=two",
		"OKPercent20":       "amount=100&currency=usd&metadata[x]=a%20b&expand[]=one&expand[]=two",
		"OKEmptySeparators": "&amount=100&&currency=usd&metadata[x]=a b&expand[]=one&expand[]=two&",
	} {
		t.Run(name, func(t *testing.T) {
			if got := fp(t, base, same); got != want {
				t.Fatalf("%q fingerprints apart from %q", same, body)
			}
		})
	}
	for name, other := range map[string]string{
		"ErrListOrder":  "amount=100&currency=usd&metadata[x]=a b&expand[]=two&expand[]=one",
		"ErrValue":      "amount=101&currency=usd&metadata[x]=a b&expand[]=one&expand[]=two",
		"ErrExtraParam": body + "&description=",
		"ErrShifted":    "amount=100&currency=usd&metadata[x]=a b&expand[]=one&expand[]=two&x=",
	} {
		t.Run(name, func(t *testing.T) {
			if got := fp(t, base, other); got == want {
				t.Fatalf("%q fingerprints like %q", other, body)
			}
		})
	}
	for name, a := range map[string]stripe.FingerprintArgs{
		"ErrAccount":       {KeyID: "vk_1", Operation: "charges.create", Path: "/v1/charges", Account: "acct_2", Version: base.Version},
		"ErrPlatform":      {KeyID: "vk_1", Operation: "charges.create", Path: "/v1/charges", Version: base.Version},
		"ErrVersion":       {KeyID: "vk_1", Operation: "charges.create", Path: "/v1/charges", Account: "acct_1"},
		"ErrKey":           {KeyID: "vk_2", Operation: "charges.create", Path: "/v1/charges", Account: "acct_1", Version: base.Version},
		"ErrFieldBoundary": {KeyID: "vk_1", Operation: "charges.create", Path: "/v1/chargesacct_1", Version: base.Version},
	} {
		t.Run(name, func(t *testing.T) {
			if got := fp(t, a, body); got == want {
				t.Fatalf("%+v fingerprints like %+v", a, base)
			}
		})
	}
}

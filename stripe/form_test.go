package stripe_test

import (
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

func TestParseForm(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		f, err := stripe.ParseForm("amount=2000&currency=usd&metadata%5Border%5D=42&expand[]=a&expand[]=b&items[0][price]=p")
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := f.Get("amount"); v != "2000" {
			t.Fatalf("amount=%q", v)
		}
		if v, _ := f.Get("metadata", "order"); v != "42" {
			t.Fatalf("metadata[order]=%q", v)
		}
		if l, _ := f.Tree["expand"].([]any); len(l) != 2 {
			t.Fatalf("expand=%v", f.Tree["expand"])
		}
		if v, _ := f.Get("items", "0", "price"); v != "p" {
			t.Fatalf("items[0][price]=%q", v)
		}
	})
	for name, body := range map[string]string{
		"ErrBadEscape":   "amount=%zz",
		"ErrBadKey":      "metadata[order=1",
		"ErrDuplicate":   "amount=1&amount=2",
		"ErrValueParent": "metadata=1&metadata[a]=2",
		"ErrEmptyKey":    "=5",
		"ErrDeep":        "a[b][c][d][e][f][g][h][i]=1",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := stripe.ParseForm(body); keybrake.ErrorCode(err) != keybrake.EINVALID {
				t.Fatalf("ParseForm(%q) err=%v, want EINVALID", body, err)
			}
		})
	}
}

func TestParseAmount(t *testing.T) {
	for s, ok := range map[string]bool{"1": true, "99999999": true, "100000000": false, "0": false, "-5": false, "1.5": false, "": false, "1e3": false} {
		_, err := stripe.ParseAmount("amount", s)
		if (err == nil) != ok {
			t.Errorf("ParseAmount(%q) err=%v, want ok=%v", s, err, ok)
		}
	}
}

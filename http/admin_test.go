package http_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/keybrake/keybrake"
)

func TestAdmin_CreateKey(t *testing.T) {
	e := MustOpen(t)
	t.Run("OKSeedShape", func(t *testing.T) {
		resp, body := e.Admin(t, "POST", "/vault/keys", `{"vendor":"stripe","label":"nats-billing-run-2026-11","daily_usd_cap":250,"allowed_endpoints":["/v1/charges","/v1/payment_intents"],"expires_at":"2026-11-30T00:00:00Z"}`)
		if resp.StatusCode != 201 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		var v map[string]any
		json.Unmarshal(body, &v)
		vk, _ := v["vault_key"].(string)
		if !strings.HasPrefix(vk, "vault_key_") || v["daily_usd_cap"] != 250.0 {
			t.Fatalf("body = %s", body)
		}
		// Stored only as a hash: the key record never shows it again.
		id := v["id"].(string)
		_, got := e.Admin(t, "GET", "/vault/keys/"+id, "")
		if strings.Contains(string(got), vk) || strings.Contains(string(got), `"vault_key":`) {
			t.Fatalf("GET shows the vault key: %s", got)
		}
		k, err := e.Store.FindKeyByID(context.Background(), id)
		if err != nil || k.SecretHash == vk || len(k.SecretHash) != 64 {
			t.Fatalf("stored %+v, %v", k, err)
		}
	})
	t.Run("OKExactDecimal", func(t *testing.T) {
		id, _ := e.CreateKey(t, `{"daily_usd_cap":0.29,"total_usd_cap":"1234567.891234"}`)
		k, _ := e.Store.FindKeyByID(context.Background(), id)
		if *k.Daily != 290_000 || *k.Total != 1_234_567_891_234 {
			t.Fatalf("caps = %d %d", *k.Daily, *k.Total)
		}
	})
	for name, body := range map[string]string{
		"ErrUnknownField":    `{"daily_usd_cap":10,"dayly_usd_cap":5}`,
		"ErrNegativeCap":     `{"daily_usd_cap":-1}`,
		"ErrFloatNoise":      `{"daily_usd_cap":1e2}`,
		"ErrTooPrecise":      `{"daily_usd_cap":0.0000001}`,
		"ErrVendor":          `{"vendor":"paypal"}`,
		"ErrTimezone":        `{"timezone":"Mars/Olympus"}`,
		"ErrPastExpiry":      `{"expires_at":"2020-01-01T00:00:00Z"}`,
		"ErrBadEndpoint":     `{"allowed_endpoints":["/v1/../vault"]}`,
		"ErrBadCurrency":     `{"allowed_currencies":["xyz"]}`,
		"ErrGarbage":         `{"daily_usd_cap":`,
		"ErrNotObject":       `[1,2]`,
		"ErrTrailing":        `{"label":"a"} {"label":"b"}`,
		"ErrDuplicateField":  `{"daily_usd_cap":1,"daily_usd_cap":1000}`,
		"ErrEmpty":           ``,
		"ErrWrongType":       `{"allowed_endpoints":"charges.create"}`,
		"ErrHugeCap":         `{"daily_usd_cap":99999999999999999}`,
		"ErrMetadataNotText": `{"metadata":{"a":1}}`,
	} {
		t.Run(name, func(t *testing.T) {
			before, _, _ := e.Store.FindKeys(context.Background(), keybrake.KeyFilter{Limit: 100})
			resp, out := e.Admin(t, "POST", "/vault/keys", body)
			if resp.StatusCode != 400 {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			var v struct {
				Error struct{ Code, Message string }
			}
			if json.Unmarshal(out, &v) != nil || v.Error.Code != "invalid" || v.Error.Message == "" {
				t.Fatalf("body = %s", out)
			}
			after, _, _ := e.Store.FindKeys(context.Background(), keybrake.KeyFilter{Limit: 100})
			if len(after) != len(before) {
				t.Fatal("a key was created from bad input")
			}
		})
	}
	t.Run("ErrOversized", func(t *testing.T) {
		resp, _ := e.Admin(t, "POST", "/vault/keys", `{"label":"`+strings.Repeat("a", 100_000)+`"}`)
		if resp.StatusCode != 400 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("ErrNoToken", func(t *testing.T) {
		resp, _ := e.Do(t, "POST", "/vault/keys", `{"daily_usd_cap":1}`, map[string]string{"Authorization": "Bearer wrong"})
		if resp.StatusCode != 401 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
}

func TestAdmin_KeyLifecycle(t *testing.T) {
	e := MustOpen(t)
	id, secret := e.CreateKey(t, `{"daily_usd_cap":20,"label":"agent-7"}`)
	sc := e.Stripe(secret)
	ctx := context.Background()
	if _, err := sc.V1Charges.Create(ctx, chargeParams(1500, "usd")); err != nil {
		t.Fatal(err)
	}
	t.Run("GetShowsSpend", func(t *testing.T) {
		_, body := e.Admin(t, "GET", "/vault/keys/"+id, "")
		var v struct {
			Budget struct {
				Daily struct {
					Cap, Spent, Remaining keybrake.Micros `json:"-"`
					CapUSD                json.Number     `json:"cap_usd"`
					SpentUSD              json.Number     `json:"spent_usd"`
					RemainingUSD          json.Number     `json:"remaining_usd"`
					ResetsAt              string          `json:"resets_at"`
				} `json:"daily"`
			} `json:"budget"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatal(err)
		}
		d := v.Budget.Daily
		if d.CapUSD != "20.00" || d.SpentUSD != "15.00" || d.RemainingUSD != "5.00" || d.ResetsAt != "2026-11-30T00:00:00Z" {
			t.Fatalf("daily = %+v (%s)", d, body)
		}
	})
	t.Run("OwnBudget", func(t *testing.T) {
		resp, body := e.Do(t, "GET", "/stripe/v1/keybrake/key", "", map[string]string{"Authorization": "Bearer " + secret})
		if resp.StatusCode != 200 || resp.Header.Get("Keybrake-Daily-Remaining-Usd") != "5.00" {
			t.Fatalf("%d %q %s", resp.StatusCode, resp.Header.Get("Keybrake-Daily-Remaining-Usd"), body)
		}
	})
	t.Run("PatchCapBelowSpendBlocks", func(t *testing.T) {
		resp, body := e.Admin(t, "PATCH", "/vault/keys/"+id, `{"daily_usd_cap":10}`)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		_, err := sc.V1Charges.Create(ctx, chargeParams(50, "usd"))
		StripeErr(t, err, 429)
	})
	t.Run("PatchCapUp", func(t *testing.T) {
		e.Admin(t, "PATCH", "/vault/keys/"+id, `{"daily_usd_cap":100}`)
		if _, err := sc.V1Charges.Create(ctx, chargeParams(50, "usd")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("ErrPatchTimezone", func(t *testing.T) {
		resp, _ := e.Admin(t, "PATCH", "/vault/keys/"+id, `{"timezone":"Asia/Tokyo"}`)
		if resp.StatusCode != 400 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("Events", func(t *testing.T) {
		_, body := e.Admin(t, "GET", "/vault/keys/"+id+"/events?limit=10", "")
		var v struct {
			Data []keybrake.Event `json:"data"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatal(err)
		}
		var allow, deny int
		for _, ev := range v.Data {
			switch ev.Decision {
			case keybrake.DecisionAllow:
				allow++
				if ev.Operation != "charges.create" || ev.UpstreamStatus != 200 || !strings.HasPrefix(ev.ObjectID, "ch_") || ev.RequestID == "" {
					t.Fatalf("allow event = %+v", ev)
				}
			case keybrake.DecisionDeny:
				deny++
				if !strings.Contains(ev.Reason, "daily cap") || ev.Micros != 500_000 {
					t.Fatalf("deny event = %+v", ev)
				}
			}
		}
		if allow != 2 || deny != 1 {
			t.Fatalf("allow=%d deny=%d: %s", allow, deny, body)
		}
		NoLeak(t, body)
	})
	t.Run("List", func(t *testing.T) {
		e.CreateKey(t, `{"label":"second"}`)
		_, body := e.Admin(t, "GET", "/vault/keys?limit=1", "")
		var v struct {
			Data    []map[string]any `json:"data"`
			HasMore bool             `json:"has_more"`
		}
		json.Unmarshal(body, &v)
		if len(v.Data) != 1 || !v.HasMore {
			t.Fatalf("page = %s", body)
		}
		_, body = e.Admin(t, "GET", "/vault/keys?limit=1&starting_after="+v.Data[0]["id"].(string), "")
		json.Unmarshal(body, &v)
		if len(v.Data) != 1 || v.HasMore {
			t.Fatalf("second page = %s", body)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		resp, _ := e.Admin(t, "GET", "/vault/keys/vk_nope", "")
		if resp.StatusCode != 404 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
}

// Path tricks never reach the admin API or the upstream outside /v1/.
func TestProxy_PathTricks(t *testing.T) {
	e := MustOpen(t)
	_, secret := e.CreateKey(t, `{"daily_usd_cap":10}`)
	for _, path := range []string{
		"/stripe/v1/../../vault/keys",
		"/stripe/v1/..%2f..%2fvault/keys",
		"/stripe/v1/%2e%2e/%2e%2e/vault/keys",
		"/stripe/v1//charges",
		"/stripe/v1/charges/../../_sim/objects",
		"/stripe/../vault/keys",
	} {
		t.Run(path, func(t *testing.T) {
			req, _ := http.NewRequest("GET", e.Server.URL(), nil)
			req.URL.Opaque = path // sent as is, uncleaned
			req.Header.Set("Authorization", "Bearer "+secret)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 400 && resp.StatusCode != 404 {
				t.Fatalf("status %d for %s", resp.StatusCode, path)
			}
		})
	}
}

// Malformed money requests get a precise Stripe-shaped 400 and change
// nothing: no reservation, no upstream object.
func TestProxy_BadInput(t *testing.T) {
	e := MustOpen(t)
	id, secret := e.CreateKey(t, `{"daily_usd_cap":10}`)
	h := map[string]string{"Authorization": "Bearer " + secret}
	for name, body := range map[string]string{
		"ErrBadEncoding": "amount=%zz&currency=usd",
		"ErrNegative":    "amount=-100&currency=usd&source=tok_visa",
		"ErrFraction":    "amount=10.5&currency=usd&source=tok_visa",
		"ErrTooLarge":    "amount=1000000000&currency=usd&source=tok_visa",
		"ErrNoAmount":    "currency=usd&source=tok_visa",
		"ErrUnknownCur":  "amount=100&currency=zzz&source=tok_visa",
		"ErrDuplicate":   "amount=100&amount=1&currency=usd",
		"ErrBrackets":    "amount=100&currency=usd&metadata[a=1",
		"ErrOversized":   "amount=100&currency=usd&description=" + strings.Repeat("x", 2<<20),
		"ErrNoRateEUR":   "amount=100&currency=gbp&source=tok_visa",
	} {
		t.Run(name, func(t *testing.T) {
			resp, out := e.Do(t, "POST", "/stripe/v1/charges", body, h)
			if resp.StatusCode != 400 && resp.StatusCode != 403 {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			var v struct {
				Error struct{ Type, Message string }
			}
			if json.Unmarshal(out, &v) != nil || v.Error.Type != "invalid_request_error" || v.Error.Message == "" {
				t.Fatalf("body = %s", out)
			}
			NoLeak(t, out)
		})
	}
	if n := len(e.Sim.GroundTruth().Charges); n != 0 {
		t.Fatalf("%d charges upstream", n)
	}
	if sp := e.Spend(t, id); sp.Day != 0 {
		t.Fatalf("spend = %s", sp.Day)
	}
	rs, _ := e.Store.FindReservations(context.Background(), keybrake.ReservationFilter{KeyID: id})
	if len(rs) != 0 {
		t.Fatalf("%d reservations from bad input", len(rs))
	}
}

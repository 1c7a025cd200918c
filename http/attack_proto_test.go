package http_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	stripego "github.com/stripe/stripe-go/v82"

	khttp "github.com/keybrake/keybrake/http"
)

// protoCase is one request a vault-key holder sends, header lines as
// written.
type protoCase struct {
	name, method, path, body string
	lines                    []Header
}

// mustRefuseUnpriced sends each case with a capped key that allows every
// operation but not unpriced ones, and asserts keybrake refused it as
// unpriced (403) without sending anything upstream.
func mustRefuseUnpriced(t *testing.T, cases []protoCase) {
	t.Helper()
	e, u := MustOpenRecorded(t)
	_, secret := e.CreateKey(t, `{"daily_usd_cap":100,"allowed_endpoints":["*"]}`)
	auth := Header{"Authorization", "Bearer " + secret}
	form := Header{"Content-Type", "application/x-www-form-urlencoded"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := u.Count()
			resp, body := e.DoRaw(t, tc.method, tc.path, tc.body, append([]Header{auth, form}, tc.lines...)...)
			if resp.StatusCode != 403 || !strings.Contains(string(body), "cannot price") {
				t.Fatalf("status %d, want 403 as unpriced: %s", resp.StatusCode, body)
			}
			if n := u.Count() - before; n != 0 {
				t.Fatalf("%d requests went upstream", n)
			}
		})
	}
}

// Before API version 2018 customers.create took plan (with quantity,
// trial_end and tax_percent): "The identifier of the plan to subscribe the
// customer to" — a subscription whose first invoice Stripe charges at once
// to the source sent alongside. keybrake forwards Stripe-Version, and Stripe
// reads a request's parameters by the version it names, so with an old
// version a free customers.create (in the default payments set) charged
// plan amount × quantity, unlimited, past every cap.
func TestAttackProto_LegacyCustomerPlan(t *testing.T) {
	old := Header{"Stripe-Version", "2017-08-15"}
	mustRefuseUnpriced(t, []protoCase{
		{"Plan", "POST", "/stripe/v1/customers", "source=tok_visa&plan=gold&quantity=1000", []Header{old}},
		{"TrialEndNow", "POST", "/stripe/v1/customers", "source=tok_visa&plan=gold&trial_end=now", []Header{old}},
		{"UpdatePlan", "POST", "/stripe/v1/customers/cus_1", "plan=gold&quantity=1000", []Header{old}},
		{"UpdateTaxPercent", "POST", "/stripe/v1/customers/cus_1", "tax_percent=99", []Header{old}},
	})
}

// customers.update takes bank_account, like card a legacy alias of source
// (it is in the current OpenAPI description): a new bank account source
// becomes the customer's default, and Stripe retries the open invoices of
// past_due subscriptions when a new source is set. card was unpriced;
// bank_account passed as free.
func TestAttackProto_CustomerBankAccountSource(t *testing.T) {
	mustRefuseUnpriced(t, []protoCase{
		{"Token", "POST", "/stripe/v1/customers/cus_1", "bank_account=btok_us_verified", nil},
		{"Object", "POST", "/stripe/v1/customers/cus_1", "bank_account[object]=bank_account&bank_account[country]=US", nil},
	})
}

// Before API version 2017-04-06 (the transfer/payout split) an account's
// payout settings were transfer_schedule and transfer_statement_descriptor,
// two versions before they became payout_schedule (unpriced since
// TestAttackCanon_AccountLegacyPayoutParams) and settings[payouts]. With
// Stripe-Version 2017-02-14 accounts.update could schedule a connected
// account's payouts as a free write.
func TestAttackProto_LegacyTransferSchedule(t *testing.T) {
	old := Header{"Stripe-Version", "2017-02-14"}
	mustRefuseUnpriced(t, []protoCase{
		{"Interval", "POST", "/stripe/v1/accounts/acct_1", "transfer_schedule[interval]=daily", []Header{old}},
		{"DelayDays", "POST", "/stripe/v1/accounts/acct_1", "transfer_schedule[delay_days]=minimum", []Header{old}},
		{"Descriptor", "POST", "/stripe/v1/accounts/acct_1", "transfer_statement_descriptor=x", []Header{old}},
	})
}

// The same writes without those parameters stay free and are forwarded,
// with the client's Stripe-Version.
func TestProxy_LegacyVersionFreeWrites(t *testing.T) {
	e, u := MustOpenRecorded(t)
	_, secret := e.CreateKey(t, `{"daily_usd_cap":100,"allowed_endpoints":["*"]}`)
	resp, body := e.DoRaw(t, "POST", "/stripe/v1/customers", "email=a%40example.com&source=tok_visa",
		Header{"Authorization", "Bearer " + secret}, Header{"Stripe-Version", "2017-08-15"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if v := u.Last(t).Header.Get("Stripe-Version"); v != "2017-08-15" {
		t.Fatalf("upstream Stripe-Version %q", v)
	}
}

// Every top-level parameter of Stripe's API is [a-z][a-z0-9_]*. A name
// outside that is one keybrake cannot know Stripe reads as keybrake does:
// next to amount=100, an "AMOUNT", a "\ufeffamount" (a byte order mark
// opens the body), or a Cyrillic "аmount" is a second amount to a parser
// that folds case, strips the mark or normalizes look-alikes, which
// keybrake never priced; "_method" is Rack's method override, which turns
// the POST keybrake classified into another method. They were forwarded;
// they are refused. Nested keys (metadata's) stay the client's own.
func TestAttackProto_ParamNamesStripeNeverUses(t *testing.T) {
	e, u := MustOpenRecorded(t)
	_, secret := e.CreateKey(t, `{"daily_usd_cap":100,"allowed_endpoints":["*"]}`)
	auth := Header{"Authorization", "Bearer " + secret}
	form := Header{"Content-Type", "application/x-www-form-urlencoded"}
	for _, tc := range []struct{ name, path, body string }{
		{"UpperCase", "/stripe/v1/charges", "AMOUNT=900000&" + charge},
		{"EscapedUpperCase", "/stripe/v1/charges", "%41mount=900000&" + charge},
		{"ByteOrderMark", "/stripe/v1/charges", "\ufeffamount=900000&" + charge},
		{"CyrillicA", "/stripe/v1/charges", "%D0%B0mount=900000&" + charge},
		{"ZeroWidthSpace", "/stripe/v1/charges", "amo%E2%80%8Bunt=900000&" + charge},
		{"MethodOverride", "/stripe/v1/customers/cus_1", "_method=DELETE&email=a%40example.com"},
		{"LeadingDigit", "/stripe/v1/charges", "1amount=900000&" + charge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := u.Count()
			resp, body := e.DoRaw(t, "POST", tc.path, tc.body, auth, form)
			MustRefuse(t, u, before, resp, body, 400, "")
			if !strings.Contains(string(body), "Invalid parameter name") {
				t.Fatalf("refused for another reason: %s", body)
			}
		})
	}
	t.Run("QueryUpperCase", func(t *testing.T) {
		before := u.Count()
		resp, body := e.DoRaw(t, "GET", "/stripe/v1/charges?Customer=cus_1", "", auth)
		MustRefuse(t, u, before, resp, body, 400, "")
	})
	t.Run("OKNestedKeysFree", func(t *testing.T) {
		resp, body := e.DoRaw(t, "POST", "/stripe/v1/charges", charge+"&metadata%5BOrder-Id%5D=1&metadata%5B%C3%A9t%C3%A9%5D=2&expand%5B%5D=customer&address_line1=x", auth, form)
		if resp.StatusCode == 400 && strings.Contains(string(body), "Invalid parameter name") {
			t.Fatalf("refused: %s", body)
		}
	})
}

// A preview Stripe-Version (the beta OpenAPI description) gives
// accounts.update risk_controls: pause_requested=false unpauses the payouts
// or charges of a connected account the platform paused, what
// accounts.unreject (unpriced) does. It passed as a free write.
func TestAttackProto_PreviewRiskControls(t *testing.T) {
	preview := Header{"Stripe-Version", "2026-08-26.preview"}
	mustRefuseUnpriced(t, []protoCase{
		{"UnpausePayouts", "POST", "/stripe/v1/accounts/acct_1", "risk_controls[payouts][pause_requested]=false", []Header{preview}},
		{"UnpauseCharges", "POST", "/stripe/v1/accounts/acct_1", "risk_controls[charges][pause_requested]=false", []Header{preview}},
	})
}

// Framing and hop-by-hop headers cannot change what reaches Stripe: the
// upstream request is rebuilt from what keybrake parsed. Trailers (read by
// Go after the body, never into the headers keybrake parsed) do not reach
// it as headers or trailers; a Connection header naming Stripe-Account and
// Idempotency-Key does not strip the values keybrake reserved and scoped
// under; Transfer-Encoding with Content-Length is read chunked, as
// forwarded with a length.
func TestProxy_WireFramingUpstream(t *testing.T) {
	e, u := MustOpenRecorded(t)
	_, secret := e.CreateKey(t, `{"daily_usd_cap":100,"allowed_accounts":["acct_1"]}`)
	start := "POST /stripe/v1/charges HTTP/1.1\r\nHost: keybrake\r\nConnection: close\r\nAuthorization: Bearer " + secret +
		"\r\nContent-Type: application/x-www-form-urlencoded\r\n"
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n", len(charge), charge)
	for _, tc := range []struct {
		name, raw string
		account   string // the Stripe-Account upstream
		idem      string // the Idempotency-Key upstream, "" for keybrake's own
	}{
		{"Trailers", start + "Stripe-Account: acct_1\r\nTransfer-Encoding: chunked\r\nTrailer: Stripe-Account, Idempotency-Key\r\n\r\n" +
			chunked + "Stripe-Account: acct_2\r\nIdempotency-Key: trailer-1\r\n\r\n", "acct_1", ""},
		{"UndeclaredTrailers", start + "Stripe-Account: acct_1\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked + "Stripe-Account: acct_2\r\n\r\n", "acct_1", ""},
		{"ConnectionNamesParsedHeaders", strings.Replace(start, "Connection: close", "Connection: close, Stripe-Account, Idempotency-Key", 1) +
			fmt.Sprintf("Stripe-Account: acct_1\r\nIdempotency-Key: hop-1\r\nContent-Length: %d\r\n\r\n%s", len(charge), charge), "acct_1", "hop-1"},
		{"TransferEncodingAndLength", start + "Stripe-Account: acct_1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n" + chunked + "\r\n", "acct_1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := e.DoWire(t, tc.raw)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			up := u.Last(t)
			if got := up.Header.Get("Stripe-Account"); got != tc.account {
				t.Errorf("upstream Stripe-Account %q, want %q", got, tc.account)
			}
			if got := up.Header.Get("Idempotency-Key"); tc.idem != "" && got != tc.idem || tc.idem == "" && !strings.HasPrefix(got, "kb_") {
				t.Errorf("upstream Idempotency-Key %q, want %q", got, tc.idem)
			}
			if len(up.Trailer) != 0 || len(up.TransferEncoding) != 0 || up.Header.Get("Trailer") != "" || up.Header.Get("Connection") != "" {
				t.Errorf("upstream framing: trailer %v, transfer-encoding %v, headers %v", up.Trailer, up.TransferEncoding, up.Header)
			}
			if up.ContentLength <= int64(len(charge)) {
				t.Errorf("upstream Content-Length %d", up.ContentLength)
			}
		})
	}
}

// Stripe's API speaks HTTP/2, and so does keybrake's transport to it
// (ForceAttemptHTTP2). The upstream request was a clone of the client's
// with headers, body and framing rebuilt, but its Trailer kept: the client's
// chunked trailers, which keybrake never parsed. Over HTTP/1.1 with a
// Content-Length Go drops them; over HTTP/2 Go sends them, after the body,
// as a trailing HEADERS frame. A client's "Stripe-Account: acct_2" and
// "Idempotency-Key" trailers reached Stripe on a charge keybrake scoped to
// the platform and reserved under its own key: one merge of trailers into
// headers upstream and the money moves on another account, replayed by
// another key. Nothing keybrake did not parse may reach the upstream.
func TestAttackProto_TrailersOverHTTP2(t *testing.T) {
	var (
		mu       sync.Mutex
		trailers []http.Header
		sim      *url.URL
	)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body) // the trailers arrive after the body
		mu.Lock()
		trailers = append(trailers, r.Trailer.Clone())
		mu.Unlock()
		if r.ProtoMajor != 2 {
			http.Error(w, "want HTTP/2", http.StatusHTTPVersionNotSupported)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		httputil.NewSingleHostReverseProxy(sim).ServeHTTP(w, r)
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)
	e := MustOpen(t, func(s *khttp.Server) {
		s.Upstream, _ = url.Parse(up.URL)
		s.Transport = up.Client().Transport
	})
	sim, _ = url.Parse(e.SimURL)
	_, secret := e.CreateKey(t, `{"daily_usd_cap":100}`)
	raw := "POST /stripe/v1/charges HTTP/1.1\r\nHost: keybrake\r\nConnection: close\r\nAuthorization: Bearer " + secret +
		"\r\nContent-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\nTrailer: Stripe-Account, Idempotency-Key\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n0\r\n", len(charge), charge) + "Stripe-Account: acct_2\r\nIdempotency-Key: trailer-1\r\n\r\n"
	resp, body := e.DoWire(t, raw)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(trailers) != 1 {
		t.Fatalf("%d requests upstream", len(trailers))
	}
	if len(trailers[0]) != 0 {
		t.Fatalf("upstream got the client's trailers %v", trailers[0])
	}
	if gt := e.Sim.GroundTruth().Charges; len(gt) != 1 || gt[0].Account != "" {
		t.Fatalf("charges %+v", gt)
	}
}

// A free write was free unless it sent one of the money-moving parameters
// keybrake listed: those of the current API and the legacy and preview
// names found so far. Stripe reads a request by the Stripe-Version it
// names, so a money-moving parameter of a version nobody reviewed passed
// as free (and one on a priced write, such as the pre-2017 recipient of
// transfers.create, which paid a recipient's bank account rather than a
// connected account, passed as priced), whatever the key's caps. Now every
// parameter of a free or priced write, and everything nested under it, is
// one the current API documents or a reviewed legacy name; any other is
// refused with a 400 naming it, before anything goes upstream, even for a
// key that allows unpriced writes (which would otherwise forward it
// uncounted).
func TestAttackProto_UnreviewedLegacyParam(t *testing.T) {
	e, u := MustOpenRecorded(t)
	_, secret := e.CreateKey(t, `{"daily_usd_cap":100,"allowed_endpoints":["*"],"allow_unpriced":true}`)
	auth := Header{"Authorization", "Bearer " + secret}
	form := Header{"Content-Type", "application/x-www-form-urlencoded"}
	old := Header{"Stripe-Version", "2017-08-15"}
	preview := Header{"Stripe-Version", "2026-08-26.preview; invoice_partial_payments_beta=v3"}
	for _, tc := range []struct {
		name, path, body, param string
		lines                   []Header
	}{
		// A name standing for a money parameter of a version nobody
		// reviewed, on a write keybrake lets through as free.
		{"UnknownTopLevel", "/stripe/v1/customers", "email=a%40example.com&signup_charge_amount=99999999", "signup_charge_amount", []Header{old}},
		// Nested in a parameter the current API documents.
		{"UnknownChild", "/stripe/v1/subscriptions/sub_1", "cancel_at_period_end=true&cancellation_details[charge_remaining_now]=true", "cancellation_details[charge_remaining_now]", nil},
		{"UnknownListItemChild", "/stripe/v1/customers", "tax_id_data[0][type]=eu_vat&tax_id_data[0][prepay]=5000", "tax_id_data[0][prepay]", nil},
		{"ChildOfAValue", "/stripe/v1/customers/cus_1", "description[amount]=5000", "description[amount]", nil},
		{"UnknownDeep", "/stripe/v1/payment_intents", "amount=1000&currency=usd&payment_method_options[card][capture_extra_amount]=5000", "payment_method_options[card][capture_extra_amount]", nil},
		// A real preview parameter on a free write: invoices.attach_payment
		// takes amount_requested only in a preview version.
		{"PreviewOnly", "/stripe/v1/invoices/in_1/attach_payment", "payment_intent=pi_1&amount_requested=5000", "amount_requested", []Header{preview}},
		// A real legacy parameter on a priced write: before 2017
		// transfers.create sent the money to a recipient's bank account.
		{"LegacyOnPriced", "/stripe/v1/transfers", "amount=1000&currency=usd&recipient=rp_1", "recipient", []Header{old}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := u.Count()
			resp, body := e.DoRaw(t, "POST", tc.path, tc.body, append([]Header{auth, form}, tc.lines...)...)
			if resp.StatusCode != 400 || !strings.Contains(string(body), `"invalid_request_error"`) ||
				!strings.Contains(string(body), `"param": "`+tc.param+`"`) || !strings.Contains(string(body), "does not know parameter") {
				t.Fatalf("status %d, want 400 naming %s: %s", resp.StatusCode, tc.param, body)
			}
			if n := u.Count() - before; n != 0 {
				t.Fatalf("%d requests went upstream", n)
			}
		})
	}

	// What the official SDK sends on a free write still passes: expand
	// (as expand[0]), metadata, nested documented parameters.
	t.Run("SDK", func(t *testing.T) {
		before := u.Count()
		p := &stripego.CustomerCreateParams{Email: stripego.String("a@example.com"),
			InvoiceSettings: &stripego.CustomerCreateInvoiceSettingsParams{Footer: stripego.String("thanks")}}
		p.AddExpand("invoice_settings.default_payment_method")
		p.AddMetadata("order", "42")
		if _, err := e.Stripe(secret).V1Customers.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		if u.Count()-before != 1 {
			t.Fatal("the SDK's customers.create did not go upstream")
		}
	})
	// A reviewed legacy name that moves money is unpriced, not refused:
	// forwarded uncounted for this key, which allows unpriced writes.
	t.Run("ReviewedLegacy", func(t *testing.T) {
		before := u.Count()
		resp, body := e.DoRaw(t, "POST", "/stripe/v1/customers", "email=a%40example.com&account_balance=500", auth, form, old)
		if resp.StatusCode >= 400 && strings.Contains(string(body), "does not know parameter") {
			t.Fatalf("a reviewed legacy parameter was refused as unknown: %s", body)
		}
		if u.Count()-before != 1 {
			t.Fatalf("status %d: did not go upstream: %s", resp.StatusCode, body)
		}
	})
}

// TestAttackSelf_DeepDocumentedParam: parameters API 2026-08-26 documents
// seven and eight levels deep, on writes keybrake lets through as free,
// reach Stripe: Visa Compelling Evidence 3.0's prior transactions'
// shipping addresses on disputes.update, and a previewed schedule phase's
// price_data on invoices.create_preview. The form parser refused every
// name deeper than six levels, so an honest client could not send them.
func TestAttackSelf_DeepDocumentedParam(t *testing.T) {
	e, u := MustOpenRecorded(t)
	_, secret := e.CreateKey(t, `{"daily_usd_cap":100,"allowed_endpoints":["*"]}`)
	auth := Header{"Authorization", "Bearer " + secret}
	form := Header{"Content-Type", "application/x-www-form-urlencoded"}
	for _, tc := range []struct{ name, path, body string }{
		{"DisputeEvidence", "/stripe/v1/disputes/dp_1",
			"evidence[enhanced_evidence][visa_compelling_evidence_3][prior_undisputed_transactions][0][charge]=ch_1" +
				"&evidence[enhanced_evidence][visa_compelling_evidence_3][prior_undisputed_transactions][0][shipping_address][city]=Paris"},
		{"PreviewPhase", "/stripe/v1/invoices/create_preview",
			"customer=cus_1&schedule_details[phases][0][items][0][price_data][currency]=usd" +
				"&schedule_details[phases][0][items][0][price_data][product]=prod_1" +
				"&schedule_details[phases][0][items][0][price_data][unit_amount]=500" +
				"&schedule_details[phases][0][items][0][price_data][recurring][interval]=month"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := u.Count()
			resp, body := e.DoRaw(t, "POST", tc.path, tc.body, auth, form)
			if resp.StatusCode == 400 && strings.Contains(string(body), "keybrake") {
				t.Fatalf("refused by keybrake: %s", body)
			}
			if u.Count()-before != 1 {
				t.Fatalf("status %d: did not go upstream: %s", resp.StatusCode, body)
			}
		})
	}
	// Deeper than any documented parameter is still refused.
	resp, body := e.DoRaw(t, "POST", "/stripe/v1/customers", "metadata[a][b][c][d][e][f][g][h]=1", auth, form)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "nested too deeply") {
		t.Fatalf("status %d, want 400 nested too deeply: %s", resp.StatusCode, body)
	}
}

// TestAttackSelf_MetadataKeyWithSpace: Stripe takes metadata keys with
// spaces ("Order ID"), and the SDKs send them as metadata[Order+ID]; the
// canonical parse refused every parameter name with a space, so an honest
// client's create failed. A space inside a nested name is taken; one at
// either end of it, where a parser that trims would read another name
// (metadata[keybrake_idempotency_key ]), and every other space or
// control character stay refused.
func TestAttackSelf_MetadataKeyWithSpace(t *testing.T) {
	e, u := MustOpenRecorded(t)
	_, secret := e.CreateKey(t, `{"daily_usd_cap":100,"allowed_endpoints":["*"]}`)
	before := u.Count()
	p := &stripego.CustomerCreateParams{Email: stripego.String("a@example.com")}
	p.AddMetadata("Order ID", "42")
	if _, err := e.Stripe(secret).V1Customers.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	if u.Count()-before != 1 {
		t.Fatal("customers.create with metadata[Order ID] did not go upstream")
	}
	auth := Header{"Authorization", "Bearer " + secret}
	form := Header{"Content-Type", "application/x-www-form-urlencoded"}
	for _, body := range []string{
		"amount=100&currency=usd&customer=cus_1&metadata[keybrake_idempotency_key+]=x",
		"amount=100&currency=usd&customer=cus_1&metadata[+order]=x",
		"amount=100&currency=usd&customer=cus_1&metadata[a%09b]=x",
		"amount=100&currency=usd&customer=cus_1&metadata[a%C2%A0b]=x",
		"amount=100&currency=usd&customer=cus_1&transfer_data[+destination]=acct_1",
	} {
		before := u.Count()
		resp, out := e.DoRaw(t, "POST", "/stripe/v1/payment_intents", body, auth, form)
		if resp.StatusCode != 400 || u.Count() != before {
			t.Fatalf("%s: status %d, %d upstream: %s", body, resp.StatusCode, u.Count()-before, out)
		}
	}
}

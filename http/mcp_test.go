package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	stripego "github.com/stripe/stripe-go/v82"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
)

// bearer adds the vault key to every request of an MCP client, as Claude
// Code's --header or any Streamable HTTP client's headers do.
type bearer struct {
	secret string
	base   http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.secret)
	return b.base.RoundTrip(r)
}

// mcpTransport carries the MCP clients' requests.
var mcpTransport = http.DefaultTransport.(*http.Transport).Clone()

// MCP connects the official Go SDK's client to keybrake's /mcp with the
// vault key; t.Cleanup closes the session.
func (e *Env) MCP(tb testing.TB, secret, name string, opts *mcp.ClientOptions) *mcp.ClientSession {
	tb.Helper()
	cs, err := e.MCPConnect(secret, name, opts)
	if err != nil {
		tb.Fatalf("connect %s: %v", name, err)
	}
	tb.Cleanup(func() {
		cs.Close()
		// A connection the client's transport dialed but never used is
		// "new" to the server, and http.Server.Shutdown waits 5 seconds
		// for such connections before it treats them as idle.
		mcpTransport.CloseIdleConnections()
	})
	return cs
}

// MCPConnect connects or returns the error.
func (e *Env) MCPConnect(secret, name string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	return mcpConnect(e.Server.URL(), secret, name, opts)
}

// mcpConnect connects to the keybrake server at base.
func mcpConnect(base, secret, name string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1.0"}, opts)
	tr := &mcp.StreamableClientTransport{Endpoint: base + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearer{secret, mcpTransport}, Timeout: 30 * time.Second}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return client.Connect(ctx, tr, nil)
}

func toolNames(tb testing.TB, cs *mcp.ClientSession) []string {
	tb.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		tb.Fatalf("ListTools: %v", err)
	}
	var names []string
	for _, t := range res.Tools {
		names = append(names, t.Name)
	}
	sort.Strings(names)
	return names
}

func call(tb testing.TB, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	tb.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		tb.Fatalf("CallTool %s: %v", tool, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

func mustOK(tb testing.TB, res *mcp.CallToolResult) map[string]any {
	tb.Helper()
	if res.IsError {
		tb.Fatalf("tool error: %s", text(res))
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(text(res)), &v); err != nil {
		tb.Fatalf("result is not a JSON object: %v: %s", err, text(res))
	}
	return v
}

// paymentIntent makes a succeeded payment intent upstream, outside
// keybrake, for refunds to act on.
func (e *Env) paymentIntent(tb testing.TB, cents int64) string {
	tb.Helper()
	pi, err := e.Direct().V1PaymentIntents.Create(context.Background(), &stripego.PaymentIntentCreateParams{
		Amount: stripego.Int64(cents), Currency: stripego.String("usd"), PaymentMethod: stripego.String("pm_card_visa"), Confirm: stripego.Bool(true)})
	if err != nil {
		tb.Fatal(err)
	}
	return pi.ID
}

func (e *Env) events(tb testing.TB, keyID string) []*keybrake.Event {
	tb.Helper()
	e.Server.FlushAudit()
	es, _, err := e.Store.FindEvents(context.Background(), keybrake.EventFilter{KeyID: keyID, Limit: 1000})
	if err != nil {
		tb.Fatal(err)
	}
	return es
}

func TestMCPToolsFollowAllowlist(t *testing.T) {
	e := MustOpen(t)
	all := []string{"create_customer", "create_invoice", "create_invoice_item", "create_payment_link", "create_price", "create_product",
		"create_refund", "finalize_invoice", "keybrake_budget", "list_customers", "list_payment_intents", "list_prices", "list_products",
		"retrieve_balance", "search_stripe_resources"}
	unpriced := []string{"create_invoice_item", "create_payment_link", "finalize_invoice"}
	for _, tc := range []struct {
		name string
		key  string
		want []string
	}{
		{"Default", `{"daily_usd_cap": 50}`, []string{"create_customer", "create_refund", "keybrake_budget", "list_customers", "list_payment_intents", "retrieve_balance", "search_stripe_resources"}},
		{"RefundsOnly", `{"daily_usd_cap": 50, "allowed_endpoints": ["refunds.create"]}`, []string{"create_refund", "keybrake_budget"}},
		{"PathPrefix", `{"daily_usd_cap": 50, "allowed_endpoints": ["/v1/invoices", "/v1/products"]}`, []string{"create_invoice", "create_product", "keybrake_budget", "list_products", "search_stripe_resources"}},
		{"PathPrefixUnpriced", `{"daily_usd_cap": 50, "allow_unpriced": true, "allowed_endpoints": ["/v1/invoices"]}`, []string{"create_invoice", "finalize_invoice", "keybrake_budget", "search_stripe_resources"}},
		{"SearchOneResource", `{"daily_usd_cap": 50, "allowed_endpoints": ["charges.search"]}`, []string{"keybrake_budget", "search_stripe_resources"}},
		{"AllCapped", `{"daily_usd_cap": 50, "allowed_endpoints": ["*"]}`, slices.DeleteFunc(slices.Clone(all), func(s string) bool { return slices.Contains(unpriced, s) })},
		{"AllUnpriced", `{"daily_usd_cap": 50, "allowed_endpoints": ["*"], "allow_unpriced": true}`, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, secret := e.CreateKey(t, tc.key)
			cs := e.MCP(t, secret, "list-test", nil)
			if got := toolNames(t, cs); !slices.Equal(got, tc.want) {
				t.Fatalf("tools = %v\nwant    %v", got, tc.want)
			}
			// Every tool has a strict JSON Schema.
			res, _ := cs.ListTools(context.Background(), nil)
			for _, tool := range res.Tools {
				s, _ := tool.InputSchema.(map[string]any)
				if s["type"] != "object" || s["additionalProperties"] != false {
					t.Fatalf("%s schema = %v", tool.Name, tool.InputSchema)
				}
			}
		})
	}
}

func TestMCPEachToolAgainstSimulator(t *testing.T) {
	e := MustOpen(t)
	keyID, secret := e.CreateKey(t, `{"daily_usd_cap": 100, "allowed_endpoints": ["*"], "allow_unpriced": true}`)
	cs := e.MCP(t, secret, "claude-code", nil)
	pi := e.paymentIntent(t, 5000)

	cus := mustOK(t, call(t, cs, "create_customer", map[string]any{"name": "Jo", "email": "jo@example.com", "metadata": map[string]any{"order": "42"}}))
	cusID := cus["id"].(string)
	if l := mustOK(t, call(t, cs, "list_customers", map[string]any{"email": "jo@example.com", "limit": 5})); len(l["data"].([]any)) != 1 {
		t.Fatalf("list_customers = %v", l)
	}
	prod := mustOK(t, call(t, cs, "create_product", map[string]any{"name": "T-shirt", "description": "cotton"}))
	prodID := prod["id"].(string)
	if l := mustOK(t, call(t, cs, "list_products", nil)); len(l["data"].([]any)) != 1 || l["data"].([]any)[0].(map[string]any)["id"] != prodID {
		t.Fatalf("list_products = %v", l)
	}
	price := mustOK(t, call(t, cs, "create_price", map[string]any{"product": prodID, "unit_amount": 2000, "currency": "usd"}))
	priceID := price["id"].(string)
	if price["unit_amount"] != float64(2000) || price["product"] != prodID || price["type"] != "one_time" {
		t.Fatalf("create_price = %v", price)
	}
	if l := mustOK(t, call(t, cs, "list_prices", map[string]any{"product": prodID})); len(l["data"].([]any)) != 1 {
		t.Fatalf("list_prices = %v", l)
	}
	link := mustOK(t, call(t, cs, "create_payment_link", map[string]any{"price": priceID, "quantity": 1, "redirect_url": "https://example.com/thanks"}))
	if url, _ := link["url"].(string); !strings.HasPrefix(url, "https://buy.stripe.com/") || link["currency"] != "usd" {
		t.Fatalf("create_payment_link = %v", link)
	}
	inv := mustOK(t, call(t, cs, "create_invoice", map[string]any{"customer": cusID, "days_until_due": 14}))
	if inv["status"] != "draft" || inv["collection_method"] != "send_invoice" {
		t.Fatalf("create_invoice = %v", inv)
	}
	invID := inv["id"].(string)
	mustOK(t, call(t, cs, "create_invoice_item", map[string]any{"customer": cusID, "invoice": invID, "amount": 1500, "currency": "usd", "description": "consulting"}))
	if it := mustOK(t, call(t, cs, "create_invoice_item", map[string]any{"customer": cusID, "invoice": invID, "price": priceID, "quantity": 2})); it["amount"] != float64(4000) {
		t.Fatalf("create_invoice_item with a price = %v", it)
	}
	if fin := mustOK(t, call(t, cs, "finalize_invoice", map[string]any{"invoice": invID})); fin["status"] != "open" || fin["amount_due"] != float64(5500) {
		t.Fatalf("finalize_invoice = %v", fin)
	}
	ref := mustOK(t, call(t, cs, "create_refund", map[string]any{"payment_intent": pi, "amount": 2000, "reason": "requested_by_customer"}))
	if ref["amount"] != float64(2000) || ref["status"] != "succeeded" {
		t.Fatalf("create_refund = %v", ref)
	}
	if l := mustOK(t, call(t, cs, "list_payment_intents", map[string]any{"limit": 10})); len(l["data"].([]any)) != 1 {
		t.Fatalf("list_payment_intents = %v", l)
	}
	if b := mustOK(t, call(t, cs, "retrieve_balance", nil)); b["object"] != "balance" {
		t.Fatalf("retrieve_balance = %v", b)
	}
	if s := mustOK(t, call(t, cs, "search_stripe_resources", map[string]any{"resource": "charges", "query": "amount>1000"})); len(s["data"].([]any)) != 1 {
		t.Fatalf("search_stripe_resources = %v", s)
	}
	budget := mustOK(t, call(t, cs, "keybrake_budget", nil))
	if d := budget["budget"].(map[string]any)["daily"].(map[string]any); d["spent_usd"] != 20.0 || d["remaining_usd"] != 80.0 {
		t.Fatalf("keybrake_budget daily = %v", d)
	}
	gt := e.Sim.GroundTruth()
	if len(gt.Products) != 1 || len(gt.Prices) != 1 || len(gt.PaymentLinks) != 1 || len(gt.InvoiceItems) != 2 {
		t.Fatalf("upstream: %d products, %d prices, %d payment links, %d invoice items", len(gt.Products), len(gt.Prices), len(gt.PaymentLinks), len(gt.InvoiceItems))
	}

	// Every call is in the key's audit log, marked as MCP with the session
	// and the client; keybrake_budget is a read that keybrake answers itself.
	es := e.events(t, keyID)
	if len(es) != 16 {
		t.Fatalf("%d events, want 16", len(es))
	}
	for _, ev := range es {
		if ev.Via != keybrake.ViaMCP || ev.MCPSession != cs.ID() || ev.MCPClient != "claude-code 1.0" || ev.Decision != keybrake.DecisionAllow {
			t.Fatalf("event %s via=%q session=%q (want %q) client=%q decision=%q", ev.Operation, ev.Via, ev.MCPSession, cs.ID(), ev.MCPClient, ev.Decision)
		}
	}
	if es[0].Operation != "keybrake.key" || es[0].UpstreamStatus != 0 {
		t.Fatalf("keybrake_budget event = %+v", es[0])
	}
	if sp := e.Spend(t, keyID); sp.Day != usd(20) {
		t.Fatalf("spent %s, want 20.00", sp.Day)
	}
}

// Payment links are unpriced: a key without allow_unpriced does not list
// create_payment_link, a call of it is an unknown tool, and the same
// request through the REST proxy is refused.
func TestMCPPaymentLinkNeedsAllowUnpriced(t *testing.T) {
	e := MustOpen(t)
	keyID, secret := e.CreateKey(t, `{"daily_usd_cap": 100, "allowed_endpoints": ["*"]}`)
	cs := e.MCP(t, secret, "agent", nil)
	prod := mustOK(t, call(t, cs, "create_product", map[string]any{"name": "T-shirt"}))
	price := mustOK(t, call(t, cs, "create_price", map[string]any{"product": prod["id"], "unit_amount": 2000, "currency": "usd"}))
	if slices.Contains(toolNames(t, cs), "create_payment_link") {
		t.Fatal("create_payment_link listed for a key without allow_unpriced")
	}
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_payment_link", Arguments: map[string]any{"price": price["id"], "quantity": 1}}); err == nil {
		t.Fatal("create_payment_link called on a key without allow_unpriced")
	}
	// The price of an invoice item is unpriced too.
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_invoice_item", Arguments: map[string]any{"customer": "cus_1", "invoice": "in_1", "price": price["id"]}}); err == nil {
		t.Fatal("create_invoice_item called on a key without allow_unpriced")
	}
	resp, body := e.Do(t, "POST", "/stripe/v1/payment_links", "line_items[0][price]="+price["id"].(string)+"&line_items[0][quantity]=1",
		map[string]string{"Authorization": "Bearer " + secret, "Content-Type": "application/x-www-form-urlencoded"})
	if resp.StatusCode != 403 {
		t.Fatalf("REST payment link without allow_unpriced: %d %s", resp.StatusCode, body)
	}
	if n := len(e.Sim.GroundTruth().PaymentLinks); n != 0 {
		t.Fatalf("%d payment links upstream, want 0", n)
	}
	if es := e.events(t, keyID); es[0].Decision != keybrake.DecisionDeny || es[0].Operation != "payment_links.create" {
		t.Fatalf("last event = %+v", es[0])
	}
}

func TestMCPRefundCap(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		keyID, secret := e.CreateKey(t, `{"daily_usd_cap": 50, "allowed_endpoints": ["refunds.create"]}`)
		cs := e.MCP(t, secret, "agent", nil)
		pi := e.paymentIntent(t, 10000)

		mustOK(t, call(t, cs, "create_refund", map[string]any{"payment_intent": pi, "amount": 3000}))
		res, _ := cs.ListTools(context.Background(), nil)
		for _, tool := range res.Tools {
			if tool.Name == "create_refund" && !strings.Contains(tool.Description, "today: $20.00 of $50.00 remain ($30.00 spent, resets 2026-11-30T00:00:00Z)") {
				t.Fatalf("create_refund description does not state the limit:\n%s", tool.Description)
			}
		}
		refused := call(t, cs, "create_refund", map[string]any{"payment_intent": pi, "amount": 3000})
		msg := text(refused)
		for _, want := range []string{"keybrake refused create_refund (spend cap)", "$30.00 would exceed the daily cap of $50.00", "Nothing was sent to Stripe",
			"today: $20.00 of $50.00 remain", "resets 2026-11-30T00:00:00Z", "Do not retry"} {
			if !refused.IsError || !strings.Contains(msg, want) {
				t.Fatalf("refusal (isError=%v) lacks %q:\n%s", refused.IsError, want, msg)
			}
		}
		mustOK(t, call(t, cs, "create_refund", map[string]any{"payment_intent": pi, "amount": 2000}))
		if n := len(e.Sim.GroundTruth().Refunds); n != 2 {
			t.Fatalf("%d refunds upstream, want 2", n)
		}
		if sp := e.Spend(t, keyID); sp.Day != usd(50) {
			t.Fatalf("spent %s, want 50.00", sp.Day)
		}
		// A tool the key does not list is unknown to the session.
		if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_customer", Arguments: map[string]any{"name": "x"}}); err == nil {
			t.Fatal("create_customer called on a refunds-only key")
		}
	})
}

func TestMCPRetryCountedOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		keyID, secret := e.CreateKey(t, `{"daily_usd_cap": 500, "allowed_endpoints": ["refunds.create"]}`)
		pi := e.paymentIntent(t, 50000)

		t.Run("IdempotencyKeyAcrossSessions", func(t *testing.T) {
			first := mustOK(t, call(t, e.MCP(t, secret, "agent", nil), "create_refund", map[string]any{"payment_intent": pi, "amount": 3000, "idempotency_key": "refund-order-42"}))
			// The agent lost its session and retries in a new one.
			again := mustOK(t, call(t, e.MCP(t, secret, "agent", nil), "create_refund", map[string]any{"payment_intent": pi, "amount": 3000, "idempotency_key": "refund-order-42"}))
			if first["id"] != again["id"] {
				t.Fatalf("retry made refund %v after %v", again["id"], first["id"])
			}
			if n := len(e.Sim.GroundTruth().Refunds); n != 1 {
				t.Fatalf("%d refunds upstream, want 1", n)
			}
			if sp := e.Spend(t, keyID); sp.Day != usd(30) {
				t.Fatalf("spent %s, want 30.00", sp.Day)
			}
		})
		t.Run("IdenticalCallsWithoutKeyAreTwo", func(t *testing.T) {
			cs := e.MCP(t, secret, "agent", nil)
			a := mustOK(t, call(t, cs, "create_refund", map[string]any{"payment_intent": pi, "amount": 1000}))
			b := mustOK(t, call(t, cs, "create_refund", map[string]any{"payment_intent": pi, "amount": 1000}))
			if a["id"] == b["id"] {
				t.Fatal("two intentional calls were merged")
			}
			if sp := e.Spend(t, keyID); sp.Day != usd(50) {
				t.Fatalf("spent %s, want 50.00", sp.Day)
			}
		})
		t.Run("SameJSONRPCMessageResent", func(t *testing.T) {
			// A client whose POST got no answer sends the same message (same
			// session, same JSON-RPC id) again: a replay.
			sid := rawInitialize(t, e, secret)
			msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_refund","arguments":{"payment_intent":%q,"amount":500}}}`, pi)
			r1 := rawPost(t, e, secret, sid, msg)
			r2 := rawPost(t, e, secret, sid, msg)
			id1, id2 := refundID(t, r1), refundID(t, r2)
			if id1 != id2 {
				t.Fatalf("resent message made refund %s after %s", id2, id1)
			}
			// The next message, with the next id, is a new call.
			r3 := rawPost(t, e, secret, sid, strings.Replace(msg, `"id":7`, `"id":8`, 1))
			if refundID(t, r3) == id1 {
				t.Fatal("a new JSON-RPC id replayed an earlier call")
			}
			if sp := e.Spend(t, keyID); sp.Day != usd(60) {
				t.Fatalf("spent %s, want 60.00", sp.Day)
			}
		})
	})
}

// rawInitialize opens a session by hand and returns its Mcp-Session-Id.
func rawInitialize(tb testing.TB, e *Env, secret string) string {
	tb.Helper()
	resp, body := e.Do(tb, "POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"8"}}}`, mcpHeaders(secret, ""))
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid == "" {
		tb.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	rawPost(tb, e, secret, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return sid
}

func mcpHeaders(secret, sid string) map[string]string {
	h := map[string]string{"Authorization": "Bearer " + secret, "Content-Type": "application/json",
		"Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": "2025-11-25"}
	if sid != "" {
		h["Mcp-Session-Id"] = sid
	}
	return h
}

// rawPost sends one JSON-RPC message and returns the JSON of the answer,
// from a JSON body or the data of an SSE event.
func rawPost(tb testing.TB, e *Env, secret, sid, msg string) string {
	tb.Helper()
	resp, body := e.Do(tb, "POST", "/mcp", msg, mcpHeaders(secret, sid))
	if resp.StatusCode >= 300 {
		tb.Fatalf("POST %s: %d %s", msg, resp.StatusCode, body)
	}
	out := string(body)
	for _, line := range strings.Split(out, "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			return d
		}
	}
	return out
}

func refundID(tb testing.TB, answer string) string {
	tb.Helper()
	var v struct {
		Result struct {
			IsError           bool           `json:"isError"`
			StructuredContent map[string]any `json:"structuredContent"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(answer), &v); err != nil || v.Result.IsError {
		tb.Fatalf("answer %s: %v", answer, err)
	}
	id, _ := v.Result.StructuredContent["id"].(string)
	if !strings.HasPrefix(id, "re_") {
		tb.Fatalf("no refund in %s", answer)
	}
	return id
}

func TestMCPConcurrentClientsExactCap(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		keyID, secret := e.CreateKey(t, `{"daily_usd_cap": 50, "allowed_endpoints": ["refunds.create"]}`)
		pi := e.paymentIntent(t, 100000)
		const clients = 50
		var (
			wg              sync.WaitGroup
			mu              sync.Mutex
			allowed, denied int
			failures        []string
		)
		for i := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cs, err := e.MCPConnect(secret, fmt.Sprintf("agent-%d", i), nil)
				if err != nil {
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
					return
				}
				defer cs.Close()
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_refund", Arguments: map[string]any{"payment_intent": pi, "amount": 700}})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					failures = append(failures, err.Error())
				case res.IsError && strings.Contains(text(res), "spend cap"):
					denied++
				case res.IsError:
					failures = append(failures, text(res))
				default:
					allowed++
				}
			}()
		}
		wg.Wait()
		if len(failures) > 0 {
			t.Fatalf("%d failures, first: %s", len(failures), failures[0])
		}
		// $7 each under $50: exactly 7 refunds, $49.
		if allowed != 7 || denied != clients-7 {
			t.Fatalf("allowed %d, denied %d; want 7 and %d", allowed, denied, clients-7)
		}
		if n := len(e.Sim.GroundTruth().Refunds); n != 7 {
			t.Fatalf("%d refunds upstream, want 7", n)
		}
		if sp := e.Spend(t, keyID); sp.Day != usd(49) || sp.Uncertain != 0 || sp.Held != 0 {
			t.Fatalf("spend %+v, want 49.00 settled", sp)
		}
		if n := len(e.events(t, keyID)); n != clients {
			t.Fatalf("%d events, want %d", n, clients)
		}
	})
}

func TestMCPRevocationEndsSession(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		keyID, secret := e.CreateKey(t, `{"daily_usd_cap": 50, "allowed_endpoints": ["refunds.create"]}`)
		pi := e.paymentIntent(t, 10000)
		cs := e.MCP(t, secret, "agent", nil)
		mustOK(t, call(t, cs, "create_refund", map[string]any{"payment_intent": pi, "amount": 1000}))

		if resp, body := e.Admin(t, "POST", "/vault/keys/"+keyID+"/revoke", ""); resp.StatusCode != 200 {
			t.Fatalf("revoke: %d %s", resp.StatusCode, body)
		}
		if !khttp.MCPSessionOpen(e.Server, cs.ID()) {
			t.Fatal("revocation alone closed the session; its next call must be refused and audited first")
		}
		res := call(t, cs, "create_refund", map[string]any{"payment_intent": pi, "amount": 1000})
		if !res.IsError || !strings.Contains(text(res), "was revoked") || !strings.Contains(text(res), "ask a person for a new vault key") {
			t.Fatalf("call after revocation: isError=%v %s", res.IsError, text(res))
		}
		// The session has ended: its next request, whatever it is, closes it.
		if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_refund", Arguments: map[string]any{"payment_intent": pi, "amount": 1000}}); err == nil {
			t.Fatal("the session took another call after the refusal")
		}
		waitFor(t, "the session to close", func() bool { return !khttp.MCPSessionOpen(e.Server, cs.ID()) })
		if _, err := cs.ListTools(context.Background(), nil); err == nil {
			t.Fatal("the session still lists tools after revocation")
		}
		if _, err := e.MCPConnect(secret, "agent", nil); err == nil {
			t.Fatal("a revoked key opened a session")
		}
		if n := len(e.Sim.GroundTruth().Refunds); n != 1 {
			t.Fatalf("%d refunds upstream, want 1", n)
		}
		es := e.events(t, keyID)
		if es[0].Decision != keybrake.DecisionDeny || es[0].Reason != "revoked" || es[0].Via != keybrake.ViaMCP || es[0].MCPSession != cs.ID() {
			t.Fatalf("last event = %+v", es[0])
		}
	})
}

// waitFor polls cond until it holds, failing the test after 10 seconds.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestMCPToolListChanges(t *testing.T) {
	e := MustOpen(t)
	keyID, secret := e.CreateKey(t, `{"daily_usd_cap": 50, "allowed_endpoints": ["refunds.create"]}`)
	changed := make(chan struct{}, 10)
	cs := e.MCP(t, secret, "agent", &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		changed <- struct{}{}
	}})
	if got := toolNames(t, cs); !slices.Equal(got, []string{"create_refund", "keybrake_budget"}) {
		t.Fatalf("tools = %v", got)
	}
	if resp, body := e.Admin(t, "PATCH", "/vault/keys/"+keyID, `{"allowed_endpoints": ["customers.create", "customers.list"]}`); resp.StatusCode != 200 {
		t.Fatalf("update: %d %s", resp.StatusCode, body)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no notifications/tools/list_changed after the policy changed")
	}
	deadline := time.Now().Add(10 * time.Second)
	want := []string{"create_customer", "keybrake_budget", "list_customers"}
	for got := toolNames(t, cs); !slices.Equal(got, want); got = toolNames(t, cs) {
		if time.Now().After(deadline) {
			t.Fatalf("tools = %v, want %v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMCPHostileInput(t *testing.T) {
	e := MustOpen(t)
	keyID, secret := e.CreateKey(t, `{"daily_usd_cap": 50, "allowed_endpoints": ["*"], "allow_unpriced": true}`)
	_, other := e.CreateKey(t, `{"daily_usd_cap": 50}`)
	pi := e.paymentIntent(t, 10000)
	cs := e.MCP(t, secret, "agent", nil)
	before := e.Sim.GroundTruth()

	for name, args := range map[string]struct {
		tool string
		args any
	}{
		"AmountFloat":      {"create_refund", map[string]any{"payment_intent": pi, "amount": 10.5}},
		"AmountExponent":   {"create_refund", json.RawMessage(`{"payment_intent":"` + pi + `","amount":1e3}`)},
		"AmountString":     {"create_refund", map[string]any{"payment_intent": pi, "amount": "1000"}},
		"AmountNegative":   {"create_refund", map[string]any{"payment_intent": pi, "amount": -5}},
		"AmountHuge":       {"create_refund", map[string]any{"payment_intent": pi, "amount": 1e30}},
		"UnknownArgument":  {"create_refund", map[string]any{"payment_intent": pi, "amount": 100, "charge": "ch_1"}},
		"InjectedForm":     {"create_refund", map[string]any{"payment_intent": pi + "&amount=999999"}},
		"PathTraversal":    {"finalize_invoice", map[string]any{"invoice": "in_1/../../refunds"}},
		"EscapedPath":      {"finalize_invoice", map[string]any{"invoice": "in_1%2F..%2Frefunds"}},
		"MetadataBrackets": {"create_customer", map[string]any{"name": "x", "metadata": map[string]any{"a][b": "c"}}},
		"MetadataNested":   {"create_customer", map[string]any{"name": "x", "metadata": map[string]any{"a": map[string]any{"b": "c"}}}},
		"ControlChar":      {"create_customer", map[string]any{"name": "x\r\nIdempotency-Key: y"}},
		"MissingRequired":  {"create_refund", map[string]any{"amount": 100}},
		"NotAnObject":      {"create_refund", json.RawMessage(`[1,2]`)},
		"BothPriceAmount":  {"create_invoice_item", map[string]any{"customer": "cus_1", "invoice": "in_1", "price": "price_1", "amount": 5}},
		"BadEnum":          {"search_stripe_resources", map[string]any{"resource": "accounts", "query": "x"}},
		"LongIdemKey":      {"create_refund", map[string]any{"payment_intent": pi, "idempotency_key": strings.Repeat("k", 201)}},
		"UnknownTool":      {"create_payout", map[string]any{"amount": 100}},
	} {
		t.Run(name, func(t *testing.T) {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: args.tool, Arguments: args.args})
			if err == nil {
				t.Fatalf("no protocol error; result isError=%v %s", res.IsError, text(res))
			}
		})
	}
	t.Run("MalformedJSONRPC", func(t *testing.T) {
		sid := rawInitialize(t, e, secret)
		for _, body := range []string{`{`, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"x"}`, `[]`, `{"jsonrpc":"1.0","id":1,"method":"tools/list"}`,
			`{"jsonrpc":"2.0","id":{"a":1},"method":"tools/call","params":{"name":"create_refund","arguments":{"payment_intent":"` + pi + `","amount":100}}}`} {
			resp, out := e.Do(t, "POST", "/mcp", body, mcpHeaders(secret, sid))
			if resp.StatusCode == 200 && !strings.Contains(string(out), `"error"`) {
				t.Fatalf("%s: %d %s", body, resp.StatusCode, out)
			}
		}
	})
	t.Run("NoKey", func(t *testing.T) {
		resp, _ := e.Do(t, "POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
			map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
		if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("no key: %d", resp.StatusCode)
		}
		if _, err := e.MCPConnect("sk_test_upstream_secret_do_not_leak", "x", nil); err == nil {
			t.Fatal("the upstream secret opened a session")
		}
	})
	t.Run("OtherKeysSession", func(t *testing.T) {
		msg := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"create_refund","arguments":{"payment_intent":"` + pi + `","amount":100}}}`
		resp, out := e.Do(t, "POST", "/mcp", msg, mcpHeaders(other, cs.ID()))
		if resp.StatusCode != 404 {
			t.Fatalf("another key on the session: %d %s", resp.StatusCode, out)
		}
	})
	after := e.Sim.GroundTruth()
	if len(after.Refunds) != len(before.Refunds) || len(after.Customers) != len(before.Customers) || len(after.Invoices) != len(before.Invoices) {
		t.Fatal("hostile input changed something upstream")
	}
	for _, ev := range e.events(t, keyID) {
		if ev.Operation != "customers.list" {
			t.Fatalf("hostile input reached the request path: %+v", ev)
		}
	}
}

func usd(n int64) keybrake.Micros { return keybrake.Micros(n) * keybrake.MicrosPerUSD }

// A client cannot choose the JSON-RPC id keybrake derives the
// Idempotency-Key from: a forged header is dropped, so two calls stay two.
func TestMCPForgedRPCHeader(t *testing.T) {
	e := MustOpen(t)
	_, secret := e.CreateKey(t, `{"daily_usd_cap": 50}`)
	sid := rawInitialize(t, e, secret)
	h := mcpHeaders(secret, sid)
	h["Keybrake-Mcp-Rpc-Id"] = "7"
	for i := range 2 {
		msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"create_customer","arguments":{"name":"Jo"}}}`, 100+i)
		if resp, out := e.Do(t, "POST", "/mcp", msg, h); resp.StatusCode != 200 || strings.Contains(string(out), `"isError":true`) {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
	}
	if n := len(e.Sim.GroundTruth().Customers); n != 2 {
		t.Fatalf("%d customers, want 2", n)
	}
}

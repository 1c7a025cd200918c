package http

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// mcpTool is one tool of keybrake's MCP server: the Stripe request a call
// stands for. Names and arguments follow Stripe's agent toolkit, so agents
// that know it know these. A call is turned into that request and run
// through the proxy (mcpServer.call); the table decides nothing else.
type mcpTool struct {
	name   string
	title  string
	desc   string
	method string
	// path is the request path; {param} is replaced by that argument,
	// which must then be an object ID.
	path   string
	params []mcpParam
	// build adds the body or query of the request from the checked
	// arguments, beyond the parameters copied as they are (param.form).
	build func(args map[string]any, f url.Values) error
	// class is how keybrake classifies the body this tool builds
	// (stripe.Classify), checked by a test: an unpriced tool is listed only
	// for keys with allow_unpriced, since every other key refuses it.
	class stripe.Class
	// search lists the resources a search tool may name; the tool is
	// listed if the key allows searching any of them.
	search []string
}

// mcpParam is one argument of a tool, with the rule that checks it.
type mcpParam struct {
	name     string
	typ      string // "string", "integer" or "object" (string values)
	desc     string
	required bool
	form     string         // the Stripe parameter it is copied to; "" when build handles it
	pattern  *regexp.Regexp // for strings
	enum     []string       // for strings
	min, max int64          // for integers
}

var (
	objectID    = regexp.MustCompile(`^[a-z]{2,8}_[A-Za-z0-9]{1,64}$`)
	currencyRE  = regexp.MustCompile(`^[a-zA-Z]{3}$`)
	idemKeyRE   = regexp.MustCompile(`^[\x21-\x7e]{1,200}$`)
	maxTextLen  = 5000
	maxMetadata = 20
)

// idempotencyParam is the optional argument every money-moving or creating
// tool takes: the agent's own name for this call, so that calling again
// with the same name replays the first call instead of repeating it.
var idempotencyParam = mcpParam{name: "idempotency_key", typ: "string", pattern: idemKeyRE,
	desc: "Optional. Your own name for this call (1-200 printable characters). Calling again with the same idempotency_key and the same arguments replays the first call's result instead of acting twice, in this session or another one of the same vault key, for 23 hours. Leave it out and each call acts anew."}

func idParam(name, desc string, required bool) mcpParam {
	return mcpParam{name: name, typ: "string", desc: desc, required: required, form: name, pattern: objectID}
}

func limitParam() mcpParam {
	return mcpParam{name: "limit", typ: "integer", desc: "How many objects to return, 1 to 100 (default 10).", form: "limit", min: 1, max: 100}
}

func textParam(name, desc string, required bool) mcpParam {
	return mcpParam{name: name, typ: "string", desc: desc, required: required, form: name}
}

// mcpTools is the curated set, in the order tools/list shows them.
var mcpTools = []*mcpTool{
	{name: "create_customer", title: "Create a customer", method: http.MethodPost, path: "/v1/customers", class: stripe.ClassWrite,
		desc: "Create a customer in Stripe. Returns the customer object.",
		params: []mcpParam{textParam("name", "The customer's full name.", true), textParam("email", "The customer's email address.", false),
			{name: "metadata", typ: "object", form: "metadata", desc: "Up to 20 string key-value pairs to store on the customer."}, idempotencyParam}},
	{name: "list_customers", title: "List customers", method: http.MethodGet, path: "/v1/customers", class: stripe.ClassRead,
		desc:   "List customers, newest first, optionally only those with an email address.",
		params: []mcpParam{limitParam(), textParam("email", "Only customers with this email address.", false)}},
	{name: "create_product", title: "Create a product", method: http.MethodPost, path: "/v1/products", class: stripe.ClassWrite,
		desc:   "Create a product in Stripe's catalogue. It charges nothing until a price of it is used.",
		params: []mcpParam{textParam("name", "The product's name, shown to customers.", true), textParam("description", "The product's description.", false), idempotencyParam}},
	{name: "list_products", title: "List products", method: http.MethodGet, path: "/v1/products", class: stripe.ClassRead,
		desc: "List products in Stripe's catalogue.", params: []mcpParam{limitParam()}},
	{name: "create_price", title: "Create a price", method: http.MethodPost, path: "/v1/prices", class: stripe.ClassWrite,
		desc: "Create a one-time price for a product. It charges nothing until used, e.g. by a payment link or an invoice item.",
		params: []mcpParam{idParam("product", "The ID of the product (prod_…).", true),
			{name: "unit_amount", typ: "integer", desc: "The price in the currency's smallest unit (cents for USD).", required: true, form: "unit_amount", min: 0, max: 99999999},
			{name: "currency", typ: "string", desc: "Three-letter ISO currency code, e.g. usd.", required: true, form: "currency", pattern: currencyRE}, idempotencyParam}},
	{name: "list_prices", title: "List prices", method: http.MethodGet, path: "/v1/prices", class: stripe.ClassRead,
		desc: "List prices, optionally of one product.", params: []mcpParam{idParam("product", "Only prices of this product (prod_…).", false), limitParam()}},
	{name: "create_payment_link", title: "Create a payment link", method: http.MethodPost, path: "/v1/payment_links", class: stripe.ClassUnpriced,
		desc: "Create a payment link for a price: a page where anyone with the link can pay.",
		params: []mcpParam{{name: "price", typ: "string", desc: "The ID of the price to sell (price_…).", required: true, pattern: objectID},
			{name: "quantity", typ: "integer", desc: "How many units the link sells.", required: true, min: 1, max: 999},
			{name: "redirect_url", typ: "string", desc: "Optional URL to send the customer to after paying.", pattern: regexp.MustCompile(`^https?://[^\s]+$`)}, idempotencyParam},
		build: func(a map[string]any, f url.Values) error {
			f.Set("line_items[0][price]", a["price"].(string))
			f.Set("line_items[0][quantity]", a["quantity"].(json.Number).String())
			if u, ok := a["redirect_url"].(string); ok {
				f.Set("after_completion[type]", "redirect")
				f.Set("after_completion[redirect][url]", u)
			}
			return nil
		}},
	{name: "create_invoice", title: "Create a draft invoice", method: http.MethodPost, path: "/v1/invoices", class: stripe.ClassWrite,
		desc: "Create a draft invoice, sent by email once finalized, for a customer. It stays a draft (auto_advance=false) until finalize_invoice; add lines with create_invoice_item first.",
		params: []mcpParam{idParam("customer", "The ID of the customer to invoice (cus_…).", true),
			{name: "days_until_due", typ: "integer", desc: "Days the customer has to pay once the invoice is finalized (default 30).", form: "days_until_due", min: 1, max: 365}, idempotencyParam},
		build: func(a map[string]any, f url.Values) error {
			f.Set("collection_method", "send_invoice")
			f.Set("auto_advance", "false")
			// The draft takes none of the customer's pending items, which
			// would leave the next invoice (a credit among them raises it):
			// create_invoice_item adds lines to this draft by its ID.
			f.Set("pending_invoice_items_behavior", "exclude")
			if _, ok := a["days_until_due"]; !ok {
				f.Set("days_until_due", "30")
			}
			return nil
		}},
	{name: "create_invoice_item", title: "Add an item to an invoice", method: http.MethodPost, path: "/v1/invoiceitems", class: stripe.ClassUnpriced,
		desc: "Add a line to a draft invoice of a customer: a price, or an amount and currency.",
		params: []mcpParam{idParam("customer", "The ID of the customer (cus_…).", true), idParam("invoice", "The ID of the draft invoice (in_…).", true),
			{name: "price", typ: "string", desc: "The ID of a one-time price (price_…); the line is its unit amount times quantity. Or give amount and currency.", pattern: objectID},
			{name: "quantity", typ: "integer", desc: "How many units of the price, with price (default 1).", min: 1, max: 10000},
			{name: "amount", typ: "integer", desc: "The amount in the currency's smallest unit, when no price is given.", form: "amount", min: 1, max: 99999999},
			{name: "currency", typ: "string", desc: "Three-letter ISO currency code, with amount.", form: "currency", pattern: currencyRE},
			textParam("description", "What the line is for.", false), idempotencyParam},
		build: func(a map[string]any, f url.Values) error {
			price, withPrice := a["price"].(string)
			_, amount := a["amount"]
			_, quantity := a["quantity"]
			switch {
			case withPrice == amount:
				return fmt.Errorf("give either price or amount (with currency)")
			case quantity && !withPrice:
				return fmt.Errorf("quantity goes with price; amount is the line's total")
			case withPrice:
				// Stripe's API since 2025-03-31 names the price of an
				// invoice item pricing[price].
				f.Set("pricing[price]", price)
				if q, ok := a["quantity"].(json.Number); ok {
					f.Set("quantity", q.String())
				}
			}
			return nil
		}},
	{name: "finalize_invoice", title: "Finalize an invoice", method: http.MethodPost, path: "/v1/invoices/{invoice}/finalize", class: stripe.ClassUnpriced,
		desc:   "Finalize a draft invoice: it becomes open and payable by the customer.",
		params: []mcpParam{{name: "invoice", typ: "string", desc: "The ID of the draft invoice (in_…).", required: true, pattern: objectID}, idempotencyParam}},
	{name: "retrieve_balance", title: "Retrieve the balance", method: http.MethodGet, path: "/v1/balance", class: stripe.ClassRead,
		desc: "Retrieve the Stripe account's available and pending balance."},
	{name: "create_refund", title: "Refund a payment", method: http.MethodPost, path: "/v1/refunds", class: stripe.ClassPriced,
		desc: "Refund a payment intent, in full or in part.",
		params: []mcpParam{idParam("payment_intent", "The ID of the payment intent to refund (pi_…).", true),
			{name: "amount", typ: "integer", desc: "The amount to refund in the currency's smallest unit (cents for USD); the whole remaining amount if left out.", form: "amount", min: 1, max: 99999999},
			{name: "reason", typ: "string", desc: "Why: duplicate, fraudulent or requested_by_customer.", form: "reason", enum: []string{"duplicate", "fraudulent", "requested_by_customer"}},
			idempotencyParam}},
	{name: "list_payment_intents", title: "List payment intents", method: http.MethodGet, path: "/v1/payment_intents", class: stripe.ClassRead,
		desc:   "List payment intents, newest first, optionally of one customer.",
		params: []mcpParam{idParam("customer", "Only payment intents of this customer (cus_…).", false), limitParam()}},
	{name: "search_stripe_resources", title: "Search Stripe objects", method: http.MethodGet, path: "/v1/{resource}/search", class: stripe.ClassRead,
		search: []string{"customers", "charges", "payment_intents", "invoices", "products", "prices"},
		desc:   "Search customers, charges, payment intents, invoices, products or prices with Stripe's search query language, e.g. email:'jo@example.com' or metadata['order']:'42'.",
		params: []mcpParam{{name: "resource", typ: "string", desc: "What to search.", required: true, enum: []string{"customers", "charges", "payment_intents", "invoices", "products", "prices"}},
			textParam("query", "The search query, in Stripe's search query language.", true), limitParam()}},
}

// mcpBudgetTool is keybrake's own tool: the vault key's spend, what
// remains and when each window resets.
const mcpBudgetTool = "keybrake_budget"

// byName finds a tool of the table.
func mcpToolByName(name string) *mcpTool {
	for _, t := range mcpTools {
		if t.name == name {
			return t
		}
	}
	return nil
}

// schema is the tool's JSON Schema (draft 2020-12) for its arguments.
func (t *mcpTool) schema() map[string]any {
	props := map[string]any{}
	required := []string{}
	for _, p := range t.params {
		s := map[string]any{"type": p.typ, "description": p.desc}
		switch p.typ {
		case "string":
			s["maxLength"] = maxTextLen
			if p.pattern != nil {
				s["pattern"] = p.pattern.String()
			}
			if p.enum != nil {
				s["enum"] = p.enum
			}
		case "integer":
			s["minimum"], s["maximum"] = p.min, p.max
		case "object":
			s["additionalProperties"] = map[string]any{"type": "string", "maxLength": 500}
			s["maxProperties"] = maxMetadata
		}
		props[p.name] = s
		if p.required {
			required = append(required, p.name)
		}
	}
	return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
}

// parseArgs checks raw arguments against the tool's parameters strictly:
// an object with known names only, each of its type and within its
// bounds. The error says which argument is wrong and why.
func (t *mcpTool) parseArgs(raw json.RawMessage) (map[string]any, error) {
	args := map[string]any{}
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("arguments are not valid JSON: %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("arguments must be one JSON object")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("arguments must be a JSON object")
	}
	known := map[string]mcpParam{}
	for _, p := range t.params {
		known[p.name] = p
	}
	names := make([]string, 0, len(obj))
	for n := range obj {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p, ok := known[n]
		if !ok {
			return nil, fmt.Errorf("unknown argument %q; %s takes %s", n, t.name, t.paramNames())
		}
		val, err := p.check(obj[n])
		if err != nil {
			return nil, fmt.Errorf("argument %q: %v", n, err)
		}
		args[n] = val
	}
	for _, p := range t.params {
		if _, ok := args[p.name]; p.required && !ok {
			return nil, fmt.Errorf("missing required argument %q", p.name)
		}
	}
	return args, nil
}

func (t *mcpTool) paramNames() string {
	if len(t.params) == 0 {
		return "no arguments"
	}
	var names []string
	for _, p := range t.params {
		names = append(names, p.name)
	}
	return strings.Join(names, ", ")
}

// check returns the argument's value if it is of the parameter's type and
// within its bounds: a string, a json.Number holding an integer, or a
// map[string]string.
func (p mcpParam) check(v any) (any, error) {
	switch p.typ {
	case "string":
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("must be a string")
		}
		if err := checkText(s, maxTextLen); err != nil {
			return nil, err
		}
		if p.pattern != nil && !p.pattern.MatchString(s) {
			return nil, fmt.Errorf("%q does not match %s", truncate(s, 80), p.pattern)
		}
		if p.enum != nil && !contains(p.enum, s) {
			return nil, fmt.Errorf("must be one of %s", strings.Join(p.enum, ", "))
		}
		return s, nil
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return nil, fmt.Errorf("must be an integer")
		}
		i, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("must be an integer, not %s", truncate(n.String(), 40))
		}
		if i < p.min || i > p.max {
			return nil, fmt.Errorf("must be between %d and %d", p.min, p.max)
		}
		return json.Number(strconv.FormatInt(i, 10)), nil
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("must be an object of strings")
		}
		if len(m) > maxMetadata {
			return nil, fmt.Errorf("has %d keys; at most %d", len(m), maxMetadata)
		}
		out := map[string]string{}
		for k, x := range m {
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("value of %q must be a string", truncate(k, 40))
			}
			if k == "" || len(k) > 40 || strings.ContainsAny(k, "[]") {
				return nil, fmt.Errorf("key %q must be 1-40 characters without brackets", truncate(k, 40))
			}
			if err := checkText(k, 40); err != nil {
				return nil, err
			}
			if err := checkText(s, 500); err != nil {
				return nil, err
			}
			out[k] = s
		}
		return out, nil
	}
	return nil, fmt.Errorf("has an unknown type")
}

// checkText refuses what no Stripe parameter holds: invalid UTF-8, control
// characters, and overlong values.
func checkText(s string, max int) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("is not valid UTF-8")
	}
	if len(s) > max {
		return fmt.Errorf("is %d bytes long; at most %d", len(s), max)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("contains a control character")
		}
	}
	return nil
}

func truncate(s string, n int) string {
	return keybrake.TruncateText(s, n)
}

// request returns the method, escaped path and form of the Stripe request
// a call with checked args stands for.
func (t *mcpTool) request(args map[string]any) (method, path string, form url.Values, err error) {
	form = url.Values{}
	path = t.path
	for _, p := range t.params {
		v, ok := args[p.name]
		if !ok {
			continue
		}
		if strings.Contains(path, "{"+p.name+"}") {
			path = strings.ReplaceAll(path, "{"+p.name+"}", url.PathEscape(v.(string)))
			continue
		}
		if p.form == "" {
			continue
		}
		switch x := v.(type) {
		case string:
			form.Set(p.form, x)
		case json.Number:
			form.Set(p.form, x.String())
		case map[string]string:
			for k, s := range x {
				form.Set(p.form+"["+k+"]", s)
			}
		}
	}
	if t.build != nil {
		if err := t.build(args, form); err != nil {
			return "", "", nil, err
		}
	}
	return t.method, path, form, nil
}

// operations names the Stripe operations the tool may stand for, for the
// key's allowlist: one, or one per searchable resource.
func (t *mcpTool) operations() []stripe.Operation {
	paths := []string{t.path}
	if t.search != nil {
		paths = nil
		for _, r := range t.search {
			paths = append(paths, "/v1/"+r+"/search")
		}
	}
	var ops []stripe.Operation
	for _, p := range paths {
		p = regexp.MustCompile(`\{[a-z_]+\}`).ReplaceAllString(p, "obj_0")
		op, err := stripe.ParseOperation(t.method, p)
		if err != nil {
			panic(fmt.Sprintf("mcp tool %s: %v", t.name, err)) // the table is wrong
		}
		ops = append(ops, op)
	}
	return ops
}

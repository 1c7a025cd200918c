package stripesim

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// maxLinkLines and maxLinkQuantity are Stripe's limits on a payment link's
// line_items.
const (
	maxLinkLines    = 20
	maxLinkQuantity = 999999
)

// createPaymentLink serves POST /v1/payment_links: line_items[N][price]
// and [quantity], every price active and in one currency; after_completion
// a hosted confirmation (the default) or a redirect to a URL.
func createPaymentLink(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "line_items", "after_completion", "metadata"); aerr != nil {
		return nil, aerr
	}
	lines, currency, aerr := s.linkLines(c, f.Tree["line_items"])
	if aerr != nil {
		return nil, aerr
	}
	after, aerr := afterCompletionParam(f.Tree["after_completion"])
	if aerr != nil {
		return nil, aerr
	}
	md, aerr := metadataParam(f)
	if aerr != nil {
		return nil, aerr
	}
	id := newID("plink")
	l := &PaymentLink{ID: id, Object: "payment_link", Active: true, AfterCompletion: after, Currency: currency,
		Lines: lines, Metadata: mergeMetadata(nil, md), URL: "https://buy.stripe.com/test_" + id[len("plink_"):],
		Account: c.account}
	s.st.PaymentLinks = append(s.st.PaymentLinks, l)
	s.st.paymentLinks[l.ID] = l
	s.st.LinkLines[l.ID] = lines
	s.st.Owners[l.ID] = c.scope
	return l, nil
}

// linkLines parses line_items[N][price] and [quantity] in index order and
// returns the currency they share.
func (s *Server) linkLines(c *call, v any) ([]PaymentLinkLine, string, *apiError) {
	if v == nil {
		return nil, "", errMissingParam("line_items")
	}
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return nil, "", invalid("", "line_items", "Invalid array: line_items must be a list, line_items[0][price]=….")
	}
	if len(m) > maxLinkLines {
		return nil, "", invalid("", "line_items", "Invalid array: a payment link has at most %d line_items; you passed %d.", maxLinkLines, len(m))
	}
	keys := make([]int, 0, len(m))
	for k := range m {
		n, err := strconv.Atoi(k)
		if err != nil || n < 0 || strconv.Itoa(n) != k {
			return nil, "", invalid("", "line_items", "Invalid array: line_items[%s] is not a list index.", k)
		}
		keys = append(keys, n)
	}
	sort.Ints(keys)
	lines := make([]PaymentLinkLine, 0, len(keys))
	currency := ""
	for _, n := range keys {
		prefix := fmt.Sprintf("line_items[%d]", n)
		fields, ok := m[strconv.Itoa(n)].(map[string]any)
		if !ok {
			return nil, "", invalid("", prefix, "Invalid object: %s must be a hash.", prefix)
		}
		var line PaymentLinkLine
		for k, raw := range fields {
			param := prefix + "[" + k + "]"
			sv, isStr := raw.(string)
			if (k == "price" || k == "quantity") && !isStr {
				return nil, "", invalid("", param, "Invalid string: %s must be a string.", param)
			}
			switch k {
			case "price":
				line.Price = sv
			case "quantity":
				q, err := strconv.ParseInt(sv, 10, 64)
				if err != nil || q < 1 || q > maxLinkQuantity {
					return nil, "", invalid("parameter_invalid_integer", param, "Invalid %s: must be an integer from 1 to %d.", param, maxLinkQuantity)
				}
				line.Quantity = q
			default:
				return nil, "", errUnknownParam(param)
			}
		}
		if line.Price == "" {
			return nil, "", errMissingParam(prefix + "[price]")
		}
		if line.Quantity == 0 {
			return nil, "", errMissingParam(prefix + "[quantity]")
		}
		p, ok := lookup(s.st, s.st.prices, c.scope, line.Price)
		if !ok {
			return nil, "", errNoSuch(http.StatusBadRequest, "price", prefix+"[price]", line.Price)
		}
		if !p.Active {
			return nil, "", invalid("", prefix+"[price]", "The price %s is not active. Payment links accept active prices only.", p.ID)
		}
		if currency != "" && p.Currency != currency {
			return nil, "", invalid("", prefix+"[price]", "All prices on a payment link must have the same currency; %s is in %s, not %s.", p.ID, p.Currency, currency)
		}
		currency = p.Currency
		lines = append(lines, line)
	}
	return lines, currency, nil
}

// afterCompletionParam parses after_completion[type] and the redirect URL
// or confirmation message that goes with it.
func afterCompletionParam(v any) (AfterCompletion, *apiError) {
	var a AfterCompletion
	if v == nil {
		a.Type = "hosted_confirmation"
		a.HostedConfirmation = &struct {
			CustomMessage *string `json:"custom_message"`
		}{}
		return a, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return a, invalid("", "after_completion", "Invalid object: after_completion must be a hash.")
	}
	for k := range m {
		if k != "type" && k != "redirect" && k != "hosted_confirmation" {
			return a, errUnknownParam("after_completion[" + k + "]")
		}
	}
	typ, _ := m["type"].(string)
	switch typ {
	case "":
		return a, errMissingParam("after_completion[type]")
	case "hosted_confirmation":
		if _, sent := m["redirect"]; sent {
			return a, invalid("", "after_completion[redirect]", "after_completion[redirect] can only be set when after_completion[type] is redirect.")
		}
		a.Type = typ
		a.HostedConfirmation = &struct {
			CustomMessage *string `json:"custom_message"`
		}{}
		if hc, sent := m["hosted_confirmation"]; sent {
			hm, ok := hc.(map[string]any)
			msg, isStr := hm["custom_message"].(string)
			if !ok || !isStr || len(hm) != 1 || len(msg) > 500 {
				return a, invalid("", "after_completion[hosted_confirmation][custom_message]", "Invalid after_completion[hosted_confirmation]: give custom_message, at most 500 characters.")
			}
			a.HostedConfirmation.CustomMessage = &msg
		}
	case "redirect":
		if _, sent := m["hosted_confirmation"]; sent {
			return a, invalid("", "after_completion[hosted_confirmation]", "after_completion[hosted_confirmation] can only be set when after_completion[type] is hosted_confirmation.")
		}
		rm, _ := m["redirect"].(map[string]any)
		raw, _ := rm["url"].(string)
		if raw == "" {
			return a, errMissingParam("after_completion[redirect][url]")
		}
		if len(rm) != 1 {
			return a, invalid("", "after_completion[redirect]", "Invalid after_completion[redirect]: give url only.")
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || len(raw) > 2048 || strings.ContainsAny(raw, " \t\r\n") {
			return a, invalid("url_invalid", "after_completion[redirect][url]", "Not a valid URL: %s", raw)
		}
		a.Type = typ
		a.Redirect = &struct {
			URL string `json:"url"`
		}{raw}
	default:
		return a, invalid("", "after_completion[type]", "Invalid after_completion[type]: must be one of hosted_confirmation or redirect")
	}
	return a, nil
}

// retrievePaymentLink serves GET /v1/payment_links/{id}.
func retrievePaymentLink(s *Server, c *call) (any, *apiError) {
	if aerr := noParams(c.form); aerr != nil {
		return nil, aerr
	}
	l, ok := lookup(s.st, s.st.paymentLinks, c.scope, c.id)
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "payment_link", "id", c.id)
	}
	return l, nil
}

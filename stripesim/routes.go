package stripesim

import (
	"net/http"
	"strings"
)

// route maps a method and path to its endpoint and the object id in the
// path. It reports false for a URL Stripe would not recognise.
func route(method, path string) (handler, string, bool) {
	rest, ok := strings.CutPrefix(path, "/v1/")
	if !ok {
		return nil, "", false
	}
	parts := strings.Split(rest, "/")
	for _, p := range parts {
		if p == "" {
			return nil, "", false
		}
	}
	get, post := method == http.MethodGet, method == http.MethodPost
	if h, ok := agentListRoute(method, parts); ok {
		return h, "", true
	}
	if h, id, ok := catalogRoute(method, parts); ok {
		return h, id, true
	}
	if h, ok := invoiceRoute(method, parts); ok {
		if len(parts) == 1 {
			return h, "", true
		}
		return h, parts[1], true
	}
	switch {
	case len(parts) == 1 && post:
		switch parts[0] {
		case "customers":
			return createCustomer, "", true
		case "charges":
			return createCharge, "", true
		case "payment_intents":
			return createPaymentIntent, "", true
		case "refunds":
			return createRefund, "", true
		case "transfers":
			return createTransfer, "", true
		case "payouts":
			return createPayout, "", true
		}
	case len(parts) == 1 && get:
		switch parts[0] {
		case "charges":
			return listCharges, "", true
		case "refunds":
			return listRefunds, "", true
		case "transfers":
			return listTransfers, "", true
		case "payouts":
			return listPayouts, "", true
		}
	case len(parts) == 2 && get:
		if parts[0] == "charges" && parts[1] == "search" {
			return searchCharges, "", true
		}
		switch parts[0] {
		case "customers":
			return retrieveCustomer, parts[1], true
		case "charges":
			return retrieveCharge, parts[1], true
		case "payment_intents":
			return retrievePaymentIntent, parts[1], true
		case "refunds":
			return retrieveRefund, parts[1], true
		case "transfers":
			return retrieveTransfer, parts[1], true
		case "payouts":
			return retrievePayout, parts[1], true
		}
	case len(parts) == 2 && post && parts[0] == "payment_intents":
		return updatePaymentIntent, parts[1], true
	case len(parts) == 2 && post && parts[0] == "charges":
		return updateCharge, parts[1], true
	case len(parts) == 2 && post && parts[0] == "customers":
		return updateCustomer, parts[1], true
	case len(parts) == 3 && post && parts[0] == "charges" && parts[2] == "capture":
		return captureCharge, parts[1], true
	case len(parts) == 3 && post && parts[0] == "charges" && (parts[2] == "refund" || parts[2] == "refunds"):
		return createChargeRefund(parts[2] == "refund"), parts[1], true
	case len(parts) == 3 && post && parts[0] == "payment_intents":
		switch parts[2] {
		case "confirm":
			return confirmPaymentIntent, parts[1], true
		case "capture":
			return capturePaymentIntent, parts[1], true
		case "cancel":
			return cancelPaymentIntent, parts[1], true
		case "increment_authorization":
			return incrementAuthorization, parts[1], true
		}
	}
	return nil, "", false
}

// invoiceRoute maps the invoice and invoice item endpoints.
func invoiceRoute(method string, parts []string) (handler, bool) {
	if parts[0] != "invoices" && parts[0] != "invoiceitems" {
		return nil, false
	}
	key := method + " " + parts[0]
	if len(parts) > 1 {
		key += "/{id}"
	}
	if len(parts) == 3 {
		key += "/" + parts[2]
	}
	h, ok := map[string]handler{
		"POST invoiceitems":            createInvoiceItem,
		"GET invoiceitems/{id}":        retrieveInvoiceItem,
		"POST invoices":                createInvoice,
		"GET invoices/{id}":            retrieveInvoice,
		"POST invoices/{id}":           updateInvoice,
		"DELETE invoices/{id}":         deleteInvoice,
		"POST invoices/{id}/add_lines": addInvoiceLines,
		"POST invoices/{id}/finalize":  finalizeInvoice,
		"POST invoices/{id}/pay":       payInvoice,
		"POST invoices/{id}/send":      sendInvoice,
		"POST invoices/{id}/void":      voidInvoice,
	}[key]
	return h, ok && len(parts) <= 3
}

package stripesim

import (
	"net/http"

	"github.com/keybrake/keybrake/stripe"
)

// createCustomer serves POST /v1/customers.
func createCustomer(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "email", "name", "description", "metadata", "phone", "source", "payment_method", "invoice_settings"); aerr != nil {
		return nil, aerr
	}
	cus := &Customer{ID: newID("cus"), Object: "customer", Created: c.now.Unix(), Account: c.account}
	var aerr *apiError
	for _, p := range []struct {
		name string
		dst  *string
	}{{"email", &cus.Email}, {"name", &cus.Name}, {"description", &cus.Description}} {
		if *p.dst, aerr = optional(f, p.name); aerr != nil {
			return nil, aerr
		}
	}
	if cus.Metadata, aerr = metadataParam(f); aerr != nil {
		return nil, aerr
	}
	cus.Metadata = mergeMetadata(nil, cus.Metadata)
	for _, param := range []string{"source", "payment_method"} {
		src, aerr := optional(f, param)
		if aerr != nil {
			return nil, aerr
		}
		if src != "" && !knownCard(param, src) {
			return nil, errNoSuchCard(param, src)
		}
		if src != "" {
			cus.DefaultSource = src
		}
	}
	if cus.InvoiceSettings.DefaultPaymentMethod, aerr = invoiceSettingsParam(f); aerr != nil {
		return nil, aerr
	}
	s.st.Customers = append(s.st.Customers, cus)
	s.st.customers[cus.ID] = cus
	s.st.Owners[cus.ID] = c.scope
	return cus, nil
}

// retrieveCustomer serves GET /v1/customers/{id}.
func retrieveCustomer(s *Server, c *call) (any, *apiError) {
	if aerr := noParams(c.form); aerr != nil {
		return nil, aerr
	}
	cus, ok := lookup(s.st, s.st.customers, c.scope, c.id)
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "customer", "id", c.id)
	}
	return cus, nil
}

// invoiceSettingsParam returns invoice_settings[default_payment_method], a
// test payment method, "" when not sent.
func invoiceSettingsParam(f *stripe.Form) (string, *apiError) {
	v, ok := f.Tree["invoice_settings"]
	if !ok {
		return "", nil
	}
	m, isMap := v.(map[string]any)
	if !isMap {
		return "", invalid("", "invoice_settings", "Invalid object: invoice_settings must be a hash.")
	}
	pm := ""
	for k, sub := range m {
		param := "invoice_settings[" + k + "]"
		switch k {
		case "default_payment_method":
			var isStr bool
			if pm, isStr = sub.(string); !isStr {
				return "", invalid("", param, "Invalid string: %s must be a string.", param)
			}
			if pm != "" && !knownCard("payment_method", pm) {
				return "", errNoSuchCard(param, pm)
			}
		case "custom_fields", "footer", "rendering_options":
		default:
			return "", errUnknownParam(param)
		}
	}
	return pm, nil
}

// updateCustomer serves POST /v1/customers/{id}: contact details, metadata,
// a new default source and invoice_settings[default_payment_method].
func updateCustomer(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "email", "name", "description", "metadata", "phone", "source", "invoice_settings"); aerr != nil {
		return nil, aerr
	}
	cus, ok := lookup(s.st, s.st.customers, c.scope, c.id)
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "customer", "id", c.id)
	}
	upd := *cus
	for _, p := range []struct {
		name string
		dst  *string
	}{{"email", &upd.Email}, {"name", &upd.Name}, {"description", &upd.Description}} {
		if v, sent, aerr := str(f, p.name); aerr != nil {
			return nil, aerr
		} else if sent {
			*p.dst = v
		}
	}
	if src, aerr := optional(f, "source"); aerr != nil {
		return nil, aerr
	} else if src != "" {
		if !knownCard("source", src) {
			return nil, errNoSuchCard("source", src)
		}
		upd.DefaultSource = src
	}
	if f.Has("invoice_settings") {
		pm, aerr := invoiceSettingsParam(f)
		if aerr != nil {
			return nil, aerr
		}
		if m, _ := f.Tree["invoice_settings"].(map[string]any); m != nil {
			if _, sent := m["default_payment_method"]; sent {
				upd.InvoiceSettings.DefaultPaymentMethod = pm
			}
		}
	}
	md, aerr := metadataParam(f)
	if aerr != nil {
		return nil, aerr
	}
	if md != nil {
		upd.Metadata = mergeMetadata(cus.Metadata, md)
	}
	*cus = upd
	return cus, nil
}
